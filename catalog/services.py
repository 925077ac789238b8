"""Catalog writes and the pricing rules.

`quote` is exact Decimal arithmetic: each line is unit price x quantity x
terms, its discount is rounded half up to the cent, and the total is the sum of
the lines. Slot reservation never oversells: hosts are locked one at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from django.db import connection, transaction

from catalog.models import (
    TERM_HOURS,
    TERM_MONTHLY,
    Addon,
    GpuModel,
    Host,
    MultiGpuDiscount,
    Region,
    Slot,
    SlotStatus,
    Template,
    TermDiscount,
)
from catalog.selectors import hosts_with_free_slots
from core.audit import AuditAction
from core.db import columns
from core.errors import Conflict, DomainError
from core.money import ZERO, cents

MAX_TERMS = 12
HUNDRED = Decimal(100)


@dataclass(frozen=True)
class QuoteLine:
    code: str  # "gpu" or "addon:<slug>"
    description: str
    quantity: int
    unit_usd: Decimal  # per unit and term
    terms: int
    subtotal_usd: Decimal  # unit x quantity x terms
    discount_pct: Decimal
    discount_usd: Decimal
    amount_usd: Decimal  # subtotal - discount


@dataclass(frozen=True)
class Quote:
    gpu: str
    gpu_count: int
    term: str
    terms: int
    hours: int
    lines: tuple[QuoteLine, ...]
    subtotal_usd: Decimal
    multi_gpu_discount_pct: Decimal
    term_discount_pct: Decimal
    discount_pct: Decimal
    discount_usd: Decimal
    total_usd: Decimal
    per_gpu_hour_usd: Decimal  # GPU lines only, per card, after discounts
    per_hour_usd: Decimal  # the whole instance, add-ons included


def gpu_count_validate(*, gpu: GpuModel, gpu_count: int) -> None:
    """Counts are 1, 2, 4 or 8 on one host, within the card's minimum and maximum."""
    allowed = gpu.allowed_counts
    if gpu_count < gpu.min_gpus and gpu_count >= 1:
        raise DomainError(
            "min_gpus",
            f"{gpu.name} comes in instances of at least {gpu.min_gpus} cards.",
            details={"gpu": gpu.slug, "min_gpus": gpu.min_gpus, "allowed_counts": allowed},
        )
    if gpu_count not in allowed:
        raise DomainError(
            "invalid_gpu_count",
            f"An instance of {gpu.name} has {', '.join(map(str, allowed))} cards on one host; not {gpu_count}.",
            details={"gpu": gpu.slug, "gpu_count": gpu_count, "allowed_counts": allowed},
        )


def template_validate(*, template: Template, gpu: GpuModel) -> None:
    if not template.runs_on(gpu):
        raise DomainError(
            "template_incompatible",
            f"The template {template.slug} does not run on {gpu.name}.",
            details={"template": template.slug, "gpu": gpu.slug, "compatible_templates": templates_for_gpu(gpu=gpu)},
        )


def templates_for_gpu(*, gpu: GpuModel) -> list[str]:
    return [t.slug for t in Template.objects.filter(is_active=True).prefetch_related("gpus") if t.runs_on(gpu)]


def _tier_percent(tiers: Sequence[tuple[int, Decimal]], value: int) -> Decimal:
    """The percent of the highest tier whose threshold `value` reaches."""
    best = ZERO
    for threshold, percent in sorted(tiers):
        if value >= threshold:
            best = percent
    return best


def term_discount_percent(*, term: str, terms: int, tiers: Sequence[tuple[int, Decimal]] | None = None) -> Decimal:
    """The term discount for paying `terms` terms at once (tiers read when not given)."""
    if tiers is None:
        tiers = list(TermDiscount.objects.filter(term=term).values_list("min_terms", "percent"))
    return _tier_percent(tiers, terms)


