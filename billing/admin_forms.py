"""Forms of the staff admin that take on-chain amounts: staff type whole coins
(`0.0123 BTC`) or base units (`1230000 satoshi`), always with the unit, and
the form turns them into integer base units exactly (Decimal, never a float).
A bare number is refused: `1` could be one coin or one satoshi."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

from django import forms
from django.conf import settings
from django.db.models import QuerySet

from billing.currencies import CURRENCIES, Currency, amount_label
from billing.models import Invoice, PaymentRequest
from billing.selectors import checkout_status, invoice_prefetches
from core import display
from core.admin import ReasonForm
from core.fields import BaseUnitsModelField

_AMOUNT = re.compile(r"^\s*(?P<number>[0-9][0-9_,]*(?:\.[0-9]+)?|\.[0-9]+)\s*(?P<unit>[A-Za-z][A-Za-z ]*?)?\s*$")


def _unit_names(currency: Currency) -> set[str]:
    """How staff may name the base unit: `satoshi`, `lamport`, `lamports`, `token units`."""
    unit = currency.unit.lower()
    return {unit, f"{unit}s"}


def unit_hint(currency: Currency) -> str:
    """`0.5 BTC or 50000000 satoshi`: the two ways to write an amount of this currency."""
    half = currency.scale // 2
    return f"{currency.to_coins(half).normalize():f} {currency.code} or {half} {currency.unit}"


@dataclass(frozen=True)
class ParsedAmount:
    currencies: tuple[str, ...]  # those the unit can mean: one, or several that share a base unit
    base_units: int

    @property
    def currency(self) -> str | None:
        return self.currencies[0] if len(self.currencies) == 1 else None


def amount_parse(text: str, *, currencies: list[str]) -> ParsedAmount:
    """`0.0123 BTC` -> (BTC, 1230000); `1230000 satoshi` -> (BTC, 1230000);
    `5000000 token units` -> ((USDT, USDC), 5000000) when both are
    possible. `currencies` are the ones the amount may be in. Raises
    ValidationError with what was wrong and how to write it."""
    examples = "; ".join(unit_hint(CURRENCIES[c]) for c in currencies)
    match = _AMOUNT.match(text or "")
    if match is None:
        raise forms.ValidationError(f"Write a number and its unit, e.g. {examples}.", code="amount_format")
    number = match["number"].replace(",", "").replace("_", "")
    unit = (match["unit"] or "").strip()
    if not unit:
        raise forms.ValidationError(
            f"Say the unit: whole coins or base units, e.g. {examples}.", code="amount_unit_missing"
        )
    try:
        value = Decimal(number)
    except InvalidOperation as exc:  # the pattern admits only digits, so this is a guard
        raise forms.ValidationError("Not a number.", code="amount_format") from exc

    by_code = [c for c in currencies if c == unit.upper()]
    by_unit = [c for c in currencies if unit.lower() in _unit_names(CURRENCIES[c])]
    if by_code:
        currency = CURRENCIES[by_code[0]]
        exponent = value.as_tuple().exponent
        places = -exponent if isinstance(exponent, int) and exponent < 0 else 0
        if places > currency.decimals:
            raise forms.ValidationError(
                f"{currency.code} has {currency.decimals} decimal places; {number} has {places}.",
                code="amount_too_precise",
            )
        with localcontext() as ctx:
            ctx.prec = 120  # exact for any amount that fits numeric(78, 0)
            base_units = int(value.scaleb(currency.decimals))
        parsed = ParsedAmount((currency.code,), base_units)
    elif by_unit:
        if value != value.to_integral_value():
            unit_name = CURRENCIES[by_unit[0]].unit
            raise forms.ValidationError(
                f"{unit_name} are whole numbers: write {number} {unit_name} without decimals, or the amount in coins.",
                code="amount_fraction_of_base_unit",
            )
        parsed = ParsedAmount(tuple(by_unit), int(value))
    else:
        raise forms.ValidationError(f"Unknown unit {unit!r} here: write e.g. {examples}.", code="amount_unit_unknown")
    if parsed.base_units <= 0:
        raise forms.ValidationError("The amount must be positive.", code="amount_not_positive")
    if parsed.base_units > BaseUnitsModelField.MAX:
        raise forms.ValidationError("More than any chain can hold: check the amount.", code="amount_too_large")
    return parsed


MAX_QUOTES_SHOWN = 6  # an invoice re-quoted more often lists its latest quotes


def _request_facts(request: PaymentRequest) -> str:
    currency = CURRENCIES[request.currency]
    return (
        f"{amount_label(request.currency, request.amount_due)} at {display.price(request.rate_usd)} USD per "
        f"{currency.code}; settles at {settings.CONFIRMATIONS[request.currency]} confirmations"
    )


class RecordPaymentForm(ReasonForm):
    """Record a payment staff verified on the chain themselves. Built for one
    invoice (`objects`: the action's selection), so it can show what is due in
    each of the invoice's currencies and how many confirmations settle it."""

    txid = forms.CharField(max_length=128, label="Transaction id")
    amount = forms.CharField(
        max_length=120,
        help_text="In whole coins with the code (0.0123 BTC) or in base units with their name (1230000 satoshi).",
    )
    confirmations = forms.IntegerField(
        min_value=0, help_text="As the node shows them now; the payment settles at the number listed above."
    )
    output_index = forms.IntegerField(
        initial=0,
        help_text="Output index (BTC, LTC), log index (USDT, USDC) or subaddress index (XMR); ignored for ETH.",
    )
    currency = forms.ChoiceField(
        required=False,
        help_text="Leave it on the invoice's active currency unless the payment was made to an earlier quote.",
    )
    takes_objects = True  # reason_action passes the selection as `objects`
    field_order = ("txid", "amount", "currency", "confirmations", "output_index", "reason")

    def __init__(self, *args: Any, objects: QuerySet[Invoice] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        invoice = None
        if objects is not None and objects.count() == 1:
            invoice = Invoice.objects.prefetch_related(*invoice_prefetches()).get(pk=objects.get().pk)
        self.invoice = invoice
        requests = sorted(invoice.requests.all(), key=lambda r: (r.created_at, r.pk), reverse=True) if invoice else []
        self.active = next((r for r in requests if r.is_active), requests[0] if requests else None)
        self.codes = list(dict.fromkeys(r.currency for r in requests)) or list(CURRENCIES)
        default = f"the invoice's active one ({self.active.currency})" if self.active else "the invoice's active one"
        currency_field = self.fields["currency"]
        assert isinstance(currency_field, forms.ChoiceField)
        currency_field.choices = [("", default)] + [(c, c) for c in self.codes]
        # What staff check the transfer against, shown above the form: each
        # quote (newest first) and, for the active one, what is still due.
        self.facts: list[tuple[str, str]] = []
        if invoice is not None and self.active is not None:
            status = checkout_status(invoice=invoice)
            if status.request is not None and status.paid:
                self.facts.append(
                    (
                        "Received so far",
                        f"{amount_label(status.request.currency, status.paid)}; still due "
                        f"{amount_label(status.request.currency, status.due)}",
                    )
                )
        for r in requests[:MAX_QUOTES_SHOWN]:
            label = f"Amount due in {r.currency}" + (" (active quote)" if r is self.active else " (earlier quote)")
            self.facts.append((label, _request_facts(r)))
        if self.active is not None:
            self.fields[
                "amount"
            ].help_text = f"In whole coins or base units, e.g. {unit_hint(CURRENCIES[self.active.currency])}."

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        assert data is not None  # Form.clean returns cleaned_data
        text = data.get("amount")
        if text is None:
            return data
        chosen = data.get("currency") or ""
        try:
            parsed = amount_parse(text, currencies=[chosen] if chosen else self.codes)
        except forms.ValidationError as exc:
            self.add_error("amount", exc)
            return data
        if not chosen and parsed.currency is None:
            # A base unit several of the invoice's currencies share (token units): the active one, if it is one.
            if self.active is None or self.active.currency not in parsed.currencies:
                self.add_error("currency", "Choose the currency of this amount.")
                return data
        elif not chosen and self.active is not None and parsed.currency != self.active.currency:
            chosen = parsed.currency  # `0.5 ETH` to an invoice quoted in ETH before
        data["currency"] = chosen
        data["amount"] = parsed.base_units
        return data


class RefundAmountField(forms.CharField):
    """The amount a refund sent, in the refund's currency (checked by the form)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("max_length", 120)
        kwargs.setdefault(
            "help_text",
            "What was sent, in whole coins with the code (0.0123 BTC) or base units with their name "
            "(1230000 satoshi); in the currency above.",
        )
        super().__init__(**kwargs)


def refund_amount_clean(form: forms.BaseForm, data: dict[str, Any]) -> None:
    """Turn the typed refund amount into base units of the refund's currency."""
    text = (data.get("refund_amount") or "").strip()
    if not text:
        data["refund_amount"] = None
        return
    code = data.get("refund_currency") or ""
    if not code:
        form.add_error("refund_currency", "Say which currency the refund was sent in.")
        return
    try:
        parsed = amount_parse(text, currencies=[code])
    except forms.ValidationError as exc:
        form.add_error("refund_amount", exc)
        return
    data["refund_amount"] = parsed.base_units
