"""Solana key material: the recipient's public address, and the fresh
reference of each Solana Pay request. Pure, as billing.chains.keys is; errors
are its `KeyMaterialError`."""

from __future__ import annotations

from dataclasses import dataclass

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from billing.chains.keys import KeyMaterialError, base58_decode, material_fingerprint, secret_material_kind


@dataclass(frozen=True)
class SolanaRecipient:
    address: str
    fingerprint: str


def solana_recipient_parse(*, value: str) -> SolanaRecipient:
    text = value.strip()
    kind = secret_material_kind(text)
    if kind:
        raise KeyMaterialError(f"holds {kind}, which can spend. Put the recipient's public address here.", private=True)
    raw = base58_decode(text)
    if raw is None or len(raw) != 32:
        raise KeyMaterialError("is not a Solana address (Base58 of 32 bytes).")
    pubkey = Pubkey.from_bytes(raw)
    return SolanaRecipient(address=str(pubkey), fingerprint=material_fingerprint(bytes(pubkey)))


def solana_reference_new() -> str:
    """A fresh Solana Pay reference: the public key of a random keypair whose
    secret is dropped at once (a reference only has to be unique)."""
    return str(Keypair().pubkey())
