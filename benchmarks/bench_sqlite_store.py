"""The SQLite store's commit path alone, without a runtime: batches shaped like the ones the
runtime hands over when many one-step runs go at once.

Run from the repository root::

    python benchmarks/bench_sqlite_store.py              # 30,000 runs
    python benchmarks/bench_sqlite_store.py --runs 3000  # fewer

Each run takes three commits, as a one-step run under a claim does: ``Running`` with a
claim and the thread guard (it creates the run), a progress commit under the claim's fence,
and ``Ended`` under the fence with a release. Batch ``k`` holds the creations of group
``k``, the progress of group ``k - 1`` and the ends of group ``k - 2`` (groups of a third
of a batch), so every batch mixes the three kinds as the runtime's group commit does. Prints
commits per second and the time each commit costs, for ``synchronous`` full and normal.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import _harness  # noqa: F401  (it puts the checkout first on the import path)
import trio

from awaken_trio import EndCause, FrozenDict, RunState
from awaken_trio.store import Accepted, Claim, Commit, Expect, Fence, NewRun
from awaken_trio.store.sqlite._session import Synchronous
from awaken_trio.store.sqlite._store import SQLiteStore

OWNER = "bench-owner"
BATCH = 1024
START = FrozenDict({"source": "start"})
BOUNDARY = FrozenDict({"source": "boundary"})
DONE = RunState.Ended(EndCause.NaturalEnd())
RUNNING = RunState.Running(1)


def _create(run_id: str, at: float) -> Commit:
    return Commit(
        run_id=run_id,
        state=RUNNING,
        generation=1,
        expect=Expect(new=True),
        at=at,
        new_run=NewRun(run_id, None, None, 7, None, run_id),
        take_messages=True,
        detail=START,
        claim=Claim(OWNER, 30.0),
        thread_guard=True,
    )


def _progress(run_id: str, at: float) -> Commit:
    return Commit(
        run_id=run_id,
        state=RUNNING,
        generation=1,
        expect=Expect(generation=1, state=RunState.Running),
        at=at,
        checkpoint=FrozenDict({"step": 1}),
        steps=1,
        detail=BOUNDARY,
        fence=Fence(run_id, OWNER, 1),
    )


def _end(run_id: str, at: float) -> Commit:
    return Commit(
        run_id=run_id,
        state=DONE,
        generation=1,
        expect=Expect(generation=1, state=RunState.Running),
        at=at,
        result=FrozenDict({"done": 7}),
        steps=1,
        fence=Fence(run_id, OWNER, 1),
        release=True,
    )


def batches(runs: int) -> list[list[Commit]]:
    group = BATCH // 3
    ids = [f"run-{i:08d}" for i in range(runs)]
    groups = [ids[i : i + group] for i in range(0, runs, group)]
    out: list[list[Commit]] = []
    at = time.time()
    for k in range(len(groups) + 2):
        batch: list[Commit] = []
        if k < len(groups):
            batch += [_create(r, at) for r in groups[k]]
        if 0 <= k - 1 < len(groups):
            batch += [_progress(r, at) for r in groups[k - 1]]
        if 0 <= k - 2 < len(groups):
            batch += [_end(r, at) for r in groups[k - 2]]
        out.append(batch)
    return out


async def _measure(path: Path, synchronous: Synchronous, work: list[list[Commit]]) -> float:
    async with SQLiteStore(path, synchronous=synchronous) as store:
        started = time.perf_counter()
        for batch in work:
            results = await store.apply(batch)
            assert all(isinstance(r, Accepted) for r in results), results[:3]
        return time.perf_counter() - started


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30_000)
    args = parser.parse_args(argv)
    for synchronous in ("full", "normal"):
        work = batches(args.runs)
        commits = sum(len(b) for b in work)
        with tempfile.TemporaryDirectory() as tmp:
            elapsed = trio.run(_measure, Path(tmp) / "runs.db", synchronous, work)
        print(
            f"synchronous={synchronous:6s} {commits / elapsed:10,.0f} commits/s"
            f"  {elapsed / commits * 1e6:6.1f} us/commit  ({commits:,} commits)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
