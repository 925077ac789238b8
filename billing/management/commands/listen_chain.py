import signal
import threading
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from billing.chains.errors import ChainUnavailable
from billing.chains.watchers import ChainListener, watcher_for
from core.errors import DomainError


class Command(BaseCommand):
    help = (
        "Follow one chain's node as it publishes new blocks and pool transactions (ZMQ) and queue the "
        "chain's scan task at once for each burst of news, instead of waiting for the next periodic run "
        "(which stays the safety net). Runs until stopped (SIGTERM, SIGINT). XMR: monerod --zmq-pub and "
        "XMR_ZMQ_URL; BTC/LTC: -zmqpubhashblock and -zmqpubrawtx on one address and BTC_ZMQ_URL/LTC_ZMQ_URL, "
        "or, on a node built without ZMQ, its P2P port as BTC_P2P_PEER/LTC_P2P_PEER (host:port); "
        "ETH (USDT, USDC): the node's websocket, ETH_WS_URL (eth_subscribe newHeads)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("currency", help="A currency whose node publishes its news (BTC, LTC, XMR, ETH, SOL).")
        parser.add_argument(
            "--url",
            default="",
            help=(
                "The node's publisher (default: the currency's setting): tcp:// (ZMQ), ws(s):// (websocket) "
                "or, BTC/LTC, p2p://host:port (the node's P2P port)."
            ),
        )
        parser.add_argument(
            "--debounce",
            type=float,
            default=None,
            help="Seconds between two queued scans at most once (default CHAIN_PUSH_DEBOUNCE_SECONDS).",
        )

    def handle(self, *args: Any, **o: Any) -> None:
        try:
            watcher = watcher_for(currency=o["currency"])
            if not watcher.watched():
                raise CommandError(f"{watcher.currency} is not watched: {watcher.not_watched_hint()}.")
            listener = ChainListener(watcher, url=o["url"], debounce=o["debounce"])
        except DomainError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from exc
        except ImproperlyConfigured as exc:
            raise CommandError(f"invalid: {exc}") from exc
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        try:
            with listener:
                self.stdout.write(f"{watcher.currency}: listening ({', '.join(listener.topics)})")
                listener.run(stop=stop)
        except (OSError, ChainUnavailable) as exc:
            # The address is not printed: a provider's key often rides in it. The poll goes on
            # scanning meanwhile; a service manager starts the listener again.
            reason = exc.reason if isinstance(exc, ChainUnavailable) else exc.__class__.__name__
            raise CommandError(
                f"unreachable: {watcher.currency}'s node at {listener.setting} could not be reached or "
                f"dropped the connection ({reason}); the periodic scan still runs."
            ) from exc
        self.stdout.write(
            f"{watcher.currency}: stopped after {listener.messages} message(s), {listener.scans} scan(s) queued"
        )
