"""The few pieces of contract ABI the watcher speaks, encoded with eth-abi.

- ERC-20: the `Transfer(address,address,uint256)` event it matches and
  `decimals()`, read once per configured token.
- Multicall3 (deployed at the same address on nearly every EVM network):
  `aggregate3` over `getEthBalance`, to read many ether balances in one
  `eth_call` in the balance-check mode.
"""

from __future__ import annotations

from collections.abc import Sequence

from eth_abi import decode, encode
from eth_utils import keccak

TRANSFER_TOPIC = "0x" + keccak(text="Transfer(address,address,uint256)").hex()
DECIMALS_CALL = "0x" + keccak(text="decimals()")[:4].hex()
MULTICALL3_ADDRESS = "0xca11bde05977b3631167028862be2a173976ca11"
_AGGREGATE3 = keccak(text="aggregate3((address,bool,bytes)[])")[:4]
_GET_ETH_BALANCE = keccak(text="getEthBalance(address)")[:4]


def hex_int(value: str | int | None) -> int:
    """A JSON-RPC quantity ("0x1a") as an int; None and "0x" are 0."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    return int(value, 16) if value not in ("0x", "") else 0


def topic_address(topic: str) -> str:
    """The address in an indexed address topic (32 bytes, left-padded), lowercase."""
    return "0x" + topic[-40:].lower()


def uint256_decode(data: str) -> int | None:
    """The uint256 in a log's data or a call's return value; None when it is not one word."""
    body = data[2:] if data.startswith("0x") else data
    if len(body) != 64:
        return None
    return int(body, 16)


def aggregate3_balances_encode(multicall: str, addresses: Sequence[str]) -> str:
    """Call data of `aggregate3` asking Multicall3 `getEthBalance` of each address."""
    calls = [(multicall, False, _GET_ETH_BALANCE + encode(["address"], [a])) for a in addresses]
    return "0x" + (_AGGREGATE3 + encode(["(address,bool,bytes)[]"], [calls])).hex()


def aggregate3_balances_decode(data: str, count: int) -> list[int]:
    """The balances out of `aggregate3`'s return data, in the order asked."""
    (results,) = decode(["(bool,bytes)[]"], bytes.fromhex(data[2:] if data.startswith("0x") else data))
    if len(results) != count:
        raise ValueError(f"aggregate3 returned {len(results)} results for {count} calls")
    balances: list[int] = []
    for success, value in results:
        if not success or len(value) != 32:
            raise ValueError("getEthBalance failed inside aggregate3")
        balances.append(int.from_bytes(value, "big"))
    return balances
