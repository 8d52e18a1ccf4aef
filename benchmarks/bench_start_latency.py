"""A caller that waits for each commit, on SQLite: one ``start`` (or ``submit``) at a time,
against the floor of the same file, measured side by side in one process.

Run from the repository root::

    python benchmarks/bench_start_latency.py            # 2,000 calls a measurement
    python benchmarks/bench_start_latency.py --quick    # 300

The floor is what the file costs one commit: a one-row ``INSERT`` + ``COMMIT`` on a
connection with the store's pragmas (WAL, ``synchronous=FULL``), into a table of its own in
the same file, one after another on this thread. Against it, on a runtime opened on that
file:

- ``start``: ``await runtime.start(parked)`` in a loop (a body that waits, so nothing but
  the start commits while the loop runs), as a caller that needs each run committed
  before it goes on;
- ``submit``: ``await runtime.submit("job")`` in a loop (nobody serves), as a web handler
  that answers once the run is durable;
- the floor from Trio: the floor's own commit awaited from a Trio task, run as a job on a
  thread of its own as the store runs its writes (a blocking commit must not stall the
  event loop): the best any store of a Trio program can do, before any work of its own.

Each figure is the median of three rounds (floor, start, submit in turn, so machine noise
falls on all three alike), each a median of the per-call times. Ratio = floor/call (1.0
would be a call that costs the file's commit and nothing else). Target: >= 0.5.

``--breakdown`` then splits one call into where its time goes (medians, one more round):
from the call to the store's thread taking the job (the call's own work, the mailbox task,
the hop to the thread), the transaction up to ``COMMIT`` (its reads and writes), ``COMMIT``
itself (the fsync), and from the thread's answer back to the caller; and it counts the
statements each call runs. It also replays the very statements the store ran, prepared
with their values, on a copy of the file as it was before the calls, in turns with the
floor: from one plain connection (what SQLite alone costs a call's transaction, without
Python deciding it or the hops around it), and awaited from Trio, each transaction a job on
a thread of its own (the best a call that writes these rows can do: what the runtime's own
work may add to reach the target is what is left of twice the floor).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import _harness  # noqa: F401  (it puts the checkout first on the import path)
import trio

from awaken_trio import RunContext, open_runtime


async def parked(ctx: RunContext) -> object:
    await trio.sleep_forever()
    return None  # pragma: no cover


def floor_connection(path: Path) -> sqlite3.Connection:
    """A connection to ``path`` with the store's pragmas, and the floor's table."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS floor (id INTEGER PRIMARY KEY, body TEXT)")
    return conn


def floor_commit(conn: sqlite3.Connection) -> None:
    """The floor: one fsync'd one-row ``INSERT`` + ``COMMIT``."""
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO floor (body) VALUES ('row')")
    conn.execute("COMMIT")


def floor(path: Path, n: int) -> float:
    """Median seconds of one fsync'd one-row ``INSERT`` + ``COMMIT`` on ``path``."""
    conn = floor_connection(path)
    try:
        times: list[float] = []
        for _ in range(n):
            started = time.perf_counter()
            floor_commit(conn)
            times.append(time.perf_counter() - started)
    finally:
        conn.close()
    return statistics.median(times)


async def timed_on_thread(
    path: Path, jobs: Sequence[Callable[[sqlite3.Connection], object]]
) -> list[float]:
    """Seconds of each of ``jobs`` awaited from Trio, one after another, each run on a
    thread of its own with a connection to ``path`` (`floor_connection`), as the store runs
    its writes (`ResourceThread` of ``store/sqlite/_thread.py``; a blocking commit must not
    stall the event loop)."""
    from awaken_trio.store.sqlite._thread import ResourceThread

    thread = ResourceThread("timed", lambda: floor_connection(path))
    await thread.start()
    times: list[float] = []
    try:
        for job in jobs:
            started = time.perf_counter()
            await thread.run(job)
            times.append(time.perf_counter() - started)
    finally:
        await thread.aclose()
    return times


async def floor_from_trio(path: Path, n: int) -> float:
    """Median seconds of the floor's commit awaited from Trio (`timed_on_thread`): what any
    store of a Trio program pays for one awaited commit on this file, before it does any
    work of its own."""
    return statistics.median(await timed_on_thread(path, [floor_commit] * n))


