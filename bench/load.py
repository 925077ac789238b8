"""Speed under load: every hot endpoint against a bare DRF view, side by side.

    make bench                                   # or: .venv/bin/python bench/load.py
    .venv/bin/python bench/load.py --duration 20 --connections 16 --rounds 5
    .venv/bin/python bench/load.py --only stock orders   # those rows and the bare view, nothing else
    .venv/bin/python bench/load.py --scale-out   # two gunicorn instances, two Celery workers, one database

What it does, in order, and undoes when it ends (also on Ctrl-C):
1. creates a throwaway PostgreSQL database beside the one named by --postgres
   (a server URL; the database in it is not touched), migrates it and loads the
   catalog; every GPU slot is made free so the order run does not run dry;
2. makes 8 accounts with an API token and an SSH key, and enables BTC, LTC and
   ETH with watch-only keys generated for the run (fixed exchange rates);
3. starts gunicorn with the production settings (deploy/gunicorn.conf.py) on
   loopback; its settings add one URL, /bench/bare, a bare Django REST framework
   view serving a static 15-item list (bench/bench_settings.py);
4. drives each endpoint with wrk (Debian package `wrk`) for --duration seconds
   at --connections connections, orders rotating the 8 accounts, every card with
   stock in every region and three currencies, and reads the whole machine's
   CPU time per answer (/proc/stat);
5. checks that nothing was oversold: every order holds exactly its count of
   slots, every host's free count matches its slots;
6. does 3 to 5 --rounds times (a fresh server and freed stock each time) and
   keeps each endpoint's median round: a shared machine's speed drifts from one
   minute to the next, and the ratio to the bare view of the same round much less;
7. runs pgbench (TPC-B) on another throwaway database for the database's ceiling;
8. serves 50,000 mixed requests from one worker that is never recycled and
   reads its resident memory after 10,000 and after 50,000;
9. prints one table: requests/s, p50, p99, errors, the ratio to the bare view
   and the machine's CPU per request.

--scale-out runs the order load against one gunicorn instance, then against
two at once (two Celery workers beside them, one database), and prints both
with the same oversell check. Each instance runs one web worker
(--scale-out-workers): on one machine the instances share its cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
RATES = "BTC=95000,ETH=3500,USDT=1,USDC=1,XMR=180,SOL=150,LTC=90"
ACCOUNTS = 8
CURRENCIES = ("LTC", "BTC", "ETH")
QUOTE = {"gpu": "h100-sxm", "gpu_count": 8, "term": "monthly"}
RECOMMEND = {"model": "llama-3.1-70b", "precision": "fp8", "context": 8192, "concurrency": 8, "region": "DFW-1"}
# Recommendations no worker has answered before (each body once in a run): RECOMMEND
# for these models at every concurrency up to RECOMMEND_NEW_CONCURRENCY.
RECOMMEND_NEW_MODELS = ("llama-3.1-8b", "llama-3.1-70b", "qwen3-32b", "mixtral-8x7b", "llama-4-scout", "qwen2.5-14b")
RECOMMEND_NEW_CONCURRENCY = 500
MEMORY_REQUESTS = 50_000  # a worker's memory is read after 10,000 requests (MEMORY_CHECKPOINT) and after these
MEMORY_CHECKPOINT = 10_000

# wrk's Lua side: cycle through prepared requests, count answers by kind, stop
# a thread after `limit` answers when one is set, print one JSON line at the end.
LUA = r"""
local specs = {SPECS}
local reqs = {}
local threads = {}
counter = 0
ok, stock, other, limit = 0, 0, 0, 0

