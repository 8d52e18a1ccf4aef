"""Instructions per trivial run, counted by valgrind: the throughput benchmark of
``bench_runtime.py`` (section 1, "start") without the noise of a shared machine.

Run from the repository root (needs ``valgrind`` on the PATH; about 3 minutes)::

    python benchmarks/bench_instructions.py

Wall-clock ratios on a shared two-core machine move by a factor of up to two from one
minute to the next. The instructions a workload executes do not: this counts them with
``valgrind --tool=cachegrind`` for the two workloads of ``bench_runtime.py``'s throughput
section, ours (``await rt.start(body)`` N times, then ``wait()`` on every handle, on the
memory store) and the floor (bare Trio tasks in a nursery each, spawned with a checkpoint
each and read with one scheduler pass each), each in a process of its own. Each is run at
500 and at 2,500 runs; the difference, divided by 2,000, is the cost of one run without the
interpreter's start, the imports and the runtime's opening. With ``--cache`` the level-1
data cache is simulated too (slower), and its misses per run are given.

Ratio = floor instructions / ours (as the throughput ratio: bigger is better). An
instruction is not a cycle: the eval loop's branches and cache misses cost more per
instruction in ours, which runs more distinct code, so the wall-clock ratio is lower.

``--cancel`` counts section 2 of ``bench_runtime.py`` instead: a live cancel among 2,000
parked runs, ``deliver(Cancel)`` until ``wait()`` returns the committed end, against bare
Trio's ``scope.cancel()`` until the cancelling task is back (the task leaves its scope and
sets an event, and the canceller wakes), and against the floor of this design (the same,
each task parked in a nursery of its own and setting the event inside it, as an attempt
answers ``wait()`` before its nursery closes). Only the cancels are counted (500 of them, one at a
time, with the garbage collector off, as a p50 sees them): valgrind's callgrind starts
counting when the loop begins and stops when it ends, switched from Python by a two-line C
library built on the spot (it needs a C compiler and valgrind's headers, which valgrind's
package installs). Ratio = ours / bare (times the work, as the latency ratio: smaller is
better).

``--drain`` counts a run of ``bench_postgres.py``'s no-op drain against a pgqueuer job
(about 5 minutes; needs the PostgreSQL server binaries, as the tests do, and the ``bench``
extra), on both sides of the connection:

- the client, in all its threads (callgrind's instrumentation switched on and off around
  the drain): ``DRAINED`` runs queued first on a throwaway server (``tests/pg_server.py``),
  then served by one runtime at concurrency 1,024 with its heap settled, as ``awaken-trio
  worker`` serves them, counted from the serve's start to the last end committed; as many
  pgqueuer jobs enqueued, then dequeued and acknowledged by 1 and by 5 consumers at batch
  100 (its cheapest ways), counted from the consumers' start to the last job's handler.
  Beside them, the parts of a run without a store: the same drain served from the memory
  store (the kernel and the rules, no I/O), and the floor of this design, a Trio task with
  a nursery of its own per unit of work.
- the server: every process of a throwaway server started under cachegrind (``pg_ctl``
  starts a wrapper) for its whole life, while a client not under valgrind queued
  ``SERVER_SMALL`` and ``SERVER_LARGE`` runs or jobs and drained them; each drain's count
  less its queueing's alone, and the difference of the two sizes over the runs between
  them.

Ratio = a job's instructions / a run's (as the throughput ratio: bigger is better).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import gc
import importlib
import os
import pwd
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import trio
import trio.testing

ROOT = Path(__file__).resolve().parent.parent
SMALL, LARGE = 500, 2_500
PARKED, CANCELS = 2_000, 500
DRAINED, DRAIN_CONCURRENCY = 2_000, 1_024
SERVER_SMALL, SERVER_LARGE = 1_000, 3_000
PGQUEUER_CONSUMERS = (1, 5)

Stage = Literal["queued", "drained"]
"""How far a drain's process goes: its runs or jobs queued, or queued then drained."""
_STAGES: dict[str, Stage] = {"queued": "queued", "drained": "drained"}

_TOGGLE_C = """#include <valgrind/callgrind.h>
void toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
void start(void) { CALLGRIND_START_INSTRUMENTATION; }
void stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
"""


