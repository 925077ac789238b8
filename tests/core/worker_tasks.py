"""A task for the tests that run the real Celery worker (given to it with `--include`):
it records its number in a file, after `seconds` of work."""

from __future__ import annotations

import os
import time

from config.celery import app


@app.task(name="tests.record")
def record(number: int, path: str, seconds: float = 0.0) -> None:
    time.sleep(seconds)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{number}\n".encode())
    finally:
        os.close(fd)
