"""The PostgreSQL store's signals: a commit by another store wakes `wait_for_change` at
once (LISTEN/NOTIFY), the store's own commits do not, a quiet wait times out, and a
listener whose pings are no longer heard back is connected again (the wait then answers
True and the version moves, so the runtime reads everything it owns again). A commit that
ends a run whose attempt is live elsewhere names it in its notice (its end, the attempt's
claim epoch and the seq the end follows), which the listener keeps for the relay; a notice
it cannot read names nothing. Real time, bounded by ``trio.fail_after``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial

import psycopg
import pytest
import trio

from awaken_trio import EndCause, RunState
from awaken_trio._core import HeardEnd
from awaken_trio.store import Accepted, Claim, Commit, Expect, Fence, NewRun
from awaken_trio.store.postgres import _listen as listen_module
from awaken_trio.store.postgres import _tx as tx_module
from awaken_trio.store.postgres._queries import Queries
from awaken_trio.store.postgres._store import PostgresStore
from tests.commits import new_queued


@pytest.fixture
async def stores(pg_url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    async with PostgresStore(pg_url) as here, PostgresStore(pg_url) as there:
        yield here, there


async def _listening(store: PostgresStore) -> None:
    """One short wait, so the listener's connection is made and LISTENs."""
    assert store.notices_changes()
    await store.wait_for_change(0.01)


async def test_another_stores_commit_wakes_the_wait(
    stores: tuple[PostgresStore, PostgresStore],
) -> None:
    here, there = stores
    await _listening(here)
    woke: list[bool] = []

    async def wait() -> None:
        woke.append(await here.wait_for_change(30.0))

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.sleep(0.05)  # (the wait is under way; the commit may come any time)
            await there.apply([new_queued("r1")])
    assert woke == [True]


async def test_the_stores_own_commits_and_silence_do_not_wake_it(
    stores: tuple[PostgresStore, PostgresStore],
) -> None:
    here, _ = stores
    await _listening(here)
    await here.apply([new_queued("r1")])
    with trio.fail_after(10):
        assert await here.wait_for_change(0.3) is False


