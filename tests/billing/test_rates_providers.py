"""Rate providers against recorded Kraken and CoinGecko responses, served on
loopback by a small threaded HTTP server (no network)."""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import pytest

from billing.currencies import CURRENCIES
from billing.models import RateSample
from billing.rates import (
    MAX_RETRY_DELAY_SECONDS,
    CoinGeckoProvider,
    KrakenProvider,
    ProviderError,
    rate_current,
    rates_refresh,
)
from billing.tasks_rates import rates_refresh_task
from core.errors import DomainError

FIXTURES = Path(__file__).parent / "fixtures" / "rates"
NOW = datetime(2026, 11, 30, 12, 0, 10, tzinfo=UTC)  # ten seconds after the recorded responses
KRAKEN = "/0/public/Ticker"
COINGECKO = "/api/v3/simple/price"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


HANG_TIMEOUT = 0.3  # the client's timeout where the provider never answers


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False  # never answer: the client's timeout ends the request
    drop: bool = False  # close the connection without an answer


@dataclass
class Seen:
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]


class ProviderServer:
    """Answers each path with its queue of replies (the last one repeats) and
    remembers every request."""

    def __init__(self) -> None:
        self.routes: dict[str, list[Reply]] = {}
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.released = threading.Event()  # set at teardown: hanging handlers return
        self.url = ""

    def serve(self, path: str, *replies: Reply) -> None:
        self.routes[path] = list(replies)

    def count(self, path: str) -> int:
        return sum(1 for s in self.seen if s.path == path)

    def last(self, path: str) -> Seen:
        return [s for s in self.seen if s.path == path][-1]

    def next_reply(self, path: str) -> Reply:
        with self.lock:
            queue = self.routes.get(path)
            if not queue:
                return Reply(status=404, body=b'{"error":"not found"}')
            return queue.pop(0) if len(queue) > 1 else queue[0]


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        state: ProviderServer = self.server.state  # type: ignore[attr-defined]
        parts = urlsplit(self.path)
        with state.lock:
            state.seen.append(
                Seen(
                    path=parts.path,
                    query=parse_qs(parts.query),
                    headers={k.lower(): v for k, v in self.headers.items()},
                )
            )
        reply = state.next_reply(parts.path)
        if reply.hang:
            state.released.wait()
            return
        if reply.drop:
            self.close_connection = True
            return
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(reply.body)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(reply.body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up waiting (timeout tests)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server(settings):
    state = ProviderServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    httpd.state = state  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    settings.KRAKEN_API_URL = state.url
    settings.COINGECKO_API_URL = state.url + "/"
    settings.COINGECKO_API_KEY = ""
    settings.MANUAL_RATES_USD = ""
    settings.RATE_PROVIDERS = ["kraken", "coingecko"]
    # Generous: an answer on loopback from a machine busy with the rest of the suite can take more
    # than a few tenths of a second. The tests of a provider that never answers set HANG_TIMEOUT.
    settings.RATE_HTTP_TIMEOUT_SECONDS = 5.0
    settings.RATE_HTTP_ATTEMPTS = 3
    settings.RATE_HTTP_BACKOFF_SECONDS = 0.01
    settings.RATE_MAX_AGE_SECONDS = 600
    yield state
    state.released.set()
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


@pytest.fixture
def slept(monkeypatch) -> list[float]:
    """The waits between attempts, recorded instead of slept."""
    waits: list[float] = []
    monkeypatch.setattr("billing.rates.time", SimpleNamespace(sleep=waits.append))
    return waits


@pytest.fixture
def clock(time_machine):
    time_machine.move_to(NOW, tick=False)
    return time_machine


def serve_both(server: ProviderServer) -> None:
    server.serve(KRAKEN, Reply(body=fixture("kraken_ticker.json")))
    server.serve(COINGECKO, Reply(body=fixture("coingecko_simple_price.json")))


def by_currency(observations):
    result = {o.currency: o for o in observations}
    assert len(result) == len(observations), "one observation per currency"
    return result


# --- Kraken -------------------------------------------------------------------


def test_kraken_maps_odd_pair_names_and_reads_the_book_midpoint(server, clock):
    server.serve(KRAKEN, Reply(body=fixture("kraken_ticker.json")))
    found = by_currency(KrakenProvider().fetch(currencies=list(CURRENCIES)))

    assert {c: o.usd for c, o in found.items()} == {
        "BTC": Decimal("91234.55"),
        "ETH": Decimal("3051.275"),
        "USDT": Decimal("0.99975"),
        "USDC": Decimal("0.99985"),
        "XMR": Decimal("389.32"),
        "SOL": Decimal("140.365"),
        "LTC": Decimal("88.13"),
    }
    assert all(type(o.usd) is Decimal for o in found.values())
    assert {o.observed_at for o in found.values()} == {NOW}
    asked = server.last(KRAKEN).query["pair"][0].split(",")
    assert sorted(asked) == sorted(["XBTUSD", "ETHUSD", "USDTUSD", "USDCUSD", "XMRUSD", "SOLUSD", "LTCUSD"])


def test_kraken_asks_only_for_the_pairs_wanted(server, clock):
    server.serve(KRAKEN, Reply(body=fixture("kraken_ticker.json")))
    found = by_currency(KrakenProvider().fetch(currencies=["XMR", "BTC"]))
    assert set(found) == {"XMR", "BTC"}  # the other pairs in the answer are ignored
    assert server.last(KRAKEN).query["pair"] == ["XMRUSD,XBTUSD"]


def test_kraken_accepts_the_request_pair_names_as_response_keys(server, clock):
    body = fixture("kraken_ticker.json").replace(b'"XXBTZUSD"', b'"XBTUSD"').replace(b'"XXMRZUSD"', b'"XMRUSD"')
    server.serve(KRAKEN, Reply(body=body))
    found = by_currency(KrakenProvider().fetch(currencies=["BTC", "XMR"]))
    assert found["BTC"].usd == Decimal("91234.55")
    assert found["XMR"].usd == Decimal("389.32")


def test_kraken_uses_the_last_trade_when_the_book_is_missing(server, clock):
    data = json.loads(fixture("kraken_ticker.json"))
    del data["result"]["XXBTZUSD"]["a"]
    data["result"]["XETHZUSD"]["a"] = ["bogus", "1", "1.000"]
    server.serve(KRAKEN, Reply(body=json.dumps(data).encode()))
    found = by_currency(KrakenProvider().fetch(currencies=["BTC", "ETH"]))
    assert found["BTC"].usd == Decimal("91234.6")
    assert found["ETH"].usd == Decimal("3051.27")


def test_kraken_skips_a_pair_it_cannot_read_and_keeps_the_rest(server, clock):
    data = json.loads(fixture("kraken_ticker.json"))
    data["result"]["XLTCZUSD"] = {"a": ["-1", "1", "1.000"], "b": ["0", "1", "1.000"], "c": ["NaN", "1"]}
    server.serve(KRAKEN, Reply(body=json.dumps(data).encode()))
    found = by_currency(KrakenProvider().fetch(currencies=list(CURRENCIES)))
    assert "LTC" not in found
    assert len(found) == 6


def test_kraken_error_reply_fails_without_retrying(server, clock):
    server.serve(KRAKEN, Reply(body=fixture("kraken_error_unknown_pair.json")))
    with pytest.raises(ProviderError, match="EQuery:Unknown asset pair"):
        KrakenProvider().fetch(currencies=["BTC"])
    assert server.count(KRAKEN) == 1


def test_kraken_service_unavailable_is_retried(server, clock):
    server.serve(
        KRAKEN,
        Reply(body=fixture("kraken_error_service_unavailable.json")),
        Reply(body=fixture("kraken_ticker.json")),
    )
    found = by_currency(KrakenProvider().fetch(currencies=["BTC"]))
    assert found["BTC"].usd == Decimal("91234.55")
    assert server.count(KRAKEN) == 2


# --- CoinGecko ------------------------------------------------------------------


def test_coingecko_reads_prices_with_their_update_times(server, clock):
    server.serve(COINGECKO, Reply(body=fixture("coingecko_simple_price.json")))
    found = by_currency(CoinGeckoProvider().fetch(currencies=list(CURRENCIES)))

    assert {c: o.usd for c, o in found.items()} == {
        "BTC": Decimal("91251"),
        "ETH": Decimal("3049.52"),
        "USDT": Decimal("0.999712"),
        "USDC": Decimal("0.999823"),
        "XMR": Decimal("388.75"),
        "SOL": Decimal("140.41"),
        "LTC": Decimal("88.09"),
    }
    assert found["BTC"].observed_at == datetime(2026, 11, 30, 11, 59, 48, tzinfo=UTC)
    assert found["LTC"].observed_at == datetime(2026, 11, 30, 11, 59, 17, tzinfo=UTC)
    seen = server.last(COINGECKO)
    assert seen.query["ids"][0].split(",") == [
        "bitcoin",
        "ethereum",
        "tether",
        "usd-coin",
        "monero",
        "solana",
        "litecoin",
    ]
    assert seen.query["vs_currencies"] == ["usd"]
    assert seen.query["include_last_updated_at"] == ["true"]
    assert "x-cg-demo-api-key" not in seen.headers


def test_coingecko_sends_the_demo_key_when_set(server, clock, settings):
    settings.COINGECKO_API_KEY = "CG-test-key-made-up"
    server.serve(COINGECKO, Reply(body=fixture("coingecko_simple_price.json")))
    CoinGeckoProvider().fetch(currencies=["BTC"])
    assert server.last(COINGECKO).headers["x-cg-demo-api-key"] == "CG-test-key-made-up"


def test_prices_are_exact_decimals_and_a_missing_coin_is_left_out(server, clock):
    # 91251.123456789012345678 as a float would be 91251.12345678901.
    server.serve(COINGECKO, Reply(body=fixture("coingecko_simple_price_partial.json")))
    found = by_currency(CoinGeckoProvider().fetch(currencies=list(CURRENCIES)))
    assert set(found) == {"BTC", "ETH"}
    assert found["BTC"].usd == Decimal("91251.123456789012")  # the 12 places a sample keeps
    assert type(found["BTC"].usd) is Decimal


def test_coingecko_time_ahead_of_ours_counts_as_now(server, clock):
    body = fixture("coingecko_simple_price.json").replace(b"1796039988", b"1796043600")
    server.serve(COINGECKO, Reply(body=body))
    found = by_currency(CoinGeckoProvider().fetch(currencies=["BTC"]))
    assert found["BTC"].observed_at == NOW


# --- Retries, timeouts, garbage ---------------------------------------------------


def test_5xx_is_retried_until_an_answer_comes(server, clock, slept):
    server.serve(
        KRAKEN,
        Reply(status=503, body=b"<html>503 Service Temporarily Unavailable</html>"),
        Reply(status=502, body=b""),
        Reply(body=fixture("kraken_ticker.json")),
    )
    found = by_currency(KrakenProvider().fetch(currencies=["ETH"]))
    assert found["ETH"].usd == Decimal("3051.275")
    assert server.count(KRAKEN) == 3
    assert slept == [0.01, 0.02]  # RATE_HTTP_BACKOFF_SECONDS, doubling


def test_retries_are_bounded(server, clock, settings):
    settings.RATE_HTTP_ATTEMPTS = 4
    server.serve(KRAKEN, Reply(status=500, body=b"{}"))
    with pytest.raises(ProviderError, match="4 attempts.*HTTP 500"):
        KrakenProvider().fetch(currencies=["BTC"])
    assert server.count(KRAKEN) == 4


def test_429_is_retried_after_the_time_asked(server, clock, slept):
    server.serve(
        COINGECKO,
        Reply(status=429, body=fixture("coingecko_rate_limited.json"), headers={"Retry-After": "7"}),
        Reply(body=fixture("coingecko_simple_price.json")),
    )
    found = by_currency(CoinGeckoProvider().fetch(currencies=["SOL"]))
    assert found["SOL"].usd == Decimal("140.41")
    assert server.count(COINGECKO) == 2
    assert slept == [7.0]  # Retry-After, not the 0.01 s backoff


def test_a_retry_after_beyond_the_cap_waits_the_cap(server, clock, slept):
    server.serve(
        COINGECKO,
        Reply(status=429, body=fixture("coingecko_rate_limited.json"), headers={"Retry-After": "3600"}),
        Reply(body=fixture("coingecko_simple_price.json")),
    )
    by_currency(CoinGeckoProvider().fetch(currencies=["SOL"]))
    assert slept == [MAX_RETRY_DELAY_SECONDS] == [10.0]


def test_other_4xx_is_not_retried(server, clock):
    server.serve(
        COINGECKO, Reply(status=401, body=b'{"status":{"error_code":10002,"error_message":"API Key Missing"}}')
    )
    with pytest.raises(ProviderError, match="HTTP 401"):
        CoinGeckoProvider().fetch(currencies=["BTC"])
    assert server.count(COINGECKO) == 1


def test_dropped_connection_is_retried(server, clock):
    server.serve(KRAKEN, Reply(drop=True), Reply(body=fixture("kraken_ticker.json")))
    found = by_currency(KrakenProvider().fetch(currencies=["BTC"]))
    assert found["BTC"].usd == Decimal("91234.55")
    assert server.count(KRAKEN) == 2


def test_connection_refused_fails_after_the_attempts(server, clock, settings):
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.KRAKEN_API_URL = f"http://127.0.0.1:{port}"
    with pytest.raises(ProviderError, match="3 attempts.*ConnectError"):
        KrakenProvider().fetch(currencies=["BTC"])


@pytest.mark.slow
def test_a_slow_provider_times_out_and_is_retried(server, clock, settings):
    settings.RATE_HTTP_TIMEOUT_SECONDS = HANG_TIMEOUT
    server.serve(KRAKEN, Reply(body=fixture("kraken_ticker.json"), hang=True))
    with pytest.raises(ProviderError, match="Timeout"):
        KrakenProvider().fetch(currencies=["BTC"])
    assert server.count(KRAKEN) == 3


def test_garbage_is_refused_without_retrying(server, clock):
    server.serve(KRAKEN, Reply(body=b"<html><body>Bad Gateway</body></html>"))
    with pytest.raises(ProviderError, match="not JSON"):
        KrakenProvider().fetch(currencies=["BTC"])
    assert server.count(KRAKEN) == 1


def test_json_that_is_not_the_expected_shape_is_refused(server, clock):
    server.serve(KRAKEN, Reply(body=b'{"error":[],"result":["XXBTZUSD"]}'))
    server.serve(COINGECKO, Reply(body=b"[1, 2, 3]"))
    with pytest.raises(ProviderError, match="no result object"):
        KrakenProvider().fetch(currencies=["BTC"])
    with pytest.raises(ProviderError, match="not an object"):
        CoinGeckoProvider().fetch(currencies=["BTC"])


# --- Refresh and the rate that comes out of it ------------------------------------------


@pytest.mark.django_db
def test_refresh_stores_both_providers_and_the_rate_is_their_median(server, clock):
    serve_both(server)
    report = rates_refresh()

    assert report["kraken"] == {"ok": True, "stored": 7, "currencies": sorted(CURRENCIES)}
    assert report["coingecko"] == {"ok": True, "stored": 7, "currencies": sorted(CURRENCIES)}
    assert RateSample.objects.filter(source="kraken").count() == 7
    assert RateSample.objects.filter(source="coingecko").count() == 7

    btc = rate_current(currency="BTC")
    assert btc.usd == Decimal("91242.775")  # (91234.55 + 91251) / 2, exactly
    assert btc.source == "median(kraken,coingecko)"
    assert btc.at == datetime(2026, 11, 30, 11, 59, 48, tzinfo=UTC)  # CoinGecko's, the older one
    usdt = rate_current(currency="USDT")
    assert (usdt.usd, usdt.source) == (Decimal("1.00"), "peg")


@pytest.mark.django_db
def test_refresh_again_stores_new_kraken_prices_but_not_coingecko_repeats(server, clock):
    serve_both(server)
    rates_refresh()
    clock.shift(timedelta(seconds=60))
    report = rates_refresh()
    assert report["kraken"]["stored"] == 7
    assert report["coingecko"]["stored"] == 0  # same last_updated_at: the same observation
    assert RateSample.objects.count() == 21


@pytest.mark.django_db
@pytest.mark.parametrize(
    "failure",
    [
        Reply(status=500, body=b'{"error":["EGeneral:Internal error"]}'),
        pytest.param(Reply(body=fixture("kraken_ticker.json"), hang=True), marks=pytest.mark.slow),
        Reply(body=b'{"error":[],"result":{"XXBTZUSD":{"a":["91234.6'),
    ],
    ids=["http-500", "timeout", "garbage-json"],
)
def test_one_provider_down_does_not_stop_the_other(server, clock, failure, settings):
    if failure.hang:
        settings.RATE_HTTP_TIMEOUT_SECONDS = HANG_TIMEOUT
    server.serve(KRAKEN, failure)
    server.serve(COINGECKO, Reply(body=fixture("coingecko_simple_price.json")))
    report = rates_refresh()

    assert report["kraken"]["ok"] is False
    assert report["kraken"]["stored"] == 0
    assert report["kraken"]["error"]
    assert report["coingecko"]["ok"] is True
    assert not RateSample.objects.filter(source="kraken").exists()
    btc = rate_current(currency="BTC")
    assert (btc.usd, btc.source) == (Decimal("91251"), "coingecko")


@pytest.mark.django_db
def test_refresh_reports_an_unknown_provider_and_goes_on(server, clock, settings):
    settings.RATE_PROVIDERS = ["bitstampish", "coingecko"]
    server.serve(COINGECKO, Reply(body=fixture("coingecko_simple_price.json")))
    report = rates_refresh()
    assert report["bitstampish"]["ok"] is False
    assert "unknown rate provider" in report["bitstampish"]["error"]
    assert report["coingecko"]["stored"] == 7


@pytest.mark.django_db
def test_refresh_logs_what_failed(server, clock, caplog):
    server.serve(KRAKEN, Reply(body=fixture("kraken_error_unknown_pair.json")))
    server.serve(COINGECKO, Reply(body=fixture("coingecko_simple_price.json")))
    with caplog.at_level("WARNING", logger="billing.rates"):
        rates_refresh()
    assert any("kraken" in r.getMessage() and "Unknown asset pair" in r.getMessage() for r in caplog.records)


@pytest.mark.django_db
def test_depegged_stablecoin_from_a_provider_is_refused(server, clock):
    server.serve(KRAKEN, Reply(body=fixture("kraken_ticker.json")))
    server.serve(COINGECKO, Reply(body=fixture("coingecko_simple_price_depeg.json")))
    rates_refresh()
    with pytest.raises(DomainError) as refused:
        rate_current(currency="USDT")
    assert refused.value.code == "stablecoin_depegged"
    assert refused.value.status == 409
    assert refused.value.details["observed_usd"] == {"coingecko": "0.969105"}
    assert rate_current(currency="USDC").usd == Decimal("1.00")


@pytest.mark.django_db
def test_refreshed_rates_go_stale(server, clock):
    serve_both(server)
    rates_refresh()
    clock.shift(timedelta(seconds=600))  # Kraken's samples are now exactly 600 s old, CoinGecko's older
    with pytest.raises(DomainError) as refused:
        rate_current(currency="ETH")
    assert (refused.value.code, refused.value.status) == ("rate_unavailable", 409)


@pytest.mark.django_db
def test_the_celery_task_refreshes(server, clock):
    serve_both(server)
    result = rates_refresh_task.delay().get()
    assert result["kraken"]["stored"] == 7
    assert result["coingecko"]["stored"] == 7
    assert RateSample.objects.count() == 14
