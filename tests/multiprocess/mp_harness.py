"""The multi-process harness: worker processes started by a test (``worker_process.py``), the
lines they print, and bounded waits on real time.

The SQLite store runs a thread, so these tests use real time, never an autojump clock: every
wait polls for its condition (the store, or a worker's output) every `TICK` seconds inside a
`trio.fail_after`, never a fixed sleep.

Workers are always killed when the cluster closes, whatever the test did (a worker a test
stopped with SIGSTOP is killed too). A worker also exits by itself if the test process dies.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import TypeVar, final

import attrs
import trio

from awaken_trio import EndCause, EventKind, RunEvent, RunState, Runtime, open_runtime

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().parent / "worker_process.py"

LEASE = 1.0
POLL = 0.02
TICK = 0.02
"""How often a wait looks again."""
WAIT = 30.0
"""The default bound of a wait: generous (a loaded machine), and a failure, never a hang."""

NATURAL = RunState.Ended(EndCause.NaturalEnd())
CANCELLED = RunState.Ended(EndCause.Cancelled())
OWNER_LOST = RunState.Ended(EndCause.Indeterminate("owner lost"))


@final
@attrs.frozen
class Line:
    """One line a worker printed, split into words, with the time it arrived here."""

    text: str
    arrived: float

    @property
    def words(self) -> list[str]:
        return self.text.split()


@final
class Worker:
    """A worker process: ``worker_process.py`` serving the store with the test bodies."""

    def __init__(self, name: str, process: trio.Process) -> None:
        self.name = name
        self.process = process
        self.lines: list[Line] = []
        self.stopped = False

    def __repr__(self) -> str:
        return f"<Worker {self.name} pid={self.pid} returncode={self.process.returncode}>"

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    def said(self, *words: str) -> list[Line]:
        """The lines so far that start with ``words``."""
        n = len(words)
        return [line for line in self.lines if line.words[:n] == list(words)]

    async def kill(self) -> None:
        """kill -9, and reap it."""
        if self.alive:
            self.process.send_signal(signal.SIGKILL)
        with trio.CancelScope(shield=True):
            await self.process.wait()

    async def terminate(self, *, seconds: float = WAIT) -> None:
        """SIGTERM, as a deploy sends it, and wait until the worker has released its claims
        and exited (0)."""
        self.process.send_signal(signal.SIGTERM)
        with trio.fail_after(seconds):
            await self.process.wait()
        assert self.process.returncode == 0, self.process.returncode
        assert self.said("released"), self.lines[-5:]

    def stop(self) -> None:
        """SIGSTOP: the process stalls (its leases are no longer renewed)."""
        self.process.send_signal(signal.SIGSTOP)
        self.stopped = True

    def cont(self) -> None:
        """SIGCONT: the stalled process goes on from where it stopped."""
        self.process.send_signal(signal.SIGCONT)
        self.stopped = False

    async def _read(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        pending = b""
        async for chunk in stream:
            pending += chunk
            *complete, pending = pending.split(b"\n")
            now = time.time()
            self.lines.extend(Line(raw.decode(), now) for raw in complete if raw.strip())


@final
class Cluster:
    """The worker processes of one test, on one store URL."""

    def __init__(self, url: str, nursery: trio.Nursery) -> None:
        self.url = url
        self._nursery = nursery
        self.workers: list[Worker] = []

    async def start(
        self,
        name: str,
        *,
        lease: float = LEASE,
        poll: float = POLL,
        concurrency: int = 8,
        max_recoveries: int = 3,
        clock_offset: float = 0.0,
        agents: bool = False,
        ready_within: float = WAIT,
    ) -> Worker:
        """Start a worker and return once it says it is serving (``ready <name>``, within
        ``ready_within`` seconds); ``clock_offset`` puts its runtime's clock that many
        seconds off the wall clock; ``agents`` has it serve the pydantic-ai agents of
        ``mp_agents.py`` too."""
        command = [
            sys.executable,
            str(WORKER),
            self.url,
            "--name",
            name,
            "--lease",
            str(lease),
            "--poll",
            str(poll),
            "--concurrency",
            str(concurrency),
            "--max-recoveries",
            str(max_recoveries),
            "--clock-offset",
            str(clock_offset),
            *(["--agents"] if agents else []),
        ]
        # The package next to these tests, whatever the environment has installed.
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        process = await trio.lowlevel.open_process(
            command, stdout=subprocess.PIPE, env=env, cwd=str(ROOT)
        )
        worker = Worker(name, process)
        self.workers.append(worker)
        self._nursery.start_soon(worker._read)
        await wait_for(
            lambda: _ready(worker, name), f"worker {name} to print 'ready'", seconds=ready_within
        )
        return worker

    async def start_many(self, names: Sequence[str], *, max_recoveries: int = 3) -> list[Worker]:
        """Start workers one after the other (each ready before the next starts)."""
        return [await self.start(name, max_recoveries=max_recoveries) for name in names]

    @property
    def alive(self) -> list[Worker]:
        return [w for w in self.workers if w.alive]

    def said(self, *words: str) -> list[tuple[Worker, Line]]:
        """Every worker's lines that start with ``words``, worker by worker."""
        return [(w, line) for w in self.workers for line in w.said(*words)]

    async def kill_all(self) -> None:
        for worker in self.workers:
            await worker.kill()


