"""What numbering events in commit order costs on PostgreSQL: write transactions per second
numbered as the store numbers them (a ticket, a sequence and a watermark), and through one
shared counters row (how the store numbered them before schema version 6), against the
same transactions numbered by a bare sequence.

Run from the repository root (needs the PostgreSQL 15 server binaries, as the tests do, and
the ``postgres`` extra)::

    python benchmarks/bench_pg_commit_order.py           # 3 s a measurement
    python benchmarks/bench_pg_commit_order.py --quick   # 1 s

The PostgreSQL store gives every event a seq that must never become visible after a greater
one did (followers read events by seq: ``store/postgres/_order.py``'s docstring). Numbering
them under one ``counters`` row (``UPDATE ... RETURNING``, then the events, then ``COMMIT``)
held that row until ``COMMIT`` returned, and ``COMMIT`` includes the WAL flush: no two write
transactions of one database could be in that stretch at once, so the server could not
flush the WAL of several of them together (group commit). The store now takes a shared
ticket lock and its seqs from a sequence and commits, without waiting for another writer
(readers of every run's events read below a watermark): no lock is shared by every
writer.

This measures all three on a throwaway server (the system's PostgreSQL with its defaults,
fsync on, ``synchronous_commit = on``), with 1, 2, 4 and 8 connections, each in a thread of
its own committing one transaction after another, each transaction one round trip
(``BEGIN``, the statement, ``COMMIT`` pipelined):

- ``ours``: the store's shape (its schema, made by the store's migrations): an ``INSERT`` of
  an event numbered by ``next_seq`` (its ticket, then ``nextval``), ``COMMIT``;
- ``counter row``: ``UPDATE counters SET last_seq = last_seq + 1 ... RETURNING``, one
  ``INSERT`` of an event numbered by it, ``COMMIT``;
- ``sequence``: the same ``INSERT`` numbered by ``nextval``, ``COMMIT``: no order at all for
  readers (the ceiling).

Each figure is the median of three rounds; the ratios are ours / sequence and counter row /
sequence.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Sequence

import _harness  # noqa: F401  (it puts the checkout first on the import path)

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


def _rate(
    url: str, statement: str, connections: int, seconds: float, *, space: int | None = None
) -> float:
    """Transactions a second, ``connections`` threads committing ``statement`` each (with
    ``space``: the store's ticket first)."""
    import psycopg

    conns = [psycopg.connect(url, autocommit=True) for _ in range(connections)]
    params: tuple[object, ...] = ("an event",) if space is None else (space, "an event")
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
                with conn.pipeline():
                    conn.execute("BEGIN")
                    conn.execute(statement, params)
                    conn.execute("COMMIT")
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
    return sum(counts) / elapsed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    seconds = 1.0 if args.quick else 3.0
    try:
        server = start_server()
    except ServerUnavailable as exc:
        print(f"not measured: {exc}")
        return 0
    with server:
        import psycopg

        from awaken_trio.store.postgres._order import ticket_space
        from awaken_trio.store.postgres._schema import open_schema

        url = server.create_database("commit_order")
        with psycopg.connect(url, autocommit=True) as conn:
            for statement in _SCHEMA:
                conn.execute(statement)
            open_schema(conn, "ordered", "the benchmark's database")
            conn.execute("CREATE TABLE ticketed (seq bigint PRIMARY KEY, detail text NOT NULL)")
        space = ticket_space("ordered")
        print("== write transactions a second, each connection committing one after another ==")
        print(
            f"  {'connections':>11}  {'ours':>7}  {'counter row':>11}  {'sequence':>9}"
            "  ours/seq  counter/seq"
        )
        for connections in CONNECTIONS:
            found: dict[str, list[float]] = {"ours": [], "counter": [], "sequence": []}
            for _ in range(3):  # in turns, so all see the machine alike
                found["ours"].append(_rate(url, _BY_TICKET, connections, seconds, space=space))
                found["counter"].append(_rate(url, _BY_COUNTER, connections, seconds))
                found["sequence"].append(_rate(url, _BY_SEQUENCE, connections, seconds))
            ours = statistics.median(found["ours"])
            counter = statistics.median(found["counter"])
            sequence = statistics.median(found["sequence"])
            print(
                f"  {connections:>11}  {ours:>7,.0f}  {counter:>11,.0f}  {sequence:>9,.0f}"
                f"  {ours / sequence:>8.2f}  {counter / sequence:>11.2f}"
            )
    command = " ".join(["python", *sys.argv])
    print(f"command: {command}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
