"""The durable store contract's checks of the work runtimes share: runnable runs, stored
commands, ends made elsewhere, and what another runtime reads."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from .. import (
    EndCause,
    FrozenDict,
)
from ..store import (
    Claim,
    DeadlineStore,
    DurableStore,
    Expect,
    Fence,
    OverdueLook,
    Rejected,
    RejectReason,
    StoredCommand,
)
from ._checks import (
    BRIEF,
    JOB,
    LIVE,
    LOST,
    NAMES,
    Elapse,
    _accepted,
    _assert_frozen,
    _awaiting,
    _claimed,
    _loaded,
    _messages_discarded,
    _new,
    _rejected,
    _state,
    _terminal_event,
)
from ._commits import (
    CANCELLED,
    DONE,
    Awaiting,
    Ended,
    Queued,
    Running,
    answer,
    asking,
    create_child,
    end,
    pause,
    queue,
    run,
    scheduled,
)


class RunnableChecks:
    """``runnable``: queued and due runs, oldest first."""

    # ------------------------------------------------------------ runnable

    async def test_runnable_hands_out_queued_named_root_runs_oldest_first(
        self, store: DurableStore
    ) -> None:
        await _accepted(store, _new("q1", Queued(), generation=0, at=1.0))
        await _accepted(store, _new("unnamed", Queued(), generation=0, name=None))
        await _accepted(store, _new("other", Queued(), generation=0, name="other"))
        await _accepted(store, _new("child", Queued(), generation=0, parent="q1", root="q1"))
        await _accepted(store, _new("running"))
        await _awaiting(store, "asking", asking("asking"))
        await _accepted(store, _new("ended", DONE))
        await _accepted(store, _new("q2", Queued(), generation=0, at=2.0))

        runnable = await store.runnable(NAMES, 5.0, 10)
        assert runnable == [await _loaded(store, "q1"), await _loaded(store, "q2")]
        both = await store.runnable({JOB, "other"}, 5.0, 10)
        assert [r.run_id for r in both] == ["q1", "other", "q2"]
        assert await store.runnable(frozenset(), 5.0, 10) == []
        # A run that leaves the queue is no longer handed out.
        await _accepted(store, run("q1", 1, claim=Claim("a", LIVE)))
        assert [r.run_id for r in await store.runnable(NAMES, 5.0, 10)] == ["q2"]

    async def test_runnable_skips_claimed_runs_and_busy_threads_until_their_leases_expire(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        # q1 was claimed and committed Queued (behind its thread) by its claimer.
        await _accepted(store, _new("q1", Queued(), generation=0, claim=Claim("a", BRIEF), at=1.0))
        await _claimed(store, "busy", "a", BRIEF, thread="t")
        await _accepted(store, _new("q2", Queued(), generation=0, thread="t", at=2.0))
        await _accepted(store, _new("q3", Queued(), generation=0, at=3.0))
        assert [r.run_id for r in await store.runnable(NAMES, 5.0, 10)] == ["q3"]
        # ``now`` is the runtime's clock, for scheduled tickets: it decides no lease.
        assert [r.run_id for r in await store.runnable(NAMES, 1e9, 10)] == ["q3"]
        await elapse(2 * BRIEF)
        assert [r.run_id for r in await store.runnable(NAMES, 0.0, 10)] == ["q1", "q2", "q3"]

    async def test_runnable_hands_out_due_scheduled_runs_after_queued_ones(
        self, store: DurableStore
    ) -> None:
        await _accepted(store, _new("q1", Queued(), generation=0))
        await _awaiting(store, "s5", scheduled("s5", 5.0))
        await _awaiting(store, "s3", scheduled("s3", 3))
        await _awaiting(store, "s8", scheduled("s8", 8.0))
        await _awaiting(store, "asking", asking("asking"))
        await _awaiting(store, "unnamed", scheduled("unnamed", 1.0), name=None)
        await _awaiting(store, "other", scheduled("other", 1.0), name="other")
        await _awaiting(store, "child", scheduled("child", 1.0), parent="q1", root="q1", name=JOB)

        due = await store.runnable(NAMES, 6.0, 10)
        assert [r.run_id for r in due] == ["q1", "s3", "s5"]
        assert due[1] == await _loaded(store, "s3")
        assert [r.run_id for r in await store.runnable(NAMES, 8.0, 10)] == [
            "q1",
            "s3",
            "s5",
            "s8",
        ]
        # Answered early: the ticket is gone, and so is the schedule.
        await _accepted(store, queue("s3", at=6.5))
        assert [r.run_id for r in await store.runnable(NAMES, 8.0, 10)] == [
            "q1",
            "s3",
            "s5",
            "s8",
        ]  # s3 is queued now (after q1), and no longer scheduled
        await _accepted(store, end("s5", CANCELLED, at=7.0))
        assert [r.run_id for r in await store.runnable(NAMES, 8.0, 10)] == ["q1", "s3", "s8"]

    async def test_runnable_passes_over_a_queued_run_until_its_not_before(
        self, store: DurableStore
    ) -> None:
        # A delayed start (or a retry's wait): queued at once, handed out from its time
        # on (``now``, the runtime's clock), in its place; the runs behind it go first.
        await _accepted(store, _new("later", Queued(), generation=0, at=1.0, not_before=7.0))
        await _accepted(store, _new("now", Queued(), generation=0, at=2.0))
        assert (await _loaded(store, "later")).not_before == 7.0
        assert (await _loaded(store, "now")).not_before is None
        assert [r.run_id for r in await store.runnable(NAMES, 6.5, 10)] == ["now"]
        assert [r.run_id for r in await store.runnable(NAMES, 7.0, 10)] == ["later", "now"]
        # The limit counts the runs handed out, not the ones passed over.
        assert [r.run_id for r in await store.runnable(NAMES, 6.5, 1)] == ["now"]
        # Queued again with a new time (a retry's wait), it waits again; any other commit
        # clears it: a run that started has no wait left.
        await _accepted(store, run("later", 1, claim=Claim("a", LIVE)))
        assert (await _loaded(store, "later")).not_before is None
        await _accepted(store, queue("later", 1, not_before=9.0, release=True))
        assert (await _loaded(store, "later")).not_before == 9.0
        assert [r.run_id for r in await store.runnable(NAMES, 8.0, 10)] == ["now"]
        assert [r.run_id for r in await store.runnable(NAMES, 9.5, 10)] == ["later", "now"]
        # Ended while it waits: it is never handed out, and keeps no time.
        await _accepted(store, end("later", CANCELLED))
        assert (await _loaded(store, "later")).not_before is None
        assert [r.run_id for r in await store.runnable(NAMES, 9.5, 10)] == ["now"]

    async def test_overdue_finds_the_roots_past_a_time_limit_that_no_attempt_runs(
        self, store: DurableStore
    ) -> None:
        # Every serving loop turn asks: a durable store answers through an index.
        assert isinstance(store, DeadlineStore), "a durable store finds runs past their limits"
        await _accepted(store, _new("queued", Queued(), generation=0, deadline=5.0))
        await _accepted(store, _new("never", Queued(), generation=0, queue_deadline=4.0))
        await _accepted(
            store, _new("both", Queued(), generation=0, deadline=3.0, queue_deadline=3.5)
        )
        await _accepted(store, _new("running", deadline=2.0))
        await _accepted(store, _new("awaits", deadline=6.0))
        await _accepted(store, pause("awaits", asking("awaits")))
        await _accepted(store, _new("later", Queued(), generation=0, deadline=50.0))
        await _accepted(store, _new("free", Queued(), generation=0))
        await _accepted(store, _new("p", deadline=2.0))
        await _accepted(
            store, _new("child", Queued(), generation=0, parent="p", root="p", deadline=1.0)
        )
        # (A running root meets its deadline in its attempt; a child is its holder's.)
        look = await store.overdue(6.0, 10)
        found = {(o.record.run_id, o.limit) for o in look.runs}
        assert found == {
            ("queued", "deadline"),
            ("never", "queue_timeout"),
            ("both", "deadline"),
            ("awaits", "deadline"),
        }
        assert look.next_at == 50.0
        by_id = {o.record.run_id: o.record for o in look.runs}
        assert by_id["queued"] == await _loaded(store, "queued")
        assert by_id["queued"].deadline == 5.0
        assert [o.record.run_id for o in (await store.overdue(3.0, 10)).runs] == ["both"]
        # (The next limit of a run found now counts too: it is still to come.)
        assert (await store.overdue(3.0, 10)).next_at == 3.5
        assert len((await store.overdue(6.0, 2)).runs) == 2
        # A queue deadline no longer counts once the run started; any end takes it out.
        await _accepted(store, run("never", 1, claim=Claim("a", LIVE)))
        await _accepted(store, queue("never", 1, release=True))
        await _accepted(store, end("queued", CANCELLED, 0))
        assert {o.record.run_id for o in (await store.overdue(6.0, 10)).runs} == {
            "both",
            "awaits",
        }
        await _accepted(store, end("both", CANCELLED, 0))
        await _accepted(store, end("awaits", CANCELLED))
        assert await store.overdue(6.0, 10) == OverdueLook((), 50.0)
        assert (await store.overdue(60.0, 10)).next_at is None

    async def test_runnable_returns_at_most_limit_runs(self, store: DurableStore) -> None:
        await _accepted(store, _new("q1", Queued(), generation=0, at=1.0))
        await _accepted(store, _new("q2", Queued(), generation=0, at=2.0))
        await _awaiting(store, "s1", scheduled("s1", 1.0))
        await _awaiting(store, "s2", scheduled("s2", 2.0))
        for limit, expected in [
            (0, []),
            (1, ["q1"]),
            (2, ["q1", "q2"]),
            (3, ["q1", "q2", "s1"]),
            (9, ["q1", "q2", "s1", "s2"]),
        ]:
            got = await store.runnable(NAMES, 5.0, limit)
            assert [r.run_id for r in got] == expected, limit


class CommandChecks:
    """Stored commands."""

    # ------------------------------------------------------------ stored commands

    async def test_post_command_stores_commands_for_a_running_or_queued_run_only(
        self, store: DurableStore
    ) -> None:
        await _accepted(store, _new("r1"))
        await _accepted(store, _new("queued", Queued(), generation=0))
        ids = [
            await store.post_command("r1", "message", {"text": ["hi"]}, None, 2.0),
            await store.post_command("r1", "pause", None, None, 3.0),
            await store.post_command("queued", "message", "x", None, 3.5),
            await store.post_command("r1", "cancel", None, "because", 4.0),
            await store.post_command("queued", "cancel", None, None, 4.5),
            await store.post_command("r1", "wake", None, "nudge", 5.0),
        ]
        assert all(type(i) is int for i in ids)
        assert ids == sorted(set(ids)), ids  # strictly increasing
        assert [c.id for c in await store.commands(["queued"])] == [ids[2], ids[4]]

        ticket = asking("asking")
        await _awaiting(store, "asking", ticket)
        await _accepted(store, _new("ended", DONE))
        before = await store.commands(["r1", "queued", "asking", "ended", "ghost"])
        rejected = [
            await store.post_command("asking", "message", "x", None, 6.0),
            await store.post_command("ended", "cancel", None, None, 6.0),
            await store.post_command("ghost", "wake", None, "", 6.0),
        ]
        assert rejected == [
            Rejected(RejectReason.STALE, Awaiting(ticket)),
            Rejected(RejectReason.ENDED, DONE),
            Rejected(RejectReason.UNKNOWN, None),
        ]
        assert await store.commands(["r1", "queued", "asking", "ended", "ghost"]) == before

    async def test_commands_are_read_by_run_and_after_a_cursor(self, store: DurableStore) -> None:
        await _accepted(store, _new("r1"))
        await _accepted(store, _new("r2"))
        # The runtime hands the store frozen payloads; the store hands them back frozen.
        payload = FrozenDict({"text": ["hi", {"n": 1}]})
        m = await store.post_command("r1", "message", payload, None, 2.0)
        w = await store.post_command("r2", "wake", None, "nudge", 2.5)
        c = await store.post_command("r1", "cancel", None, "because", 3.0)
        assert isinstance(m, int)
        assert isinstance(w, int)
        assert isinstance(c, int)
        message = StoredCommand(m, "r1", "message", {"text": ["hi", {"n": 1}]}, None, 2.0)
        wake = StoredCommand(w, "r2", "wake", None, "nudge", 2.5)
        cancel = StoredCommand(c, "r1", "cancel", None, "because", 3.0)
        assert await store.commands(["r1"]) == [message, cancel]
        assert await store.commands(["r1"], m) == [cancel]
        assert await store.commands(["r1"], c) == []
        assert await store.commands(["r1", "r2"]) == [message, wake, cancel]
        assert await store.commands({"r2", "ghost"}) == [wake]
        assert await store.commands([]) == []
        (read, _) = await store.commands(["r1"])
        _assert_frozen(read.payload, "a stored command's payload")
        assert await store.commands(["r1"]) == [message, cancel]  # reading changed nothing

    async def test_consumed_commands_are_deleted_with_the_commit(self, store: DurableStore) -> None:
        await _claimed(store, "r1", "a")
        first = await store.post_command("r1", "message", "m1", None, 2.0)
        second = await store.post_command("r1", "pause", None, None, 2.0)
        third = await store.post_command("r1", "message", "m3", None, 2.0)
        assert isinstance(first, int)
        assert isinstance(second, int)
        assert isinstance(third, int)
        # A rejected commit consumes nothing.
        stale = run("r1", 1, at=3.0, fence=Fence("r1", "a", 2), consumed=(first,))
        assert await _rejected(store, stale) == Rejected(RejectReason.FENCED, Running(1))
        assert [c.id for c in await store.commands(["r1"])] == [first, second, third]
        applied = run("r1", 1, at=3.0, fence=Fence("r1", "a", 1), consumed=(first, second))
        await _accepted(store, applied)
        assert [c.id for c in await store.commands(["r1"])] == [third]

    async def test_delivered_messages_stay_stored_and_are_never_discarded(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        """A message an attempt handed to its body (`Commit.delivered`) stays stored, so
        the attempt that replaces a lost one is handed it again; no end lists it as
        discarded, whether the run's own commit or recovery ends it."""
        epoch = await _claimed(store, "r1", "a", BRIEF)
        received = await store.post_command("r1", "message", "received", None, 2.0)
        unread = await store.post_command("r1", "message", "unread", None, 2.0)
        assert isinstance(received, int)
        assert isinstance(unread, int)
        # A rejected commit marks nothing.
        stale = run("r1", 1, at=3.0, fence=Fence("r1", "a", 2), delivered=(received,))
        assert await _rejected(store, stale) == Rejected(RejectReason.FENCED, Running(1))
        await _accepted(
            store,
            run("r1", 1, at=3.0, fence=Fence("r1", "a", epoch), delivered=(received,)),
        )
        assert [c.id for c in await store.commands(["r1"])] == [received, unread]
        ended = await _accepted(store, end("r1", CANCELLED, at=4.0, fence=Fence("r1", "a", epoch)))
        assert [e.kind for e in ended.events] == ["messages_discarded", "committed"]
        assert await _messages_discarded(store, "r1") == ["unread"]
        assert await store.commands(["r1"]) == []

        # Received, then the owner is lost and the run can never run again (no name).
        epoch = await _claimed(store, "r2", "a", BRIEF, name=None)
        only = await store.post_command("r2", "message", "received", None, 2.0)
        assert isinstance(only, int)
        await _accepted(
            store,
            run("r2", 1, at=3.0, fence=Fence("r2", "a", epoch), delivered=(only,)),
        )
        await elapse(2 * BRIEF)
        assert await store.recover("b", NAMES, 5.0, LIVE, 3, 10) == []
        assert (await _loaded(store, "r2")).state == LOST
        events = await store.events_after(0, "r2")
        assert [e.kind for e in events if e.kind == "messages_discarded"] == []
        assert await store.commands(["r2"]) == []

    async def test_an_end_discards_stored_messages_after_carried_and_its_own(
        self, store: DurableStore
    ) -> None:
        await _accepted(store, _new("r1"))
        await _accepted(store, pause("r1", asking("r1"), carried_messages=("carried",)))
        # Started again without taking the carried messages: they stay carried.
        await _accepted(store, run("r1", 2, at=3.0))
        await store.post_command("r1", "message", "stored-1", None, 4.0)
        await store.post_command("r1", "cancel", None, "x", 4.0)
        await store.post_command("r1", "message", {"stored": 2}, None, 4.0)
        ended = await _accepted(
            store, end("r1", CANCELLED, 2, at=5.0, discarded_messages=("inbox",))
        )
        assert [e.kind for e in ended.events] == ["messages_discarded", "committed"]
        assert await _messages_discarded(store, "r1") == [
            "carried",
            "inbox",
            "stored-1",
            {"stored": 2},
        ]
        assert await store.commands(["r1"]) == []

    async def test_a_queued_runs_commands_outlive_its_start_and_are_dropped_by_its_end(
        self, store: DurableStore
    ) -> None:
        await _accepted(store, _new("q", Queued(), generation=0))
        first = await store.post_command("q", "message", "early", None, 2.0)
        await store.post_command("q", "wake", None, "", 2.0)
        assert isinstance(first, int)
        stored = await store.commands(["q"])
        started = run("q", 1, at=3.0, take_messages=True, claim=Claim("a", 10.0))
        landed = await _accepted(store, started)
        # The start hands over what was stored while the run was queued (or leaves the
        # attempt to read it), and more comes.
        assert landed.accepted.commands in (None, tuple(stored)), landed.accepted.commands
        assert await store.commands(["q"]) == stored
        assert [c.kind for c in stored] == ["message", "wake"]
        await store.post_command("q", "message", "later", None, 4.0)
        await _accepted(store, end("q", CANCELLED, at=5.0, fence=Fence("q", "a", 1)))
        assert await _messages_discarded(store, "q") == ["early", "later"]
        assert await store.commands(["q"]) == []


