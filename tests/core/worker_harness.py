"""The real Celery worker of this project in a child process, for the tests that break
its broker or kill it: its command, its environment, and a publisher that is not the
test settings' eager app."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from celery import Celery

ROOT = Path(__file__).resolve().parent.parent.parent
# What the test run puts in the environment that a deployed worker does not have.
TEST_ONLY = ("DJANGO_SETTINGS_MODULE", "CELERY_BROKER_URL", "CACHE_URL", "TEST_REDIS_URL", "PYTEST_XDIST_WORKER")


def worker_env(*, broker_url: str, data_dir: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in TEST_ONLY}
    return env | {
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DEBUG": "1",  # no production SECRET_KEY or SITE_URL needed: the broker settings are the same
        "DATA_DIR": str(data_dir),
        "CELERY_BROKER_URL": broker_url,
        "PYTHONPATH": str(ROOT),
    }


def worker_command(*, pool: str = "prefork", concurrency: int = 4, name: str = "w") -> list[str]:
    """deploy/systemd/gpurenthub-worker.service's command, with the test task module."""
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "config",
        "worker",
        "--loglevel",
        "INFO",
        "--pool",
        pool,
        "--concurrency",
        str(concurrency),
        "--hostname",
        f"{name}@%h",
        "--include",
        "tests.core.worker_tasks",
    ]


def publish(broker_url: str, calls: list[tuple]) -> None:
    """Send `tests.record` calls to `broker_url` (a connection of its own: celery's
    broker_url gives CELERY_BROKER_URL in the environment, the test run's, precedence)."""
    app = Celery("publisher", set_as_current=False)
    with app.connection_for_write(broker_url) as connection:
        for args in calls:
            app.send_task("tests.record", args=args, connection=connection)


def recorded(path: Path) -> set[int]:
    return {int(line) for line in path.read_text().split()} if path.exists() else set()
