"""`make run`'s supervisor (devtools/supervisor.py): a worker that dies is started again,
the rest keep running; a child that cannot start stops the run."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from devtools.supervisor import Supervisor
from tests.core.worker_harness import ROOT, publish, recorded, worker_command, worker_env
from tests.waiting import wait_until

pytestmark = pytest.mark.slow


def test_a_child_that_exits_as_it_starts_stops_the_run():
    lines: list[str] = []
    supervisor = Supervisor(
        {
            "beat": [sys.executable, "-c", "raise SystemExit(3)"],
            "web": [sys.executable, "-c", "import time; time.sleep(60)"],
        },
        env=os.environ,
        log=lines.append,
        grace=30.0,
    )
    supervisor.start()
    try:
        failed: list[str | None] = []
        wait_until(lambda: failed.append(supervisor.poll()) or failed[-1], timeout=30, what="beat to be seen exiting")
        assert failed[-1] == "beat"
        assert lines == ["beat exited with 3 0 s after it started; stopping the rest."]
        assert supervisor.pid("web") is not None  # still running: serve_local stops it next
    finally:
        supervisor.stop()
    assert supervisor.pid("web") is None


def test_the_embedded_worker_killed_comes_back_and_consumes(tmp_path):
    """The worker of `make run` (thread pool, the SQLite broker of the embedded default) is
    killed; the supervisor starts it again, and the new one runs what is sent next."""
    broker = f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}"
    done = tmp_path / "done"
    lines: list[str] = []
    supervisor = Supervisor(
        {"worker": worker_command(pool="threads", concurrency=2, name="supervised")},
        env=worker_env(broker_url=broker, data_dir=tmp_path / "data"),
        log=lines.append,
        grace=1.0,
    )
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        supervisor.start()

        def ran(number: int) -> bool:
            assert supervisor.poll() is None, lines
            return number in recorded(done)

        publish(broker, [(1, str(done))])
        wait_until(lambda: ran(1), timeout=120, what="the first worker to run a task")
        first = supervisor.pid("worker")
        assert first is not None
        os.kill(first, signal.SIGKILL)
        wait_until(
            lambda: supervisor.poll() is None and supervisor.pid("worker") not in (None, first),
            timeout=60,
            what="the worker to be started again",
        )
        publish(broker, [(2, str(done))])
        wait_until(lambda: ran(2), timeout=120, what="the new worker to run a task")
        assert any(line.startswith("worker exited with -9 after") for line in lines), lines
        assert supervisor.children["worker"].starts == 2
    finally:
        supervisor.stop()
        os.chdir(cwd)
    assert supervisor.pid("worker") is None
