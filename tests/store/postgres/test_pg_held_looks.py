"""A held look (``_held``, `PostgresStore.looking`): the runs a look finds stay locked to
the runtime that looked until its block exits, and the next batch the store applies is
written in the look's own transaction. Checked from other connections: what is locked,
which transaction wrote a row (``xmin``) and which locked it (``xmax``). Real time,
bounded by ``trio.fail_after``."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
import trio

from awaken_trio import EndCause, RunContext, RunState, open_runtime
from awaken_trio.store import Accepted, Claim, Commit, Expect, Rejected, RejectReason
from awaken_trio.store.postgres import _held as held_module
from awaken_trio.store.postgres._conn import StoreConnection
from awaken_trio.store.postgres._held import HeldLook
from awaken_trio.store.postgres._store import PostgresStore
from awaken_trio.store.postgres._tx import PgTx, thread_key, thread_locks
from awaken_trio.testing._commits import Queued, end, run
from tests.commits import new_queued
from tests.pg_server import lock_waiters, row_versions

NAMES = {"job"}
LEASE = 30.0
NATURAL = RunState.Ended(EndCause.NaturalEnd())


def _start(run_id: str, owner: str = "w") -> Commit:
    """A queued run's first attempt, as a serving runtime commits it."""
    return run(
        run_id,
        1,
        expect=Expect(generation=0, state=Queued),
        at=3.0,
        take_messages=True,
        claim=Claim(owner, LEASE),
        thread_guard=True,
    )


@contextmanager
def _admin(pg_url: str) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        yield conn


async def _in_thread(fn: Callable[[], Any]) -> Any:
    return await trio.to_thread.run_sync(fn)


def _locked(pg_url: str, run_id: str) -> bool:
    """Whether another transaction holds the run's row lock."""
    with psycopg.connect(pg_url) as conn:
        try:
            conn.execute("SELECT 1 FROM awaken.runs WHERE run_id = %s FOR UPDATE NOWAIT", (run_id,))
        except psycopg.errors.LockNotAvailable:
            return True
        finally:
            conn.rollback()
    return False


def _claims(pg_url: str) -> dict[str, tuple[str, float]]:
    """Every claim: run -> (owner, lease end)."""
    with _admin(pg_url) as conn:
        found = conn.execute("SELECT run_id, owner, lease_until FROM awaken.claims").fetchall()
    return {run_id: (owner, lease_until) for run_id, owner, lease_until in found}


def _owners(pg_url: str) -> dict[str, str]:
    """Every claim's owner, by run."""
    return {run_id: owner for run_id, (owner, _) in _claims(pg_url).items()}


def _server_now(pg_url: str) -> float:
    with _admin(pg_url) as conn:
        found = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
    assert found is not None
    return float(found[0])


def _count(pg_url: str, table: str) -> int:
    with _admin(pg_url) as conn:
        found = conn.execute(f"SELECT count(*) FROM awaken.{table}").fetchone()
    assert found is not None
    return int(found[0])


async def _queue(store: PostgresStore, *run_ids: str) -> None:
    results = await store.apply([new_queued(run_id) for run_id in run_ids])
    assert all(isinstance(result, Accepted) for result in results)


async def _queued(stores: list[PostgresStore], *run_ids: str) -> PostgresStore:
    """The first of ``stores``, with ``run_ids`` queued in it."""
    await _queue(stores[0], *run_ids)
    return stores[0]


async def test_a_held_look_s_runs_start_in_the_look_s_own_transaction(
    stores: list[PostgresStore], pg_url: str
) -> None:
    store = await _queued(stores, "a", "b")
    with trio.fail_after(30):
        async with store.looking(NAMES, 2.0, 10) as found:
            assert [r.run_id for r in found] == ["a", "b"]
            assert [r.state for r in found] == [RunState.Queued(), RunState.Queued()]
            assert await _in_thread(lambda: _locked(pg_url, "a"))
            assert await _in_thread(lambda: _locked(pg_url, "b"))
            _, look = await _in_thread(lambda: row_versions(pg_url, "a"))
            assert look != 0  # the look's transaction holds the row's lock
            a, b = await store.apply([_start("a"), _start("b")])
            assert isinstance(a, Accepted)
            assert isinstance(b, Accepted)
            # Written by the look's transaction, which then committed: nothing is held.
            written, _ = await _in_thread(lambda: row_versions(pg_url, "a"))
            assert written == look
            assert not await _in_thread(lambda: _locked(pg_url, "b"))
        assert _count(pg_url, "reserved") == 0  # held, not reserved
        for run_id in ("a", "b"):
            record = await store.load(run_id)
            assert record is not None
            assert record.state == RunState.Running(1)
        assert _owners(pg_url) == {"a": "w", "b": "w"}


