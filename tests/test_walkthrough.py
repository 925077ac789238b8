"""The README's walk-through, run as written against a live `make run` server.

The server is `manage.py serve_local` on its embedded default (SQLite and a
SQLite broker in a fresh data folder, the LTC, ETH, XMR and SOL sandboxes, web, worker
and beat), exactly what `make run` starts, on a free loopback port. The README's
shell block runs in bash, command by command, in a folder that stands for the
repository's (its `.venv` and `manage.py` are links), with a home that has an SSH
key. Each command must exit 0 and answer no error and no HTML page; every
`"field": value` of the `# ->` comment after it must be in its answer, and a
plain-text `# ->` line must match its output, `...` standing for anything.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from devtools.litecoind import free_port
from tests.waiting import wait_until

pytestmark = [pytest.mark.chain, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
README_PORT = "127.0.0.1:8000"
# What the test settings and the test run put in the environment, which `make run` does not have.
NOT_MAKE_RUN = ("DATABASE_URL", "CACHE_URL", "CELERY_BROKER_URL", "TEST_REDIS_URL", "DJANGO_SETTINGS_MODULE")
FRAGMENT = re.compile(r'"([a-z_0-9]+)": ("(?:[^"\\]|\\.)*"|-?\d[\d.]*|true|false|null)')


def walkthrough_block() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## A customer's walk-through", 1)[1].split("\n## ", 1)[0]
    return section.split("```sh\n", 1)[1].split("\n```", 1)[0]


def _complete(command: str) -> bool:
    """Whether bash reads `command` as a whole command (no open quote or continuation)."""
    if command.rstrip().endswith("\\"):
        return False
    return subprocess.run(["bash", "-n", "-c", command], capture_output=True).returncode == 0


def walkthrough_steps(block: str) -> list[tuple[str, str]]:
    """The block as (command, expectation) pairs: a command may span lines; its
    expectation is the `# ->` comment after it, with its indented continuation."""
    steps: list[list[str]] = []
    pending: list[str] = []
    in_expectation = False
    for line in block.splitlines():
        if pending:
            pending.append(line)
            if _complete("\n".join(pending)):
                steps.append(["\n".join(pending), ""])
                pending = []
            continue
        stripped = line.strip()
        if stripped.startswith("# ->"):
            steps[-1][1] = stripped[4:].strip()
            in_expectation = True
        elif in_expectation and line.startswith("#    "):
            steps[-1][1] += "\n" + stripped[1:].strip()
        elif stripped.startswith("#") or not stripped:
            in_expectation = False
        else:
            in_expectation = False
            pending = [line]
            if _complete(line):
                steps.append([line, ""])
                pending = []
    assert not pending, f"unfinished command in the walk-through: {pending}"
    return [(command, expected) for command, expected in steps]


def _compact(text: str) -> str:
    return re.sub(r"([:,])\s+", r"\1", text)


def expectation_check(command: str, expected: str, output: str) -> None:
    if not expected:
        return
    if "{" in expected or "[" in expected:
        joined = " ".join(expected.splitlines())
        fragments = [f'"{key}": {value}' for key, value in FRAGMENT.findall(joined) if "..." not in value]
        assert fragments, f"no field to check in the comment after {command!r}"
        for fragment in fragments:
            assert _compact(fragment) in _compact(output), f"{command!r}: {fragment} not in {output[:2000]}"
        return
    for line in expected.splitlines():
        if line.strip() in ("", "..."):
            continue
        pattern = ".*".join(re.escape(part) for part in line.split("..."))
        assert re.search(pattern, output), f"{command!r}: {line!r} not in {output}"


def test_the_walkthrough_parses_into_commands_with_their_answers():
    steps = walkthrough_steps(walkthrough_block())
    commands = [command for command, _ in steps]
    assert sum(command.lstrip().startswith(("curl", "SIGNUP=$(curl", "ORDER=$(curl")) for command in commands) >= 15
    assert any("sandbox_pay" in command for command in commands)
    checked = [command for command, expected in steps if expected]
    assert len(checked) >= 15, checked
    with pytest.raises(AssertionError):
        expectation_check("x", '{"status": "paid"}', '{"status":"new"}')
    with pytest.raises(AssertionError):
        expectation_check("x", "Mined 12 block(s).", "Mined 6 block(s).")
    expectation_check("x", 'Paid ... ETH\n{"a": 1}', 'Paid 1 ETH\n{"a": 1}')


@pytest.fixture
def make_run_server(tmp_path):
    """`make run`'s server (serve_local) on a free port in a fresh data folder."""
    port = free_port()
    env = {key: value for key, value in os.environ.items() if key not in NOT_MAKE_RUN}
    env |= {"DEBUG": "1", "DATA_DIR": str(tmp_path / "data"), "PYTHONUNBUFFERED": "1"}
    log = (tmp_path / "serve_local.log").open("w+")
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "serve_local", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.poll() is None, (tmp_path / "serve_local.log").read_text()[-5000:]
        # The server answers before the ETH and XMR sandboxes are up; they join later and web, worker
        # and beat restart then. The walk-through starts once all have (no step meets a restart).
        text = (tmp_path / "serve_local.log").read_text()
        if "GPU Rent Hub is running" not in text or "ETH sandbox" not in text:
            return False
        if not any(line in text for line in ("XMR sandbox:", "No XMR sandbox", "The XMR sandbox did not start")):
            return False
        try:
            with urllib.request.urlopen(f"{base}/readyz", timeout=5) as answer:
                return answer.status == 200
        except OSError:
            return False

    try:
        wait_until(up, timeout=600, what="make run's server and its sandboxes to start")
        yield {"base": base, "env": env, "log": tmp_path / "serve_local.log", "port": port}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        # Anything of the server's still in its process group (a gunicorn worker that outlived
        # its master under load) goes too: the test leaves no process behind.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def test_the_readme_walkthrough_runs_as_written_on_make_run(make_run_server, tmp_path):
    log = make_run_server["log"].read_text()
    # make test installs litecoind, anvil and monerod, so every sandbox of make run starts.
    for chain in ("LTC", "ETH", "XMR", "SOL"):
        assert f"{chain} sandbox:" in log, log[-3000:]

    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", home / ".ssh" / "id_ed25519"], check=True)
    shell = tmp_path / "shell"
    shell.mkdir()
    (shell / ".venv").symlink_to(Path(sys.prefix))
    (shell / "manage.py").symlink_to(ROOT / "manage.py")

    steps = walkthrough_steps(walkthrough_block().replace(README_PORT, f"127.0.0.1:{make_run_server['port']}"))
    script = []
    for index, (command, _) in enumerate(steps):
        script += [command, f'printf "\\n@@end {index} %s\\n" "$?"']
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=shell,
        env={**make_run_server["env"], "HOME": str(home), "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    outputs = re.split(r"\n@@end \d+ (\d+)\n", done.stdout)
    assert len(outputs) == 2 * len(steps) + 1, (done.stdout[-3000:], done.stderr[-3000:])
    for index, (command, expected) in enumerate(steps):
        output, status = outputs[2 * index], outputs[2 * index + 1]
        assert status == "0", f"{command!r} exited {status}: {output[-2000:]} {done.stderr[-2000:]}"
        assert "<html" not in output.lower(), f"{command!r} answered a page: {output[:500]}"
        if output.lstrip().startswith("{"):
            assert "error" not in json.loads(output), f"{command!r}: {output[:2000]}"
        expectation_check(command, expected, output)
    assert (tmp_path / "invoice.svg").read_text().startswith("<?xml")
    assert not (shell / "invoice.svg").exists()  # nothing left in the repository's folder
