"""The serving loop's look at the queue, against how many runs the store has ever held.

Run from the repository root::

    python benchmarks/bench_queue.py            # 20,000 ended runs of history
    python benchmarks/bench_queue.py --quick    # 5,000

Every worker's serving loop asks its store for runnable runs (``DurableStore.runnable``:
the queued runs it may claim, oldest first, at most a batch) each time it looks for work.
The figure is the median time of one ``runnable(..., limit=64)`` call over 200 calls, on a
store that holds (runs written straight through the store, as a long-lived file or
database holds them):

- 100 queued runs and nothing else: the reference;
- ``--history`` ended runs (20,000; 5,000 with ``--quick``), then 100 queued runs: a long
  history;
- ``--backlog`` queued runs (5,000; 2,000 with ``--quick``): a long queue.

Ratio = against the reference (1.0: a look costs the same whatever the store has seen or
holds). Target: < 1.5x. On SQLite and, where the PostgreSQL 15 server binaries and the
``postgres`` extra are here, on a throwaway PostgreSQL server (as the tests start one),
whose statistics are brought up to date first (``ANALYZE``, as autovacuum does).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import _harness  # noqa: F401  (it puts the checkout first on the import path)
import trio

from awaken_trio import EndCause, RunState
from awaken_trio.store import Commit, Expect, NewRun, open_store

QUEUED = 100
CALLS = 200
LIMIT = 64
BATCH = 500
ENDED = RunState.Ended(EndCause.NaturalEnd())


def _created(prefix: str, n: int, state: RunState) -> list[Commit]:
    return [
        Commit(
            run_id=f"{prefix}{i:07}",
            state=state,
            generation=0 if isinstance(state, RunState.Queued) else 1,
            expect=Expect(new=True),
            at=1.0,
            new_run=NewRun(thread_id=f"{prefix}{i:07}", parent_run_id=None, name="job"),
        )
        for i in range(n)
    ]


async def _look_cost(url: str, history: int, queued: int, analyze: Any) -> float:
    """Median seconds of one ``runnable`` call with ``history`` ended runs before a queue
    of ``queued``."""
    store = open_store(url)
    try:
        written = [*_created("e", history, ENDED), *_created("q", queued, RunState.Queued())]
        for i in range(0, len(written), BATCH):
            await store.apply(written[i : i + BATCH])
        if analyze is not None:
            await trio.to_thread.run_sync(analyze, url)
        times = []
        for _ in range(CALLS):
            started = time.perf_counter()
            found = await store.runnable({"job"}, 0.0, LIMIT)
            times.append(time.perf_counter() - started)
        assert [r.run_id for r in found] == [f"q{i:07}" for i in range(LIMIT)]
    finally:
        await store.aclose()
    return statistics.median(times)


def _analyze(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--history", type=int, default=None)
    parser.add_argument("--backlog", type=int, default=None)
    args = parser.parse_args(argv)
    history = args.history if args.history is not None else (5_000 if args.quick else 20_000)
    backlog = args.backlog if args.backlog is not None else (2_000 if args.quick else 5_000)
    shapes = ((0, QUEUED), (history, QUEUED), (0, backlog))
    print(f"== runnable(limit={LIMIT}): median of {CALLS} calls ==")
    rows: list[tuple[str, list[float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        files = [f"sqlite:///{Path(tmp) / f'q{i}.db'}" for i in range(len(shapes))]
        costs = [
            trio.run(_look_cost, f, h, q, None) for f, (h, q) in zip(files, shapes, strict=True)
        ]
        rows.append(("sqlite", costs))
    server = None
    try:
        from tests.pg_server import start_server

        server = start_server()
        urls = [server.create_database(f"queue{i}") for i in range(len(shapes))]
        costs = [
            trio.run(_look_cost, u, h, q, _analyze) for u, (h, q) in zip(urls, shapes, strict=True)
        ]
        rows.append(("postgresql", costs))
    except Exception as exc:  # no server binaries, or no psycopg: say so and go on
        print(f"  postgresql not measured: {type(exc).__name__}: {str(exc).split(';')[0]}")
    finally:
        if server is not None:
            server.stop()
    print(
        f"  {'store':10s} {f'{QUEUED} queued':>12s} {f'+{history:,} ended':>15s}"
        f" {f'{backlog:,} queued':>14s}   target < 1.5x"
    )
    for kind, (reference, long_history, long_queue) in rows:
        ratios = (long_history / reference, long_queue / reference)
        verdict = "PASS" if max(ratios) < 1.5 else "MISS"
        print(
            f"  {kind:10s} {reference * 1e3:9.3f} ms {long_history * 1e3:9.3f} ms"
            f" {ratios[0]:4.1f}x {long_queue * 1e3:8.3f} ms {ratios[1]:4.1f}x   {verdict}"
        )
    print("command: python benchmarks/bench_queue.py" + (" --quick" if args.quick else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