def _plan_mode_after_a_held_look(store: PostgresStore, pg_url: str, mode: str) -> str:
    """The plan mode a session planning in ``mode`` is left in, in the transaction a look
    held on it (where the look's batch is then written)."""
    with StoreConnection.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"SET plan_cache_mode = {mode}")
        held = held_module.hold(
            conn,
            store._queries,
            sorted(NAMES),
            2.0,
            10,
            by="w",
            served=None,
            thread_space=store._thread_locks,
            thread_key=thread_key,
            clock=None,
            offset=0.0,
            sweep=False,
        )
        assert held is not None
        (after,) = conn.execute("SHOW plan_cache_mode").fetchone() or ("",)
        conn.rollback()
    return str(after)


@pytest.mark.parametrize("mode", ["auto", "force_generic_plan"])
async def test_the_statements_after_a_held_look_are_planned_in_the_mode_it_replaced(
    stores: list[PostgresStore], pg_url: str, mode: str
) -> None:
    # The look plans its own statements anew (`look_held`); the starts written in its
    # transaction are planned as the session plans every other, even in a mode the session
    # set for itself, which the server's default would not give back.
    store = await _queued(stores, "a")
    with trio.fail_after(30):
        after = await _in_thread(lambda: _plan_mode_after_a_held_look(store, pg_url, mode))
    assert after == mode


async def test_a_look_no_batch_took_is_let_go_when_its_block_exits(
    stores: list[PostgresStore], pg_url: str
) -> None:
    here, there = stores[0], stores[1]
    await _queue(here, "a", "b")
    with trio.fail_after(30):
        async with here.looking(NAMES, 2.0, 10) as found:
            assert [r.run_id for r in found] == ["a", "b"]
            assert await there.runnable(NAMES, 2.0, 10) == []  # passed over while held
        assert not await _in_thread(lambda: _locked(pg_url, "a"))
        # Free again at once, to any look (nothing was reserved).
        assert [r.run_id for r in await there.runnable(NAMES, 2.0, 10)] == ["a", "b"]


@pytest.mark.parametrize("how", ["cancelled", "raising"])
async def test_a_look_is_let_go_when_its_block_is_cancelled_or_raises(
    stores: list[PostgresStore], pg_url: str, how: str
) -> None:
    store = await _queued(stores, "a")
    with trio.fail_after(30):
        with trio.CancelScope() as scope:
            try:
                async with store.looking(NAMES, 2.0, 10) as found:
                    assert [r.run_id for r in found] == ["a"]
                    if how == "cancelled":
                        scope.cancel()
                        await trio.sleep_forever()
                    raise LookupError("the block failed")
            except LookupError:
                assert how == "raising"
        assert scope.cancelled_caught == (how == "cancelled")
        assert not await _in_thread(lambda: _locked(pg_url, "a"))
        # The store holds looks again.
        async with store.looking(NAMES, 2.0, 10) as again:
            assert [r.run_id for r in again] == ["a"]
            assert await _in_thread(lambda: _locked(pg_url, "a"))


async def test_other_looks_pass_a_held_look_s_runs_over(stores: list[PostgresStore]) -> None:
    here, there = stores[0], stores[1]
    await _queue(here, "a", "b", "c", "d")
    with trio.fail_after(30):
        async with (
            here.looking(NAMES, 2.0, 2) as mine,
            there.looking(NAMES, 2.0, 10) as theirs,
        ):
            assert [r.run_id for r in mine] == ["a", "b"]
            assert [r.run_id for r in theirs] == ["c", "d"]


async def test_a_second_look_on_the_same_store_reserves_as_runnable_does(
    stores: list[PostgresStore], pg_url: str
) -> None:
    store = await _queued(stores, "a", "b")
    with trio.fail_after(30):
        async with (
            store.looking(NAMES, 2.0, 1) as held,
            store.looking(NAMES, 2.0, 1) as other,
        ):
            assert [r.run_id for r in held] == ["a"]
            assert [r.run_id for r in other] == ["b"]
            assert _count(pg_url, "reserved") == 1  # the second look's own
            assert not await _in_thread(lambda: _locked(pg_url, "b"))


async def test_any_batch_is_written_in_the_held_look_and_frees_the_rest(
    stores: list[PostgresStore], pg_url: str
) -> None:
    """A batch that starts none of the look's runs (here: it creates one, a batch that
    would be guessed) is written in the look's transaction all the same; the look's runs
    are free once it commits, and start in transactions of their own."""
    store = await _queued(stores, "a")
    with trio.fail_after(30):
        async with store.looking(NAMES, 2.0, 10) as found:
            assert [r.run_id for r in found] == ["a"]
            _, look = await _in_thread(lambda: row_versions(pg_url, "a"))
            (created,) = await store.apply([new_queued("x")])
            assert isinstance(created, Accepted)
            written, _ = await _in_thread(lambda: row_versions(pg_url, "x"))
            assert written == look
            assert not await _in_thread(lambda: _locked(pg_url, "a"))
            (started,) = await store.apply([_start("a")])
            assert isinstance(started, Accepted)
            written, _ = await _in_thread(lambda: row_versions(pg_url, "a"))
            assert written != look


