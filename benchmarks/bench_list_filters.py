"""``list_runs`` filtered by an end cause on a long SQLite history, against the same query
without the filter, and ``count_runs`` over it.

Run from the repository root::

    python benchmarks/bench_list_filters.py               # 200,000 runs
    python benchmarks/bench_list_filters.py --runs 20000  # fewer

The store holds ``--runs`` ended runs, one in fifty failed and the rest ended naturally
(the shape of a long-lived store: failures are rare), written in batches through the
store's own commit path. Then, through the store's ``list_runs`` (one read on its thread,
as ``Runtime.list_runs`` makes it), it times a page of 50: newest first with no filter,
the failed ones, and a cause no run has (``max_steps``: the index answers at once); and
``count_runs``. Each figure is the median of three rounds of 20 calls, per call, in one
process; the ratio is against the unfiltered page.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import _harness  # noqa: F401  (it puts the checkout first on the import path)
import trio

from awaken_trio import EndCause, FrozenDict, RunState
from awaken_trio.store import Commit, Expect, NewRun
from awaken_trio.store.sqlite._store import SQLiteStore

BATCH = 2000
FAILED_EVERY = 50
CALLS = 20
DONE = RunState.Ended(EndCause.NaturalEnd())
FAILED = RunState.Ended(EndCause.Failed("value_error", "bad input"))
DETAIL = FrozenDict({"source": "start"})


def _ended(n: int) -> Commit:
    run_id = f"r{n:07d}"
    return Commit(
        run_id=run_id,
        state=FAILED if n % FAILED_EVERY == 0 else DONE,
        generation=1,
        expect=Expect(new=True),
        at=1_700_000_000.0 + n,
        new_run=NewRun(run_id, None, "job", None, None, run_id),
        detail=DETAIL,
    )


async def _fill(store: SQLiteStore, runs: int) -> None:
    for first in range(0, runs, BATCH):
        await store.apply([_ended(n) for n in range(first, min(first + BATCH, runs))])


async def _per_call(call: Callable[[], Awaitable[object]]) -> float:
    """Milliseconds per call: the median of three rounds of `CALLS` calls."""
    rounds = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(CALLS):
            await call()
        rounds.append((time.perf_counter() - start) / CALLS * 1000)
    return statistics.median(rounds)


async def _measure(path: Path, runs: int) -> dict[str, float]:
    async with SQLiteStore(path) as store:
        await _fill(store, runs)
        failed = await store.list_runs(state="failed")
        assert len(failed) == 50
        assert all(isinstance(r.state, RunState.Ended) for r in failed)
        await store.list_runs()  # warm the statements and the page cache alike
        return {
            "no filter": await _per_call(lambda: store.list_runs()),
            "state=failed": await _per_call(lambda: store.list_runs(state="failed")),
            "state=max_steps (none)": await _per_call(lambda: store.list_runs(state="max_steps")),
            "count_runs": await _per_call(store.count_runs),
        }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200_000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        figures = trio.run(_measure, Path(tmp) / "runs.db", args.runs)
    base = figures["no filter"]
    print(f"list_runs on SQLite, {args.runs:,} ended runs (1 in {FAILED_EVERY} failed),")
    print(f"a page of 50, median of 3 rounds of {CALLS} calls:")
    for name, ms in figures.items():
        print(f"  {name:<24} {ms:8.3f} ms   {ms / base:5.2f}x the unfiltered page")
    return 0


if __name__ == "__main__":
    sys.exit(main())
