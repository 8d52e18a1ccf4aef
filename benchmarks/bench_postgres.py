"""Durable runs on PostgreSQL and SQLite, side by side with DBOS and pgqueuer on the same
throwaway PostgreSQL server, in one run.

Run from the repository root (needs the PostgreSQL 15 server binaries, as the tests do, and
the ``bench`` and ``postgres`` extras: ``pip install -e '.[bench,postgres]'``)::

    python benchmarks/bench_postgres.py                    # about 20 minutes on 2 busy cores
    python benchmarks/bench_postgres.py --quick            # smaller sizes, one round (5)
    python benchmarks/bench_postgres.py --json out.json    # also write the figures
    python benchmarks/bench_postgres.py --only peers       # one part (repeatable)
    python benchmarks/bench_postgres.py --only backlog --statements  # server time per run
    python benchmarks/bench_postgres.py --only latency --breakdown    # where a start's time goes
    python benchmarks/bench_postgres.py --only cancel --breakdown     # where a cancel's goes

One server for the whole run (``tests/pg_server.py``: the system's PostgreSQL with its
defaults, fsync on, but ``max_connections=200``, on 127.0.0.1), a fresh database for each
measurement. Parts:

- ``workers``: ``submit`` -> claimed -> ``Ended`` throughput with 1, 2 and 4 worker processes
  (``tests/multiprocess/worker_process.py``, ``concurrency=64``, the body ``stepper`` by
  name: one step with progress, then a result), on PostgreSQL and on SQLite. This process
  submits N runs concurrently and waits for every end. Runs per second, and on
  PostgreSQL the most connections the database had at once (sampled every 20 ms).
- ``drain``: 10,000 runs (2,000 with ``--quick``) submitted first (not timed), then 1, 2
  and 4 worker processes, their runtimes open but gated (``worker_process.py --gate``),
  let serve at one moment: runs per second from then to the last end, as pgqueuer's
  rows measure a drain, at ``concurrency=`` 64 and 256 a worker, and with a body that
  returns at once; and the CPU a run the workers (and the server) spent meanwhile.
- ``waiting``: the same drain with bodies that wait 0.2 s (a model's answer) before their
  one step, 2,000 runs (600 with ``--quick``), a worker holding 32: runs per second by 1,
  2 and 4 workers, 4 workers over 2 in each round, the machine's busy share, and the CPU
  a run.
- ``noop``: the drain's no-op row (1, 2 and 4 workers, at concurrency 256 and 1,024) and
  pgqueuer's drain (1 and 5 consumers, batch 10 and 100) of as many jobs, in the same
  rounds: our best over pgqueuer's best in each round, and the CPU a run or a job took in
  the drain's processes and in the server's. Ours once more at concurrency 1,024 with its
  last end found by asking the store, not by waiting on every run (as pgqueuer's drain is
  timed by its own count of jobs done), and once more timed to the last end as the store
  committed it, with the measuring process idle but for one connection asking every 50 ms
  whether the drain is over (as pgqueuer's is timed to its last handler's call). Beside
  them two floors: a run's writes, bare
  (the rows a no-op run's start and end change, two statements a batch, drained as
  pgqueuer's jobs are, client and server), and a worker serving no-op runs from the
  memory store (the kernel and the rules, no store I/O); their CPU a run added up is the
  least a run of ours can take on this machine. (The kernel alone as a start sees it,
  started and waited for, is shown too, not in the floor: a drain's worker neither starts
  nor waits.) And a deployed worker's drain:
  two ``awaken-trio worker`` processes, their INFO lines written to files (`_cli_drain`).
- ``backlog``: 20,000 runs (5,000 with ``--quick``) submitted at once to 4 worker
  processes, on PostgreSQL and on SQLite: runs per second while the store grows many
  times over within one load (faster than autovacuum gathers statistics).
- ``lease``: the same with 4 workers and a lease of 1, 5 and 30 s (the default): runs per
  second, and how many claims the workers lost (a lease that ran out before its renewal
  came through, on a machine too busy to renew in time; each loss is a recovery later).
- ``peers``: DBOS (its PostgreSQL system database on the same server): N one-step workflows
  enqueued on a DBOS queue (``polling_interval_sec=0.01``) and run by its own executor
  threads in the enqueuing process; enqueued from one thread, and from 16 threads at once.
  pgqueuer: N jobs enqueued (500 a statement), then dequeued and acknowledged by 1 and by 5
  consumers (``QueueManager``s, each with its own connection, in one process) at batch
  size 10 (its default) and 100; jobs per second from the first dequeue to the last job
  done (the drain), and from the first enqueue. Each peer runs in a fresh process; the
  most connections it held is shown too.
- ``cancel``: ``cancel_run`` from this process -> the owner's body (in a worker process)
  observes it: p50, p95 and p99 of 200 cancels a round (50 with ``--quick``), on
  PostgreSQL and on SQLite (``poll=0.05``); on PostgreSQL, after each cancel, the floor
  (`_FloorSignal`). With ``--breakdown``, where each cancel's time goes (`CANCEL_PARTS`).
- ``latency``: one awaited ``start`` at a time against the store's floor: on PostgreSQL a raw
  one-row ``INSERT`` + ``COMMIT`` round trip on one psycopg connection to the same server, on
  SQLite the same on the same file with the store's pragmas (see bench_start_latency.py),
  measured in turns of 25 calls of each, so that both see the machine alike. Ratio =
  floor/start. Beside them, the floor from Trio: the same commit awaited from a Trio task,
  run on a worker thread as the store runs its calls (a blocking commit must not stall the
  event loop): about the best ratio an awaited commit of any store can reach in a Trio
  program (on SQLite the store's own thread hops a little faster: bench_start_latency.py);
  and floor from Trio/start, each round's floor from Trio over its start (the ratio the
  PostgreSQL store's awaited start is held to). Then one awaited ``ctx.boundary`` of a
  running body at a time (25 a round, after the starts), and floor from Trio/boundary: a
  boundary's commit, of a run whose row the store wrote last, is one round trip too.

Figures are medians of three rounds (one with ``--quick``); the backlog and lease parts
run one. Where the PostgreSQL store
cannot be opened (this version does not have it), its rows say why and the rest still runs.
A database URL's password is never printed or written.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import functools
import gc
import importlib
import itertools
import logging
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal

import attrs
import trio
from _harness import ROOT, percentile, write_json
from _pgqueuer import enqueue_jobs, pgqueuer_consumers

from awaken_trio import EndCause, RunContext, RunState, Runtime, open_runtime
from awaken_trio._heap import SettledHeap, settle_heap
from awaken_trio.store import MemoryStore

WORKER = ROOT / "tests" / "multiprocess" / "worker_process.py"
CANCEL_OWNER = ROOT / "benchmarks" / "_cancel_owner.py"
DONE = RunState.Ended(EndCause.NaturalEnd())
WORKER_COUNTS = (1, 2, 4)
STORES = ("postgresql", "sqlite")

Figures = dict[str, Any]


def hidden(url: str) -> str:
    """``url`` with its password replaced by ``***``."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


# ---------------------------------------------------------------------------- stores


class Stores:
    """Fresh stores for each measurement: a database on the one server, or an SQLite file."""

    def __init__(self, server: Any, tmp: Path) -> None:
        self.server = server
        self.tmp = tmp
        self._count = 0
        self._checked = False
        self._postgres_missing: str | None = None

    def fresh(self, kind: str) -> str:
        self._count += 1
        if kind == "sqlite":
            return f"sqlite:///{self.tmp / f'runs{self._count}.db'}"
        url: str = self.server.create_database(f"bench{self._count}")
        return url

    def measured(self, table: Figures) -> Iterator[str]:
        """The kinds of store to measure; one that cannot be opened here is shown, and put
        in ``table`` as unavailable, instead."""
        for kind in STORES:
            missing = self.usable(kind)
            if missing is None:
                yield kind
            else:
                print(f"  {kind:10s} not measured: {missing}")
                table[kind] = {"unavailable": missing}

    def usable(self, kind: str) -> str | None:
        """Why ``kind``'s store cannot be opened here (None: it can)."""
        if kind == "sqlite":
            return None
        if not self._checked:
            self._checked = True
            try:
                trio.run(_touch, self.fresh(kind))
            except Exception as exc:
                said = hidden(f"{type(exc).__name__}: {exc}")
                self._postgres_missing = said.split(";")[0]  # (what follows lists the URLs)
        return self._postgres_missing


async def _touch(url: str) -> None:
    async with open_runtime(url):
        pass


@contextlib.contextmanager
def connection_peak(server: Any, url: str) -> Iterator[list[int]]:
    """The most connections to ``url``'s database seen at once while the block runs
    (sampled every 20 ms from another thread); the list's one item is set on leaving.
    Nothing is sampled for an SQLite URL."""
    peak = [0]
    if not url.startswith("postgresql"):
        yield peak
        return
    database = url.rsplit("/", 1)[1].split("?")[0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.02):
            rows = server.admin_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,)
            )
            peak[0] = max(peak[0], int(str(rows[0][0])))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield peak
    finally:
        stop.set()
        sampler.join()


# ---------------------------------------------------------------------------- workers


