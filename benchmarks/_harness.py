"""What the benchmarks share: the repository on the import path, timing (wall and CPU),
rounds and their medians, ratios as medians of per-round ratios, percentiles, the common
command-line arguments, and the figures printed as a table and written as JSON.

A benchmark runs its ways interleaved within each round (so a machine that gets busier slows
all of them alike), several rounds, and reports medians: a ratio is the median of the
rounds' ratios, each taken between ways measured in the same round, never a ratio of
medians taken at different times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The repository's root: put first on the import path, so a benchmark measures the
checkout it sits in, not an installed copy."""

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Timing:
    """Wall and CPU seconds of one measurement (CPU: the process's, every thread's)."""

    wall: float
    cpu: float

    def per(self, count: float, unit: float = 1e-6) -> Timing:
        """The timing of one of ``count`` things, in ``unit`` seconds (µs by default)."""
        return Timing(self.wall / count / unit, self.cpu / count / unit)

    def __add__(self, other: Timing) -> Timing:
        return Timing(self.wall + other.wall, self.cpu + other.cpu)


def timed(run: Callable[[], object]) -> Timing:
    """The wall and CPU time of ``run()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return Timing(time.perf_counter() - wall, time.process_time() - cpu)


def interleaved(ways: Mapping[str, Callable[[], object]], turns: int) -> dict[str, Timing]:
    """Each way's total `Timing` over ``turns`` turns, each turn running every way once,
    one after another."""
    totals = dict.fromkeys(ways, Timing(0.0, 0.0))
    for _ in range(turns):
        for way, run in ways.items():
            totals[way] = totals[way] + timed(run)
    return totals


def medians(rounds: Sequence[Mapping[str, Timing]]) -> dict[str, Timing]:
    """Each way's median wall and median CPU time over ``rounds``."""
    return {
        way: Timing(
            statistics.median(r[way].wall for r in rounds),
            statistics.median(r[way].cpu for r in rounds),
        )
        for way in rounds[0]
    }


def median_ratio(ours: Iterable[float], base: Iterable[float]) -> float:
    """The median over rounds of ``ours / base`` (each pair measured in the same round)."""
    return statistics.median(o / b for o, b in zip(ours, base, strict=True))


def percentile(values: Iterable[float], fraction: float) -> float:
    """The value at ``fraction`` (0..1) of the sorted values (the nearest by rounding)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def arguments(description: str | None, *, repeat: int = 3) -> argparse.ArgumentParser:
    """A parser with the arguments every benchmark takes: ``--repeat`` (rounds, whose
    medians are reported) and ``--json PATH`` (also write the figures there)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--repeat", type=int, default=repeat, help=f"rounds (default {repeat}): medians"
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures here")
    return parser


def print_table(title: str, rows: Mapping[str, Timing], *, unit: str = "us") -> None:
    """``rows`` as a table of wall and CPU time, under ``title``."""
    width = max(len(way) for way in rows) + 2
    print(title)
    print(f"  {'':<{width}} {'wall ' + unit:>11} {'cpu ' + unit:>11}")
    for way, timing in rows.items():
        print(f"  {way:<{width}} {timing.wall:11.1f} {timing.cpu:11.1f}")


def write_json(path: Path | None, figures: Mapping[str, object]) -> None:
    """Write ``figures`` (JSON values; `Timing` values as ``{"wall", "cpu"}``) to ``path``
    (nothing when it is None)."""
    if path is None:
        return

    def plain(value: object) -> object:
        if isinstance(value, Timing):
            return {"wall": value.wall, "cpu": value.cpu}
        if isinstance(value, Mapping):
            return {str(key): plain(item) for key, item in value.items()}
        return value

    path.write_text(json.dumps(plain(figures), indent=2) + "\n")