async def test_a_listener_whose_pings_go_unheard_connects_again(
    stores: tuple[PostgresStore, PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection still answers but hears nothing (as a half-open one would look):
    the self-NOTIFY is not heard back, so the listener drops it and connects again."""
    monkeypatch.setattr(listen_module, "PING_EVERY", 0.1)
    monkeypatch.setattr(listen_module, "PING_WAIT", 0.2)
    here, there = stores
    await _listening(here)
    before = await here.version()
    listener = here._listener
    assert listener is not None
    assert listener._conn is not None
    listener._conn.execute("UNLISTEN *")  # (no wait is running: the connection is free)
    with trio.fail_after(20):
        assert await here.wait_for_change(15.0) is True
    assert listener.reconnects == 1
    assert await here.version() != before
    # And it hears again.
    woke: list[bool] = []

    async def wait() -> None:
        woke.append(await here.wait_for_change(30.0))

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.sleep(0.05)
            await there.apply([new_queued("r2")])
    assert woke == [True]


async def test_a_cancelled_wait_leaves_the_listener_usable(
    stores: tuple[PostgresStore, PostgresStore],
) -> None:
    here, there = stores
    await _listening(here)
    with trio.move_on_after(0.1):
        await here.wait_for_change(30.0)
    woke: list[bool] = []

    async def wait() -> None:
        woke.append(await here.wait_for_change(30.0))

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.sleep(0.05)
            await there.apply([new_queued("r1")])
    assert woke == [True]


async def test_a_wait_for_controls_passes_over_other_commits_and_keeps_them(
    stores: tuple[PostgresStore, PostgresStore],
) -> None:
    """An owner resting between looks waits for a stored command only: another store's
    plain commit does not end that wait, but the next wait for any change answers it at
    once; a command another store posts ends it; the store's own command does not."""
    here, there = stores
    await _listening(here)
    with trio.fail_after(20):
        await there.apply([new_queued("r1")])
        assert await here.wait_for_control(0.5) is False
        assert await here.wait_for_change(10.0) is True  # the kept commit, at once
        await here.post_command("r1", "wake", None, None, 1.0)  # our own
        assert await here.wait_for_control(0.3) is False
        assert await _control_wakes(
            here, partial(there.post_command, "r1", "cancel", None, "stop", 1.0)
        )


async def test_an_end_committed_while_the_attempt_runs_elsewhere_ends_a_wait_for_control(
    stores: tuple[PostgresStore, PostgresStore],
) -> None:
    """A run's attempt is live (claimed by ``here``'s owner); another runtime commits its
    end (a committed cancel): the owner, resting between looks, is told at once. The
    attempt's own end, fenced, is no such news."""
    here, there = stores
    running = Commit(
        run_id="r1",
        state=RunState.Running(1),
        generation=1,
        expect=Expect(new=True),
        at=1.0,
        new_run=NewRun(thread_id="t-r1", parent_run_id=None, name="job"),
        claim=Claim("owner", 3600.0),
    )
    [taken] = await there.apply([running])
    assert isinstance(taken, Accepted)
    await _listening(here)
    cancelled = RunState.Ended(EndCause.Cancelled())
    with trio.fail_after(20):
        # The attempt's own end of another run, fenced by its claim: not a control.
        [own] = await there.apply([_claimed("r3")])
        assert isinstance(own, Accepted)
        assert own.epoch is not None
        await there.apply([_own_end("r3", own.epoch)])
        assert await here.wait_for_control(0.5) is False
        cancel = Commit(run_id="r1", state=cancelled, generation=1, expect=Expect(), at=2.0)
        assert await _control_wakes(here, partial(there.apply, [cancel]))


async def _control_wakes(store: PostgresStore, commit: Callable[[], Awaitable[object]]) -> bool:
    """Whether a `wait_for_control` of ``store`` under way when ``commit`` lands ends."""
    woke: list[bool] = []

    async def wait() -> None:
        woke.append(await store.wait_for_control(30.0))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.sleep(0.05)  # (the wait is under way; the commit may come any time)
        await commit()
    return woke == [True]


def _own_end(run_id: str, epoch: int) -> Commit:
    """The attempt's own end (cancelled), fenced by the claim ``_claimed`` took."""
    return Commit(
        run_id=run_id,
        state=RunState.Ended(EndCause.Cancelled()),
        generation=1,
        expect=Expect(),
        at=2.0,
        fence=Fence(run_id, "owner", epoch),
    )


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


async def test_a_look_at_control_reads_commands_and_ends_in_one_call(
    stores: tuple[PostgresStore, PostgresStore],
) -> None:
    """`look_at_control` answers the relay's three questions at once: the version, the
    commands stored after a command id for the runs asked about, and which running ones
    have ended (only those). With no write since the last look the server reads nothing
    (unless asked to read anyway); a write by another store makes it read again."""
    here, there = stores
    cancelled = RunState.Ended(EndCause.Cancelled())
    asked = ["r1", "r2", "r3"]
    with trio.fail_after(20):
        for run_id in (*asked, "r4"):
            await there.apply([_claimed(run_id)])
        first = await there.post_command("r1", "wake", None, None, 1.0)
        second = await there.post_command("r2", "cancel", None, "stop", 1.0)
        await there.post_command("r4", "wake", None, None, 1.0)  # not asked about
        assert isinstance(first, int)
        assert isinstance(second, int)
        for run_id in ("r3", "r4"):
            end = Commit(run_id=run_id, state=cancelled, generation=1, expect=Expect(), at=2.0)
            await there.apply([end])
        look = await here.look_at_control(asked, 0, asked, anyway=False)
        assert [(c.run_id, c.kind) for c in look.commands] == [("r1", "wake"), ("r2", "cancel")]
        assert dict(look.ended) == {"r3": cancelled}
        assert look.version == await here.version()
        # After the first command only; and an ended run not asked about as running is left.
        later = await here.look_at_control(asked, first, ["r1", "r2"], anyway=True)
        assert [c.id for c in later.commands] == [second]
        assert dict(later.ended) == {}
        # Nothing written since: nothing read, and the version has not moved.
        quiet = await here.look_at_control(asked, 0, asked, anyway=False)
        assert (quiet.version, quiet.commands, dict(quiet.ended)) == (look.version, (), {})
        anyway = await here.look_at_control(["r1"], 0, ["r1"], anyway=True)
        assert [c.id for c in anyway.commands] == [first]
        third = await there.post_command("r1", "wake", None, None, 3.0)
        moved = await here.look_at_control(["r1"], first, ["r1"], anyway=False)
        assert moved.version != look.version
        assert [c.id for c in moved.commands] == [third]


async def test_a_look_after_the_listener_connected_again_reads_everything(
    stores: tuple[PostgresStore, PostgresStore],
) -> None:
    """A command stored while the listener was away is read by the next look even when no
    write landed since the last one: the version moves, and the server is asked to read."""
    here, there = stores
    with trio.fail_after(20):
        await there.apply([_claimed("r1")])
        await _listening(here)
        posted = await there.post_command("r1", "cancel", None, "stop", 1.0)
        before = await here.look_at_control(["r1"], 0, ["r1"], anyway=False)
        assert [c.id for c in before.commands] == [posted]
        assert (await here.look_at_control(["r1"], 0, ["r1"], anyway=False)).commands == ()
        listener = here._listener
        assert listener is not None
        listener.reconnects += 1  # (as a reconnect counts it)
        again = await here.look_at_control(["r1"], 0, ["r1"], anyway=False)
        assert again.version != before.version
        assert [c.id for c in again.commands] == [posted]


async def test_a_command_stored_just_before_an_own_commit_is_read_by_the_next_look(
    stores: tuple[PostgresStore, PostgresStore],
) -> None:
    """Another store posts a command; then this store commits a write of its own, which
    tells it the writes count moved past the command. The next look must still read the
    command: whether a look may skip is decided by what the last look saw, not by the
    count this store's own commits bring it up to."""
    here, there = stores
    with trio.fail_after(20):
        await there.apply([_claimed("r1")])
        first = await here.look_at_control(["r1"], 0, ["r1"], anyway=True)
        assert first.commands == ()
        posted = await there.post_command("r1", "wake", None, None, 1.0)
        await here.apply([new_queued("own")])  # a write of this store, after the command
        look = await here.look_at_control(["r1"], 0, ["r1"], anyway=False)
        assert [c.id for c in look.commands] == [posted]


# ---------------------------------------------------------------- announced ends

CANCELLED = RunState.Ended(EndCause.Cancelled())


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
        await there.apply([_own_end("r1", own.epoch or 0)])
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
    channel = here._queries.channel
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


def test_the_listener_keeps_the_latest_heard_ends_only() -> None:
    """Ends nobody takes (a relay that is not running) do not pile up: the oldest go, and
    the store's reads find them anyway."""
    queries = Queries.of("awaken")
    listener = listen_module.Listener("host=127.0.0.1 port=1", queries, "me", "shown")
    most = listen_module.HEARD_AT_MOST
    for i in range(most + 5):
        state = '{"kind":"ended","cause":{"kind":"cancelled"}}'
        listener._hear(f'{i}\n[["r{i}", 1, {state}]]')
    heard = listener.take_heard()
    assert len(heard) == most
    assert heard[0] == HeardEnd("r5", CANCELLED, 1, 5)
    assert heard[-1].after_seq == most + 4
    assert listener.take_heard() == []


def _notify_together(pg_url: str, channel: str, payloads: list[str]) -> None:
    """NOTIFY every payload in one transaction: the server delivers them at its commit,
    together (one packet, as a listener reads them)."""
    with psycopg.connect(pg_url) as conn:
        for payload in payloads:
            conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))
        conn.commit()


