"""The SQLite store: the store contracts on a real file; its connection, thread and
transactions; failures; and sharing a file between stores, processes and the runtime.

These tests use real time (the store works on a thread of its own, which an autojump
clock would not wait for), bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import gc
import logging
import math
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

import pytest
import trio

from awaken_trio import (
    EndCause,
    JsonValue,
    LiveCommand,
    RunContext,
    RunState,
    StoreError,
    open_runtime,
)
from awaken_trio._core import (
    Claim,
    Fence,
)
from awaken_trio.store import Accepted, Commit, Expect, Rejected, RejectReason, Store
from awaken_trio.store.sqlite import _session as session_module
from awaken_trio.store.sqlite._store import SQLiteStore
from awaken_trio.testing import DurableStoreContract, StoreContract, StreamStoreContract
from tests.store.handover_checks import HandsOverStoredCommands
from tests.store.sqlite_helpers import (
    any_store_threads,
    digest,
    execute,
    pragma,
    run_python,
    start,
    store_threads,
)
from tests.wrapped_stores import LeaseClock

T = TypeVar("T")

Running = RunState.Running
Ended = RunState.Ended
DONE = Ended(EndCause.NaturalEnd())


class TestSQLiteStore(StoreContract):
    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[Store]:
        store = SQLiteStore(tmp_path / "runs.db", synchronous="normal")
        yield store
        await store.aclose()


class TestSQLiteStoreStreams(StreamStoreContract):
    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[SQLiteStore]:
        store = SQLiteStore(tmp_path / "runs.db", synchronous="normal")
        yield store
        await store.aclose()


class TestSQLiteStoreDurable(HandsOverStoredCommands, DurableStoreContract):
    @pytest.fixture
    def lease_clock(self) -> LeaseClock:
        return LeaseClock()

    @pytest.fixture
    def elapse(self, lease_clock: LeaseClock) -> Callable[[float], Awaitable[None]]:
        return lease_clock.elapse

    @pytest.fixture
    async def store(self, tmp_path: Path, lease_clock: LeaseClock) -> AsyncIterator[SQLiteStore]:
        store = SQLiteStore(tmp_path / "runs.db", synchronous="normal", lease_clock=lease_clock)
        yield store
        await store.aclose()

    @pytest.fixture
    async def peer(
        self, tmp_path: Path, store: SQLiteStore, lease_clock: LeaseClock
    ) -> AsyncIterator[SQLiteStore]:
        await store.open()  # the schema exists before the second connection opens
        peer = SQLiteStore(tmp_path / "runs.db", synchronous="normal", lease_clock=lease_clock)
        yield peer
        await peer.aclose()


class TestSQLiteStoreFullSync(StoreContract):
    """The default durability setting keeps the same contract."""

    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[Store]:
        async with SQLiteStore(tmp_path / "runs.db") as store:
            yield store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "runs.db", synchronous="normal")
    yield store
    await store.aclose()


async def _on_connection(store: SQLiteStore, fn: Callable[[sqlite3.Connection], T]) -> T:
    """Run ``fn`` on the store's own connection, on its thread (white box)."""
    thread = await store._opened()
    return await thread.run(lambda session: fn(session.conn))


def _end(run_id: str, at: float = 2.0) -> Commit:
    return Commit(
        run_id=run_id,
        state=DONE,
        generation=1,
        expect=Expect(generation=1, state=Running),
        at=at,
        result={"done": run_id},
    )


async def _apply_one(store: Store, commit: Commit) -> Accepted:
    (result,) = await store.apply([commit])
    assert isinstance(result, Accepted), result
    return result


# ---------------------------------------------------------------------------- connection


@pytest.mark.parametrize(("synchronous", "level"), [("full", 2), ("normal", 1)])
async def test_the_connection_uses_wal_and_the_synchronous_setting(
    tmp_path: Path, synchronous: str, level: int
) -> None:
    async with SQLiteStore(tmp_path / "runs.db", synchronous=synchronous) as store:  # type: ignore[arg-type]
        got = await _on_connection(
            store,
            lambda conn: [
                conn.execute(f"PRAGMA {name}").fetchone()[0]
                for name in ("journal_mode", "synchronous", "busy_timeout")
            ],
        )
    assert got == ["wal", level, 5000]
    assert pragma(tmp_path / "runs.db", "journal_mode") == "wal"