@contextlib.contextmanager
def workers(
    url: str,
    count: int,
    *extra: str,
    stderr: Any = None,
    gate: bool = False,
    script: Path = WORKER,
    floor: bool = False,
) -> Iterator[list[subprocess.Popen[str]]]:
    """``count`` worker processes serving ``url``, each ready; killed on leaving. With
    ``gate``, each has its runtime open but serves only once `open_gates` is called.
    ``script`` is the worker's program (``worker_process.py``'s arguments); with ``floor``,
    ``_cancel_owner.py --floor`` instead."""
    processes: list[subprocess.Popen[str]] = []
    try:
        for i in range(count):
            process = subprocess.Popen(
                [sys.executable, str(CANCEL_OWNER), "--floor", url]
                if floor
                else [
                    sys.executable,
                    str(script),
                    url,
                    "--name",
                    f"w{i}",
                    *extra,
                    *(("--gate",) if gate else ()),
                ],
                stdin=subprocess.PIPE if gate else None,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            processes.append(process)
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("ready"), line
        yield processes
    finally:
        for process in processes:
            process.kill()
            process.wait()
            if process.stdin is not None:
                process.stdin.close()


def open_gates(processes: Sequence[subprocess.Popen[str]]) -> None:
    """Let gated workers (`workers` with ``gate``) serve, all at one moment."""
    for process in processes:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()


STEP: Final = {"steps": 1, "delay": 0}
"""The input of the body every part runs but ``drain``'s no-op row and ``waiting``: one step
committed as progress, then a result."""
NOOP: Final = {"steps": 0}
"""A no-op body's input: a result at once."""


Ends = Literal["waited", "polled", "committed"]
"""How a drain finds its last end: ``waited``, every run's ``RunHandle.wait()`` (a task a
run in the measuring process, following the store's events); ``polled``, asking the store
every `ENDS_POLLED_EVERY` seconds whether any run is still queued or running (two index
probes), as a job queue's drain is timed by its own count of jobs done; ``committed``,
asking the same every `ENDS_COMMITTED_POLL` seconds only to know the drain is over, and
timing it to the last end's own time as the store committed it (``ended_at``, the
worker's clock when it ended the run; the gates are opened at this machine's, the
same): as pgqueuer's drain is timed to its last handler's call, with nearly none of the
measuring process's CPU taken from the drain."""
ENDS_POLLED_EVERY: Final = 0.005
ENDS_COMMITTED_POLL: Final = 0.05
"""How often ``ends="committed"`` asks whether the drain is over: its timing does not
depend on it."""
UNENDED: Final = ("queued", "running")
"""The states a no-op drain's runs pass through before their end."""


@attrs.define
class DrainCpu:
    """CPU seconds spent from a drain's gates' opening to its last end: by the worker
    processes, by the server's (PostgreSQL only; 0.0 on SQLite), and by the process that
    waits for every run's end (the benchmark's own: not part of the drain, but it takes
    its share of the machine's cores meanwhile)."""

    workers: float = 0.0
    server: float = 0.0
    waiter: float = 0.0

    @contextlib.contextmanager
    def counting(self, pids: Sequence[int], server: Any = None) -> Iterator[None]:
        """Add what the processes ``pids``, the ``server``'s (when given) and this one
        spend in the block."""
        workers = _processes_cpu(pids)
        served = 0.0 if server is None else _server_cpu(server)
        waited = time.process_time()
        yield
        self.waiter += time.process_time() - waited
        self.workers += _processes_cpu(pids) - workers
        if server is not None:
            self.server += _server_cpu(server) - served

    def per_run(self, n: int) -> dict[str, float]:
        """Milliseconds of each part a run, over ``n`` runs (as `bench_noop` shows them)."""
        return {
            "drain": self.workers / n * 1e3,
            "server": self.server / n * 1e3,
            "waiter": self.waiter / n * 1e3,
        }


def _stat(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command's name (the parent's pid first,
    then user and system ticks at 11 and 12); None for a process that is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _cores() -> int:
    """The cores this process may run on (and the server it starts, which inherits them):
    fewer than the machine's under ``taskset``."""
    return len(os.sched_getaffinity(0))


def _processes_cpu(pids: Sequence[int]) -> float:
    """Seconds of CPU the processes ``pids`` used so far (``/proc``)."""
    ticks = 0
    for pid in pids:
        if (fields := _stat(pid)) is not None:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


async def _until_ended(runtime: Runtime) -> None:
    """Return once no run is left queued or running, asking the store every
    `ENDS_POLLED_EVERY` seconds (``ends="polled"``)."""
    while True:
        if not any([await runtime.list_runs(state=kind, limit=1) for kind in UNENDED]):
            return
        await trio.sleep(ENDS_POLLED_EVERY)


async def _drained_as_committed(
    url: str,
    n: int,
    processes: Sequence[subprocess.Popen[str]],
    body_input: Mapping[str, object],
    cpu: DrainCpu | None,
    server: Any,
) -> float:
    """`_drain` with ``ends="committed"``: the runs are submitted by a runtime closed before
    the gates open, so nothing of the measuring process's but one connection asking every
    `ENDS_COMMITTED_POLL` seconds whether any run is left unended (an index probe) runs
    during the drain; then timed to the last end the store committed."""
    pids = [process.pid for process in processes]
    await _queued_only(url, n, body_input)
    psycopg: Any = importlib.import_module("psycopg")
    with psycopg.connect(url, autocommit=True) as conn:

        def unended() -> bool:
            found = conn.execute("SELECT EXISTS (SELECT FROM awaken.runs WHERE kind <> 'ended')")
            return bool(found.fetchone()[0])

        with (cpu or DrainCpu()).counting(pids, server):
            opened = time.time()  # (the clock the workers date their ends by)
            open_gates(processes)
            while True:  # (another process's runs: no event here to wait on)
                if not await trio.to_thread.run_sync(unended):
                    break
                await trio.sleep(ENDS_COMMITTED_POLL)
        (last,) = conn.execute("SELECT max(ended_at) FROM awaken.runs").fetchone()
    async with open_runtime(url) as runtime:
        counts = await runtime.count_runs()
    assert counts.natural_end == n, dict(counts)
    return n / (float(last) - opened)


async def _drain(
    url: str,
    n: int,
    processes: Sequence[subprocess.Popen[str]],
    body_input: Mapping[str, object] = STEP,
    *,
    cpu: DrainCpu | None = None,
    server: Any = None,
    ends: Ends = "waited",
) -> float:
    """Runs per second of a queue drained: ``n`` runs of ``stepper`` with ``body_input``
    submitted (not timed) while the gated ``processes`` do not serve yet, then timed from
    their gates' opening to the last end, found as ``ends`` says. With ``cpu``, the CPU the
    workers (and the ``server``'s processes, when given) spent meanwhile is added to it."""
    if ends == "committed":
        return await _drained_as_committed(url, n, processes, body_input, cpu, server)
    pids = [process.pid for process in processes]
    async with open_runtime(url) as runtime:
        handles = []

        async def submit() -> None:
            handles.append(await runtime.submit("stepper", input=dict(body_input)))

        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(submit)
        states: list[RunState] = []

        async def wait(handle: Any) -> None:
            states.append(await handle.wait())

        with (cpu or DrainCpu()).counting(pids, server):
            started = time.perf_counter()
            open_gates(processes)
            if ends == "waited":
                async with trio.open_nursery() as nursery:
                    for handle in handles:
                        nursery.start_soon(wait, handle)
            else:
                await _until_ended(runtime)
            elapsed = time.perf_counter() - started
        if ends == "polled":
            counts = await runtime.count_runs()
            assert counts.natural_end == n, dict(counts)
            return n / elapsed
    assert states.count(DONE) == n, [state for state in states if state != DONE][:3]
    return n / elapsed


async def _submit_and_wait(url: str, n: int, ended: list[RunState] | None = None) -> float:
    """Runs per second; every run must end naturally, unless ``ended`` is given: then each
    end is put there instead."""
    async with open_runtime(url) as runtime:
        states: list[RunState] = []

        async def one() -> None:
            handle = await runtime.submit("stepper", input=dict(STEP))
            states.append(await handle.wait())

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(one)
        elapsed = time.perf_counter() - started
    if ended is not None:
        ended.extend(states)
    else:
        assert states.count(DONE) == n, [state for state in states if state != DONE][:3]
    return n / elapsed


def _cpu_times() -> tuple[int, int]:
    """The machine's busy and total CPU ticks so far, all cores (``/proc/stat``)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


@contextlib.contextmanager
def cpu_busy() -> Iterator[list[float]]:
    """The share of the machine's CPU time that was busy during the block (1.0: every core
    all the time), in the list it yields; [] where ``/proc/stat`` is not there."""
    found: list[float] = []
    try:
        busy, total = _cpu_times()
    except OSError:
        yield found
        return
    yield found
    busy_after, total_after = _cpu_times()
    if total_after > total:
        found.append((busy_after - busy) / (total_after - total))


def bench_workers(stores: Stores, n: int, rounds: int, out: Figures) -> None:
    print(f"\n== submit -> claimed -> Ended, {n} runs, worker processes (runs/s) ==")
    table: Figures = out.setdefault("workers", {"runs": n, "rounds": rounds})
    for kind in stores.measured(table):
        rates: dict[str, float] = {}
        peaks: dict[str, int] = {}
        busy: dict[str, float] = {}
        for count in WORKER_COUNTS:
            found: list[float] = []
            loads: list[float] = []
            for _ in range(rounds):
                url = stores.fresh(kind)
                trio.run(_touch, url)
                # The runtime's default lease: a busy two-core machine must not lose claims.
                with (
                    workers(url, count, "--concurrency", "64", "--lease", "30", "--poll", "0.05"),
                    connection_peak(stores.server, url) as peak,
                ):
                    with cpu_busy() as load:
                        found.append(trio.run(_submit_and_wait, url, n))
                    loads.extend(load)
                peaks[str(count)] = max(peaks.get(str(count), 0), peak[0])
            rates[str(count)] = statistics.median(found)
            if loads:
                busy[str(count)] = statistics.median(loads)
        table[kind] = {"runs/s": rates, "machine CPU busy": busy}
        shown = "   ".join(f"{c} worker(s) {rate:7,.0f}" for c, rate in rates.items())
        print(f"  {kind:10s} {shown}")
        if busy:
            # All cores busy: more processes cannot add runs, whatever the store allows.
            shown = "   ".join(f"{c} worker(s) {share:7.0%}" for c, share in busy.items())
            print(f"  {'':10s} machine CPU busy:  {shown}")
        if kind == "postgresql":
            table[kind]["connections at most"] = peaks
            shown = "   ".join(f"{c} worker(s) {peak}" for c, peak in peaks.items())
            print(f"  {'':10s} connections at most (workers + submitter): {shown}")


@attrs.frozen
class DrainLoad:
    """One row of the drain: the runs each worker holds at once (``serve(concurrency=)``)
    and what each run's body does."""

    label: str
    concurrency: int
    body_input: Mapping[str, object]


DRAIN_LOADS: Final = (
    DrainLoad("concurrency 64, one step", 64, STEP),
    DrainLoad("concurrency 256, one step", 256, STEP),
    # A body that returns at once, as a pgqueuer job does: claimed, started, ended (three
    # fenced commits and three events a run, in the workers' shared transactions).
    DrainLoad("concurrency 256, no step", 256, NOOP),
)
"""The drain's rows: the workers part's load, the same with four times the runs held,
and a body with no step."""


def _drained(
    stores: Stores,
    kind: str,
    n: int,
    rounds: int,
    concurrency: int,
    body_input: Any,
    cpu: dict[str, DrainCpu] | None = None,
    ends: Ends = "waited",
) -> dict[str, float]:
    """Runs per second of `_drain` by 1, 2 and 4 gated workers (medians of ``rounds``),
    its ends found as ``ends`` says; with ``cpu``, the CPU each worker count spent in all
    its rounds, by its count."""
    rates: dict[str, float] = {}
    for count in WORKER_COUNTS:
        found: list[float] = []
        spent = DrainCpu()
        for _ in range(rounds):
            url = stores.fresh(kind)
            trio.run(_touch, url)
            with workers(
                url,
                count,
                *("--concurrency", str(concurrency), "--lease", "30", "--poll", "0.05"),
                gate=True,
            ) as processes:
                found.append(
                    trio.run(
                        functools.partial(
                            _drain,
                            url,
                            n,
                            processes,
                            body_input,
                            cpu=spent,
                            server=stores.server if kind == "postgresql" else None,
                            ends=ends,
                        )
                    )
                )
        rates[str(count)] = statistics.median(found)
        if cpu is not None:
            cpu[str(count)] = spent
    return rates


