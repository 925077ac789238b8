"""Django's PostgreSQL backend, with a connection health check that needs no
round trip to the server.

Connections are kept between requests (DATABASE_CONN_MAX_AGE) and checked before
a request first uses one (CONN_HEALTH_CHECKS). Django's own check sends
`SELECT 1` and waits for the answer: one more round trip on every request, as
much as the single query the catalog endpoints need. Here the check reads what
the client library already knows and asks the kernel whether the server has
said anything since the connection went idle. A server that ends a connection
(a restart, `pg_terminate_backend`, an idle timeout) sends its reason and closes
the socket, which is then readable; an idle connection the server still holds
has nothing to read. Either way the request that follows gets a working
connection. What no check before the query can see, a peer that vanished
without closing, fails that query as it would have failed `SELECT 1`.
"""

from __future__ import annotations

import select

import psycopg
from django.db.backends.postgresql import base
from psycopg import pq

# Where `SELECT 1` would have worked: idle, or inside a transaction that has not failed.
_READY = (pq.TransactionStatus.IDLE, pq.TransactionStatus.INTRANS)


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        conn = self.connection
        if conn is None or conn.closed or conn.broken:
            return False
        pgconn = conn.pgconn
        if pgconn.status != pq.ConnStatus.OK or pgconn.transaction_status not in _READY:
            return False
        try:
            poller = select.poll()
            poller.register(pgconn.socket, select.POLLIN | select.POLLPRI)
            # Nothing is owed to a client between queries: anything to read is the
            # server leaving (or a notice); a fresh connection costs less than guessing.
            return not poller.poll(0)
        except (OSError, ValueError, psycopg.Error):  # the socket is already gone
            return False
