"""What numbering events in commit order costs on PostgreSQL: write transactions per second
numbered as the store numbers them (a ticket, a sequence and a watermark), and through one
shared counters row (how the store numbered them before schema version 6), against the
same transactions numbered by a bare sequence.

Run from the repository root (needs the PostgreSQL 15 server binaries, as the tests do, and
the ``postgres`` extra)::

    python benchmarks/bench_pg_commit_order.py           # 3 s a measurement
    python benchmarks/bench_pg_commit_order.py --quick   # 1 s
    python benchmarks/bench_pg_commit_order.py --flush-delay-ms 1   # a slower disk

The PostgreSQL store gives every event a seq that must never become visible after a greater
one did (followers read events by seq: ``store/postgres/_order.py``'s docstring). Numbering
them under one ``counters`` row (``UPDATE ... RETURNING``, then the events, then ``COMMIT``)
held that row until ``COMMIT`` returned, and ``COMMIT`` includes the WAL flush: no two write
transactions of one database could be in that stretch at once, so the server could not
flush the WAL of several of them together (group commit). The store now takes a shared
ticket lock and its seqs from a sequence and commits, without waiting for another writer
(readers of every run's events read below a watermark): no lock is shared by every
writer.

Each write transaction of the store also tells the other runtimes it committed: a notice
on the store's channel (``NOTIFY``), which their listeners hear. PostgreSQL commits the
transactions that notify one at a time (a lock every notifying transaction of the server
takes before its commit and holds through the WAL flush), so the store sends the notice
after the ``COMMIT``, in the same pipeline, in a transaction of its own committed without
waiting for a flush (``store/postgres/_tx.py``'s docstring).

This measures five shapes on a throwaway server (the system's PostgreSQL with its defaults,
fsync on, ``synchronous_commit = on``), with 1, 2, 4 and 8 connections, each in a thread of
its own committing one transaction after another, each transaction one round trip
(``BEGIN``, the statement, ``COMMIT`` pipelined), one more connection listening on the
channel throughout, as a runtime's listener does:

- ``ours``: the store's shape (its schema, made by the store's migrations): an ``INSERT`` of
  an event numbered by ``next_seq`` (its ticket, then ``nextval``), ``COMMIT``;
- ``ours, noticed``: ours, its notice sent as the store sends it (its statement,
  ``notice``, after the ``COMMIT``);
- ``ours, notifying in it``: ours with ``pg_notify`` in the transaction (how the store
  sent its notices before);
- ``counter row``: ``UPDATE counters SET last_seq = last_seq + 1 ... RETURNING``, one
  ``INSERT`` of an event numbered by it, ``COMMIT``;
- ``sequence``: the same ``INSERT`` numbered by ``nextval``, ``COMMIT``: no order at all for
  readers (the ceiling).

Each figure is the median of three rounds (the shapes in turns within a round): the
transactions a second, their ratio to the sequence's, and the transactions committed a
WAL flush (``pg_stat_wal``): 1.00 when every commit flushes alone, more when the server
flushes several writers' commits together. That one does not depend on the machine's
cores: a lock held through every commit's flush shows as 1.00 at any number of
connections. ``--flush-delay-ms MS`` makes every WAL flush wait that long first
(``commit_delay``, with ``commit_siblings = 0``): a disk that flushes more slowly than this
machine's, as network storage does, where a lock held through each flush costs most.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import _harness  # noqa: F401  (it puts the checkout first on the import path)
import psycopg
from psycopg import sql

from tests.pg_server import ServerUnavailable, start_server

CONNECTIONS = (1, 2, 4, 8)

_SCHEMA = (
    "CREATE TABLE counters (id int PRIMARY KEY, last_seq bigint NOT NULL)",
    "INSERT INTO counters VALUES (1, 0)",
    "CREATE TABLE events (seq bigint PRIMARY KEY, detail text NOT NULL)",
    "CREATE TABLE sequenced (seq bigint PRIMARY KEY, detail text NOT NULL)",
    "CREATE SEQUENCE event_seq",
)
_BY_COUNTER = (
    "WITH c AS (UPDATE counters SET last_seq = last_seq + 1 WHERE id = 1 RETURNING last_seq)"
    " INSERT INTO events SELECT last_seq, %s FROM c"
)
_BY_SEQUENCE = "INSERT INTO sequenced VALUES (nextval('event_seq'), %s)"
_BY_TICKET = "INSERT INTO ticketed VALUES (ordered.next_seq(%s), %s)"
_NOTICED = (
    "WITH e AS (INSERT INTO ticketed VALUES (ordered.next_seq(%s), %s) RETURNING seq)"
    " SELECT set_config('awaken_trio.notice', 'a notice', false) FROM e"
)
_NOTIFYING = (
    "WITH e AS (INSERT INTO ticketed VALUES (ordered.next_seq(%s), %s) RETURNING seq)"
    " SELECT pg_notify(%s, 'a notice') FROM e"
)
_SCHEMA_NAME = "ordered"

Transact = Callable[[psycopg.Connection[tuple[object, ...]]], None]


def _committing(statement: str, params: tuple[object, ...]) -> Transact:
    """One transaction of ``statement``: ``BEGIN``, it, ``COMMIT``, in one round trip."""

    def transact(conn: psycopg.Connection[tuple[object, ...]]) -> None:
        with conn.pipeline():
            conn.execute("BEGIN")
            conn.execute(statement, params)
            conn.execute("COMMIT")

    return transact


def _noticed(space: int) -> Transact:
    """Ours with its notice as the store sends it: left in the session by the statement,
    and sent (``notice``, the store's own statement) after the ``COMMIT`` in the same
    pipeline, in a transaction of its own."""
    from awaken_trio.store.postgres._queries import Queries

    q = Queries.of(_SCHEMA_NAME)

    def transact(conn: psycopg.Connection[tuple[object, ...]]) -> None:
        with conn.pipeline():
            conn.execute("BEGIN")
            conn.execute(_NOTICED, (space, "an event"))
            conn.execute("COMMIT")
            conn.execute(q.notice, (q.channel,))

    return transact


_WRITER = "bench_pg_commit_order writer"
"""The measured connections' ``application_name``."""


class Measured(NamedTuple):
    rate: float
    """Transactions a second."""
    per_flush: float
    """Transactions committed a WAL flush (``pg_stat_wal.wal_sync``): 1.0 when every
    commit flushes alone, more when the server flushes several writers' commits together
    (group commit)."""


_STILL_WRITING = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"


def _measured(
    url: str, transact: Callable[[], Transact], connections: int, seconds: float
) -> Measured:
    """Transactions a second, ``connections`` threads each committing ``transact()``'s
    transactions one after another, and the transactions a WAL flush: read once the
    measured connections' server processes have ended (a process reports its WAL
    statistics as it ends, and now and then before)."""
    with psycopg.connect(url, autocommit=True) as admin:

        def flushes() -> int:
            deadline = time.monotonic() + 10.0
            while admin.execute(_STILL_WRITING, (_WRITER,)).fetchone() != (0,):
                if time.monotonic() > deadline:
                    raise RuntimeError("the measured connections' server processes did not end")
                time.sleep(0.01)
            found = admin.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()
            assert found is not None
            return int(found[0])

        before = flushes()
        committed, elapsed = _committed(url, transact, connections, seconds)
        return Measured(committed / elapsed, committed / max(flushes() - before, 1))


def _committed(
    url: str, transact: Callable[[], Transact], connections: int, seconds: float
) -> tuple[int, float]:
    """The transactions ``connections`` threads committed, each ``transact()``'s one after
    another for about ``seconds``, and the seconds they took."""
    conns = [
        psycopg.connect(url, autocommit=True, application_name=_WRITER) for _ in range(connections)
    ]
    one = transact()
    counts = [0] * connections
    failed: list[BaseException] = []
    start = threading.Barrier(connections + 1)
    stop = threading.Event()

    def loop(i: int) -> None:
        conn = conns[i]
        start.wait()
        n = 0
        try:
            while not stop.is_set():
                one(conn)
                n += 1
        except BaseException as exc:  # shown by the measuring thread
            failed.append(exc)
        counts[i] = n

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(connections)]
    for thread in threads:
        thread.start()
    try:
        start.wait()
        began = time.perf_counter()
        time.sleep(seconds)
        stop.set()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - began
    finally:
        stop.set()
        for conn in conns:
            conn.close()
    if failed:
        raise failed[0]
    return sum(counts), elapsed


