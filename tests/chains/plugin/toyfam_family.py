"""The TOY family's destinations (copied as toyfam/family.py): an address per
index made from TOY_SEED by its own key parsing (toyfam/keys.py), and a URI of
its own scheme (toyfam/uri.py)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from functools import lru_cache

from django.core.exceptions import ImproperlyConfigured
from toyfam import keys, uri  # type: ignore[import-not-found]  # the package the test makes

from billing.chains.interface import ChainFamily, Destination, setting_value
from billing.chains.keys import KeyMaterialError
from billing.currencies import CURRENCIES


@lru_cache(maxsize=4)
def _account_cached(value: str) -> keys.ToyAccount:
    return keys.toy_account_parse(value)


def toy_account() -> keys.ToyAccount:
    try:
        return _account_cached(setting_value("TOY_SEED"))
    except KeyMaterialError as exc:
        raise ImproperlyConfigured(f"TOY_SEED {exc}") from None


class ToyFamily(ChainFamily):
    name = "toy"
    currencies = ("TOY",)
    material_settings = ("TOY_SEED",)

    def enabled(self, code: str) -> bool:
        return bool(setting_value("TOY_SEED"))

    def checks(self, enabled: Collection[str]) -> list[tuple[str, Callable[[], object]]]:
        return [("TOY_SEED", toy_account)] if "TOY" in enabled else []

    def keyset(self, code: str) -> str:
        return f"toy:{toy_account().fingerprint}"

    def destination(self, code: str, index: int) -> Destination:
        address = toy_account().address(index)
        return Destination(currency=code, address=address, index=index, match_key=address)

    def payment_uri(self, *, destination: Destination, amount: int, label: str, message: str) -> str:
        return uri.toy_uri(
            address=destination.address, amount=amount, decimals=CURRENCIES["TOY"].decimals, message=message
        )

    def network(self, code: str) -> str:
        return "toychain-test"


FAMILY = ToyFamily()