def quote(
    *,
    gpu: GpuModel,
    gpu_count: int,
    term: str = TERM_MONTHLY,
    terms: int = 1,
    addons: Sequence[Addon] = (),
    template: Template | None = None,
    multi_gpu_tiers: Sequence[tuple[int, Decimal]] | None = None,
    term_tiers: Sequence[tuple[int, Decimal]] | None = None,
) -> Quote:
    """Price an instance. Tier tables may be passed in by callers that price many
    configurations at once (they are read from the database otherwise)."""
    if term not in TERM_HOURS:
        raise DomainError("invalid_term", f"Terms are {', '.join(TERM_HOURS)}.", details={"term": term})
    if not 1 <= terms <= MAX_TERMS:
        raise DomainError("invalid_terms", f"Order 1 to {MAX_TERMS} terms at once.", details={"terms": terms})
    if not gpu.is_active:
        raise DomainError("gpu_unavailable", f"{gpu.name} is not offered for new orders.", details={"gpu": gpu.slug})
    gpu_count_validate(gpu=gpu, gpu_count=gpu_count)
    if template is not None:
        template_validate(template=template, gpu=gpu)
    slugs = [a.slug for a in addons]
    if len(set(slugs)) != len(slugs):
        raise DomainError("invalid", "Each add-on can be ordered once.", details={"addons": slugs})
    for addon in addons:
        if addon.is_usage or not addon.is_active:
            raise DomainError("unknown_addon", f"{addon.slug} cannot be ordered.", details={"addon": addon.slug})

    if multi_gpu_tiers is None:
        multi_gpu_tiers = list(MultiGpuDiscount.objects.values_list("min_gpus", "percent"))
    multi_pct = _tier_percent(multi_gpu_tiers, gpu_count)
    term_pct = term_discount_percent(term=term, terms=terms, tiers=term_tiers)
    pct = multi_pct + term_pct  # each tier table is below 100 %; together they may not be (quote_line)

    term_label = "week" if term == "weekly" else "month"
    lines = [
        quote_line("gpu", f"{gpu.name} GPU, per card and {term_label}", gpu_count, gpu.term_price(term), terms, pct)
    ]
    for addon in addons:
        lines.append(
            quote_line(f"addon:{addon.slug}", f"{addon.name}, per {term_label}", 1, addon.term_price(term), terms, pct)
        )

    hours = TERM_HOURS[term] * terms
    subtotal = sum((ln.subtotal_usd for ln in lines), ZERO)
    discount = sum((ln.discount_usd for ln in lines), ZERO)
    total = sum((ln.amount_usd for ln in lines), ZERO)
    return Quote(
        gpu=gpu.slug,
        gpu_count=gpu_count,
        term=term,
        terms=terms,
        hours=hours,
        lines=tuple(lines),
        subtotal_usd=subtotal,
        multi_gpu_discount_pct=multi_pct,
        term_discount_pct=term_pct,
        discount_pct=pct,
        discount_usd=discount,
        total_usd=total,
        per_gpu_hour_usd=cents(lines[0].amount_usd / (gpu_count * hours)),
        per_hour_usd=cents(total / hours),
    )


def quote_line(code: str, description: str, quantity: int, unit: Decimal, terms: int, pct: Decimal) -> QuoteLine:
    """One priced line: unit x quantity x terms, the discount rounded half up to the
    cent. A discount of 100 % or more is refused (`pricing_unavailable`): each
    tier table is below 100 %, but staff could make the multi-GPU and the term
    discounts reach it together, and a new order's or a renewal's terms are
    never sold for nothing."""
    if pct >= HUNDRED or pct < 0:
        raise Conflict(
            "pricing_unavailable",
            "This configuration cannot be priced right now.",
            details={"discount_pct": str(pct)},
        )
    subtotal = unit * quantity * terms
    discount = cents(subtotal * pct / HUNDRED)
    return QuoteLine(code, description, quantity, unit, terms, subtotal, pct, discount, subtotal - discount)


# --- Slots --------------------------------------------------------------------


class _HostTaken(Exception):
    """Raised inside a savepoint to release a host lock that did not pay off."""


@dataclass(frozen=True)
class Reservation:
    host: Host
    slots: tuple[Slot, ...]


def slots_reserve(*, region: Region, gpu: GpuModel, count: int, holder: str) -> Reservation:
    """Reserve `count` slots of `gpu` on one host in `region` for `holder`.

    Each host's free count is kept by triggers on its slots (catalog/triggers.py)
    and read under the host's lock (SELECT ... FOR UPDATE), so it is exact.
    First the best-fit host (fewest free that still hold the count, so whole
    hosts stay free for node orders) that no other transaction holds right now
    (SKIP LOCKED): concurrent orders of one card spread over the hosts instead
    of queuing on the same one. When every fitting host is held, the hosts are
    waited for one at a time, best fit first, each inside its own savepoint; one
    that no longer fits is let go (the savepoint rolls back, releasing the lock)
    before the next is tried, so a transaction never holds two host locks and
    concurrent orders cannot deadlock. Must run inside the caller's transaction.
    """
    if not holder:
        raise ValueError("a reservation needs a holder")
    host = _host_unheld(region=region, gpu=gpu, count=count)
    if host is not None:
        reservation = _slots_take(host=host, count=count, holder=holder)
        if reservation is not None:
            return reservation
    for host_id, _free in hosts_with_free_slots(region=region, gpu=gpu, at_least=count):
        try:
            with transaction.atomic():
                host = Host.objects.select_for_update().get(pk=host_id, is_active=True)
                reservation = _slots_take(host=host, count=count, holder=holder)
                if reservation is None:
                    raise _HostTaken
                return reservation
        except (_HostTaken, Host.DoesNotExist):
            continue
    raise Conflict(
        "insufficient_stock",
        f"No host in {region.code} has {count} free {gpu.name} right now.",
        details={"region": region.code, "gpu": gpu.slug, "gpu_count": count},
    )


