"""TOY's key material (copied as toyfam/keys.py): a watch-only seed, from which
each index's address is made. Built on what billing.chains.keys shares: the
refusal of spending secrets, the fingerprint, KeyMaterialError."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from billing.chains.keys import KeyMaterialError, material_fingerprint, secret_material_kind


@dataclass(frozen=True)
class ToyAccount:
    seed: str = field(repr=False)
    fingerprint: str

    def address(self, index: int) -> str:
        return "toy1" + hashlib.sha256(f"{self.seed}:{index}".encode()).hexdigest()[:32]


def toy_account_parse(value: str) -> ToyAccount:
    text = value.strip()
    kind = secret_material_kind(text)
    if kind:
        raise KeyMaterialError(f"holds {kind}, which can spend. Put TOY's watch-only seed here.", private=True)
    if len(text) < 8:
        raise KeyMaterialError("is too short (8 characters at least).")
    return ToyAccount(seed=text, fingerprint=material_fingerprint(text.encode()))