def _workload(kind: str, n: int) -> None:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_runtime import floor_throughput, ours_start_throughput

    trio.run(ours_start_throughput if kind == "ours" else floor_throughput, n)


async def _ours_cancels(toggle: ctypes.CDLL) -> None:
    from bench_runtime import parked_body

    from awaken_trio import LiveCommand, open_runtime

    async with open_runtime() as rt:
        handles = [await rt.start(parked_body) for _ in range(PARKED)]
        await trio.testing.wait_all_tasks_blocked()
        chosen = random.Random(1).sample(handles, CANCELS)
        commands = [LiveCommand.Cancel(handle.run_id) for handle in chosen]
        deliver = rt.deliver
        gc.collect()
        gc.disable()
        toggle.toggle()
        for handle, command in zip(chosen, commands, strict=True):
            deliver(command)
            await handle.wait()
        toggle.toggle()
        gc.enable()


async def _bare_cancels(toggle: ctypes.CDLL) -> None:
    done = [trio.Event()]

    async def parked(task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)
            await trio.sleep_forever()
        done[0].set()

    async with trio.open_nursery() as nursery:
        scopes = [await nursery.start(parked) for _ in range(PARKED)]
        await trio.testing.wait_all_tasks_blocked()
        chosen = random.Random(1).sample(scopes, CANCELS)
        gc.collect()
        gc.disable()
        toggle.toggle()
        for scope in chosen:
            done[0] = trio.Event()
            scope.cancel()
            await done[0].wait()
        toggle.toggle()
        gc.enable()
        nursery.cancel_scope.cancel()


async def _floor_cancels(toggle: ctypes.CDLL) -> None:
    done = [trio.Event()]

    async def parked(task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        async with trio.open_nursery() as nursery:
            task_status.started(nursery.cancel_scope)
            try:
                await trio.sleep_forever()
            finally:
                done[0].set()

    async with trio.open_nursery() as nursery:
        scopes = [await nursery.start(parked) for _ in range(PARKED)]
        await trio.testing.wait_all_tasks_blocked()
        chosen = random.Random(1).sample(scopes, CANCELS)
        gc.collect()
        gc.disable()
        toggle.toggle()
        for scope in chosen:
            done[0] = trio.Event()
            scope.cancel()
            await done[0].wait()
        toggle.toggle()
        gc.enable()
        nursery.cancel_scope.cancel()


_CANCEL_WORKLOADS = {
    "cancel": _ours_cancels,
    "cancel-bare": _bare_cancels,
    "cancel-floor": _floor_cancels,
}


async def _noop(ctx: object) -> int:
    return 1


async def _served(runtime: Any, count: ctypes.CDLL, n: int) -> None:
    """Serve ``runtime``'s queue with the heap settled, counted from the serve's start to
    the last end committed (the checks whether it is over are counted too: one every
    0.2 s, a few hundred instructions a run)."""
    from awaken_trio._heap import settle_heap

    settle_heap(DRAIN_CONCURRENCY)
    count.start()
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(runtime.serve, concurrency=DRAIN_CONCURRENCY))
        while True:
            if (await runtime.count_runs()).natural_end == n:
                break
            await trio.sleep(0.2)
        count.stop()
        nursery.cancel_scope.cancel()


async def _drain_ours(count: ctypes.CDLL, url: str, n: int, stage: Stage) -> None:
    from awaken_trio import open_runtime

    async with open_runtime(url) as runtime:
        for _ in range(n):
            await runtime.submit("noop")
    if stage == "drained":
        async with open_runtime(url, bodies={"noop": _noop}, poll=0.05, lease=30) as runtime:
            await _served(runtime, count, n)


async def _drain_memory(count: ctypes.CDLL, url: str, n: int, stage: Stage) -> None:
    from awaken_trio import open_runtime
    from awaken_trio.store.memory import MemoryStore

    # Its commits through the mailbox, as a store with I/O takes them (not inline).
    store = MemoryStore(max_ended_runs=n, inline=False)
    async with open_runtime(store, bodies={"noop": _noop}, poll=0.05) as runtime:
        for _ in range(n):
            await runtime.submit("noop")
        await _served(runtime, count, n)


