"""The production worker keeps consuming while its Redis broker restarts under load.

The test starts a Redis of its own on a free loopback port (the shared one is never
touched), runs the worker as deploy/systemd/gpurenthub-worker.service does (prefork,
concurrency 4, the production broker settings of config/settings.py), gives it a bounded
load of tasks that each hold their message unacknowledged for a while (acks_late), and
restarts that Redis several times while tasks are in flight. Every task must have run and
the worker must still be there: no "Unrecoverable error"."""

from __future__ import annotations

import shutil
import signal
import subprocess

import pytest

from devtools.processes import free_port
from tests.core.worker_harness import ROOT, publish, recorded, worker_command, worker_env
from tests.waiting import wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]

TASKS = 120
RESTARTS = 5
TASK_SECONDS = 0.4  # each task holds its message unacknowledged this long


class OwnRedis:
    """A redis-server of this test's own, with an append-only file as a production one keeps
    (queued messages outlive a restart)."""

    def __init__(self, folder) -> None:
        self.port = free_port()
        self.folder = folder
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--dir",
                str(self.folder),
            ],
            stdout=subprocess.DEVNULL,
        )
        wait_until(self.answers, timeout=30, what="the test's redis-server to answer")

    def answers(self) -> bool:
        import redis

        try:
            return redis.Redis(port=self.port, socket_timeout=1).ping()
        except redis.ConnectionError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)


def test_the_worker_keeps_consuming_across_redis_restarts(tmp_path):
    own = OwnRedis(tmp_path)
    own.start()
    url = f"redis://127.0.0.1:{own.port}/0"
    done = tmp_path / "done"
    log = (tmp_path / "worker.log").open("w+")
    # A message the worker could not give back while Redis was down comes back after the visibility
    # timeout (300 s in production): 20 s here, so that the test waits for it within its bounds.
    env = worker_env(broker_url=url, data_dir=tmp_path / "data") | {"CELERY_BROKER_VISIBILITY_TIMEOUT": "20"}
    worker = subprocess.Popen(
        worker_command(name="restarts"),
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        publish(url, [(number, str(done), TASK_SECONDS) for number in range(TASKS)])
        for restart in range(RESTARTS):
            # Restart while tasks run: wait for progress first, so the worker holds unacknowledged messages.
            before = len(recorded(done))
            wait_until(
                lambda before=before: len(recorded(done)) >= before + 4 or worker.poll() is not None,
                timeout=120,
                what=f"the worker to make progress before restart {restart + 1}",
            )
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-5000:]
            own.stop()
            own.start()
        # After the restarts it keeps consuming: a new batch runs whole. (Of the first batch, a message
        # kombu's Redis transport had popped when Redis went away, before it wrote it to its unacked
        # hash, is gone: a window of that transport, not counted here; the others come back.)
        publish(url, [(number, str(done), 0.0) for number in range(TASKS, 2 * TASKS)])
        wait_until(
            lambda: (
                (set(range(TASKS, 2 * TASKS)) <= recorded(done) and len(recorded(done)) >= 2 * TASKS - RESTARTS)
                or worker.poll() is not None
            ),
            timeout=300,
            what="the batch sent after the restarts to run",
        )
        text = (tmp_path / "worker.log").read_text()
        assert worker.poll() is None, text[-5000:]
        assert "Unrecoverable error" not in text
        assert set(range(TASKS, 2 * TASKS)) <= recorded(done)
        assert len(recorded(done) & set(range(TASKS))) >= TASKS - RESTARTS  # at most one lost a restart
        # The restarts were felt: the worker lost its connection and made a new one (a restart that
        # falls while every pool process is busy can pass unseen: redis-py reconnects on the next command).
        assert "Connection to broker lost" in text and text.count("Connected to redis://") >= 2
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        own.stop()
        log.close()


def test_systemd_starts_the_worker_and_beat_again_whatever_ended_them():
    for unit in ("gpurenthub-worker.service", "gpurenthub-beat.service"):
        lines = (ROOT / "deploy" / "systemd" / unit).read_text().splitlines()
        assert "Restart=always" in lines, unit
