"""The throwaway server the PostgreSQL tests run on: fresh databases, a restart, and
terminating the connections of one database."""

from __future__ import annotations

import psycopg
import pytest

from tests.pg_server import PgServer


def test_each_database_is_fresh_and_reachable_with_its_url(pg_server: PgServer) -> None:
    first, second = pg_server.create_database(), pg_server.create_database()
    assert first != second
    with psycopg.connect(first) as conn:
        conn.execute("CREATE TABLE t (x int)")
    with psycopg.connect(second) as conn:
        row = conn.execute("SELECT to_regclass('t') IS NULL, current_user").fetchone()
    assert row == (True, "awaken")


def test_a_wrong_password_is_refused(pg_server: PgServer) -> None:
    bad = pg_server.url().replace(pg_server.password, "wrong")
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(bad).close()


def test_terminating_backends_drops_the_connections_of_that_database(pg_server: PgServer) -> None:
    url = pg_server.create_database()
    conn = psycopg.connect(url, autocommit=True)
    try:
        name = url.rsplit("/", 1)[1]
        assert pg_server.terminate_backends(name) == 1
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    finally:
        conn.close()
