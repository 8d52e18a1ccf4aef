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
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMALL, LARGE = 500, 2_500


def _workload(kind: str, n: int) -> None:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import trio
    from bench_runtime import floor_throughput, ours_start_throughput

    trio.run(ours_start_throughput if kind == "ours" else floor_throughput, n)


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
    parser.add_argument("--workload", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.workload:
        _workload(args.workload[0], int(args.workload[1]))
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)")
        return 1
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