async def test_the_store_thread_lives_exactly_as_long_as_the_store(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    assert store_threads(store) == []
    assert not store.path.exists()  # building a store does no I/O
    await store.open()
    (thread,) = store_threads(store)
    assert thread.daemon
    await store.open()  # opening again is nothing
    assert store_threads(store) == [thread]
    await store.aclose()
    assert not thread.is_alive()
    assert store_threads(store) == []
    await store.aclose()  # closing again is nothing
    with pytest.raises(StoreError, match="is closed") as caught:
        await store.load("r1")
    assert caught.value.outcome_unknown is False
    with pytest.raises(StoreError, match="is closed"):
        await store.open()


async def test_a_store_never_opened_closes_without_a_thread(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    await store.aclose()
    assert store_threads(store) == []
    assert not store.path.exists()


async def test_the_first_use_opens_the_store_once_for_every_caller(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    loaded: list[object] = []

    async def load(i: int) -> None:
        loaded.append(await store.load(f"r{i}"))

    try:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                for i in range(20):
                    nursery.start_soon(load, i)
        assert loaded == [None] * 20
        assert len(store_threads(store)) == 1
    finally:
        await store.aclose()
    assert store_threads(store) == []


async def test_async_with_opens_and_closes_the_store(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "runs.db") as store:
        assert len(store_threads(store)) == 1
        await _apply_one(store, start("r1"))
    assert store_threads(store) == []
    assert repr(store) == f"SQLiteStore({str(tmp_path / 'runs.db')!r}, synchronous='full')"
    assert (store.durable, store.inline) == (True, False)


async def test_a_store_dropped_without_closing_ends_its_thread(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    await store.open()
    (thread,) = store_threads(store)
    del store
    gc.collect()
    with trio.fail_after(10):
        await trio.to_thread.run_sync(thread.join, abandon_on_cancel=True)
    assert not thread.is_alive()


def test_a_store_belongs_to_the_trio_run_that_opened_it(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")

    async def first() -> None:
        await store.open()
        await _apply_one(store, start("r1"))

    async def second() -> None:
        with pytest.raises(RuntimeError, match="another Trio run"):
            await store.load("r1")
        await store.aclose()

    trio.run(first)
    trio.run(second)
    assert store_threads(store) == []


# ---------------------------------------------------------------------------- transactions


async def test_a_batch_is_one_transaction(store: SQLiteStore) -> None:
    statements: list[str] = []
    await _on_connection(store, lambda conn: conn.set_trace_callback(statements.append))
    batch = [start(f"r{i}") for i in range(100)]
    results = await store.apply(batch)
    await _on_connection(store, lambda conn: conn.set_trace_callback(None))
    assert all(isinstance(r, Accepted) for r in results)
    assert [s for s in statements if s in ("BEGIN IMMEDIATE", "COMMIT")] == [
        "BEGIN IMMEDIATE",
        "COMMIT",
    ]
    assert [e.seq for e in await store.events_after(0)] == list(range(1, 101))


async def test_a_failure_inside_a_batch_rolls_the_whole_batch_back(store: SQLiteStore) -> None:
    await _apply_one(store, start("before"))
    await _apply_one(store, start("other"))
    broken = Commit(
        run_id="before",
        state=Running(1),
        generation=1,
        expect=Expect(),
        at=2.0,
        checkpoint=math.nan,  # never handed over by the runtime: it checks payloads first
    )
    with pytest.raises(StoreError, match="rolled back") as caught:
        await store.apply([start("a"), _end("other"), broken, start("b")])
    assert caught.value.outcome_unknown is False
    assert await store.load("a") is None
    before = await store.load("before")
    assert before is not None
    assert before.state == Running(1)
    other = await store.load("other")
    assert other is not None
    assert other.state == Running(1)
    # Nothing of the batch is left, not even a seq: the next event is number 3.
    assert (await _apply_one(store, start("c"))).last_seq == 3


async def test_a_failed_commit_leaves_the_outcome_unknown(store: SQLiteStore) -> None:
    # A trap the COMMIT itself trips over: a deferred foreign key that an insert into
    # events violates.
    def arm(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("CREATE TABLE trap_parent (id INTEGER PRIMARY KEY)")
        conn.execute(
            "CREATE TABLE trap (id INTEGER REFERENCES trap_parent (id)"
            " DEFERRABLE INITIALLY DEFERRED)"
        )
        conn.execute(
            "CREATE TRIGGER trap_events AFTER INSERT ON events"
            " BEGIN INSERT INTO trap VALUES (1); END"
        )

    await _on_connection(store, arm)
    with pytest.raises(StoreError, match="whether the transaction landed is unknown") as caught:
        await store.apply([start("r1")])
    assert caught.value.outcome_unknown is True
    assert await store.load("r1") is None  # (here it did not land)
    await _on_connection(store, lambda conn: conn.execute("DROP TRIGGER trap_events"))
    await _apply_one(store, start("r1"))


async def test_a_lock_held_past_the_busy_timeout_fails_a_batch_that_changed_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session_module, "BUSY_TIMEOUT", 0.05)
    path = tmp_path / "runs.db"
    async with SQLiteStore(path) as store:
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # another process's writer, wedged
            with trio.fail_after(10), pytest.raises(StoreError, match="locked") as caught:
                await store.apply([start("r1")])
            assert caught.value.outcome_unknown is False
            other.execute("ROLLBACK")
        finally:
            other.close()
        assert await store.load("r1") is None
        await _apply_one(store, start("r1"))


async def test_a_writer_waits_for_a_lock_released_within_the_busy_timeout(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    async with SQLiteStore(path) as store:
        await store.open()
        other = sqlite3.connect(path, isolation_level=None)
        landed: list[Accepted] = []
        try:
            other.execute("BEGIN IMMEDIATE")
            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:

                    async def write() -> None:
                        landed.append(await _apply_one(store, start("r1")))

                    nursery.start_soon(write)
                    # Long enough for the write to reach the lock (not needed for the
                    # outcome, which is the same either way), well within the timeout.
                    await trio.sleep(0.2)
                    assert landed == []
                    other.execute("ROLLBACK")
        finally:
            other.close()
        assert len(landed) == 1


async def test_a_cancelled_caller_abandons_its_wait_not_its_write(store: SQLiteStore) -> None:
    await store.open()
    with trio.CancelScope() as scope:
        scope.cancel()
        await store.apply([start("r1")])
    assert scope.cancelled_caught
    record = await store.load("r1")  # handed over before the wait: committed
    assert record is not None
    assert record.state == Running(1)


async def test_payloads_survive_the_file_exactly(store: SQLiteStore) -> None:
    tricky: JsonValue = {
        "nul": "a\x00b",
        "surrogate": "\ud800",
        "text": "Grüße 🙂",
        "floats": [0.1 + 0.2, -0.0, 1e308, 5e-324],
        "big": 10**4000,
        "nested": [[[{"k": None, "t": True, "f": False}]]],
    }
    commit = start("r1")
    commit.new_run.input = tricky  # type: ignore[union-attr]
    await _apply_one(store, commit)
    reason = "stopped: \x00 \udfff"
    await _apply_one(
        store,
        Commit(
            run_id="r1",
            state=Ended(EndCause.Stopped(reason)),
            generation=1,
            expect=Expect(),
            at=2.0,
            result=tricky,
            detail={"why": tricky},
        ),
    )
    record = await store.load("r1")
    assert record is not None
    assert record.input == tricky
    assert record.result == tricky
    assert record.state == Ended(EndCause.Stopped(reason))
    events = await store.events_after(0, "r1")
    assert events[-1].detail == {"why": tricky}
    assert events[-1].state == Ended(EndCause.Stopped(reason))


# ---------------------------------------------------------------------------- sharing


async def test_two_stores_on_one_file_share_truth_seq_and_versions(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SQLiteStore(path) as one, SQLiteStore(path) as two:
        before = await one.version()
        await _apply_one(two, start("r2"))
        await _apply_one(one, start("r1"))
        await _apply_one(two, _end("r1", at=3.0))
        assert await one.version() != before
        assert [(e.seq, e.run_id) for e in await one.events_after(0)] == [
            (1, "r2"),
            (2, "r1"),
            (3, "r1"),
        ]
        assert await two.events_after(0) == await one.events_after(0)
        record = await one.load("r1")
        assert record is not None
        assert record.state == DONE
        # The first store's fence sees the second store's commit.
        late = Commit(run_id="r1", state=Running(1), generation=1, expect=Expect(), at=4.0)
        assert await one.apply([late]) == [Rejected(RejectReason.ENDED, DONE)]


async def test_the_version_stays_still_for_the_stores_own_writes(store: SQLiteStore) -> None:
    # The runtime knows of its own commits already: the version tells of other writers
    # only, so a runtime alone on its file never has to look at what changed.
    first = await store.version()
    assert await store.version() == first
    await _apply_one(store, start("r1"))
    assert await store.version() == first
    assert isinstance(await store.post_command("r1", "wake", None, "", 2.0), int)
    assert await store.version() == first


_OTHER_PROCESS_WRITES = """
import sys
import trio
from awaken_trio import RunState
from awaken_trio.store import Commit, Expect, NewRun
from awaken_trio.store.sqlite._store import SQLiteStore

async def main():
    async with SQLiteStore(sys.argv[1]) as store:
        [result] = await store.apply([Commit(
            run_id="from-afar", state=RunState.Queued(), generation=0,
            expect=Expect(new=True), at=1.0,
            new_run=NewRun("t", None, "job", {"pid": "other"}),
        )])
        print(type(result).__name__)

trio.run(main)
"""


async def test_a_write_from_another_process_moves_the_version(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SQLiteStore(path) as store:
        await _apply_one(store, start("here"))
        before = await store.version()
        assert await store.version() == before
        assert (await run_python(_OTHER_PROCESS_WRITES, str(path))).strip() == "Accepted"
        assert await store.version() != before
        record = await store.load("from-afar")
        assert record is not None
        assert (record.state, record.input) == (RunState.Queued(), {"pid": "other"})
        assert [r.run_id for r in await store.runnable({"job"}, 2.0, 10)] == ["from-afar"]


async def test_claims_survive_closing_and_reopening(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SQLiteStore(path) as store:
        commit = start("r1")
        commit.claim = Claim("a", 100.0)
        assert (await _apply_one(store, commit)).epoch == 1
    async with SQLiteStore(path) as store:
        assert await store.renew("b", {"r1": 1}, 200.0) == ["r1"]
        assert await store.renew("a", {"r1": 1}, 200.0) == []
        fenced = Commit(
            run_id="r1",
            state=DONE,
            generation=1,
            expect=Expect(),
            at=150.0,
            fence=Fence("r1", "a", 1),
        )
        await _apply_one(store, fenced)


# ---------------------------------------------------------------------------- the runtime


async def _body(ctx: RunContext) -> JsonValue:
    messages = await ctx.boundary({"step": 1})
    return {"run": ctx.run_id, "messages": messages}


async def test_the_runtime_runs_on_a_sqlite_url(tmp_path: Path) -> None:
    path = tmp_path / "data" / "runs.db"
    with trio.fail_after(20):
        async with open_runtime(f"sqlite:///{path}") as runtime:
            handle = await runtime.start(_body, run_id="r1")
            assert await handle.wait() == DONE
            record = await runtime.record("r1")
            assert record.result == {"run": "r1", "messages": []}
            assert record.checkpoint == {"step": 1}
        assert any_store_threads() == []  # the runtime closed the store it opened
    async with SQLiteStore(path) as store:
        reopened = await store.load("r1")
        assert reopened == record
        assert [e.state for e in await store.events_after(0, "r1")] == [
            Running(1),
            Running(1),
            DONE,
        ]


async def test_serve_outlives_a_write_lock_held_past_the_busy_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Another connection holds the file's write lock (a backup tool, a stopped process):
    every write of the serving runtime fails with "database is locked". It logs, backs off
    and keeps serving; once the lock is gone, a run submitted then runs to its end."""
    monkeypatch.setattr(session_module, "BUSY_TIMEOUT", 0.05)
    caplog.set_level(logging.WARNING, logger="awaken_trio.worker")
    path = tmp_path / "runs.db"
    url = f"sqlite:///{path}"
    failed_thrice = trio.Event()

    class Failures(logging.Handler):
        """Sets ``failed_thrice`` at the serving loop's third failure (it logs in Trio's
        thread, the serving task's own)."""

        seen = 0

        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("serving"):
                self.seen += 1
                if self.seen >= 3:
                    failed_thrice.set()

    handler = Failures()
    logging.getLogger("awaken_trio.worker").addHandler(handler)
    try:
        with trio.fail_after(30):
            async with (
                open_runtime(url, bodies={"job": _body}, lease=2.0, poll=0.02) as worker,
                open_runtime(url, lease=2.0, poll=0.02) as control,
                trio.open_nursery() as nursery,
            ):
                await nursery.start(worker.serve)
                other = sqlite3.connect(path, isolation_level=None)
                try:
                    other.execute("BEGIN IMMEDIATE")  # held past the busy timeout
                    await failed_thrice.wait()
                    other.execute("ROLLBACK")
                finally:
                    other.close()
                handle = await control.submit("job", run_id="r1")
                assert await handle.wait() == DONE
                assert (await control.record("r1")).result == {"run": "r1", "messages": []}
                nursery.cancel_scope.cancel()
    finally:
        logging.getLogger("awaken_trio.worker").removeHandler(handler)
    assert any("database is locked" in r.getMessage() for r in caplog.records)


async def test_a_refused_file_fails_the_runtime_with_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    execute(path, "CREATE TABLE users (id INTEGER PRIMARY KEY)")
    before = digest(path)
    with trio.fail_after(20), pytest.raises(StoreError, match="another application"):
        async with open_runtime(f"sqlite:///{path}") as runtime:
            await runtime.start(_body, run_id="r1")
    assert digest(path) == before
    assert any_store_threads() == []


async def test_the_runtime_pauses_resumes_and_awaits_input_on_sqlite(tmp_path: Path) -> None:
    waiting = trio.Event()

    async def pausable(ctx: RunContext) -> JsonValue:
        if ctx.generation == 1:
            waiting.set()
            await ctx.boundary({"phase": "before pause"}, wait=True)
        answer = (
            await ctx.await_input("user_input", payload={"q": ["sure?"]})
            if (ctx.generation == 2)
            else ctx.resume_value
        )
        return {"answer": answer, "checkpoint": ctx.checkpoint}

    path = tmp_path / "runs.db"
    with trio.fail_after(20):
        async with open_runtime(f"sqlite:///{path}") as runtime:
            handle = await runtime.start(pausable, run_id="r1")
            await waiting.wait()
            runtime.deliver(LiveCommand.Pause("r1"))
            paused = await handle.wait()
            assert isinstance(paused, RunState.Awaiting)
            assert paused.ticket.reason == "manual_pause"
            asking = await (await runtime.resume("r1")).wait()
            assert isinstance(asking, RunState.Awaiting)
            assert asking.ticket.payload == {"q": ["sure?"]}
            done = await runtime.resume("r1", {"yes": True})
            assert await done.wait() == DONE
            record = await runtime.record("r1")
    assert record.result == {"answer": {"yes": True}, "checkpoint": {"phase": "before pause"}}
    assert record.generation == 3
    async with SQLiteStore(path) as store:
        states = [e.state for e in await store.events_after(0, "r1") if e.kind == "committed"]
        assert states[0] == Running(1)
        assert states[-1] == DONE
        assert sum(isinstance(s, RunState.Awaiting) for s in states) == 2


async def test_the_runtime_ends_children_first_and_follows_events_on_sqlite(
    tmp_path: Path,
) -> None:
    started = trio.Event()

    async def child(ctx: RunContext) -> JsonValue:
        started.set()
        await trio.sleep_forever()

    async def parent(ctx: RunContext) -> JsonValue:
        await ctx.start_child(child, run_id="child")
        await started.wait()
        return "parent done"

    path = tmp_path / "runs.db"
    seen: list[tuple[str, RunState]] = []
    with trio.fail_after(20):
        async with open_runtime(f"sqlite:///{path}") as runtime:
            async with trio.open_nursery() as nursery:

                async def follow() -> None:
                    seen.extend([(e.run_id, e.state) async for e in runtime.events("parent")])

                handle = await runtime.start(parent, run_id="parent")
                nursery.start_soon(follow)
                assert await handle.wait() == DONE
            assert await runtime.state("child") == Ended(EndCause.Cancelled())
    assert seen[-1] == ("parent", DONE)
    async with SQLiteStore(path) as store:
        everything = await store.events_after(0)
    terminal = {e.run_id: e.seq for e in everything if e.state.is_ended}
    assert terminal["child"] < terminal["parent"]


async def test_the_runtime_group_commits_on_sqlite(tmp_path: Path) -> None:
    async def quick(ctx: RunContext) -> JsonValue:
        await trio.lowlevel.checkpoint()
        return ctx.run_id

    path = tmp_path / "runs.db"
    with trio.fail_after(60):
        async with open_runtime(f"sqlite:///{path}") as runtime:
            async with trio.open_nursery() as nursery:
                for i in range(200):
                    nursery.start_soon(partial(runtime.execute, quick, run_id=f"r{i}"))
            stats = runtime.statistics().supervisor
            queued_behind = await runtime.start(quick, run_id="q", thread_id="busy")
            assert await queued_behind.wait() == DONE
    assert stats.largest_batch > 1
    assert stats.batches < stats.commits
    async with SQLiteStore(path) as store:
        events = await store.events_after(0, limit=10_000)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        for i in range(200):
            record = await store.load(f"r{i}")
            assert record is not None
            assert (record.state, record.result) == (DONE, f"r{i}")