async def _drain_floor(count: ctypes.CDLL, url: str, n: int, stage: Stage) -> None:
    async def unit() -> None:
        async with trio.open_nursery():
            await _noop(None)

    count.start()
    for start in range(0, n, DRAIN_CONCURRENCY):
        async with trio.open_nursery() as nursery:
            for _ in range(min(DRAIN_CONCURRENCY, n - start)):
                nursery.start_soon(unit)
    count.stop()


def _drain_pgqueuer(count: ctypes.CDLL, url: str, n: int, stage: Stage, consumers: int) -> None:
    import asyncio
    import logging

    import psycopg
    from _pgqueuer import enqueue_jobs, pgqueuer_consumers

    # (Imported by name: the ``bench`` extra installs it, the tests' environment may not.)
    pgqueuer: Any = importlib.import_module("pgqueuer")

    logging.disable(logging.WARNING)

    async def main() -> None:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        queries = pgqueuer.Queries(pgqueuer.PsycopgDriver(conn))
        await queries.install()
        await enqueue_jobs(queries, n)
        if stage == "queued":
            await conn.close()
            return
        # (The count stops in the last job's handler.)
        managers, connections, finished = await pgqueuer_consumers(url, consumers, n, count.stop)
        count.start()
        tasks = [asyncio.create_task(m.run(batch_size=100)) for m in managers]
        await asyncio.wait_for(finished, 3600)
        for manager in managers:
            manager.shutdown.set()
        await asyncio.gather(*tasks)
        for connection in [conn, *connections]:
            await connection.close()

    asyncio.run(main())


_DRAIN_WORKLOADS: dict[str, Any] = {
    "drain-ours": _drain_ours,
    "drain-memory": _drain_memory,
    "drain-floor": _drain_floor,
}


def _toggled_workload(kind: str, library: str, *given: str) -> None:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    toggle = ctypes.CDLL(library)
    if kind.startswith("drain-"):
        url, n, stage = given[0], int(given[1]), _STAGES[given[2]]
        if kind.startswith("drain-pgqueuer-"):
            _drain_pgqueuer(toggle, url, n, stage, int(kind.rpartition("-")[2]))
        else:
            trio.run(_DRAIN_WORKLOADS[kind], toggle, url, n, stage)
    else:
        trio.run(_CANCEL_WORKLOADS[kind], toggle)


