"""What every dev-node harness needs to start its processes: a free loopback
port, and a child that dies with the process that started it."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import socket


def free_port() -> int:
    """A TCP port nobody listens on right now on loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def die_with_parent() -> None:
    """`preexec_fn` of a node's process (runs in the child between fork and exec).
    Linux: the node gets SIGTERM (a clean shutdown) when the process that started
    it dies, however it dies. Elsewhere the harness's stop() and atexit do it."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
