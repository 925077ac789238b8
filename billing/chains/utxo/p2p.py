"""News of blocks and pool transactions from a Bitcoin Core or Litecoin Core node
over its own peer-to-peer protocol, for nodes built without ZMQ.

The listener connects to the node's P2P port as a peer that stores nothing and
relays nothing (services NODE_NONE), says it wants transactions relayed (the
`relay` flag of its `version` message, BIP37), and answers the node's pings.
The node then announces every block it connects and every transaction it
accepts into its mempool with an `inv` message (a peer that never sent
`sendheaders`, BIP130, gets blocks as `inv`, not `headers`). That is all this
reads: any announcement means "scan now"; the watcher's own run decides what it
means, so nothing here parses a transaction or a block.

A node delays transaction announcements to inbound peers by a random interval,
5 s on average (Litecoin Core 0.21's src/net_processing.cpp,
`INVENTORY_BROADCAST_INTERVAL`: "Blocks and peers with noban permission bypass
this, outbound peers get half this delay"): run the node with
`-whitelist=noban@<the listener's address>` so pool payments are announced at
once (docs/chains/push.md).

The wire format (message header: network magic, command, payload length, the
first four bytes of the payload's double SHA-256) and the `version` payload are
Bitcoin's P2P protocol (src/protocol.h `CMessageHeader`, src/net_processing.cpp
`PushNodeVersion`). python-bitcoinlib's `bitcoin.messages` has the same shapes but
frames and checks every message with the process-wide `bitcoin.params.MESSAGE_START`
(`MsgSerializable.to_bytes` / `from_bytes`), set by `bitcoin.SelectParams`, which knows
Bitcoin's networks only: a Litecoin peer, or a BTC and an LTC listener in one process,
would have to rewrite that global. The few bytes a listener sends and checks are
written here with the magic as a value.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import selectors
import socket
import struct
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

# The network magic (chainparams.cpp `pchMessageStart`) per (chain, the node's own name for its
# network: `getblockchaininfo`'s "chain"). A custom signet's magic depends on its challenge: not here.
MAGIC: dict[tuple[str, str], bytes] = {
    ("bitcoin", "main"): bytes.fromhex("f9beb4d9"),
    ("bitcoin", "test"): bytes.fromhex("0b110907"),
    ("bitcoin", "testnet4"): bytes.fromhex("1c163f28"),
    ("bitcoin", "signet"): bytes.fromhex("0a03cf40"),
    ("bitcoin", "regtest"): bytes.fromhex("fabfb5da"),
    ("litecoin", "main"): bytes.fromhex("fbc0b6db"),
    ("litecoin", "test"): bytes.fromhex("fdd2c8f1"),
    ("litecoin", "regtest"): bytes.fromhex("fabfb5da"),
}

# 70015: the last version before BIP155 `sendaddrv2` and BIP339 `wtxidrelay`, which a
# listener does not need; every node this watcher supports (0.21 and later) accepts it.
PROTOCOL_VERSION = 70015
USER_AGENT = b"/gpurenthub-listener:1/"
HEADER = struct.Struct("<4s12sI4s")
# What counts as news: announcements of blocks and transactions (and the block or tx itself,
# should a node push one unasked).
NEWS = frozenset({b"inv", b"headers", b"cmpctblock", b"block", b"tx"})
MAX_PAYLOAD = 32 * 1024 * 1024  # MAX_PROTOCOL_MESSAGE_LENGTH is 4 MB; a block can be larger


class P2PError(OSError):
    """The peer sent what is not the protocol, or closed the connection."""


def checksum(payload: bytes) -> bytes:
    return hashlib.sha256(hashlib.sha256(payload).digest()).digest()[:4]


def message(magic: bytes, command: bytes, payload: bytes = b"") -> bytes:
    return HEADER.pack(magic, command.ljust(12, b"\0"), len(payload), checksum(payload)) + payload


def _address(port: int) -> bytes:
    """A `CAddress` without time (the version message's form): services, an IPv4-mapped
    IPv6 address (0.0.0.0: not advertised), port big-endian."""
    return struct.pack("<Q", 0) + bytes(10) + b"\xff\xff" + bytes(4) + struct.pack(">H", port)


def version_payload(*, port: int, nonce: int | None = None, relay: bool = True) -> bytes:
    """BIP14/BIP37 `version`: protocol, services NODE_NONE, time, addr_recv, addr_from,
    nonce, user agent (var_str), start height 0, relay."""
    return (
        struct.pack("<iQq", PROTOCOL_VERSION, 0, int(time.time()))
        + _address(port)
        + _address(0)
        + struct.pack("<Q", secrets.randbits(64) if nonce is None else nonce)
        + bytes([len(USER_AGENT)])
        + USER_AGENT
        + struct.pack("<i?", 0, relay)
    )


def magic_for(chain: str, node_chain: str) -> bytes:
    """The magic bytes of the network a node says it follows (`getblockchaininfo`)."""
    try:
        return MAGIC[(chain, node_chain)]
    except KeyError:
        raise P2PError(f"no P2P magic known for {chain} {node_chain!r} (a custom signet?)") from None


class PeerFeed:
    """The node's announcements over P2P, with ChainListener's feed interface:
    `open()`, `wait(timeout) -> messages of news`, `close()`. A connection that drops
    is opened again and counts as news (what was announced meanwhile is lost: the
    scan finds it)."""

    def __init__(
        self,
        host: str,
        port: int,
        magic: bytes | Callable[[], bytes],
        *,
        handshake_timeout: float = 30.0,
    ) -> None:
        """`magic`: the network's bytes, or what finds them when the feed opens (the
        node's RPC, asked which network it follows)."""
        self.host, self.port, self._magic = host, port, magic
        self.magic = magic if isinstance(magic, bytes) else b""
        self.handshake_timeout = handshake_timeout
        self._sock: socket.socket | None = None
        self._buffer = b""

    # --- connection ---------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def open(self) -> None:
        if not self.magic:
            self.magic = self._magic() if callable(self._magic) else self._magic
        sock = socket.create_connection((self.host, self.port), timeout=self.handshake_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock, self._buffer = sock, b""
        try:
            self._send(b"version", version_payload(port=self.port))
            deadline = time.monotonic() + self.handshake_timeout
            got_version = got_verack = False
            while not (got_version and got_verack):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise P2PError("the node did not finish the version handshake")
                for command, _payload in self._read(remaining):
                    if command == b"version":
                        got_version = True
                        self._send(b"verack")
                    elif command == b"verack":
                        got_verack = True
        except BaseException:
            self.close()
            raise
        sock.settimeout(None)

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def _send(self, command: bytes, payload: bytes = b"") -> None:
        assert self._sock is not None
        self._sock.sendall(message(self.magic, command, payload))

    # --- reading ------------------------------------------------------------------------------

    def _messages(self) -> list[tuple[bytes, bytes]]:
        """Whole messages in the buffer, taken out of it."""
        out = []
        while len(self._buffer) >= HEADER.size:
            magic, raw_command, length, check = HEADER.unpack_from(self._buffer)
            if magic != self.magic:
                raise P2PError("the peer speaks another network (magic bytes differ)")
            if length > MAX_PAYLOAD:
                raise P2PError(f"the peer announced a {length}-byte message")
            end = HEADER.size + length
            if len(self._buffer) < end:
                break
            payload = self._buffer[HEADER.size : end]
            self._buffer = self._buffer[end:]
            if checksum(payload) != check:
                raise P2PError("a message's checksum is wrong")
            out.append((raw_command.rstrip(b"\0"), payload))
        return out

    def _read(self, timeout: float) -> list[tuple[bytes, bytes]]:
        """The messages that arrive within `timeout` seconds (at least one read's worth
        once any arrive), pings answered."""
        assert self._sock is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self._sock, selectors.EVENT_READ)
            if not selector.select(max(0.0, timeout)):
                return []
        chunk = self._sock.recv(1 << 16)
        if not chunk:
            raise P2PError("the node closed the connection")
        self._buffer += chunk
        messages = self._messages()
        for command, payload in messages:
            if command == b"ping":
                self._send(b"pong", payload)  # BIP31: the nonce back
        return messages

    def wait(self, timeout: float) -> int:
        """How many announcements arrived within `timeout` seconds (a burst at once)."""
        try:
            received = self._read(timeout)
            while received and self._pending():
                received += self._read(0)
        except OSError as exc:
            log.warning("the node's P2P connection closed (%s); opening it again", exc.__class__.__name__)
            self.close()
            time.sleep(1.0)
            self.open()
            return 1
        return sum(1 for command, _ in received if command in NEWS)

    def _pending(self) -> bool:
        assert self._sock is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self._sock, selectors.EVENT_READ)
            return bool(selector.select(0))
