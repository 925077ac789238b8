"""JSON-RPC to monero-wallet-rpc and monerod, through the `monero` package.

The transport is the `monero` package's (PyPI) JSON-RPC backends,
`JSONRPCWallet` and `JSONRPCDaemon`: HTTP, digest authentication, the
wallet's error codes as exceptions. They work against wallet-rpc 0.18. The
watcher calls the RPC methods through their `raw_request` rather than the
package's `Wallet.incoming()`: the package's payment objects drop what the
watcher needs from `get_transfers` (the subaddress index, `unlock_time`,
`double_spend_seen`, pool and in-block entries in one call).

Failures become the two every chain client reports
(billing.chains.errors): `ChainUnavailable` (down, timing out, credentials
refused, the wallet cut off from its daemon) and `RpcError` (the wallet
refused this call, with its code). Messages never quote a URL.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import requests
from monero import exceptions as monero_exceptions
from monero.backends.jsonrpc import JSONRPCDaemon, JSONRPCWallet
from monero.backends.jsonrpc import exceptions as jsonrpc_exceptions

from billing.chains.errors import ChainUnavailable, RpcError

# wallet-rpc's error codes for the exceptions the package raises in their place.
WATCH_ONLY = -29
TRANSACTION_NOT_FOUND = -8
ADDRESS_INDEX_OUT_OF_BOUND = -15
NO_DAEMON_CONNECTION = -38
_CODES: dict[type, int] = {
    monero_exceptions.WalletIsWatchOnly: WATCH_ONLY,
    monero_exceptions.TransactionNotFound: TRANSACTION_NOT_FOUND,
    monero_exceptions.AddressIndexOutOfBound: ADDRESS_INDEX_OUT_OF_BOUND,
    monero_exceptions.NoDaemonConnection: NO_DAEMON_CONNECTION,
}


def _endpoint(url: str, setting: str) -> tuple[str, str, int, str, str]:
    """(protocol, host, port, user, password) of an http(s)://[user:password@]host:port URL."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ChainUnavailable(f"{setting} must be an http(s)://host:port URL", reason="bad_response")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, parts.hostname, port, parts.username or "", parts.password or ""


def _call(name: str, method: str, send: Callable[[], Any]) -> Any:
    try:
        return send()
    except requests.Timeout:
        raise ChainUnavailable(f"{name} did not answer {method} in time", reason="timeout") from None
    except requests.ConnectionError:
        raise ChainUnavailable(f"{name} is unreachable", reason="unreachable") from None
    except jsonrpc_exceptions.Unauthorized:
        raise ChainUnavailable(f"{name} refused the credentials", reason="unauthorized") from None
    except monero_exceptions.NoDaemonConnection:
        raise ChainUnavailable(f"{name} cannot reach its daemon", reason="unreachable") from None
    except ValueError:  # not JSON
        raise ChainUnavailable(
            f"{name} answered {method} with something that is not JSON", reason="bad_response"
        ) from None
    except monero_exceptions.MoneroException as exc:
        raise RpcError(_CODES.get(type(exc), -1), str(exc), method=method) from None


class WalletRpc:
    """monero-wallet-rpc: `call(method, **params)` returns the JSON-RPC result."""

    def __init__(self, url: str, *, user: str = "", password: str = "", timeout: float = 120.0) -> None:
        protocol, host, port, url_user, url_password = _endpoint(url, "XMR_WALLET_RPC_URL")
        self.endpoint = f"{protocol}://{host}:{port}"
        self.backend = JSONRPCWallet(
            protocol=protocol,
            host=host,
            port=port,
            user=user or url_user,
            password=password or url_password,
            timeout=timeout,
        )

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        result: dict[str, Any] = _call(
            "the wallet RPC",
            method,
            lambda: self.backend.raw_request(method, params, squelch_error_logging=True),
        )
        return result

    def close(self) -> None:
        self.backend.session.close()


class DaemonRpc:
    """monerod's JSON-RPC (restricted RPC is enough: get_info, block headers); a login,
    when the daemon asks for one, rides in the URL (http://user:password@host:port)."""

    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        protocol, host, port, user, password = _endpoint(url, "XMR_DAEMON_URL")
        self.backend = JSONRPCDaemon(
            protocol=protocol, host=host, port=port, user=user, password=password, timeout=timeout
        )

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        result: dict[str, Any] = _call(
            "the Monero daemon", method, lambda: self.backend.raw_jsonrpc_request(method, params)
        )
        return result

    def height(self) -> int:
        """The daemon's height: how many blocks it has (its top block is height - 1)."""
        info = self.call("get_info")
        if info.get("busy_syncing") or info.get("synchronized") is False:
            raise ChainUnavailable("the Monero daemon is still syncing", reason="syncing")
        return int(info["height"])

    def close(self) -> None:
        self.backend.session.close()
