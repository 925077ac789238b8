"""From an order to a paid reservation.

`order_create` is a few named steps: `order_prepare` validates against the
catalog (and the sizing of the workload, when given) and prices it, reading
only; then one transaction snapshots every line onto the order
(`_order_write`), reserves slots on one host (catalog.slots_reserve never
oversells) and issues the invoice (billing.invoice_issuing, around the
order's own last writes). If any step refuses, nothing is left behind: no
order, no reservation, no invoice number used.

The order's invoice pays for ("order", order.pk): rentals.payables tells
billing what follows its settlement, expiry and re-quote.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from accounts.models import SshKey
from billing import services as billing
from billing.models import Invoice, InvoiceStatus
from billing.payable import PayableRef
from billing.selectors import invoice_has_payments, invoice_prefetches, invoice_progress
from catalog import services as catalog
from catalog.models import TERM_HOURS, Addon, GpuModel, Region, Template
from catalog.selectors import CatalogSnapshot, catalog_current
from catalog.services import QuoteLine
from core.audit import AuditAction, audit_record
from core.db import columns, locked_or_404, written_keep
from core.errors import Conflict, DomainError
from core.money import usd_str
from rentals import machine
from rentals.events import order_event_emit, subscribers_hold
from rentals.models import Order, OrderLine, OrderStatus
from rentals.services.idempotency import storable
from rentals.services.unpaid import client_network, unpaid_limit_check
from sizing.services import sizing_new_counted

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OrderSpec:
    """A validated order request (see rentals.serializers.OrderCreateInput)."""

    region: str
    gpu: str
    gpu_count: int
    term: str
    terms: int
    template: str
    pay_currency: str
    ssh_keys: tuple[int, ...]
    addons: tuple[str, ...] = ()
    workload: Any = None  # sizing.arithmetic.Workload
    workload_input: dict[str, Any] | None = field(default=None)


def _template_get(catalog_now: CatalogSnapshot, slug: str) -> Template:
    template = catalog_now.templates.get(slug)
    if template is None:
        raise DomainError(
            "unknown_template", f"No template {slug!r}.", details={"templates": list(catalog_now.templates)}
        )
    return template


def _addons_get(catalog_now: CatalogSnapshot, slugs: tuple[str, ...]) -> list[Addon]:
    missing = [s for s in slugs if s not in catalog_now.addons]
    if missing:
        raise DomainError("unknown_addon", f"No add-on {missing[0]!r} can be ordered.", details={"addons": missing})
    return [catalog_now.addons[s] for s in slugs]


def _ssh_keys_get(account: Any, ids: tuple[int, ...]) -> list[SshKey]:
    if not ids:
        raise DomainError(
            "ssh_key_required",
            "Add at least one SSH key: root on the server is handed over through it.",
            details={"field": "ssh_keys"},
        )
    # Written out (Manager.raw turns the rows into keys as the ORM does): building
    # the filter cost the web worker twice what reading the rows does, on every order.
    wanted = list(dict.fromkeys(ids))
    keys = {
        k.pk: k
        for k in SshKey.objects.raw(
            f"SELECT {columns(SshKey)} FROM {connection.ops.quote_name(SshKey._meta.db_table)} "
            f"WHERE account_id = %s AND id IN ({', '.join(['%s'] * len(wanted))})",
            [account.pk, *wanted],
        )
    }
    missing = [i for i in ids if i not in keys]
    if missing:
        raise DomainError("unknown_ssh_key", "No such SSH key on your account.", details={"ssh_keys": missing})
    return [keys[i] for i in dict.fromkeys(ids)]


def _region_offers(catalog_now: CatalogSnapshot, region: Region, gpu: GpuModel) -> None:
    regions = list(catalog_now.gpu_regions.get(gpu.slug, ()))
    if region.code not in regions:
        raise Conflict(
            "region_unavailable",
            f"{gpu.name} is not offered in {region.code}.",
            details={"region": region.code, "gpu": gpu.slug, "regions": regions},
        )


def _workload_fits(catalog_now: CatalogSnapshot, spec: OrderSpec, gpu: GpuModel, region: Region) -> dict[str, Any]:
    """The sizing check's report; a refusal carries the breakdown and the
    cheapest configuration that fits in that region now. Priced with the tiers
    the order was priced with: nothing read twice."""
    from sizing.engine import PROFILE_VLLM
    from sizing.payloads import candidate_payload, check_payload
    from sizing.services import sizing_recommend, sizing_require_fit

    # The gate follows the engine, never the guide's arithmetic, however the workload was built.
    workload = replace(spec.workload, profile=PROFILE_VLLM)
    try:
        result = sizing_require_fit(
            request=workload,
            gpu=gpu,
            gpu_count=spec.gpu_count,
            term=spec.term,
            multi_gpu_tiers=catalog_now.multi_gpu_tiers,
            term_tiers={term: list(catalog_now.term_tiers.get(term, ())) for term in TERM_HOURS},
        )
    except DomainError as exc:
        if exc.code in ("invalid_gpu_count", "min_gpus"):
            raise
        cheapest = sizing_recommend(request=workload, region=region.code, term=spec.term).candidates
        exc.details["cheapest_fit"] = candidate_payload(cheapest[0]) if cheapest else None
        raise
    return check_payload(result)


def _invoice_lines(lines: Iterable[QuoteLine | OrderLine]) -> list[billing.LineSpec]:
    """Invoice lines from priced lines (an order's, or a quote's)."""
    return [
        billing.LineSpec(
            description=f"{ln.description} x {ln.terms}" if ln.terms > 1 else ln.description,
            quantity=Decimal(ln.quantity * ln.terms),
            unit_usd=ln.unit_usd,
            amount_usd=ln.amount_usd,
            discount_usd=ln.discount_usd,
            code=ln.code,
        )
        for ln in lines
    ]


@dataclass(frozen=True)
class PricedOrder:
    """An order request checked against the catalog and priced (order_prepare):
    everything the writes need, read before any lock is taken."""

    region: Region
    gpu: GpuModel
    template: Template
    addons: list[Addon]
    keys: list[SshKey]
    quote: catalog.Quote
    sizing: dict[str, Any] | None
    network: str


def order_create(*, account: Any, spec: OrderSpec, client_address: str = "", now: datetime | None = None) -> Order:
    """Place an order: validate and price it (reads, no lock held), then in one
    transaction write it, reserve its slots and issue its invoice. The order
    comes back as the transaction left it, with its lines, its invoice (lines,
    payment request) and no rental attached, so rendering it reads nothing
    more. `client_address`: the address the request came from
    (core.throttle.client_address), for the unpaid caps per address
    (services/unpaid.py); stored on the order as its client_network.

    The order of the writes is chosen for contention: the host is the best-fit
    one no other order holds (catalog.slots_reserve), the account's lock for
    its cap on unpaid orders (and its address's) is taken after the
    reservation (unpaid_limit_check), and the two counters every invoice
    queues on (the invoice number, the deposit key's index) are taken last,
    just before the commit (billing.invoice_issuing, on leaving its block).
    If any step refuses, nothing is left behind: no order, no reservation, no
    invoice number used."""
    now = now or timezone.now()
    priced = order_prepare(account=account, spec=spec, client_address=client_address)
    with transaction.atomic():
        order, lines = _order_write(account=account, spec=spec, priced=priced, now=now)
        reservation = catalog.slots_reserve(
            region=priced.region, gpu=priced.gpu, count=spec.gpu_count, holder=order.holder
        )
        # Read before the locks below, so the event after them costs no query
        # for an account without webhooks.
        subscribers = subscribers_hold(account=account)
        invoice_spec = _order_invoice_spec(order=order, lines=lines, priced=priced)
        with billing.invoice_issuing(spec=invoice_spec, now=now, attach=True) as invoice:
            order.host, order.invoice = reservation.host, invoice
            # A plain UPDATE of the two columns (no model signals listen to orders): save(update_fields=...)
            # builds its statement anew on every order, about three times the cost of sending it.
            Order.objects.filter(pk=order.pk).update(host=reservation.host, invoice=invoice)
            # Late, so the account's lock (concurrent orders of one account wait
            # on it) is held for the last few statements only.
            unpaid_limit_check(
                account=account,
                gpu_count=spec.gpu_count,
                placing=order.pk,
                network=priced.network,
                region=priced.region,
                gpu=priced.gpu,
            )
        written_keep(order, lines=lines, rental=None)  # a new order is no rental yet
        order_event_emit(order=order, type="order.created", subscribers=subscribers)
    log.info(
        "order %s: %sx %s in %s reserved on %s, invoice %s",
        order.pk,
        spec.gpu_count,
        priced.gpu.slug,
        priced.region.code,
        reservation.host.name,
        invoice.number,
    )
    return order


def order_prepare(*, account: Any, spec: OrderSpec, client_address: str = "") -> PricedOrder:
    """Validate an order request and price it, outside the transaction that
    writes it: the catalog from memory (catalog_current; its version asked of
    the database, so a price edited a moment ago applies), the account's SSH
    keys, the region's offer and the workload's fit (a new sizing of the
    client's: sizing.services.sizing_new_counted, 429 past its limit). Reads only."""
    catalog_now = catalog_current(exact=True)
    region = catalog_now.region(spec.region)
    gpu = catalog_now.gpu(spec.gpu)
    template = _template_get(catalog_now, spec.template)
    addons = _addons_get(catalog_now, spec.addons)
    keys = _ssh_keys_get(account, spec.ssh_keys)
    quote = catalog.quote(
        gpu=gpu,
        gpu_count=spec.gpu_count,
        term=spec.term,
        terms=spec.terms,
        addons=addons,
        template=template,
        multi_gpu_tiers=catalog_now.multi_gpu_tiers,
        term_tiers=catalog_now.term_tiers.get(spec.term, ()),
    )
    _region_offers(catalog_now, region, gpu)
    sizing = None
    if spec.workload is not None:
        # Sized afresh for every order (and on a refusal, the cheapest fit searched
        # over the region): counted with the client's other new sizings.
        sizing_new_counted(client_address=client_address)
        sizing = _workload_fits(catalog_now, spec, gpu, region)
    return PricedOrder(
        region=region,
        gpu=gpu,
        template=template,
        addons=addons,
        keys=keys,
        quote=quote,
        sizing=sizing,
        network=client_network(client_address),
    )


def _order_write(*, account: Any, spec: OrderSpec, priced: PricedOrder, now: datetime) -> tuple[Order, list[OrderLine]]:
    """The order, every priced line snapshot onto it."""
    quote = priced.quote
    # As jsonb and text columns store them: a config.json key the sizing does not read (its
    # `_name_or_path`, which the launch line names) is kept as sent, a NUL or a lone surrogate
    # in it as U+FFFD.
    sizing = storable(priced.sizing)
    order = Order(
        account=account,
        region=priced.region,
        gpu=priced.gpu,
        template=priced.template,
        gpu_count=spec.gpu_count,
        term=spec.term,
        terms=spec.terms,
        region_code=priced.region.code,
        gpu_slug=priced.gpu.slug,
        gpu_name=priced.gpu.name,
        template_slug=priced.template.slug,
        addons=[a.slug for a in priced.addons],
        ssh_keys=[
            {"id": k.pk, "name": k.name, "type": k.key_type, "fingerprint": k.fingerprint, "public_key": k.public_key}
            for k in priced.keys
        ],
        workload=storable(spec.workload_input),
        sizing=sizing,
        launch_command=((sizing or {}).get("launch") or {}).get("command", ""),
        pay_currency=spec.pay_currency.upper(),
        subtotal_usd=quote.subtotal_usd,
        multi_gpu_discount_pct=quote.multi_gpu_discount_pct,
        term_discount_pct=quote.term_discount_pct,
        discount_usd=quote.discount_usd,
        total_usd=quote.total_usd,
        per_gpu_hour_usd=quote.per_gpu_hour_usd,
        per_hour_usd=quote.per_hour_usd,
        client_network=priced.network,
        created_at=now,
    )
    order.save(force_insert=True)
    lines = OrderLine.objects.bulk_create(
        [
            OrderLine(
                order=order,
                position=i,
                code=ln.code,
                description=ln.description,
                quantity=ln.quantity,
                unit_usd=ln.unit_usd,
                terms=ln.terms,
                subtotal_usd=ln.subtotal_usd,
                discount_pct=ln.discount_pct,
                discount_usd=ln.discount_usd,
                amount_usd=ln.amount_usd,
            )
            for i, ln in enumerate(quote.lines, start=1)
        ],
    )
    return order, lines


def _order_invoice_spec(*, order: Order, lines: list[OrderLine], priced: PricedOrder) -> billing.InvoiceSpec:
    """The order's invoice: its lines, in the currency the customer chose."""
    term_word = "week" if order.term == "weekly" else "month"
    return billing.InvoiceSpec(
        account=order.account,
        payable=PayableRef("order", order.pk),
        description=(
            f"{order.gpu_count}x {priced.gpu.name} in {priced.region.code}, {order.terms} "
            f"{term_word}{'s' if order.terms > 1 else ''}"
        ),
        lines=_invoice_lines(lines),
        currency=order.pay_currency,
        metadata={
            "order": order.pk,
            "region": priced.region.code,
            "gpu": priced.gpu.slug,
            "gpu_name": priced.gpu.name,
            "gpu_count": order.gpu_count,
            "term": order.term,
            "terms": order.terms,
        },
    )


def _order_lock(*, order_id: int, account: Any = None) -> Order:
    """The order, locked; a customer's (`account`) own orders only."""
    orders = Order.objects.all() if account is None else Order.objects.filter(account=account)
    return locked_or_404(orders, pk=order_id, message="No such order.")


@transaction.atomic
def order_cancel(
    *, order_id: int, account: Any = None, actor: Any = None, reason: str = "", now: datetime | None = None
) -> Order:
    """Cancel an unpaid order: its invoice is voided and its slots go back to
    stock. Refused once money has been seen for it. Audited with `actor`, or
    the customer `account` that cancels its own order."""
    now = now or timezone.now()
    actor = actor or account
    # Its invoice is locked before the order, in the order a re-quote takes them
    # (billing.invoice_requote, then order_requote_check): a cancel and a re-quote
    # sent together wait on each other instead of deadlocking.
    orders = (
        Order.objects.filter(pk=order_id) if account is None else Order.objects.filter(pk=order_id, account=account)
    )
    invoice_id = orders.values_list("invoice_id", flat=True).first()
    if invoice_id is not None:
        billing.invoice_lock(invoice_id=invoice_id)
    order = _order_lock(order_id=order_id, account=account)
    if order.status not in (OrderStatus.AWAITING_PAYMENT, OrderStatus.EXPIRED):
        raise Conflict("order_not_cancellable", f"This order is {order.status}.", details={"status": order.status})
    reason = reason or "cancelled by the customer"
    if order.invoice_id:
        invoice = Invoice.objects.get(pk=order.invoice_id)
        if invoice.status not in (
            InvoiceStatus.NEW,
            InvoiceStatus.EXPIRED,
            InvoiceStatus.INVALID,
        ) or invoice_has_payments(invoice=invoice):
            # Paid (on chain or from credit) or being paid: it will become a rental.
            raise Conflict(
                "order_has_payments",
                "A payment for this order has been seen; it can no longer be cancelled.",
                details={"invoice_status": invoice.status},
            )
        if invoice.status != InvoiceStatus.INVALID:
            billing.invoice_void(invoice_id=invoice.pk, reason=reason, actor=actor)
    released = catalog.slots_release(holder=order.holder)
    machine.order_to(order, OrderStatus.CANCELLED)
    order.closed_at = now
    order.close_reason = reason
    order.save(update_fields=["status", "closed_at", "close_reason"])
    if actor is not None:
        audit_record(
            actor=actor, action=AuditAction.ORDER_CANCEL, obj=order, reason=reason, changes={"released": released}
        )
    return order


@transaction.atomic
def order_expire(*, order_id: int, now: datetime | None = None) -> Order | None:
    """The invoice expired unpaid, or became invalid (paid but never confirmed
    in its window, or marked so by staff): release the reservation. Idempotent."""
    now = now or timezone.now()
    order = Order.objects.select_for_update().filter(pk=order_id).first()
    if order is None or order.status != OrderStatus.AWAITING_PAYMENT:
        return order
    invoice = Invoice.objects.get(pk=order.invoice_id) if order.invoice_id is not None else None
    if invoice is None or invoice.status not in (InvoiceStatus.EXPIRED, InvoiceStatus.INVALID):
        return order
    return _order_lapse(order=order, reason=f"invoice {invoice.status} unpaid", now=now)


def _order_lapse(*, order: Order, reason: str, now: datetime) -> Order:
    """A locked order awaiting payment lapses: its slots go back to stock."""
    catalog.slots_release(holder=order.holder)
    machine.order_to(order, OrderStatus.EXPIRED)
    order.closed_at = now
    order.close_reason = reason[:200]
    order.save(update_fields=["status", "closed_at", "close_reason"])
    log.info("order %s expired (%s); slots released", order.pk, reason)
    return order


@transaction.atomic
def order_release_confirming(*, order_id: int, now: datetime | None = None) -> Order | None:
    """An order whose payment was seen in time but is still unconfirmed
    ORDER_CONFIRMING_HOLD_MINUTES after its quote ended gives its GPUs back to
    stock (it lapses, as an unpaid one does). Its invoice keeps watching the
    payment: confirmed inside the monitoring window, it settles and the order is
    filled from the stock left, or its money becomes credit
    (rentals.services.lifecycle.rental_from_order). Idempotent."""
    now = now or timezone.now()
    order = Order.objects.select_for_update().filter(pk=order_id).first()
    if order is None or order.status != OrderStatus.AWAITING_PAYMENT or order.invoice_id is None:
        return None
    invoice = Invoice.objects.get(pk=order.invoice_id)
    hold = timedelta(minutes=settings.ORDER_CONFIRMING_HOLD_MINUTES)
    if invoice.status != InvoiceStatus.PROCESSING or now < invoice.expires_at + hold:
        return None
    reason = (
        f"payment still unconfirmed {settings.ORDER_CONFIRMING_HOLD_MINUTES} minutes after the quote ended: "
        "GPUs back in stock; filled from the stock left, or credited, if it confirms"
    )
    return _order_lapse(order=order, reason=reason, now=now)


def order_requote_check(*, order_id: int, invoice_id: int) -> None:
    """Billing asks before re-quoting an expired order invoice (OrderPayable):
    reserve the slots again (any host in the region) or refuse with
    insufficient_stock."""
    order = Order.objects.select_for_update().filter(pk=order_id, invoice_id=invoice_id).first()
    if order is None:
        return
    if order.status == OrderStatus.CANCELLED:
        raise Conflict("order_not_cancellable", "This order was cancelled.")
    if order.status == OrderStatus.EXPIRED:
        # At the prices it was placed at, only while they are today's: a lapsed order
        # is no way to buy, weeks later, at a price since raised (its renewals would
        # inherit it too).
        now_usd = _total_today(order)
        if now_usd != order.total_usd:
            raise Conflict(
                "order_prices_changed",
                "Prices changed since this order was placed"
                + (f" ({order.total_usd} USD, now {now_usd} USD)" if now_usd is not None else "")
                + ": place a new order.",
                details={
                    "order_total_usd": usd_str(order.total_usd),
                    "total_usd_now": usd_str(now_usd) if now_usd is not None else None,
                },
            )
        # The host first, then the account's and the address's locks, as order_create
        # takes them: a re-quote and a new order from the same address never wait on
        # each other crosswise.
        reservation = catalog.slots_reserve(
            region=order.region, gpu=order.gpu, count=order.gpu_count, holder=order.holder
        )
        unpaid_limit_check(
            account=order.account,
            gpu_count=order.gpu_count,
            placing=order.pk,  # not counted against itself (its own lapse included)
            network=order.client_network,
            region=order.region,
            gpu=order.gpu,
            lapses=False,  # no new order: the one that lapsed is being paid
        )
        order.host = reservation.host
        machine.order_to(order, OrderStatus.AWAITING_PAYMENT)
        order.closed_at = None
        order.close_reason = ""
        order.save(update_fields=["host", "status", "closed_at", "close_reason"])


def _total_today(order: Order) -> Decimal | None:
    """What the order would cost if placed now, at today's catalog; None when
    it can no longer be ordered as it was (a card, template or add-on withdrawn)."""
    catalog_now = catalog_current(exact=True)
    try:
        gpu = catalog_now.gpu(order.gpu_slug)
        quote = catalog.quote(
            gpu=gpu,
            gpu_count=order.gpu_count,
            term=order.term,
            terms=order.terms,
            addons=_addons_get(catalog_now, tuple(order.addons)),
            template=_template_get(catalog_now, order.template_slug),
            multi_gpu_tiers=catalog_now.multi_gpu_tiers,
            term_tiers=catalog_now.term_tiers.get(order.term, ()),
        )
    except DomainError:
        return None
    return quote.total_usd


def _close_reason(invoice: Invoice) -> str:
    """Why an order closed with its invoice, saying what arrived when something did."""
    progress = invoice_progress(invoice=invoice)
    arrived = progress["counted_usd"] + progress["credited_usd"]
    if arrived <= 0:
        return f"invoice {invoice.status} unpaid"
    paid = f"invoice {invoice.status} with {usd_str(arrived)} of {usd_str(invoice.total_usd)} USD paid"
    if progress["credit_at"] is not None:
        return (
            f"{paid}; what arrived becomes account credit at {progress['credit_at']:%Y-%m-%d %H:%M} UTC "
            "unless a fresh quote for the rest is paid"
        )
    return f"{paid}; what arrived becomes (or became) account credit"


def order_release_unpaid(*, order_id: int, invoice_id: int) -> None:
    """The order's invoice closed unpaid (OrderPayable.on_expired): its slots go
    back to stock, and its close reason says what arrived."""
    order = order_expire(order_id=order_id)
    if order is None or order.status != OrderStatus.EXPIRED or order.invoice_id != invoice_id:
        return
    invoice = Invoice.objects.filter(pk=invoice_id).prefetch_related(*invoice_prefetches()).first()
    if invoice is not None:
        reason = _close_reason(invoice)[:200]
        Order.objects.filter(pk=order_id, status=OrderStatus.EXPIRED).exclude(close_reason=reason).update(
            close_reason=reason
        )


def order_currency_follow(*, order_id: int, invoice_id: int, currency: str) -> None:
    """An order shows the currency its invoice is quoted in now (a currency
    switch or a fresh quote changes it; OrderPayable.on_quoted)."""
    Order.objects.filter(pk=order_id, invoice_id=invoice_id).exclude(pay_currency=currency).update(
        pay_currency=currency
    )


def order_lines_for_terms(*, order: Order, terms: int) -> list[billing.LineSpec]:
    """The order's lines for `terms` terms at the prices on the order
    (grandfathered): same unit prices and multi-GPU discount; the term discount
    of the order when the count of terms matches, else today's tier."""
    term_pct = (
        order.term_discount_pct if terms == order.terms else catalog.term_discount_percent(term=order.term, terms=terms)
    )
    pct = order.multi_gpu_discount_pct + term_pct
    return _invoice_lines(
        [catalog.quote_line(ln.code, ln.description, ln.quantity, ln.unit_usd, terms, pct) for ln in order.lines.all()]
    )