async def test_a_command_posted_to_a_held_run_waits_for_its_start_and_is_kept(
    stores: list[PostgresStore], pg_url: str
) -> None:
    here, there = stores[0], stores[1]
    await _queue(here, "a")
    before = await there.post_command("a", "message", "before", None, 2.0)
    assert isinstance(before, int)
    posted: list[object] = []

    async def post() -> None:
        posted.append(await there.post_command("a", "message", "meanwhile", None, 2.5))

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery, here.looking(NAMES, 2.0, 10) as found:
            assert [r.run_id for r in found] == ["a"]
            nursery.start_soon(post)
            # The post waits for the run's lock.
            while not await _in_thread(lambda: lock_waiters(pg_url)):  # noqa: ASYNC110 - a server's state
                await trio.sleep(0.01)
            assert posted == []
            (started,) = await here.apply([_start("a")])
            assert isinstance(started, Accepted)
            # Handed over: what was stored before the look, not what waited for it.
            assert started.commands is not None
            assert [c.payload for c in started.commands] == ["before"]
        (meanwhile,) = posted
        assert isinstance(meanwhile, int)
        assert [c.payload for c in await here.commands(["a"])] == ["before", "meanwhile"]


@pytest.mark.parametrize("taken", ["thread", "claim"])
async def test_a_run_whose_thread_or_claim_another_transaction_holds_is_not_held(
    stores: list[PostgresStore], pg_url: str, taken: str
) -> None:
    store = await _queued(stores, "a", "b")
    with _admin(pg_url) as conn:  # a claim its owner lost long ago
        conn.execute("INSERT INTO awaken.claims VALUES ('a', 'gone', 1, 0.0)")
    with trio.fail_after(30), psycopg.connect(pg_url) as other:
        if taken == "thread":
            other.execute(
                "SELECT pg_advisory_xact_lock(%s, %s)",
                (thread_locks("awaken"), thread_key("t-a")),
            )
        else:
            other.execute("SELECT 1 FROM awaken.claims WHERE run_id = 'a' FOR UPDATE")
        async with store.looking(NAMES, 2.0, 10) as found:
            assert [r.run_id for r in found] == ["b"]
        other.rollback()
        async with store.looking(NAMES, 2.0, 10) as found:
            assert [r.run_id for r in found] == ["a", "b"]
            # Its stale claim is what the start reads, and replaces.
            a, b = await store.apply([_start("a"), _start("b")])
            assert isinstance(a, Accepted)
            assert isinstance(b, Accepted)
        assert _owners(pg_url) == {"a": "w", "b": "w"}


async def test_a_start_in_a_look_whose_connection_broke_runs_again_on_its_own(
    stores: list[PostgresStore], pg_url: str
) -> None:
    store = await _queued(stores, "a")
    with trio.fail_after(30):
        async with store.looking(NAMES, 2.0, 10) as found:
            assert [r.run_id for r in found] == ["a"]
            with _admin(pg_url) as conn:  # the look's server process ends
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_locks"
                    " WHERE locktype = 'advisory' AND pid <> pg_backend_pid()"
                )
            (started,) = await store.apply([_start("a")])
            assert isinstance(started, Accepted)
        record = await store.load("a")
        assert record is not None
        assert record.state == RunState.Running(1)


async def test_a_start_in_a_held_look_measures_its_lease_from_the_clock_at_its_start(
    stores: list[PostgresStore], offset: list[float], pg_url: str
) -> None:
    """The look read the server's clock; the start's lease runs from the clock as it
    reads when the start is written (here the store's offset moved on meanwhile)."""
    store = await _queued(stores, "a")
    with trio.fail_after(30):
        looked = await _in_thread(lambda: _server_now(pg_url))
        async with store.looking(NAMES, 2.0, 10) as found:
            assert [r.run_id for r in found] == ["a"]
            offset[0] = 1000.0
            (started,) = await store.apply([_start("a")])
            assert isinstance(started, Accepted)
        ((owner, lease_until),) = _claims(pg_url).values()
        assert owner == "w"
        assert lease_until >= looked + 1000.0 + LEASE


