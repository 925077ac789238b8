"""A multi-host trial of the deploy as written, on one machine: hosts are network
namespaces joined by veth links to a bridge of their own, and each runs what
deploy/ installs there.

    sudo .venv/bin/python bench/cluster.py [--phase-seconds 60] [--keep-logs DIR]
    make cluster-trial

Topology (10.77.0.0/24; nothing is routed out, and the root namespace has no
link to it):

    grh-ops    .2    the driver: load, faults, checks (this script, after setup)
    grh-edge   .3    nginx, deploy/nginx/gpurenthub.conf, its upstream = web1 + web2
    grh-web1   .11   gunicorn (deploy/systemd/gpurenthub-web.service, deploy/gunicorn.conf.py)
    grh-web2   .12   the same
    grh-work1  .21   Celery worker (gpurenthub-worker.service) and beat (gpurenthub-beat.service)
    grh-work2  .22   Celery worker, and the webhook deliveries' (gpurenthub-webhooks.service)
    grh-db     .10   PostgreSQL (initdb in a temporary folder) and Redis
    grh-chain  .30   litecoind in regtest: the LTC sandbox chain
    grh-lan          the bridge every host's link plugs into

The environment file is deploy/env.example with its values filled in for these
hosts (and the trial's overrides below); the processes' command lines are read
from the systemd units' ExecStartPre/ExecStart with /opt/gpurenthub and
/var/lib/gpurenthub mapped to this checkout and a temporary folder. Two
changes the separate hosts need: gunicorn binds the host's address rather
than 127.0.0.1 (deploy/ puts nginx on the web host itself), and trusts the
edge's X-Forwarded-Proto (`--forwarded-allow-ips`), else every request would be
redirected to https. The processes run as root, not as the gpurenthub user.

Trial overrides in the environment file: LTC on the regtest node (LTC_XPUB of a
watch-only key made for the run, LTC_NETWORK=regtest, LTC_RPC_URL), a fixed
rate (MANUAL_RATES_USD=LTC=90, RATE_PROVIDERS empty: no market sources
reachable), CONFIRMATIONS_LTC=2 (settles within a phase), and the per-account,
per-address and sign-up caps lifted (every client is the driver's one address).

Of the chain sandboxes only Litecoin's runs (anvil, monerod and the Solana
node are left out to keep the load light); every payment and the watcher
lease taken away are LTC.

Load through edge (https, Host api.example.com), a few requests a second in
all: catalog and stock reads, orders (1 GPU, ten accounts), each open
invoice's checkout status polled, the order read back; two orders in three are
paid on the regtest chain from the node's wallet, and a block is mined every
5 seconds.

Phases: a baseline; web1's link cut, then back; work1 killed (SIGKILL, its
whole process group, as a lost machine) while it holds the LTC watcher's lease,
then started again 2 s later as systemd would (the lease must move to a live
worker within its TTL, 120 s); PostgreSQL restarted (fast); Redis restarted (no
persistence: queued tasks are lost and made up by the periodic jobs); nginx on
edge reloaded. Then the orders stop and the paid invoices are given time to
settle. It exits with 1 when an invariant is broken in any phase or a paid
invoice is left unsettled. Per phase it prints requests answered and failed (5xx, connection
errors, timeouts), the longest stall (the longest time without any answer
succeeding) and the longest single request, the time from the fault to the
first success after the last failure, and the invariants: slots oversold,
payments credited twice, payments lost (sent, confirmed, not recorded),
invoices stuck (a confirmed payment covering it a minute ago, not settled).

It runs about 10 minutes, keeps the load light (the machine's cores are
shared), and removes its namespaces, processes and files at the end, also on
Ctrl-C or an error (--keep-logs copies the logs out first). Linux, root,
iproute2, nginx, redis-server, litecoind and PostgreSQL's server binaries.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import random
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
VENV_BIN = ROOT / ".venv" / "bin"
PREFIX = "grh-"
NET = "10.77.0"
HOSTS = {"ops": 2, "edge": 3, "db": 10, "web1": 11, "web2": 12, "work1": 21, "work2": 22, "chain": 30}
SITE_HOST = "api.example.com"
LTC_RATE = Decimal(90)
RPC_PORT = 19443
LEASE = "chain_scan:litecoin"
LEASE_TTL = 120  # billing/chains/watchers.py LEASE_TTL
INVARIANTS = ("slots oversold", "payments credited twice", "payments lost", "invoices stuck")
BROKEN_IF_ANY = (*INVARIANTS, "paid invoices not settled")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def addr(host: str) -> str:
    return f"{NET}.{HOSTS[host]}"


def run(command: list[str], *, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, check=check, capture_output=True, text=True, timeout=120, **kwargs)


def in_ns(host: str, command: list[str]) -> list[str]:
    return ["ip", "netns", "exec", PREFIX + host, *command]


# --- the network ----------------------------------------------------------------------------------


def network_create() -> None:
    existing = run(["ip", "netns", "list"]).stdout
    if re.search(rf"^{PREFIX}", existing, re.M):
        raise SystemExit(f"namespaces {PREFIX}* exist (a trial running, or one killed): remove them first")
    run(["ip", "netns", "add", PREFIX + "lan"])
    run(["ip", "-n", PREFIX + "lan", "link", "add", "br0", "type", "bridge"])
    run(["ip", "-n", PREFIX + "lan", "link", "set", "br0", "up"])
    for host, number in HOSTS.items():
        ns = PREFIX + host
        run(["ip", "netns", "add", ns])
        run(["ip", "link", "add", f"v-{host}", "netns", PREFIX + "lan", "type", "veth", "peer", "eth0", "netns", ns])
        run(["ip", "-n", PREFIX + "lan", "link", "set", f"v-{host}", "master", "br0", "up"])
        run(["ip", "-n", ns, "addr", "add", f"{NET}.{number}/24", "dev", "eth0"])
        run(["ip", "-n", ns, "link", "set", "eth0", "up"])
        run(["ip", "-n", ns, "link", "set", "lo", "up"])


def network_remove() -> None:
    for host in [*HOSTS, "lan"]:
        run(["ip", "netns", "del", PREFIX + host], check=False)


def enter_ops_namespace() -> None:
    """Move this process (before it starts any thread) into grh-ops: its sockets are on the trial's LAN."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    with open(f"/var/run/netns/{PREFIX}ops") as handle:
        if libc.setns(handle.fileno(), 0x40000000) != 0:  # CLONE_NEWNET
            raise OSError(ctypes.get_errno(), "setns")


