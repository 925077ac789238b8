"""The PostgreSQL backend's health check (core/postgresql/base.py): it asks the
client library and the socket, never the server, and still replaces a
connection the server has ended before a request uses it."""

import select
from unittest import mock

import psycopg
import pytest
from django.db import connection, connections

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def other():
    conn = connections.create_connection("default")
    conn.ensure_connection()
    yield conn
    conn.close()


def test_the_check_sends_nothing_to_the_server(other):
    with mock.patch.object(other.connection, "cursor", side_effect=AssertionError("a query was sent")):
        with mock.patch.object(other.connection, "execute", side_effect=AssertionError("a query was sent")):
            assert other.is_usable()


def test_a_connection_the_server_ended_is_replaced_before_it_is_used(other):
    pid = other.connection.info.backend_pid
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    # The server's reason and its closing reach the socket.
    readable, _, _ = select.select([other.connection.pgconn.socket], [], [], 10)
    assert readable
    assert not other.is_usable()

    # As at the start of a request: the check runs before the first query.
    other.health_check_enabled, other.health_check_done = True, False
    with other.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != pid


def test_a_failed_transaction_is_not_usable(other):
    other.connection.autocommit = False
    with pytest.raises(psycopg.errors.DivisionByZero):
        other.connection.execute("SELECT 1/0")
    assert not other.is_usable()
    other.connection.rollback()
    assert other.is_usable()
