"""A task message the broker loses costs nothing: every task is either a periodic job
(CELERY_BEAT_SCHEDULE) or sent on an event with a periodic job behind it that does its
work when the message never arrives, as docs/operations.md's table says."""

from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings

from billing.chains.spec import chain_beat_schedule, chain_specs
from config.celery import app

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| `([a-z_.]+)`[^|]* \| `([a-z_.]+)`[^|]* \|$", re.MULTILINE)


def made_up_by() -> dict[str, str]:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("| task sent on an event | if its message is lost, done by |", 1)[1].split("\n\n", 1)[0]
    return dict(ROW.findall(section))


def test_every_task_is_periodic_or_made_up_by_a_periodic_job():
    app.loader.import_default_modules()
    ours = {name for name in app.tasks if not name.startswith(("celery.", "tests."))}  # tests register their own
    # Chains are scanned on the schedule once configured (none is in the test settings).
    every_chain = {name: "set" for spec in chain_specs() for name in (*spec.material_settings, spec.rpc_url_setting)}
    scans = chain_beat_schedule(values=every_chain, seconds=5)
    assert len(scans) == len(chain_specs())
    periodic = {entry["task"] for entry in [*settings.CELERY_BEAT_SCHEDULE.values(), *scans.values()]}
    table = made_up_by()
    assert table, "the table in docs/operations.md was not found"
    assert ours - periodic <= set(table), "a task sent on an event needs a row in docs/operations.md"
    assert set(table) <= ours, "the table names a task that is not registered"
    for task, sweep in table.items():
        assert sweep in periodic, f"{task} is made up by {sweep}, which is not scheduled"
