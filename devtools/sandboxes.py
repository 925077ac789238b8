"""The sandboxes of `make run`, one per chain family that names one.

A family names its sandbox in its package's `__init__` (`SANDBOX =
"devtools.solana_sandbox"`): a dotted path, a string, so that production code
never imports devtools (billing.chains.spec.family_sandboxes lists them). The
module it names provides:

    SANDBOX_CODE      the code SANDBOX_OFF and the banners name it by ("LTC")
    SANDBOX_STARTS    when `make run` starts it: "foreground" (the server waits
                      for it), "background" (the server waits as long as the
                      foreground ones took, then it joins when ready) or "late"
                      (once the server answers)
    SANDBOX_PRIMARY   (optional, False) its settings file is the sandbox's
                      (SANDBOX_ENV_FILE), and `make run` offers a demo invoice in it
    serve_start(*, rates, say, warn)   start it for `make run`, or None (not
                      installed, configured otherwise, DEBUG off, SANDBOX=0): a
                      box with `env` (the settings it sets) and `stop()`
    serve_banner(box, *, demo)         what `make run` prints once it is up
    invoice_pay(*, invoice_number, amount, confirm)   pay an invoice from it
                      (`manage.py sandbox_pay`): a devtools.scanning.SandboxPayment
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from types import ModuleType
from typing import Any

from django.conf import settings

from billing.chains import spec
from devtools.scanning import SandboxPayment

STARTS = ("foreground", "background", "late")


def sandboxes_allowed() -> bool:
    """Whether `make run` may start sandboxes: DEBUG on, and SANDBOX not turned off (SANDBOX=0)."""
    return bool(settings.DEBUG) and os.environ.get("SANDBOX", "").strip().lower() not in ("0", "false", "no", "off")


@dataclass(frozen=True)
class SandboxKind:
    """A family's sandbox, as its module declares it."""

    module: ModuleType

    @property
    def code(self) -> str:
        code: str = self.module.SANDBOX_CODE
        return code

    @property
    def starts(self) -> str:
        starts: str = self.module.SANDBOX_STARTS
        if starts not in STARTS:
            raise ValueError(f"{self.module.__name__}.SANDBOX_STARTS is {starts!r}; expected one of {STARTS}")
        return starts

    @property
    def primary(self) -> bool:
        return bool(getattr(self.module, "SANDBOX_PRIMARY", False))

    def start(self, *, rates: str, say: Callable[[str], object], warn: Callable[[str], object]) -> Any:
        # Looked up on each call: tests replace a module's function.
        return self.module.serve_start(rates=rates, say=say, warn=warn)

    def banner(self, box: Any, *, demo: dict[str, str] | None) -> str:
        text: str = self.module.serve_banner(box, demo=demo)
        return text

    def invoice_pay(self, *, invoice_number: str, amount: int | None, confirm: bool) -> SandboxPayment:
        paid: SandboxPayment = self.module.invoice_pay(invoice_number=invoice_number, amount=amount, confirm=confirm)
        return paid


def sandbox_kinds() -> list[SandboxKind]:
    """Every family's sandbox, in family order (billing.chains.spec.FAMILY_PACKAGES)."""
    return [SandboxKind(import_module(path)) for path in spec.family_sandboxes()]


def primary_sandbox() -> SandboxKind:
    """The sandbox whose settings file `make run` writes (LTC's)."""
    return next(kind for kind in sandbox_kinds() if kind.primary)


def sandbox_of(currency: str) -> SandboxKind | None:
    """The sandbox of `currency`'s family, or None when its family names none."""
    package = spec.family_package_of(currency)
    sandbox = getattr(import_module(package), "SANDBOX", "") if package else ""
    return SandboxKind(import_module(sandbox)) if sandbox else None