# --- processes ----------------------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    host: str
    command: list[str]
    env: dict[str, str]
    log_path: Path
    cwd: Path = ROOT
    popen: subprocess.Popen | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as out:
            self.popen = subprocess.Popen(
                in_ns(self.host, self.command),
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: killed whole, as a machine is
            )

    def pids(self) -> set[int]:
        if self.popen is None or self.popen.poll() is not None:
            return set()
        found = set()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.getpgid(int(entry.name)) == self.popen.pid:
                        found.add(int(entry.name))
        return found

    def signal(self, sig: int) -> None:
        if self.popen is not None and self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)

    def stop(self, timeout: float = 20) -> None:
        if self.popen is None:
            return
        self.signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.popen.wait(10)
        # Children a master left behind (celery's pool) go with the group.
        self.signal(signal.SIGKILL)


def unit_commands(unit: str, var: Path) -> list[list[str]]:
    """ExecStartPre and ExecStart of deploy/systemd/<unit>, mapped to this checkout."""
    commands = []
    for line in (ROOT / "deploy" / "systemd" / unit).read_text().splitlines():
        key, _, value = line.partition("=")
        if key in ("ExecStartPre", "ExecStart"):
            value = value.replace("/opt/gpurenthub/.venv/bin/", f"{VENV_BIN}/").replace("/var/lib/gpurenthub", str(var))
            command = [part.replace("%%", "%") for part in shlex.split(value)]  # systemd's escape of %
            if command[0] == "python":  # WorkingDirectory's relative python is the venv's
                command[0] = str(VENV_BIN / "python")
            commands.append(command)
    return commands


def unit_environment(unit: str, runtime: Path) -> dict[str, str]:
    """The Environment= lines of deploy/systemd/<unit>, its RuntimeDirectory (/run/<name>, made
    afresh at each start as systemd does) mapped into `runtime`."""
    text = (ROOT / "deploy" / "systemd" / unit).read_text()
    run_dirs = [line.partition("=")[2].strip() for line in text.splitlines() if line.startswith("RuntimeDirectory=")]
    env = {}
    for line in text.splitlines():
        if line.startswith("Environment="):
            key, _, value = line.partition("=")[2].partition("=")
            for name in run_dirs:
                value = value.replace(f"/run/{name}", str(runtime / name))
            env[key] = value
    for name in run_dirs:
        shutil.rmtree(runtime / name, ignore_errors=True)
        (runtime / name).mkdir(parents=True, mode=0o700)
    return env


def env_file_read(path: Path) -> dict[str, str]:
    """KEY=VALUE lines, as systemd's EnvironmentFile= reads them (comments and blanks skipped)."""
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip().strip("'\"")
    return values


TRIAL_OVERRIDES = {
    "MANUAL_RATES_USD": f"LTC={LTC_RATE}",
    "RATE_PROVIDERS": "",
    "CONFIRMATIONS_LTC": "2",
    "SIGNUP_PER_ADDRESS": "0",
    "UNPAID_ORDERS_MAX": "1000",
    "UNPAID_GPUS_MAX": "1000",
    "UNPAID_ORDERS_MAX_PAID": "1000",
    "UNPAID_GPUS_MAX_PAID": "1000",
    "UNPAID_HOLD_SHARE_PCT": "100",
    "LOG_LEVEL": "WARNING",
}


