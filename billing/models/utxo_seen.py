from __future__ import annotations

from django.db import models


class MempoolSeen(models.Model):
    """A transaction of a UTXO node's mempool that the chain's watcher has already
    decoded (billing.chains.utxo): the seen-set that lets a restarted worker pick
    up the mempool where the last one left it instead of decoding it all again.

    Rows are added for transactions as they are first decoded and deleted once
    they leave the node's mempool, in the transaction that records the pass:
    the table holds at most one row per transaction in the mempool.
    """

    chain = models.CharField(max_length=16)
    txid = models.CharField(max_length=64)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["chain", "txid"], name="mempoolseen_chain_txid_unique")]

    def __str__(self) -> str:
        return f"{self.chain} {self.txid[:16]}"