def _host_unheld(*, region: Region, gpu: GpuModel, count: int) -> Host | None:
    """The best-fit host that can take `count` and no other transaction holds,
    locked (FOR UPDATE OF the host SKIP LOCKED where the database has row locks,
    PostgreSQL; SQLite has one writer at a time and no row locks, and the same
    statement runs there without the clause). The statement is written out and
    read through Manager.raw: building it with the ORM (two joins, the lock
    clause, the ordering) cost the web worker about three times what the read
    itself costs, on every order."""
    quote = connection.ops.quote_name
    features = connection.features
    lock = (
        " FOR UPDATE OF h SKIP LOCKED"
        if features.has_select_for_update_skip_locked and features.has_select_for_update_of
        else ""
    )
    hosts = Host.objects.raw(
        f"SELECT {columns(Host, 'h')} FROM {quote(Host._meta.db_table)} h "
        f"JOIN {quote(Region._meta.db_table)} r ON r.id = h.region_id "
        f"JOIN {quote(GpuModel._meta.db_table)} g ON g.id = h.gpu_id "
        "WHERE h.region_id = %s AND h.gpu_id = %s AND h.is_active AND r.is_active AND g.is_active "
        f"AND h.free_slots >= %s ORDER BY h.free_slots, h.name LIMIT 1{lock}",
        [region.pk, gpu.pk, count],
    )
    return next(iter(hosts), None)


def _slots_take(*, host: Host, count: int, holder: str) -> Reservation | None:
    """Take `count` free slots of a host the caller holds locked (its lowest
    indexes, in one statement); None (nothing taken) when it no longer has them."""
    if host.free_slots < count:
        return None
    # One statement: the host's lowest free slots, reserved and read back (RETURNING).
    table = connection.ops.quote_name(Slot._meta.db_table)
    rows = list(
        Slot.objects.raw(
            f"UPDATE {table} SET status = %s, holder = %s WHERE id IN (SELECT id FROM {table} "
            f'WHERE host_id = %s AND status = %s ORDER BY "index" LIMIT %s) RETURNING {columns(Slot)}',
            [SlotStatus.RESERVED, holder, host.pk, SlotStatus.FREE, count],
        )
    )
    if len(rows) != count:  # cannot happen under the host's lock; refuse rather than half-reserve
        raise Conflict("insufficient_stock", "The host's slots changed under the reservation; try again.")
    taken = sorted(rows, key=lambda slot: slot.index)
    for slot in taken:
        slot.host = host
    host.free_slots -= count
    return Reservation(host=host, slots=tuple(taken))


def slots_release(*, holder: str) -> int:
    """Return every slot `holder` has (reserved or rented) to stock."""
    return (
        Slot.objects.filter(holder=holder)
        .exclude(status=SlotStatus.OUT_OF_SERVICE)
        .update(status=SlotStatus.FREE, holder="")
    )


def slots_mark_rented(*, holder: str) -> int:
    """A paid reservation: its slots are rented now."""
    return Slot.objects.filter(holder=holder, status=SlotStatus.RESERVED).update(status=SlotStatus.RENTED)


def slots_rehold(*, holder: str, new_holder: str) -> int:
    """Move slots from one holder to another (an order's slots become its rental's)."""
    return Slot.objects.filter(holder=holder).update(holder=new_holder)


# --- Hosts and slots in the admin ---------------------------------------------------


def hosts_free_recount() -> None:
    """Set every host's free count from its slots. The triggers keep it exact;
    this is for a bulk copy of the tables that bypassed them (a restore)."""
    from django.db import connection

    from catalog.triggers import free_slots_recount_sql

    with connection.cursor() as cursor:
        cursor.execute(free_slots_recount_sql())


def host_slots_ensure(*, host: Host) -> int:
    """A host has one slot per GPU: create the ones missing (a host staff just
    added). Returns how many were created."""
    existing = set(host.slots.values_list("index", flat=True))
    missing = [Slot(host=host, index=i) for i in range(host.slot_count) if i not in existing]
    Slot.objects.bulk_create(missing)
    return len(missing)


@transaction.atomic
def slot_service_set(*, slot_id: int, in_service: bool, actor, reason: str) -> Slot:
    """Take a free slot out of service (a failed GPU), or put one back. Under
    the host's lock, like reservations, so neither overwrites the other."""
    from core.audit import audit_record

    if not reason.strip():
        raise DomainError("reason_required", "Say why: a reason is required.")
    slot = Slot.objects.select_related("host").get(pk=slot_id)
    Host.objects.select_for_update().get(pk=slot.host_id)
    slot.refresh_from_db()
    before = slot.status
    wanted_from, wanted_to = (
        (SlotStatus.OUT_OF_SERVICE, SlotStatus.FREE) if in_service else (SlotStatus.FREE, SlotStatus.OUT_OF_SERVICE)
    )
    if slot.status != wanted_from:
        raise Conflict(
            "slot_busy",
            f"Slot {slot} is {slot.status}; only a {wanted_from} slot can be changed so.",
            details={"status": slot.status},
        )
    slot.status = wanted_to
    slot.save(update_fields=["status", "changed_at"])
    audit_record(
        actor=actor,
        action=AuditAction.SLOT_IN_SERVICE if in_service else AuditAction.SLOT_OUT_OF_SERVICE,
        obj=slot,
        reason=reason,
        changes={"status": [before, wanted_to]},
    )
    return slot
