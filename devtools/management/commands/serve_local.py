"""`make run`: prepare the embedded default and run web + worker + beat in the
foreground, with the sandbox of each chain family that names one
(devtools/sandboxes.py): the LTC sandbox when litecoind is installed, the ETH
sandbox when anvil is, the XMR sandbox when monerod is, and the SOL sandbox (a
loopback Solana node) always. The server answers once LTC and SOL are up
(seconds); ETH and XMR, slower to start, join when they are ready (web, worker
and beat restart then to see them). A child that dies is started again
(devtools/supervisor.py). Ctrl-C stops them all. Development only (devtools is
installed when DEBUG is on)."""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from functools import cached_property
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from devtools.sandboxes import SandboxKind, sandbox_kinds
from devtools.supervisor import Supervisor

_LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")

# The sandboxes are the families' (devtools/sandboxes.py), in family order: the order their settings
# are merged. They start while the database is migrated; the server waits for the "foreground" ones
# (seconds), and for the "background" ones only as long as those took plus BACKGROUND_GRACE_SECONDS.
# The "late" ones start once the server answers: XMR's first start mines for a minute or more, which
# would slow the migration down on a small machine.
BACKGROUND_GRACE_SECONDS = 2.0


class SandboxStarter(threading.Thread):
    """Starts one sandbox and keeps it until `finish()`. The nodes are started with
    PR_SET_PDEATHSIG (devtools/processes.py), which Linux ties to the thread that
    started them: so this thread lives as long as the sandbox, and stops it."""

    def __init__(self, code: str, start: Callable[[], Any]) -> None:
        super().__init__(name=f"sandbox-{code}", daemon=True)
        self._start_sandbox = start
        self.result: Any = None
        self.ready = threading.Event()
        self._finish = threading.Event()

    def run(self) -> None:
        try:
            self.result = self._start_sandbox()
        finally:
            self.ready.set()
        self._finish.wait()
        if self.result is not None:
            self.result.stop()

    def finish(self) -> None:
        self._finish.set()


def rates_merge(*lists: str) -> str:
    """MANUAL_RATES_USD lists merged: the first figure named for a currency wins."""
    merged: dict[str, str] = {}
    for entries in lists:
        for entry in (e.strip() for e in (entries or "").split(",")):
            if entry:
                merged.setdefault(entry.split("=", 1)[0].strip().upper(), entry)
    return ",".join(merged.values())


def broker_delivered_prune(url: str) -> int:
    """Delete the messages the SQLite broker delivered in earlier runs (kombu's SQLAlchemy
    transport keeps them with visible=0). Nothing runs yet, so none is in flight."""
    for prefix in ("sqla+sqlite:///", "sqlalchemy+sqlite:///"):
        if url.startswith(prefix):
            path = url[len(prefix) :]
            break
    else:
        return 0
    if not path or not os.path.isfile(path):
        return 0
    with contextlib.closing(sqlite3.connect(path, timeout=20)) as db, db:
        try:
            return db.execute("DELETE FROM kombu_message WHERE visible = 0").rowcount
        except sqlite3.OperationalError:  # no such table yet
            return 0


def bind_is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts_for_bind(host: str, current: list[str]) -> list[str]:
    """ALLOWED_HOSTS for a server bound to `host`: what is set, plus the bound
    address; for a wildcard (0.0.0.0, ::) the names and addresses of this
    machine, which is how other machines reach it."""
    names = [*current]
    bare = host.strip("[]")
    if bare in ("0.0.0.0", "::", ""):
        names += [*_LOOPBACK_HOSTS, socket.gethostname(), socket.getfqdn()]
        with contextlib.suppress(OSError):
            names += [info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None)]
    else:
        names.append(f"[{bare}]" if ":" in bare else bare)
    return list(dict.fromkeys(n for n in names if n))