def bench_drain(stores: Stores, n: int, rounds: int, out: Figures) -> None:
    """A queue drained, as pgqueuer's rows measure it: ``n`` runs stored first, then 1, 2
    and 4 worker processes started on them at one moment, timed to the last end; for each
    of `DRAIN_LOADS`."""
    print(f"\n== drain: {n} runs queued first, then worker processes (runs/s) ==")
    table: Figures = out.setdefault("drain", {"runs": n, "rounds": rounds})
    for kind in stores.measured(table):
        by_load: dict[str, dict[str, float]] = {}
        cpu_by_load: dict[str, dict[str, dict[str, float]]] = {}
        for load in DRAIN_LOADS:
            cpu: dict[str, DrainCpu] = {}
            rates = _drained(stores, kind, n, rounds, load.concurrency, load.body_input, cpu)
            by_load[load.label] = rates
            shown = "   ".join(f"{c} worker(s) {rate:7,.0f}" for c, rate in rates.items())
            label = kind if load == DRAIN_LOADS[0] else ""
            print(f"  {label:10s} {load.label:26s}  {shown}")
            # CPU a run, over all rounds: where a drain bound by the machine's cores spends.
            per_run = {
                c: {"workers": spent.workers / (n * rounds) * 1e3}
                | ({"server": spent.server / (n * rounds) * 1e3} if kind == "postgresql" else {})
                for c, spent in cpu.items()
            }
            cpu_by_load[load.label] = per_run
            shown = "   ".join(
                f"{c}: " + ", ".join(f"{who} {ms:.3f}" for who, ms in parts.items())
                for c, parts in per_run.items()
            )
            print(f"  {'':10s} {'  CPU ms a run':26s}  {shown}")
        table[kind] = {"runs/s by load": by_load, "CPU ms a run by load": cpu_by_load}


WAITING_CONCURRENCY: Final = 32
WAITING_DELAY: Final = 0.2


def bench_waiting(stores: Stores, n: int, rounds: int, out: Figures) -> None:
    """Runs whose bodies wait (for a model's or a tool's answer, `WAITING_DELAY` seconds)
    before their one step, each worker holding `WAITING_CONCURRENCY` at once: the load
    more workers are for. A worker's held runs bound its rate (at most
    ``WAITING_CONCURRENCY / WAITING_DELAY`` runs a second), so 1, 2 and 4 workers should
    give about 1, 2 and 4 times the runs while the machine's cores are not all busy; the
    ratio of 4 workers to 2 is taken in each round (medians of ``rounds``), with the share
    of the machine's CPU that was busy and the CPU a run took (workers and server)."""
    print(
        f"\n== waiting bodies: {n} runs queued first, each waiting {WAITING_DELAY} s, a worker"
        f" holding {WAITING_CONCURRENCY} (runs/s, medians of {rounds} rounds) =="
    )
    table: Figures = out.setdefault(
        "waiting",
        {"runs": n, "delay": WAITING_DELAY, "concurrency": WAITING_CONCURRENCY, "rounds": rounds},
    )
    bound = WAITING_CONCURRENCY / WAITING_DELAY
    for kind in stores.measured(table):
        found: list[dict[str, float]] = []
        loads: list[float] = []
        spent: list[dict[str, DrainCpu]] = []
        for _ in range(rounds):
            cpu: dict[str, DrainCpu] = {}
            with cpu_busy() as load:
                found.append(
                    _drained(
                        stores,
                        kind,
                        n,
                        1,
                        WAITING_CONCURRENCY,
                        {"steps": 1, "delay": WAITING_DELAY},
                        cpu,
                    )
                )
            loads += load
            spent.append(cpu)
        rates = {c: statistics.median(r[c] for r in found) for c in found[0]}
        four_over_two = statistics.median(r["4"] / r["2"] for r in found)
        per_run = {
            c: {
                "workers": statistics.median(cpu[c].workers for cpu in spent) / n * 1e3,
                "server": statistics.median(cpu[c].server for cpu in spent) / n * 1e3,
            }
            for c in found[0]
        }
        shown = "   ".join(
            f"{c} worker(s) {rate:7,.0f} ({rate / (bound * int(c)):.0%} of its bound)"
            for c, rate in rates.items()
        )
        print(f"  {kind:10s} {shown}")
        each = ", ".join(f"{r['4'] / r['2']:.2f}" for r in found)
        print(f"  {'':10s} 4 workers / 2 workers {four_over_two:.2f}  (each round: {each})")
        table[kind] = {
            "runs/s": rates,
            "bound per worker": bound,
            "4 workers / 2 workers": four_over_two,
            "rounds": found,
            "CPU ms a run": per_run,
        }
        shown = "   ".join(
            f"{c}: workers {ms['workers']:.3f}"
            + (f", server {ms['server']:.3f}" if kind == "postgresql" else "")
            for c, ms in per_run.items()
        )
        print(f"  {'':10s} CPU ms a run  {shown}")
        if loads:
            busy = statistics.median(loads)
            table[kind]["machine CPU busy"] = busy
            print(f"  {'':10s} machine CPU busy (median of the rounds): {busy:.0%}")


NOOP_CONCURRENCY: Final = (256, 1024)
NOOP_WAYS: Final[tuple[tuple[int, Ends], ...]] = (
    *((concurrency, "waited") for concurrency in NOOP_CONCURRENCY),
    (NOOP_CONCURRENCY[-1], "polled"),
    (NOOP_CONCURRENCY[-1], "committed"),
)
"""Our drains in each round: every concurrency with each run's end waited for, and the
greatest with the ends polled and timed as committed (`Ends`)."""
WHO: Final[Mapping[Ends, str]] = {
    "waited": "ours,",
    "polled": "ours (ends polled),",
    "committed": "ours (ends as committed),",
}
"""How `bench_noop` names our drains, by how their ends are found."""
PGQUEUER_WAYS: Final = tuple((consumers, batch) for consumers in (1, 5) for batch in (10, 100))


