"""Side-by-side benchmarks: awaken_trio runs against bare Trio tasks doing the same work.

Run from the repository root::

    python benchmarks/bench_runtime.py           # full run: about 3 minutes on 2 cores
    python benchmarks/bench_runtime.py --quick   # smaller sizes: about 20 seconds
    python benchmarks/bench_runtime.py --only 4  # one benchmark (1-4; repeatable)

Everything runs in one process. Each section runs in its own ``trio.run`` after a
``gc.collect()``; each timing is repeated and the best (lowest time) repetition is kept
(the throughput ratios are medians of turns: see 1).
The runtime uses the default memory store (``open_runtime()``), so every run still makes
its real commits (``Running`` and ``Ended``, each with its event); the garbage collector
stays enabled, as it is in a real process.

1. Throughput of trivial runs, start -> committed ``Ended`` (10k and 100k runs; 1k and 10k with
   ``--quick``; the body is ``async def body(ctx): return 1``). Ours, two ways: ``await
   rt.start(body)`` N times in a loop and then ``await handle.wait()`` on every handle ("start"),
   and N concurrent tasks each calling ``await rt.execute(body)`` ("execute"). Two baselines,
   each taken in turns (each turn runs every row once, one after the other, and a ratio is
   the median of the turns' ratios: the machine's speed moves from one minute to the next,
   and one turn's rows see it alike). "Bare" is the cheapest Trio task that runs the body
   in its own ``trio.CancelScope`` and captures its outcome: ours/bare runs per second
   (bigger is better) is the ratio with the target, >= 0.5. "Floor" (no target) is bare
   Trio doing what this design costs with none of the runtime's work: N tasks, each running
   the body in a nursery of its own (the attempt's scope, where children live) with
   ``outcome.acapture`` and storing the outcome, spawned with one checkpoint each (an
   awaited ``start``), and one more scheduler pass per task (the ``wait()`` that reads its
   end). "Floor, no nursery" (no target) is the floor with a cancel scope in place of each
   task's nursery: the awaited spawn and the reading pass alone. "Start()" (no target) is
   Trio's own awaited spawn: N ``await nursery.start(...)``, each task in its own cancel
   scope, capturing its outcome; ours/start() compares two ways of spawning that each return
   once the task is under way. The "gc" columns give the share of the timed wall time
   spent in the cyclic garbage collector (measured with ``gc.callbacks``).
2. Cancel latency with 10k parked runs (bodies in ``trio.sleep_forever()``): 1000 runs
   (500 with ``--quick``), one at a time, ``rt.deliver(LiveCommand.Cancel(run_id))`` then
   ``await handle.wait()``; the latency runs from just before ``deliver`` to the return of
   ``wait()``, when the committed ``Ended(Cancelled())`` is known. Bare: 10k tasks parked
   in their own cancel scopes; ``scope.cancel()`` -> the task leaves its scope and takes
   the timestamp there. p50 and p99 (``time.perf_counter_ns``), the best of each over the
   repeats. Ratio = ours/bare (times slower), the median of the repeats' ratios (each
   repeat runs ours, then bare, so both saw the machine alike). Target: p50 ratio <= 2.
   A second ratio (no target) is taken against the bare "back in the canceller" row, which
   adds the hop back to the cancelling task, as ours includes. A third (no target) is taken
   against the floor of this design: bare tasks parked in a nursery of their own (the
   attempt's scope, where children live), each setting the canceller's event inside it, as
   ours answers ``wait()`` before its nursery closes; the nursery's exit is a schedule point,
   so the task runs again in the pass that wakes the canceller, before it half the time.
3. Memory per parked run at 100k runs (10k with ``--quick``): ``tracemalloc`` traced bytes
   after parking minus before, after ``gc.collect()``, divided by N. Ours counts everything
   a parked run holds: actor task, attempt and its nursery scope, context, registry and
   thread-gate entries, the memory store's record and event, and the caller's handle. Bare:
   a task in its own ``CancelScope`` awaiting ``trio.sleep_forever()``, plus the caller's
   reference to the scope. Ratio = ours/bare (times larger). Target: ratio <= 3.
4. ``rt.deliver`` cost against the number of active runs: 10k
   ``deliver(LiveCommand.Wake(run_id))`` calls to randomly chosen parked runs, at 1k and at
   100k parked runs (1k and 10k with ``--quick``); the commands are built beforehand, so
   only ``deliver`` is timed. Bare reference: a dict lookup of the parked task's record by
   id plus a flag set, the floor any by-id delivery pays (it shows the cache cost of a
   larger population). Ratio = ns at the large population / ns at 1k. Target: ratio < 1.5
   (flat). The "hot" rows (no target) aim the same number of calls at only 1k of the runs
   of the large population: the working set stays the size of the small one, so the ratio
   shows how the lookup itself scales, apart from CPU-cache misses.

The summary at the end lists every number with its target and PASS or MISS.
"""

