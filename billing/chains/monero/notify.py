"""Queue a chain's scan from a node's notify hook, without starting Django.

monero-wallet-rpc runs a program for each incoming transaction it sees, in the
pool and again in a block (`--tx-notify "PROGRAM ARGS %s"`; src/wallet/wallet2.cpp,
`wallet2::process_new_transaction`, which calls `m_tx_notify->notify("%s", txid)`
for a transaction paying the wallet, once per pool transaction); monerod does
the same for each block (`--block-notify`). The program is started without a
shell, with an **empty environment** and not waited for (src/common/notify.cpp,
`Notify::notify` -> src/common/spawn.cpp, `tools::spawn`: `execve(filename, argv,
{NULL})`, `wait` false); its first word must be an existing file (no PATH
lookup), and words are split at spaces. Point it at this file:

    monero-wallet-rpc ... --tx-notify "/opt/gpurenthub/.venv/bin/python /opt/gpurenthub/billing/chains/monero/notify.py --broker-file /etc/gpurenthub/broker.url XMR %s"

It puts the chain's scan task (`billing.chain_scan`, the task the periodic poll
and `manage.py listen_chain` queue) on the Celery broker whose URL is the first
line of `--broker-file` (CELERY_BROKER_URL when the program is run with an
environment): the only setting it reads, so the wallet's user needs no other
secret, and the URL's password stays off the command line. It imports Celery
alone, not Django (a notify costs about half a second instead of the seconds a
`manage.py` start takes), and gives up after a few tries when the broker is
away: the periodic poll finds what it would have. The transaction hash is not
used: the scan reads the wallet as a poll would.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

TASK = "billing.chain_scan"
_CURRENCY = re.compile(r"^[A-Z][A-Z0-9]{1,9}$")
RETRY_POLICY = {"max_retries": 3, "interval_start": 0.2, "interval_step": 0.5, "interval_max": 1.0}


def scan_queue(*, currency: str, broker_url: str) -> None:
    """Send one `billing.chain_scan(currency)` to the broker (the default queue, as `.delay` does)."""
    from celery import Celery

    app = Celery("gpurenthub-notify", broker=broker_url, set_as_current=False)
    app.conf.broker_connection_timeout = 5
    try:
        app.send_task(TASK, args=[currency], retry=True, retry_policy=RETRY_POLICY)
    finally:
        app.close()


def broker_url_read(*, path: str) -> str:
    """The broker URL: the first line of `path`, else CELERY_BROKER_URL ("" when neither)."""
    if path:
        with open(path, encoding="utf-8") as file:
            return file.readline().strip()
    return os.environ.get("CELERY_BROKER_URL", "").strip()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="notify.py", description="Queue a chain's scan (a node's notify hook).")
    parser.add_argument("--broker-file", default="", help="a file whose first line is the Celery broker URL")
    parser.add_argument("currency", help="the chain's currency (XMR)")
    parser.add_argument("hash", nargs="?", default="", help="the transaction or block hash (%%s; not used)")
    args = parser.parse_args(argv)
    currency = args.currency.upper()
    if not _CURRENCY.match(currency):
        parser.error(f"not a currency code: {args.currency!r}")
    try:
        broker_url = broker_url_read(path=args.broker_file)
    except OSError as exc:
        print(f"notify.py: cannot read --broker-file ({exc.strerror}); nothing queued", file=sys.stderr)
        return 2
    if not broker_url:
        print("notify.py: no broker URL (--broker-file or CELERY_BROKER_URL); nothing queued", file=sys.stderr)
        return 2
    try:
        scan_queue(currency=currency, broker_url=broker_url)
    except Exception as exc:  # the hook's exit status is ignored: say why, the poll stays the safety net
        print(f"notify.py: could not queue the scan ({exc.__class__.__name__})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    # Run as a file: its own folder (billing/chains/monero) must not shadow top-level modules.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)
    sys.exit(main(sys.argv[1:]))