def bench_noop(stores: Stores, n: int, rounds: int, out: Figures) -> None:
    """A no-op drain against pgqueuer's, in the same rounds: ``n`` runs whose body returns
    at once drained by 1, 2 and 4 gated workers (``concurrency=`` each of
    `NOOP_CONCURRENCY`: the runs a worker holds, and with them its transactions' size), and
    ``n`` pgqueuer jobs drained by 1 and 5 consumers at batch 10 and 100; in each round our
    best over pgqueuer's best, and the median of those ratios; then the same for ours at
    concurrency 1,024 with its ends polled, and timed as committed (`NOOP_WAYS`). Beside
    each point, the CPU a run (or job) took in the drain's processes, in the server's and
    (ours) in the process waiting for every end, and the machine's busy share over the
    round: on a machine whose cores are all busy, a drain's rate is its CPU a run's
    inverse, whatever the store allows.

    Two floors in the same rounds say what the target asks of this machine: a run's
    writes, bare (`_bare_run`: the rows a no-op run's start and end change, in two
    statements a batch, drained as pgqueuer's jobs are), and a worker's share of a run with
    no store I/O (`_serving_cpu`: no-op runs queued on the memory store, then served at
    the drain's concurrency, their commits through the mailbox: the kernel and the
    rules). Their sum (the bare writes' at their cheapest way, its client's and the
    server's CPU) is the least CPU a run of ours can take here; the machine's cores over
    it, the most runs a second it can drain. The kernel alone as a start sees it
    (`_kernel_cpu`: started and waited for, the starting side's work too) is shown beside
    it, not in the floor: a drain's worker neither starts nor waits. And in each round a
    deployed worker's drain (`_cli_drain`: ``awaken-trio worker`` itself, its INFO lines
    written), beside ours and not in our best: the benchmark's own workers write no
    log."""
    print(
        f"\n== no-op drain against pgqueuer's: {n} runs / jobs queued first (runs/s, medians"
        f" of {rounds} rounds) =="
    )
    table: Figures = out.setdefault("noop", {"runs": n, "rounds": rounds})
    try:
        importlib.import_module("pgqueuer")
    except ImportError:
        print("  pgqueuer: not installed (pip install -e '.[bench]')")
        table["unavailable"] = "pgqueuer is not installed"
        return
    missing = stores.usable("postgresql")
    if missing is not None:
        print(f"  postgresql not measured: {missing}")
        table["unavailable"] = missing
        return
    found: list[dict[str, float]] = []
    cpu_found: list[dict[str, dict[str, float]]] = []
    kernel: list[float] = []
    serving: list[float] = []
    loads: list[float] = []
    postmaster = int((stores.server.data_dir / "postmaster.pid").read_text().split()[0])
    for _ in range(rounds):
        rates: dict[str, float] = {}
        cpu: dict[str, dict[str, float]] = {}
        with cpu_busy() as load:
            for concurrency, ends in NOOP_WAYS:
                spent: dict[str, DrainCpu] = {}
                ours = _drained(stores, "postgresql", n, 1, concurrency, NOOP, spent, ends)
                for c, rate in ours.items():
                    way = f"{WHO[ends]} {c} worker(s), concurrency {concurrency}"
                    rates[way] = rate
                    cpu[way] = spent[c].per_run(n)
            deployed = DrainCpu()
            way = f"awaken-trio worker (INFO lines), {CLI_WORKERS} workers, ends polled"
            rates[way] = _cli_drain(
                stores.fresh("postgresql"), n, NOOP_CONCURRENCY[-1], deployed, stores.server
            )
            cpu[way] = deployed.per_run(n)
            for (who, label), (consumers, batch) in itertools.product(
                (("pgqueuer", "pgqueuer"), ("bare", "a run's writes, bare")), PGQUEUER_WAYS
            ):
                way = f"{label}, {consumers} consumer(s), batch {batch}"
                (rate, _, drain_cpu, server_cpu), _ = _peer_rates(
                    stores.server,
                    who,
                    stores.fresh("postgresql"),
                    *map(str, (n, consumers, batch, postmaster)),
                )
                rates[way] = rate
                cpu[way] = DrainCpu(drain_cpu, server_cpu).per_run(n)
        loads += load
        kernel.append(trio.run(_kernel_cpu, n))
        serving.append(trio.run(_serving_cpu, n, NOOP_CONCURRENCY[-1]))
        found.append(rates)
        cpu_found.append(cpu)

    def best(rates: Mapping[str, float], who: str) -> float:
        return max(rate for way, rate in rates.items() if way.startswith(who))

    ratios = [best(r, "ours, ") / best(r, "pgqueuer") for r in found]
    polled = [best(r, "ours (ends polled)") / best(r, "pgqueuer") for r in found]
    committed = [best(r, "ours (ends as committed)") / best(r, "pgqueuer") for r in found]
    rates = {way: statistics.median(r[way] for r in found) for way in found[0]}
    cpu = {
        way: {
            part: statistics.median(c[way][part] for c in cpu_found)
            for part in ("drain", "server", "waiter")
        }
        for way in found[0]
    }
    for way, rate in rates.items():
        print(
            f"  {way:44s} {rate:7,.0f}/s   CPU a run: drain {cpu[way]['drain']:.3f} ms,"
            f" server {cpu[way]['server']:.3f} ms, waiter {cpu[way]['waiter']:.3f} ms"
        )
    shown = ", ".join(f"{ratio:.2f}" for ratio in ratios)
    print(f"  ours' best / pgqueuer's best: {statistics.median(ratios):.2f}  (each round: {shown})")
    shown = ", ".join(f"{ratio:.2f}" for ratio in polled)
    print(
        f"  ours' best, ends polled / pgqueuer's best: {statistics.median(polled):.2f}"
        f"  (each round: {shown})"
    )
    shown = ", ".join(f"{ratio:.2f}" for ratio in committed)
    print(
        f"  ours' best, ends as committed / pgqueuer's best: {statistics.median(committed):.2f}"
        f"  (each round: {shown})"
    )
    bare = [best(r, "a run's") / best(r, "pgqueuer") for r in found]
    print(f"  a run's writes, bare, best / pgqueuer's best: {statistics.median(bare):.2f}")

    def best_cpu(
        rates: Mapping[str, float], spent: Mapping[str, Mapping[str, float]], who: str
    ) -> float:
        way = max((w for w in rates if w.startswith(who)), key=rates.__getitem__)
        return spent[way]["drain"] + spent[way]["server"]

    # The CPU a unit of work takes, each side at its best way of the round (ours timed as
    # committed, as pgqueuer's drain is): on a machine whose cores are all busy a rate is
    # its inverse, and unlike a rate it does not move with how the rounds' processes
    # happened to be scheduled on two cores.
    by_cpu = [
        best_cpu(r, c, "pgqueuer") / best_cpu(r, c, "ours (ends as committed)")
        for r, c in zip(found, cpu_found, strict=True)
    ]
    shown = ", ".join(f"{ratio:.2f}" for ratio in by_cpu)
    print(
        "  a job's CPU / a run's, each at its best way (workers + server):"
        f" {statistics.median(by_cpu):.2f}  (each round: {shown})"
    )
    # The least CPU a run can take here: a worker's with no store I/O (the kernel and the
    # rules, serving), and the bare writes' at their cheapest way, client and server.
    least_writes = min(
        parts["drain"] + parts["server"] for way, parts in cpu.items() if way.startswith("a run's")
    )
    least = statistics.median(serving) + least_writes
    cores = _cores()
    print(
        f"  a worker serving from the memory store: {statistics.median(serving):.3f} ms CPU"
        f" a run; + the bare writes' least CPU {least_writes:.3f} ms = {least:.3f} ms:"
        f" at most {cores / (least * 1e-3):,.0f} runs/s on {cores} cores"
        f" (pgqueuer's best: {statistics.median(best(r, 'pgqueuer') for r in found):,.0f})"
    )
    print(f"  kernel alone, started and waited for: {statistics.median(kernel):.3f} ms CPU a run")
    if loads:
        print(f"  machine CPU busy (median of the rounds): {statistics.median(loads):.0%}")
    table.update(
        {
            "runs/s": rates,
            "CPU ms a run": cpu,
            "ours' best / pgqueuer's best": statistics.median(ratios),
            "ratio by round": ratios,
            "ours' best, ends polled / pgqueuer's best": statistics.median(polled),
            "ends polled, ratio by round": polled,
            "ours' best, ends as committed / pgqueuer's best": statistics.median(committed),
            "ends as committed, ratio by round": committed,
            "bare writes' best / pgqueuer's best": statistics.median(bare),
            "a job's CPU / a run's, each at its best way": statistics.median(by_cpu),
            "by CPU, ratio by round": by_cpu,
            "kernel alone CPU ms a run": statistics.median(kernel),
            "serving from the memory store CPU ms a run": statistics.median(serving),
            "bare writes' least CPU ms a run": least_writes,
            "least CPU ms a run": least,
            "most runs/s on this machine": cores / (least * 1e-3),
            "rounds": found,
            "CPU by round": cpu_found,
            "machine CPU busy": statistics.median(loads) if loads else None,
        }
    )


