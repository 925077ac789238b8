"""bench/cluster.py (the multi-host trial, docs/operations.md#a-multi-host-trial)
runs what deploy/ installs: it reads the units' command lines, fills in
deploy/env.example and rewrites the nginx site's upstream. The trial itself
needs root and minutes; these checks keep it reading deploy/ as written, so a
change there that would break the trial is seen in `make test`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.cluster import TRIAL_OVERRIDES, edge_site, env_file_read, env_text, unit_commands

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"


def test_the_units_command_lines_run_from_the_checkout(tmp_path):
    migrate, collectstatic, gunicorn = unit_commands("gpurenthub-web.service", tmp_path)
    assert migrate == [str(VENV_BIN / "python"), "manage.py", "migrate", "--noinput"]
    assert collectstatic == [str(VENV_BIN / "python"), "manage.py", "collectstatic", "--noinput"]
    assert gunicorn[0] == str(VENV_BIN / "gunicorn") and gunicorn[-2:] == ["-c", "deploy/gunicorn.conf.py"]
    [worker] = unit_commands("gpurenthub-worker.service", tmp_path)
    assert worker[:4] == [str(VENV_BIN / "celery"), "-A", "config", "worker"]
    [webhooks] = unit_commands("gpurenthub-webhooks.service", tmp_path)
    assert webhooks[:4] == worker[:4] and webhooks[webhooks.index("--queues") + 1] == "webhooks"
    assert webhooks[webhooks.index("--hostname") + 1] == "webhooks@%h"  # systemd's %% is celery's %
    [beat] = unit_commands("gpurenthub-beat.service", tmp_path)
    assert beat[:4] == [str(VENV_BIN / "celery"), "-A", "config", "beat"]
    assert beat[beat.index("--schedule") + 1] == str(tmp_path / "celerybeat-schedule")
    for command in (migrate, gunicorn, worker, beat):
        assert Path(command[0]).exists(), command[0]


def test_the_env_file_is_deploys_example_filled_in(tmp_path):
    example = (ROOT / "deploy" / "env.example").read_text()
    values = {"SECRET_KEY": "k" * 60, "DATABASE_URL": "postgres://postgres@10.77.0.10:5432/gpurenthub"}
    (tmp_path / "env").write_text(env_text(example, values))
    read = env_file_read(tmp_path / "env")
    assert read["SECRET_KEY"] == "k" * 60 and read["DATABASE_URL"] == values["DATABASE_URL"]
    assert read["TRUSTED_PROXY_COUNT"] == "1"  # the example's own lines stay
    assert {key: read[key] for key in TRIAL_OVERRIDES} == TRIAL_OVERRIDES
    with pytest.raises(ValueError, match="NOT_A_SETTING"):
        env_text(example, {"NOT_A_SETTING": "1"})


def test_the_trials_overrides_are_settings():
    from billing.chains.spec import family_currencies

    settings = (ROOT / "config" / "settings.py").read_text()
    # CONFIRMATIONS_<code> is read for each currency its chain family declares.
    assert 'f"CONFIRMATIONS_{c.code}"' in settings
    per_currency = {f"CONFIRMATIONS_{c.code}" for c in family_currencies() if c.confirmations_setting}
    for name in TRIAL_OVERRIDES:
        assert name in per_currency or re.search(rf"""["']{name}["']""", settings), name


def test_the_edge_balances_both_web_hosts(tmp_path):
    site = (ROOT / "deploy" / "nginx" / "gpurenthub.conf").read_text()
    edged = edge_site(site, cert=tmp_path / "c.crt", key=tmp_path / "c.key")
    upstream = re.search(r"upstream gpurenthub \{(.*?)\}", edged, re.S).group(1)
    assert re.findall(r"server (\S+);", upstream) == ["10.77.0.11:8000", "10.77.0.12:8000"]
    assert f"ssl_certificate     {tmp_path / 'c.crt'};" in edged
    with pytest.raises(ValueError, match="server 127.0.0.1:8000"):
        edge_site(
            site.replace("server 127.0.0.1:8000;", "server unix:/run/gunicorn.sock;"), cert=Path("c"), key=Path("k")
        )
