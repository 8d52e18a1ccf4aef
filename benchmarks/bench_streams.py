"""Streams (DESIGN §3.9): what sending costs a body, how soon readers see a chunk, and what a
streaming run costs the runs beside it.

Run from the repository root::

    python benchmarks/bench_streams.py            # every part: about 2 minutes on 2 cores
    python benchmarks/bench_streams.py --only 1   # one part (1-4; repeatable)
    python benchmarks/bench_streams.py --quick    # smaller sizes

Every ratio is the median of three turns; each turn runs the rows it compares one after the
other, so both saw the machine alike.

1. Sending. A body that awaits a checkpoint 100k times (standing for the next token from
   the network) against the same body sending a small str chunk after each
   (``ctx.stream().send(f"t{i}")``), from ``start`` to the committed end (every chunk
   written), on the memory store and on SQLite (``synchronous="full"``). Ratio =
   sending/none. Target: < 2.
2. An in-process reader. A body sends a chunk and flushes, 1000 times (a millisecond
   apart); a reader task of the same runtime follows the stream. The latency runs from the
   return of ``flush()`` (the chunk is committed) to the reader's ``async for`` handing
   the chunk out (0 when the reader had it first: both are woken by the commit's step).
   p50 and p99, memory and SQLite. Target: p50 < 1 ms.
3. A reader in another process. A process runs a body that sends a chunk and flushes, 300
   times (20 ms apart), printing the time each flush returned (the chunk is committed);
   this process follows the stream with a runtime of its own. The latency runs from the
   flush's return to the reader handing the chunk out (wall clocks of one machine): the
   store's signal and the read.
   SQLite (the relay's look at the file, within ``poll``) and PostgreSQL (the commit's
   ``NOTIFY``; needs the PostgreSQL binaries, else skipped). p50 and p99. Target:
   PostgreSQL p99 < 20 ms.
4. Runs beside a stream. ``execute`` of trivial runs (8 tasks at once, 2000 runs) on SQLite,
   with and without one run beside them that sends a chunk every millisecond (far more than
   a model's tokens). Ratio = runs/s with / runs/s without. Target: >= 0.8.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import trio
from _harness import ROOT, percentile

from awaken_trio import RunContext, Runtime, UnknownRun, open_runtime

TURNS = 3


def _stores(tmp: Path) -> dict[str, Callable[[str], Any]]:
    return {
        "memory": lambda name: "memory://",
        "sqlite": lambda name: f"sqlite:///{tmp / name}.db",
    }


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


# ---------------------------------------------------------------------------- 1. sending


async def _body_time(store: str, count: int, send: bool) -> float:
    async def body(ctx: RunContext) -> object:
        out = ctx.stream() if send else None
        checkpoint = trio.lowlevel.checkpoint
        for i in range(count):
            await checkpoint()
            if out is not None:
                out.send(f"t{i}")
        return None

    async with open_runtime(store) as runtime:
        began = time.perf_counter()
        handle = await runtime.start(body)
        await handle.wait()
        took = time.perf_counter() - began
        if send:
            last = [c async for c in runtime.read_stream(handle.run_id, after=count - 1)]
            assert [c.kind for c in last] == ["data", "end"], last
    return took


def bench_sending(tmp: Path, count: int, results: list[str]) -> None:
    print(f"\n1. A body awaiting {count} checkpoints, sending a chunk after each or not")
    for name, url in _stores(tmp).items():
        ratios, nones, sends = [], [], []
        for turn in range(TURNS):
            order = [False, True] if turn % 2 == 0 else [True, False]  # alternating
            took = {
                send: trio.run(_body_time, url(f"send-{send}-{turn}"), count, send)
                for send in order
            }
            none, sent = took[False], took[True]
            nones.append(none)
            sends.append(sent)
            ratios.append(sent / none)
        ratio = statistics.median(ratios)
        verdict = "PASS" if ratio < 2 else "MISS"
        line = (
            f"   {name:<7} none {statistics.median(nones):.3f} s, sending"
            f" {statistics.median(sends):.3f} s: sending/none {ratio:.2f}x (target < 2) {verdict}"
        )
        print(line)
        results.append(f"1 {name}: sending/none {ratio:.2f}x (< 2) {verdict}")


# ---------------------------------------------------------------------------- 2. in process


async def _in_process(store: str, count: int) -> list[float]:
    flushed: dict[int, float] = {}
    seen: dict[int, float] = {}

    async def body(ctx: RunContext) -> object:
        out = ctx.stream()
        for i in range(count):
            out.send(i)
            await out.flush()
            flushed[i] = time.perf_counter()
            await trio.sleep(0.001)
        return None

    async with open_runtime(store) as runtime:
        handle = await runtime.start(body)
        async for chunk in runtime.read_stream(handle.run_id):
            if chunk.kind == "data":
                seen[chunk.value] = time.perf_counter()
        await handle.wait()
    return [max(0.0, seen[i] - flushed[i]) for i in range(count)]


def bench_in_process(tmp: Path, count: int, results: list[str]) -> None:
    print(f"\n2. An in-process reader: from flush() returning to the reader ({count} chunks)")
    for name, url in _stores(tmp).items():
        p50s, p99s = [], []
        for turn in range(TURNS):
            latencies = trio.run(_in_process, url(f"reader-{turn}"), count)
            p50s.append(percentile(latencies, 0.50))
            p99s.append(percentile(latencies, 0.99))
        p50, p99 = statistics.median(p50s), statistics.median(p99s)
        verdict = "PASS" if p50 < 0.001 else "MISS"
        print(f"   {name:<7} p50 {_ms(p50)}, p99 {_ms(p99)} (target p50 < 1 ms) {verdict}")
        results.append(f"2 {name}: p50 {_ms(p50)} (< 1 ms) {verdict}, p99 {_ms(p99)}")


# ---------------------------------------------------------------------------- 3. elsewhere

_WRITER = """
import sys, time, trio
from awaken_trio import open_runtime