def bench_backlog(stores: Stores, n: int, out: Figures, *, statements: bool) -> None:
    """A backlog submitted at once: the store grows by ``n`` runs within one load, faster
    than PostgreSQL's autovacuum gathers statistics, so a statement planned while the
    table was small runs against a table many times larger. With ``statements`` (the
    server runs pg_stat_statements), the server's time and CPU per run are shown too, and
    the statements that took most of it."""
    print(f"\n== backlog: {n:,} runs submitted at once, 4 worker processes (runs/s) ==")
    table: Figures = out.setdefault("backlog", {"runs": n, "workers": 4})
    for kind in stores.measured(table):
        url = stores.fresh(kind)
        trio.run(_touch, url)
        watched = statements and kind == "postgresql"
        with (
            workers(url, 4, "--concurrency", "64", "--lease", "30", "--poll", "0.05"),
            cpu_busy() as load,
        ):
            if watched:
                _admin(url, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                _admin(url, "SELECT pg_stat_statements_reset()")
                cpu_before = _server_cpu(stores.server)
            rate = trio.run(_submit_and_wait, url, n)
            if watched:
                cpu = (_server_cpu(stores.server) - cpu_before) / n
                top = _admin(url, _TOP_STATEMENTS)
                handed = _admin(url, _HANDED_OUT)
        row: Figures = {"runs/s": rate, "machine CPU busy": load[0] if load else None}
        busy = f"   machine CPU busy {load[0]:.0%}" if load else ""
        print(f"  {kind:10s} {rate:7,.0f}{busy}")
        if watched:
            spent = sum(float(str(ms)) for _, ms, _ in top) / n
            row |= {"server ms/run": spent, "server CPU ms/run": cpu * 1000}
            print(f"  {'':10s} server time {spent:.3f} ms a run, server CPU {cpu * 1000:.3f} ms")
            per_claimed = float(str(handed[0][0] or 0)) / n
            row["runs handed out per run claimed"] = per_claimed
            print(f"  {'':10s} runs handed out per run claimed {per_claimed:.2f}")
            for calls, ms, query in top[:8]:
                share = float(str(ms)) / n * 1000
                print(f"  {'':10s} {share:7.1f} us/run {int(str(calls)) / n:5.2f}/run  {query}")
        table[kind] = row


_TOP_STATEMENTS = (
    "SELECT calls, total_exec_time, left(regexp_replace(query, '\\s+', ' ', 'g'), 70)"
    " FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database"
    " WHERE datname = current_database()) ORDER BY total_exec_time DESC"
)


_HANDED_OUT = (
    # The rows the looks for work returned (queued runs, and due ones), every run claimed
    # once: the runs handed out per run claimed.
    "SELECT sum(rows) FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database"
    " WHERE datname = current_database()) AND (query LIKE '%r.queued_order IS NOT NULL%'"
    " OR query LIKE '%t.wake_at <= %')"
)


def _admin(url: str, statement: str) -> list[tuple[object, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement.encode())
        return cur.fetchall() if cur.description else []


def _server_cpu(server: Any) -> float:
    """Seconds of CPU the server's processes used so far (the postmaster's children, from
    ``/proc``; a backend that exited meanwhile is not counted)."""
    return _children_cpu(int((server.data_dir / "postmaster.pid").read_text().split()[0]))


def _children_cpu(postmaster: int) -> float:
    """Seconds of CPU ``postmaster`` and its children used so far (``/proc``)."""

    def ours(pid: str) -> bool:
        if int(pid) == postmaster:
            return True
        fields = _stat(pid)
        return fields is not None and int(fields[1]) == postmaster

    return _processes_cpu([int(pid) for pid in os.listdir("/proc") if pid.isdigit() and ours(pid)])


LEASES = (1.0, 5.0, 30.0)


def bench_lease(stores: Stores, n: int, out: Figures) -> None:
    print(f"\n== lease: {n} runs, 4 worker processes, lease 1 / 5 / 30 s ==")
    table: Figures = out.setdefault("lease", {"runs": n, "workers": 4})
    for kind in stores.measured(table):
        rows: dict[str, Figures] = {}
        for lease in LEASES:
            url = stores.fresh(kind)
            trio.run(_touch, url)
            with tempfile.TemporaryFile("w+") as said:
                ended: list[RunState] = []
                with workers(url, 4, "--concurrency", "64", "--lease", str(lease), stderr=said):
                    rate = trio.run(_submit_and_wait, url, n, ended)
                said.seek(0)
                lost = sum("was lost" in line for line in said)
            others = [repr(state) for state in ended if state != DONE]
            rows[f"{lease:g}"] = {
                "runs/s": rate,
                "claims lost": lost,
                "runs not ended naturally": len(others),
                "first other end": others[0] if others else None,
            }
        table[kind] = rows
        for shown, row in rows.items():
            print(
                f"  {kind:10s} lease {shown:>2s} s: {row['runs/s']:6,.0f} runs/s,"
                f" {row['claims lost']} claims lost, {row['runs not ended naturally']} runs"
                f" not ended naturally {row['first other end'] or ''}"
            )


# ---------------------------------------------------------------------------- peers


def _dbos_run(url: str, n: int, threads: int) -> float:
    """DBOS workflows per second: ``n`` one-step workflows enqueued from ``threads``
    threads, run by DBOS's executor in this process, every result read back."""
    dbos: Any = importlib.import_module("dbos")
    logging.disable(logging.INFO)  # DBOS logs every launch and shutdown at INFO
    DBOS = dbos.DBOS
    DBOS(config={"name": "bench", "system_database_url": url})

    def step(x: int) -> int:
        return x + 1

    durable_step = DBOS.step()(step)

    def workflow(x: int) -> Any:
        return durable_step(x)

    durable_workflow = DBOS.workflow()(workflow)
    DBOS.launch()
    try:
        queue = DBOS.register_queue("bench", polling_interval_sec=0.01)
        started = time.perf_counter()
        if threads == 1:
            handles = [queue.enqueue(durable_workflow, i) for i in range(n)]
        else:
            with concurrent.futures.ThreadPoolExecutor(threads) as pool:
                handles = list(pool.map(lambda i: queue.enqueue(durable_workflow, i), range(n)))
        results = [handle.get_result() for handle in handles]
        elapsed = time.perf_counter() - started
    finally:
        DBOS.destroy()
    assert results == [i + 1 for i in range(n)], results[:3]
    return n / elapsed


def _pgqueuer_run(
    url: str, n: int, consumers: int, batch: int, postmaster: int | None = None
) -> tuple[float, float, float, float]:
    """pgqueuer jobs per second: ``n`` jobs enqueued, then dequeued and acknowledged by
    ``consumers`` queue managers (a connection each); timed from the consumers' start to
    the last job done (the drain), and from the first enqueue to the last job done. Then
    the CPU seconds this process, and the server's processes (those of ``postmaster``,
    when given; else 0.0), spent in the drain."""
    psycopg: Any = importlib.import_module("psycopg")
    pgqueuer: Any = importlib.import_module("pgqueuer")
    logging.disable(logging.WARNING)

    async def main() -> tuple[float, float, float, float]:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        queries = pgqueuer.Queries(pgqueuer.PsycopgDriver(conn))
        await queries.install()
        enqueued = time.perf_counter()
        await enqueue_jobs(queries, n)
        managers, connections, finished = await pgqueuer_consumers(
            url, consumers, n, time.perf_counter
        )
        server_before = 0.0 if postmaster is None else _children_cpu(postmaster)
        cpu_before = time.process_time()
        started = time.perf_counter()
        tasks = [asyncio.create_task(m.run(batch_size=batch)) for m in managers]
        ended = await asyncio.wait_for(finished, 300)
        drain_cpu = time.process_time() - cpu_before
        server_cpu = 0.0 if postmaster is None else _children_cpu(postmaster) - server_before
        await asyncio.sleep(0.5)  # let the last acknowledgements reach the table
        for manager in managers:
            manager.shutdown.set()
        await asyncio.gather(*tasks)
        left = await (await conn.execute("SELECT count(*) FROM pgqueuer")).fetchone()
        assert left[0] == 0, f"{left[0]} jobs left unacknowledged"
        for connection in [conn, *connections]:
            await connection.close()
        return n / (ended - started), n / (ended - enqueued), drain_cpu, server_cpu

    return asyncio.run(main())


async def _noop(ctx: RunContext) -> int:
    return 1


async def _kernel_cpu(n: int) -> float:
    """CPU ms a run of ``n`` no-op runs takes in a runtime on the memory store (each
    started and waited for, all at once): the kernel's own share of a run, with no store
    I/O at all."""
    async with open_runtime("memory://") as runtime:
        started = time.process_time()

        async def one() -> None:
            await (await runtime.start(_noop)).wait()

        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(one)
        return (time.process_time() - started) / n * 1e3


async def _serving_cpu(n: int, concurrency: int) -> float:
    """CPU ms a run of ``n`` no-op runs queued on the memory store, then served by the
    same runtime at ``concurrency`` until none is left queued or running: what a drain's
    worker does of a run with no store I/O (the kernel and the rules, none of a start's or
    a wait's). The measuring process's own asking whether the drain is over is taken
    out. The runs are served with the heap settled as a worker settles its own once it
    has started (`_settled_heap`: the queue is a worker's store's, not its heap's), and
    their commits go through the mailbox, as a store with I/O takes them, not applied in
    the committing task's step (``inline``): 0.051 against 0.041 ms a run (medians of
    three drains of 20,000 each, in turns)."""
    # (max_ended_runs: so that every end is still counted at the end.)
    store = MemoryStore(max_ended_runs=n, inline=False)
    async with open_runtime(store, bodies={"noop": _noop}, poll=0.05) as runtime:
        for _ in range(n):
            await runtime.submit("noop")
        asked = 0.0
        with _settled_heap(concurrency):
            started = time.process_time()
            async with trio.open_nursery() as nursery:
                await nursery.start(functools.partial(runtime.serve, concurrency=concurrency))
                while True:
                    await trio.sleep(0.1)
                    before = time.process_time()
                    counts = await runtime.count_runs()
                    asked += time.process_time() - before
                    if counts.queued == 0 and counts.running == 0:
                        break
                nursery.cancel_scope.cancel()
            spent = time.process_time() - started - asked
        assert counts.natural_end == n, dict(counts)
        return spent / n * 1e3


@contextlib.contextmanager
def _settled_heap(concurrency: int) -> Iterator[SettledHeap]:
    """This process's heap settled as ``awaken-trio worker`` serving ``concurrency`` runs
    at once settles its own once it has started (`settle_heap`: its objects alive frozen
    out of the collector, the young generation collected less often), then as it was: a
    benchmark's process goes on to measure other things.

    Why the floor needs it: the memory store holds the queue in the measuring process's
    heap, where a worker's collector never walks it (a worker's queue is in its store),
    and at CPython's threshold the collector walked it as the runs were served: 0.052
    against 0.044 ms a run (medians of three drains of 20,000 each, in turns)."""
    threshold = gc.get_threshold()
    try:
        yield settle_heap(concurrency)
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


async def _queued_only(url: str, n: int, body_input: Mapping[str, object] = NOOP) -> None:
    """``n`` runs of ``stepper`` queued (a no-op body's input unless ``body_input`` is
    given), nothing else."""
    async with open_runtime(url) as runtime, trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(functools.partial(runtime.submit, "stepper", input=dict(body_input)))


CLI_WORKERS: Final = 2
CLI_BODIES: Final = "tests.multiprocess.mp_bodies:BODIES"


@contextlib.contextmanager
def cli_workers(url: str, concurrency: int, logs: Path) -> Iterator[list[int]]:
    """`CLI_WORKERS` processes of ``awaken-trio worker`` serving ``url`` (``concurrency``
    each), their stderr (their log lines) written to ``w0.log``, ``w1.log`` ... in
    ``logs``; their pids. Killed on leaving."""
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(CLI_WORKERS):
            with open(logs / f"w{i}.log", "wb") as log:
                processes.append(
                    subprocess.Popen(
                        [
                            *(sys.executable, "-m", "awaken_trio", "worker", CLI_BODIES),
                            *("--store", url, "--concurrency", str(concurrency)),
                            *("--lease", "30", "--poll", "0.05"),
                        ],
                        cwd=ROOT,
                        stdout=subprocess.DEVNULL,
                        stderr=log,
                        env={**os.environ, "PYTHONPATH": str(ROOT)},
                    )
                )
        yield [process.pid for process in processes]
    finally:
        for process in processes:
            process.kill()
            process.wait()


def _cli_drain(url: str, n: int, concurrency: int, cpu: DrainCpu, server: Any) -> float:
    """Runs per second of a queue drained by ``awaken-trio worker`` itself, as deployed:
    ``n`` runs of ``stepper`` with a no-op input queued first, then `cli_workers` writing
    their INFO lines (two a run) to files.

    The command has no gate of its own, so the store is the gate: a transaction of this
    process holds the runs table in EXCLUSIVE mode (reads pass; no run can be claimed or
    started) until every worker has registered, then ends. Timed from then to the last
    end, found by asking the store (as ``ends="polled"``); the CPU the workers, the server
    and this process spent meanwhile is added to ``cpu``. Every run ended naturally, and
    each worker wrote its end's line."""
    trio.run(_queued_only, url, n)
    psycopg: Any = importlib.import_module("psycopg")
    with tempfile.TemporaryDirectory() as logs, psycopg.connect(url) as gate:
        gate.execute("LOCK TABLE awaken.runs IN EXCLUSIVE MODE")
        with cli_workers(url, concurrency, Path(logs)) as pids:
            rate = trio.run(_cli_drained, url, n, pids, gate.rollback, cpu, server)
            deadline = time.monotonic() + 10  # the last lines come after their commits
            while (logged := _lines(Path(logs), " event=end")) < n:
                assert time.monotonic() < deadline, f"{logged} end lines for {n} runs"
                time.sleep(ENDS_POLLED_EVERY)
    return rate


def _lines(logs: Path, holding: str) -> int:
    """The lines of the logs in ``logs`` that hold ``holding``."""
    return sum(path.read_text().count(holding) for path in logs.glob("*.log"))


async def _cli_drained(
    url: str, n: int, pids: list[int], open_gate: Callable[[], None], cpu: DrainCpu, server: Any
) -> float:
    """`_cli_drain`'s timed part: the gate opened once every worker has registered, then
    the store asked for the last end."""
    async with open_runtime(url) as runtime:
        with trio.fail_after(60):
            while True:
                if len(await runtime.list_workers()) == len(pids):
                    break
                await trio.sleep(ENDS_POLLED_EVERY)
        with cpu.counting(pids, server):
            started = time.perf_counter()
            open_gate()
            await _until_ended(runtime)
            elapsed = time.perf_counter() - started
        counts = await runtime.count_runs()
    assert counts.natural_end == n, dict(counts)
    return n / elapsed


# A run's writes in the store's own tables, bare: what a no-op run's start and end must
# change for its guarantees (the row's state as it starts and as it ends, a claim with an
# epoch and a lease held while its body runs, an event for each), and nothing of the
# store's own machinery (no look and reservation, no rules read back, no seq watermark, no
# token for a lost answer, no writes count). Each is one statement for a whole batch.
_BARE_START: Final = b"""
WITH picked AS (
  SELECT run_id FROM awaken.runs WHERE queued_order IS NOT NULL AND name = 'stepper'
  ORDER BY created LIMIT %(batch)s FOR UPDATE SKIP LOCKED),
started AS (
  UPDATE awaken.runs r SET kind = 'running', state = '{"kind":"running","generation":1}',
    generation = 1, epoch = 1, attempt_epoch = 1, queued_order = NULL,
    updated_at = %(now)s, started_at = %(now)s, worker_id = %(worker)s
  FROM picked WHERE r.run_id = picked.run_id RETURNING r.run_id, r.thread_id),
claimed AS (
  INSERT INTO awaken.claims (run_id, owner, epoch, lease_until)
  SELECT run_id, %(worker)s, 1, %(now)s + 30 FROM started),
logged AS (
  INSERT INTO awaken.events (seq, run_id, thread_id, generation, kind, state, detail, at)
  SELECT nextval('awaken.event_seqs'), run_id, thread_id, 1, 'committed',
    '{"kind":"running","generation":1}', '{"source":"serve"}', %(now)s FROM started)
SELECT run_id FROM started
"""
_BARE_END: Final = b"""
WITH ended AS (
  UPDATE awaken.runs SET kind = 'ended',
    state = '{"kind":"ended","cause":{"kind":"natural_end"}}', attempt_epoch = NULL,
    result = '{"steps":0}', updated_at = %(now)s, ended_at = %(now)s, cause = 'natural_end'
  WHERE run_id = ANY(%(ids)s) RETURNING run_id, thread_id),
released AS (DELETE FROM awaken.claims WHERE run_id = ANY(%(ids)s)),
logged AS (
  INSERT INTO awaken.events (seq, run_id, thread_id, generation, kind, state, detail, at)
  SELECT nextval('awaken.event_seqs'), run_id, thread_id, 1, 'committed',
    '{"kind":"ended","cause":{"kind":"natural_end"}}', '{}', %(now)s FROM ended)
SELECT pg_notify('awaken_trio.awaken', 'bare')
"""


def _bare_run(
    url: str, n: int, consumers: int, batch: int, postmaster: int | None = None
) -> tuple[float, float, float, float]:
    """A no-op drain's writes, bare (`_BARE_START`, `_BARE_END`), as `_pgqueuer_run`
    measures pgqueuer's: ``n`` runs queued in the store's schema first, then ``consumers``
    connections (asyncio, in one process) each taking ``batch`` runs at a time, starting
    them in one transaction and ending them in another, each committed with fsync. Runs
    per second of the drain (twice, as `_pgqueuer_run` gives two rates), then the CPU
    seconds this process, and the server's processes, spent in it."""
    psycopg: Any = importlib.import_module("psycopg")
    trio.run(_queued_only, url, n)

    async def main() -> tuple[float, float, float, float]:
        connections = [await psycopg.AsyncConnection.connect(url) for _ in range(consumers)]
        done = 0

        async def consume(conn: Any, worker: str) -> None:
            nonlocal done
            while True:
                now = time.time()
                async with conn.transaction():
                    found = await conn.execute(
                        _BARE_START, {"batch": batch, "now": now, "worker": worker}
                    )
                    ids = [run_id for (run_id,) in await found.fetchall()]
                if not ids:
                    return
                async with conn.transaction():
                    await conn.execute(_BARE_END, {"ids": ids, "now": time.time()})
                done += len(ids)

        server_before = 0.0 if postmaster is None else _children_cpu(postmaster)
        cpu_before = time.process_time()
        started = time.perf_counter()
        await asyncio.gather(*(consume(c, f"bare{i}") for i, c in enumerate(connections)))
        elapsed = time.perf_counter() - started
        drain_cpu = time.process_time() - cpu_before
        server_cpu = 0.0 if postmaster is None else _children_cpu(postmaster) - server_before
        assert done == n, f"{done} of {n} runs ended"
        for connection in connections:
            await connection.close()
        return n / elapsed, n / elapsed, drain_cpu, server_cpu

    return asyncio.run(main())


def _peer(args: Sequence[str]) -> None:
    """One peer measurement in a process of its own; prints its rates on the last line."""
    which, url, n, *rest = args
    if which == "dbos":
        print(_dbos_run(url, int(n), int(rest[0])))
    elif which == "bare":
        postmaster = int(rest[2]) if len(rest) > 2 else None
        print(*_bare_run(url, int(n), int(rest[0]), int(rest[1]), postmaster))
    else:
        postmaster = int(rest[2]) if len(rest) > 2 else None
        print(*_pgqueuer_run(url, int(n), int(rest[0]), int(rest[1]), postmaster))


def _peer_rate(server: Any, *args: str) -> tuple[float, int]:
    """The peer's rate, and the most connections it held at once (`_peer_rates`'s first)."""
    rates, peak = _peer_rates(server, *args)
    return rates[0], peak


def _peer_rates(server: Any, *args: str) -> tuple[list[float], int]:
    """The peer's rates (the numbers its process printed last), and the most connections
    it held at once."""
    with connection_peak(server, args[1]) as peak:
        done = subprocess.run(
            [sys.executable, __file__, "--peer", *args],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(hidden(done.stderr.strip().splitlines()[-1] if done.stderr else "?"))
    return [float(x) for x in done.stdout.strip().splitlines()[-1].split()], peak[0]


def bench_peers(stores: Stores, dbos_n: int, jobs: int, rounds: int, out: Figures) -> None:
    print("\n== peers on the same server ==")
    table: Figures = out.setdefault("peers", {"rounds": rounds})
    for module in ("dbos", "pgqueuer"):
        try:
            importlib.import_module(module)
        except ImportError:
            print(f"  {module}: not installed (pip install -e '.[bench]')")
            table[module] = {"unavailable": "not installed"}
    if "dbos" not in table:
        dbos: dict[str, float] = {}
        dbos_peaks: dict[str, int] = {}
        for threads in (1, 16):
            label = f"{threads} enqueuing thread(s)"
            found = [
                _peer_rate(
                    stores.server, "dbos", stores.fresh("postgresql"), str(dbos_n), str(threads)
                )
                for _ in range(rounds)
            ]
            dbos[label] = statistics.median(rate for rate, _ in found)
            dbos_peaks[label] = max(peak for _, peak in found)
        table["dbos"] = {
            "workflows": dbos_n,
            "workflows/s": dbos,
            "connections at most": dbos_peaks,
        }
        for label, rate in dbos.items():
            print(
                f"  DBOS, {dbos_n} one-step workflows, {label:22s} {rate:7,.0f} workflows/s"
                f"  ({dbos_peaks[label]} connections at most)"
            )
    if "pgqueuer" not in table:
        pgq: dict[str, float] = {}
        pgq_whole: dict[str, float] = {}
        pgq_peaks: dict[str, int] = {}
        for consumers in (1, 5):
            for batch in (10, 100):
                label = f"{consumers} consumer(s), batch {batch}"
                rated = [
                    _peer_rates(
                        stores.server,
                        "pgqueuer",
                        stores.fresh("postgresql"),
                        *map(str, (jobs, consumers, batch)),
                    )
                    for _ in range(rounds)
                ]
                pgq[label] = statistics.median(rates[0] for rates, _ in rated)
                pgq_whole[label] = statistics.median(rates[1] for rates, _ in rated)
                pgq_peaks[label] = max(peak for _, peak in rated)
        table["pgqueuer"] = {
            "jobs": jobs,
            "jobs/s": pgq,
            "jobs/s from the first enqueue": pgq_whole,
            "connections at most": pgq_peaks,
        }
        for label, rate in pgq.items():
            print(
                f"  pgqueuer, {jobs} jobs, {label:26s} {rate:7,.0f} jobs/s drained,"
                f" {pgq_whole[label]:7,.0f} from the first enqueue"
                f"  ({pgq_peaks[label]} connections at most)"
            )


# ---------------------------------------------------------------------------- cancel


CANCEL_PARTS: Final = (
    ("canceller's read", "asked", "loaded"),
    ("to its transaction", "loaded", "begin"),
    ("first round trip", "begin", "began"),
    ("rules", "began", "commit"),
    ("commit -> notice read", "commit", "read"),
    ("listener thread", "read", "returned"),
    ("thread -> Trio", "returned", "resumed"),
    ("apply", "resumed", "observed"),
)
"""The parts of a cross-process cancel (``--breakdown``), each from one moment to the next,
so that they add up to the whole: the canceller's read of the run (``cancel_run`` in this
process: `PostgresStore.load`), its commit handed to the store's worker thread
(`PostgresStore.apply`), the transaction's first round trip (``PgTx.begin``: ``BEGIN`` and
its reads) and its rules; then from its second round trip's start (``PgTx.commit``: the
writes, ``COMMIT`` with its WAL flush, whose ``NOTIFY`` the server delivers once it is
committed) to the owner's listener thread reading the notice; the listener's wait
returning; the relay's Trio task running again (``trio.to_thread``'s way back); and the
attempt's scope cancelled until the body's ``finally`` runs (``benchmarks/_cancel_owner.py``
notes the owner's moments). Beside them, `CANCELLER_RETURNS`."""

CANCELLER_RETURNS: Final = ("canceller's commit returns", "commit", "committed")
"""When the second round trip's answer reaches the canceller's ``cancel_run``: after the
notice, for it also waits for the commit's event seqs to settle."""


@attrs.define
class CancelSample:
    """One cancel: its latency, and (``--breakdown``) the moments it passed."""

    seconds: float
    moments: dict[str, float] = attrs.Factory(dict)
    owner: list[tuple[str, float]] = attrs.Factory(list)
    """The owner's moments noted since the last cancel (``_cancel_owner.py``)."""
    path: str = ""
    """How the owner learned of it: ``notice`` (the NOTIFY's ends, before any read),
    ``look`` (a look at the store found it), or ``""`` (not traced)."""


def _cancel_moments(
    asked: float, owner: Sequence[tuple[str, float]], a: Mapping[str, float]
) -> tuple[dict[str, float], str]:
    """The moments of one traced cancel: the canceller's (``a``) and the owner's first of
    each after the one before it."""
    moments = {"asked": asked, **a}
    path = "look"
    after = a.get("commit", asked)
    for want in ("read", "returned", "resumed"):
        at = next((t for p, t in owner if p == want and t >= after), None)
        if at is None:
            break
        moments[want] = at
        after = at
    else:
        path = "notice"
    return moments, path


class _FloorSignal:
    """The floor of a cross-process cancel (``_cancel_owner.py --floor``): a one-row
    ``INSERT`` and a ``NOTIFY`` committed in one round trip on a psycopg connection, in a
    worker thread as the store commits, until a Trio task in the listening process runs."""

    def __init__(self, url: str, listener: subprocess.Popen[str]) -> None:
        psycopg: Any = importlib.import_module("psycopg")
        self._conn = psycopg.connect(url)
        self._conn.execute("CREATE TABLE IF NOT EXISTS floor (id bigserial PRIMARY KEY, body text)")
        self._conn.commit()
        self._listener = listener
        self._i = 0

    def signal(self) -> None:
        self._i += 1
        with self._conn.pipeline():
            self._conn.execute("INSERT INTO floor (body) VALUES (%s)", (f"row {self._i}",))
            self._conn.execute(f"NOTIFY cancel_floor, 'f{self._i}'")
            self._conn.execute("COMMIT")

    async def seconds(self) -> float:
        """One signal's seconds, from asking to the listening Trio task."""
        assert self._listener.stdout is not None
        asked = time.time()
        await trio.to_thread.run_sync(self.signal)
        line = await trio.to_thread.run_sync(self._listener.stdout.readline)
        word, payload, heard = line.split()
        assert word == "heard", line
        assert payload == f"f{self._i}", line
        return float(heard) - asked

    def close(self) -> None:
        self._conn.close()


async def _cancel_latencies(
    url: str,
    worker: subprocess.Popen[str],
    samples: int,
    *,
    traced: bool,
    floor: subprocess.Popen[str] | None = None,
) -> tuple[list[CancelSample], list[float]]:
    """Each cancel's `CancelSample`, and with ``floor`` (the floor's listening process on
    the same database) the floor's seconds, one after each cancel."""
    from awaken_trio.store.postgres._store import PostgresStore
    from awaken_trio.store.postgres._tx import PgTx

    assert worker.stdout is not None
    found: list[CancelSample] = []
    rng = random.Random(7)
    canceller: dict[str, float] = {}
    load, apply = PostgresStore.load, PostgresStore.apply
    begin, commit = PgTx.begin, PgTx.commit

    def timed_begin(self: Any, batch: Any = ()) -> float:
        canceller["begin"] = time.time()
        try:
            return begin(self, batch)
        finally:
            canceller["began"] = time.time()

    def timed_commit(self: Any) -> None:
        canceller["commit"] = time.time()
        try:
            commit(self)
        finally:
            canceller["sent"] = time.time()

    async def timed_load(self: Any, run_id: str) -> Any:
        try:
            return await load(self, run_id)
        finally:
            canceller["loaded"] = time.time()

    async def timed_apply(self: Any, batch: Any) -> Any:
        try:
            return await apply(self, batch)
        finally:
            canceller["committed"] = time.time()

    if traced:
        PostgresStore.load = timed_load  # type: ignore[method-assign]
        PostgresStore.apply = timed_apply  # type: ignore[method-assign]
        PgTx.begin = timed_begin  # type: ignore[method-assign]
        PgTx.commit = timed_commit  # type: ignore[method-assign]
    body = "traced_reporter" if traced else "reporter"
    floors: list[float] = []
    signal = None if floor is None else await trio.to_thread.run_sync(_FloorSignal, url, floor)
    try:
        async with open_runtime(url, poll=0.05) as runtime:
            for i in range(samples):
                handle = await runtime.submit(body, run_id=f"c{i}")
                line = await trio.to_thread.run_sync(worker.stdout.readline)
                assert line.startswith(f"running c{i}"), line
                # A random pause samples the whole of the owner's poll interval.
                await trio.sleep(rng.uniform(0, 0.05))
                canceller.clear()
                asked = time.time()
                await runtime.cancel_run(handle.run_id)
                a = dict(canceller)
                owner: list[tuple[str, float]] = []
                while True:
                    line = await trio.to_thread.run_sync(worker.stdout.readline)
                    word, *rest = line.split()
                    if word == "trace":
                        owner.append((rest[0], float(rest[1])))
                        continue
                    break
                run_id, observed = rest[:2]
                assert word == "cancelled", line
                assert run_id == f"c{i}", line
                sample = CancelSample(float(observed) - asked)
                if traced:
                    sample.moments, sample.path = _cancel_moments(asked, owner, a)
                    sample.owner = owner
                    sample.moments["observed"] = float(observed)
                    if sample.moments.get("resumed", 0.0) > float(observed):
                        sample.path = "look"  # a look stopped it before the notice was taken
                found.append(sample)
                if signal is not None:
                    await trio.sleep(rng.uniform(0, 0.05))
                    floors.append(await signal.seconds())
    finally:
        if signal is not None:
            signal.close()
        PostgresStore.load, PostgresStore.apply = load, apply  # type: ignore[method-assign]
        PgTx.begin, PgTx.commit = begin, commit  # type: ignore[method-assign]
    return found, floors


def _shown_sample(sample: CancelSample) -> Figures:
    """A traced cancel for the JSON figures: its milliseconds, its path, and each moment
    (its own and the owner's) in milliseconds after it was asked."""
    asked = sample.moments["asked"]
    return {
        "ms": sample.seconds * 1e3,
        "path": sample.path,
        "moments": {k: round((t - asked) * 1e3, 3) for k, t in sample.moments.items()},
        "owner": [(p, round((t - asked) * 1e3, 3)) for p, t in sample.owner if t > asked - 0.1],
    }


PERCENTILES: Final = (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))


def _cancel_parts(found: Sequence[CancelSample]) -> dict[str, dict[str, float]]:
    """Milliseconds of each of `CANCEL_PARTS` over the cancels the owner heard of by their
    notice: at p50, p95 and p99 of that part, and on average over the slowest 5% of the
    cancels (where the tail's time goes)."""
    heard = [s for s in found if s.path == "notice"]
    if not heard:
        return {}
    slowest = sorted(heard, key=lambda s: s.seconds)[-max(1, len(heard) // 20) :]
    parts: dict[str, dict[str, float]] = {}
    for part, begin, end in (*CANCEL_PARTS, CANCELLER_RETURNS):
        spans = [(s.moments[end] - s.moments[begin]) * 1e3 for s in heard]
        tail = [(s.moments[end] - s.moments[begin]) * 1e3 for s in slowest]
        parts[part] = {name: percentile(spans, q) for name, q in PERCENTILES}
        parts[part]["slowest 5%"] = statistics.mean(tail)
    return parts


def bench_cancel(
    stores: Stores, samples: int, rounds: int, out: Figures, *, breakdown: bool = False
) -> None:
    print(
        f"\n== cross-process cancel_run -> the owner's body sees it ({samples} runs a round,"
        f" medians of {rounds} rounds) =="
    )
    table: Figures = out.setdefault("cancel", {"samples": samples, "rounds": rounds, "poll": 0.05})
    for kind in stores.measured(table):
        traced = breakdown and kind == "postgresql"
        by_round: list[dict[str, float]] = []
        floor_by_round: list[dict[str, float]] = []
        slowest: list[list[Figures]] = []
        looked: list[list[Figures]] = []
        parts_by_round: list[dict[str, dict[str, float]]] = []
        paths: dict[str, int] = {}
        for _ in range(rounds):
            url = stores.fresh(kind)
            trio.run(_touch, url)
            extra = ("--poll", "0.05", "--lease", "5")
            with contextlib.ExitStack() as stack:
                (worker,) = stack.enter_context(
                    workers(url, 1, *extra, script=CANCEL_OWNER if traced else WORKER)
                )
                floor = None
                if kind == "postgresql":
                    (floor,) = stack.enter_context(workers(url, 1, script=CANCEL_OWNER, floor=True))
                found, floors = trio.run(
                    functools.partial(
                        _cancel_latencies, url, worker, samples, traced=traced, floor=floor
                    )
                )
            delays = [s.seconds * 1e3 for s in found]
            by_round.append({name: percentile(delays, q) for name, q in PERCENTILES})
            if floors:
                floor_ms = [f * 1e3 for f in floors]
                floor_by_round.append({name: percentile(floor_ms, q) for name, q in PERCENTILES})
            for sample in found:
                paths[sample.path] = paths.get(sample.path, 0) + 1
            if traced:
                parts_by_round.append(_cancel_parts(found))
                slowest.append(
                    [_shown_sample(s) for s in sorted(found, key=lambda s: s.seconds)[-3:]]
                )
                looked.append([_shown_sample(s) for s in found if s.path == "look"][:5])
        row: Figures = {
            name: statistics.median(r[name] for r in by_round) for name, _ in PERCENTILES
        }
        row["rounds"] = by_round
        shown = "   ".join(f"{name} {row[name]:6.1f} ms" for name, _ in PERCENTILES)
        each = ", ".join(f"{r['p99']:.1f}" for r in by_round)
        print(f"  {kind:10s} {shown}   (p99 of each round: {each})")
        if floor_by_round:
            floor_row = {
                name: statistics.median(r[name] for r in floor_by_round) for name, _ in PERCENTILES
            }
            row["floor"] = floor_row | {"rounds": floor_by_round}
            shown = "   ".join(f"{name} {floor_row[name]:6.1f} ms" for name, _ in PERCENTILES)
            each = ", ".join(f"{r['p99']:.1f}" for r in floor_by_round)
            print(f"  {'  floor':10s} {shown}   (p99 of each round: {each})")
        if traced:
            parts = {
                part: {
                    what: statistics.median(r[part][what] for r in parts_by_round if r)
                    for what in ("p50", "p95", "p99", "slowest 5%")
                }
                for part, _, _ in (*CANCEL_PARTS, CANCELLER_RETURNS)
            }
            row["parts ms"] = parts
            row["paths"] = paths
            row["slowest 3 of each round"] = slowest
            row["the first 5 found by a look, each round"] = looked
            print(f"  {'':10s} where it goes (ms; medians of the rounds), by the notice {paths}:")
            print(f"  {'':10s} {'':27s} {'p50':>7s} {'p95':>7s} {'p99':>7s} {'slowest 5%':>11s}")
            for part, figures in parts.items():
                print(
                    f"  {'':10s} {part:27s} {figures['p50']:7.2f} {figures['p95']:7.2f}"
                    f" {figures['p99']:7.2f} {figures['slowest 5%']:11.2f}"
                )
        table[kind] = row


# ---------------------------------------------------------------------------- latency


CHUNK = 25
"""Calls in a row of one kind before the other kind's turn (`_side_by_side`)."""


class _Floor:
    """The store's floor, one call at a time on one open connection: on PostgreSQL a
    one-row ``INSERT`` + ``COMMIT`` round trip, on SQLite the same, fsync'd, on the file
    with the store's pragmas."""

    def __init__(self, kind: str, url: str) -> None:
        self._kind = kind
        self._i = 0
        if kind == "sqlite":
            import sqlite3

            # Called from whichever worker thread is free, one call at a time.
            self._conn: Any = sqlite3.connect(
                url.removeprefix("sqlite:///"), isolation_level=None, check_same_thread=False
            )
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = FULL")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS floor (id INTEGER PRIMARY KEY, body TEXT)"
            )
        else:
            psycopg: Any = importlib.import_module("psycopg")
            self._conn = psycopg.connect(url)
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS floor (id bigserial PRIMARY KEY, body text)"
            )
            self._conn.commit()

    def times(self, n: int) -> list[float]:
        conn = self._conn
        times: list[float] = []
        for _ in range(n):
            self._i += 1
            started = time.perf_counter()
            if self._kind == "sqlite":
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO floor (body) VALUES (?)", (f"row {self._i}",))
                conn.execute("COMMIT")
            else:
                conn.execute("INSERT INTO floor (body) VALUES (%s)", (f"row {self._i}",))
                conn.commit()
            times.append(time.perf_counter() - started)
        return times

    def close(self) -> None:
        self._conn.close()


async def parked(ctx: RunContext) -> object:
    await trio.sleep_forever()
    return None  # pragma: no cover


async def _side_by_side(
    kind: str, url: str, n: int, *, starts: bool
) -> tuple[float, float, float, float]:
    """Median seconds of the floor, of the floor awaited from Trio (its commit on a worker
    thread, timed by the awaiting task), of one awaited ``start`` and of one awaited
    ``ctx.boundary`` of a running body (0.0 both, when ``starts`` is False), measured in
    turns of `CHUNK` calls each, so all see the machine alike (on a shared machine the
    floor alone moves by a factor of two from one minute to the next). The floor runs in
    a worker thread while the runtime waits: its timing is the thread's own."""
    floor = await trio.to_thread.run_sync(_Floor, kind, url)
    floor_times: list[float] = []
    hopped_times: list[float] = []
    start_times: list[float] = []
    boundary_times: list[float] = []

    async def stepping(ctx: RunContext) -> object:
        for done in range(CHUNK):
            started = time.perf_counter()
            await ctx.boundary({"done": done})
            boundary_times.append(time.perf_counter() - started)
        return None

    try:
        async with contextlib.AsyncExitStack() as stack:
            runtime = await stack.enter_async_context(open_runtime(url)) if starts else None
            for _ in range(max(1, n // CHUNK)):
                floor_times += await trio.to_thread.run_sync(floor.times, CHUNK)
                # The same commit awaited from Trio, one worker-thread hop each, as the
                # PostgreSQL store runs its calls (psycopg's async connection does not run
                # under Trio; SQLite's store has a thread of its own, whose hop costs alike).
                for _ in range(CHUNK):
                    started = time.perf_counter()
                    await trio.to_thread.run_sync(floor.times, 1)
                    hopped_times.append(time.perf_counter() - started)
                if runtime is not None:
                    for _ in range(CHUNK):
                        started = time.perf_counter()
                        await runtime.start(parked)
                        start_times.append(time.perf_counter() - started)
                    await (await runtime.start(stepping)).wait()
    finally:
        floor.close()
    median_start = statistics.median(start_times) if start_times else 0.0
    median_boundary = statistics.median(boundary_times) if boundary_times else 0.0
    return (
        statistics.median(floor_times),
        statistics.median(hopped_times),
        median_start,
        median_boundary,
    )


async def _pg_start_parts(url: str, n: int) -> dict[str, float]:
    """Median milliseconds of the parts of one awaited ``start`` on PostgreSQL: its begin
    (a two-trip transaction's first round trip: ``BEGIN``, the server's clock and the reads,
    `PgTx.begin`; a guessed one's statements queued, `PgTx.begin_guessed`, no round trip),
    the rules (from then to the writes), its commit (the writes, the event numbering and
    ``COMMIT``, `PgTx.commit`: a guessed transaction's one round trip), and the rest (the
    hop to the store's worker thread and back, the pool, the runtime's admission and the
    task it starts), timed inside ``n`` calls."""
    from awaken_trio.store.postgres import _tx as tx_module

    PgTx = tx_module.PgTx
    begin, guessed, commit = PgTx.begin, PgTx.begin_guessed, PgTx.commit
    parts: dict[str, list[float]] = {"begin": [], "rules": [], "commit": []}
    began: list[float] = []

    def timed(call: Callable[[Any, Any], Any], self: Any, arg: Any) -> float:
        started = time.perf_counter()
        try:
            return float(call(self, arg))
        finally:
            began.append(time.perf_counter())
            parts["begin"].append(began[-1] - started)

    def timed_begin(self: Any, batch: Any = ()) -> float:
        return timed(begin, self, batch)

    def timed_guessed(self: Any, guess: Any) -> float:
        return timed(guessed, self, guess)

    def timed_commit(self: Any) -> None:
        started = time.perf_counter()
        if began:
            parts["rules"].append(started - began[-1])
        try:
            commit(self)
        finally:
            parts["commit"].append(time.perf_counter() - started)

    totals: list[float] = []
    PgTx.begin = timed_begin  # type: ignore[method-assign]
    PgTx.begin_guessed = timed_guessed  # type: ignore[method-assign]
    PgTx.commit = timed_commit  # type: ignore[method-assign]
    try:
        async with open_runtime(url) as runtime:
            for _ in range(CHUNK):  # (warm: the pool's connections, prepared statements)
                await runtime.start(parked)
            for times in parts.values():
                times.clear()
            for _ in range(n):
                started = time.perf_counter()
                await runtime.start(parked)
                totals.append(time.perf_counter() - started)
    finally:
        PgTx.begin = begin  # type: ignore[method-assign]
        PgTx.begin_guessed = guessed  # type: ignore[method-assign]
        PgTx.commit = commit  # type: ignore[method-assign]
    medians = {part: statistics.median(times) * 1e3 for part, times in parts.items()}
    total = statistics.median(totals) * 1e3
    medians["the rest"] = total - sum(medians.values())
    medians["start"] = total
    return medians


def bench_latency(
    stores: Stores, n: int, rounds: int, out: Figures, *, breakdown: bool = False
) -> None:
    print(
        f"\n== one awaited start, and one awaited boundary, at a time against the store's"
        f" floor ({n} calls) =="
    )
    print(f"   in turns of {CHUNK} calls each, on one machine at one time")
    table: Figures = out.setdefault("latency", {"calls": n, "rounds": rounds})
    for kind in STORES:
        missing = stores.usable(kind)
        floors: list[float] = []
        hops: list[float] = []
        hop_ratios: list[float] = []
        starts: list[float] = []
        ratios: list[float] = []
        hopped_ratios: list[float] = []
        boundaries: list[float] = []
        boundary_ratios: list[float] = []
        for _ in range(rounds):
            url = stores.fresh(kind)
            if missing is None:
                trio.run(_touch, url)
            floor, hopped, start, boundary = trio.run(
                functools.partial(_side_by_side, kind, url, n, starts=missing is None)
            )
            floors.append(floor)
            hops.append(hopped)
            hop_ratios.append(floor / hopped)
            if missing is None:
                starts.append(start)
                ratios.append(floor / start)
                hopped_ratios.append(hopped / start)
                boundaries.append(boundary)
                boundary_ratios.append(hopped / boundary)
        floor = statistics.median(floors)
        hopped = statistics.median(hops)
        row: Figures = {
            "floor_ms": floor * 1e3,
            "floor_from_trio_ms": hopped * 1e3,
            "floor_over_floor_from_trio": statistics.median(hop_ratios),
        }
        print(
            f"  {kind:10s} floor from Trio {hopped * 1e3:6.3f} ms   floor/it"
            f" {statistics.median(hop_ratios):.2f} (its commit awaited on a worker thread)"
        )
        if missing is not None:
            row["start"] = {"unavailable": missing}
            print(f"  {kind:10s} floor {floor * 1e3:6.3f} ms   start not measured: {missing}")
        else:
            start = statistics.median(starts)
            ratio = statistics.median(ratios)
            hopped_ratio = statistics.median(hopped_ratios)
            boundary = statistics.median(boundaries)
            boundary_ratio = statistics.median(boundary_ratios)
            row.update(
                start_ms=start * 1e3,
                floor_over_start=ratio,
                floor_from_trio_over_start=hopped_ratio,
                boundary_ms=boundary * 1e3,
                floor_from_trio_over_boundary=boundary_ratio,
            )
            print(
                f"  {kind:10s} floor {floor * 1e3:6.3f} ms   start {start * 1e3:6.3f} ms"
                f"   floor/start {ratio:.2f}   floor from Trio/start {hopped_ratio:.2f}"
            )
            print(
                f"  {kind:10s} boundary {boundary * 1e3:6.3f} ms   floor from Trio/boundary"
                f" {boundary_ratio:.2f}  (each round: "
                + ", ".join(f"{r:.2f}" for r in boundary_ratios)
                + ")"
            )
        table[kind] = row
        if breakdown and kind == "postgresql" and missing is None:
            url = stores.fresh(kind)
            trio.run(_touch, url)
            parts = trio.run(_pg_start_parts, url, n)
            row["start parts ms"] = parts
            shown = "   ".join(f"{part} {value:.3f}" for part, value in parts.items())
            print(f"  {kind:10s} where a start's time goes (ms): {shown}")


# ---------------------------------------------------------------------------- main

PARTS = (
    "workers",
    "drain",
    "waiting",
    "noop",
    "backlog",
    "lease",
    "peers",
    "cancel",
    "latency",
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the figures here")
    parser.add_argument("--only", action="append", choices=PARTS)
    parser.add_argument(
        "--statements",
        action="store_true",
        help="run the server with pg_stat_statements: the backlog shows where its time goes",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="latency, cancel: where one awaited start's, or one cross-process cancel's,"
        " time goes on PostgreSQL",
    )
    parser.add_argument("--peer", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.peer:
        _peer(args.peer)
        return 0
    from tests.pg_server import ServerUnavailable, start_server

    chosen = args.only or list(PARTS)
    rounds = 1 if args.quick else 3
    out: Figures = {
        "command": " ".join(["python", "benchmarks/bench_postgres.py", *(argv or sys.argv[1:])]),
        "machine": {"cores": _cores(), "python": sys.version.split()[0]},
        "quick": args.quick,
    }
    try:
        server = start_server(preload="pg_stat_statements" if args.statements else "")
    except ServerUnavailable as exc:
        print(f"no PostgreSQL server: {exc}")
        return 1
    try:
        version = server.admin_sql("SHOW server_version")[0][0]
        out["machine"]["postgresql"] = version
        print(f"PostgreSQL {version} on 127.0.0.1:{server.port} (defaults, fsync on)")
        with tempfile.TemporaryDirectory() as tmp:
            stores = Stores(server, Path(tmp))
            if "workers" in chosen:
                bench_workers(stores, 500 if args.quick else 2_000, rounds, out)
            if "drain" in chosen:
                bench_drain(stores, 2_000 if args.quick else 10_000, rounds, out)
            if "waiting" in chosen:
                bench_waiting(stores, 600 if args.quick else 2_000, rounds, out)
            if "noop" in chosen:
                bench_noop(stores, 2_000 if args.quick else 10_000, rounds, out)
            if "backlog" in chosen:
                bench_backlog(
                    stores, 5_000 if args.quick else 20_000, out, statements=args.statements
                )
            if "lease" in chosen:
                bench_lease(stores, 300 if args.quick else 500, out)
            if "peers" in chosen:
                bench_peers(
                    stores,
                    200 if args.quick else 1_000,
                    2_000 if args.quick else 10_000,
                    rounds,
                    out,
                )
            if "cancel" in chosen:
                bench_cancel(
                    stores, 50 if args.quick else 200, rounds, out, breakdown=args.breakdown
                )
            if "latency" in chosen:
                bench_latency(
                    stores, 300 if args.quick else 2_000, rounds, out, breakdown=args.breakdown
                )
    finally:
        server.stop()
    if args.json is not None:
        write_json(args.json, out)
        print(f"\nwrote {args.json}")
    print(f"command: {out['command']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
