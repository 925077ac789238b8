"""Blocks as a watcher follows them: references, forks, and finding a fork point.

Shared by the block-walking chain families (UTXO, EVM). A watcher stores the
last few hundred (height, hash) pairs it scanned; `fork_find` compares them
with what the node now says is at those heights, through the one question any
node answers: the hash of its best-chain block at a height.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, order=True)
class BlockRef:
    """One block of the chain: the cursor is a list of these."""

    height: int
    hash: str


@dataclass(frozen=True, slots=True)
class Fork:
    """The node's best chain left the stored one.

    `common` is the highest stored block still on the node's chain (None when
    none of them is: the reorg is deeper than what was stored, and the
    watcher must go back further). `orphaned` are the stored blocks above
    it, lowest first: un-count what they carried, then scan forward.
    """

    common: BlockRef | None
    orphaned: tuple[BlockRef, ...]


@dataclass(frozen=True)
class ChainStep:
    """One step along a node's chain from the stored cursor.

    Apply `fork` first (if any), then `blocks` in order (each has `.block`, a
    BlockRef, and `.previous_hash`); `tip_scanned` is the block the cursor
    stands on once everything is applied, and `caught_up` says whether that
    is the node's tip. `tip` has at least `.height` and `.hash`.
    """

    tip: Any
    fork: Fork | None
    blocks: tuple[Any, ...]
    tip_scanned: BlockRef | None
    caught_up: bool


class HashSource(Protocol):
    def block_hashes(self, *, heights: Sequence[int]) -> list[str | None]:
        """The node's best-chain hash at each height (None above its tip)."""
        ...


def resume_point(
    *, fork: Fork | None, recent: Sequence[BlockRef], tip_height: int, start_height: int | None
) -> tuple[BlockRef | None, int]:
    """Where a block-walking watcher resumes: the stored block the next one must
    link to (None: nothing to link to) and the height of the next block to read.

    After a fork, from the common block; after a fork deeper than the stored
    window, every stored block is suspect: resume at the lowest stored height
    (keep the window comfortably deeper than any plausible reorg). With nothing
    stored yet, at `start_height`, or at the tip.
    """
    if fork is not None:
        if fork.common is None:
            return None, min(b.height for b in recent)
        return fork.common, fork.common.height + 1
    if recent:
        base = max(recent)
        return base, base.height + 1
    return None, tip_height if start_height is None else start_height


def fork_find(source: HashSource, *, recent: Sequence[BlockRef]) -> Fork | None:
    """Compare the stored blocks with the node's chain; None when all still match.

    `recent` are stored (height, hash) pairs, any order, typically the last
    hundred scanned. One question for the top block in the common case; the
    hashes at all stored heights when it changed.
    """
    if not recent:
        return None
    stored = sorted(recent)
    top = stored[-1]
    if source.block_hashes(heights=[top.height]) == [top.hash]:
        return None  # the common case: nothing changed below our tip
    actual = source.block_hashes(heights=[b.height for b in stored])
    common: BlockRef | None = None
    orphaned: list[BlockRef] = []
    for ref, node_hash in zip(stored, actual, strict=True):
        if node_hash == ref.hash and not orphaned:
            common = ref
        else:
            # Everything above the first mismatch is orphaned, even a block
            # whose hash matches again (it cannot: its parent changed).
            orphaned.append(ref)
    log.warning(
        "reorg: %s, %d stored block(s) orphaned",
        f"fork above height {common.height}" if common else "fork below the stored blocks",
        len(orphaned),
    )
    return Fork(common=common, orphaned=tuple(orphaned))