async def _ready(worker: Worker, name: str) -> bool:
    await trio.lowlevel.checkpoint()
    if any(line.text == f"ready {name}" for line in worker.lines):
        return True
    if not worker.alive:
        raise AssertionError(f"worker {name} exited with {worker.process.returncode} before ready")
    return False


@asynccontextmanager
async def open_cluster(url: str) -> AsyncIterator[Cluster]:
    """A cluster whose workers are all killed when the block ends, however it ends."""
    async with trio.open_nursery() as nursery:
        cluster = Cluster(url, nursery)
        try:
            yield cluster
        finally:
            with trio.CancelScope(shield=True):
                await cluster.kill_all()
            nursery.cancel_scope.cancel()


def control_runtime(url: str) -> AbstractAsyncContextManager[Runtime]:
    """The test process's own runtime on the store: it has no bodies and serves nothing,
    so every run it submits executes in a worker process."""
    return open_runtime(url, lease=LEASE, poll=POLL)


# ---------------------------------------------------------------------------- waiting


async def wait_for(
    check: Callable[[], Awaitable[T | bool | None]], what: str, *, seconds: float = WAIT
) -> T:
    """Call ``check`` every `TICK` seconds until it returns something truthy, and return
    that; an `AssertionError` naming ``what`` after ``seconds``."""
    try:
        with trio.fail_after(seconds):
            while True:
                found = await check()
                if found:
                    return found  # type: ignore[return-value]
                await trio.sleep(TICK)
    except trio.TooSlowError:
        raise AssertionError(f"timed out after {seconds} s waiting for {what}") from None


async def until_line(worker: Worker, *words: str, seconds: float = WAIT) -> Line:
    """The first line of ``worker`` that starts with ``words``, waiting for it."""

    async def seen() -> Line | None:
        await trio.lowlevel.checkpoint()
        found = worker.said(*words)
        return found[0] if found else None

    return await wait_for(seen, f"{worker.name} to print {' '.join(words)!r}", seconds=seconds)


async def until_said(cluster: Cluster, *words: str, seconds: float = WAIT) -> tuple[Worker, Line]:
    """The first worker (and line) to print a line starting with ``words``."""

    async def seen() -> tuple[Worker, Line] | None:
        await trio.lowlevel.checkpoint()
        found = cluster.said(*words)
        return found[0] if found else None

    return await wait_for(seen, f"a worker to print {' '.join(words)!r}", seconds=seconds)


async def until_state(
    runtime: Runtime, run_id: str, wanted: Callable[[RunState], bool], *, seconds: float = WAIT
) -> RunState:
    """Re-read the run's committed state until ``wanted`` holds."""

    async def check() -> RunState | None:
        state = await runtime.state(run_id)
        return state if wanted(state) else None

    return await wait_for(check, f"the state of {run_id!r} to change", seconds=seconds)


