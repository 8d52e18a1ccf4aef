"""Ends announced in a commit's NOTIFY: a transaction that ends a run whose attempt is live
elsewhere names it in its notification (the server delivers one only once its transaction
has committed), so the owner stops the attempt without reading the store first. The
notice names the attempt it ended (its claim epoch, and the seq the end follows), and an
owner never lets it end any other. Real time, bounded by ``trio.fail_after``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Collection

import psycopg
import pytest
import trio

from awaken_trio import EndCause, RunContext, RunState, Runtime, open_runtime
from awaken_trio._core import HeardEnd
from awaken_trio.store import Accepted, Claim, Commit, ControlLook, Expect, Fence, NewRun
from awaken_trio.store import _postgres_listen as listen_module
from awaken_trio.store import _postgres_tx as tx_module
from awaken_trio.store._postgres import PostgresStore

CANCELLED = RunState.Ended(EndCause.Cancelled())


@pytest.fixture
async def stores(pg_url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    async with PostgresStore(pg_url) as here, PostgresStore(pg_url) as there:
        yield here, there


async def _listening(store: PostgresStore) -> None:
    """One short wait, so the listener's connection is made and LISTENs."""
    assert store.notices_changes()
    await store.wait_for_change(0.01)


def _claimed(run_id: str) -> Commit:
    return Commit(
        run_id=run_id,
        state=RunState.Running(1),
        generation=1,
        expect=Expect(new=True),
        at=1.0,
        new_run=NewRun(thread_id=f"t-{run_id}", parent_run_id=None, name="job"),
        claim=Claim("owner", 3600.0),
    )


async def _claim(store: PostgresStore, run_id: str) -> Accepted:
    [taken] = await store.apply([_claimed(run_id)])
    assert isinstance(taken, Accepted)
    assert taken.epoch is not None
    return taken


async def test_an_end_committed_against_a_live_attempt_is_announced_with_that_attempt(
    stores: tuple[PostgresStore, PostgresStore],
) -> None:
    here, there = stores
    first = await _claim(there, "r1")
    await _listening(here)
    stopped = RunState.Ended(EndCause.Stopped("budget: ünïcode"))
    with trio.fail_after(20):
        await there.apply(
            [Commit(run_id="r1", state=stopped, generation=1, expect=Expect(), at=2.0)]
        )
        assert await here.wait_for_control(10.0) is True
        assert here.heard_ends() == [
            HeardEnd("r1", stopped, epoch=first.epoch or 0, after_seq=first.last_seq)
        ]
        assert here.heard_ends() == []  # taken once


async def test_commits_that_end_no_live_attempt_announce_no_end(
    stores: tuple[PostgresStore, PostgresStore],
) -> None:
    """The attempt's own end (fenced by its claim: it clears the live mark) and a run's
    creation announce nothing; neither does the store's own commit to its own listener."""
    here, there = stores
    own = await _claim(there, "r1")
    await _listening(here)
    with trio.fail_after(20):
        fenced = Commit(
            run_id="r1",
            state=CANCELLED,
            generation=1,
            expect=Expect(),
            at=2.0,
            fence=Fence("r1", "owner", own.epoch or 0),
        )
        await there.apply([fenced])
        await _claim(there, "r2")
        assert await here.wait_for_change(10.0) is True
        await trio.sleep(0.2)  # (any notice left is in by now)
        await here.wait_for_change(0.05)
        assert here.heard_ends() == []
        mine = await _claim(here, "r3")
        await there.apply([])
        await here.apply(
            [Commit(run_id="r3", state=CANCELLED, generation=1, expect=Expect(), at=3.0)]
        )
        assert mine.epoch is not None
        await here.wait_for_change(0.3)
        assert here.heard_ends() == []


async def test_an_end_too_large_for_a_notice_commits_and_is_found_by_reading(
    stores: tuple[PostgresStore, PostgresStore],
) -> None:
    """PostgreSQL refuses a NOTIFY payload of 8,000 bytes or more: an end whose text would
    not fit is left out of the notice (the commit lands, and still says it controls a run),
    and the owner's look reads it."""
    here, there = stores
    await _claim(there, "r1")
    await _listening(here)
    long = RunState.Ended(EndCause.Stopped("x" * (tx_module.ENDS_MAX_BYTES + 100)))
    with trio.fail_after(20):
        [ended] = await there.apply(
            [Commit(run_id="r1", state=long, generation=1, expect=Expect(), at=2.0)]
        )
        assert isinstance(ended, Accepted)
        assert await here.wait_for_control(10.0) is True
        assert here.heard_ends() == []
        look = await here.look_at_control(["r1"], 0, ["r1"], anyway=True)
        assert look.ended == {"r1": long}