async def calls(url: str, n: int, kind: str) -> float:
    """Median seconds of one ``start`` or ``submit``, awaited one after another."""
    times: list[float] = []
    async with open_runtime(url) as runtime:
        for _ in range(n):
            started = time.perf_counter()
            if kind == "start":
                await runtime.start(parked)
            else:
                await runtime.submit("job")
            times.append(time.perf_counter() - started)
        # (Leaving the block releases or stops the parked runs; that is not timed.)
    return statistics.median(times)


def measure(n: int, rounds: int) -> dict[str, float]:
    found: dict[str, list[float]] = {"floor": [], "from trio": [], "start": [], "submit": []}
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "runs.db"
            url = f"sqlite:///{path}"
            trio.run(calls, url, 1, "submit")  # create the schema before the floor runs
            found["floor"].append(floor(path, n))
            found["from trio"].append(trio.run(floor_from_trio, path, n))
            found["start"].append(trio.run(calls, url, n, "start"))
            found["submit"].append(trio.run(calls, url, n, "submit"))
    return {kind: statistics.median(times) for kind, times in found.items()}


Statement = tuple[str, Any]
"""One statement of a recorded transaction, with its values (a sequence of rows for
``executemany``, marked by the SQL's leading ``*``)."""


class _Recording:
    """A store's connection that records each write transaction's statements with their
    values (and marks when each statement begins), then runs them."""

    def __init__(
        self, conn: sqlite3.Connection, marks: list[tuple[float, str]], out: list[list[Statement]]
    ) -> None:
        self._conn = conn
        self._marks = marks
        self._out = out
        self._open = False

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        verb = sql.split(None, 1)[0]
        self._marks.append((time.perf_counter(), verb))
        if sql == "BEGIN IMMEDIATE":
            self._out.append([])
            self._open = True
        if self._open:
            self._out[-1].append((sql, params))
        if verb in ("COMMIT", "ROLLBACK"):
            self._open = False
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, rows: Any) -> sqlite3.Cursor:
        rows = list(rows)
        self._marks.append((time.perf_counter(), sql.split(None, 1)[0]))
        if self._open:
            self._out[-1].append(("*" + sql, rows))
        return self._conn.executemany(sql, rows)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def breakdown(n: int, kind: str) -> dict[str, float]:
    """Median microseconds of each part of one call, and statements per call; then the
    same calls' write transactions replayed (`replay`)."""
    from awaken_trio.store.sqlite import _session as session_module

    marks: list[tuple[float, str]] = []
    transactions: list[list[Statement]] = []  # each write, as the store ran it
    write = session_module.Session.write
    open_session = session_module.Session.open.__func__  # type: ignore[attr-defined]

    def timed_write(self: Any, fn: Any) -> Any:
        marks.append((time.perf_counter(), "thread"))
        try:
            return write(self, fn)
        finally:
            marks.append((time.perf_counter(), "answered"))

    def recorded_open(cls: Any, *args: Any, **kwargs: Any) -> Any:
        opened = open_session(cls, *args, **kwargs)
        object.__setattr__(opened, "conn", _Recording(opened.conn, marks, transactions))
        return opened

    async def timed(url: str) -> None:
        async with open_runtime(url) as runtime:
            for _ in range(n):
                marks.append((time.perf_counter(), "call"))
                if kind == "start":
                    await runtime.start(parked)
                else:
                    await runtime.submit("job")
            marks.append((time.perf_counter(), "call"))

    session_module.Session.write = timed_write  # type: ignore[method-assign]
    session_module.Session.open = classmethod(recorded_open)  # type: ignore[method-assign,assignment]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{Path(tmp) / 'runs.db'}"
            trio.run(calls, url, 1, "submit")
            before = Path(tmp) / "before.db"
            with sqlite3.connect(Path(tmp) / "runs.db") as source, sqlite3.connect(before) as copy:
                source.backup(copy)
            marks.clear()
            transactions.clear()
            trio.run(timed, url)
            replayed = replay(before, [t for t in transactions if t[-1][0] == "COMMIT"])
    finally:
        session_module.Session.write = write  # type: ignore[method-assign]
        session_module.Session.open = classmethod(open_session)  # type: ignore[method-assign,assignment]
    parts: dict[str, list[float]] = {"to the thread": [], "transaction": [], "COMMIT": []}
    parts["back to the caller"] = []
    statements: list[int] = []
    calls_seen = [i for i, (_, what) in enumerate(marks) if what == "call"]
    for first, last in itertools.pairwise(calls_seen):
        span = marks[first : last + 1]
        writes = [i for i, (_, what) in enumerate(span) if what == "thread"]
        if len(writes) != 1:  # another job (a read, a poll) joined in: not a clean sample
            continue
        (w,) = writes
        answered = next(i for i, (_, what) in enumerate(span) if what == "answered")
        commit = max(i for i in range(w, answered) if span[i][1] == "COMMIT")
        parts["to the thread"].append(span[w][0] - span[0][0])
        parts["transaction"].append(span[commit][0] - span[w][0])
        parts["COMMIT"].append(span[answered][0] - span[commit][0])
        parts["back to the caller"].append(span[-1][0] - span[answered][0])
        statements.append(answered - w - 1)
    found = {part: statistics.median(times) * 1e6 for part, times in parts.items()}
    found["statements"] = statistics.median(statements)
    found.update({f"replayed {part}": value * 1e6 for part, value in replayed.items()})
    return found