async def test_every_notice_of_a_packet_is_read(
    stores: tuple[PostgresStore, PostgresStore], pg_url: str
) -> None:
    """A wait woken by the first notice still reads those that came with it: the second
    names an end, which is kept for the relay (a wait that answered on the first notice
    and closed the generator lost the rest of its packet)."""
    here, _ = stores
    await _listening(here)
    end = '{"kind":"ended","cause":{"kind":"cancelled"}}'
    payloads = ["someone else", f'someone else control\n7\n[["r1", 3, {end}]]']
    with trio.fail_after(20):
        await trio.to_thread.run_sync(_notify_together, pg_url, here._queries.channel, payloads)
        assert await here.wait_for_change(10.0) is True
    assert here.heard_ends() == [HeardEnd("r1", CANCELLED, 3, 7)]


async def test_a_notice_from_elsewhere_after_the_stores_own_wakes_the_wait(
    stores: tuple[PostgresStore, PostgresStore], pg_url: str
) -> None:
    """Own notices put the listener to rest (`OWN_PAUSE`) rather than wake it, but another
    store's notice, in the same packet or after the rest, still ends the wait; own ones
    alone never do."""
    here, _ = stores
    await _listening(here)
    own = here._sender
    with trio.fail_after(20):
        await trio.to_thread.run_sync(_notify_together, pg_url, here._queries.channel, [own, own])
        assert await here.wait_for_change(0.2) is False
        await trio.to_thread.run_sync(
            _notify_together, pg_url, here._queries.channel, [own, "someone else", own]
        )
        assert await here.wait_for_change(10.0) is True
        woke: list[bool] = []

        async def wait() -> None:
            woke.append(await here.wait_for_change(10.0))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.to_thread.run_sync(_notify_together, pg_url, here._queries.channel, [own])
            await trio.sleep(listen_module.OWN_PAUSE / 2)  # (during the rest, or after it)
            await trio.to_thread.run_sync(
                _notify_together, pg_url, here._queries.channel, ["someone else"]
            )
    assert woke == [True]
