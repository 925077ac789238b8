"""The rate in force: median of fresh sources, stablecoin peg, manual rates."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ImproperlyConfigured

from accounts.models import Account
from billing.models import RateSample
from billing.rates import Rate, rate_current, rate_manual_end, rate_manual_set, rate_samples_prune
from core.errors import DomainError
from core.models import AuditEntry

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _setup(settings, time_machine):
    settings.MANUAL_RATES_USD = ""
    settings.RATE_PROVIDERS = ["kraken", "coingecko"]
    settings.RATE_MAX_AGE_SECONDS = 600
    settings.STABLECOIN_DEPEG_PCT = Decimal("2")
    time_machine.move_to(NOW, tick=False)


@pytest.fixture
def staff():
    return Account.objects.create_user("rates.staff", "a-long-staff-password", is_staff=True)


def sample(currency: str, source: str, usd: str, age: int = 30, **extra) -> RateSample:
    return RateSample.objects.create(
        currency=currency, source=source, usd=Decimal(usd), observed_at=NOW - timedelta(seconds=age), **extra
    )


def refused(currency: str) -> DomainError:
    with pytest.raises(DomainError) as caught:
        rate_current(currency=currency)
    return caught.value


# --- Median of fresh sources --------------------------------------------------------


def test_median_of_two_sources_is_their_exact_mean():
    sample("ETH", "kraken", "3051.275", age=5)
    sample("ETH", "coingecko", "3049.52", age=42)
    assert rate_current(currency="ETH") == Rate(
        currency="ETH",
        usd=Decimal("3050.3975"),
        source="median(kraken,coingecko)",
        at=NOW - timedelta(seconds=42),
    )


def test_median_keeps_every_digit():
    sample("BTC", "kraken", "91234.000000000001")
    sample("BTC", "coingecko", "91234.000000000002")
    assert rate_current(currency="BTC").usd == Decimal("91234.0000000000015")


def test_median_of_three_sources_is_the_middle_one():
    sample("LTC", "kraken", "88.13", age=10)
    sample("LTC", "coingecko", "88.09", age=70)
    sample("LTC", "bitstamp", "88.31", age=20)
    rate = rate_current(currency="LTC")
    assert rate.usd == Decimal("88.13")
    assert rate.source == "median(kraken,coingecko,bitstamp)"
    assert rate.at == NOW - timedelta(seconds=70)


def test_median_of_three_outvotes_one_wrong_source():
    sample("SOL", "kraken", "140.365")
    sample("SOL", "coingecko", "140.41")
    sample("SOL", "bitstamp", "14.04")  # a decimal point lost somewhere
    assert rate_current(currency="SOL").usd == Decimal("140.365")


def test_only_the_latest_sample_of_each_source_counts():
    sample("XMR", "kraken", "380.00", age=300)
    sample("XMR", "kraken", "389.32", age=20)
    sample("XMR", "coingecko", "388.75", age=40)
    rate = rate_current(currency="XMR")
    assert rate.usd == Decimal("389.035")
    assert rate.at == NOW - timedelta(seconds=40)


def test_a_single_fresh_source_is_named_plainly():
    sample("BTC", "coingecko", "91251.00")
    rate = rate_current(currency="btc")
    assert (rate.currency, rate.usd, rate.source) == ("BTC", Decimal("91251"), "coingecko")


def test_two_sources_that_disagree_too_much_are_refused(settings):
    sample("BTC", "kraken", "91234.55")
    sample("BTC", "coingecko", "82000")
    error = refused("BTC")
    assert (error.code, error.status) == ("rate_unavailable", 409)
    assert error.details["max_spread_pct"] == "5"
    settings.RATE_MAX_SPREAD_PCT = Decimal("20")
    assert rate_current(currency="BTC").usd == Decimal("86617.275")


# --- Freshness --------------------------------------------------------------------


def test_stale_samples_are_ignored():
    sample("ETH", "kraken", "3051.275", age=30)
    sample("ETH", "coingecko", "2900.00", age=601)
    rate = rate_current(currency="ETH")
    assert (rate.usd, rate.source) == (Decimal("3051.275"), "kraken")


def test_a_sample_exactly_max_age_old_is_stale():
    sample("ETH", "kraken", "3051.275", age=600)
    assert refused("ETH").code == "rate_unavailable"


def test_nothing_fresh_is_refused_never_quoted_stale():
    sample("BTC", "kraken", "91234.55", age=601)
    sample("BTC", "coingecko", "91251", age=3600)
    error = refused("BTC")
    assert (error.code, error.status) == ("rate_unavailable", 409)
    assert error.details == {"currency": "BTC", "max_age_seconds": 600}


def test_no_sample_at_all_is_refused():
    error = refused("SOL")
    assert (error.code, error.status) == ("rate_unavailable", 409)


def test_samples_dated_in_the_future_do_not_count():
    sample("BTC", "kraken", "91234.55", age=-120)
    assert refused("BTC").code == "rate_unavailable"


def test_another_currencys_samples_do_not_count():
    sample("LTC", "kraken", "88.13")
    assert refused("BTC").code == "rate_unavailable"


@pytest.mark.parametrize("currency", ["DOGE", "", "   ", None, 42, "BTC,ETH"])
def test_an_unknown_currency_is_a_client_error(currency):
    error = refused(currency)
    assert (error.code, error.status) == ("rate_unavailable", 400)


# --- Stablecoins -------------------------------------------------------------------


def test_stablecoin_is_exactly_one_dollar_while_on_its_peg():
    sample("USDT", "kraken", "0.99975", age=3)
    sample("USDT", "coingecko", "1.0003", age=50)
    assert rate_current(currency="USDT") == Rate(
        currency="USDT", usd=Decimal("1.00"), source="peg", at=NOW - timedelta(seconds=50)
    )


def test_stablecoin_at_the_threshold_is_still_on_its_peg():
    sample("USDC", "kraken", "0.98")
    sample("USDC", "coingecko", "1.02")
    assert rate_current(currency="USDC").usd == Decimal("1.00")


@pytest.mark.parametrize("usd", ["0.979999", "1.020001", "0.5"])
def test_stablecoin_beyond_the_threshold_is_refused(usd):
    sample("USDC", "kraken", "0.9999")
    sample("USDC", "coingecko", usd)
    error = refused("USDC")
    assert (error.code, error.status) == ("stablecoin_depegged", 409)
    assert error.details["observed_usd"] == {"coingecko": usd}
    assert error.details["depeg_pct"] == "2"


def test_stablecoin_threshold_comes_from_settings(settings):
    settings.STABLECOIN_DEPEG_PCT = Decimal("0.5")
    sample("USDT", "kraken", "0.994")
    assert refused("USDT").code == "stablecoin_depegged"


def test_a_stale_depeg_is_ignored():
    sample("USDT", "coingecko", "0.85", age=900)
    sample("USDT", "kraken", "0.9998", age=10)
    assert rate_current(currency="USDT").usd == Decimal("1.00")


def test_stablecoin_without_a_fresh_source_is_refused():
    sample("USDT", "kraken", "1.0000", age=601)
    assert refused("USDT").code == "rate_unavailable"


# --- Manual rates from settings ---------------------------------------------------------


def test_setting_rates_are_always_fresh_and_come_first(settings):
    settings.MANUAL_RATES_USD = "BTC=95000, eth=3500.5,USDT=0.999"
    sample("BTC", "kraken", "91234.55")
    assert rate_current(currency="BTC") == Rate(currency="BTC", usd=Decimal("95000"), source="setting", at=NOW)
    assert rate_current(currency="ETH").usd == Decimal("3500.5")
    assert rate_current(currency="USDT").usd == Decimal("0.999")
    assert refused("SOL").code == "rate_unavailable"  # not in the setting, no sample


@pytest.mark.parametrize("value", ["BTC", "BTC=", "BTC=abc", "BTC=-5", "BTC=0", "DOGE=1", "BTC=1.0000000000001"])
def test_a_malformed_setting_is_a_configuration_error(settings, value):
    settings.MANUAL_RATES_USD = value
    with pytest.raises(ImproperlyConfigured, match="MANUAL_RATES_USD"):
        rate_current(currency="BTC")


# --- Manual rates from staff ---------------------------------------------------------


def test_staff_manual_rate_wins_until_valid_until(staff, time_machine):
    sample("XMR", "kraken", "389.32")
    sample("XMR", "coingecko", "388.75")
    manual = rate_manual_set(
        currency="xmr",
        usd="390.10",
        valid_until=NOW + timedelta(hours=2),
        actor=staff,
        note="Kraken halted XMR deposits; using the OTC desk price.",
    )
    assert (manual.source, manual.created_by, manual.currency) == ("manual", staff, "XMR")
    assert rate_current(currency="XMR") == Rate(currency="XMR", usd=Decimal("390.1"), source="manual", at=NOW)

    # Still in force long after a market sample would be stale.
    time_machine.move_to(NOW + timedelta(hours=1, minutes=59), tick=False)
    assert rate_current(currency="XMR").source == "manual"

    time_machine.move_to(NOW + timedelta(hours=2), tick=False)
    assert refused("XMR").code == "rate_unavailable"  # back to the market, whose samples are stale now


def test_staff_manual_rate_is_audited(staff):
    manual = rate_manual_set(
        currency="SOL", usd=Decimal("141"), valid_until=NOW + timedelta(minutes=30), actor=staff, note="test"
    )
    entry = AuditEntry.objects.get(action="rate.manual_set")
    assert (entry.actor, entry.object_id, entry.reason) == (staff, str(manual.pk), "test")
    assert entry.changes["usd"] == "141.000000000000"


def test_the_latest_staff_manual_rate_counts(staff):
    rate_manual_set(currency="BTC", usd="90000", valid_until=NOW + timedelta(hours=1), actor=staff, note="test")
    sample("BTC", "manual", "93000", age=-1, valid_until=NOW + timedelta(hours=1))  # starts in a second
    assert rate_current(currency="BTC").usd == Decimal("90000")


def test_ending_a_staff_manual_rate_returns_to_the_market(staff):
    sample("LTC", "kraken", "88.13")
    manual = rate_manual_set(currency="LTC", usd="80", valid_until=NOW + timedelta(days=1), actor=staff, note="test")
    assert rate_current(currency="LTC").usd == Decimal("80")
    rate_manual_end(sample_id=manual.pk, actor=staff, reason="Market feed is back.")
    assert rate_current(currency="LTC").usd == Decimal("88.13")
    manual.refresh_from_db()
    assert manual.valid_until == NOW
    assert AuditEntry.objects.filter(action="rate.manual_end", object_id=str(manual.pk)).count() == 1
    with pytest.raises(DomainError) as again:
        rate_manual_end(sample_id=manual.pk, actor=staff, reason="twice")
    assert again.value.code == "rate_already_ended"


def test_ending_something_that_is_not_a_manual_rate_is_not_found(staff):
    market = sample("LTC", "kraken", "88.13")
    with pytest.raises(DomainError) as caught:
        rate_manual_end(sample_id=market.pk, actor=staff, reason="no")
    assert (caught.value.code, caught.value.status) == ("not_found", 404)


def test_a_manual_sample_without_valid_until_lasts_as_long_as_a_market_one():
    sample("ETH", "manual", "3333", age=599)
    assert rate_current(currency="ETH").usd == Decimal("3333")
    sample("BTC", "manual", "90000", age=600)
    assert refused("BTC").code == "rate_unavailable"


def test_a_staff_manual_rate_overrides_the_peg(staff):
    sample("USDT", "kraken", "0.95")
    rate_manual_set(currency="USDT", usd="0.95", valid_until=NOW + timedelta(hours=1), actor=staff, note="test")
    assert rate_current(currency="USDT") == Rate(currency="USDT", usd=Decimal("0.95"), source="manual", at=NOW)


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"currency": "DOGE"}, "invalid_currency"),
        ({"usd": "0"}, "invalid_rate"),
        ({"usd": "-1"}, "invalid_rate"),
        ({"usd": "abc"}, "invalid_rate"),
        ({"usd": 95000.5}, "invalid_rate"),  # a float is never money
        ({"usd": "1.0000000000001"}, "invalid_rate"),
        ({"usd": "1e30"}, "invalid_rate"),
        ({"valid_until": NOW}, "invalid_valid_until"),
        ({"valid_until": NOW - timedelta(seconds=1)}, "invalid_valid_until"),
        ({"valid_until": datetime(2026, 12, 1, 0, 0)}, "invalid_valid_until"),
        ({"note": " "}, "reason_required"),
    ],
)
def test_staff_manual_rate_validation(staff, kwargs, code):
    args = {"currency": "BTC", "usd": "95000", "valid_until": NOW + timedelta(hours=1), "actor": staff, "note": "x"}
    with pytest.raises(DomainError) as caught:
        rate_manual_set(**(args | kwargs))
    assert (caught.value.code, caught.value.status) == (code, 400)
    assert not RateSample.objects.exists()
    assert not AuditEntry.objects.exists()


def test_a_manual_rate_far_from_the_market_is_a_superusers_to_set(staff, settings):
    """A member of staff who may add rates sets one within
    RATE_MANUAL_MAX_DEVIATION_PCT of the market's of the day; further (a typo,
    or a rate that lets a colluding payer settle for almost nothing) only a
    superuser does. With no market sample of the day there is nothing to hold
    it to."""
    settings.RATE_MANUAL_MAX_DEVIATION_PCT = Decimal("25")
    sample("BTC", "kraken", "90000", age=3600)
    sample("BTC", "coingecko", "90200", age=7200)
    until = NOW + timedelta(hours=1)
    with pytest.raises(DomainError) as caught:
        rate_manual_set(currency="BTC", usd="9000", valid_until=until, actor=staff, note="a zero short")
    assert (caught.value.code, caught.value.status) == ("rate_far_from_market", 400)
    assert caught.value.details == {"usd": "9000", "market_usd": "90100", "max_deviation_pct": "25"}
    assert not RateSample.objects.filter(source="manual").exists()
    assert rate_manual_set(currency="BTC", usd="70000", valid_until=until, actor=staff, note="flash crash").usd == 70000
    boss = Account.objects.create_superuser("rates.boss", "a-long-boss-password")
    assert rate_manual_set(currency="BTC", usd="9000", valid_until=until, actor=boss, note="halted market").usd == 9000
    assert rate_manual_set(currency="SOL", usd="1", valid_until=until, actor=staff, note="no market today").usd == 1


def test_the_market_at_a_past_moment_reads_as_a_quote_would():
    """rate_market_at (money that bought nothing is valued by it): each source's
    latest sample of the day before; a stablecoin on its peg is the peg; sources
    too far apart tell nothing."""
    from billing.rates import rate_market_at

    sample("LTC", "kraken", "80", age=7200)
    sample("LTC", "kraken", "72", age=600)
    sample("LTC", "coingecko", "72.2", age=900)
    sample("LTC", "kraken", "60", age=-60)  # after the moment asked about
    assert rate_market_at(currency="LTC", now=NOW) == Decimal("72.1")
    sample("USDT", "kraken", "0.9998", age=60)
    sample("USDT", "coingecko", "1.0001", age=60)
    assert rate_market_at(currency="USDT", now=NOW) == Decimal("1.00")
    sample("BTC", "kraken", "90000", age=60)
    sample("BTC", "coingecko", "45000", age=60)  # one of them is wrong
    assert rate_market_at(currency="BTC", now=NOW) is None
    assert rate_market_at(currency="SOL", now=NOW) is None


# --- Pruning ---------------------------------------------------------------------


def test_prune_removes_old_market_samples_and_keeps_manual_ones():
    old = sample("BTC", "kraken", "90000", age=40 * 86400)
    kept = sample("BTC", "kraken", "91000", age=10)
    manual = sample("BTC", "manual", "89000", age=40 * 86400, valid_until=NOW - timedelta(days=39))
    assert rate_samples_prune(before=NOW - timedelta(days=30)) == 1
    assert set(RateSample.objects.values_list("pk", flat=True)) == {kept.pk, manual.pk}
    assert not RateSample.objects.filter(pk=old.pk).exists()
