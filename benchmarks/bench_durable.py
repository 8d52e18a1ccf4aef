"""Durable runs on SQLite, measured against baselines run on the same machine.

Run from the repository root::

    python benchmarks/bench_durable.py            # about two minutes
    python benchmarks/bench_durable.py --quick    # smaller sizes
    python benchmarks/bench_durable.py --only 3   # one benchmark (1-5; repeatable)

1. ``start`` -> committed ``Ended`` throughput on SQLite (``synchronous=FULL``, the
   default, and ``normal``) against the memory store, in one process: N concurrent
   ``execute`` calls of a one-step body (one ``boundary`` with progress, then a result), so
   the supervisor groups every waiting commit into one transaction. Ratio = SQLite/memory
   runs per second. Target: >= 0.3x with ``synchronous=FULL``.
2. ``submit`` -> claimed -> ``Ended`` with 1 and 2 worker processes: this process submits N
   runs of the same body to a SQLite file, concurrently, and waits for every end; the
   workers (``tests/multiprocess/worker_process.py``, ``concurrency=64``) serve it. Runs
   per second.
3. Side by side with DBOS (the ``dbos`` package, SQLite system database): the same one-step
   workflow, run by awaken_trio (twice, on fresh files: its best is kept), then by DBOS in
   the same process (synchronous workflows, one after another, and async ones gathered: its
   best is kept); three such rounds (one with ``--quick``), each in a fresh process, and
   the median ratio. awaken_trio goes first because DBOS leaves some 160,000 objects on the
   heap after ``DBOS.destroy()``, and every full collection of Python's cyclic garbage
   collector walks them: measured after DBOS, any allocating code pays for DBOS's heap.
   Ratio = awaken_trio/DBOS runs per second. Target: >= 30x. Needs ``pip install dbos``
   (the ``bench`` extra); skipped with a message otherwise.
4. Cross-process cancel: a worker process runs parked runs; this process calls
   ``cancel_run`` (at a random moment of the worker's poll interval) and the owner's body
   reports the moment it observes the cancellation (a line on its stdout, stamped with
   ``time.time()``). p50 and p99 of that delay, at the default ``poll`` (0.05 s). Target:
   p99 < 100 ms.
5. A growing file: rounds of 1,000 concurrent one-step runs into one SQLite file (100 rounds,
   30 with ``--quick``), once with the run ids the runtime makes up (a millisecond timestamp
   then random bits, so they grow in creation order) and once with ids of random bits only
   (given as ``run_id=``: the baseline). Runs per second over the first and the last ten
   rounds of each; ratio = time-ordered/random over the last ten. No target: it shows why
   run ids lead with a timestamp (a new random key lands on a random page of every index
   over it, and that costs more as the file grows).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import trio
from _harness import ROOT

from awaken_trio import EndCause, RunContext, RunState, open_runtime

WORKER = ROOT / "tests" / "multiprocess" / "worker_process.py"
DONE = RunState.Ended(EndCause.NaturalEnd())


async def one_step(ctx: RunContext) -> object:
    await ctx.boundary({"step": 1})
    return {"done": ctx.input}


# ---------------------------------------------------------------------------- 1. throughput


async def _execute_many(url: str, n: int) -> float:
    async with open_runtime(url) as runtime:
        states: list[RunState] = []

        async def one(i: int) -> None:
            states.append(await runtime.execute(one_step, input=i))

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(one, i)
        elapsed = time.perf_counter() - started
    assert states.count(DONE) == n, states[:3]
    return n / elapsed


def bench_throughput(n: int, report: list[str]) -> None:
    print(f"\n== 1. start -> Ended, {n} concurrent one-step runs ==")
    memory = trio.run(_execute_many, "memory://", n)
    rows: list[tuple[str, float, float | None]] = [("memory", memory, None)]
    for sync in ("full", "normal"):
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{tmp}/runs.db?synchronous={sync}"
            rate = trio.run(_execute_many, url, n)
        rows.append((f"sqlite synchronous={sync}", rate, rate / memory))
    for label, rate, ratio in rows:
        shown = "-" if ratio is None else f"{ratio:.2f}x"
        print(f"  {label:28s} {rate:10,.0f} runs/s  {shown}")
    full = rows[1][2]
    assert full is not None
    report.append(
        f"1. sqlite (FULL) / memory: {full:.2f}x (target >= 0.30x) "
        f"{'PASS' if full >= 0.3 else 'MISS'}"
    )


# ---------------------------------------------------------------------------- 2. workers


def _start_worker(url: str, name: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, str(WORKER), url, "--name", name, "--concurrency", "64"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("ready"), line
    return process


async def _submit_and_wait(url: str, n: int) -> float:
    async with open_runtime(url) as runtime:
        states: list[RunState] = []

        async def one() -> None:
            handle = await runtime.submit("stepper", input={"steps": 1, "delay": 0})
            states.append(await handle.wait())

        # Submitted concurrently, so group commit takes the submissions together: one at a
        # time, each would wait for its own fsync, and the submitter would be what is timed.
        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(one)
        elapsed = time.perf_counter() - started
    assert states.count(DONE) == n, states[:3]
    return n / elapsed


def bench_workers(n: int, report: list[str]) -> None:
    print(f"\n== 2. submit -> claimed -> Ended, {n} runs, worker processes ==")
    for workers in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{tmp}/runs.db"
            trio.run(_touch, url)
            processes = [_start_worker(url, f"w{i}") for i in range(workers)]
            try:
                rate = trio.run(_submit_and_wait, url, n)
            finally:
                for process in processes:
                    process.kill()
                    process.wait()
        print(f"  {workers} worker(s)  {rate:10,.0f} runs/s")
        report.append(f"2. submit -> Ended with {workers} worker(s): {rate:,.0f} runs/s")


async def _touch(url: str) -> None:
    async with open_runtime(url):
        pass


# ---------------------------------------------------------------------------- 3. DBOS


def _dbos_rate(n: int, directory: str) -> float | None:
    try:
        dbos: Any = importlib.import_module("dbos")
    except ImportError:
        return None
    logging.getLogger("dbos").setLevel(logging.WARNING)
    DBOS = dbos.DBOS
    DBOS(config={"name": "bench", "system_database_url": f"sqlite:///{directory}/dbos.db"})

    def step(x: int) -> int:
        return x + 1

    async def astep(x: int) -> int:
        return x + 1

    durable_step = DBOS.step()(step)
    durable_astep = DBOS.step()(astep)

    def workflow(x: int) -> Any:
        return durable_step(x)

    async def aworkflow(x: int) -> Any:
        return await durable_astep(x)

    durable_workflow = DBOS.workflow()(workflow)
    durable_aworkflow = DBOS.workflow()(aworkflow)
    DBOS.launch()
    try:
        started = time.perf_counter()
        for i in range(n):
            durable_workflow(i)
        sequential = n / (time.perf_counter() - started)

        async def gathered() -> float:
            t = time.perf_counter()
            await asyncio.gather(*(durable_aworkflow(i) for i in range(n)))
            return n / (time.perf_counter() - t)

        concurrent = asyncio.run(gathered())
    finally:
        DBOS.destroy()
    return max(sequential, concurrent)


def _dbos_round(n: int) -> None:
    """One round of benchmark 3, in a process of its own: awaken_trio, then DBOS; prints
    their runs per second (DBOS's as "-" if it is not installed) on the last line."""
    logging.disable(logging.INFO)  # DBOS logs every launch and shutdown at INFO
    with tempfile.TemporaryDirectory() as tmp:
        ours = max(trio.run(_execute_many, f"sqlite:///{tmp}/runs{i}.db", n) for i in range(2))
        dbos = _dbos_rate(n, tmp)
    print(f"{ours} {'-' if dbos is None else dbos}")


def bench_dbos(n: int, rounds: int, report: list[str]) -> None:
    print(f"\n== 3. one-step workflows on SQLite: DBOS vs awaken_trio ({n} runs) ==")
    ratios: list[float] = []
    for _ in range(rounds):
        # Each round in a fresh process: both sides start from the same clean heap, and
        # machine noise (fsync times above all) is sampled more than once.
        done = subprocess.run(
            [sys.executable, __file__, "--dbos-round", str(n)],
            capture_output=True,
            text=True,
            check=True,
        )
        ours_text, dbos_text = done.stdout.split("\n")[-2].split()
        if dbos_text == "-":
            print("  skipped: the dbos package is not installed (pip install -e '.[bench]')")
            report.append("3. DBOS comparison: skipped (dbos not installed)")
            return
        ours, dbos = float(ours_text), float(dbos_text)
        ratios.append(ours / dbos)
        print(
            f"  DBOS {dbos:6,.0f} runs/s (its best of sequential and gathered)"
            f"   awaken_trio {ours:7,.0f} runs/s (its best of two)   {ours / dbos:5.1f}x"
        )
    ratio = statistics.median(ratios)
    print(f"  median of {rounds} rounds: {ratio:.1f}x")
    report.append(
        f"3. awaken_trio / DBOS, median of {rounds} rounds: {ratio:.1f}x (target >= 30x)"
        f" {'PASS' if ratio >= 30 else 'MISS'}"
    )


# ---------------------------------------------------------------------------- 4. cancel


async def _cancel_latencies(url: str, worker: subprocess.Popen[str], samples: int) -> list[float]:
    assert worker.stdout is not None
    delays: list[float] = []
    rng = random.Random(7)
    async with open_runtime(url, poll=0.05) as runtime:
        for i in range(samples):
            handle = await runtime.submit("reporter", run_id=f"c{i}")
            # Wait until the worker's body runs (it says so), then cancel from here.
            line = await trio.to_thread.run_sync(worker.stdout.readline)
            assert line.startswith(f"running c{i}"), line
            # The worker started the run right after one of its polls: cancelling at once
            # would always land a whole poll before the next. A random pause samples the
            # whole interval, as requests arriving at any time do.
            await trio.sleep(rng.uniform(0, 0.05))
            asked = time.time()
            await runtime.cancel_run(handle.run_id)
            line = await trio.to_thread.run_sync(worker.stdout.readline)
            run_id, observed = line.split()[1:3]
            assert run_id == f"c{i}", line
            delays.append(float(observed) - asked)
    return delays


def bench_cancel(samples: int, report: list[str]) -> None:
    print(f"\n== 4. cross-process cancel_run -> the owner's body sees it ({samples} runs) ==")
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/runs.db"
        trio.run(_touch, url)
        worker = subprocess.Popen(
            [sys.executable, str(WORKER), url, "--poll", "0.05", "--lease", "5"],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        try:
            assert worker.stdout is not None
            assert worker.stdout.readline().startswith("ready")
            delays = trio.run(_cancel_latencies, url, worker, samples)
        finally:
            worker.kill()
            worker.wait()
    delays.sort()
    p50 = statistics.median(delays) * 1000
    p99 = delays[min(len(delays) - 1, int(len(delays) * 0.99))] * 1000
    print(f"  p50 {p50:6.1f} ms   p99 {p99:6.1f} ms   (poll 50 ms)")
    report.append(
        f"4. cross-process cancel p50 {p50:.1f} ms, p99 {p99:.1f} ms (target p99 < 100 ms) "
        f"{'PASS' if p99 < 100 else 'MISS'}"
    )


# ---------------------------------------------------------------------------- 5. growth


async def _rounds(url: str, rounds: int, random_ids: bool) -> list[float]:
    rates: list[float] = []
    async with open_runtime(url) as runtime:

        async def one(i: int) -> None:
            run_id = os.urandom(12).hex() if random_ids else None
            state = await runtime.execute(one_step, input=i, run_id=run_id)
            assert state == DONE, state

        for _ in range(rounds):
            started = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for i in range(1_000):
                    nursery.start_soon(one, i)
            rates.append(1_000 / (time.perf_counter() - started))
    return rates


def bench_growth(rounds: int, report: list[str]) -> None:
    print(f"\n== 5. a growing file: {rounds} rounds of 1,000 one-step runs ==")
    last: dict[bool, float] = {}
    for random_ids in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            rates = trio.run(_rounds, f"sqlite:///{tmp}/runs.db", rounds, random_ids)
        first, last[random_ids] = statistics.median(rates[:10]), statistics.median(rates[-10:])
        label = "random ids" if random_ids else "time-ordered ids"
        print(f"  {label:18s} first ten {first:8,.0f} runs/s   last ten {last[random_ids]:8,.0f}")
    ratio = last[False] / last[True]
    print(f"  time-ordered / random over the last ten rounds: {ratio:.2f}x")
    report.append(f"5. after {rounds}k runs in the file, time-ordered / random ids: {ratio:.2f}x")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", type=int, action="append", choices=[1, 2, 3, 4, 5])
    parser.add_argument("--dbos-round", type=int, metavar="N", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.dbos_round is not None:
        _dbos_round(args.dbos_round)
        return 0
    chosen = set(args.only or [1, 2, 3, 4, 5])
    report: list[str] = []
    if 1 in chosen:
        bench_throughput(2_000 if args.quick else 10_000, report)
    if 2 in chosen:
        bench_workers(500 if args.quick else 2_000, report)
    if 3 in chosen:
        bench_dbos(300 if args.quick else 1_000, 1 if args.quick else 3, report)
    if 4 in chosen:
        bench_cancel(50 if args.quick else 200, report)
    if 5 in chosen:
        bench_growth(30 if args.quick else 100, report)
    print("\n== Summary ==")
    for line in report:
        print("  " + line)
    print(f"command: {' '.join([sys.executable, *sys.argv])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