# ---------------------------------------------------------------------------- reading


async def history(runtime: Runtime, run_id: str | None = None) -> list[RunEvent]:
    """Every committed event so far (of one run, or of all), oldest first."""
    return [event async for event in runtime.events(run_id, follow=False)]


def committed(events: Sequence[RunEvent]) -> list[RunEvent]:
    return [e for e in events if e.kind == EventKind.COMMITTED]


def terminal(events: Sequence[RunEvent]) -> list[RunEvent]:
    return [e for e in committed(events) if isinstance(e.state, RunState.Ended)]


def is_running(state: RunState) -> bool:
    return isinstance(state, RunState.Running)


def is_awaiting(state: RunState) -> bool:
    return isinstance(state, RunState.Awaiting)


def is_ended(state: RunState) -> bool:
    return isinstance(state, RunState.Ended)


StoreAt = Path | str
"""Where a test's store is: an SQLite file, or the URL of a PostgreSQL database."""


def store_url(db: StoreAt) -> str:
    return f"sqlite:///{db}" if isinstance(db, Path) else db


def claims(db: StoreAt) -> dict[str, tuple[int, int, float]]:
    """The store's claims table, read from outside the runtime: ``run_id -> (pid of the
    owner process, epoch, lease_until)``. Owners are ``host:pid:nonce``."""
    if isinstance(db, Path):
        uri = db.resolve().as_uri() + "?mode=ro"
        conn = sqlite3.connect(uri, uri=True, timeout=5.0)
        try:
            found = conn.execute("SELECT run_id, owner, epoch, lease_until FROM claims").fetchall()
        finally:
            conn.close()
    else:
        import psycopg

        with psycopg.connect(db, autocommit=True) as pg:
            query = "SELECT run_id, owner, epoch, lease_until FROM awaken.claims"
            found = pg.execute(query).fetchall()
    return {
        run_id: (int(owner.rsplit(":", 2)[1]), epoch, until)
        for run_id, owner, epoch, until in found
    }


def held_by(db: StoreAt, pid: int) -> dict[str, int]:
    """The runs whose claim the process ``pid`` holds, with each run's committed
    generation, read from outside the runtime in one snapshot: ``run_id -> generation``.
    (Read apart, a generation could already be the next attempt's, once a lease lapsed and
    another process recovered the run in between.)"""
    query = (
        "SELECT c.run_id, c.owner, r.generation FROM {s}claims c"
        " JOIN {s}runs r ON r.run_id = c.run_id"
    )
    if isinstance(db, Path):
        uri = db.resolve().as_uri() + "?mode=ro"
        conn = sqlite3.connect(uri, uri=True, timeout=5.0)
        try:
            found = conn.execute(query.format(s="")).fetchall()
        finally:
            conn.close()
    else:
        import psycopg

        with psycopg.connect(db, autocommit=True) as pg:
            found = pg.execute(query.format(s="awaken.").encode()).fetchall()
    return {
        run_id: generation
        for run_id, owner, generation in found
        if int(owner.rsplit(":", 2)[1]) == pid
    }


def writable_now(db: StoreAt) -> bool:
    """Whether no process holds what every other one would wait for: the file's write lock,
    or on PostgreSQL a sealing writer's ticket (readers' watermark and every writer's
    answer wait for it: ``store/postgres/_order.py``). A worker stopped while it held it
    would block every other process until it is continued."""
    if not isinstance(db, Path):
        import psycopg

        from awaken_trio.store.postgres._order import ticket_space

        with psycopg.connect(db, autocommit=True) as pg:
            found = pg.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                " AND classid::bigint = (%s::bigint & 4294967295) AND objsubid = 2",
                (ticket_space("awaken"),),
            ).fetchone()
            return found is not None and int(found[0]) == 0
    conn = sqlite3.connect(str(db), timeout=0.0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()
