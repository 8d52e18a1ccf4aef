"""Many rows in few statements (``store/sqlite/_bulk.py``): every row lands once, in order
where order matters, in statements of bounded size within SQLite's limit on parameters."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import cast

import pytest

from awaken_trio.store.sqlite._bulk import MAX_ROWS, insert_rows, write_rows

_PADDED_INSERT = "INSERT INTO t (k, v) SELECT * FROM (VALUES {}) WHERE column1 IS NOT NULL"
_PLAIN_INSERT = "INSERT INTO t (k, v) VALUES {}"


@pytest.fixture
def conn() -> Iterator[sqlite3.Connection]:
    connection = sqlite3.connect(":memory:", isolation_level=None)
    connection.execute("CREATE TABLE t (k INTEGER, v TEXT)")
    yield connection
    connection.close()


class _Recording:
    """The connection, recording the text of each statement it is given."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.statements: list[str] = []

    def getlimit(self, category: int) -> int:
        return self.conn.getlimit(category)

    def execute(self, sql: str, parameters: list[object]) -> sqlite3.Cursor:
        self.statements.append(sql)
        return self.conn.execute(sql, parameters)


def _recording(conn: sqlite3.Connection) -> tuple[sqlite3.Connection, list[str]]:
    recording = _Recording(conn)
    return cast("sqlite3.Connection", recording), recording.statements


def _rows_in(statement: str) -> int:
    return statement.count("(?, ?)")


def _flat(count: int) -> list[object]:
    return [value for i in range(count) for value in (i, f"v{i}")]


@pytest.mark.parametrize("count", [0, 1, 3, MAX_ROWS, MAX_ROWS + 1, 1000])
def test_every_row_lands_once(conn: sqlite3.Connection, count: int) -> None:
    write_rows(conn, _PADDED_INSERT, 2, _flat(count))
    assert conn.execute("SELECT k, v FROM t ORDER BY k").fetchall() == [
        (i, f"v{i}") for i in range(count)
    ]


def test_no_rows_run_no_statement(conn: sqlite3.Connection) -> None:
    recorded, statements = _recording(conn)
    write_rows(recorded, _PADDED_INSERT, 2, [])
    insert_rows(recorded, _PLAIN_INSERT, 2, [])
    assert statements == []


def test_a_statement_carries_at_most_max_rows_padded_to_a_power_of_two(
    conn: sqlite3.Connection,
) -> None:
    recorded, statements = _recording(conn)
    write_rows(recorded, _PADDED_INSERT, 2, _flat(1000))
    sizes = [_rows_in(statement) for statement in statements]
    # 1000 rows: three full statements, then 232 rows padded to 256.
    assert sizes == [MAX_ROWS] * 4
    assert all(size & (size - 1) == 0 for size in sizes)


def test_few_statement_texts_exist_however_many_rows(conn: sqlite3.Connection) -> None:
    recorded, statements = _recording(conn)
    for count in range(1, 600):
        write_rows(recorded, _PADDED_INSERT, 2, _flat(count))
    # Powers of two up to MAX_ROWS: what the connection compiles, once each.
    assert len(set(statements)) == MAX_ROWS.bit_length()


def test_an_insert_that_cannot_skip_padding_is_split_in_order(conn: sqlite3.Connection) -> None:
    recorded, statements = _recording(conn)
    insert_rows(recorded, _PLAIN_INSERT, 2, _flat(300))
    assert [_rows_in(statement) for statement in statements] == [256, 32, 8, 4]
    # The rowids follow the order the rows were given in.
    assert [k for (k,) in conn.execute("SELECT k FROM t ORDER BY rowid")] == list(range(300))


def test_sqlites_limit_on_parameters_bounds_a_statement(conn: sqlite3.Connection) -> None:
    conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 11)  # room for five rows of two
    recorded, statements = _recording(conn)
    write_rows(recorded, _PADDED_INSERT, 2, _flat(9))
    assert [_rows_in(statement) for statement in statements] == [4, 4, 1]
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (9,)