function setup(thread)
  thread:set("counter", #threads * 7919)
  thread:set("limit", {LIMIT})
  table.insert(threads, thread)
end

function init(args)
  for i, s in ipairs(specs) do
    reqs[i] = wrk.format(s[1], s[2], s[3], s[4])
  end
end

function request()
  counter = counter + 1
  return reqs[(counter % #reqs) + 1]
end

function response(status, headers, body)
  if status < 400 then
    ok = ok + 1
  elseif status == 409 and body ~= nil and string.find(body, "insufficient_stock", 1, true) then
    stock = stock + 1
  else
    other = other + 1
  end
  if limit > 0 and ok + stock + other >= limit then
    wrk.thread:stop()
  end
end

function done(summary, latency, requests)
  local o, s, x = 0, 0, 0
  for _, t in ipairs(threads) do
    o = o + t:get("ok"); s = s + t:get("stock"); x = x + t:get("other")
  end
  local e = summary.errors
  io.write(string.format(
    'BENCH {"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, "ok": %d, "stock": %d, "other": %d, "socket_errors": %d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), o, s, x,
    e.connect + e.read + e.write + e.timeout))
end
"""


def lua_string(value: str) -> str:
    return "[==[" + value + "]==]"


def lua_script(requests: list[tuple[str, str, dict, str]], limit: int = 0) -> str:
    specs = []
    for method, path, headers, body in requests:
        pairs = ", ".join(f"[ {lua_string(k)} ] = {lua_string(v)}" for k, v in headers.items())
        specs.append(
            f"{{{lua_string(method)}, {lua_string(path)}, {{{pairs}}}, {lua_string(body) if body else 'nil'}}}"
        )
    return LUA.replace("{SPECS}", "{" + ",\n".join(specs) + "}").replace("{LIMIT}", str(limit))


def get(path: str) -> tuple[str, str, dict, str]:
    return ("GET", path, {}, "")


def post(path: str, body: dict, token: str | None = None) -> tuple[str, str, dict, str]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return ("POST", path, headers, json.dumps(body))


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="grh-bench-"))
        self.processes: list[subprocess.Popen] = []
        suffix = f"{os.getpid()}_{secrets.token_hex(3)}"
        self.db_name = f"grh_bench_{suffix}"
        self.pgbench_db = f"grh_pgbench_{suffix}"
        self.created_dbs: list[str] = []
        server = urlsplit(args.postgres)
        self.server = server
        self.db_url = urlunsplit(server._replace(path=f"/{self.db_name}"))
        self.env = self._environment()

    # --- set-up and clean-up ------------------------------------------------------

    def _environment(self) -> dict[str, str]:
        from bip_utils import Bip39MnemonicGenerator, Bip39SeedGenerator, Bip44, Bip44Coins, Bip84, Bip84Coins

        seed = Bip39SeedGenerator(Bip39MnemonicGenerator().FromWordsNumber(12)).Generate()

        def account_pub(cls, coin) -> str:
            return cls.FromSeed(seed, coin).Purpose().Coin().Account(0).PublicKey().ToExtended()

        env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DEBUG"))}
        env.update(
            PYTHONPATH=f"{ROOT / 'bench'}{os.pathsep}{ROOT}",
            DATABASE_URL=self.db_url,
            CACHE_URL=self.args.cache_url,
            CELERY_BROKER_URL=self.args.broker_url,
            SECRET_KEY=secrets.token_urlsafe(48),
            ALLOWED_HOSTS="127.0.0.1,localhost",
            SITE_URL="http://127.0.0.1",  # production settings want it; the answers measured carry no links
            SECURE_SSL_REDIRECT="false",
            LOG_LEVEL="WARNING",
            # The memory reading counts requests answered from /metrics (gunicorn writes no access log).
            METRICS_TOKEN=METRICS_TOKEN,
            DATA_DIR=str(self.tmp / "data"),
            STATIC_ROOT=str(self.tmp / "static"),
            MANUAL_RATES_USD=RATES,
            # Eight accounts place thousands of orders here: the unpaid cap (an abuse limit, tested
            # in tests/rentals/test_unpaid.py) would refuse all but the first few of each.
            UNPAID_ORDERS_MAX="1000000",
            UNPAID_GPUS_MAX="1000000",
            UNPAID_HOLD_SHARE_PCT="100",  # nor the share of a card's stock one account may hold
            # The new-workload row asks dozens of new recommendations a second from one address.
            SIZING_NEW_PER_ADDRESS="0",
            # Each account orders from its own address, as clients do (X-Forwarded-For, as nginx sets it):
            # orders from one address are counted one after another (rentals/services/unpaid.py).
            TRUSTED_PROXY_COUNT="1",
            BTC_XPUB=account_pub(Bip84, Bip84Coins.BITCOIN),
            LTC_XPUB=account_pub(Bip84, Bip84Coins.LITECOIN),
            ETH_XPUB=account_pub(Bip44, Bip44Coins.ETHEREUM),
        )
        return env

    def _admin(self, sql: str) -> None:
        import psycopg

        url = urlunsplit(self.server._replace(path="/postgres"))
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql)

    def create_db(self, name: str) -> None:
        self._admin(f'CREATE DATABASE "{name}"')
        self.created_dbs.append(name)

    def prepare(self) -> None:
        say(f"database {self.db_name}: migrate, load the catalog")
        self.create_db(self.db_name)
        manage = [PYTHON, str(ROOT / "manage.py")]
        env = self.env | {"DJANGO_SETTINGS_MODULE": "config.settings"}
        for command in (["migrate", "-v0"], ["seed_catalog"], ["collectstatic", "--noinput", "-v0"]):
            subprocess.run(manage + command, env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        os.environ.update(env)
        sys.path.insert(0, str(ROOT))
        import django

        django.setup()
        self.tokens, self.keys = self._accounts()
        self.combos = self._combos()

    def _accounts(self) -> tuple[list[str], list[int]]:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519

        from accounts.services import account_create, ssh_key_add

        tokens, keys = [], []
        for n in range(ACCOUNTS):
            made = account_create(username=f"bench{n}", password=secrets.token_urlsafe(16))
            public = ed25519.Ed25519PrivateKey.generate().public_key()
            line = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
            tokens.append(made.token.raw)
            keys.append(ssh_key_add(account=made.account, public_key=line, name="bench").pk)
        return tokens, keys

    def _combos(self) -> list[tuple[str, str]]:
        """Every (region, card) with stock that takes a 1-GPU order, after every slot is freed."""
        from catalog.models import Slot, SlotStatus
        from catalog.selectors import stock

        Slot.objects.exclude(status=SlotStatus.OUT_OF_SERVICE).update(status=SlotStatus.FREE, holder="")
        from catalog.models import GpuModel

        single = set(GpuModel.objects.filter(is_active=True, min_gpus=1).values_list("slug", flat=True))
        return [(r.region, r.gpu) for r in stock() if r.available and r.gpu in single]

    def cleanup(self) -> None:
        for proc in self.processes:
            stop(proc)
        try:
            from django.db import connections

            connections.close_all()
        except Exception:
            pass
        for name in self.created_dbs:
            try:
                self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except Exception as exc:
                say(f"could not drop {name}: {exc}")
        shutil.rmtree(self.tmp, ignore_errors=True)

    # --- processes ------------------------------------------------------------------

    def gunicorn(self, port: int, *extra: str) -> subprocess.Popen:
        log = open(self.tmp / f"gunicorn-{port}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [
                PYTHON,
                "-m",
                "gunicorn",
                "-c",
                str(ROOT / "deploy" / "gunicorn.conf.py"),
                "--bind",
                f"127.0.0.1:{port}",
                "--no-control-socket",  # one per user by default: two instances would share it
                *extra,
                "config.wsgi:application",
            ],
            env=self.env | {"DJANGO_SETTINGS_MODULE": "bench_settings"},
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(proc)
        wait_http(f"http://127.0.0.1:{port}/bench/bare", proc)
        return proc

    def celery_worker(self, name: str) -> subprocess.Popen:
        log = open(self.tmp / f"celery-{name}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [PYTHON, "-m", "celery", "-A", "config", "worker", "-n", f"{name}@%h", "-c", "1", "--loglevel", "INFO"],
            env=self.env | {"DJANGO_SETTINGS_MODULE": "config.settings"},
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(proc)
        return proc

    def celery_ready(self, names: list[str], timeout: float = 180) -> None:
        """Wait until each worker says it is ready: a worker's start (the app's imports) costs seconds of
        CPU, which would otherwise be counted against the first run."""
        deadline = time.monotonic() + timeout
        for name in names:
            log = self.tmp / f"celery-{name}.log"
            while b" ready." not in log.read_bytes():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"celery worker {name} not ready after {timeout:g} s: see {log}")
                time.sleep(0.2)

    # --- load ---------------------------------------------------------------------

    def order_requests(self) -> list[tuple[str, str, dict, str]]:
        out = []
        for n, (region, gpu) in enumerate(self.combos):
            for a in range(ACCOUNTS):
                body = {
                    "region": region,
                    "gpu": gpu,
                    "gpu_count": 1,
                    "term": "weekly",
                    "terms": 1,
                    "template": "ubuntu-24.04",
                    "addons": [],
                    "ssh_keys": [self.keys[a]],
                    "pay_currency": CURRENCIES[(n + a) % len(CURRENCIES)],
                }
                request = post("/api/v1/orders", body, token=self.tokens[a])
                request[2]["X-Forwarded-For"] = f"198.51.100.{a + 1}"
                out.append(request)
        return out

    def order_placer(self):
        """A function placing n of order_requests() in this process, through Django's test client (the
        whole middleware, authentication, DRF and database-client path), for bench/order_cpu.py and
        bench/order_instructions.py; a refused order stops the run."""
        from django.test import Client

        client = Client(HTTP_HOST="127.0.0.1")
        requests = self.order_requests()

        def place(n: int) -> None:
            for i in range(n):
                _, path, headers, body = requests[(i * 7) % len(requests)]
                response = client.post(
                    path, data=body, content_type="application/json", HTTP_AUTHORIZATION=headers["Authorization"]
                )
                if response.status_code != 201:
                    raise SystemExit(f"order refused: {response.status_code} {response.content[:300]!r}")

        return place

    def endpoints(self) -> list[tuple[str, list]]:
        return [
            ("bare DRF view", [get("/bench/bare")]),
            ("GET /catalog/gpus", [get("/api/v1/catalog/gpus")]),
            ("GET /catalog/stock?region=DFW-1", [get("/api/v1/catalog/stock?region=DFW-1")]),
            ("POST /pricing/quote", [post("/api/v1/pricing/quote", QUOTE)]),
            ("POST /sizing/recommend", [post("/api/v1/sizing/recommend", RECOMMEND)]),
            ("POST /orders (1 GPU, 8 accounts, every card)", self.order_requests()),
            # Last: the answers it leaves kept in each worker would weigh on the rows after it.
            (
                "POST /sizing/recommend, a new workload each time",
                [
                    post("/api/v1/sizing/recommend", RECOMMEND | {"model": model, "concurrency": c})
                    for c in range(1, RECOMMEND_NEW_CONCURRENCY + 1)
                    for model in RECOMMEND_NEW_MODELS
                ],
            ),
        ]

    def wrk(self, port: int, requests: list, duration: float, connections: int, limit: int = 0) -> dict:
        script = self.tmp / f"wrk-{secrets.token_hex(4)}.lua"
        threads = min(2, connections)
        script.write_text(lua_script(requests, limit=limit // threads if limit else 0))
        busy_before = machine_busy_seconds()
        out = subprocess.run(
            [
                "wrk",
                "-t",
                str(threads),
                "-c",
                str(connections),
                "-d",
                f"{int(duration)}s",
                "--timeout",
                "10s",
                "-s",
                str(script),
                f"http://127.0.0.1:{port}",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        line = next(x for x in out.splitlines() if x.startswith("BENCH "))
        result = json.loads(line[len("BENCH ") :])
        result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
        # Every process's CPU (web, database, wrk, the kernel) per answer: what one
        # request costs the machine, whatever the machine's size.
        result["cpu_ms"] = (machine_busy_seconds() - busy_before) * 1000 / max(result["requests"], 1)
        return result

    def pgbench(self) -> float:
        self.create_db(self.pgbench_db)
        url = urlunsplit(self.server._replace(path=f"/{self.pgbench_db}"))
        subprocess.run(["pgbench", "-i", "-q", "-s", "10", url], check=True, capture_output=True)
        out = subprocess.run(
            ["pgbench", "-c", str(self.args.connections), "-j", "2", "-T", str(int(self.args.duration)), url],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        match = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out) or re.search(
            r"tps = ([\d.]+)", out
        )
        return float(match.group(1)) if match else float("nan")

    def memory_after(self, port: int) -> list[tuple[int, float]]:
        """Resident MB of one worker (never recycled) as it passes 10,000
        mixed requests and --memory-requests, counted from its /metrics."""
        proc = self.gunicorn(port, "--workers", "1", "--max-requests", "0")
        reads = [
            get("/api/v1/catalog/gpus"),
            get("/api/v1/catalog/stock?region=DFW-1"),
            post("/api/v1/pricing/quote", QUOTE),
            post("/api/v1/sizing/recommend", RECOMMEND),
        ]
        mixed = reads * 4 + self.order_requests()[:: max(1, len(self.order_requests()) // 2)][:2]
        script = self.tmp / "wrk-memory.lua"
        script.write_text(lua_script(mixed))
        load = subprocess.Popen(
            [
                "wrk",
                "-t",
                "2",
                "-c",
                "8",
                "-d",
                "600s",
                "--timeout",
                "10s",
                "-s",
                str(script),
                f"http://127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.processes.append(load)
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        checkpoints = sorted({min(MEMORY_CHECKPOINT, self.args.memory_requests), self.args.memory_requests})
        readings: list[tuple[int, float]] = []
        served, deadline = 0, time.monotonic() + 600
        while checkpoints and time.monotonic() < deadline and load.poll() is None:
            time.sleep(0.5)  # a count the server keeps: nothing to wait on but time
            served = requests_answered(port)
            while checkpoints and served >= checkpoints[0]:
                checkpoints.pop(0)
                readings.append((served, max(rss_mb(int(pid)) for pid in children)))
        stop(load)
        for p in (load, proc):
            stop(p)
            self.processes.remove(p)
        return readings

    # --- checks ----------------------------------------------------------------------

    def oversold(self) -> list[str]:
        """What is wrong with the reservations, if anything: read in one
        snapshot (REPEATABLE READ), as orders still in flight may commit meanwhile."""
        from django.db import connection, transaction

        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            return self._oversold()

    def _oversold(self) -> list[str]:
        from django.db.models import Count, Q

        from catalog.models import Host, Slot, SlotStatus
        from rentals.models import Order

        problems = []
        held = dict(
            Slot.objects.filter(holder__startswith="order:")
            .values_list("holder")
            .annotate(n=Count("id"))
            .values_list("holder", "n")
        )
        for order_id, count in Order.objects.values_list("id", "gpu_count"):
            if held.get(f"order:{order_id}", 0) != count:
                problems.append(f"order {order_id} holds {held.get(f'order:{order_id}', 0)} slots, not {count}")
        if len(held) != Order.objects.count():
            problems.append(f"{len(held)} holders of slots, {Order.objects.count()} orders")
        counted = Host.objects.annotate(n=Count("slots", filter=Q(slots__status=SlotStatus.FREE)))
        problems += [f"host {h.name}: free_slots {h.free_slots}, {h.n} free" for h in counted if h.n != h.free_slots]
        return problems

    def orders_made(self) -> int:
        from rentals.models import Order

        return Order.objects.count()

    def stock_reset(self) -> None:
        from billing.models import Invoice
        from catalog.models import Slot, SlotStatus
        from rentals.models import Order

        Slot.objects.exclude(status=SlotStatus.OUT_OF_SERVICE).update(status=SlotStatus.FREE, holder="")
        Order.objects.update(invoice=None)
        Order.objects.all().delete()
        Invoice.objects.all().delete()

    # --- runs ---------------------------------------------------------------------------

    def run(self) -> int:
        port = self.args.port
        only = self.args.only
        endpoints = [
            (name, requests)
            for name, requests in self.endpoints()
            if not only or name == "bare DRF view" or any(word in name for word in only)
        ]
        rounds: list[list[tuple[str, dict]]] = []
        problems: list[str] = []
        made: list[int] = []
        replaced = died = 0
        for k in range(self.args.rounds):
            if k:
                self.stock_reset()  # every round orders from the same stock
            self.gunicorn(port)
            rows = []
            for name, requests in endpoints:
                say(
                    f"round {k + 1}/{self.args.rounds}, {name}: {self.args.duration:g} s at {self.args.connections} connections"
                )
                rows.append((name, self.wrk(port, requests, self.args.duration, self.args.connections)))
            log = (self.tmp / f"gunicorn-{port}.log").read_bytes()
            # Read from what the master and the workers log (the order of the first workers' boot lines
            # and the first answers is a race, so boot lines are not counted).
            replaced += log.count(b"Autorestarting worker")
            died += sum(log.count(m) for m in (b"WORKER TIMEOUT", b"exited with code", b"Perhaps out of memory"))
            for proc in self.processes:  # a graceful stop: the orders still in flight finish first
                stop(proc)
            self.processes.clear()
            made.append(self.orders_made())
            problems += [f"round {k + 1}: {p}" for p in self.oversold()]
            rounds.append(rows)
        rows = median_rows(rounds)
        orders = next((row for name, row in rows if name.startswith("POST /orders")), None)
        print()
        print(machine())
        print(f"wrk, {self.args.connections} connections, {self.args.duration:g} s per endpoint, gunicorn ", end="")
        print("deploy/gunicorn.conf.py (gthread), PostgreSQL on loopback")
        if len(rounds) > 1:
            print(
                f"{len(rounds)} rounds; each row is the endpoint's median round by its ratio to that round's bare view"
            )
        print()
        print(table(rows, 0))
        if len(rounds) > 1:
            print()
            print("round by round (vs bare, requests/s, p99):")
            for i, (name, _) in enumerate(rounds[0]):
                each = [
                    f"{ratio(r[i][1], r[0][1]):.2f}, {r[i][1]['rps']:,.0f}/s, {ms(r[i][1]['p99_us'])}" for r in rounds
                ]
                print(f"- {name}: " + "; ".join(each))
        print(f"web workers replaced during the runs: {replaced} after max_requests, {died} after a crash or timeout")
        print()
        if orders:
            print(
                f"orders (median round): {orders['ok']:,} placed, {orders['stock']:,} insufficient_stock, ",
                end="",
            )
            print(f"{orders['other']:,} other errors; orders in the database after each round: ", end="")
            print(f"{', '.join(f'{n:,}' for n in made)}; oversold: {'no' if not problems else 'YES'}")
        for p in problems[:20]:
            print("  ", p)
        sys.stdout.flush()
        if only:
            return 1 if problems else 0
        say("pgbench (TPC-B)")
        tps = self.pgbench()
        print(f"pgbench TPC-B, {self.args.connections} clients: {tps:,.0f} transactions/s", flush=True)
        readings = self.memory_after(port + 1)
        said = ", ".join(f"{rss:.0f} MB after {served:,} requests" for served, rss in readings)
        print(f"web worker resident memory: {said or 'not read (the load stopped early)'}")
        return 1 if problems else 0

    def run_scale_out(self) -> int:
        port = self.args.port
        # One web worker per instance: on one machine the instances share its cores, and two instances of
        # a worker per core would only split them; an instance of one worker leaves the second one a core.
        workers_each = ("--workers", str(self.args.scale_out_workers))
        a = self.gunicorn(port, *workers_each)
        b = self.gunicorn(port + 1, *workers_each)
        workers = [self.celery_worker("bench1"), self.celery_worker("bench2")]
        self.celery_ready(["bench1", "bench2"])
        orders = self.order_requests()
        d, c = self.args.duration, self.args.connections
        say(f"orders on one instance: {d:g} s at {c} connections")
        one = self.wrk(port, orders, d, c)
        for proc in (a, b):  # a graceful stop lets the orders in flight finish before the check
            stop(proc)
            self.processes.remove(proc)
        made_one, problems = self.orders_made(), self.oversold()
        self.stock_reset()
        a, b = self.gunicorn(port, *workers_each), self.gunicorn(port + 1, *workers_each)
        say(f"orders on two instances at once: {d:g} s at {c} connections each")
        procs = []
        for p in (port, port + 1):
            script = self.tmp / f"wrk-{p}.lua"
            script.write_text(lua_script(orders))
            procs.append(
                subprocess.Popen(
                    [
                        "wrk",
                        "-t",
                        "2",
                        "-c",
                        str(c),
                        "-d",
                        f"{int(d)}s",
                        "--timeout",
                        "10s",
                        "-s",
                        str(script),
                        f"http://127.0.0.1:{p}",
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        both = []
        for proc in procs:
            out, _ = proc.communicate()
            line = next(x for x in out.splitlines() if x.startswith("BENCH "))
            r = json.loads(line[len("BENCH ") :])
            r["rps"] = r["requests"] / (r["duration_us"] / 1e6)
            both.append(r)
        for proc in (a, b):
            stop(proc)
        made_two, problems_two = self.orders_made(), self.oversold()
        alive = sum(1 for w in workers if w.poll() is None)
        for proc in (a, b, *workers):
            stop(proc)
        self.processes.clear()
        print()
        print(machine())
        print(
            f"scale-out: POST /orders, {c} connections per instance, {self.args.scale_out_workers} web worker(s) "
            f"per instance, {d:g} s; {alive} Celery workers running"
        )
        rows = [("one instance", one), ("instance A (of two)", both[0]), ("instance B (of two)", both[1])]
        total = {k: sum(r[k] for r in both) for k in ("requests", "ok", "stock", "other", "socket_errors", "rps")} | {
            "p50_us": max(r["p50_us"] for r in both),
            "p99_us": max(r["p99_us"] for r in both),
        }
        rows.append(("two instances together", total))
        print(table(rows, one["rps"], ratio_label="vs one"))
        bad = problems + problems_two
        print(f"orders placed: one instance {made_one:,}, two instances {made_two:,}; oversold: ", end="")
        print("no" if not bad else "YES")
        for p in bad[:20]:
            print("  ", p)
        return 1 if bad else 0


# --- helpers ------------------------------------------------------------------------------


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


METRICS_TOKEN = secrets.token_hex(32)


def requests_answered(port: int) -> int:
    """Requests the server on `port` has answered but its own scrapes (/metrics, one process)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        text = resp.read().decode()
    return sum(
        int(float(match.group(2)))
        for match in re.finditer(r"^gpurenthub_http_requests_total\{([^}]*)\} (\S+)$", text, re.M)
        if 'route="metrics"' not in match.group(1)
    )


def wait_http(url: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}); see its log")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)  # polling a server that is starting: nothing to wait on but its port
    raise RuntimeError(f"{url} did not answer within {timeout:g} s")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def machine() -> str:
    cpu = next(
        (x.split(":", 1)[1].strip() for x in Path("/proc/cpuinfo").read_text().splitlines() if "model name" in x),
        "unknown CPU",
    )
    load = os.getloadavg()
    return f"machine: {os.cpu_count()} cores ({cpu}); load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"


