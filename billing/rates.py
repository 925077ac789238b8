"""Exchange rates: USD per whole coin for the seven pay currencies.

Where a figure comes from, in order of precedence:

1. `MANUAL_RATES_USD` (`BTC=95000,ETH=3500`): always fresh, for local runs and
   sandboxes that have no market data.
2. A staff manual rate (a `RateSample` with source `manual`) until its
   `valid_until`: staff set one when the market sources are wrong or down.
3. The median of the latest fresh sample of every market source (Kraken,
   CoinGecko). A sample is fresh while it is younger than `RATE_MAX_AGE_SECONDS`;
   a stale figure is never used. Stablecoins are exactly 1.00 while every fresh
   source keeps them within `STABLECOIN_DEPEG_PCT` of the peg, and refused
   otherwise.

Market samples are written by `rates_refresh` (a periodic Celery task). Every
price is parsed straight into `Decimal` (JSON numbers too): a float never holds
money here.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any, ClassVar

import httpx
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from billing.currencies import CURRENCIES
from billing.models import RateSample
from core.audit import AuditAction, audit_record, model_snapshot
from core.errors import DomainError

log = logging.getLogger(__name__)

SOURCE_MANUAL = "manual"
SOURCE_SETTING = "setting"
SOURCE_PEG = "peg"
PEG_USD = Decimal("1.00")

# RateSample.usd is numeric(30, 12): 12 places, 18 integer digits.
USD_QUANTUM = Decimal("1e-12")
USD_LIMIT = Decimal(10) ** 18

# Defaults for settings the project may leave out.
DEFAULT_HTTP_ATTEMPTS = 3
DEFAULT_HTTP_BACKOFF_SECONDS = 0.5
MAX_RETRY_DELAY_SECONDS = 10.0
DEFAULT_MAX_SPREAD_PCT = Decimal("5")


@dataclass(frozen=True)
class Rate:
    currency: str
    usd: Decimal  # USD per whole coin, exact
    source: str  # e.g. "median(kraken,coingecko)" or "manual" or "peg"
    at: datetime  # the oldest observation the figure relies on


@dataclass(frozen=True)
class Observation:
    """One price a provider reported."""

    currency: str
    usd: Decimal
    observed_at: datetime


class ProviderError(Exception):
    """A provider gave no usable answer (after retries where retrying helps)."""


# --- Parsing helpers ----------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a price")


def _json_loads(content: bytes) -> Any:
    """JSON with every non-integer number as an exact Decimal."""
    return json.loads(content, parse_float=Decimal, parse_constant=_reject_constant)


def _price(value: Any) -> Decimal | None:
    """A positive, finite USD price from a JSON string or number; None when the
    value is anything else (a float or a boolean included)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        value = Decimal(value)
    elif isinstance(value, str):
        try:
            value = Decimal(value.strip())
        except InvalidOperation:
            return None
    if not isinstance(value, Decimal) or not value.is_finite():
        return None
    if value <= 0 or value >= USD_LIMIT:
        return None
    with localcontext() as ctx:
        ctx.prec = 60  # 18 integer digits and 12 places fit without rounding
        stored = value.quantize(USD_QUANTUM)
    return stored if stored > 0 else None


def _trim(value: Decimal) -> Decimal:
    """The same number without trailing fractional zeros (95000.000 -> 95000)."""
    with localcontext() as ctx:
        ctx.prec = 60
        if value == value.to_integral_value():
            return value.quantize(Decimal(1))
        return value.normalize()


# --- HTTP ---------------------------------------------------------------------


