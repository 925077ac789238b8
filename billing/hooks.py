"""Hooks the owners of invoice subjects register, so billing can ask them
questions without importing them.

A re-quote hook is called inside the re-quote transaction for invoices whose
subject starts with its prefix (e.g. "order:"). It re-establishes whatever the
invoice pays for (e.g. reserves the slots again) or raises a DomainError when
that no longer holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from billing.models import Invoice

RequoteHook = Callable[["Invoice"], None]
_requote_hooks: dict[str, RequoteHook] = {}


def requote_hook_register(*, prefix: str, hook: RequoteHook) -> None:
    _requote_hooks[prefix] = hook


def requote_hook_run(*, invoice: Invoice) -> None:
    for prefix, hook in _requote_hooks.items():
        if invoice.subject.startswith(prefix):
            hook(invoice)