def machine_busy_seconds() -> float:
    """CPU seconds all cores have spent on anything but idling, since boot (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def ms(us: float) -> str:
    return f"{us / 1000:,.1f} ms" if us < 1_000_000 else f"{us / 1e6:,.2f} s"


def ratio(row: dict, bare: dict) -> float:
    return row["rps"] / bare["rps"] if bare["rps"] else float("nan")


def median_rows(rounds: list[list[tuple[str, dict]]]) -> list[tuple[str, dict]]:
    """One row per endpoint: its median round, by its ratio to that round's bare
    view (the machine's speed drifts between minutes; the ratio much less)."""
    out = []
    for i, (name, _) in enumerate(rounds[0]):
        ranked = sorted(
            ((rows[i][1]["rps"] if i == 0 else ratio(rows[i][1], rows[0][1]), rows) for rows in rounds),
            key=lambda pair: pair[0],
        )
        value, rows = ranked[len(ranked) // 2]
        out.append((name, rows[i][1] | {"ratio": 1.0 if i == 0 else value}))
    return out


def table(rows: list[tuple[str, dict]], bare: float, ratio_label: str = "vs bare") -> str:
    head = f"| endpoint | requests/s | p50 | p99 | errors | {ratio_label} | machine CPU per request |"
    lines = [head, "|---|---:|---:|---:|---|---:|---:|"]
    for name, r in rows:
        errors = f"{r['other'] + r['socket_errors']:,}"
        if r["stock"]:
            errors += f" (+{r['stock']:,} insufficient_stock)"
        ratio = r["ratio"] if "ratio" in r else (r["rps"] / bare if bare else float("nan"))
        cpu = f"{r['cpu_ms']:.2f} ms" if "cpu_ms" in r else "-"
        lines.append(
            f"| {name} | {r['rps']:,.0f} | {ms(r['p50_us'])} | {ms(r['p99_us'])} | {errors} | {ratio:.2f} | {cpu} |"
        )
    return "\n".join(lines)


def setup_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the throwaway database, the cache and the broker are: for every script that sets up as this one."""
    parser.add_argument(
        "--postgres",
        default=os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres"),
        help="a PostgreSQL server URL (its throwaway databases are made and dropped beside the one named)",
    )
    parser.add_argument("--cache-url", default=os.environ.get("CACHE_URL", "locmemcache://"))
    parser.add_argument("--broker-url", default=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15"))


def run_prepared(doc: str, arguments, measure) -> int:
    """For a script that measures one thing on this set-up (bench/order_cpu.py,
    bench/unpaid_check.py): its arguments beside setup_arguments (`arguments`
    adds them to the parser), the throwaway database prepared, `measure(bench,
    args)` run, the machine printed, and the database dropped at the end."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    setup_arguments(parser)
    arguments(parser)
    args = parser.parse_args()
    bench = Bench(args)
    try:
        bench.prepare()
        measure(bench, args)
        print(machine())
        return 0
    finally:
        bench.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    setup_arguments(parser)
    parser.add_argument("--duration", type=float, default=10, help="seconds per endpoint (at most 60)")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="measure every endpoint this many times (the stock is reset between rounds) and report the median",
    )
    parser.add_argument("--port", type=int, default=int(os.environ.get("BENCH_PORT", "8141")))
    parser.add_argument(
        "--memory-requests", type=int, default=MEMORY_REQUESTS, help="served before reading a worker's memory"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="WORD",
        help="measure only the endpoints whose row names a WORD (e.g. stock orders) beside the bare view; "
        "skips pgbench and the memory run",
    )
    parser.add_argument("--scale-out", action="store_true", help="two gunicorn instances and two Celery workers")
    parser.add_argument(
        "--scale-out-workers",
        type=int,
        default=1,
        help="web workers per instance in --scale-out (default 1: the two instances share this machine's cores)",
    )
    args = parser.parse_args()
    args.duration = min(args.duration, 60)
    args.rounds = max(1, min(args.rounds, 9))
    if shutil.which("wrk") is None:
        print("wrk is missing: apt-get install wrk (Debian package)", file=sys.stderr)
        return 2
    if shutil.which("pgbench") is None and not args.scale_out:
        print("pgbench is missing: apt-get install postgresql-client", file=sys.stderr)
        return 2
    bench = Bench(args)

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    try:
        bench.prepare()
        return bench.run_scale_out() if args.scale_out else bench.run()
    except KeyboardInterrupt:
        say("interrupted: cleaning up")
        return 130
    finally:
        bench.cleanup()


if __name__ == "__main__":
    sys.exit(main())
