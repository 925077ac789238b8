"""core.fields.BaseUnitsModelField: crypto amounts in base units are exact
integers on PostgreSQL and on the embedded default (SQLite), read back as
`int`, and compare and sort in SQL as numbers on both."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import connections
from django.db.models import Max, Min
from django.utils import timezone

from billing.models import CreditEntry, Payment, PaymentRequest, StrayTransfer
from core.fields import BaseUnitsModelField

UINT256_MAX = 2**256 - 1
ETH_INVOICE = 546742857142857143  # read back as ...857000 through SQLite's float
B200_ORDER_WEI = 16004571428571428572  # an 8x B200 order in ETH: above 2**63, SQLite stored it as a REAL
AMOUNTS = [1, ETH_INVOICE, 2**63 - 1, 2**63, B200_ORDER_WEI, 2**64 + 1, UINT256_MAX]


def stray(alias: str, n: int, amount: int) -> StrayTransfer:
    return StrayTransfer.objects.using(alias).create(
        chain="ethereum",
        txid=f"0x{n:064x}",
        position="tx",
        kind="unknown_token",
        address="0xabc",
        asset="0xdef",
        amount=amount,
        first_seen_at=timezone.now(),
    )


@pytest.mark.django_db(databases=["default", "sqlite"])
@pytest.mark.parametrize("alias", ["default", "sqlite"])
def test_amounts_round_trip_exactly_as_int(alias):
    assert connections[alias].vendor == {"default": "postgresql", "sqlite": "sqlite"}[alias]
    for n, amount in enumerate(AMOUNTS):
        stray(alias, n, amount)
    back = list(StrayTransfer.objects.using(alias).order_by("amount").values_list("amount", flat=True))
    assert back == sorted(AMOUNTS) and all(type(a) is int for a in back)
    row = StrayTransfer.objects.using(alias).get(amount=UINT256_MAX)
    assert row.amount == UINT256_MAX
    # Saving a row again (as a confirmation update does) rewrites it unchanged.
    row.note = "seen again"
    row.save()
    assert StrayTransfer.objects.using(alias).get(pk=row.pk).amount == UINT256_MAX
    one = StrayTransfer.objects.using(alias).get(amount=ETH_INVOICE)
    assert one.amount == ETH_INVOICE and str(one.amount).endswith("143")


@pytest.mark.django_db(databases=["default", "sqlite"])
@pytest.mark.parametrize("alias", ["default", "sqlite"])
def test_amounts_compare_and_aggregate_as_numbers_in_sql(alias):
    # 9 < 10 < 2**64 as numbers; as plain text "10" < "9".
    for n, amount in enumerate([9, 10, 2**64, B200_ORDER_WEI]):
        stray(alias, n, amount)
    rows = StrayTransfer.objects.using(alias)
    assert set(rows.filter(amount__gt=9).values_list("amount", flat=True)) == {10, 2**64, B200_ORDER_WEI}
    assert set(rows.filter(amount__lt=2**63).values_list("amount", flat=True)) == {9, 10}
    assert set(rows.filter(amount__in=[10, B200_ORDER_WEI]).values_list("amount", flat=True)) == {10, B200_ORDER_WEI}
    assert rows.aggregate(lo=Min("amount"), hi=Max("amount")) == {"lo": 9, "hi": 2**64}
    assert list(rows.order_by("-amount").values_list("amount", flat=True))[:2] == [2**64, B200_ORDER_WEI]


@pytest.mark.django_db(databases=["default", "sqlite"])
@pytest.mark.parametrize("alias", ["default", "sqlite"])
def test_the_database_refuses_a_zero_amount(alias):
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError), transaction.atomic(using=alias):
        stray(alias, 1, 0)


def test_every_base_unit_column_uses_the_field():
    for model, name in [
        (PaymentRequest, "amount_due"),
        (Payment, "amount"),
        (StrayTransfer, "amount"),
        (CreditEntry, "refund_amount"),
    ]:
        assert isinstance(model._meta.get_field(name), BaseUnitsModelField), (model, name)


def test_values_that_are_not_whole_base_units_are_refused():
    field = BaseUnitsModelField()
    field.name = "amount"
    assert field.to_python("546742857142857143") == ETH_INVOICE
    assert field.to_python(Decimal("1E+3")) == 1000
    for bad in ("1.5", "-3", "0x10", "", "\uff11\uff12", Decimal("1.5"), 1.0):
        with pytest.raises(ValidationError):
            field.to_python(bad)
    for bad in (-1, UINT256_MAX + 1):
        with pytest.raises(ValueError):
            field.get_prep_value(bad)
    with pytest.raises(ValidationError):
        field.clean(UINT256_MAX + 1, None)


def test_an_amount_summed_through_a_float_is_refused_not_rounded():
    with pytest.raises(TypeError, match="float"):
        BaseUnitsModelField().from_db_value(1.6004571428571428e19, None, connections["default"])
