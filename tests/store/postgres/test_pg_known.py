"""Ends written on the rows this store last wrote, in one round trip, on the PostgreSQL
store (``_known``, ``_guess``): the round trips counted on the wire; the answers when the
guess is wrong (a command stored meanwhile, a chunk, the run ended or its claim taken by
another runtime, its row changed under a lock or frozen), each the same as with no row
known; and which rows are known. Real time, bounded by ``trio.fail_after``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
import pytest
import trio

from awaken_trio import EndCause, RunState
from awaken_trio._core import StateKind
from awaken_trio.store import (
    Accepted,
    Claim,
    Commit,
    CommitResult,
    EventDraft,
    Expect,
    Fence,
    Rejected,
    RejectReason,
    StreamDraft,
)
from awaken_trio.store._textrows import TextRow
from awaken_trio.store.postgres import _guess
from awaken_trio.store.postgres._known import KnownRow, KnownRows
from awaken_trio.store.postgres._store import PostgresStore
from awaken_trio.testing._commits import run
from tests.commits import new_commit, new_queued, still_running
from tests.pg_server import Wire, lock_waiters, row_versions

LIVE = 3600.0
DONE = RunState.Ended(EndCause.NaturalEnd())


def _start(run_id: str) -> Commit:
    """A root run started Running with its claim (epoch 1), as an awaited start is."""
    return new_commit(
        run_id,
        state=RunState.Running(1),
        claim=Claim("me", LIVE),
        thread_guard=True,
        take_messages=True,
    )


def _end(run_id: str, *, epoch: int = 1, chunks: tuple[StreamDraft, ...] = ()) -> Commit:
    """The end of ``run_id``'s first attempt under its claim, as a body's return commits."""
    return Commit(
        run_id=run_id,
        state=DONE,
        generation=1,
        expect=Expect(generation=1, state=RunState.Running),
        at=3.0,
        result="done",
        fence=Fence(run_id, "me", epoch),
        chunks=chunks,
    )


def _bare_end(
    run_id: str, *, generation: int = 1, root: str | None = None, epoch: int = 1
) -> Commit:
    """An end of ``run_id`` at ``generation``, whatever its state, under ``root``'s claim
    (its own by default) at ``epoch``."""
    return Commit(
        run_id=run_id,
        state=DONE,
        generation=generation,
        expect=Expect(generation=generation),
        at=3.0,
        fence=Fence(run_id if root is None else root, "me", epoch),
    )


def _running(run_id: str, **fields: Any) -> Commit:
    """A commit of ``run_id``'s first attempt under its claim that leaves it running, with
    ``fields``."""
    return still_running(
        run_id,
        expect=Expect(generation=1, state=RunState.Running),
        at=2.0,
        fence=Fence(run_id, "me", 1),
        **fields,
    )


def _step(run_id: str, steps: int) -> Commit:
    """Progress of ``run_id``'s first attempt: its checkpoint and steps."""
    return _running(run_id, checkpoint={"done": steps}, steps=steps)


def _journaled(run_id: str) -> Commit:
    """A journaled step's event of ``run_id``'s first attempt (``ctx.step``)."""
    return _running(
        run_id, events=(EventDraft("step", {"name": "fetch", "value": 1}),), announce=False
    )


def _progress(run_id: str, chunks: tuple[StreamDraft, ...]) -> Commit:
    """A commit of ``run_id``'s attempt that streams ``chunks`` (read first: not guessed)."""
    return _running(run_id, announce=False, chunks=chunks)


async def _one(store: PostgresStore, commit: Commit) -> CommitResult:
    (result,) = await store.apply([commit])
    return result


# ---------------------------------------------------------------------------- the wire


async def _exchanges(relay: Wire, store: PostgresStore, batch: list[Commit]) -> int:
    before = relay.count()
    await store.apply(batch)
    return relay.count() - before