class Command(BaseCommand):
    help = "Migrate, load the catalog, create a staff account if none exists, and run web, worker and beat."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--prepare-only", action="store_true", help="Set up, then exit without serving.")

    def handle(self, *args, **opts):
        if opts["prepare_only"]:
            self._prepare()
            return
        self._data_dir_hold()
        self._began = time.monotonic()
        # The sandboxes' nodes start while the database is migrated and seeded: they need no database.
        self._sandboxes_begin()
        self._prepare()
        self._serve(opts["host"], opts["port"])

    def _data_dir_hold(self) -> None:
        """Hold DATA_DIR for this run (an flock, released when the process ends): a second
        `make run` on the same folder would start its own sandboxes there and, stopping,
        remove the settings file the first one's `sandbox_pay` reads."""
        settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
        path = settings.DATA_DIR / "serve_local.lock"
        handle = open(path, "a")  # noqa: SIM115 - held open for the life of the process
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise CommandError(
                f"make run is already running with DATA_DIR={settings.DATA_DIR}: stop it first (Ctrl-C in "
                "its terminal), or start this one with another DATA_DIR (and PORT)."
            ) from None
        self._data_dir_lock = handle

    def _prepare(self) -> None:
        settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
        broker_delivered_prune(settings.CELERY_BROKER_URL)
        started = time.monotonic()
        self.stdout.write("Migrating the database ...")
        # Static files are copied in another process meanwhile: they need no database.
        static = subprocess.Popen(
            [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"], cwd=settings.BASE_DIR
        )
        call_command("migrate", interactive=False, verbosity=0)
        call_command("seed_catalog")
        self._ensure_staff()
        if static.wait() != 0:
            raise CommandError("collectstatic failed (above).")
        self.stdout.write(f"Database and static files ready in {time.monotonic() - started:.0f} s.")

    def _ensure_staff(self) -> None:
        Account = get_user_model()
        if Account.objects.filter(is_staff=True).exists():
            return
        password = secrets.token_urlsafe(18)
        Account.objects.create_superuser("staff", password)
        self.stdout.write(
            self.style.WARNING(
                f"\nCreated the staff account (shown once, keep it):\n    username: staff\n    password: {password}\n"
            )
        )

    # --- the sandboxes: LTC and SOL before the server answers, ETH and XMR when they are ready -----------

    def _sandboxes_begin(self) -> None:
        if getattr(self, "_starters", None) is not None:
            return
        starts: dict[str, Callable[[], Any]] = {
            code: (lambda code=code: self._sandbox_start(code)) for code in self._kinds
        }
        # SANDBOX_OFF=XMR (a list) leaves those sandboxes out, e.g. to spare monerod's memory.
        off = {c.strip().upper() for c in os.environ.get("SANDBOX_OFF", "").split(",") if c.strip()}
        for code in sorted(off & set(starts)):
            self.stdout.write(f"No {code} sandbox: SANDBOX_OFF names it.")
            starts[code] = lambda: None
        self._starters = {code: SandboxStarter(code, start) for code, start in starts.items()}
        for code, starter in self._starters.items():
            if code not in self._starting("late"):
                starter.start()

    @cached_property
    def _kinds(self) -> dict[str, SandboxKind]:
        """The families' sandboxes by code, in family order (the order their settings are merged)."""
        return {kind.code: kind for kind in sandbox_kinds()}

    def _starting(self, when: str) -> tuple[str, ...]:
        """The codes of the sandboxes that start `when` ("foreground", "background", "late")."""
        return tuple(code for code, kind in self._kinds.items() if kind.starts == when)

    def _sandbox_start(self, code: str) -> Any:
        """Start the sandbox named `code` (its module says whether it can), or None."""
        return self._kinds[code].start(rates=settings.MANUAL_RATES_USD, say=self.stdout.write, warn=self.stderr.write)

    def _serve(self, host: str, port: int) -> None:
        base = f"http://{host}:{port}"
        py = sys.executable
        bindir = os.path.dirname(py)
        procs = {
            "web": [
                os.path.join(bindir, "gunicorn"),
                "config.wsgi:application",
                "--bind",
                f"{host}:{port}",
                # One process of 8 threads: plenty for one developer, and 120 MB less than two.
                "--workers",
                "1",
                "--threads",
                "8",
                # No access log of gunicorn's: the application writes one line per request,
                # with its request id (observability/middleware.py).
            ],
            "worker": [
                py,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "--loglevel",
                "INFO",
                "--pool",
                "threads",
                "--concurrency",
                "4",
            ],
            "beat": [
                py,
                "-m",
                "celery",
                "-A",
                "config",
                "beat",
                "--loglevel",
                "INFO",
                "--schedule",
                settings.CELERY_BEAT_SCHEDULE_FILENAME,
            ],
        }
        self._sandboxes_begin()
        starters: dict[str, SandboxStarter] = self._starters
        foreground, background, late = (self._starting(w) for w in ("foreground", "background", "late"))
        # The primary sandbox (LTC) owns the sandbox's settings file and the demo invoice.
        primary = next((code for code, kind in self._kinds.items() if kind.primary), None)
        # LTC and SOL take seconds: the server waits for them. ETH (anvil and its token contracts) and XMR
        # (monerod, mining on its first start) join when ready, if they are not by then.
        for code in foreground:
            starters[code].ready.wait()
        deadline = time.monotonic() + BACKGROUND_GRACE_SECONDS
        for code in background:
            starters[code].ready.wait(timeout=max(0.0, deadline - time.monotonic()))
        up = {code: s.result for code, s in starters.items() if s.ready.is_set() and s.result is not None}
        waiting = [code for code in (*background, *late) if not starters[code].ready.is_set()]
        sandbox = up.get(primary) if primary else None
        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        supervisor: Supervisor | None = None
        try:
            env = self._children_env(base, host, up, any_sandbox=bool(up or waiting))
            if not bind_is_loopback(host) and settings.DEBUG:
                self.stderr.write(
                    self.style.WARNING(
                        f"Listening on {host}, beyond this machine, with DEBUG on: error pages show settings "
                        "and code. DEBUG pages must not face a network; use this on a network you trust, "
                        "and run production with DEBUG off (docs/operations.md)."
                    )
                )
            demo = None
            if up:
                # Commands run from another shell (sandbox_pay) read the sandbox's settings file.
                extra = {k: v for code, box in up.items() if code != primary for k, v in box.env.items()}
                if "MANUAL_RATES_USD" in extra:
                    extra["MANUAL_RATES_USD"] = env["MANUAL_RATES_USD"]
                if "SITE_URL" not in os.environ:
                    extra["SITE_URL"] = base
                if sandbox:
                    with open(sandbox.env_file, "a") as handle:
                        handle.writelines(f"{key}='{value}'\n" for key, value in extra.items())
                else:
                    eth_sandbox_env_file(settings.SANDBOX_ENV_FILE, extra)
            supervisor = Supervisor(procs, env=env, log=lambda line: self.stderr.write(line))
            supervisor.start()
            if sandbox:  # made while web, worker and beat start
                demo = self._sandbox_demo_invoice(env)
            since = f" (started in {time.monotonic() - self._began:.0f} s)" if getattr(self, "_began", None) else ""
            self.stdout.write(
                self.style.SUCCESS(
                    f"\nGPU Rent Hub is running{since}.\n"
                    f"    API:       {base}/api/v1/\n"
                    f"    API docs:  {base}/api/docs/\n"
                    f"    Admin:     {base}/admin/\n"
                    f"    Checkout:  {base}/pay/<token>  (each invoice's checkout_url)\n"
                    f"    Health:    {base}/healthz  {base}/readyz\n"
                    f"    Metrics:   {base}/metrics  (Prometheus; from this machine only)\n"
                    "Press Ctrl-C to stop.\n"
                )
            )
            for code in self._kinds:
                if code in up:
                    self._sandbox_banner(code, up[code], demo=demo)
            for code in waiting:
                if code in background:
                    self.stdout.write(
                        f"The {code} sandbox is still starting: it says so here when it is ready, and web, worker "
                        "and beat restart to see it.\n"
                    )
            for code in late:
                starters[code].start()
            while not stopping:
                if supervisor.poll() is not None:
                    break
                for code in list(waiting):
                    starter = starters[code]
                    if not starter.ready.is_set():
                        continue
                    waiting.remove(code)
                    if starter.result is None:
                        continue  # not installed, or it failed: its start said why
                    up[code] = starter.result
                    env = self._children_env(base, host, up, any_sandbox=True)
                    extra = {k: v for c, box in up.items() if c != primary for k, v in box.env.items()}
                    extra["MANUAL_RATES_USD"] = env["MANUAL_RATES_USD"]
                    if "SITE_URL" not in os.environ:
                        extra["SITE_URL"] = base
                    eth_sandbox_env_file(settings.SANDBOX_ENV_FILE, {**(sandbox.env if sandbox else {}), **extra})
                    supervisor.restart_all(env)
                    self._sandbox_banner(code, starter.result, demo=None, late=True)
                time.sleep(0.5)
        finally:
            if supervisor is not None:
                supervisor.stop()
            for starter in starters.values():
                starter.finish()
            for starter in starters.values():
                if starter.is_alive():
                    starter.join(timeout=30)
            if (set(up) - {primary}) and not sandbox:
                with contextlib.suppress(OSError):
                    settings.SANDBOX_ENV_FILE.unlink()
            self.stdout.write("Stopped.")

    def _children_env(self, base: str, host: str, up: dict, *, any_sandbox: bool) -> dict[str, str]:
        """The environment of web, worker and beat: the sandboxes' settings (they are separate
        processes), this server as SITE_URL, the bound host allowed."""
        boxes = [up[code] for code in self._kinds if code in up]
        env = {**os.environ}
        for box in boxes:
            env.update(box.env)
        if boxes:
            env["SANDBOX"] = "1"
            env["MANUAL_RATES_USD"] = rates_merge(
                settings.MANUAL_RATES_USD, *(b.env.get("MANUAL_RATES_USD", "") for b in boxes)
            )
        if any_sandbox and "RATE_PROVIDERS" not in os.environ:
            # The sandbox quotes fixed rates (MANUAL_RATES_USD): no market source is asked.
            env["RATE_PROVIDERS"] = ""
        env.setdefault("SITE_URL", base)
        # Requests name the host they were sent to: the bound one must be allowed, or
        # Django answers DisallowedHost (with DEBUG, a page full of settings).
        env["ALLOWED_HOSTS"] = ",".join(allowed_hosts_for_bind(host, list(settings.ALLOWED_HOSTS)))
        # A receiver on this machine (http://127.0.0.1:9000/hook) can be registered and pinged:
        # make run is a local development server, DEBUG is on (production refuses the setting).
        env.setdefault("WEBHOOK_ALLOW_PRIVATE_TARGETS", "1")
        return env

    def _sandbox_banner(self, code: str, box, *, demo: dict[str, str] | None, late: bool = False) -> None:
        text = self._kinds[code].banner(box, demo=demo)
        if late:
            text += "    Ready now: web, worker and beat were restarted to see it.\n"
        self.stdout.write(self.style.SUCCESS(text))

    def _sandbox_demo_invoice(self, env: dict[str, str]) -> dict[str, str] | None:
        """The sandbox's demo invoice (`manage.py sandbox_invoice`, run with the
        sandbox's environment): its number and checkout page."""
        done = subprocess.run(
            [sys.executable, "manage.py", "sandbox_invoice"],
            env=env,
            cwd=settings.BASE_DIR,
            capture_output=True,
            text=True,
            timeout=120,
        )
        lines = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
        page = lines.get("Checkout page")
        number = next((k.split()[1] for k in lines if k.startswith("Invoice ")), None)
        if done.returncode != 0 or not page or not number:
            self.stderr.write(f"No sandbox demo invoice: {done.stderr.strip() or done.stdout.strip()}")
            return None
        return {"page": page, "number": number}


def eth_sandbox_env_file(path, env: dict[str, str]):
    """The sandbox's settings file when only the ETH sandbox runs (mode 0600, SANDBOX=1)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write("# Written by the sandbox while `make run` runs; removed when it stops.\n")
        handle.writelines(f"{key}='{value}'\n" for key, value in {**env, "SANDBOX": "1"}.items())
    return path
