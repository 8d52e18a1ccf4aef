"""What an idle SQLite worker costs, and how fast a signal from another process reaches it.

Run from the repository root::

    python benchmarks/bench_idle.py                  # 10 s idle, 30 cancels
    python benchmarks/bench_idle.py --seconds 30 --cancels 100

1. Idle: a worker process opens a runtime on a fresh SQLite file with one body registered
   and serves (``poll`` at its default); nothing is submitted. Its CPU time (user + system,
   from ``/proc/<pid>/stat``) over ``--seconds`` seconds, as a fraction of one core.
2. Cross-process cancel: the same worker runs one run at a time whose body waits forever;
   this process sends ``LiveCommand.Cancel`` (``Runtime.send``) and times how long until the
   run's end is in the file (read straight from the file every millisecond, so this
   process's own poll adds nothing). The signal path: the worker's poll sees the stored
   command, cancels the attempt, and its finish boundary commits the end. Each cancel is
   sent after the worker has been idle for a while (``--idle-before``), so a poll that
   backs off while nothing changes shows here. Prints p50, p99 and the worst.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio
from _harness import percentile

from awaken_trio import LiveCommand, RunContext, open_runtime


async def _waits(ctx: RunContext) -> object:
    await trio.sleep_forever()


def _worker(url: str) -> None:
    async def main() -> None:
        async with (
            open_runtime(url, bodies={"waits": _waits}) as runtime,
            trio.open_nursery() as nursery,
        ):
            await nursery.start(lambda task_status: runtime.serve(task_status=task_status))
            print("ready", flush=True)
            parent = os.getppid()
            while True:  # ends with the process that started it
                await trio.sleep(0.5)
                if os.getppid() != parent:
                    nursery.cancel_scope.cancel()
                    return

    trio.run(main)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def _state_kind(db: Path, run_id: str) -> str | None:
    conn = sqlite3.connect(db, timeout=5)
    try:
        row = conn.execute("SELECT kind FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else str(row[0])
    finally:
        conn.close()


async def _wait_kind(db: Path, run_id: str, kind: str) -> float:
    """Poll the file until the run has ``kind``; the time it was seen."""
    with trio.fail_after(30):
        while True:  # another process's file: nothing to wait on but the file itself
            if _state_kind(db, run_id) == kind:
                break
            await trio.sleep(0.001)
    return time.perf_counter()


async def _cancels(url: str, db: Path, count: int, idle_before: float) -> list[float]:
    latencies = []
    async with open_runtime(url) as control:
        for i in range(count):
            handle = await control.submit("waits", run_id=f"cancel-{i}")
            await _wait_kind(db, handle.run_id, "running")
            await trio.sleep(idle_before)  # the worker idles with the run in hand
            sent = time.perf_counter()
            await control.send(LiveCommand.Cancel(handle.run_id))
            seen = await _wait_kind(db, handle.run_id, "ended")
            latencies.append(seen - sent)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="idle measurement")
    parser.add_argument("--cancels", type=int, default=30)
    parser.add_argument("--idle-before", type=float, default=1.0, help="idle before a cancel")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args.worker)
        return
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "idle.db"
        url = f"sqlite:///{db}"
        worker = subprocess.Popen(
            [sys.executable, __file__, "--worker", url], stdout=subprocess.PIPE, text=True
        )
        try:
            assert worker.stdout is not None
            if worker.stdout.readline().strip() != "ready":
                raise SystemExit("the worker did not start")
            time.sleep(1.0)  # past start-up
            before, start = _cpu_seconds(worker.pid), time.perf_counter()
            time.sleep(args.seconds)
            used, wall = _cpu_seconds(worker.pid) - before, time.perf_counter() - start
            print(f"idle worker: {used / wall:.2%} of a core over {wall:.1f} s ({used:.2f} s CPU)")
            latencies = trio.run(_cancels, url, db, args.cancels, args.idle_before)
            ms = [1000 * latency for latency in latencies]
            print(
                f"cross-process cancel ({len(ms)} runs, each after {args.idle_before:g} s idle):"
                f" p50 {statistics.median(ms):.1f} ms, p99 {percentile(ms, 0.99):.1f} ms,"
                f" worst {max(ms):.1f} ms"
            )
        finally:
            worker.kill()
            worker.wait()


if __name__ == "__main__":
    main()