from __future__ import annotations

import argparse
import gc
import math
import random
import shlex
import statistics
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import _harness  # noqa: F401  (it puts the checkout first on the import path)
import outcome
import trio
import trio.testing

from awaken_trio import (
    EndCause,
    LiveCommand,
    RunContext,
    RunHandle,
    RunState,
    open_runtime,
)

SEED = 20240611


@dataclass(frozen=True)
class Config:
    """Sizes and repetitions of one benchmark run."""

    quick: bool
    throughput_sizes: tuple[int, ...]
    throughput_repeats: tuple[int, ...]
    parked_for_cancel: int
    cancel_samples: int
    cancel_repeats: int
    memory_runs: int
    deliver_populations: tuple[int, int]
    deliver_calls: int
    deliver_repeats: int


FULL = Config(
    quick=False,
    throughput_sizes=(10_000, 100_000),
    throughput_repeats=(5, 3),
    parked_for_cancel=10_000,
    cancel_samples=1_000,
    cancel_repeats=3,
    memory_runs=100_000,
    deliver_populations=(1_000, 100_000),
    deliver_calls=10_000,
    deliver_repeats=7,
)

QUICK = Config(
    quick=True,
    throughput_sizes=(1_000, 10_000),
    throughput_repeats=(5, 3),
    parked_for_cancel=10_000,
    cancel_samples=500,
    cancel_repeats=3,
    memory_runs=10_000,
    deliver_populations=(1_000, 10_000),
    deliver_calls=10_000,
    deliver_repeats=5,
)


@dataclass(frozen=True)
class Row:
    """One line of the summary table."""

    name: str
    ours: str
    bare: str
    ratio: str
    target: str
    passed: bool | None  # None: shown for information, no target


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)

    def add(
        self, name: str, ours: str, bare: str, ratio: str, target: str, passed: bool | None
    ) -> None:
        self.rows.append(Row(name, ours, bare, ratio, target, passed))


# ---------------------------------------------------------------------------- helpers


def verdict(passed: bool | None) -> str:
    if passed is None:
        return "-"
    return "PASS" if passed else "MISS"


def fmt_int(value: float) -> str:
    return f"{value:,.0f}"


def fmt_rate(value: float) -> str:
    return f"{value / 1000:,.1f}k/s"


def fmt_us(ns: float) -> str:
    return f"{ns / 1000:,.1f} us"


