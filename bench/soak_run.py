"""A long run of `make run` with payments: does the embedded default stay up?

Starts `manage.py serve_local` (what `make run` starts: SQLite, the SQLite broker, the
sandboxes, web, worker and beat) in a fresh data folder on a free loopback port, then, every
`--interval` seconds until `--minutes` have passed: orders one GPU of
the card with the most free stock (currencies in turn: LTC, ETH, USDT, USDC, XMR, SOL), pays the
invoice with `sandbox_pay --confirm` and waits for the order to be paid (one account places them all:
sign-ups from one address are throttled). Each minute it samples
the memory of every process under the server and whether any of them was restarted. At the end it
prints one line per payment and a summary, and exits 1 if a payment did not settle, the server
stopped answering, or a process exited.

    .venv/bin/python bench/soak_run.py --minutes 125 --interval 240

Loopback only; it stops by itself after `--minutes` (and the server with it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = str(ROOT / ".venv" / "bin" / "python")
CURRENCIES = ("LTC", "ETH", "USDT", "USDC", "XMR", "SOL")
NOT_MAKE_RUN = ("DATABASE_URL", "CACHE_URL", "CELERY_BROKER_URL", "TEST_REDIS_URL", "DJANGO_SETTINGS_MODULE")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def call(base: str, method: str, path: str, body: dict | None = None, token: str | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def tree_rss_mb(pid: int) -> dict[str, float]:
    """Resident memory of `pid` and every process under it, by command name (MB)."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid=,rss=,comm="], capture_output=True, text=True).stdout
    rows = [line.split(None, 3) for line in out.splitlines() if line.strip()]
    children: dict[int, list[tuple[int, int, str]]] = {}
    for p, pp, rss, comm in rows:
        children.setdefault(int(pp), []).append((int(p), int(rss), comm))
    totals: dict[str, float] = {}
    stack = [pid]
    while stack:
        for p, rss, comm in children.get(stack.pop(), []):
            totals[comm] = totals.get(comm, 0.0) + rss / 1024
            stack.append(p)
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=125.0)
    parser.add_argument("--interval", type=float, default=240.0, help="seconds between orders")
    parser.add_argument("--out", help="write the summary as JSON here")
    args = parser.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="soak-"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {key: value for key, value in os.environ.items() if key not in NOT_MAKE_RUN}
    env |= {"DEBUG": "1", "DATA_DIR": str(data_dir / "data"), "PYTHONUNBUFFERED": "1"}
    log_path = data_dir / "serve_local.log"
    started = time.monotonic()
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [PY, "manage.py", "serve_local", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    payments: list[dict] = []
    samples: list[dict] = []
    failures: list[str] = []
    try:
        while True:
            try:
                if call(base, "GET", "/healthz")[0] == 200:
                    break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() - started > 600:
                failures.append("the server did not answer within 600 s")
                raise SystemExit
            time.sleep(1)
        print(f"answering after {time.monotonic() - started:.0f} s; log {log_path}", flush=True)
        deadline = started + args.minutes * 60
        next_order = time.monotonic() + 60  # let ETH and XMR come up first
        next_sample = time.monotonic()
        index = 0
        who = customer(base, failures)
        while who is not None and time.monotonic() < deadline:
            if server.poll() is not None:
                failures.append(f"serve_local exited with {server.returncode}")
                break
            now = time.monotonic()
            if now >= next_sample:
                try:
                    healthy = call(base, "GET", "/healthz")[0] == 200
                except OSError:
                    healthy = False
                if not healthy:
                    failures.append(f"/healthz did not answer 200 at {(now - started) / 60:.1f} min")
                samples.append({"minute": round((now - started) / 60, 1), "rss_mb": tree_rss_mb(server.pid)})
                next_sample = now + 60
            if now >= next_order:
                payments.append(pay_one(base, env, CURRENCIES[index % len(CURRENCIES)], who, started, failures))
                print(json.dumps(payments[-1]), flush=True)
                index += 1
                next_order = now + args.interval
            time.sleep(2)
    except SystemExit:
        pass
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGINT)
            try:
                server.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
    log_text = log_path.read_text(errors="replace")
    restarts = [line for line in log_text.splitlines() if " exited with " in line]
    failures += [f"a process was restarted: {line}" for line in restarts]
    broker = sorted((data_dir / "data").glob("*broker*"))
    summary = {
        "minutes": round((time.monotonic() - started) / 60, 1),
        "payments": len(payments),
        "settled": sum(1 for p in payments if p["paid"]),
        "by_currency": {c: sum(1 for p in payments if p["currency"] == c and p["paid"]) for c in CURRENCIES},
        "seconds_to_paid_max": max((p["seconds_to_paid"] for p in payments if p["paid"]), default=None),
        "rss_mb_first": samples[0]["rss_mb"] if samples else {},
        "rss_mb_last": samples[-1]["rss_mb"] if samples else {},
        "broker_bytes": {b.name: b.stat().st_size for b in broker},
        "log_bytes": log_path.stat().st_size,
        "failures": failures,
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "payments": payments, "samples": samples}, indent=1))
    return 1 if failures or len(payments) == 0 else 0