async def body(ctx):
    out = ctx.stream()
    for i in range(int(sys.argv[2])):
        out.send(i)
        await out.flush()
        print(i, time.time(), flush=True)  # committed: when the chunk's flush returned
        await trio.sleep(0.02)
    return None

async def main():
    async with open_runtime(sys.argv[1], poll=0.05) as runtime:
        await runtime.execute(body, run_id="streamer")

trio.run(main)
"""


async def _elsewhere(url: str, count: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", _WRITER, url, str(count)]
    seen: dict[int, float] = {}
    done: list[subprocess.CompletedProcess[bytes]] = []

    async def write() -> None:
        done.append(await trio.run_process(command, env=env, capture_stdout=True))

    async with open_runtime(url, poll=0.05) as runtime, trio.open_nursery() as nursery:
        nursery.start_soon(write)
        while True:  # the writer's run is created by its own runtime
            try:
                await runtime.record("streamer")
                break
            except UnknownRun:
                await trio.sleep(0.01)
        async for chunk in runtime.read_stream("streamer"):
            if chunk.kind == "data":
                seen[chunk.value] = time.time()
    committed = {
        int(i): float(at)
        for i, at in (line.split() for line in done[0].stdout.decode().splitlines())
    }
    return [max(0.0, seen[i] - committed[i]) for i in range(count)]


def bench_elsewhere(tmp: Path, count: int, results: list[str]) -> None:
    print(f"\n3. A reader in another process: from flush() returning to the reader ({count})")
    urls: list[tuple[str, Callable[[int], str]]] = [
        ("sqlite", lambda turn: f"sqlite:///{tmp}/elsewhere-{turn}.db")
    ]
    server = None
    try:
        from tests.pg_server import ServerUnavailable, start_server

        try:
            server = start_server()
            pg = server
            urls.append(("postgres", lambda turn: pg.create_database()))
        except ServerUnavailable as exc:
            print(f"   postgres: skipped ({exc})")
    except ImportError as exc:
        print(f"   postgres: skipped ({exc})")
    try:
        for name, url in urls:
            p50s, p99s = [], []
            for turn in range(TURNS):
                latencies = trio.run(_elsewhere, url(turn), count)
                p50s.append(percentile(latencies, 0.50))
                p99s.append(percentile(latencies, 0.99))
            p50, p99 = statistics.median(p50s), statistics.median(p99s)
            target = " (target p99 < 20 ms)" if name == "postgres" else " (no target: poll 50 ms)"
            verdict = "" if name != "postgres" else (" PASS" if p99 < 0.020 else " MISS")
            print(f"   {name:<8} p50 {_ms(p50)}, p99 {_ms(p99)}{target}{verdict}")
            results.append(f"3 {name}: p50 {_ms(p50)}, p99 {_ms(p99)}{target}{verdict}")
    finally:
        if server is not None:
            server.stop()


# ---------------------------------------------------------------------------- 4. beside


async def _throughput(store: str, runs: int, beside: bool) -> float:
    async def trivial(ctx: RunContext) -> object:
        return 1

    async def streaming(ctx: RunContext) -> object:
        out = ctx.stream()
        i = 0
        while True:
            out.send(f"t{i}")
            i += 1
            await trio.sleep(0.001)

    async def executor(runtime: Runtime, left: list[int]) -> None:
        while left[0] > 0:
            left[0] -= 1
            await runtime.execute(trivial)

    async with open_runtime(store) as runtime:
        streamer = await runtime.start(streaming) if beside else None
        await trio.sleep(0.2)  # the stream is under way
        left = [runs]
        began = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(executor, runtime, left)
        took = time.perf_counter() - began
        if streamer is not None:
            await runtime.cancel_run(streamer.run_id)
    return runs / took


def bench_beside(tmp: Path, runs: int, results: list[str]) -> None:
    print(f"\n4. execute() throughput on SQLite, {runs} runs, with a streaming run beside or not")
    ratios, withouts, withs = [], [], []
    for turn in range(TURNS):
        # Which goes first alternates from turn to turn.
        rows = [("beside-none", False), ("beside", True)][:: 1 if turn % 2 == 0 else -1]
        rates = {
            beside: trio.run(_throughput, f"sqlite:///{tmp}/{name}-{turn}.db", runs, beside)
            for name, beside in rows
        }
        without, with_ = rates[False], rates[True]
        withouts.append(without)
        withs.append(with_)
        ratios.append(with_ / without)
    ratio = statistics.median(ratios)
    verdict = "PASS" if ratio >= 0.8 else "MISS"
    print(
        f"   without {statistics.median(withouts):.0f} runs/s, with"
        f" {statistics.median(withs):.0f} runs/s: with/without {ratio:.2f} (target >= 0.8)"
        f" {verdict}"
    )
    results.append(f"4 sqlite: with/without {ratio:.2f} (>= 0.8) {verdict}")


# ---------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--only", type=int, action="append", choices=[1, 2, 3, 4])
    args = parser.parse_args(argv)
    parts = set(args.only or [1, 2, 3, 4])
    results: list[str] = []
    parts_of: dict[int, Callable[[Path], None]] = {
        1: lambda tmp: bench_sending(tmp, 10_000 if args.quick else 100_000, results),
        2: lambda tmp: bench_in_process(tmp, 200 if args.quick else 1000, results),
        3: lambda tmp: bench_elsewhere(tmp, 100 if args.quick else 300, results),
        4: lambda tmp: bench_beside(tmp, 500 if args.quick else 2000, results),
    }
    with tempfile.TemporaryDirectory(prefix="bench-streams-") as directory:
        for part in sorted(parts):
            parts_of[part](Path(directory))
    print("\nSummary")
    for line in results:
        print(f"   {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
