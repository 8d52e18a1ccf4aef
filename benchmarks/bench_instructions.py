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
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import random
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import trio
import trio.testing

ROOT = Path(__file__).resolve().parent.parent
SMALL, LARGE = 500, 2_500
PARKED, CANCELS = 2_000, 500

_TOGGLE_C = """#include <valgrind/callgrind.h>
void toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
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


def _cancel_workload(kind: str, library: str) -> None:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    toggle = ctypes.CDLL(library)
    trio.run(_CANCEL_WORKLOADS[kind], toggle)


def _cancel_counts(kind: str, library: str) -> int:
    """Instructions callgrind counted between the toggles of one ``kind`` process."""
    command = [
        "valgrind",
        "--tool=callgrind",
        "--collect-atstart=no",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        __file__,
        "--workload",
        kind,
        library,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
    found = re.search(r"==\d+== Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"valgrind did not report instructions:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def _count_cancels() -> None:
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
        print(
            f"== instructions per live cancel among {PARKED:,} parked, to the canceller's"
            f" return ({CANCELS} cancels, gc off)"
        )
        bare = _cancel_counts("cancel-bare", library) / CANCELS
        floor = _cancel_counts("cancel-floor", library) / CANCELS
        ours = _cancel_counts("cancel", library) / CANCELS
    print(f"  {'':30s} {'instructions':>13s}")
    print(f"  {'bare (scope.cancel + event)':30s} {bare:13,.0f}")
    print(f"  {'floor (the same, a nursery each)':30s} {floor:13,.0f}")
    print(f"  {'ours (deliver + wait)':30s} {ours:13,.0f}")
    print(f"  ratio ours/bare                {ours / bare:12.2f}x")
    print(f"  ratio ours/floor               {ours / floor:12.2f}x")


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
    parser.add_argument("--workload", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.workload:
        if args.workload[0].startswith("cancel"):
            _cancel_workload(*args.workload)
        else:
            _workload(args.workload[0], int(args.workload[1]))
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)")
        return 1
    if args.cancel:
        _count_cancels()
        given = sys.argv[1:] if argv is None else list(argv)
        print(f"command: {' '.join(['python', 'benchmarks/bench_instructions.py', *given])}")
        return 0
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
    given = sys.argv[1:] if argv is None else list(argv)
    print(f"command: {' '.join(['python', 'benchmarks/bench_instructions.py', *given])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
