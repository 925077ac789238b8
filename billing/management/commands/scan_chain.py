from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from billing.chains.watchers import chain_scan, watcher_for
from core.errors import DomainError


class Command(BaseCommand):
    help = (
        "Scan one chain's node now: new blocks from the stored cursor (until caught up), then what "
        "the chain has besides (the mempool of BTC/LTC). The same service the periodic task runs, under the "
        "same lease, without its back-off. Currencies of one chain (ETH, USDT, USDC) share one scan."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "currency", help="A currency with a watcher (BTC, LTC, ETH, USDT, USDC, XMR, SOL), or a chain name."
        )
        parser.add_argument(
            "--max-blocks",
            type=int,
            default=None,
            help="Blocks per run (default CHAIN_SCAN_MAX_BLOCKS); runs repeat until caught up.",
        )
        parser.add_argument("--once", action="store_true", help="One run only, even if not caught up.")
        parser.add_argument(
            "--from-height",
            type=int,
            default=None,
            help="First move the cursor so the scan starts at this height (rescanning is "
            "harmless: payments are recorded once). SOL follows addresses, not blocks: "
            "its listing cursors are forgotten and every watched reference is listed again.",
        )

    def handle(self, *args: Any, **o: Any) -> None:
        try:
            watcher = watcher_for(currency=o["currency"])
            if not watcher.watched():
                raise CommandError(f"{watcher.currency} is not watched: {watcher.not_watched_hint()}.")
            if o["from_height"] is not None:
                if o["from_height"] < 1:
                    raise CommandError("--from-height is 1 or more.")
                block = watcher.cursor_set(height=o["from_height"] - 1)
                self.stdout.write(watcher.cursor_set_line(block))
            while True:
                report = chain_scan(
                    currency=watcher.currency, force=True, max_blocks=o["max_blocks"], progress=self.stdout.write
                )
                self.stdout.write(report.summary())
                if report.error:
                    raise CommandError(report.error)
                if report.skipped:
                    raise CommandError(
                        f"{watcher.currency}: {report.skipped}: another worker is scanning "
                        "this chain right now; try again in a moment."
                    )
                if report.caught_up or o["once"] or not report.blocks:
                    return
        except DomainError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from exc