@contextlib.contextmanager
def _listening(url: str, channel: str) -> Iterator[None]:
    """A connection listening on ``channel`` and reading what it hears, for the block."""
    conn = psycopg.connect(url, autocommit=True)
    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
    done = threading.Event()

    def hear() -> None:
        while not done.is_set():
            for _ in conn.notifies(timeout=0.1):
                pass

    thread = threading.Thread(target=hear)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--flush-delay-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="make every WAL flush wait this long first (a slower disk)",
    )
    args = parser.parse_args(argv)
    seconds = 1.0 if args.quick else 3.0
    try:
        server = start_server()
    except ServerUnavailable as exc:
        print(f"not measured: {exc}")
        return 0
    with server:
        from awaken_trio.store.postgres._order import ticket_space
        from awaken_trio.store.postgres._queries import Queries
        from awaken_trio.store.postgres._schema import open_schema

        url = server.create_database("commit_order")
        with psycopg.connect(url, autocommit=True) as conn:
            for statement in _SCHEMA:
                conn.execute(statement)
            open_schema(conn, _SCHEMA_NAME, "the benchmark's database")
            conn.execute("CREATE TABLE ticketed (seq bigint PRIMARY KEY, detail text NOT NULL)")
            if args.flush_delay_ms:
                delay = round(args.flush_delay_ms * 1000)
                conn.execute(f"ALTER SYSTEM SET commit_delay = {delay}")
                conn.execute("ALTER SYSTEM SET commit_siblings = 0")
                conn.execute("SELECT pg_reload_conf()")
                print(f"every WAL flush waits {args.flush_delay_ms:g} ms first (commit_delay)")
        space = ticket_space(_SCHEMA_NAME)
        channel = Queries.of(_SCHEMA_NAME).channel
        shapes: dict[str, Callable[[], Transact]] = {
            "ours": lambda: _committing(_BY_TICKET, (space, "an event")),
            "ours, noticed": lambda: _noticed(space),
            "ours, notifying in it": lambda: _committing(_NOTIFYING, (space, "an event", channel)),
            "counter row": lambda: _committing(_BY_COUNTER, ("an event",)),
            "sequence": lambda: _committing(_BY_SEQUENCE, ("an event",)),
        }
        print(
            "== write transactions a second, each connection committing one after another"
            " (over the sequence's), and transactions a WAL flush =="
        )
        print(f"  {'connections':>11}" + "".join(f"  {name:>24}" for name in shapes))
        with _listening(url, channel):
            for connections in CONNECTIONS:
                found: dict[str, list[Measured]] = {name: [] for name in shapes}
                for _ in range(3):  # in turns, so all see the machine alike
                    for name, shape in shapes.items():
                        found[name].append(_measured(url, shape, connections, seconds))
                sequence = statistics.median(m.rate for m in found["sequence"])
                cells = []
                for name in shapes:
                    rate = statistics.median(m.rate for m in found[name])
                    per_flush = statistics.median(m.per_flush for m in found[name])
                    cells.append(f"{rate:,.0f} ({rate / sequence:.2f}x) {per_flush:4.2f}")
                print(f"  {connections:>11}" + "".join(f"  {cell:>24}" for cell in cells))
    command = " ".join(["python", *sys.argv])
    print(f"command: {command}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
