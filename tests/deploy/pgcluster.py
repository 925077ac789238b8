"""Throwaway PostgreSQL servers for the backup tests: Debian's binaries, a data
directory under a temporary folder, a free loopback port, trust authentication
on loopback. Never the machine's own server or its data.

PostgreSQL refuses to run as root (initdb and postgres both), so as root the
server's commands run as the `postgres` user and the folders it writes are
given to it; as any other user they run as that user."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from devtools.processes import free_port


def pg_bin() -> Path:
    """The newest installed PostgreSQL's bin folder (Debian: /usr/lib/postgresql/<major>/bin)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    if not found:
        raise RuntimeError("PostgreSQL's server binaries are not installed (Debian package postgresql)")
    return found[-1].parent


def server_user() -> str | None:
    """Who runs the server: `postgres` when we are root, else ourselves (None)."""
    return "postgres" if os.geteuid() == 0 else None


def as_server_user(command: list[str]) -> list[str]:
    user = server_user()
    return ["runuser", "-u", user, "--", *command] if user else command


def give_to_server_user(path: Path) -> Path:
    """Make `path` (a folder) the server user's, so it may write there."""
    user = server_user()
    if user:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)
    return path


@dataclass
class Cluster:
    datadir: Path
    port: int
    log: Path
    socket_dir: Path

    @classmethod
    def create(cls, root: Path, name: str, *, settings: dict[str, str] | None = None) -> Cluster:
        """initdb a new cluster in `root/name` (root must be the server user's to write)."""
        datadir = root / name
        subprocess.run(
            as_server_user(
                [
                    str(pg_bin() / "initdb"),
                    "-D",
                    str(datadir),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--no-sync",
                    "-E",
                    "UTF8",
                ]
            ),
            check=True,
            capture_output=True,
            timeout=60,
        )
        cluster = cls.attach(datadir, root)
        cluster.configure(settings or {})
        return cluster

    @classmethod
    def attach(cls, datadir: Path, root: Path) -> Cluster:
        """A cluster for an existing data directory (a restored one), with a port of its own."""
        return cls(datadir=datadir, port=free_port(), log=root / f"{datadir.name}.log", socket_dir=root)

    def configure(self, settings: dict[str, str]) -> None:
        """Append settings to postgresql.conf (written as the server user can read it)."""
        lines = [f"{key} = {value}" for key, value in settings.items()]
        with (self.datadir / "postgresql.conf").open("a") as conf:
            conf.write("\n".join(lines) + "\n")

    def start(self, *, timeout: int = 60, settings: dict[str, str] | None = None) -> None:
        # Settings on the command line win over the files, a restored postgresql.auto.conf included.
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.socket_dir}"
        options += "".join(f" -c {key}={value}" for key, value in (settings or {}).items())
        subprocess.run(
            as_server_user(
                [
                    str(pg_bin() / "pg_ctl"),
                    "-D",
                    str(self.datadir),
                    "-l",
                    str(self.log),
                    "-o",
                    options,
                    "-w",
                    "-t",
                    str(timeout),
                    "start",
                ]
            ),
            check=True,
            capture_output=True,
            timeout=timeout + 10,
        )

    def running(self) -> bool:
        return (self.datadir / "postmaster.pid").exists()

    def stop(self, *, mode: str = "fast") -> None:
        if not self.running():
            return
        subprocess.run(
            as_server_user([str(pg_bin() / "pg_ctl"), "-D", str(self.datadir), "-m", mode, "-w", "-t", "60", "stop"]),
            check=False,
            capture_output=True,
            timeout=70,
        )

    def url(self, database: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def env(self) -> dict[str, str]:
        """libpq's environment for this server (as deploy/backup's scripts read it)."""
        return {"PGHOST": "127.0.0.1", "PGPORT": str(self.port), "PGUSER": "postgres", "PGDATABASE": "postgres"}

    def sql(self, statement: str, *, database: str = "postgres") -> str:
        done = subprocess.run(
            [str(pg_bin() / "psql"), "-X", "-At", "-v", "ON_ERROR_STOP=1", "-d", self.url(database), "-c", statement],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return done.stdout.strip()

    def wait_writable(self, *, timeout: float = 60) -> None:
        """Until recovery has ended and the server accepts writes (promoted)."""
        deadline = time.monotonic() + timeout
        while self.sql("SELECT pg_is_in_recovery()") != "f":
            if time.monotonic() > deadline:
                raise AssertionError(f"still in recovery after {timeout:g}s:\n{self.log_tail()}")
            time.sleep(0.2)

    def wait_archived(self, wal_file: str, *, timeout: float = 30) -> None:
        """Until the archiver has archived `wal_file` (segments are archived in order)."""
        deadline = time.monotonic() + timeout
        while (self.sql("SELECT last_archived_wal FROM pg_stat_archiver") or "") < wal_file:
            if time.monotonic() > deadline:
                raise AssertionError(f"{wal_file} not archived after {timeout:g}s:\n{self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
