"""Helpers shared by the Solana tests (not fixtures)."""

from __future__ import annotations


class Waits(list):
    """Stands in for time.sleep: remembers each wait instead of sleeping."""

    def __call__(self, seconds: float) -> None:
        self.append(round(seconds, 6))