async def test_a_notice_the_listener_cannot_read_is_passed_over(
    stores: tuple[PostgresStore, PostgresStore], pg_url: str
) -> None:
    """Anyone may NOTIFY on the store's channel: a payload that is not an announced end is
    a hint like any other, and names no end."""
    here, there = stores
    await _listening(here)
    channel = here._channel
    junk = [
        "someone else control\nnot a seq\n[]",
        "someone else control\n7\nnot json",
        'someone else control\n7\n[["r1", 1, {"kind": "running", "generation": 1}]]',
        'someone else control\n7\n[["r1", "one", {"kind": "ended"}]]',
        "someone else control\n7\n" + json.dumps([[1, 2]]),
    ]
    with trio.fail_after(20):
        for payload in junk:

            def notify(payload: str = payload) -> None:
                with psycopg.connect(pg_url, autocommit=True) as conn:
                    conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))

            await trio.to_thread.run_sync(notify)
            assert await here.wait_for_control(10.0) is True
        assert here.heard_ends() == []
        # The listener still hears and reads a real one.
        first = await _claim(there, "r1")
        await there.apply(
            [Commit(run_id="r1", state=CANCELLED, generation=1, expect=Expect(), at=2.0)]
        )
        assert await here.wait_for_control(10.0) is True
        assert here.heard_ends() == [HeardEnd("r1", CANCELLED, first.epoch or 0, first.last_seq)]


async def parked(ctx: RunContext) -> object:
    await trio.sleep_forever()
    return None  # pragma: no cover


def _blind(store: PostgresStore) -> None:
    """Make ``store``'s looks find nothing, so a notice is the only way its runtime can
    learn of an end committed elsewhere."""

    async def look_at_control(
        run_ids: Collection[str], after: int, running: Collection[str], *, anyway: bool
    ) -> ControlLook:
        await trio.lowlevel.checkpoint()
        return ControlLook(version=0)

    store.look_at_control = look_at_control  # type: ignore[method-assign]


def _store(runtime: Runtime) -> PostgresStore:
    store = runtime._supervisor.store
    assert isinstance(store, PostgresStore)
    return store


async def test_a_cancel_from_another_runtime_stops_the_owner_by_its_notice(pg_url: str) -> None:
    """The owner's looks are made blind: the cancel still stops its attempt, from the
    notice alone, and the owner commits nothing of its own (the store keeps the one end
    the canceller committed)."""
    stopped = trio.Event()

    async def body(ctx: RunContext) -> object:
        try:
            await trio.sleep_forever()
        finally:
            stopped.set()

    with trio.fail_after(30):
        async with open_runtime(pg_url, poll=0.05) as owner, open_runtime(pg_url) as other:
            _blind(_store(owner))
            handle = await owner.start(body, run_id="r1")
            await trio.sleep(0.2)  # (the owner's relay rests, waiting for a notice)
            assert await other.cancel_run("r1", reason="from elsewhere") == CANCELLED
            await stopped.wait()
            assert (await other.record("r1")).state == CANCELLED
            ends = [
                e
                async for e in other.events("r1", follow=False)
                if e.kind == "committed" and isinstance(e.state, RunState.Ended)
            ]
            assert [e.detail for e in ends] == [
                {"source": "cancel_run", "reason": "from elsewhere"}
            ]
            assert await handle.wait() == CANCELLED


async def test_an_announced_end_stops_only_the_attempt_it_was_committed_against(
    pg_url: str,
) -> None:
    """A notice naming another claim epoch, or an end that came before the attempt was
    admitted (a run of the same id, long gone), leaves the attempt running; the notice of
    its own end stops it."""
    with trio.fail_after(30):
        async with open_runtime(pg_url) as owner:
            supervisor = owner._supervisor
            await owner.start(parked, run_id="r1")
            attempt = supervisor.registry.get("r1")
            assert attempt is not None
            assert attempt.fence is not None
            epoch, admitted = attempt.fence.epoch, attempt.start_seq
            assert admitted > 0
            supervisor.heard_end(HeardEnd("r1", CANCELLED, epoch + 1, admitted))
            supervisor.heard_end(HeardEnd("r1", CANCELLED, epoch, admitted - 1))
            supervisor.heard_end(HeardEnd("elsewhere", CANCELLED, epoch, admitted))
            await trio.sleep(0.1)
            assert attempt.request is None
            assert attempt.phase == "running"
            supervisor.heard_end(HeardEnd("r1", CANCELLED, epoch, admitted))
            assert attempt.request is not None
            assert attempt.request.disposition == "lost"
            with trio.fail_after(10):
                await attempt.completion.wait()


def test_the_listener_keeps_the_latest_heard_ends_only() -> None:
    """Ends nobody takes (a relay that is not running) do not pile up: the oldest go, and
    the store's reads find them anyway."""
    listener = listen_module.Listener("host=127.0.0.1 port=1", "channel", "me", "shown")
    most = listen_module.HEARD_AT_MOST
    for i in range(most + 5):
        state = '{"kind":"ended","cause":{"kind":"cancelled"}}'
        listener._hear(f'{i}\n[["r{i}", 1, {state}]]')
    heard = listener.take_heard()
    assert len(heard) == most
    assert heard[0] == HeardEnd("r5", CANCELLED, 1, 5)
    assert heard[-1].after_seq == most + 4
    assert listener.take_heard() == []