def ssh_public_key() -> str:
    """A fresh ed25519 public key in OpenSSH form (the private half is thrown away)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    public = Ed25519PrivateKey.generate().public_key()
    return public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


def customer(base: str, failures: list[str]) -> tuple[str, int] | None:
    """A new account with an SSH key: (its token, the key's id). One serves the whole run (sign-ups
    from one address are throttled; paid orders do not count against its unpaid caps)."""
    status, signup = call(
        base,
        "POST",
        "/api/v1/accounts",
        {"username": f"soak{int(time.time())}", "password": "violet-harbour-lantern-93"},
    )
    if status != 201:
        failures.append(f"sign-up answered {status}: {signup}")
        return None
    token = signup["token"]
    status, key = call(
        base, "POST", "/api/v1/account/ssh-keys", {"name": "soak", "public_key": ssh_public_key()}, token
    )
    if status != 201:
        failures.append(f"ssh key answered {status}: {key}")
        return None
    return token, key["id"]


def pay_one(base: str, env: dict, currency: str, who: tuple[str, int], started: float, failures: list[str]) -> dict:
    """One order in `currency`, paid by the sandbox; how long until the order is paid."""
    record: dict = {"minute": round((time.monotonic() - started) / 60, 1), "currency": currency, "paid": False}
    token, key_id = who
    _, stock = call(base, "GET", "/api/v1/catalog/stock")
    rows = stock if isinstance(stock, list) else stock.get("results", [])
    best = max(rows, key=lambda row: row["available"])
    status, order = call(
        base,
        "POST",
        "/api/v1/orders",
        {
            "region": best["region"],
            "gpu": best["gpu"],
            "gpu_count": 1,
            "term": "monthly",
            "terms": 1,
            "template": "vllm-0.9-ubuntu-24.04",
            "ssh_keys": [key_id],
            "pay_currency": currency,
        },
        token,
    )
    if status != 201:
        failures.append(f"order answered {status}: {order}")
        return record
    record |= {
        "order": order["id"],
        "invoice": order["invoice"]["number"],
        "gpu": best["gpu"],
        "region": best["region"],
    }
    paid_at = time.monotonic()
    pay = subprocess.run(
        [PY, "manage.py", "sandbox_pay", order["invoice"]["number"], "--confirm"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if pay.returncode != 0:
        failures.append(f"sandbox_pay {currency} exited {pay.returncode}: {pay.stdout[-300:]} {pay.stderr[-300:]}")
        return record
    while time.monotonic() - paid_at < 300:
        status, current = call(base, "GET", f"/api/v1/orders/{order['id']}", token=token)
        if status == 200 and current["status"] == "paid":
            record |= {"paid": True, "seconds_to_paid": round(time.monotonic() - paid_at, 1)}
            return record
        time.sleep(2)
    failures.append(f"order {order['id']} ({currency}) not paid 300 s after sandbox_pay")
    return record


if __name__ == "__main__":
    sys.exit(main())
