"""EIP-681 payment URIs, for ether and ERC-20 tokens (billing.chains.uris holds what schemes share)."""

from __future__ import annotations

from billing.chains.uris import base_units_check


def eip681_ether_uri(*, address: str, chain_id: int, wei: int) -> str:
    """`ethereum:<address>@<chainId>?value=<wei>` (EIP-681; value as a plain integer)."""
    return f"ethereum:{address}@{int(chain_id)}?value={base_units_check(wei)}"


def eip681_token_transfer_uri(*, token: str, chain_id: int, recipient: str, units: int) -> str:
    """`ethereum:<token>@<chainId>/transfer?address=<to>&uint256=<units>`: an ERC-20 transfer call."""
    return f"ethereum:{token}@{int(chain_id)}/transfer?address={recipient}&uint256={base_units_check(units)}"
