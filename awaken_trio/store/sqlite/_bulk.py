"""Writing many rows to SQLite with few statements.

Every call into SQLite (each step of a statement, each reset) releases the GIL, so SQLite
works while the runtime's thread runs Python, and takes it back after, which waits while
the other thread runs Python: until it blocks, or for up to the interpreter's switch
interval (5 ms by default). ``executemany`` enters SQLite twice per row, so a store thread
writing a thousand rows while the runtime is busy could wait for seconds. Here a statement
carries many rows in one multi-row ``VALUES`` list of bound parameters (exact for every
type, as binding one row is), so a batch enters SQLite a few times per kind of write.

A statement carries at most `MAX_ROWS` rows: SQLite compiles a statement the first time a
connection runs its text, and compiling one of a thousand rows costs more than running it
(some 8 ms against 4 ms for a thousand new runs), which every new connection would pay for
every kind of write. A few hundred rows keep both the compiling and the calls into SQLite
few.

So that only a few statement texts exist per kind (and stay in the connection's statement
cache), a statement carries a power of two of rows: `write_rows` pads the last one with
rows of NULLs, which the statement must ignore (``WHERE column1 IS NOT NULL`` for an
insert; a NULL key matches nothing in an update's join or a delete's ``IN``), and
`insert_rows` splits the rows instead, for an insert that cannot ignore them.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final

MAX_ROWS: Final = 256

_texts: dict[tuple[str, int, int], str] = {}


def write_rows(conn: sqlite3.Connection, template: str, width: int, values: list[Any]) -> None:
    """Run ``template`` over rows of ``width`` values (``values`` holds them one after
    another), padding the last statement with rows of NULLs: ``template`` has one ``{}``
    where a statement's rows go, as ``(?, ?), (?, ?)``, and must ignore a row whose first
    value is NULL.

    The rows of one statement are applied together: a statement whose rows must see each
    other's effects does not belong here.
    """
    step = _most_rows(conn, width) * width
    for start in range(0, len(values), step):
        chunk = values[start : start + step]
        rows = len(chunk) // width
        size = 1 << (rows - 1).bit_length()
        chunk.extend([None] * (width * (size - rows)))
        conn.execute(_text(template, width, size), chunk)


def insert_rows(conn: sqlite3.Connection, template: str, width: int, values: list[Any]) -> None:
    """Like `write_rows`, for a ``template`` that cannot ignore padding: the rows are
    split into statements of power-of-two sizes instead, in order."""
    most = _most_rows(conn, width)
    start, total = 0, len(values) // width
    while start < total:
        size = 1 << (min(total - start, most).bit_length() - 1)
        end = start + size
        conn.execute(_text(template, width, size), values[start * width : end * width])
        start = end


def _most_rows(conn: sqlite3.Connection, width: int) -> int:
    """The rows one statement may carry: a power of two, within SQLite's limit on
    parameters."""
    fit = max(1, min(MAX_ROWS, conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // width))
    return 1 << (fit.bit_length() - 1)


def _text(template: str, width: int, size: int) -> str:
    key = (template, width, size)
    text = _texts.get(key)
    if text is None:
        row = "(" + ", ".join("?" * width) + ")"
        text = _texts[key] = template.format(", ".join([row] * size))
    return text
