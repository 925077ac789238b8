"""The schema against a live server: schemathesis's own CLI, every check, with an account's token.

    .venv/bin/python bench/schema_live.py                      # 25 examples an operation
    .venv/bin/python bench/schema_live.py --max-examples 100 --seed 7

What the suite's run (tests/core/test_schema.py) does inside one process, this does as
a customer's tooling would: `schemathesis run /api/schema/ --checks all` over HTTP
against gunicorn with the production settings (DEBUG off, deploy/gunicorn.conf.py),
on a throwaway database prepared as bench/load.py prepares its own (the catalog, BTC,
LTC and ETH with watch-only keys made for the run, eight accounts with a token each).
It reads schemathesis.toml, as the suite does, and allows what the suite allows and
nothing more: a request the schema calls valid may be refused only by a rule JSON
Schema cannot state, each named with why in tests/schema_rules.py (the check is
tests/schema_hooks.py's, standing in for schemathesis's positive_data_acceptance).
One operation is left out: `DELETE /auth/tokens/{id}`. schemathesis reads the token's
id from `GET /auth/tokens` and revokes the very token the run uses, after which every
call is a 401 and nothing else is tested (the suite's run and tests/accounts cover it).
It prints schemathesis's summary and exits with its status; the database and the
server are gone at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import ROOT, run_prepared

RESULT = {"status": 1}


def arguments(parser) -> None:
    parser.add_argument("--port", type=int, default=int(os.environ.get("BENCH_PORT", "8151")))
    parser.add_argument("--max-examples", type=int, default=25, help="examples an operation (default 25)")
    parser.add_argument("--seed", type=int, default=None, help="schemathesis's random seed, to repeat a run")
    parser.add_argument("--workers", type=int, default=2)


def measure(bench, args) -> None:
    token = bench.tokens[0]
    bench.gunicorn(args.port)
    command = [
        str(Path(sys.executable).parent / "schemathesis"),
        "--config-file",
        str(ROOT / "schemathesis.toml"),
        "run",
        f"http://127.0.0.1:{args.port}/api/schema/?format=json",
        "--checks",
        "all",
        "--exclude-checks",
        "positive_data_acceptance",
        "--exclude-operation-id",
        "auth_token_revoke",
        "--max-examples",
        str(args.max_examples),
        "--workers",
        str(args.workers),
        "-H",
        f"Authorization: Bearer {token}",
        "--report-dir",
        str(bench.tmp / "schemathesis-report"),
    ]
    if args.seed is not None:
        command += ["--seed", str(args.seed)]
    print("$ schemathesis run /api/schema/ --checks all --max-examples", args.max_examples, flush=True)
    env = os.environ | {"SCHEMATHESIS_HOOKS": "tests.schema_hooks", "PYTHONPATH": str(ROOT)}
    RESULT["status"] = subprocess.run(command, cwd=bench.tmp, env=env, check=False).returncode
    # A 5xx is logged by the server: its tracebacks, so a failure can be read here.
    log = (bench.tmp / f"gunicorn-{args.port}.log").read_text(errors="replace")
    for block in log.split("Traceback (most recent call last):")[1:4]:
        print("server traceback:", block[-3000:], sep="\n")
    # The run tested what it says only if the token stayed good to the end.
    request = urllib.request.Request(
        f"http://127.0.0.1:{args.port}/api/v1/account", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            print(f"the account's token after the run: {answer.status}")
    except urllib.error.HTTPError as exc:
        print(f"the account's token after the run: {exc.code} {exc.read()[:300]!r}")
        RESULT["status"] = RESULT["status"] or 1


if __name__ == "__main__":
    run_prepared(__doc__, arguments, measure)
    sys.exit(RESULT["status"])