def fmt_count(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def percentile(sorted_samples: Sequence[int], q: float) -> int:
    """Nearest-rank percentile of already sorted samples (``q`` in 0..100)."""
    rank = max(1, math.ceil(q / 100 * len(sorted_samples)))
    return sorted_samples[rank - 1]


def fresh_section() -> None:
    gc.collect()


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """The first column left-aligned, the others right-aligned."""
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(len(header))]
    for cells in (header, *rows):
        aligned = [
            cell.rjust(width) if i else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        print("  " + "  ".join(aligned).rstrip())


class GcTimer:
    """Seconds the cyclic garbage collector ran while installed (via ``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started

    def __enter__(self) -> GcTimer:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc_info: object) -> None:
        gc.callbacks.remove(self._callback)


@dataclass(frozen=True)
class Timing:
    seconds: float
    gc_seconds: float

    @property
    def gc_share(self) -> str:
        return f"{100 * self.gc_seconds / self.seconds:.0f}%"


class Stopwatch:
    """Wall time and garbage-collector time of the block it wraps."""

    def __init__(self) -> None:
        self._collector = GcTimer()
        self._started = 0.0
        self.timing = Timing(math.nan, math.nan)

    def __enter__(self) -> Stopwatch:
        self._collector.__enter__()
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        elapsed = time.perf_counter() - self._started
        self._collector.__exit__()
        self.timing = Timing(elapsed, self._collector.seconds)


# ---------------------------------------------------------------------------- bodies


async def trivial_body(ctx: RunContext) -> int:
    return 1


async def parked_body(ctx: RunContext) -> None:
    await trio.sleep_forever()


async def bare_trivial() -> int:
    return 1


# ---------------------------------------------------------------------------- 1. throughput


async def ours_start_throughput(n: int) -> Timing:
    """N ``start`` calls plus waiting for every handle."""
    async with open_runtime() as rt:
        with Stopwatch() as watch:
            handles = [await rt.start(trivial_body) for _ in range(n)]
            for handle in handles:
                await handle.wait()
        assert handles[-1].done
    return watch.timing


async def ours_execute_throughput(n: int) -> Timing:
    """N concurrent tasks, each ``await rt.execute(body)``."""
    states: list[RunState | None] = [None] * n

    async with open_runtime() as rt:

        async def one(i: int) -> None:
            states[i] = await rt.execute(trivial_body)

        with Stopwatch() as watch:
            async with trio.open_nursery() as nursery:
                for i in range(n):
                    nursery.start_soon(one, i)
    assert states[-1] == RunState.Ended(EndCause.NaturalEnd())
    return watch.timing


async def bare_throughput(n: int) -> Timing:
    """N tasks, each in its own cancel scope, capturing and storing an outcome."""
    outcomes: list[outcome.Outcome[int] | None] = [None] * n

    async def one(i: int) -> None:
        with trio.CancelScope():
            result = await outcome.acapture(bare_trivial)
        outcomes[i] = result

    with Stopwatch() as watch:
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(one, i)
    last = outcomes[-1]
    assert last is not None
    assert last.unwrap() == 1
    return watch.timing


async def _floor(n: int, *, nursery_each: bool) -> Timing:
    """N awaited spawns (one checkpoint each, as ``start`` is), each task capturing and
    storing an outcome inside a nursery of its own (``nursery_each``) or a cancel scope,
    and one scheduler pass per task to read it (as ``wait()`` does)."""
    outcomes: list[outcome.Outcome[int] | None] = [None] * n

    async def in_nursery(i: int) -> None:
        async with trio.open_nursery():
            result = await outcome.acapture(bare_trivial)
        outcomes[i] = result

    async def in_scope(i: int) -> None:
        with trio.CancelScope():
            result = await outcome.acapture(bare_trivial)
        outcomes[i] = result

    one = in_nursery if nursery_each else in_scope
    with Stopwatch() as watch:
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(one, i)
                await trio.lowlevel.checkpoint()
            for _ in range(n):
                await trio.lowlevel.checkpoint()
    last = outcomes[-1]
    assert last is not None
    assert last.unwrap() == 1
    return watch.timing


async def floor_throughput(n: int) -> Timing:
    """The structural floor of a run, with none of the runtime's own work: awaited spawns,
    each task in a nursery of its own (the attempt's scope, where children would live),
    and a reading pass each (`_floor`)."""
    return await _floor(n, nursery_each=True)


async def scope_floor_throughput(n: int) -> Timing:
    """The floor with a cancel scope in place of each task's nursery: what the awaited
    spawn and the reading pass cost alone, as if an attempt had no nursery for its
    children."""
    return await _floor(n, nursery_each=False)


async def started_throughput(n: int) -> Timing:
    """N tasks spawned with Trio's own awaited spawn, ``await nursery.start(...)``, each in
    its own cancel scope (handed back as its ``started()`` value), capturing and storing an
    outcome: as ``await rt.start(body)`` returns once the run is under way."""
    outcomes: list[outcome.Outcome[int] | None] = [None] * n

    async def one(i: int, *, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)
            result = await outcome.acapture(bare_trivial)
        outcomes[i] = result

    with Stopwatch() as watch:
        async with trio.open_nursery() as nursery:
            for i in range(n):
                await nursery.start(one, i)
    last = outcomes[-1]
    assert last is not None
    assert last.unwrap() == 1
    return watch.timing


def timings_in_turns(
    fns: Sequence[Callable[[int], Awaitable[Timing]]], n: int, turns: int
) -> list[list[Timing]]:
    """``turns`` turns, each running every one of ``fns`` once (``fn(n)``, in its own
    ``trio.run``), one after the other; the timings of each fn, turn by turn. On a shared
    machine the speed moves by a factor of up to two from one minute to the next: a ratio
    is taken between timings of one turn, which saw the machine alike."""
    timings: list[list[Timing]] = [[] for _ in fns]
    for _ in range(turns):
        for fn, out in zip(fns, timings, strict=True):
            fresh_section()
            out.append(trio.run(fn, n))
    return timings


def best(timings: Sequence[Timing]) -> Timing:
    return min(timings, key=lambda t: t.seconds)


def median_ratio(ours: Sequence[Timing], base: Sequence[Timing]) -> float:
    """The median over the turns of ours/base runs per second (base seconds / ours)."""
    return statistics.median(b.seconds / o.seconds for o, b in zip(ours, base, strict=True))


def bench_throughput(cfg: Config, report: Report) -> None:
    print("\n== 1. Throughput: trivial runs, start -> committed Ended ==")
    print("   runs/s, best of the turns; ratios = ours/baseline runs per second (bigger is")
    print("   better), the median of the turns' ratios (each turn runs every row once, one after")
    print("   the other, so both sides of a ratio saw the machine alike)")
    print("   bare: a task in a cancel scope, capturing its outcome; target >= 0.50x of it")
    print("   floor: bare tasks in a nursery each, spawned with a checkpoint each and read with")
    print("   one scheduler pass each, as start and wait are: what any runtime with this design")
    print('   pays before doing any work (no target); "no nursery": the same with a cancel')
    print("   scope in place of each nursery (the awaited spawn and the reading pass alone)")
    print("   start(): Trio's own awaited spawn, await nursery.start(), a task in a cancel")
    print("   scope each (no target)")
    print("   gc = share of the timed wall time spent in the cyclic garbage collector")
    table: list[list[str]] = []
    for n, turns in zip(cfg.throughput_sizes, cfg.throughput_repeats, strict=True):
        bares, floors, scope_floors, starteds, starts, executes = timings_in_turns(
            (
                bare_throughput,
                floor_throughput,
                scope_floor_throughput,
                started_throughput,
                ours_start_throughput,
                ours_execute_throughput,
            ),
            n,
            turns,
        )
        bare, floor = best(bares), best(floors)
        for label, timings in (
            ("bare task in a cancel scope", bares),
            ("floor task", floors),
            ("floor task, no nursery", scope_floors),
            ("task by await nursery.start", starteds),
        ):
            one = best(timings)
            table.append(
                [
                    f"{fmt_count(n)} {label}",
                    fmt_int(n / one.seconds),
                    one.gc_share,
                    "-" if timings is bares else f"{median_ratio(timings, bares):.2f}x",
                    "-",
                    "-",
                    "-",
                ]
            )
        for label, timings in (("start", starts), ("execute", executes)):
            ours = best(timings)
            rate = n / ours.seconds
            to_bare = median_ratio(timings, bares)
            to_floor = median_ratio(timings, floors)
            to_started = median_ratio(timings, starteds)
            passed = to_bare >= 0.5
            table.append(
                [
                    f"{fmt_count(n)} runs, {label}",
                    fmt_int(rate),
                    ours.gc_share,
                    f"{to_bare:.2f}x",
                    f"{to_floor:.2f}x",
                    f"{to_started:.2f}x",
                    verdict(passed),
                ]
            )
            report.add(
                f"1. throughput {fmt_count(n)} ({label}) vs bare",
                fmt_rate(rate),
                fmt_rate(n / bare.seconds),
                f"{to_bare:.2f}x",
                ">= 0.50x",
                passed,
            )
            report.add(
                f"1. throughput {fmt_count(n)} ({label}) vs floor",
                fmt_rate(rate),
                fmt_rate(n / floor.seconds),
                f"{to_floor:.2f}x",
                "-",
                None,
            )
    print_table(
        ["", "runs or tasks/s", "gc", "vs bare", "vs floor", "vs start()", "result"],
        table,
    )


# ---------------------------------------------------------------------------- 2. cancel latency


@dataclass(frozen=True)
class Latencies:
    p50: int
    p99: int


def summarize(samples: list[int]) -> Latencies:
    samples.sort()
    return Latencies(percentile(samples, 50), percentile(samples, 99))


async def ours_cancel_latency(parked: int, samples: int) -> Latencies:
    """deliver(Cancel) -> ``wait()`` returns, one run at a time, among ``parked`` runs."""
    rng = random.Random(SEED)
    latencies: list[int] = []
    async with open_runtime() as rt:
        handles = [await rt.start(parked_body) for _ in range(parked)]
        await trio.testing.wait_all_tasks_blocked()
        for handle in rng.sample(handles, samples):
            command = LiveCommand.Cancel(handle.run_id)
            t0 = time.perf_counter_ns()
            rt.deliver(command)
            state = await handle.wait()
            latencies.append(time.perf_counter_ns() - t0)
            assert isinstance(state, RunState.Ended)
            assert isinstance(state.cause, EndCause.Cancelled)
    return summarize(latencies)


@dataclass
class _Probe:
    """Where a cancelled bare task reports the moment it left its scope."""

    exited_ns: int = 0
    done: trio.Event = field(default_factory=trio.Event)


async def bare_cancel_latency(parked: int, samples: int) -> tuple[Latencies, Latencies]:
    """``scope.cancel()`` -> the task leaves its scope (and -> back in the cancelling task)."""
    rng = random.Random(SEED)
    probe = _Probe()
    to_exit: list[int] = []
    to_waiter: list[int] = []

    async def parked_task(task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)
            await trio.sleep_forever()
        probe.exited_ns = time.perf_counter_ns()
        probe.done.set()

    async with trio.open_nursery() as nursery:
        scopes = [await nursery.start(parked_task) for _ in range(parked)]
        await trio.testing.wait_all_tasks_blocked()
        for scope in rng.sample(scopes, samples):
            probe.done = trio.Event()
            t0 = time.perf_counter_ns()
            scope.cancel()
            await probe.done.wait()
            t1 = time.perf_counter_ns()
            to_exit.append(probe.exited_ns - t0)
            to_waiter.append(t1 - t0)
        nursery.cancel_scope.cancel()
    return summarize(to_exit), summarize(to_waiter)


async def floor_cancel_latency(parked: int, samples: int) -> Latencies:
    """``nursery.cancel_scope.cancel()`` -> back in the cancelling task, each task parked in
    a nursery of its own and setting the event inside it."""
    rng = random.Random(SEED)
    probe = _Probe()
    to_waiter: list[int] = []

    async def parked_task(task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        async with trio.open_nursery() as nursery:
            task_status.started(nursery.cancel_scope)
            try:
                await trio.sleep_forever()
            finally:
                probe.done.set()

    async with trio.open_nursery() as nursery:
        scopes = [await nursery.start(parked_task) for _ in range(parked)]
        await trio.testing.wait_all_tasks_blocked()
        for scope in rng.sample(scopes, samples):
            probe.done = trio.Event()
            t0 = time.perf_counter_ns()
            scope.cancel()
            await probe.done.wait()
            to_waiter.append(time.perf_counter_ns() - t0)
        nursery.cancel_scope.cancel()
    return summarize(to_waiter)


def bench_cancel_latency(cfg: Config, report: Report) -> None:
    parked, samples = cfg.parked_for_cancel, cfg.cancel_samples
    print(
        f"\n== 2. Cancel latency: {samples} cancels, one at a time, among {fmt_count(parked)}"
        " parked =="
    )
    print("   best p50 / p99 of the repeats; ratio = ours/bare (times slower), the median of")
    print("   the repeats' ratios (each repeat runs ours, then bare); target p50 <= 2x of the")
    print("   bare scope exit")
    ratios50: list[float] = []
    ratios99: list[float] = []
    back50: list[float] = []
    floor50: list[float] = []
    floor_best = Latencies(2**62, 2**62)
    ours_best = Latencies(2**62, 2**62)
    exit_best = Latencies(2**62, 2**62)
    waiter_best = Latencies(2**62, 2**62)
    for _ in range(cfg.cancel_repeats):
        fresh_section()
        ours = trio.run(ours_cancel_latency, parked, samples)
        fresh_section()
        to_exit, to_waiter = trio.run(bare_cancel_latency, parked, samples)
        fresh_section()
        floor = trio.run(floor_cancel_latency, parked, samples)
        floor50.append(ours.p50 / floor.p50)
        floor_best = Latencies(min(floor_best.p50, floor.p50), min(floor_best.p99, floor.p99))
        ratios50.append(ours.p50 / to_exit.p50)
        ratios99.append(ours.p99 / to_exit.p99)
        back50.append(ours.p50 / to_waiter.p50)
        ours_best = Latencies(min(ours_best.p50, ours.p50), min(ours_best.p99, ours.p99))
        exit_best = Latencies(min(exit_best.p50, to_exit.p50), min(exit_best.p99, to_exit.p99))
        waiter_best = Latencies(
            min(waiter_best.p50, to_waiter.p50), min(waiter_best.p99, to_waiter.p99)
        )
    r50 = statistics.median(ratios50)
    r99 = statistics.median(ratios99)
    rback = statistics.median(back50)
    rfloor = statistics.median(floor50)
    print_table(
        ["", "p50", "p99"],
        [
            ["bare: cancel -> task leaves scope", fmt_us(exit_best.p50), fmt_us(exit_best.p99)],
            [
                "bare: ... -> back in the canceller",
                fmt_us(waiter_best.p50),
                fmt_us(waiter_best.p99),
            ],
            [
                "floor: a nursery each, back in the canceller",
                fmt_us(floor_best.p50),
                fmt_us(floor_best.p99),
            ],
            ["ours: deliver -> wait() returns", fmt_us(ours_best.p50), fmt_us(ours_best.p99)],
            ["ratio ours/bare (scope exit)", f"{r50:.2f}x", f"{r99:.2f}x"],
            ["ratio ours/bare (back in the canceller)", f"{rback:.2f}x", "-"],
            ["ratio ours/floor (back in the canceller)", f"{rfloor:.2f}x", "-"],
            ["result", verdict(r50 <= 2), "-"],
        ],
    )
    report.add(
        f"2. cancel latency p50 ({fmt_count(parked)} parked)",
        fmt_us(ours_best.p50),
        fmt_us(exit_best.p50),
        f"{r50:.2f}x",
        "<= 2.00x",
        r50 <= 2,
    )
    report.add(
        f"2. cancel latency p50, vs back in the canceller ({fmt_count(parked)} parked)",
        fmt_us(ours_best.p50),
        fmt_us(waiter_best.p50),
        f"{rback:.2f}x",
        "-",
        None,
    )
    report.add(
        f"2. cancel latency p50, vs the floor, a nursery each ({fmt_count(parked)} parked)",
        fmt_us(ours_best.p50),
        fmt_us(floor_best.p50),
        f"{rfloor:.2f}x",
        "-",
        None,
    )
    report.add(
        f"2. cancel latency p99 ({fmt_count(parked)} parked)",
        fmt_us(ours_best.p99),
        fmt_us(exit_best.p99),
        f"{r99:.2f}x",
        "-",
        None,
    )


# ---------------------------------------------------------------------------- 3. memory


@dataclass(frozen=True)
class Memory:
    per_item: float
    top_sites: list[tuple[str, float]]


def _top_sites(snapshot: tracemalloc.Snapshot, n: int, count: int) -> list[tuple[str, float]]:
    root = str(Path(__file__).resolve().parent.parent) + "/"
    sites: list[tuple[str, float]] = []
    for stat in snapshot.statistics("lineno")[:count]:
        frame = stat.traceback[0]
        filename = frame.filename
        if filename.startswith(root):
            filename = filename[len(root) :]
        elif "site-packages/" in filename:
            filename = filename.split("site-packages/", 1)[1]
        sites.append((f"{filename}:{frame.lineno}", stat.size / n))
    return sites


async def ours_memory(n: int) -> Memory:
    """Traced bytes per parked run (everything allocated to start and park it)."""
    handles: list[RunHandle | None] = [None] * n
    async with open_runtime() as rt:
        await trio.testing.wait_all_tasks_blocked()
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for i in range(n):
                handles[i] = await rt.start(parked_body)
            await trio.testing.wait_all_tasks_blocked()
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
            sites = _top_sites(tracemalloc.take_snapshot(), n, 8)
        finally:
            tracemalloc.stop()
        assert rt.statistics().active_attempts == n
    return Memory((after - before) / n, sites)


async def bare_memory(n: int) -> Memory:
    """Traced bytes per bare task parked in its own cancel scope."""
    scopes: list[trio.CancelScope | None] = [None] * n

    async def parked_task(i: int) -> None:
        with trio.CancelScope() as scope:
            scopes[i] = scope
            await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        await trio.testing.wait_all_tasks_blocked()
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for i in range(n):
                nursery.start_soon(parked_task, i)
            await trio.testing.wait_all_tasks_blocked()
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
            sites = _top_sites(tracemalloc.take_snapshot(), n, 5)
        finally:
            tracemalloc.stop()
        assert all(scope is not None for scope in scopes)
        nursery.cancel_scope.cancel()
    return Memory((after - before) / n, sites)


def bench_memory(cfg: Config, report: Report) -> None:
    n = cfg.memory_runs
    print(f"\n== 3. Memory per parked run at {fmt_count(n)} (tracemalloc, after gc.collect()) ==")
    print("   bytes per run/task; ratio = ours/bare (times larger); target <= 3x")
    fresh_section()
    bare = trio.run(bare_memory, n)
    fresh_section()
    ours = trio.run(ours_memory, n)
    ratio = ours.per_item / bare.per_item
    print_table(
        ["", "bytes"],
        [
            ["bare task in its own CancelScope", fmt_int(bare.per_item)],
            ["ours parked run", fmt_int(ours.per_item)],
            ["ratio ours/bare", f"{ratio:.2f}x"],
            ["result", verdict(ratio <= 3)],
        ],
    )
    print("   largest allocation sites of ours (bytes per run, by line):")
    for site, size in ours.top_sites:
        print(f"     {size:8,.0f}  {site}")
    report.add(
        f"3. memory per parked run ({fmt_count(n)})",
        f"{fmt_int(ours.per_item)} B",
        f"{fmt_int(bare.per_item)} B",
        f"{ratio:.2f}x",
        "<= 3.00x",
        ratio <= 3,
    )


# ---------------------------------------------------------------------------- 4. deliver cost


def _time_calls(call: Callable[[], None], repeats: int) -> int:
    best = 2**62
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        call()
        best = min(best, time.perf_counter_ns() - t0)
    return best


@dataclass(frozen=True)
class DeliverCost:
    """ns per call: targets spread over the whole population, and within its first ``hot``."""

    spread: float
    hot: float


def _targets(rng: random.Random, run_ids: Sequence[str], among: int, calls: int) -> list[str]:
    return [run_ids[rng.randrange(among)] for _ in range(calls)]


async def ours_deliver_cost(population: int, hot: int, calls: int, repeats: int) -> DeliverCost:
    """ns per ``deliver(Wake)`` to a random one of ``population`` parked runs."""
    rng = random.Random(SEED)
    async with open_runtime() as rt:
        run_ids = [(await rt.start(parked_body)).run_id for _ in range(population)]
        await trio.testing.wait_all_tasks_blocked()
        deliver = rt.deliver
        costs: list[float] = []
        for among in (population, hot):
            commands: list[LiveCommand] = [
                LiveCommand.Wake(r) for r in _targets(rng, run_ids, among, calls)
            ]

            def burst(commands: list[LiveCommand] = commands) -> None:
                for command in commands:
                    deliver(command)

            gc.collect()
            costs.append(_time_calls(burst, repeats) / calls)
        assert rt.statistics().active_attempts == population
    return DeliverCost(*costs)


@dataclass
class _BareEntry:
    scope: trio.CancelScope
    woken: bool = False


async def bare_deliver_cost(population: int, hot: int, calls: int, repeats: int) -> DeliverCost:
    """ns per by-id lookup of a parked task's record plus a flag set."""
    rng = random.Random(SEED)
    entries: dict[str, _BareEntry] = {}

    async def parked_task(run_id: str, task_status: trio.TaskStatus[None]) -> None:
        with trio.CancelScope() as scope:
            entries[run_id] = _BareEntry(scope)
            task_status.started()
            await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        run_ids = [rng.randbytes(12).hex() for _ in range(population)]
        for run_id in run_ids:
            await nursery.start(parked_task, run_id)
        await trio.testing.wait_all_tasks_blocked()
        costs: list[float] = []
        for among in (population, hot):
            targets = _targets(rng, run_ids, among, calls)

            def burst(targets: list[str] = targets) -> None:
                for run_id in targets:
                    entries[run_id].woken = True

            gc.collect()
            costs.append(_time_calls(burst, repeats) / calls)
        nursery.cancel_scope.cancel()
    return DeliverCost(*costs)


def bench_deliver(cfg: Config, report: Report) -> None:
    small, large = cfg.deliver_populations
    calls, repeats = cfg.deliver_calls, cfg.deliver_repeats
    print(
        f"\n== 4. deliver(Wake) cost: {fmt_count(calls)} calls to random parked runs,"
        f" {fmt_count(small)} vs {fmt_count(large)} active =="
    )
    print(
        f"   ns per call, best of {repeats};"
        f" ratio = {fmt_count(large)}/{fmt_count(small)}; target < 1.5 (flat)"
    )
    print(
        f"   'hot' rows aim the calls at {fmt_count(small)} of the runs only (the same working"
        " set at both sizes):\n   the lookup itself, without the CPU-cache misses of a"
        " larger population"
    )
    results: dict[str, tuple[DeliverCost, DeliverCost]] = {}
    for label, fn in (("bare", bare_deliver_cost), ("ours", ours_deliver_cost)):
        fresh_section()
        at_small = trio.run(fn, small, small, calls, repeats)
        fresh_section()
        at_large = trio.run(fn, large, small, calls, repeats)
        results[label] = (at_small, at_large)
    rows: list[list[str]] = []
    ratios: dict[str, float] = {}
    for label, name in (("bare", "bare: dict lookup + flag"), ("ours", "ours: rt.deliver(Wake)")):
        at_small, at_large = results[label]
        for kind, before, after in (
            ("", at_small.spread, at_large.spread),
            (", hot", at_small.spread, at_large.hot),
        ):
            ratio = after / before
            ratios[label + kind] = ratio
            scored = label == "ours" and not kind
            rows.append(
                [
                    name + kind,
                    f"{before:,.0f} ns",
                    f"{after:,.0f} ns",
                    f"{ratio:.2f}x",
                    verdict(ratio < 1.5) if scored else "-",
                ]
            )
    ours_small, ours_large = results["ours"]
    bare_small, bare_large = results["bare"]
    rows.append(
        [
            "ours/bare",
            f"{ours_small.spread / bare_small.spread:.1f}x",
            f"{ours_large.spread / bare_large.spread:.1f}x",
            "",
            "",
        ]
    )
    print_table(
        ["", f"{fmt_count(small)} active", f"{fmt_count(large)} active", "ratio", "result"], rows
    )
    report.add(
        f"4. deliver ns, {fmt_count(large)} vs {fmt_count(small)} active",
        f"{ours_small.spread:,.0f} -> {ours_large.spread:,.0f} ns",
        f"{bare_small.spread:,.0f} -> {bare_large.spread:,.0f} ns",
        f"{ratios['ours']:.2f}x",
        "< 1.50x",
        ratios["ours"] < 1.5,
    )
    report.add(
        f"4. deliver ns, same, {fmt_count(small)} hot targets",
        f"{ours_small.spread:,.0f} -> {ours_large.hot:,.0f} ns",
        f"{bare_small.spread:,.0f} -> {bare_large.hot:,.0f} ns",
        f"{ratios['ours, hot']:.2f}x",
        "-",
        None,
    )


# ---------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smaller populations, fewer repeats")
    parser.add_argument(
        "--only",
        type=int,
        choices=range(1, 5),
        action="append",
        metavar="N",
        help="run only benchmark N (1-4); repeat to run several",
    )
    args = parser.parse_args(argv)
    chosen = set(args.only or range(1, 5))
    cfg = QUICK if args.quick else FULL
    command = shlex.join([sys.executable, *sys.argv])
    print(
        f"awaken_trio vs bare Trio {trio.__version__} on Python {sys.version.split()[0]}"
        f" ({'quick' if cfg.quick else 'full'} run)"
    )
    report = Report()
    started = time.perf_counter()
    sections = (bench_throughput, bench_cancel_latency, bench_memory, bench_deliver)
    for number, section in enumerate(sections, start=1):
        if number in chosen:
            section(cfg, report)
    total = time.perf_counter() - started

    print("\n== Summary ==")
    print_table(
        ["benchmark", "ours", "bare", "ratio", "target", "result"],
        [[r.name, r.ours, r.bare, r.ratio, r.target, verdict(r.passed)] for r in report.rows],
    )
    passes = sum(r.passed is True for r in report.rows)
    misses = sum(r.passed is False for r in report.rows)
    print(f"\n{passes} PASS, {misses} MISS; {total:.0f} s")
    print(f"command: {command}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
