"""The TOY family's destinations (copied as toyfam/family.py): an address per
index made from TOY_SEED, and a URI of its own scheme."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection

from django.core.exceptions import ImproperlyConfigured

from billing.chains.interface import ChainFamily, Destination, setting_value


def _seed() -> str:
    seed = setting_value("TOY_SEED")
    if len(seed) < 8:
        raise ImproperlyConfigured("TOY_SEED is too short.")
    return seed


class ToyFamily(ChainFamily):
    name = "toy"
    currencies = ("TOY",)
    material_settings = ("TOY_SEED",)

    def enabled(self, code: str) -> bool:
        return bool(setting_value("TOY_SEED"))

    def checks(self, enabled: Collection[str]) -> list[tuple[str, Callable[[], object]]]:
        return [("TOY_SEED", _seed)] if "TOY" in enabled else []

    def keyset(self, code: str) -> str:
        return "toy:" + hashlib.sha256(_seed().encode()).hexdigest()[:16]

    def destination(self, code: str, index: int) -> Destination:
        address = "toy1" + hashlib.sha256(f"{_seed()}:{index}".encode()).hexdigest()[:32]
        return Destination(currency=code, address=address, index=index, match_key=address)

    def payment_uri(self, *, destination: Destination, amount: int, label: str, message: str) -> str:
        return f"toycoin:{destination.address}?amount={amount}"

    def network(self, code: str) -> str:
        return "toychain-test"


FAMILY = ToyFamily()
