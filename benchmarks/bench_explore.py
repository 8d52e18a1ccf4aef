"""Exploration speed: `explore_cancellation` over a body with 50 schedule points, against
plain runs of the same body.

Run from the repository root::

    python benchmarks/bench_explore.py            # about 10 seconds
    python benchmarks/bench_explore.py --quick    # one repetition

Everything runs in one process. The body sleeps on Trio's virtual clock between boundaries;
its step count is the smallest that gives 50 schedule points (``max_points=50`` explores
exactly 50). Ours: one
``explore_cancellation(body)`` (cancel at each point: the uninterrupted run, then 50 runs,
each a fresh runtime in a fresh ``trio.run`` on a worker thread, watched step by step), in
points per second. Baseline: the same body run to its end on a fresh memory runtime in a
fresh ``trio.run`` with the virtual clock, one after another in this thread, in runs per
second: the least an exploration can cost per point, since every point is one such run.
Ratio = ours/baseline (points per second over runs per second; bigger is better, 1.0 would
mean watching and checking cost nothing; a run cancelled at point k stops early, so it can
exceed 1). Target: ratio >= 0.25. The best of the
repetitions is kept.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Awaitable, Callable

import trio
import trio.testing

from awaken_trio import RunContext, open_runtime
from awaken_trio.testing import explore_cancellation

Body = Callable[[RunContext], Awaitable[object]]
POINTS = 50
TARGET = 0.25


def make_body(sleeps: int) -> Body:
    async def body(ctx: RunContext) -> object:
        for step in range(sleeps):
            await trio.sleep(1)
            if step % 5 == 4:
                await ctx.boundary({"step": step})
        return {"steps": sleeps}

    return body


async def _points(sleeps: int) -> int:
    report = await explore_cancellation(make_body(sleeps), max_points=1)
    return report.schedule_points


def body_of_50_points() -> Body:
    """The shortest body whose exploration counts at least ``POINTS`` schedule points (a
    boundary adds two, so exactly 50 may fall between two sizes); ``max_points`` then
    explores exactly ``POINTS`` of them."""
    for sleeps in range(1, 2 * POINTS):
        if trio.run(_points, sleeps) >= POINTS:
            return make_body(sleeps)
    raise SystemExit(f"no body with {POINTS} points")


async def _plain_run(body: Body) -> None:
    async with open_runtime() as runtime:
        await runtime.execute(body)


def baseline_runs_per_second(body: Body, runs: int) -> float:
    gc.collect()
    start = time.perf_counter()
    for _ in range(runs):
        trio.run(_plain_run, body, clock=trio.testing.MockClock(autojump_threshold=0))
    return runs / (time.perf_counter() - start)


async def _explore(body: Body) -> tuple[int, float]:
    start = time.perf_counter()
    report = await explore_cancellation(body, max_points=POINTS)
    return len(report.points), time.perf_counter() - start


def explored_points_per_second(body: Body) -> float:
    gc.collect()
    points, elapsed = trio.run(_explore, body)
    assert points == POINTS
    return points / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repetition")
    args = parser.parse_args()
    repeats = 1 if args.quick else 3
    body = body_of_50_points()
    ours = max(explored_points_per_second(body) for _ in range(repeats))
    base = max(baseline_runs_per_second(body, POINTS) for _ in range(repeats))
    ratio = ours / base
    print(f"exploration of a {POINTS}-point body (cancel at each point)")
    print(f"  ours      {ours:10.1f} points/s")
    print(f"  baseline  {base:10.1f} runs/s (plain runs of the body, fresh runtime each)")
    verdict = "PASS" if ratio >= TARGET else "MISS"
    print(f"  ratio     {ratio:10.2f} (target >= {TARGET})  {verdict}")


if __name__ == "__main__":
    main()