async def test_an_end_of_a_run_this_store_wrote_is_one_round_trip(
    wire: tuple[Wire, str], pg_url: str
) -> None:
    relay, url = wire
    with trio.fail_after(60):
        async with PostgresStore(url, pool_size=1) as store, PostgresStore(pg_url) as other:
            for i in range(3):  # (warm: the connection, its prepared statements)
                await store.apply([_start(f"warm-{i}")])
                await store.apply([_end(f"warm-{i}")])
            await store.apply([_start("a"), _start("b"), _start("c")])
            assert await _exchanges(relay, store, [_end("a")]) == 1
            # A batch of ends: one still.
            assert await _exchanges(relay, store, [_end("b"), _end("c")]) == 1
            # A run another runtime wrote last is read first: two.
            await other.apply([_start("theirs")])
            assert await _exchanges(relay, store, [_end("theirs")]) == 2
            # A run this store wrote, then another runtime: the guessed trip, its
            # rollback, then the two-trip transaction.
            await store.apply([_start("d")])
            assert isinstance(await other.post_command("d", "message", "hi", None, 2.0), int)
            assert await _exchanges(relay, store, [_end("d")]) == 4
            # Its end left nothing known: a commit after it reads (and is refused ENDED).
            assert await _exchanges(relay, store, [_end("d")]) == 2
            for run_id in "abcd":
                record = await store.load(run_id)
                assert record is not None
                assert record.state == DONE


async def test_a_step_of_a_run_this_store_wrote_is_one_round_trip(
    wire: tuple[Wire, str], pg_url: str
) -> None:
    """A step reads the run's row and claim alone: one exchange, a message stored
    meanwhile or not (a step does not read the commands); one with chunks reads first; and
    the end after them finds the message and the chunks, and is read first."""
    relay, url = wire
    with trio.fail_after(60):
        async with PostgresStore(url, pool_size=1) as store, PostgresStore(pg_url) as other:
            for i in range(3):  # (warm: the connection, its prepared statements)
                await store.apply([_start(f"warm-{i}")])
                await store.apply([_step(f"warm-{i}", 1)])
            await store.apply([_start("a")])
            assert await _exchanges(relay, store, [_step("a", 1)]) == 1
            assert await _exchanges(relay, store, [_journaled("a")]) == 1
            assert isinstance(await other.post_command("a", "message", "hi", None, 2.0), int)
            assert await _exchanges(relay, store, [_step("a", 2)]) == 1
            streamed = [_progress("a", (StreamDraft("out", (1,)),))]
            assert await _exchanges(relay, store, streamed) == 2
            assert await _exchanges(relay, store, [_end("a")]) == 4
            record = await other.load("a")
            assert record is not None
            assert (record.state, record.steps, record.checkpoint) == (DONE, 2, {"done": 2})
            kinds = [str(e.kind) for e in await other.events_after(0, "a")]
            assert kinds == ["committed", "committed", "step", "committed",
                             "messages_discarded", "committed"]  # fmt: skip


async def test_a_run_started_in_a_held_look_is_known_as_its_look_wrote_it(
    wire: tuple[Wire, str],
) -> None:
    """A serving runtime's runs start in its look's transaction (``_held``): the row the
    store then knows is the one that transaction wrote (its ``xmin``), and the run's end
    is one round trip."""
    relay, url = wire
    with trio.fail_after(60):
        async with PostgresStore(url) as store:
            assert isinstance(await _one(store, new_queued("q")), Accepted)
            async with store.looking({"job"}, 2.0, 10) as found:
                assert [r.run_id for r in found] == ["q"]
                start = run(
                    "q",
                    1,
                    expect=Expect(generation=0, state=RunState.Queued),
                    at=2.0,
                    take_messages=True,
                    claim=Claim("me", LIVE),
                    thread_guard=True,
                )
                assert isinstance(await _one(store, start), Accepted)
            known = store._known.get("q")
            assert known is not None
            written, _ = await trio.to_thread.run_sync(row_versions, url, "q")
            assert known.written_by == written
            assert await _exchanges(relay, store, [_end("q")]) == 1
            assert store._known.get("q") is None  # (ended: nothing more to guess)


# ---------------------------------------------------------------------------- wrong guesses


async def _on_server(pg_url: str, *statements: str) -> None:
    """Run ``statements`` on a connection of their own, each committed, as an operator or
    another program would."""

    def run() -> None:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)

    await trio.to_thread.run_sync(run)