async def test_a_refused_start_in_a_held_look_leaves_the_run_as_it_was(
    stores: list[PostgresStore],
) -> None:
    """The rules run on what the look read as on what a transaction reads: a start that
    expects another generation is refused, and the run stays queued for the next look."""
    store = await _queued(stores, "a")
    stale = run("a", 2, expect=Expect(generation=1, state=Queued), at=3.0, claim=Claim("w", 1.0))
    with trio.fail_after(30):
        async with store.looking(NAMES, 2.0, 10) as found:
            assert [r.run_id for r in found] == ["a"]
            (refused,) = await store.apply([stale])
            assert isinstance(refused, Rejected)
        assert [r.run_id for r in await store.list_runs(state="queued")] == ["a"]


async def _noop(ctx: RunContext) -> int:
    return 1


async def test_a_serving_runtime_holds_its_looks_and_starts_its_runs_in_them(
    pg_url: str,
) -> None:
    """A runtime serving a PostgreSQL store looks through `looking`: its runs are started
    without a reservation, and nothing stays locked once they have ended."""
    with trio.fail_after(60):
        async with (
            open_runtime(pg_url, bodies={"job": _noop}, lease=LEASE, poll=0.02) as worker,
            open_runtime(pg_url) as control,
            trio.open_nursery() as nursery,
        ):
            for i in range(20):
                await control.submit("job", run_id=f"r{i}")
            await nursery.start(lambda task_status: worker.serve(task_status=task_status))
            for i in range(20):
                while not isinstance(await control.state(f"r{i}"), RunState.Ended):  # noqa: ASYNC110 - a store's state
                    await trio.sleep(0.02)
                assert await control.state(f"r{i}") == NATURAL
            nursery.cancel_scope.cancel()
    assert _count(pg_url, "reserved") == 0
    assert _count(pg_url, "claims") == 0
    assert not await _in_thread(lambda: _locked(pg_url, "r0"))


async def test_a_look_whose_pooled_connection_broke_looks_again_on_a_fresh_one(
    stores: list[PostgresStore], pg_url: str
) -> None:
    store = await _queued(stores, "a")
    with _admin(pg_url) as conn:  # every pooled connection's server process ends
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    with trio.fail_after(30):
        async with store.looking(NAMES, 2.0, 10) as found:
            assert [r.run_id for r in found] == ["a"]
            (started,) = await store.apply([_start("a")])
            assert isinstance(started, Accepted)


async def test_a_look_held_past_its_idle_limit_is_ended_by_the_server(
    stores: list[PostgresStore], pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runtime stopped or stuck with a look held keeps its runs from others only until
    the server ends the idle transaction; a start it writes after runs on a connection of
    its own."""
    monkeypatch.setattr(held_module, "IDLE_AT_MOST", 0.2)
    here, there = stores[0], stores[1]
    await _queue(here, "a")
    with trio.fail_after(30):
        async with here.looking(NAMES, 2.0, 10) as found:
            assert [r.run_id for r in found] == ["a"]
            while not await there.runnable(NAMES, 2.0, 10):  # noqa: ASYNC110 - a server's state
                await trio.sleep(0.05)
            (started,) = await here.apply([_start("a")])
            assert isinstance(started, Accepted)
        record = await here.load("a")
        assert record is not None
        assert record.state == RunState.Running(1)


async def test_a_batch_run_again_after_the_look_s_transaction_failed_reads_its_rows_anew(
    stores: list[PostgresStore], pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows a look read hold only in its own transaction. When that transaction fails
    (here a deadlock, once the run was ended elsewhere) and the batch is run again, it runs
    on its own reads, even on the look's own connection, which the pool hands back (the
    only one idle): a run ended meanwhile is not started, and stays ended."""
    here, there = stores[0], stores[1]
    await _queue(here, "a")
    cancelled = RunState.Ended(EndCause.Cancelled())
    failed: list[object] = []
    given = PgTx.begin_held

    def begin_held(tx: PgTx, look: HeldLook, batch: Sequence[Commit] = ()) -> float:
        if failed:
            return given(tx, look, batch)
        failed.append(look.conn)
        tx.conn.roll_back()  # the look's transaction ends here, and its locks with it
        (ended,) = trio.from_thread.run(
            there.apply, [end("a", cancelled, 0, expect=Expect(generation=0, state=Queued))]
        )
        assert isinstance(ended, Accepted), ended
        raise psycopg.errors.DeadlockDetected("deadlock detected (the test's)")

    monkeypatch.setattr(PgTx, "begin_held", begin_held)
    with trio.fail_after(30):
        async with here.looking(NAMES, 2.0, 10) as found:
            assert [r.run_id for r in found] == ["a"]
            (started,) = await here.apply([_start("a")])
    assert failed, "the look's transaction was never tried"
    assert isinstance(started, Rejected), started
    assert started.reason is RejectReason.ENDED
    record = await here.load("a")
    assert record is not None
    assert record.state == cancelled
    assert _owners(pg_url) == {}
