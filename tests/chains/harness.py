"""Test-side glue over `billing.chains.regtest`: start the shared node (failing,
never skipping, when litecoind is missing) and hand out fresh destinations.

The node start/stop logic itself lives in `billing.chains.regtest`, where the
sandbox and the benchmark use it too.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest

from billing.chains.regtest import NodeNotInstalled, RegtestNode, WatchOnlyAccount


def node_start(**kwargs) -> RegtestNode:
    """Start a regtest node for tests; a missing litecoind fails the run with the fix."""
    try:
        return RegtestNode.start(**kwargs)
    except NodeNotInstalled as exc:
        pytest.fail(str(exc), pytrace=False)


@dataclass(frozen=True)
class Destination:
    index: int
    address: str
    script_hex: str


@dataclass
class Destinations:
    """Hands out addresses of the session's watch-only account, never twice.

    Tests share one node; fresh destinations keep one test's payments out of
    another's scans.
    """

    account: WatchOnlyAccount
    _next: itertools.count = field(default_factory=itertools.count)

    def new(self) -> Destination:
        index = next(self._next)
        return Destination(index, self.account.address(index), self.account.script_hex(index))

    def many(self, n: int) -> list[Destination]:
        return [self.new() for _ in range(n)]