def _toggled_counts(kind: str, library: str, *given: str) -> int:
    """Instructions callgrind counted between the toggles (a drain: between ``start`` and
    ``stop``) of one ``kind`` process."""
    command = [
        "valgrind",
        "--tool=callgrind",
        # A drain is counted in all its threads (the store's too): instrumented between
        # ``start`` and ``stop``. A toggle counts its caller's thread alone.
        "--instr-atstart=no" if kind.startswith("drain") else "--collect-atstart=no",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        __file__,
        "--workload",
        kind,
        library,
        *given,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
    found = re.search(r"==\d+== Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"valgrind did not report instructions:\n{done.stderr[-2000:]}")
    return int(found.group(1))


@contextlib.contextmanager
def _toggle_library() -> Iterator[str]:
    """The path of a library whose ``toggle()`` switches callgrind's counting on and off
    in the calling thread, and whose ``start()`` and ``stop()`` switch its instrumentation
    in every thread, built for the duration."""
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "toggle.c"
        source.write_text(_TOGGLE_C)
        library = str(Path(tmp) / "toggle.so")
        built = subprocess.run(
            ["cc", "-shared", "-fPIC", "-O1", "-o", library, str(source)],
            capture_output=True,
            text=True,
        )
        if built.returncode != 0:
            raise SystemExit(f"the toggle library did not build:\n{built.stderr}")
        yield library


def _count_cancels() -> None:
    with _toggle_library() as library:
        print(
            f"== instructions per live cancel among {PARKED:,} parked, to the canceller's"
            f" return ({CANCELS} cancels, gc off)"
        )
        bare = _toggled_counts("cancel-bare", library) / CANCELS
        floor = _toggled_counts("cancel-floor", library) / CANCELS
        ours = _toggled_counts("cancel", library) / CANCELS
    print(f"  {'':30s} {'instructions':>13s}")
    print(f"  {'bare (scope.cancel + event)':30s} {bare:13,.0f}")
    print(f"  {'floor (the same, a nursery each)':30s} {floor:13,.0f}")
    print(f"  {'ours (deliver + wait)':30s} {ours:13,.0f}")
    print(f"  ratio ours/bare                {ours / bare:12.2f}x")
    print(f"  ratio ours/floor               {ours / floor:12.2f}x")


_WRAPPER = """#!/bin/sh
exec valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file={out}/server.%p {binary} "$@"
"""


def _server_counts(kind: str, library: str, n: int, stage: Stage) -> int:
    """Instructions of every process of a throwaway server started under cachegrind, over
    its whole life, while one ``kind`` process, itself not under valgrind, queued ``n``
    runs or jobs and, at ``stage`` "drained", drained them."""
    from tests.pg_server import SERVER_USER, find_bindir, start_server

    bindir = find_bindir()
    assert bindir is not None  # (`_count_drain` started a server before)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "counts"
        out.mkdir()
        wrapper = Path(tmp) / "postgres"
        wrapper.write_text(_WRAPPER.format(out=out, binary=bindir / "postgres"))
        wrapper.chmod(0o755)
        Path(tmp).chmod(0o755)
        if os.geteuid() == 0:  # (the server runs as its own user, and writes its counts)
            account = pwd.getpwnam(SERVER_USER)
            os.chown(out, account.pw_uid, account.pw_gid)
        server = start_server(postgres=wrapper)
        try:
            url = server.create_database("counted")
            subprocess.run(
                [sys.executable, __file__, "--workload", kind, library, url, str(n), stage],
                check=True,
                cwd=ROOT,
            )
        finally:
            server.stop()
        # A process's counts are written as it exits, after the server reads as stopped.
        deadline = time.monotonic() + 120
        while subprocess.run(["pgrep", "-f", str(out)], capture_output=True).returncode == 0:
            if time.monotonic() > deadline:
                raise SystemExit("the server's processes under valgrind did not exit")
            time.sleep(0.2)
        total = 0
        for counted in out.iterdir():
            summary = re.search(r"^summary: (\d+)", counted.read_text(), re.MULTILINE)
            if summary is None:
                raise SystemExit(f"{counted.name} holds no count")
            total += int(summary.group(1))
        return total


def _server_per_unit(kind: str, library: str) -> float:
    """The server's instructions a run or job drained by ``kind``: each drain's less its
    queueing's, at two sizes, the difference over the runs between them (what a server
    process spends once, its start, a connection's, cancels out)."""
    spent = {
        n: _server_counts(kind, library, n, "drained") - _server_counts(kind, library, n, "queued")
        for n in (SERVER_SMALL, SERVER_LARGE)
    }
    return (spent[SERVER_LARGE] - spent[SERVER_SMALL]) / (SERVER_LARGE - SERVER_SMALL)


def _count_drain() -> int:
    sys.path.insert(0, str(ROOT))
    from tests.pg_server import ServerUnavailable, start_server

    try:
        importlib.import_module("pgqueuer")
    except ImportError:
        print("pgqueuer is not installed (pip install -e '.[bench]')")
        return 1
    try:
        server = start_server()
    except ServerUnavailable as exc:
        print(f"no PostgreSQL server: {exc}")
        return 1
    print(
        f"== instructions per no-op run drained from PostgreSQL, client side ({DRAINED:,}"
        f" queued first; ours served at concurrency {DRAIN_CONCURRENCY:,})"
    )
    pgqueuer_ways = [
        (f"pgqueuer, {c} consumer(s)", f"drain-pgqueuer-{c}") for c in PGQUEUER_CONSUMERS
    ]
    found: dict[str, float] = {}
    try:
        with _toggle_library() as library:
            for label, kind in (
                ("floor (a task, a nursery)", "drain-floor"),
                ("ours, the memory store", "drain-memory"),
                ("ours, PostgreSQL", "drain-ours"),
                *pgqueuer_ways,
            ):
                url = server.create_database(kind.replace("-", "_"))
                found[label] = (
                    _toggled_counts(kind, library, url, str(DRAINED), "drained") / DRAINED
                )
                print(f"  {label:30s} {found[label]:13,.0f}", flush=True)
            print(
                f"== the server's instructions a run or job drained ({SERVER_LARGE:,} less"
                f" {SERVER_SMALL:,}, the server under valgrind, its clients not)"
            )
            served: dict[str, float] = {}
            for label, kind in (
                ("ours, PostgreSQL", "drain-ours"),
                *pgqueuer_ways,
            ):
                served[label] = _server_per_unit(kind, library)
                total = served[label] + found[label]
                print(
                    f"  {label:30s} {served[label]:13,.0f}   client and server {total:13,.0f}",
                    flush=True,
                )
    finally:
        server.stop()
    job = min(v for k, v in found.items() if k.startswith("pgqueuer"))
    for label, of in (
        ("a run, PostgreSQL", "ours, PostgreSQL"),
        ("a run, the memory store", "ours, the memory store"),
        ("the floor's unit", "floor (a task, a nursery)"),
    ):
        print(f"  ratio a job / {label:26s} {job / found[of]:8.2f}x")
    jobs = min(v + found[k] for k, v in served.items() if k.startswith("pgqueuer"))
    runs = served["ours, PostgreSQL"] + found["ours, PostgreSQL"]
    print(f"  ratio a job / a run, client and server  {jobs / runs:8.2f}x")
    return 0


def _counts(kind: str, n: int, *, cache: bool) -> dict[str, int]:
    """The counters cachegrind reports for one process running ``kind`` ``n`` times."""
    command = [
        "valgrind",
        "--tool=cachegrind",
        f"--cache-sim={'yes' if cache else 'no'}",
        "--cachegrind-out-file=/dev/null",
        sys.executable,
        __file__,
        "--workload",
        kind,
        str(n),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
    counts = {}
    for line in done.stderr.splitlines():
        found = re.match(r"==\d+== (I|D1)\s+(refs|misses):\s+([\d,]+)", line)
        if found:
            counts[f"{found.group(1)} {found.group(2)}"] = int(found.group(3).replace(",", ""))
    if "I refs" not in counts:
        raise SystemExit(f"valgrind did not report instructions:\n{done.stderr[-2000:]}")
    return counts


def _per_run(kind: str, *, cache: bool) -> dict[str, float]:
    small = _counts(kind, SMALL, cache=cache)
    large = _counts(kind, LARGE, cache=cache)
    return {key: (large[key] - small[key]) / (LARGE - SMALL) for key in large}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", action="store_true", help="simulate the data cache too")
    parser.add_argument(
        "--cancel", action="store_true", help="count a live cancel instead of a trivial run"
    )
    parser.add_argument(
        "--drain",
        action="store_true",
        help="count a run of a no-op drain from PostgreSQL against a pgqueuer job",
    )
    parser.add_argument("--workload", nargs="+", metavar="ARG", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.workload:
        if args.workload[0].startswith(("cancel", "drain")):
            _toggled_workload(*args.workload)
        else:
            _workload(args.workload[0], int(args.workload[1]))
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)")
        return 1
    given = sys.argv[1:] if argv is None else list(argv)
    if args.cancel or args.drain:
        code = 0
        if args.cancel:
            _count_cancels()
        else:
            code = _count_drain()
        print(f"command: {' '.join(['python', 'benchmarks/bench_instructions.py', *given])}")
        return code
    print(f"== instructions per trivial run, start -> committed Ended ({LARGE} - {SMALL} runs)")
    ours = _per_run("ours", cache=args.cache)
    floor = _per_run("floor", cache=args.cache)
    print(f"  {'':24s} {'instructions':>13s}" + (f" {'D1 misses':>10s}" if args.cache else ""))
    for label, counts in (("floor (bare Trio)", floor), ("ours (rt.start + wait)", ours)):
        row = f"  {label:24s} {counts['I refs']:13,.0f}"
        if args.cache:
            row += f" {counts['D1 misses']:10,.0f}"
        print(row)
    print(f"  ratio floor/ours          {floor['I refs'] / ours['I refs']:12.2f}x")
    print(f"command: {' '.join(['python', 'benchmarks/bench_instructions.py', *given])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