def env_text(example: str, values: dict[str, str]) -> str:
    """deploy/env.example with `values` put in its lines (each must be there), then the trial's overrides."""
    values = dict(values)
    lines = []
    for line in example.splitlines():
        key = line.partition("=")[0]
        lines.append(f"{key}={values.pop(key)}" if not line.startswith("#") and key in values else line)
    if values:
        raise ValueError(f"deploy/env.example lacks {sorted(values)}")
    lines.append("# --- the trial's overrides (bench/cluster.py) ---")
    lines += [f"{key}={value}" for key, value in TRIAL_OVERRIDES.items()]
    return "\n".join(lines) + "\n"


def edge_site(site: str, *, cert: Path, key: Path) -> str:
    """deploy/nginx/gpurenthub.conf with web1 and web2 as its upstream and the run's certificate;
    each replaced line must be found once, so a changed site file is noticed."""
    replacements = {
        "    server 127.0.0.1:8000;": f"    server {addr('web1')}:8000;\n    server {addr('web2')}:8000;",
        f"/etc/letsencrypt/live/{SITE_HOST}/fullchain.pem": str(cert),
        f"/etc/letsencrypt/live/{SITE_HOST}/privkey.pem": str(key),
    }
    for old, new in replacements.items():
        if site.count(old) != 1:
            raise ValueError(f"deploy/nginx/gpurenthub.conf: {old.strip()!r} is not there once")
        site = site.replace(old, new)
    return site


# --- the trial ----------------------------------------------------------------------------------


@dataclass
class Sample:
    kind: str
    start: float
    end: float
    ok: bool
    status: int


@dataclass
class Paid:
    txid: str
    invoice: int
    sent_at: float


