"""A loopback JSON-RPC proxy in front of a node, that misbehaves on request.

Tests put it between the watcher and anvil to play the providers anvil is
not: one that caps `eth_getLogs` ranges, one without a trace API, one that
refuses batches, one that rate limits. Everything it does not intercept is
forwarded to the node unchanged.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

# A rule sees one JSON-RPC call and returns a JSON-RPC error object to answer
# with instead of the node, or None to let the node answer.
Rule = Callable[[dict], dict | None]


def method_missing(*methods: str) -> Rule:
    """The node answers `methods` with "method not found", as nodes without them do."""

    def rule(call: dict) -> dict | None:
        if call.get("method") in methods:
            return {"code": -32601, "message": f"the method {call['method']} does not exist/is not available"}
        return None

    return rule


def logs_span_limit(max_blocks: int) -> Rule:
    """`eth_getLogs` over more than `max_blocks` blocks is refused, the way providers cap it."""

    def rule(call: dict) -> dict | None:
        if call.get("method") != "eth_getLogs":
            return None
        query = call["params"][0]
        span = int(query["toBlock"], 16) - int(query["fromBlock"], 16) + 1
        if span > max_blocks:
            return {"code": -32005, "message": f"query exceeds max block range {max_blocks}"}
        return None

    return rule


def trace_fails(height: int | None = None) -> Callable[[dict, dict], dict]:
    """A rewrite: debug_traceBlockByNumber of block `height` (any block when None)
    answers that the node could not trace its first transaction, as Geth's
    tracer does on a timeout."""

    def rewrite(call: dict, answer: dict) -> dict:
        if call.get("method") != "debug_traceBlockByNumber" or not answer.get("result"):
            return answer
        if height is not None and int(call["params"][0], 16) != height:
            return answer
        first = answer["result"][0]
        return answer | {"result": [{"txHash": first.get("txHash"), "error": "execution timeout"}]}

    return rewrite


@dataclass
class RpcProxy:
    target: str
    rules: list[Rule] = field(default_factory=list)
    http_status: int | None = None  # answer every request with this HTTP status
    max_batch: int | None = None  # larger batches get HTTP 413
    seen: list[str] = field(default_factory=list)  # methods asked, in order
    # Each sees a call and the node's answer to it and returns the answer to send (the same, or changed).
    rewrites: list[Callable[[dict, dict], dict]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> RpcProxy:
        proxy = self
        client = httpx.Client(timeout=60)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                calls = payload if isinstance(payload, list) else [payload]
                proxy.seen.extend(c.get("method", "") for c in calls)
                if proxy.http_status is not None:
                    self._send(proxy.http_status, {"error": "refused by the test proxy"})
                    return
                if isinstance(payload, list) and proxy.max_batch is not None and len(payload) > proxy.max_batch:
                    self._send(413, {"error": "batch too large"})
                    return
                answers: dict[int, dict] = {}
                forward: list[dict] = []
                for index, call in enumerate(calls):
                    error = next((e for e in (rule(call) for rule in proxy.rules) if e is not None), None)
                    if error is not None:
                        answers[index] = {"jsonrpc": "2.0", "id": call.get("id"), "error": error}
                    else:
                        forward.append(call)
                if forward:
                    body = forward if isinstance(payload, list) else forward[0]
                    result = client.post(proxy.target, json=body).json()
                    by_id = {r.get("id"): r for r in (result if isinstance(result, list) else [result])}
                    for index, call in enumerate(calls):
                        if index not in answers:
                            answer = by_id[call.get("id")]
                            for rewrite in proxy.rewrites:
                                answer = rewrite(call, answer)
                            answers[index] = answer
                ordered = [answers[i] for i in range(len(calls))]
                self._send(200, ordered if isinstance(payload, list) else ordered[0])

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