class ElsewhereChecks:
    """Ends made elsewhere, reads, and another runtime's view."""

    # ------------------------------------------------------------ ends made elsewhere

    async def test_end_descendants_ends_the_tree_children_first(self, store: DurableStore) -> None:
        await _accepted(store, _new("p"))
        await _accepted(store, create_child("c1", "p", "p", None))
        await _accepted(store, create_child("g1", "c1", "p", None, Queued()))
        await _accepted(store, create_child("c2", "p", "p", None))
        await _accepted(store, pause("c2", asking("c2"), carried_messages=("m",)))
        await _accepted(store, create_child("c3", "p", "p", None))
        await _accepted(store, end("c3", DONE))
        await _accepted(store, _new("q"))
        await _accepted(store, create_child("qc", "q", "q", None))
        c3_events = await store.events_after(0, "c3")

        stop = Ended(EndCause.Stopped("budget"))
        ended = await _accepted(
            store,
            end("p", stop, at=5.0, end_descendants="parent_ended", detail={"source": "stop_run"}),
        )
        assert [e.detail for e in ended.events] == [{"source": "stop_run"}]
        detail = {"source": "parent", "reason": "parent run 'p' ended"}
        for run_id in ("c1", "g1", "c2"):
            assert await _state(store, run_id) == CANCELLED
            event = await _terminal_event(store, run_id)
            assert (event.detail, event.at) == (detail, 5.0)
            assert event.seq < ended.events[-1].seq
        assert (await _terminal_event(store, "g1")).seq < (await _terminal_event(store, "c1")).seq
        assert await _messages_discarded(store, "c2") == ["m"]
        assert await store.events_after(0, "c3") == c3_events
        # Without end_descendants, a run's end leaves its children to its attempt.
        await _accepted(store, end("q", CANCELLED, at=6.0))
        assert await _state(store, "qc") == Running(1)

    # ------------------------------------------------------------ reads

    async def test_states_reads_the_committed_states_of_known_runs(
        self, store: DurableStore
    ) -> None:
        await _accepted(store, _new("r1"))
        await _accepted(store, _new("r2", Queued(), generation=0))
        await _accepted(store, _new("r3", DONE))
        states = await store.states(["r1", "r2", "r3", "ghost"])
        assert states == {"r1": Running(1), "r2": Queued(), "r3": DONE}
        assert await store.states({"r2"}) == {"r2": Queued()}
        assert await store.states([]) == {}

    async def test_a_queued_resume_hands_its_value_and_ticket_to_the_attempt(
        self, store: DurableStore
    ) -> None:
        ticket = asking("r1")
        await _awaiting(store, "r1", ticket)
        await _accepted(
            store,
            queue(
                "r1",
                expect=Expect(generation=1, state=Awaiting, correlation_id="c1"),
                at=3.0,
                resume_value={"answer": [1]},
                resume_ticket=ticket,
            ),
        )
        started = await _accepted(
            store, run("r1", 2, at=4.0, take_messages=True, claim=Claim("a", LIVE))
        )
        assert started.accepted.resume_value == {"answer": [1]}
        assert started.accepted.resume_ticket == ticket
        assert started.accepted.epoch == 1
        # Kept while the run runs: the attempt that replaces this one is handed it too.
        again = await _accepted(store, run("r1", 3, at=5.0, take_messages=True))
        assert (again.accepted.resume_value, again.accepted.resume_ticket) == (
            {"answer": [1]},
            ticket,
        )

    async def test_a_recovered_attempt_is_handed_the_resume_of_the_attempt_it_replaces(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        ticket = asking("r1")
        epoch = await _claimed(store, "r1", "a", BRIEF)
        await _accepted(store, pause("r1", ticket, fence=Fence("r1", "a", epoch), release=True))
        # Answered in a runtime that has the body: its attempt commits the answer as it
        # takes its claim, then that owner is lost.
        await _accepted(
            store,
            answer("r1", ticket, {"answer": "yes"}, 2, at=3.0, claim=Claim("a", BRIEF)),
        )
        await _accepted(store, run("r1", 2, at=4.0, fence=Fence("r1", "a", epoch + 1)))
        await elapse(2 * BRIEF)
        (recovered,) = await store.recover("b", NAMES, 11.0, LIVE, 3, 10)
        restarted = await _accepted(
            store,
            run("r1", 3, at=12.0, fence=Fence("r1", "b", recovered.epoch), take_messages=True),
        )
        assert restarted.accepted.resume_value == {"answer": "yes"}
        assert restarted.accepted.resume_ticket == ticket

    # ------------------------------------------------------------ another runtime's view

    async def test_a_peer_sees_what_the_store_committed(
        self, store: DurableStore, peer: DurableStore
    ) -> None:
        await _accepted(store, _new("r1", claim=Claim("a", LIVE)))
        assert await peer.load("r1") == await store.load("r1")
        assert await peer.events_after(0) == await store.events_after(0)
        # Claims are shared: the peer's runtime cannot take the run while its lease lives.
        taken = run("r1", 1, at=5.0, claim=Claim("b", LIVE))
        assert await _rejected(peer, taken) == Rejected(RejectReason.FENCED, Running(1))

    async def test_version_moves_when_another_runtime_writes(
        self, store: DurableStore, peer: DurableStore, elapse: Elapse
    ) -> None:
        start = await store.version()
        assert await store.version() == start  # nothing was written

        async def moves(write: Callable[[], Awaitable[object]]) -> None:
            before = await store.version()
            await write()
            assert await store.version() != before

        await moves(lambda: peer.apply([_new("r1", claim=Claim("a", LIVE))]))
        await moves(lambda: peer.post_command("r1", "message", "m", None, 2.0))
        await moves(lambda: peer.renew("a", {"r1": 1}, LIVE))
        await moves(lambda: peer.release("a", "r1"))
        await peer.apply([_new("r2", claim=Claim("a", BRIEF))])
        await elapse(2 * BRIEF)
        await moves(lambda: peer.recover("b", NAMES, 11.0, LIVE, 3, 10))
        assert await store.states(["r1", "r2"]) == {"r1": Running(1), "r2": Running(1)}