def _replay_one(conn: sqlite3.Connection, statements: list[Statement]) -> None:
    for sql, values in statements:
        if sql.startswith("*"):
            conn.executemany(sql[1:], values)
        else:
            conn.execute(sql, values).fetchall()


def replay(path: Path, transactions: list[list[Statement]]) -> dict[str, float]:
    """The calls' write transactions run again, in order, with their values (prepared
    statements, as the store runs them), on a copy of the file as it was before the calls,
    from one plain connection, in turns of `CHUNK` with the floor: SQLite's own cost of a
    call's transaction, without Python deciding it or the hops around it. Every other chunk
    is awaited from Trio, each transaction a job on a thread of its own as the store runs
    it: the best a call with these writes can do. Median seconds of each."""
    conn = floor_connection(path)
    times: dict[str, list[float]] = {"floor": [], "alone": [], "from trio": []}

    try:
        for i in range(0, len(transactions), CHUNK):
            for _ in range(CHUNK):
                started = time.perf_counter()
                floor_commit(conn)
                times["floor"].append(time.perf_counter() - started)
            chunk = transactions[i : i + CHUNK]
            if (i // CHUNK) % 2:
                jobs = [functools.partial(_replay_one, statements=t) for t in chunk]
                times["from trio"] += trio.run(timed_on_thread, path, jobs)
                continue
            for statements in chunk:
                started = time.perf_counter()
                _replay_one(conn, statements)
                times["alone"].append(time.perf_counter() - started)
    finally:
        conn.close()
    return {part: statistics.median(found) for part, found in times.items()}


CHUNK = 25


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--calls", type=int, help="calls a measurement (default 2,000)")
    parser.add_argument("--breakdown", action="store_true", help="where one call's time goes")
    args = parser.parse_args(argv)
    n = args.calls or (300 if args.quick else 2_000)
    print(f"== one call at a time on SQLite (synchronous=FULL), {n} calls, median of 3 ==")
    medians = measure(n, 3)
    base = medians["floor"]
    print(f"  {'floor: INSERT + COMMIT':24s} {base * 1e3:7.3f} ms")
    hopped = medians["from trio"]
    print(
        f"  {'the floor from Trio':24s} {hopped * 1e3:7.3f} ms   floor/it {base / hopped:.2f}"
        "   (the same commit on a thread of its own, awaited: the best a store can do)"
    )
    for kind in ("start", "submit"):
        took = medians[kind]
        print(f"  {kind:24s} {took * 1e3:7.3f} ms   floor/{kind} {base / took:.2f}")
    if args.breakdown:
        for kind in ("start", "submit"):
            parts = breakdown(n, kind)
            shown = "   ".join(
                f"{part} {value:.0f} us"
                for part, value in parts.items()
                if part in ("to the thread", "transaction", "COMMIT", "back to the caller")
            )
            print(f"  {kind}: {shown}   ({parts['statements']:.0f} statements)")
            floor_us = parts["replayed floor"]
            alone, hopped = parts["replayed alone"], parts["replayed from trio"]
            print(
                f"  {kind}: its writes replayed, in turns with the floor ({floor_us:.0f} us):"
                f" on one connection {alone:.0f} us (floor/it {floor_us / alone:.2f}),"
                f" awaited from Trio {hopped:.0f} us (floor/it {floor_us / hopped:.2f})"
            )
    print(f"command: {' '.join([sys.executable, *sys.argv])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
