"""`make run`: prepare the embedded default and run web + worker + beat in the
foreground, with the LTC sandbox when litecoind is installed, the ETH sandbox
when anvil is, and the SOL sandbox (a loopback Solana node) always. Ctrl-C stops
them all. Development only (devtools is installed when DEBUG is on)."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import signal
import socket
import subprocess
import sys
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand

_LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")


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
        self._prepare()
        if opts["prepare_only"]:
            return
        self._serve(opts["host"], opts["port"])

    def _prepare(self) -> None:
        settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
        for key in ("data_folder_in", "data_folder_out", "processed_folder", "control_folder"):
            folder = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get(key)
            if folder:
                os.makedirs(folder, exist_ok=True)
        self.stdout.write("Migrating the database ...")
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        call_command("seed_catalog")
        self._ensure_staff()

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
                "--workers",
                "2",
                "--threads",
                "4",
                "--access-logfile",
                "-",
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
        sandbox = self._sandbox_start()
        eth_sandbox = self._eth_sandbox_start(ltc_env=sandbox.env if sandbox else {})
        sol_sandbox = self._sol_sandbox_start(
            rates=(eth_sandbox.env if eth_sandbox else sandbox.env if sandbox else {}).get(
                "MANUAL_RATES_USD", settings.MANUAL_RATES_USD
            )
        )
        running: dict[str, subprocess.Popen] = {}
        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        try:
            # The children are separate processes: they see the sandbox through their environment,
            # and invoices' checkout links point at this server unless SITE_URL says otherwise.
            env = {
                **os.environ,
                **(sandbox.env if sandbox else {}),
                **({**eth_sandbox.env, "SANDBOX": "1"} if eth_sandbox else {}),
                **({**sol_sandbox.env, "SANDBOX": "1"} if sol_sandbox else {}),
            }
            env.setdefault("SITE_URL", base)
            # Requests name the host they were sent to: the bound one must be allowed, or
            # Django answers DisallowedHost (with DEBUG, a page full of settings).
            env["ALLOWED_HOSTS"] = ",".join(allowed_hosts_for_bind(host, list(settings.ALLOWED_HOSTS)))
            if not bind_is_loopback(host) and settings.DEBUG:
                self.stderr.write(
                    self.style.WARNING(
                        f"Listening on {host}, beyond this machine, with DEBUG on: error pages show settings "
                        "and code. DEBUG pages must not face a network; use this on a network you trust, "
                        "and run production with DEBUG off (docs/operations.md)."
                    )
                )
            # A receiver on this machine (http://127.0.0.1:9000/hook) can be registered and pinged:
            # make run is a local development server, DEBUG is on (production refuses the setting).
            env.setdefault("WEBHOOK_ALLOW_PRIVATE_TARGETS", "1")
            demo = None
            if sandbox or eth_sandbox or sol_sandbox:
                # Commands run from another shell (sandbox_pay) read the sandbox's settings file.
                extra = {**(eth_sandbox.env if eth_sandbox else {}), **(sol_sandbox.env if sol_sandbox else {})}
                if "SITE_URL" not in os.environ:
                    extra["SITE_URL"] = base
                env_file = sandbox.env_file if sandbox else eth_sandbox_env_file(settings.SANDBOX_ENV_FILE, extra)
                if sandbox:
                    with open(env_file, "a") as handle:
                        handle.writelines(f"{key}='{value}'\n" for key, value in extra.items())
            if sandbox:
                demo = self._sandbox_demo_invoice(env)
            for name, cmd in procs.items():
                running[name] = subprocess.Popen(cmd, env=env)
            from devtools.sandbox import sandbox_pay_command

            self.stdout.write(
                self.style.SUCCESS(
                    f"\nGPU Rent Hub is running.\n"
                    f"    API:       {base}/api/v1/\n"
                    f"    API docs:  {base}/api/docs/\n"
                    f"    Admin:     {base}/admin/\n"
                    f"    Checkout:  {base}/pay/<token>  (each invoice's checkout_url)\n"
                    f"    Health:    {base}/healthz  {base}/readyz\n"
                    "Press Ctrl-C to stop.\n"
                )
            )
            if sandbox:
                self.stdout.write(
                    self.style.SUCCESS(
                        f"LTC sandbox: a Litecoin regtest node at 127.0.0.1:{sandbox.node.rpc_port} (data in "
                        f"{sandbox.node.datadir}).\n"
                        + (f"    Try paying: {demo['page']}  (invoice {demo['number']})\n" if demo else "")
                        + "    Order or invoice in LTC, then pay it from the node's wallet; its checkout page turns paid:\n"
                        f"    {sandbox_pay_command(demo['number'] if demo else '<invoice-number>')}\n"
                    )
                )
            if eth_sandbox:
                self.stdout.write(
                    self.style.SUCCESS(
                        f"ETH sandbox: an anvil node at {eth_sandbox.node.url} (chain 31337, kept in "
                        f"{settings.SANDBOX_ENV_FILE.parent}), test USDT {eth_sandbox.usdt} and USDC {eth_sandbox.usdc}.\n"
                        "    Order or invoice in ETH, USDT or USDC, then pay it from an anvil account:\n"
                        f"    {sandbox_pay_command()}\n"
                    )
                )
            if sol_sandbox:
                self.stdout.write(
                    self.style.SUCCESS(
                        f"SOL sandbox: a loopback Solana node at {sol_sandbox.url} (a new cluster each run, a block "
                        "every 0.4 s, finalized 32 slots behind).\n"
                        "    Order or invoice in SOL, then pay it from the sandbox wallet as a Solana Pay transfer:\n"
                        "    DEBUG=1 .venv/bin/python manage.py sandbox_pay <invoice-number> --confirm\n"
                    )
                )
            while not stopping:
                for name, proc in running.items():
                    if proc.poll() is not None:
                        self.stderr.write(f"{name} exited with {proc.returncode}; stopping the rest.")
                        stopping = True
                        break
                time.sleep(0.5)
        finally:
            for proc in running.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            deadline = time.time() + 15
            for proc in running.values():
                try:
                    proc.wait(timeout=max(0.1, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    proc.kill()
            if sandbox:
                sandbox.stop()
            if eth_sandbox:
                eth_sandbox.stop()
            if sol_sandbox:
                sol_sandbox.stop()
            if (eth_sandbox or sol_sandbox) and not sandbox:
                with contextlib.suppress(OSError):
                    settings.SANDBOX_ENV_FILE.unlink()
            self.stdout.write("Stopped.")

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

    def _sandbox_start(self):
        """A Litecoin regtest node to pay into, when litecoind is installed and LTC is
        not configured otherwise (SANDBOX=0 turns it off)."""
        if not settings.DEBUG or os.environ.get("SANDBOX", "").strip().lower() in ("0", "false", "no", "off"):
            return None
        if (settings.LTC_XPUB or settings.LTC_RPC_URL) and not settings.SANDBOX:
            return None  # LTC is configured: no sandbox
        import shutil

        if shutil.which("litecoind") is None:
            self.stdout.write("No LTC sandbox: install litecoind (bash tests/ensure-chain-nodes.sh) to get one.")
            return None
        from billing.chains.utxo.rpc import ChainUnavailable, RpcError
        from devtools.litecoind import NodeStartError
        from devtools.sandbox import sandbox_start

        self.stdout.write("Starting the LTC sandbox (a Litecoin regtest node) ...")
        try:
            return sandbox_start(folder=settings.SANDBOX_ENV_FILE.parent, manual_rates=settings.MANUAL_RATES_USD)
        except (NodeStartError, ChainUnavailable, RpcError, OSError) as exc:
            self.stderr.write(f"The LTC sandbox did not start: {exc}")
            return None

    def _eth_sandbox_start(self, *, ltc_env: dict[str, str]):
        """An anvil node with the test tokens, when anvil is installed and ETH is not
        configured otherwise (SANDBOX=0 turns it off)."""
        if not settings.DEBUG or os.environ.get("SANDBOX", "").strip().lower() in ("0", "false", "no", "off"):
            return None
        if (settings.ETH_XPUB or settings.ETH_RPC_URL) and not settings.SANDBOX:
            return None  # ETH is configured: no sandbox
        from devtools.anvil import NodeStartError, anvil_installed
        from devtools.ethereum_sandbox import eth_sandbox_start

        if not anvil_installed():
            self.stdout.write("No ETH sandbox: install anvil (bash tests/ensure-chain-nodes.sh) to get one.")
            return None
        self.stdout.write("Starting the ETH sandbox (anvil, with test USDT and USDC) ...")
        rates = ltc_env.get("MANUAL_RATES_USD", settings.MANUAL_RATES_USD)
        try:
            return eth_sandbox_start(folder=settings.SANDBOX_ENV_FILE.parent, manual_rates=rates)
        except (NodeStartError, OSError, RuntimeError) as exc:
            self.stderr.write(f"The ETH sandbox did not start: {exc}")
            return None

    def _sol_sandbox_start(self, *, rates: str):
        """The loopback Solana node, when SOL is not configured otherwise (SANDBOX=0 turns it off).
        It needs nothing installed: it runs in this process."""
        if not settings.DEBUG or os.environ.get("SANDBOX", "").strip().lower() in ("0", "false", "no", "off"):
            return None
        if (settings.SOL_RECIPIENT or settings.SOL_RPC_URL) and not settings.SANDBOX:
            return None  # SOL is configured: no sandbox
        from devtools.solana_sandbox import sol_sandbox_start

        self.stdout.write("Starting the SOL sandbox (a loopback Solana node) ...")
        try:
            return sol_sandbox_start(folder=settings.SANDBOX_ENV_FILE.parent, manual_rates=rates)
        except OSError as exc:
            self.stderr.write(f"The SOL sandbox did not start: {exc}")
            return None


def eth_sandbox_env_file(path, env: dict[str, str]):
    """The sandbox's settings file when only the ETH sandbox runs (mode 0600, SANDBOX=1)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write("# Written by the sandbox while `make run` runs; removed when it stops.\n")
        handle.writelines(f"{key}='{value}'\n" for key, value in {**env, "SANDBOX": "1"}.items())
    return path
