"""The two failures every chain client reports, whatever the chain.

- `ChainUnavailable`: the node cannot answer usefully right now (down,
  unreachable, timing out, refusing our credentials, rate limiting, still
  syncing, on another network). The watcher backs off and reports itself
  blind; nothing is recorded from a run that hit it.
- `RpcError`: the node answered and refused this one call, with its own code
  and message (an unknown block, a range too wide, a method it lacks).

Messages never quote an RPC URL: URLs may carry credentials or API keys.
"""

from __future__ import annotations


class ChainUnavailable(Exception):
    """The node cannot answer usefully right now; try again later."""

    def __init__(self, message: str, *, reason: str = "unreachable") -> None:
        super().__init__(message)
        self.message = message
        # A stable word for health reports: unreachable, timeout, unauthorized,
        # warming_up, syncing, overloaded, bad_response, wrong_node.
        self.reason = reason


class RpcError(Exception):
    """The node answered and refused the call."""

    def __init__(self, code: int, message: str, *, method: str = "", data: object = None) -> None:
        super().__init__(f"{method}: {message} (code {code})" if method else f"{message} (code {code})")
        self.code = code
        self.message = message
        self.method = method
        self.data = data


class NodeMismatch(ChainUnavailable):
    """The node follows another network, chain or coin than the settings say."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="wrong_node")
