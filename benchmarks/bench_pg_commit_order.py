"""What numbering events in commit order costs on PostgreSQL: write transactions per second
through one shared counters row, against the same transactions numbered by a sequence.

Run from the repository root (needs the PostgreSQL 15 server binaries, as the tests do, and
the ``postgres`` extra)::

    python benchmarks/bench_pg_commit_order.py           # 3 s a measurement
    python benchmarks/bench_pg_commit_order.py --quick   # 1 s

The PostgreSQL store gives every event a seq that must never become visible after a greater
one did (followers read events by seq: ``store/postgres/_tx.py``'s docstring). Its commit
pipeline takes the one ``counters`` row (``UPDATE ... RETURNING``), writes the events after it, and
commits, so the row is held until ``COMMIT`` returns, and ``COMMIT`` includes the WAL flush.
No two write transactions of one database can be in that stretch at once, so the server
cannot flush the WAL of several of them together (group commit): a second connection still
adds (one writes its statements while the other flushes), more do not, and write
transactions a second stop near one per flush, whatever the number of connections.

This measures that ceiling on a throwaway server (the system's PostgreSQL with its defaults,
fsync on, ``synchronous_commit = on``), with 1, 2, 4 and 8 connections, each in a thread of
its own committing one transaction after another:

- ``counter row``: the store's shape: ``UPDATE counters SET last_seq = last_seq + 1 ...
  RETURNING``, one ``INSERT`` of an event numbered by it, ``COMMIT``;
- ``sequence``: the same ``INSERT`` numbered by ``nextval``, ``COMMIT``: no row is shared, so
  the server flushes the WAL of several transactions at once (the order in which seqs
  become visible is then no longer the seq order, which is what the counter row buys).

Each figure is the median of three rounds. The ratio is counter row / sequence.
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


def _rate(url: str, statement: str, connections: int, seconds: float) -> float:
    """Transactions a second, ``connections`` threads committing ``statement`` each."""
    import psycopg

    conns = [psycopg.connect(url) for _ in range(connections)]
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
                conn.execute(statement, ("an event",))
                conn.commit()
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

        url = server.create_database("commit_order")
        with psycopg.connect(url, autocommit=True) as conn:
            for statement in _SCHEMA:
                conn.execute(statement)
        print("== write transactions a second, each connection committing one after another ==")
        print(f"  {'connections':>11}  {'counter row':>11}  {'sequence':>9}  ratio")
        for connections in CONNECTIONS:
            found: dict[str, list[float]] = {"counter": [], "sequence": []}
            for _ in range(3):  # in turns, so both see the machine alike
                found["counter"].append(_rate(url, _BY_COUNTER, connections, seconds))
                found["sequence"].append(_rate(url, _BY_SEQUENCE, connections, seconds))
            counter = statistics.median(found["counter"])
            sequence = statistics.median(found["sequence"])
            ratio = counter / sequence
            print(f"  {connections:>11}  {counter:>11,.0f}  {sequence:>9,.0f}  {ratio:.2f}")
    command = " ".join(["python", *sys.argv])
    print(f"command: {command}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
