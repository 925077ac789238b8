"""The process supervisor of `make run` (`manage.py serve_local`): it runs web, worker and
beat as child processes and keeps them running.

A child that exits within `grace` seconds of its first start did not start (a wrong
setting, a port in use): the supervisor reports it and the whole run stops, as a
newcomer must see the error. A child that exits after it ran (the worker killed, a
crash) is started again, at once the first time and then after a pause that doubles
on each quick failure (up to `backoff_max` seconds): the sandboxes and their chains
(the Solana one lives in this process) keep running meanwhile.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


@dataclass
class Child:
    name: str
    command: list[str]
    process: subprocess.Popen | None = None
    started_at: float = 0.0
    starts: int = 0
    restart_at: float | None = None  # when a child that exited is due to start again
    pause: float = 0.0  # the pause before the next restart after a quick failure
    exits: list[int] = field(default_factory=list)


class Supervisor:
    def __init__(
        self,
        commands: Mapping[str, list[str]],
        *,
        env: Mapping[str, str],
        log: Callable[[str], None],
        grace: float = 10.0,
        backoff_max: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.children = {name: Child(name, list(command)) for name, command in commands.items()}
        self.env = dict(env)
        self.log = log
        self.grace = grace
        self.backoff_max = backoff_max
        self.clock = clock

    def start(self) -> None:
        for child in self.children.values():
            self._spawn(child)

    def _spawn(self, child: Child) -> None:
        child.process = subprocess.Popen(child.command, env=self.env)
        child.started_at = self.clock()
        child.starts += 1
        child.restart_at = None

    def pid(self, name: str) -> int | None:
        process = self.children[name].process
        return None if process is None or process.poll() is not None else process.pid

    def poll(self) -> str | None:
        """Restart the children that exited and are due. Returns the name of a child that
        exited within `grace` seconds of its first start (the run must stop), else None."""
        now = self.clock()
        for child in self.children.values():
            if child.restart_at is not None:
                if now >= child.restart_at:
                    self.log(f"Starting {child.name} again (start {child.starts + 1}).")
                    self._spawn(child)
                continue
            if child.process is None or child.process.poll() is None:
                continue
            code = child.process.returncode
            child.exits.append(code)
            ran = now - child.started_at
            if child.starts == 1 and ran < self.grace:
                self.log(f"{child.name} exited with {code} {ran:.0f} s after it started; stopping the rest.")
                return child.name
            # Ran a while: start it again at once; a quick failure again waits longer each time.
            child.pause = 0.0 if ran >= self.grace else min(self.backoff_max, max(1.0, child.pause * 2))
            child.restart_at = now + child.pause
            self.log(
                f"{child.name} exited with {code} after {ran:.0f} s; starting it again"
                + (f" in {child.pause:.0f} s." if child.pause else ".")
            )
        return None

    def restart_all(self, env: Mapping[str, str], timeout: float = 15.0) -> None:
        """Stop every child and start it again with `env` (a sandbox that came up later)."""
        self.stop(timeout=timeout)
        self.env = dict(env)
        for child in self.children.values():
            self._spawn(child)

    def stop(self, timeout: float = 15.0) -> None:
        running = [c.process for c in self.children.values() if c.process is not None and c.process.poll() is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in running:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for child in self.children.values():
            child.restart_at = None