async def _under_a_lock(
    pg_url: str, store: PostgresStore, held: Sequence[str], commit: Commit
) -> CommitResult:
    """``commit``'s answer, applied while another transaction that ran ``held`` (a lock
    and a change) is open; that transaction commits once the commit waits for its lock."""
    holder = psycopg.connect(pg_url)
    try:
        for statement in held:
            holder.execute(statement)
        results: list[CommitResult] = []

        async def apply() -> None:
            results.append(await _one(store, commit))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(apply)
            while await trio.to_thread.run_sync(lock_waiters, pg_url) < 1:  # noqa: ASYNC110 - a server's state
                await trio.sleep(0.01)
            await trio.to_thread.run_sync(holder.commit)
    finally:
        holder.close()
    [result] = results
    return result


@pytest.fixture(params=["known", "read first"])
def pair(
    request: pytest.FixtureRequest,
    stores: list[PostgresStore],
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[PostgresStore, PostgresStore]:
    """This store and another runtime's, with the rows this store writes known, and
    with none known (every end reads first): each test below asserts the same answers
    of both."""
    if request.param == "read first":
        monkeypatch.setattr(KnownRows, "get", lambda self, run_id: None)
    return stores[0], stores[1]


async def _kinds(store: PostgresStore, run_id: str) -> list[str]:
    return [str(e.kind) for e in await store.events_after(0, run_id)]


async def test_an_end_is_written_as_the_rules_say(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    store, _ = pair
    with trio.fail_after(30):
        await store.apply([_start("a")])
        result = await _one(store, _end("a"))
        assert isinstance(result, Accepted)
        assert result.state == DONE
        assert result.last_seq == (await store.events_after(0, "a"))[-1].seq
        record = await store.load("a")
        assert record is not None
        assert record.state == DONE
        assert record.result == "done"
        assert await _kinds(store, "a") == ["committed", "committed"]
        # A second end finds it ended.
        assert await _one(store, _end("a")) == Rejected(RejectReason.ENDED, DONE)


async def test_a_message_stored_meanwhile_is_discarded_with_the_end(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    store, other = pair
    with trio.fail_after(30):
        await store.apply([_start("a")])
        assert isinstance(await other.post_command("a", "message", {"n": 1}, None, 2.0), int)
        assert isinstance(await _one(store, _end("a")), Accepted)
        events = await store.events_after(0, "a")
        assert [str(e.kind) for e in events] == ["committed", "messages_discarded", "committed"]
        assert events[1].detail["messages"] == [{"n": 1}]
        assert await store.commands(["a"]) == []


async def test_a_run_ended_by_another_runtime_is_refused_ended(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    store, other = pair
    cancelled = RunState.Ended(EndCause.Cancelled())
    with trio.fail_after(30):
        await store.apply([_start("a")])
        elsewhere = Commit(
            run_id="a",
            state=cancelled,
            generation=1,
            expect=Expect(generation=1, state=RunState.Running),
            at=2.0,
        )
        assert isinstance(await _one(other, elsewhere), Accepted)
        assert await _one(store, _end("a")) == Rejected(RejectReason.ENDED, cancelled)
        assert await _kinds(store, "a") == ["committed", "committed"]


async def test_a_claim_another_runtime_took_is_refused_fenced(
    pair: tuple[PostgresStore, PostgresStore], offset: list[float]
) -> None:
    store, other = pair
    with trio.fail_after(30):
        await store.apply([_start("a")])
        offset[0] = 2 * LIVE  # (its lease has run out for every store)
        [recovered] = await other.recover("them", ["job"], 2.0, LIVE, 5, 10)
        assert (recovered.record.run_id, recovered.epoch) == ("a", 2)
        offset[0] = 0.0
        running = RunState.Running(1)
        assert await _one(store, _end("a")) == Rejected(RejectReason.FENCED, running)
        assert isinstance(await _one(store, _end("a", epoch=2)), Rejected)  # (not "me"'s)


async def test_a_claim_whose_lease_ran_out_is_refused_fenced(
    pair: tuple[PostgresStore, PostgresStore], offset: list[float]
) -> None:
    """Its lease ran out (the store's clock moved past it) and nobody recovered it yet:
    the step and the end are refused ``FENCED``, as read first."""
    store, _ = pair
    with trio.fail_after(30):
        await store.apply([_start("a")])
        offset[0] = 2 * LIVE
        running = RunState.Running(1)
        assert await _one(store, _step("a", 1)) == Rejected(RejectReason.FENCED, running)
        assert await _one(store, _end("a")) == Rejected(RejectReason.FENCED, running)
        offset[0] = 0.0
        assert isinstance(await _one(store, _end("a")), Accepted)


async def test_a_claim_taken_under_a_lock_while_the_step_waits(
    pair: tuple[PostgresStore, PostgresStore], pg_url: str
) -> None:
    """Another transaction holds the run's claim and moves it to another owner; the step
    waits for it, then reads the claim it left and is refused ``FENCED``."""
    store, _ = pair
    with trio.fail_after(30):
        await store.apply([_start("a")])
        held = (
            "SELECT 1 FROM awaken.claims WHERE run_id = 'a' FOR UPDATE",
            "UPDATE awaken.claims SET owner = 'them', epoch = 2",
        )
        result = await _under_a_lock(pg_url, store, held, _step("a", 1))
        assert result == Rejected(RejectReason.FENCED, RunState.Running(1))
        record = await store.load("a")
        assert record is not None
        assert record.steps == 0


async def test_a_run_that_streamed_ends_its_channels(
    pair: tuple[PostgresStore, PostgresStore], pg_url: str
) -> None:
    store, _ = pair
    with trio.fail_after(30):
        await store.apply([_start("a")])
        assert isinstance(
            await _one(store, _progress("a", (StreamDraft("out", (1, 2)),))), Accepted
        )
        assert isinstance(await _one(store, _end("a")), Accepted)

        def kinds() -> list[tuple[object, ...]]:
            with psycopg.connect(pg_url, autocommit=True) as conn:
                return conn.execute(
                    "SELECT channel, kind FROM awaken.stream_chunks WHERE run_id = 'a'"
                    " ORDER BY last_offset"
                ).fetchall()

        assert await trio.to_thread.run_sync(kinds) == [("out", "data"), ("out", "end")]


async def test_a_row_changed_under_a_lock_while_the_end_waits(
    pair: tuple[PostgresStore, PostgresStore], pg_url: str
) -> None:
    """Another transaction holds the run's row and moves its generation on; the end waits
    for it, then is refused ``STALE`` on what that transaction left (its check reads the
    row again once the lock is let go), and writes nothing."""
    store, _ = pair
    with trio.fail_after(30):
        await store.apply([_start("a")])
        held = (
            "SELECT 1 FROM awaken.runs WHERE run_id = 'a' FOR UPDATE",
            "UPDATE awaken.runs SET generation = 2 WHERE run_id = 'a'",
        )
        result = await _under_a_lock(pg_url, store, held, _end("a"))
        assert isinstance(result, Rejected)
        assert result.reason == RejectReason.STALE
        record = await store.load("a")
        assert record is not None
        assert record.state == RunState.Running(1)
        assert await _kinds(store, "a") == ["committed"]


async def test_an_end_refused_on_the_known_row_is_answered_on_the_row_read(
    pair: tuple[PostgresStore, PostgresStore], pg_url: str
) -> None:
    """Another writer moved the run's generation on; an end made for that generation is
    refused ``STALE`` by the rules on the row the store knows, but a refusal writes the
    row nothing, so no update checks it: the guess is given up, and the end, read first,
    is accepted on the row as it is."""
    store, _ = pair
    with trio.fail_after(30):
        await store.apply([_start("a"), _start("b")])
        await _on_server(pg_url, "UPDATE awaken.runs SET generation = 2 WHERE run_id IN ('a', 'b')")

        assert isinstance(await _one(store, _bare_end("a", generation=2)), Accepted)
        # With a start in the batch (whose check, writes and seal would be one statement).
        results = await store.apply([_start("new"), _bare_end("b", generation=2)])
        assert [type(r) for r in results] == [Accepted, Accepted]
        for run_id in ("a", "b"):
            record = await store.load(run_id)
            assert record is not None
            assert record.state == DONE


async def test_steps_then_the_end_are_written_as_the_rules_say(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    store, _ = pair
    with trio.fail_after(30):
        await store.apply([_start("a")])
        for done in (1, 2, 3):
            assert isinstance(await _one(store, _step("a", done)), Accepted)
        assert isinstance(await _one(store, _journaled("a")), Accepted)
        assert isinstance(await _one(store, _end("a")), Accepted)
        record = await store.load("a")
        assert record is not None
        assert (record.state, record.steps, record.checkpoint) == (DONE, 3, {"done": 3})
        assert await _kinds(store, "a") == ["committed"] * 4 + ["step", "committed"]


async def test_a_step_on_a_row_another_writer_moved_on_is_refused_stale(
    pair: tuple[PostgresStore, PostgresStore], pg_url: str
) -> None:
    store, _ = pair
    with trio.fail_after(30):
        await store.apply([_start("a")])
        await _on_server(pg_url, "UPDATE awaken.runs SET generation = 2 WHERE run_id = 'a'")
        refused = Rejected(RejectReason.STALE, RunState.Running(1))
        assert await _one(store, _step("a", 1)) == refused
        assert await _one(store, _journaled("a")) == refused
        record = await store.load("a")
        assert record is not None
        assert (record.steps, record.checkpoint) == (0, None)
        assert await _kinds(store, "a") == ["committed"]


async def test_a_commit_that_changes_nothing_in_its_row_is_checked_all_the_same(
    pair: tuple[PostgresStore, PostgresStore], pg_url: str
) -> None:
    """A journaled step's event at the time of the run's last write changes no column of
    its row; the row's update, which is its check, is sent all the same (setting a column
    to what it holds): accepted, then refused ``STALE`` once another writer moved the row
    on."""
    store, _ = pair
    with trio.fail_after(30):
        await store.apply([_start("a")])
        assert isinstance(await _one(store, _step("a", 1)), Accepted)
        assert isinstance(await _one(store, _journaled("a")), Accepted)  # (at the step's time)
        await _on_server(pg_url, "UPDATE awaken.runs SET generation = 2 WHERE run_id = 'a'")
        refused = Rejected(RejectReason.STALE, RunState.Running(1))
        assert await _one(store, _journaled("a")) == refused
        assert await _kinds(store, "a") == ["committed", "committed", "step"]


async def test_a_frozen_row_is_ended(
    pair: tuple[PostgresStore, PostgresStore], pg_url: str
) -> None:
    """``VACUUM FREEZE`` may change what the row's ``xmin`` reads as: the end is written
    all the same (on its guess, or after reading)."""
    store, _ = pair
    with trio.fail_after(30):
        await store.apply([_start("a")])
        await _on_server(pg_url, "VACUUM FREEZE awaken.runs")
        assert isinstance(await _one(store, _end("a")), Accepted)
        assert await _kinds(store, "a") == ["committed", "committed"]


async def test_a_failed_end_writes_nothing_and_the_next_lands(pg_url: str) -> None:
    """The server refuses the end's event (after its row's update and checks, in the
    same transaction): nothing of the end is written, and the end, sent again, lands."""
    with trio.fail_after(30):
        async with PostgresStore(pg_url, pool_size=1) as store:
            await store.apply([_start("a")])

            await _on_server(
                pg_url,
                "CREATE FUNCTION awaken.refuse() RETURNS trigger LANGUAGE plpgsql"
                " AS $$ BEGIN RAISE EXCEPTION 'refused here'; END $$",
                "CREATE TRIGGER refuse BEFORE INSERT ON awaken.events"
                " FOR EACH ROW EXECUTE FUNCTION awaken.refuse()",
            )
            with pytest.raises(Exception, match="refused here"):
                await store.apply([_end("a")])
            record = await store.load("a")
            assert record is not None
            assert record.state == RunState.Running(1)
            await _on_server(pg_url, "DROP TRIGGER refuse ON awaken.events")
            assert isinstance(await _one(store, _end("a")), Accepted)
            assert await _kinds(store, "a") == ["committed", "committed"]


# ---------------------------------------------------------------------------- what is known


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _row(run_id: str, kind: StateKind = "running") -> TextRow:
    return TextRow(
        run_id, f"t-{run_id}", None, run_id, "job", kind, "{}", 1, "[]", False, "null", None,
        1, 1, 0, 1.0, 1.0, 1.0, None, "me", None, None, 0,
    )  # fmt: skip


def test_rows_are_known_until_their_run_ends() -> None:
    known = KnownRows()
    known.wrote([_row("a"), _row("b")], 10)
    a = known.get("a")
    assert a is not None
    assert a.written_by == 10
    assert a.fields[:2] == ("a", "t-a")
    known.wrote([_row("a", "ended")], 11)
    assert known.get("a") is None
    assert known.get("b") is not None
    # Written again: known as the later transaction left it.
    known.wrote([_row("b")], 12)
    b = known.get("b")
    assert b is not None
    assert b.written_by == 12


def test_rows_are_known_for_a_minute_at_most() -> None:
    clock = Clock()
    known = KnownRows(longest=60.0, clock=clock)
    known.wrote([_row("a")], 1)
    clock.now = 30.0
    known.wrote([_row("b")], 2)
    clock.now = 60.0
    assert known.get("a") is not None
    clock.now = 60.5
    assert known.get("a") is None
    assert known.get("b") is not None
    assert len(known) == 1  # (the stale ones dropped as they are found)
    clock.now = 91.0
    assert known.get("b") is None
    assert len(known) == 0


def test_the_oldest_rows_give_way_past_the_most() -> None:
    known = KnownRows(most=3)
    known.wrote([_row(name) for name in "abcd"], 1)
    assert [n for n in "abcd" if known.get(n) is not None] == ["b", "c", "d"]
    known.wrote([_row("b")], 2)  # (b is now the newest)
    known.wrote([_row("e")], 3)
    assert [n for n in "abcde" if known.get(n) is not None] == ["b", "d", "e"]


def test_what_ends_are_guessed() -> None:
    known = KnownRows()
    known.wrote([_row("a"), _row("b")], 5)
    guess = _guess.guess_of([_end("a"), _end("b")], known)
    assert guess is not None
    assert [k.fields[0] for k in guess.known] == ["a", "b"]
    assert [f.root_run_id for f in guess.held] == ["a", "b"]
    assert all(isinstance(k, KnownRow) for k in guess.known)
    # With a creation: both guessed.
    mixed = _guess.guess_of([_start("new"), _end("a")], known)
    assert mixed is not None
    assert mixed.absent == ("new",)
    # A step: guessed, and its run is not ending (its commands are not read).
    step = _guess.guess_of([_step("a", 1), _journaled("b")], known)
    assert step is not None
    assert ([k.fields[0] for k in step.known], step.ending) == (["a", "b"], ())
    assert guess.ending == ("a", "b")
    handed_back = Commit(
        run_id="a",
        state=RunState.Queued(),
        generation=1,
        expect=Expect(generation=1),
        at=3.0,
        fence=Fence("a", "me", 1),
    )
    not_guessed = [
        _end("unknown"),
        _step("unknown", 1),
        _end("a", chunks=(StreamDraft("out", (1,)),)),
        _progress("a", (StreamDraft("out", (1,)),)),
        handed_back,
        Commit(run_id="a", state=DONE, generation=1, expect=Expect(generation=1), at=3.0),
    ]
    for commit in not_guessed:
        assert _guess.guess_of([commit], known) is None, commit
    assert _guess.guess_of([_end("a"), _end("a")], known) is None  # (one run twice)
    assert _guess.guess_of([_end("a")], None) is None  # (no rows known)
    # The same claim at two epochs: one of them cannot hold.
    assert (
        _guess.guess_of([_end("a"), _end("b", epoch=2), _bare_end("b", root="a", epoch=3)], known)
        is None
    )
