"""Which cluster a node follows, and how long a blockhash lives.

A Solana cluster is named by the hash of its genesis block. A node whose
`getGenesisHash` is not the one of `SOL_CLUSTER` follows another cluster (a
devnet endpoint configured for mainnet, say): its transactions are not
payments to us, and the watcher refuses to scan it. `localnet` (a test
validator) has a new genesis hash every time it is reset, so it is checked
only against `SOL_GENESIS_HASH` when that is set; `SOL_GENESIS_HASH` can pin
any cluster's hash.

A transaction names a recent blockhash and can only be included in a block
while that blockhash is among the last `MAX_PROCESSING_AGE` (150) blocks; after
that it can never land. A payment seen at `confirmed` whose transaction is no
longer anywhere, and whose blockhash has expired at `finalized`, is gone for
good.
"""

from __future__ import annotations

from billing.chains.solana.rpc import SolanaRpc, SolanaUnavailable

GENESIS_HASHES = {
    "mainnet-beta": "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d",
    "devnet": "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG",
    "testnet": "4uhcVJyU9pJkvQyS88uRDiswHXSCkY3zQawwpjk2NsfY",
}
CLUSTERS = ("mainnet-beta", "devnet", "testnet", "localnet")
MAX_PROCESSING_AGE = 150  # blocks a blockhash stays usable


class WrongCluster(SolanaUnavailable):
    """The node follows another cluster than the settings say."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="wrong_cluster")


def expected_genesis_hash(*, cluster: str, pinned: str = "") -> str:
    """The genesis hash a node of `cluster` must have ("" when any will do)."""
    return pinned.strip() or GENESIS_HASHES.get(cluster, "")


def cluster_of(genesis_hash: str) -> str:
    """The public cluster with this genesis hash, or ""."""
    return next((name for name, value in GENESIS_HASHES.items() if value == genesis_hash), "")


def cluster_check(rpc: SolanaRpc, *, cluster: str, pinned: str = "") -> str:
    """The node's genesis hash, or `WrongCluster` when it is not the one expected."""
    node_hash = str(rpc.call("getGenesisHash"))
    expected = expected_genesis_hash(cluster=cluster, pinned=pinned)
    if expected and node_hash != expected:
        follows = cluster_of(node_hash)
        what = f"{follows} (genesis hash {node_hash})" if follows else f"a cluster with genesis hash {node_hash}"
        wanted = "SOL_GENESIS_HASH" if pinned.strip() else f"SOL_CLUSTER={cluster}"
        raise WrongCluster(f"the node at {rpc.endpoint} follows {what}, not the one {wanted} names ({expected})")
    return node_hash