def _retry_after_seconds(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After", "").strip()
    if value.isdigit():
        return float(value)
    return None


def _get_json(
    *,
    provider: str,
    url: str,
    params: dict[str, str],
    headers: dict[str, str] | None = None,
    transient_body: Callable[[Any], str | None] = lambda body: None,
) -> Any:
    """GET `url` and decode its JSON body, retrying (with exponential backoff)
    on transport errors, 5xx, 429 and bodies `transient_body` calls transient.
    Raises ProviderError when no usable answer came."""
    attempts = max(1, int(getattr(settings, "RATE_HTTP_ATTEMPTS", DEFAULT_HTTP_ATTEMPTS)))
    backoff = float(getattr(settings, "RATE_HTTP_BACKOFF_SECONDS", DEFAULT_HTTP_BACKOFF_SECONDS))
    timeout = httpx.Timeout(float(settings.RATE_HTTP_TIMEOUT_SECONDS))
    failure = ""
    with httpx.Client(
        timeout=timeout,
        headers={"Accept": "application/json", "User-Agent": "gpurenthub-rates/1"},
        follow_redirects=False,
    ) as client:
        for attempt in range(1, attempts + 1):
            delay = backoff * 2 ** (attempt - 1)
            try:
                response = client.get(url, params=params, headers=headers or {})
            except httpx.TransportError as exc:  # connect errors, timeouts, dropped connections
                failure = f"{type(exc).__name__}: {exc}".rstrip(": ")
            else:
                status = response.status_code
                if status == 429 or status >= 500:
                    failure = f"HTTP {status}"
                    retry_after = _retry_after_seconds(response)
                    if retry_after is not None:
                        delay = max(delay, min(retry_after, MAX_RETRY_DELAY_SECONDS))
                elif status != 200:
                    raise ProviderError(f"{provider}: HTTP {status}")
                else:
                    try:
                        body = _json_loads(response.content)
                    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError included
                        raise ProviderError(f"{provider}: response is not JSON ({exc})") from exc
                    transient = transient_body(body)
                    if transient is None:
                        return body
                    failure = transient
            if attempt < attempts:
                log.info("rate provider %s: attempt %d failed (%s), retrying", provider, attempt, failure)
                time.sleep(delay)
    raise ProviderError(f"{provider}: no answer after {attempts} attempts ({failure})")


# --- Providers ----------------------------------------------------------------


class RateProvider:
    """One market data source. `fetch` reports what it knows of the asked
    currencies; a currency it lacks is simply left out."""

    name: ClassVar[str]

    def fetch(self, *, currencies: Iterable[str]) -> list[Observation]:
        raise NotImplementedError


class KrakenProvider(RateProvider):
    """Kraken's public ticker. The figure is the midpoint of the best bid and
    ask (the last trade when the book side is missing): in thin pairs the last
    trade can be minutes old while the book is current."""

    name = "kraken"
    # currency: (pair name asked for, key Kraken answers with), as each family declares them
    PAIRS: ClassVar[dict[str, tuple[str, ...]]] = {
        code: c.rate_symbols["kraken"] for code, c in CURRENCIES.items() if "kraken" in c.rate_symbols
    }
    KEYS: ClassVar[dict[str, str]] = {name: currency for currency, names in PAIRS.items() for name in names}
    # Errors after which the same request may well succeed.
    TRANSIENT_ERRORS = ("EService:", "EAPI:Rate limit", "EGeneral:Too many requests", "EGeneral:Internal error")

    @staticmethod
    def _errors(body: Any) -> list[str]:
        if not isinstance(body, dict):
            return []
        errors = body.get("error") or []
        if not isinstance(errors, list):
            return [str(errors)]
        # Entries starting with W are warnings; only E entries are errors.
        return [str(e) for e in errors if str(e).startswith("E")]

    @classmethod
    def _transient(cls, body: Any) -> str | None:
        errors = cls._errors(body)
        if errors and all(e.startswith(cls.TRANSIENT_ERRORS) for e in errors):
            return "; ".join(errors)
        return None

    @staticmethod
    def _first(ticker: dict[str, Any], field: str) -> Decimal | None:
        value = ticker.get(field)
        if isinstance(value, list) and value:
            return _price(value[0])
        return None

    @classmethod
    def ticker_price(cls, ticker: Any) -> Decimal | None:
        if not isinstance(ticker, dict):
            return None
        ask, bid = cls._first(ticker, "a"), cls._first(ticker, "b")
        if ask is not None and bid is not None and bid <= ask:
            with localcontext() as ctx:
                ctx.prec = 60
                return ((ask + bid) / 2).quantize(USD_QUANTUM)
        return cls._first(ticker, "c")

    def fetch(self, *, currencies: Iterable[str]) -> list[Observation]:
        wanted = [c for c in currencies if c in self.PAIRS]
        if not wanted:
            return []
        body = _get_json(
            provider=self.name,
            url=f"{settings.KRAKEN_API_URL.rstrip('/')}/0/public/Ticker",
            params={"pair": ",".join(self.PAIRS[c][0] for c in wanted)},
            transient_body=self._transient,
        )
        errors = self._errors(body)
        if errors:
            raise ProviderError(f"{self.name}: {'; '.join(errors)}")
        result = body.get("result") if isinstance(body, dict) else None
        if not isinstance(result, dict):
            raise ProviderError(f"{self.name}: response has no result object")
        now = timezone.now()  # the ticker carries no time: it is the price as of the answer
        seen: dict[str, Observation] = {}
        for key, ticker in result.items():
            currency = self.KEYS.get(key)
            if currency is None or currency not in wanted or currency in seen:
                continue
            price = self.ticker_price(ticker)
            if price is None:
                log.warning("rate provider %s: unusable ticker for %s", self.name, key)
                continue
            seen[currency] = Observation(currency=currency, usd=price, observed_at=now)
        return list(seen.values())


class CoinGeckoProvider(RateProvider):
    """CoinGecko's simple price, with the time CoinGecko last updated each one."""

    name = "coingecko"
    IDS: ClassVar[dict[str, str]] = {
        code: c.rate_symbols["coingecko"][0] for code, c in CURRENCIES.items() if "coingecko" in c.rate_symbols
    }
    CURRENCY_BY_ID: ClassVar[dict[str, str]] = {v: k for k, v in IDS.items()}

    @staticmethod
    def _observed_at(value: Any, now: datetime) -> datetime:
        if isinstance(value, bool) or not isinstance(value, int | Decimal):
            return now
        try:
            moment = datetime.fromtimestamp(int(value), tz=UTC)
        except (OverflowError, OSError, ValueError):
            return now
        # A clock ahead of ours must not make a price look fresher than it is.
        return min(moment, now)

    def fetch(self, *, currencies: Iterable[str]) -> list[Observation]:
        wanted = [c for c in currencies if c in self.IDS]
        if not wanted:
            return []
        headers = {}
        if settings.COINGECKO_API_KEY:
            headers["x-cg-demo-api-key"] = settings.COINGECKO_API_KEY
        body = _get_json(
            provider=self.name,
            url=f"{settings.COINGECKO_API_URL.rstrip('/')}/api/v3/simple/price",
            params={
                "ids": ",".join(self.IDS[c] for c in wanted),
                "vs_currencies": "usd",
                "include_last_updated_at": "true",
            },
            headers=headers,
        )
        if not isinstance(body, dict):
            raise ProviderError(f"{self.name}: response is not an object")
        status = body.get("status")
        if isinstance(status, dict) and status.get("error_code"):
            raise ProviderError(f"{self.name}: error {status.get('error_code')}: {status.get('error_message', '')}")
        now = timezone.now()
        found = []
        for coin_id, entry in body.items():
            currency = self.CURRENCY_BY_ID.get(coin_id)
            if currency is None or currency not in wanted or not isinstance(entry, dict):
                continue
            price = _price(entry.get("usd"))
            if price is None:
                log.warning("rate provider %s: unusable price for %s", self.name, coin_id)
                continue
            found.append(
                Observation(
                    currency=currency,
                    usd=price,
                    observed_at=self._observed_at(entry.get("last_updated_at"), now),
                )
            )
        return found


PROVIDERS: dict[str, type[RateProvider]] = {
    KrakenProvider.name: KrakenProvider,
    CoinGeckoProvider.name: CoinGeckoProvider,
}


def provider_get(*, name: str) -> RateProvider:
    try:
        return PROVIDERS[name.strip().lower()]()
    except KeyError:
        raise ProviderError(f"unknown rate provider {name!r} (known: {', '.join(PROVIDERS)})") from None


# --- Refresh ------------------------------------------------------------------


def _samples_store(*, source: str, observations: Sequence[Observation]) -> int:
    """Store what a provider reported; an observation already stored (same
    currency, source and time: CoinGecko answers from a cache) is not repeated."""
    if not observations:
        return 0
    with transaction.atomic():
        existing = set(
            RateSample.objects.filter(
                source=source,
                currency__in={o.currency for o in observations},
                observed_at__in={o.observed_at for o in observations},
            ).values_list("currency", "observed_at")
        )
        new = [
            RateSample(currency=o.currency, source=source, usd=o.usd, observed_at=o.observed_at)
            for o in observations
            if (o.currency, o.observed_at) not in existing
        ]
        RateSample.objects.bulk_create(new)
    return len(new)


def rates_refresh(*, providers: Sequence[str] | None = None) -> dict[str, Any]:
    """Ask every provider (default: `RATE_PROVIDERS`) for every currency that
    `MANUAL_RATES_USD` does not fix, and store the samples. A failing provider is logged and reported; it never
    stops the others. Returns {provider: {"ok", "stored", "currencies"|"error"}}."""
    names = list(settings.RATE_PROVIDERS if providers is None else providers)
    # A currency MANUAL_RATES_USD fixes is quoted from the setting alone: nobody is asked for it
    # (the sandbox of `make run` fixes every currency it offers, so it asks no provider at all).
    fixed = manual_rates_from_setting()
    wanted = [code for code in CURRENCIES if code not in fixed]
    report: dict[str, Any] = {}
    if not wanted:
        return report
    for name in names:
        try:
            observations = provider_get(name=name).fetch(currencies=wanted)
        except ProviderError as exc:
            log.warning("rate provider %s failed: %s", name, exc)
            report[name] = {"ok": False, "stored": 0, "error": str(exc)}
            continue
        except Exception as exc:  # a bug in one provider's parsing must not stop the others
            log.exception("rate provider %s failed unexpectedly", name)
            report[name] = {"ok": False, "stored": 0, "error": f"{type(exc).__name__}: {exc}"}
            continue
        stored = _samples_store(source=name, observations=observations)
        report[name] = {
            "ok": True,
            "stored": stored,
            "currencies": sorted(o.currency for o in observations),
        }
    return report


def rate_samples_prune(*, before: datetime) -> int:
    """Delete market samples observed before `before`. Manual rates stay: they
    record a staff decision."""
    with transaction.atomic():
        deleted, _ = RateSample.objects.filter(observed_at__lt=before).exclude(source=SOURCE_MANUAL).delete()
    return deleted


# --- Manual rates -------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _manual_rates_parse(raw: str) -> dict[str, Decimal]:
    rates: dict[str, Decimal] = {}
    for entry in raw.split(","):
        entry = entry.strip()
        if not entry:
            continue
        code, sep, value = entry.partition("=")
        code = code.strip().upper()
        if not sep or code not in CURRENCIES:
            raise ImproperlyConfigured(
                f"MANUAL_RATES_USD: {entry!r} is not CODE=USD with CODE one of {' '.join(CURRENCIES)}"
            )
        price = _price(value.strip())
        if price is None or price != Decimal(value.strip()):
            raise ImproperlyConfigured(f"MANUAL_RATES_USD: {entry!r} needs a positive USD price (12 places at most)")
        rates[code] = _trim(price)
    return rates


def manual_rates_from_setting() -> dict[str, Decimal]:
    """The `MANUAL_RATES_USD` setting as {currency: USD per coin}."""
    return _manual_rates_parse(settings.MANUAL_RATES_USD or "")


def _currency_code(currency: Any, *, code: str) -> str:
    value = currency.strip().upper() if isinstance(currency, str) else ""
    if value not in CURRENCIES:
        raise DomainError(
            code,
            f"{currency!r} is not a pay currency (one of {' '.join(CURRENCIES)}).",
            status=400,
            details={"currency": str(currency), "currencies": list(CURRENCIES)},
        )
    return value


def rate_manual_set(
    *,
    currency: str,
    usd: Decimal | str,
    valid_until: datetime,
    actor: Any,
    note: str = "",
) -> RateSample:
    """Record a staff manual rate: it is the rate of `currency` from now until
    `valid_until`, ahead of the market sources. `note` says why (required). A
    rate more than RATE_MANUAL_MAX_DEVIATION_PCT away from the market's of the
    day is a superuser's to set: every quote prices by it, and every late
    payment is valued at the lower of it and its locked rate."""
    code = _currency_code(currency, code="invalid_currency")
    now = timezone.now()
    note = (note or "").strip()
    if not note:
        raise DomainError("reason_required", "Say why the manual rate is set (it is in the audit trail).")
    try:
        value = Decimal(str(usd).strip()) if not isinstance(usd, float) else None
    except InvalidOperation:
        value = None
    price = _price(value) if value is not None else None
    if price is None or price != value:
        raise DomainError(
            "invalid_rate",
            "A manual rate is a positive USD amount with at most 12 decimal places.",
            details={"usd": str(usd)},
        )
    if valid_until is None or timezone.is_naive(valid_until) or valid_until <= now:
        raise DomainError(
            "invalid_valid_until",
            "A manual rate needs a timezone-aware valid_until in the future.",
            details={"valid_until": valid_until.isoformat() if valid_until else None},
        )
    market = rate_market_of_the_day(currency=code, now=now)
    limit = Decimal(settings.RATE_MANUAL_MAX_DEVIATION_PCT)
    if market is not None and _pct(abs(price - market), market) > limit and not getattr(actor, "is_superuser", False):
        raise DomainError(
            "rate_far_from_market",
            f"{_trim(price)} USD is more than {limit}% away from the market's {market} USD today: only a superuser sets it.",
            details={"usd": str(_trim(price)), "market_usd": str(market), "max_deviation_pct": str(limit)},
        )
    with transaction.atomic():
        sample = RateSample.objects.create(
            currency=code,
            source=SOURCE_MANUAL,
            usd=price,
            observed_at=now,
            valid_until=valid_until,
            created_by=actor if getattr(actor, "pk", None) else None,
            note=note,
        )
        audit_record(
            actor=actor, action=AuditAction.RATE_MANUAL_SET, obj=sample, changes=model_snapshot(sample), reason=note
        )
    return sample


def rate_manual_end(*, sample_id: int, actor: Any, reason: str) -> RateSample:
    """End a staff manual rate now (it stays on record, with its end time)."""
    with transaction.atomic():
        sample = RateSample.objects.select_for_update().filter(pk=sample_id, source=SOURCE_MANUAL).first()
        if sample is None:
            raise DomainError("not_found", "No such manual rate.", status=404, details={"id": sample_id})
        now = timezone.now()
        if sample.valid_until is not None and sample.valid_until <= now:
            raise DomainError(
                "rate_already_ended",
                "This manual rate has already ended.",
                status=409,
                details={"id": sample.pk, "valid_until": sample.valid_until.isoformat()},
            )
        before = sample.valid_until
        sample.valid_until = now
        sample.save(update_fields=["valid_until"])
        audit_record(
            actor=actor,
            action=AuditAction.RATE_MANUAL_END,
            obj=sample,
            changes={"valid_until": [before, now]},
            reason=reason,
        )
    return sample


# --- The rate in force --------------------------------------------------------


def _max_age() -> timedelta:
    return timedelta(seconds=int(settings.RATE_MAX_AGE_SECONDS))


def _manual_sample(code: str, now: datetime) -> RateSample | None:
    """The latest staff rate still in force. One saved without `valid_until`
    lasts as long as a market sample would."""
    return (
        RateSample.objects.filter(currency=code, source=SOURCE_MANUAL, observed_at__lte=now)
        .filter(Q(valid_until__gt=now) | Q(valid_until__isnull=True, observed_at__gt=now - _max_age()))
        .order_by("-observed_at", "-id")
        .first()
    )


def _fresh_samples(code: str, now: datetime) -> list[RateSample]:
    """The latest fresh sample of each market source."""
    latest: dict[str, RateSample] = {}
    samples = (
        RateSample.objects.filter(currency=code, observed_at__gt=now - _max_age(), observed_at__lte=now)
        .exclude(source=SOURCE_MANUAL)
        .order_by("-observed_at", "-id")
    )
    for sample in samples:
        latest.setdefault(sample.source, sample)
    return list(latest.values())


def _source_order(sources: Iterable[str]) -> list[str]:
    configured = [p.strip().lower() for p in settings.RATE_PROVIDERS]
    return sorted(sources, key=lambda s: (configured.index(s) if s in configured else len(configured), s))


def _median(values: Sequence[Decimal]) -> tuple[Decimal, list[Decimal]]:
    """The median, and the middle value(s) it is made of."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid], [ordered[mid]]
    low, high = ordered[mid - 1], ordered[mid]
    with localcontext() as ctx:
        ctx.prec = 60  # exact: the halves of two 12-place numbers have 13 places
        return (low + high) / 2, [low, high]


def _pct(part: Decimal, whole: Decimal) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 28
        return part * 100 / whole


def rate_current(*, currency: str) -> Rate:
    """The USD rate of `currency` to quote with now. Raises DomainError
    `rate_unavailable` (409) when no figure fresh enough exists, and
    `stablecoin_depegged` (409) when a stablecoin is off its peg."""
    code = _currency_code(currency, code="rate_unavailable")
    now = timezone.now()

    setting = manual_rates_from_setting().get(code)
    if setting is not None:
        return Rate(currency=code, usd=setting, source=SOURCE_SETTING, at=now)

    manual = _manual_sample(code, now)
    if manual is not None:
        return Rate(currency=code, usd=_trim(manual.usd), source=SOURCE_MANUAL, at=manual.observed_at)

    fresh = _fresh_samples(code, now)
    if not fresh:
        raise DomainError(
            "rate_unavailable",
            f"No {code} exchange rate fresher than {settings.RATE_MAX_AGE_SECONDS} seconds; try again shortly "
            "or pay in another currency.",
            status=409,
            details={"currency": code, "max_age_seconds": settings.RATE_MAX_AGE_SECONDS},
        )
    at = min(s.observed_at for s in fresh)

    if CURRENCIES[code].stable:
        threshold = Decimal(settings.STABLECOIN_DEPEG_PCT)
        off_peg = {s.source: s.usd for s in fresh if _pct(abs(s.usd - PEG_USD), PEG_USD) > threshold}
        if off_peg:
            raise DomainError(
                "stablecoin_depegged",
                f"{code} is trading more than {threshold}% away from 1 USD; pay in another currency.",
                status=409,
                details={
                    "currency": code,
                    "depeg_pct": str(threshold),
                    "observed_usd": {source: str(_trim(usd)) for source, usd in off_peg.items()},
                },
            )
        return Rate(currency=code, usd=PEG_USD, source=SOURCE_PEG, at=at)

    usd, middle = _median([s.usd for s in fresh])
    max_spread, spread = _max_spread_pct(), _spread_pct(usd, middle)
    if spread > max_spread:
        # With two sources the median is their mean: if they disagree this much
        # one of them is wrong, and there is no telling which.
        raise DomainError(
            "rate_unavailable",
            f"The {code} exchange rate sources disagree; try again shortly or pay in another currency.",
            status=409,
            details={
                "currency": code,
                "spread_pct": str(spread.quantize(Decimal("0.01"))),
                "max_spread_pct": str(max_spread),
            },
        )
    sources = _source_order(s.source for s in fresh)
    label = sources[0] if len(sources) == 1 else f"median({','.join(sources)})"
    return Rate(currency=code, usd=_trim(usd), source=label, at=at)


def rate_to_value_at(*, currency: str, now: datetime) -> Decimal | None:
    """The USD rate to value money in `currency` by, outside any rate lock (a
    payment seen after its quote ended): the rate in force (rate_current, as of
    the clock); when there is none (stale, sources apart, a stablecoin off its
    peg), the median of each market source's latest sample of the day before
    `now` (sources apart are as likely high as low); None when there is none either. The caller
    takes the lower of this and its locked rate."""
    try:
        return rate_current(currency=currency).usd
    except DomainError:
        pass
    return rate_market_of_the_day(currency=currency, now=now)


def rate_market_at(*, currency: str, now: datetime) -> Decimal | None:
    """What the market said a coin was worth at a past moment, to value money
    that bought nothing by: the median of each market source's latest sample of
    the day before `now`, as a quote would have read it: a stablecoin within
    STABLECOIN_DEPEG_PCT of its peg is worth the peg, and sources further apart
    than RATE_MAX_SPREAD_PCT tell nothing (one of them is wrong): None, as when
    there is no sample."""
    day = _median_of_the_day(currency, now)
    if day is None:
        return None
    usd, middle = day
    if _spread_pct(usd, middle) > _max_spread_pct():
        return None
    if CURRENCIES[currency].stable and _pct(abs(usd - PEG_USD), PEG_USD) <= Decimal(settings.STABLECOIN_DEPEG_PCT):
        return PEG_USD
    return _trim(usd)


def _max_spread_pct() -> Decimal:
    return Decimal(getattr(settings, "RATE_MAX_SPREAD_PCT", DEFAULT_MAX_SPREAD_PCT))


def _spread_pct(usd: Decimal, middle: list[Decimal]) -> Decimal:
    """How far apart the samples a median `usd` was taken from (`middle`) are, in percent of it."""
    return _pct(max(middle) - min(middle), usd)


def _median_of_the_day(currency: str, now: datetime) -> tuple[Decimal, list[Decimal]] | None:
    """The median of each market source's latest sample of the day before `now`
    (staff manual rates left out), and the middle sample(s) it is made of (_median);
    None when there is none."""
    latest: dict[str, Decimal] = {}
    for source, usd in (
        RateSample.objects.filter(currency=currency, observed_at__lte=now, observed_at__gt=now - timedelta(days=1))
        .exclude(source=SOURCE_MANUAL)  # one in force is rate_current's; an ended one was withdrawn
        .order_by("-observed_at", "-id")
        .values_list("source", "usd")[:500]
    ):
        latest.setdefault(source, usd)
    return _median(list(latest.values())) if latest else None


def rate_market_of_the_day(*, currency: str, now: datetime) -> Decimal | None:
    """The median of each market source's latest sample of the day before
    `now` (staff manual rates left out), or None when there is none: what the
    market said at a past moment, as far as the samples kept tell."""
    day = _median_of_the_day(currency, now)
    return None if day is None else _trim(day[0])