class Cluster:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="grh-cluster-"))
        os.chmod(self.tmp, 0o755)
        self.var = self.tmp / "var"
        self.var.mkdir()
        self.procs: dict[str, Proc] = {}
        self.samples: list[Sample] = []
        self.samples_lock = threading.Lock()
        self.paid: list[Paid] = []
        self.open_invoices: list[dict] = []
        self.stop_load = threading.Event()
        self.stop_orders = threading.Event()
        self.threads: list[threading.Thread] = []
        self.rpc_auth = ("trial", secrets.token_urlsafe(16))
        self.metrics_token = secrets.token_urlsafe(32)
        self.metrics_seen: dict[str, float] | None = None
        self.env: dict[str, str] = {}
        self.accounts: list[str] = []

    # --- setup -------------------------------------------------------------------------------

    def proc(self, name: str, host: str, command: list[str], env: dict[str, str] | None = None) -> Proc:
        p = Proc(name, host, command, env if env is not None else self.env, self.tmp / f"{name}.log")
        self.procs[name] = p
        p.start()
        return p

    def bare_env(self) -> dict[str, str]:
        return {"PATH": os.environ["PATH"], "HOME": str(self.var), "LANG": "C.UTF-8"}

    def database_start(self) -> None:
        from tests.deploy.pgcluster import as_server_user, give_to_server_user, pg_bin

        give_to_server_user(self.tmp)
        run(as_server_user([str(pg_bin() / "initdb"), "-D", str(self.tmp / "pg"), "-U", "postgres", "--auth=trust"]))
        with (self.tmp / "pg" / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {NET}.0/24 trust\n")
        self.pg_ctl = as_server_user(
            [str(pg_bin() / "pg_ctl"), "-D", str(self.tmp / "pg"), "-l", str(self.tmp / "pg.log")]
        )
        options = f"-c listen_addresses={addr('db')} -c unix_socket_directories={self.tmp}"
        run(in_ns("db", [*self.pg_ctl, "-o", options, "-w", "start"]))
        self.pg_options = options
        run(
            in_ns(
                "db", [str(pg_bin() / "psql"), "-h", addr("db"), "-U", "postgres", "-c", "CREATE DATABASE gpurenthub"]
            )
        )
        (self.tmp / "redis").mkdir()
        self.redis_start()

    def redis_start(self) -> None:
        command = ["redis-server", "--bind", addr("db"), "--port", "6379", "--save", "", "--appendonly", "no"]
        self.proc(
            "redis", "db", [*command, "--protected-mode", "no", "--dir", str(self.tmp / "redis")], env=self.bare_env()
        )

    def chain_start(self) -> None:
        datadir = self.tmp / "litecoind"
        datadir.mkdir()
        user, password = self.rpc_auth
        (datadir / "litecoin.conf").write_text(
            "regtest=1\nserver=1\n[regtest]\n"
            f"rpcuser={user}\nrpcpassword={password}\nrpcport={RPC_PORT}\nrpcbind={addr('chain')}\n"
            f"rpcallowip={NET}.0/24\nlisten=0\ndnsseed=0\nupnp=0\nfallbackfee=0.0002\nvbparams=mweb:-2:0\n"
        )
        self.proc("litecoind", "chain", ["litecoind", f"-datadir={datadir}"], env=self.bare_env())

    def rpc(self, method: str, *params, wallet: bool = False):
        import requests

        url = f"http://{addr('chain')}:{RPC_PORT}" + ("/wallet/trial" if wallet else "")
        body = {"jsonrpc": "1.0", "id": 1, "method": method, "params": list(params)}
        answer = requests.post(url, json=body, auth=self.rpc_auth, timeout=30).json()
        if answer.get("error"):
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]

    def env_write(self, vpub: str) -> Path:
        """deploy/env.example, filled in for these hosts, plus the trial's overrides."""
        user, password = self.rpc_auth
        values = {
            "SECRET_KEY": secrets.token_urlsafe(50),
            "ALLOWED_HOSTS": SITE_HOST,
            "CSRF_TRUSTED_ORIGINS": f"https://{SITE_HOST}",
            "SITE_URL": f"https://{SITE_HOST}",
            "DATABASE_URL": f"postgres://postgres@{addr('db')}:5432/gpurenthub",
            "CACHE_URL": f"redis://{addr('db')}:6379/1",
            "CELERY_BROKER_URL": f"redis://{addr('db')}:6379/0",
            "DATA_DIR": str(self.var),
            "STATIC_ROOT": str(self.var / "static"),
            "LTC_XPUB": vpub,
            "LTC_NETWORK": "regtest",
            "LTC_RPC_URL": f"http://{user}:{password}@{addr('chain')}:{RPC_PORT}",
            "METRICS_TOKEN": self.metrics_token,
        }
        text = env_text((ROOT / "deploy" / "env.example").read_text(), values)
        path = self.tmp / "env"
        path.write_text(text)
        return path

    def edge_config(self) -> list[str]:
        site = (ROOT / "deploy" / "nginx" / "gpurenthub.conf").read_text()
        cert, key = self.tmp / "edge.crt", self.tmp / "edge.key"
        run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                f"/CN={SITE_HOST}",
                "-keyout",
                str(key),
                "-out",
                str(cert),
            ]
        )
        site = edge_site(site, cert=cert, key=key)
        nginx = self.tmp / "nginx"
        nginx.mkdir()
        (nginx / "site.conf").write_text(site)
        temps = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        for folder in temps:
            (nginx / folder).mkdir(mode=0o777)
        (nginx / "nginx.conf").write_text(
            f"daemon off;\nworker_processes 1;\npid {nginx}/nginx.pid;\nerror_log {nginx}/error.log warn;\n"
            "events { worker_connections 256; }\nhttp {\n  access_log off;\n"
            + "".join(f"  {folder}_temp_path {nginx}/{folder};\n" for folder in temps)
            + f"  include {nginx}/site.conf;\n}}\n"
        )
        command = ["nginx", "-p", str(nginx), "-c", str(nginx / "nginx.conf"), "-e", str(nginx / "error.log")]
        run(in_ns("edge", [*command, "-t"]))
        return command

    def setup(self) -> None:
        from devtools.litecoind import REGTEST_HRP, watch_only_account_generate

        log(f"network: {len(HOSTS)} hosts on {NET}.0/24 (namespaces {PREFIX}*)")
        network_create()
        self.database_start()
        self.chain_start()
        vpub = watch_only_account_generate(hrp=REGTEST_HRP["litecoind"]).vpub
        env_path = self.env_write(vpub)
        self.env = {**self.bare_env(), **env_file_read(env_path)}
        self.edge_command = self.edge_config()
        enter_ops_namespace()
        self.wait(lambda: self.rpc("getblockcount") is not None, "litecoind", 60)
        self.rpc("createwallet", "trial")
        self.rpc("generatetoaddress", 300, self.rpc("getnewaddress", "", "bech32", wallet=True))

        # gunicorn-web: its ExecStartPre (migrate, collectstatic) on web1, then web2 (one migration at a time)
        web = unit_commands("gpurenthub-web.service", self.var)
        for host in ("web1", "web2"):
            for pre in web[:-1]:
                log(f"{host}: {shlex.join(pre[1:])}")
                run(in_ns(host, pre), cwd=ROOT, env=self.env)
            if host == "web1":  # what deploy/install.sh runs after migrate
                run(in_ns(host, [str(VENV_BIN / "python"), "manage.py", "seed_catalog"]), cwd=ROOT, env=self.env)
            extra = ["--bind", f"{addr(host)}:8000", "--forwarded-allow-ips", addr("edge")]
            unit_env = unit_environment("gpurenthub-web.service", self.tmp / f"run-{host}")
            self.proc(host, host, [*web[-1], *extra], env={**self.env, **unit_env})
        [worker] = unit_commands("gpurenthub-worker.service", self.var)
        [webhooks] = unit_commands("gpurenthub-webhooks.service", self.var)
        [beat] = unit_commands("gpurenthub-beat.service", self.var)
        self.worker_command = worker
        self.proc("work1", "work1", worker)
        self.proc("work2", "work2", worker)
        self.proc("webhooks", "work2", webhooks)  # deploy/env.example's WEBHOOK_QUEUE
        self.proc("beat", "work1", beat)
        self.proc("edge", "edge", self.edge_command, env=self.bare_env())
        self.wait(lambda: self.get("/healthz")[0] == 200, "edge -> web", 90)
        self.wait(self.chain_scanned, "a worker's first LTC chain scan", 120)
        log("up: " + ", ".join(f"{n} ({p.host})" for n, p in self.procs.items()))

    def wait(self, check: Callable[[], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = "not yet"
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except Exception as exc:  # not up yet: say what, if it never comes
                last = repr(exc)
            time.sleep(0.5)
        raise SystemExit(f"{what}: not ready after {timeout:g}s ({last[:300]})")

    # --- HTTP through edge -----------------------------------------------------------------------

    def session(self):
        import requests
        import urllib3

        urllib3.disable_warnings()
        s = requests.Session()
        s.verify = False  # the run's own certificate
        s.trust_env = False  # REQUESTS_CA_BUNDLE in the environment would override verify
        s.headers["Host"] = SITE_HOST
        return s

    def get(self, path: str, session=None, token: str = "") -> tuple[int, dict | None]:
        s = session or self.session()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        answer = s.get(f"https://{addr('edge')}{path}", headers=headers, timeout=40)
        with contextlib.suppress(ValueError):
            return answer.status_code, answer.json()
        return answer.status_code, None

    def request(self, kind: str, session, method: str, path: str, token: str = "", body: dict | None = None):
        """One request through edge, recorded; the answer's JSON or None on failure."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        start = time.monotonic()
        status, data = 0, None
        try:
            answer = session.request(
                method, f"https://{addr('edge')}{path}", headers=headers, json=body, timeout=40, allow_redirects=False
            )
            status = answer.status_code
            with contextlib.suppress(ValueError):
                data = answer.json()
        except Exception:  # a connection error or timeout is a failed request
            status = 0
        ok = 0 < status < 500
        with self.samples_lock:
            self.samples.append(Sample(kind, start, time.monotonic(), ok, status))
        return data if ok and status < 400 else None

    # --- load --------------------------------------------------------------------------------

    def accounts_create(self, count: int = 10) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519

        s = self.session()
        for n in range(count):
            name = f"trial{n}-{secrets.token_hex(3)}"
            made = s.post(
                f"https://{addr('edge')}/api/v1/accounts",
                json={"username": name, "password": secrets.token_urlsafe(16)},
            )
            assert made.status_code == 201, made.text
            token = made.json()["token"]
            key = (
                ed25519.Ed25519PrivateKey.generate()
                .public_key()
                .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
                .decode()
            )
            added = s.post(
                f"https://{addr('edge')}/api/v1/account/ssh-keys",
                json={"name": "trial", "public_key": key},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert added.status_code == 201, added.text
            self.accounts.append((token, added.json()["id"]))

    def load_start(self) -> None:
        stock = self.get("/api/v1/catalog/stock?region=DFW-1")[1] or []
        cards = [(row["region"], row["gpu"]) for row in stock if row["available"] >= 50]
        for region in ("IAD-1", "PDX-1"):
            rows = self.get(f"/api/v1/catalog/stock?region={region}")[1] or []
            cards += [(row["region"], row["gpu"]) for row in rows if row["available"] >= 50]
        self.cards = cards or [("PDX-1", "l4")]
        for target in (self.reads, self.orders, self.polls, self.miner):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self.threads.append(thread)

    def reads(self) -> None:
        s = self.session()
        while not self.stop_load.wait(0.5):
            region = random.choice(["DFW-1", "IAD-1", "PDX-1"])
            self.request(
                "read", s, "GET", random.choice(["/api/v1/catalog/gpus", f"/api/v1/catalog/stock?region={region}"])
            )

    def orders(self) -> None:
        s = self.session()
        n = 0
        while not self.stop_orders.wait(1.5):
            n += 1
            token, key = self.accounts[n % len(self.accounts)]
            region, gpu = random.choice(self.cards)
            body = {
                "region": region,
                "gpu": gpu,
                "gpu_count": 1,
                "term": "weekly",
                "terms": 1,
                "template": "ubuntu-24.04",
                "addons": [],
                "ssh_keys": [key],
                "pay_currency": "LTC",
            }
            order = self.request("order", s, "POST", "/api/v1/orders", token, body)
            if not order:
                continue
            invoice = order["invoice"]
            entry = {
                "order": order["id"],
                "invoice": invoice["id"],
                "token": token,
                "checkout": invoice.get("checkout_url", ""),
            }
            self.open_invoices.append(entry)
            if n % 3:
                try:
                    txid = self.rpc(
                        "sendtoaddress", invoice["address"], str(Decimal(invoice["amount"]).scaleb(-8)), wallet=True
                    )
                    self.paid.append(Paid(txid, invoice["id"], time.monotonic()))
                except Exception as exc:
                    log(f"payment not sent: {exc}")

    def polls(self) -> None:
        from urllib.parse import urlsplit

        s = self.session()
        while not self.stop_load.wait(0.5):
            if not self.open_invoices:
                continue
            entry = random.choice(self.open_invoices[-20:])
            if entry["checkout"] and random.random() < 0.5:
                self.request("checkout status", s, "GET", urlsplit(entry["checkout"]).path + "/status")
            else:
                self.request("order read", s, "GET", f"/api/v1/orders/{entry['order']}", entry["token"])

    def miner(self) -> None:
        address = self.rpc("getnewaddress", "", "bech32", wallet=True)
        while not self.stop_load.wait(5):
            with contextlib.suppress(Exception):
                self.rpc("generatetoaddress", 1, address)

    # --- checks ------------------------------------------------------------------------------

    def sql(self, query: str, params: tuple = ()) -> list[tuple]:
        import psycopg

        with psycopg.connect(self.env["DATABASE_URL"], connect_timeout=10) as conn:
            return conn.execute(query, params).fetchall()

    def chain_scanned(self) -> bool:
        return bool(self.sql("SELECT 1 FROM billing_chainstate WHERE chain = 'litecoin' AND last_ok_at IS NOT NULL"))

    def metrics(self) -> dict[str, float]:
        """What the web hosts' /metrics say (read as Prometheus scrapes them: each host by its own
        address, with METRICS_TOKEN): requests answered in all and 5xx, summed over both hosts, and
        the LTC watcher's lag in blocks. A host that does not answer is left out of the sums."""
        import requests
        from prometheus_client.parser import text_string_to_metric_families

        totals = {"requests": 0.0, "5xx": 0.0, "hosts read": 0}
        lag = None
        for host in ("web1", "web2"):
            try:
                answer = requests.get(
                    f"http://{addr(host)}:8000/metrics",
                    headers={"Authorization": f"Bearer {self.metrics_token}", "Host": SITE_HOST},
                    timeout=5,
                )
                answer.raise_for_status()
            except requests.RequestException:
                continue
            totals["hosts read"] += 1
            for family in text_string_to_metric_families(answer.text):
                for sample in family.samples:
                    if sample.name == "gpurenthub_http_requests_total":
                        totals["requests"] += sample.value
                        if sample.labels.get("status", "").startswith("5"):
                            totals["5xx"] += sample.value
                    elif sample.name == "gpurenthub_chain_lag_blocks" and sample.labels.get("chain") == "litecoin":
                        lag = sample.value if lag is None else max(lag, sample.value)
        totals["watcher lag"] = lag
        return totals

    def lease_owner(self) -> str | None:
        rows = self.sql("SELECT owner FROM core_lease WHERE name = %s AND expires_at > now()", (LEASE,))
        return rows[0][0] if rows and rows[0][0] else None

    def invariants(self) -> dict[str, int]:
        oversold = (
            self.sql(
                """SELECT coalesce(sum(greatest(s.n - o.gpu_count, 0)), 0) FROM rentals_order o
               JOIN (SELECT holder, count(*) n FROM catalog_slot WHERE holder <> '' GROUP BY holder) s
                 ON s.holder = 'order:' || o.id"""
            )[0][0]
            + self.sql(
                """SELECT count(*) FROM catalog_host h WHERE h.free_slots <>
               (SELECT count(*) FROM catalog_slot s WHERE s.host_id = h.id AND s.status = 'free')"""
            )[0][0]
        )
        twice = self.sql(
            """SELECT count(*) FROM (SELECT payment_id FROM billing_creditentry WHERE payment_id IS NOT NULL
               AND kind IN ('payment_credit', 'late_payment') GROUP BY payment_id HAVING count(*) > 1) x"""
        )[0][0]
        sent = [p.txid for p in self.paid if time.monotonic() - p.sent_at > 60]
        recorded = dict(
            self.sql("SELECT txid, count(*) FROM billing_payment WHERE txid = ANY(%s) GROUP BY txid", (sent,))
        )
        twice += sum(1 for n in recorded.values() if n > 1)
        stuck = self.sql(
            """SELECT count(DISTINCT i.id) FROM billing_invoice i JOIN billing_payment p ON p.invoice_id = i.id
               WHERE p.status = 'confirmed' AND p.confirmed_at < now() - interval '60 seconds'
               AND i.status NOT IN ('settled', 'invalid')"""
        )[0][0]
        stuck += self.sql(
            """SELECT count(*) FROM rentals_order o JOIN billing_invoice i ON i.id = o.invoice_id
               WHERE i.status = 'settled' AND o.status = 'awaiting_payment'
               AND i.settled_at < now() - interval '90 seconds'"""
        )[0][0]
        return {
            "slots oversold": int(oversold),
            "payments credited twice": int(twice),
            "payments lost": sum(1 for txid in sent if txid not in recorded),
            "invoices stuck": int(stuck),
        }

    # --- phases ------------------------------------------------------------------------------

    def phase(self, name: str, seconds: float, fault: Callable[[], float | None] | None = None) -> dict:
        """Run one phase (its fault a quarter in, at most 10 s); the invariants at its end.
        The request figures are filled in by `requests_summarise` once every request has ended."""
        start = time.monotonic()
        log(f"phase: {name}")
        fault_at = None
        if fault is not None:
            time.sleep(min(10, seconds / 4))
            fault_at = fault()
        time.sleep(max(0.0, start + seconds - time.monotonic()))
        row = {"phase": name, "start": start, "end": time.monotonic(), "fault_at": fault_at, **self.invariants()}
        # The servers' own count of what they answered in the phase (the difference of two scrapes).
        seen = self.metrics()
        before, self.metrics_seen = self.metrics_seen, seen
        both = seen["hosts read"] == 2 and before is not None and before["hosts read"] == 2
        row["served (metrics)"] = int(seen["requests"] - before["requests"]) if both else None
        row["5xx (metrics)"] = int(seen["5xx"] - before["5xx"]) if both else None
        row["LTC lag (metrics)"] = None if seen["watcher lag"] is None else int(seen["watcher lag"])
        log(f"{name}: " + ", ".join(f"{k} {v}" for k, v in row.items() if k in INVARIANTS))
        return row

    def requests_summarise(self, row: dict) -> None:
        """The phase's requests (those that started in it, however long they took): answered and
        failed; the longest stall (the longest time in the phase without a request succeeding);
        the longest request; recovery: from the fault to the end of the last stall over 2 s or
        the first success after the last failure, whichever is later."""
        start, end, fault_at = row["start"], row["end"], row["fault_at"]
        with self.samples_lock:
            samples = [s for s in self.samples if start <= s.start < end]
            ok_ends = sorted(s.end for s in self.samples if s.ok and start <= s.end <= end)
        failures = [s for s in samples if not s.ok]
        gaps = list(zip([start, *ok_ends], [*ok_ends, end], strict=False))
        bad_until = fault_at
        if fault_at is not None:
            for before, after in gaps:
                if after - before > 2 and after > fault_at:
                    bad_until = max(bad_until, after)
            if failures:
                last_fail = max(s.end for s in failures)
                bad_until = max(bad_until, next((t for t in ok_ends if t > last_fail), end))
        row.update(
            {
                "answered": sum(1 for s in samples if s.ok),
                "failed": len(failures),
                "statuses": sorted({s.status for s in failures}),
                "longest stall s": round(max((b - a for a, b in gaps), default=0.0), 1),
                "longest request s": round(max((s.end - s.start for s in samples), default=0.0), 1),
                "recovery s": round(bad_until - fault_at, 1) if fault_at is not None else None,
            }
        )

    def web1_cut(self) -> float:
        down = min(20.0, self.args.phase_seconds / 2)  # back well before the phase ends
        at = time.monotonic()
        run(["ip", "-n", PREFIX + "web1", "link", "set", "eth0", "down"])
        threading.Timer(down, lambda: run(["ip", "-n", PREFIX + "web1", "link", "set", "eth0", "up"])).start()
        log(f"web1: link down for {down:g} s")
        return at

    def work1_kill(self) -> float:
        work1 = self.procs["work1"]
        deadline = time.monotonic() + 90
        holder = None
        while time.monotonic() < deadline:
            owner = self.lease_owner()
            if owner and int(owner.split(":")[1]) in work1.pids():
                holder = owner
                break
            time.sleep(0.02)
        at = time.monotonic()
        work1.signal(signal.SIGKILL)
        self.procs["beat"].signal(signal.SIGKILL)  # the machine is lost: its beat with it
        log(
            f"work1: killed {'holding the lease (' + holder + ')' if holder else 'WITHOUT catching it holding the lease'}"
        )
        time.sleep(2)  # RestartSec=2
        self.procs["work1"] = Proc("work1", "work1", self.worker_command, self.env, self.tmp / "work1.log")
        self.procs["work1"].start()
        beat = self.procs["beat"]
        self.procs["beat"] = Proc("beat", "work1", beat.command, self.env, beat.log_path)
        self.procs["beat"].start()
        self.lease_moved = None
        while holder and time.monotonic() < at + LEASE_TTL + 40:
            owner = self.lease_owner()
            if owner and owner != holder:
                self.lease_moved = time.monotonic() - at
                pid = int(owner.split(":")[1])
                host = next((n for n in ("work1", "work2") if pid in self.procs[n].pids()), "?")
                log(f"lease moved after {self.lease_moved:.1f} s to {owner} ({host})")
                break
            time.sleep(0.5)
        return at

    def postgres_restart(self) -> float:
        at = time.monotonic()
        run(in_ns("db", [*self.pg_ctl, "-o", self.pg_options, "-m", "fast", "-w", "restart"]))
        log(f"PostgreSQL restarted in {time.monotonic() - at:.1f} s")
        return at

    def redis_restart(self) -> float:
        at = time.monotonic()
        self.procs["redis"].stop()
        self.redis_start()
        log(f"Redis restarted in {time.monotonic() - at:.1f} s")
        return at

    def edge_reload(self) -> float:
        at = time.monotonic()
        run(in_ns("edge", [*self.edge_command, "-s", "reload"]))
        log("edge: nginx reloaded")
        return at

    def drain(self) -> dict:
        self.stop_orders.set()
        log("drain: orders stopped; waiting for the paid invoices to settle (at most 120 s)")
        deadline = time.monotonic() + 120
        row = {}
        while time.monotonic() < deadline:
            row = self.invariants()
            pending = self.sql(
                """SELECT count(*) FROM billing_invoice i WHERE i.id = ANY(%s) AND i.status <> 'settled'""",
                ([p.invoice for p in self.paid],),
            )[0][0]
            if pending == 0:
                break
            time.sleep(5)
        row["paid invoices not settled"] = pending
        row["payments sent"] = len(self.paid)
        row["orders"] = self.sql("SELECT count(*) FROM rentals_order")[0][0]
        return row

    def run(self) -> list[dict]:
        self.setup()
        self.accounts_create()
        self.load_start()
        seconds = self.args.phase_seconds
        rows = [
            self.phase("baseline", seconds * 2 / 3),
            self.phase("web1 cut from the network, then back", seconds, self.web1_cut),
            self.phase("work1 killed holding the LTC lease", LEASE_TTL + 40, self.work1_kill),
            self.phase("PostgreSQL restarted", seconds, self.postgres_restart),
            self.phase("Redis restarted", seconds, self.redis_restart),
            self.phase("edge reloaded", seconds * 2 / 3, self.edge_reload),
        ]
        rows[2]["lease moved s"] = round(self.lease_moved, 1) if self.lease_moved else None
        final = self.drain()
        self.stop_load.set()
        for thread in self.threads:
            thread.join(45)  # a request in flight ends within its timeout (40 s)
        for row in rows:
            self.requests_summarise(row)
        self.report(rows, final)
        return [*rows, final]

    def report(self, rows: list[dict], final: dict) -> None:
        columns = [
            "answered",
            "failed",
            "longest stall s",
            "longest request s",
            "recovery s",
            "served (metrics)",
            "5xx (metrics)",
            "LTC lag (metrics)",
        ]
        checks = list(INVARIANTS)
        print()
        print("| phase | " + " | ".join(columns + checks) + " |")
        print("|---|" + "---:|" * (len(columns) + len(checks)))
        for row in rows:
            cells = ["-" if row[c] is None else str(row[c]) for c in columns + checks]
            print(f"| {row['phase']} | " + " | ".join(cells) + " |")
        print()
        for row in rows:
            if row["statuses"]:
                print(f"{row['phase']}: failed answers {row['statuses']} (0: no answer)")
        if rows[2].get("lease moved s") is not None:
            print(f"LTC watcher lease: moved {rows[2]['lease moved s']} s after work1 was killed (TTL {LEASE_TTL} s)")
        print("after the drain: " + json.dumps(final))

    def close(self) -> None:
        self.stop_load.set()
        self.stop_orders.set()
        for name in ["edge", "web1", "web2", "beat", "work1", "work2", "litecoind", "redis"]:
            if name in self.procs:
                self.procs[name].stop()
        with contextlib.suppress(Exception):
            if getattr(self, "pg_ctl", None):
                run([*self.pg_ctl, "-m", "immediate", "stop"], check=False)
        if self.args.keep_logs:
            target = Path(self.args.keep_logs)
            target.mkdir(parents=True, exist_ok=True)
            for path in [*self.tmp.glob("*.log"), self.tmp / "nginx" / "error.log", self.tmp / "env"]:
                with contextlib.suppress(OSError):
                    shutil.copy(path, target / path.name)
        network_remove()
        shutil.rmtree(self.tmp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phase-seconds", type=float, default=60, help="length of a fault phase (20 to 120)")
    parser.add_argument("--keep-logs", default="", help="copy the processes' logs and the env file here at the end")
    args = parser.parse_args()
    args.phase_seconds = min(max(args.phase_seconds, 20), 120)
    if os.geteuid() != 0:
        raise SystemExit("bench/cluster.py makes network namespaces: run it as root")
    cluster = Cluster(args)
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        rows = cluster.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
        log("cleaning up")
        cluster.close()
    broken = [row.get("phase", "after the drain") for row in rows if any(row.get(name) for name in BROKEN_IF_ANY)]
    if broken:
        print(f"invariants broken: {', '.join(broken)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
