"""The store contract's checks of what a commit writes and how it is read back: events,
checkpoints, results and steps, frozen payloads, paging, batches."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import attrs

from .. import (
    EndCause,
    FrozenDict,
    FrozenList,
    JsonValue,
    ResumeTicket,
    RunEvent,
    RunRecord,
    RunState,
)
from ..store import (
    UNSET,
    Accepted,
    Commit,
    EventDraft,
    Expect,
    NewRun,
    Rejected,
    RejectReason,
    StepStore,
    Store,
)
from ._checks import (
    _accepted,
    _assert_events_frozen,
    _assert_frozen,
    _assert_record_frozen,
    _awaiting_with,
    _loaded,
    _written,
)
from ._commits import (
    CANCELLED,
    DONE,
    Awaiting,
    Ended,
    Queued,
    Running,
    asking,
    commit,
    create,
    end,
    pause,
    queue,
    run,
)


class EventChecks:
    """A commit's events, checkpoint, result and steps."""

    # ------------------------------------------------------------ events, checkpoint, result

    async def test_extra_event_drafts_precede_the_commits_own_event(self, store: Store) -> None:
        await _accepted(store, create("r1"))
        accepted = await _accepted(
            store,
            end(
                "r1",
                CANCELLED,
                expect=Expect(generation=1, state=Running),
                at=7.0,
                events=(
                    EventDraft("late_result_discarded", {"result": {"v": 1}}),
                    EventDraft("custom", {"n": 2}),
                ),
                discarded_messages=("m",),
                detail={"source": "deliver", "reason": None},
            ),
        )
        events = accepted.events
        assert [e.kind for e in events] == [
            "late_result_discarded",
            "custom",
            "messages_discarded",
            "committed",
        ]
        assert [e.seq for e in events] == [2, 3, 4, 5]
        assert events[0].detail == {"result": {"v": 1}}
        assert events[1].detail == {"n": 2}
        assert events[3].detail == {"source": "deliver", "reason": None}
        for event in events:
            assert event.run_id == "r1"
            assert event.thread_id == "thread-r1"
            assert event.generation == 1
            assert event.state == CANCELLED
            assert event.at == 7.0
        assert await store.events_after(1) == list(events)

    async def test_extra_events_on_a_non_terminal_commit(self, store: Store) -> None:
        await _accepted(store, create("r1"))
        accepted = await _accepted(
            store,
            run("r1", 1, expect=Expect(generation=1), events=(EventDraft("note", {"x": 1}),)),
        )
        assert [(e.kind, e.state) for e in accepted.events] == [
            ("note", Running(1)),
            ("committed", Running(1)),
        ]

    async def test_announce_false_writes_only_the_drafted_events(self, store: Store) -> None:
        await _accepted(store, create("r1"))
        accepted = await _accepted(
            store,
            run(
                "r1",
                1,
                expect=Expect(generation=1, state=Running),
                events=(EventDraft("agent.note", {"n": 1}), EventDraft("agent.note", {"n": 2})),
                detail={"never": "written"},
                announce=False,
            ),
        )
        events = accepted.events
        assert [(e.kind, e.detail) for e in events] == [
            ("agent.note", {"n": 1}),
            ("agent.note", {"n": 2}),
        ]
        assert [e.seq for e in events] == [2, 3]
        assert await store.events_after(1) == list(events)

    async def test_a_new_run_with_step_events_writes_them_before_its_own_event(
        self, store: Store
    ) -> None:
        steps = ({"name": "s", "index": 0, "result": [1]}, {"name": "s", "index": 1, "result": 2})
        forked = attrs.evolve(
            create("fork", Queued(), generation=0, at=4.0),
            new_run=NewRun("thread-fork", None, "job", None, None, None, step_events=steps),
        )
        accepted = await _accepted(store, forked)
        assert [(e.kind, e.detail, e.generation, e.at) for e in accepted.events] == [
            ("step", steps[0], 0, 4.0),
            ("step", steps[1], 0, 4.0),
            ("committed", {"source": "start"}, 0, 4.0),
        ]
        assert [e.seq for e in accepted.events] == [1, 2, 3]

    async def test_step_events_are_read_by_their_kind_oldest_first(self, store: Store) -> None:
        """A `StepStore` hands out a run's ``step`` events alone, in seq order (a store
        that is not one is read through ``events_after``, which holds them too)."""
        await _accepted(store, create("r1"))
        await _accepted(store, create("r2"))

        def step(run_id: str, index: int) -> Commit:
            detail = {"name": "s", "index": index, "result": {"of": run_id}}
            return run(run_id, 1, events=(EventDraft("step", detail),), announce=False)

        for each in (step("r1", 0), step("r2", 0), run("r1", 1), step("r1", 1)):
            await _accepted(store, each)
        wanted = [e for e in await store.events_after(0, "r1") if e.kind == "step"]
        assert [e.detail["index"] for e in wanted] == [0, 1]
        if isinstance(store, StepStore):
            assert await store.step_events("r1") == wanted
            assert await store.step_events("nobody") == []

    async def test_announce_false_without_drafts_commits_the_state_and_writes_nothing(
        self, store: Store
    ) -> None:
        created = await _accepted(store, create("r1"))
        quiet = await _accepted(
            store,
            run(
                "r1",
                1,
                expect=Expect(generation=1, state=Running),
                checkpoint={"step": 1},
                steps=1,
                announce=False,
            ),
        )
        assert quiet.events == ()
        assert quiet.record.checkpoint == {"step": 1}
        assert quiet.record.steps == 1

        ticket = asking("r1", "c1")
        paused = await _accepted(
            store,
            pause("r1", ticket, expect=Expect(generation=1, state=Running), at=3.0, announce=False),
        )
        assert paused.events == ()
        assert paused.record.state == Awaiting(ticket)
        assert await store.load("r1") == paused.record
        assert await store.events_after(0) == list(created.events)

        # The unannounced state is the committed one: the fence sees it.
        resumed = await _accepted(
            store,
            run("r1", 2, expect=Expect(generation=1, state=Awaiting, correlation_id="c1"), at=4.0),
        )
        assert [e.kind for e in resumed.events] == ["committed"]
        assert resumed.record.checkpoint == {"step": 1}

    async def test_checkpoint_unset_keeps_the_committed_one(self, store: Store) -> None:
        created = await _accepted(store, create("r1"))
        assert created.record.checkpoint is None  # the UNSET marker never leaks into a record

        def progress(checkpoint: JsonValue) -> Commit:
            return run("r1", 1, expect=Expect(generation=1, state=Running), checkpoint=checkpoint)

        assert (await _accepted(store, progress({"step": 1}))).record.checkpoint == {"step": 1}
        assert (await _accepted(store, progress(UNSET))).record.checkpoint == {"step": 1}
        assert (await _accepted(store, progress({"step": 2}))).record.checkpoint == {"step": 2}

        # Pausing, resuming and ending without a checkpoint keep it.
        await _accepted(
            store,
            pause("r1", asking("r1"), at=3),
        )
        await _accepted(store, run("r1", 2, at=4))
        ended = await _accepted(store, end("r1", DONE, 2, at=5))
        assert ended.record.checkpoint == {"step": 2}
        loaded = await store.load("r1")
        assert loaded is not None
        assert loaded.checkpoint == {"step": 2}

    async def test_checkpoint_none_replaces_the_committed_one(self, store: Store) -> None:
        await _accepted(store, create("r1"))
        await _accepted(
            store,
            run("r1", 1, at=2, checkpoint=[1]),
        )
        cleared = await _accepted(
            store,
            run("r1", 1, at=3, checkpoint=None),
        )
        assert cleared.record.checkpoint is None

    async def test_result_is_stored_only_on_ended(self, store: Store) -> None:
        await _accepted(store, create("r1"))
        running = await _accepted(
            store,
            run("r1", 1, at=2, result={"no": 1}),
        )
        assert running.record.result is None
        awaiting = await _accepted(
            store,
            pause("r1", asking("r1"), at=3, result={"no": 2}),
        )
        assert awaiting.record.result is None
        queued = await _accepted(
            store,
            queue("r1", at=4, result={"no": 3}),
        )
        assert queued.record.result is None
        await _accepted(store, run("r1", 2, at=5))
        ended = await _accepted(
            store,
            end("r1", DONE, 2, at=6, result={"yes": 4}),
        )
        assert ended.record.result == {"yes": 4}
        loaded = await store.load("r1")
        assert loaded is not None
        assert loaded.result == {"yes": 4}
        assert loaded.generation == 2

    # ------------------------------------------------------------ steps and max_steps

    async def test_steps_are_kept_by_none_and_replaced_by_a_number(self, store: Store) -> None:
        created = await _accepted(store, create("r1"))
        assert created.record.steps == 0

        def with_steps(state: RunState, generation: int, steps: int | None) -> Commit:
            return commit("r1", state, generation, steps=steps)

        assert (await _accepted(store, with_steps(Running(1), 1, 3))).record.steps == 3
        assert (await _accepted(store, with_steps(Running(1), 1, None))).record.steps == 3
        assert (
            await _accepted(store, with_steps(Awaiting(asking("r1")), 1, None))
        ).record.steps == 3
        assert (await _accepted(store, with_steps(Running(2), 2, None))).record.steps == 3
        assert (await _accepted(store, with_steps(Running(2), 2, 5))).record.steps == 5
        # Zero is a number, not "keep".
        assert (await _accepted(store, with_steps(Running(2), 2, 0))).record.steps == 0
        assert (await _accepted(store, with_steps(Running(2), 2, 6))).record.steps == 6
        ended = await _accepted(store, with_steps(DONE, 2, None))
        assert ended.record.steps == 6
        assert (await _loaded(store, "r1")).steps == 6

    async def test_max_steps_of_the_new_run_is_kept_across_commits(self, store: Store) -> None:
        created = await _accepted(store, create("r1", max_steps=5))
        assert created.record.max_steps == 5
        plain = await _accepted(store, create("r2"))
        assert plain.record.max_steps is None

        later = [
            run("r1", 1, at=2, steps=5),
            pause("r1", asking("r1"), at=3),
            queue("r1", at=4),
            run("r1", 2, at=5),
            end("r1", Ended(EndCause.MaxSteps()), 2, at=6),
        ]
        for each in later:
            accepted = await _accepted(store, each)
            assert accepted.record.max_steps == 5, each.state
            assert (await _loaded(store, "r1")).max_steps == 5
        assert (await _loaded(store, "r2")).max_steps is None


class PayloadChecks:
    """Frozen payloads out."""

    # ------------------------------------------------------------ frozen payloads

    async def test_records_and_events_handed_back_are_frozen(self, store: Store) -> None:
        ticket = ResumeTicket(
            correlation_id="c1",
            run_id="r1",
            thread_id="thread-r1",
            reason="approval",
            payload={"question": ["ship it?", {"options": ["yes", "no"]}]},
            accepts={"type": "object", "required": ["ok"]},
        )
        handed_back: list[tuple[str, RunRecord | None, Sequence[RunEvent]]] = []

        created = await _accepted(store, create("r1", input={"q": [1, {"deep": [2]}]}))
        handed_back.append(("created", created.record, created.events))
        paused = await _accepted(
            store,
            pause(
                "r1",
                ticket,
                expect=Expect(generation=1, state=Running),
                checkpoint={"done": [1, 2], "next": {"at": [3]}},
                events=(EventDraft("agent.note", {"items": [1, {"x": [2]}]}),),
                carried_messages=({"m": [1]},),
                detail={"source": "await", "why": ["user", {"asked": True}]},
            ),
        )
        handed_back.append(("paused", paused.record, paused.events))
        handed_back.append(("loaded while awaiting", await store.load("r1"), ()))
        ended = await _accepted(
            store,
            end(
                "r1",
                DONE,
                expect=Expect(generation=1, state=Awaiting),
                at=3.0,
                result={"answer": [42, {"why": "so"}]},
                discarded_messages=({"inbox": ["x"]},),
            ),
        )
        handed_back.append(("ended", ended.record, ended.events))
        handed_back.append(("loaded", await store.load("r1"), await store.events_after(0)))
        handed_back.append(("run events", None, await store.events_after(0, "r1")))
        expected_record = await _loaded(store, "r1")
        expected_events = await store.events_after(0)
        assert [e.kind for e in expected_events] == [
            "committed",
            "agent.note",
            "committed",
            "messages_discarded",
            "committed",
        ]

        for where, record, events in handed_back:
            if record is not None:
                _assert_record_frozen(record, where)
            _assert_events_frozen(events, where)

        # Nothing above changed what the store holds.
        assert await store.load("r1") == expected_record
        assert expected_record.input == {"q": [1, {"deep": [2]}]}
        assert expected_record.checkpoint == {"done": [1, 2], "next": {"at": [3]}}
        assert expected_record.result == {"answer": [42, {"why": "so"}]}
        assert await store.events_after(0) == expected_events
        assert expected_events[1].detail == {"items": [1, {"x": [2]}]}
        assert expected_events[2].state == Awaiting(ticket)
        assert expected_events[3].detail == {"messages": [{"m": [1]}, {"inbox": ["x"]}]}

    async def test_taken_messages_and_resume_values_handed_back_are_frozen(
        self, store: Store
    ) -> None:
        # The runtime hands the store frozen payloads (commits carry checked values).
        messages = (FrozenDict({"m": [1, {"n": [2]}]}), FrozenList(["list", {"k": "v"}]))
        await _awaiting_with(store, "r1", messages)
        await _accepted(
            store,
            queue(
                "r1",
                expect=Expect(generation=1, state=Awaiting),
                at=3.0,
                # The runtime hands the store frozen resume values; the store hands them
                # back frozen too, even if it stored them as text.
                resume_value=FrozenDict({"answer": ["yes", {"sure": True}]}),
            ),
        )
        started = await _accepted(
            store,
            run("r1", 2, expect=Expect(generation=1, state=Queued), at=4.0, take_messages=True),
        )
        assert started.taken_messages == ({"m": [1, {"n": [2]}]}, ["list", {"k": "v"}])
        assert started.resume_value == {"answer": ["yes", {"sure": True}]}
        for i, message in enumerate(started.taken_messages):
            _assert_frozen(message, f"taken_messages[{i}]")
        _assert_frozen(started.resume_value, "resume_value")
        assert started.taken_messages == ({"m": [1, {"n": [2]}]}, ["list", {"k": "v"}])
        assert started.resume_value == {"answer": ["yes", {"sure": True}]}


class ReadChecks:
    """One store-wide seq, read by `events_after`; batches applied in order."""

    # ------------------------------------------------------------ reading events

    async def test_events_after_paging_and_filtering(self, store: Store) -> None:
        # r1: 3 events, r2: 2 events, interleaved.
        await _accepted(store, create("r1"))  # seq 1
        await _accepted(store, create("r2"))  # seq 2
        await _accepted(store, run("r1", 1, at=2))  # seq 3
        await _accepted(store, end("r2", DONE, at=3))  # seq 4
        await _accepted(store, end("r1", CANCELLED, at=4))  # seq 5

        everything = await store.events_after(0)
        assert [e.seq for e in everything] == [1, 2, 3, 4, 5]
        assert [e.run_id for e in everything] == ["r1", "r2", "r1", "r2", "r1"]
        assert [e.seq for e in await store.events_after(2)] == [3, 4, 5]
        assert await store.events_after(5) == []
        assert await store.events_after(99) == []
        assert [e.seq for e in await store.events_after(0, limit=2)] == [1, 2]
        assert [e.seq for e in await store.events_after(2, limit=2)] == [3, 4]
        assert [e.seq for e in await store.events_after(0, "r1")] == [1, 3, 5]
        assert [e.seq for e in await store.events_after(1, "r1")] == [3, 5]
        assert [e.seq for e in await store.events_after(3, "r1")] == [5]
        assert [e.seq for e in await store.events_after(0, "r1", limit=1)] == [1]
        assert [e.seq for e in await store.events_after(0, "r2")] == [2, 4]
        assert await store.events_after(0, "unknown") == []

        # Paging by the last seen seq visits every event once, in order.
        seen: list[int] = []
        cursor = 0
        while page := await store.events_after(cursor, limit=2):
            seen.extend(e.seq for e in page)
            cursor = page[-1].seq
        assert seen == [1, 2, 3, 4, 5]

    async def test_events_after_pages_oldest_first_across_runs(self, store: Store) -> None:
        written: list[RunEvent] = []

        async def apply(*batch: Commit) -> None:
            cursor = written[-1].seq if written else 0
            for sent, result in zip(batch, await store.apply(batch), strict=True):
                assert isinstance(result, Accepted), result
                mine = await _written(store, sent.run_id, cursor, result)
                written.extend(mine)
                cursor = result.last_seq

        await apply(create("a"), create("b"))
        await apply(run("a", 1, at=2, events=(EventDraft("agent.step", {"i": 1}),)))
        await apply(create("c", Queued(), generation=0))
        await apply(
            pause("b", asking("b"), at=3),
            run("c", 1, at=3),
            end("a", DONE, at=3),
        )
        await apply(
            end("c", CANCELLED, at=4),
            run("b", 2, at=4),
        )

        everything = await store.events_after(0)
        assert everything == written
        seqs = [e.seq for e in everything]
        assert all(earlier < later for earlier, later in pairwise(seqs)), seqs
        assert len(everything) == 10
        for cursor in [0, *seqs]:
            after = [e for e in written if e.seq > cursor]
            for limit in (1, 2, 3, len(written) + 1):
                page = await store.events_after(cursor, limit=limit)
                assert len(page) <= limit
                assert page == after[:limit], (cursor, limit)
            for run_id in ("a", "b", "c"):
                mine = [e for e in after if e.run_id == run_id]
                assert await store.events_after(cursor, run_id) == mine, (cursor, run_id)
                assert await store.events_after(cursor, run_id, limit=1) == mine[:1]

    async def test_events_of_one_run_come_in_their_commit_order(self, store: Store) -> None:
        await _accepted(store, create("other"))
        created = await _accepted(store, create("r1", at=1.0))
        await _accepted(store, end("other", DONE, at=1.5))
        paused = await _accepted(
            store,
            pause("r1", asking("r1"), carried_messages=("m",)),
        )
        ended = await _accepted(
            store,
            end("r1", CANCELLED, at=3.0, events=(EventDraft("agent.bye", {}),)),
        )
        mine = await store.events_after(0, "r1")
        assert mine == [*created.events, *paused.events, *ended.events]
        assert [(e.kind, e.state, e.at) for e in mine] == [
            ("committed", Running(1), 1.0),
            ("committed", Awaiting(asking("r1")), 2.0),
            ("agent.bye", CANCELLED, 3.0),
            ("messages_discarded", CANCELLED, 3.0),
            ("committed", CANCELLED, 3.0),
        ]
        assert all(e.run_id == "r1" and e.thread_id == "thread-r1" for e in mine)

    # ------------------------------------------------------------ batches

    async def test_batch_applies_in_order_with_independent_results(self, store: Store) -> None:
        await _accepted(store, create("done"))
        await _accepted(store, end("done", DONE, at=1.0))
        before = await store.events_after(0)

        batch = [
            create("a"),  # creates a
            run("done", 2, at=2),  # ended
            run("a", 1, expect=Expect(generation=7), at=2),
            run(
                "a",
                1,
                expect=Expect(generation=1, state=Running),
                at=2,
                checkpoint={"after": "create"},
            ),  # sees the creation earlier in the batch
            run("ghost", 1, at=2),
            create("a"),  # exists: created earlier in this batch
            create("b"),
            end("b", CANCELLED, expect=Expect(state=Running), at=2),
        ]
        results = await store.apply(batch)
        assert len(results) == len(batch)
        assert isinstance(results[0], Accepted)
        assert results[1] == Rejected(RejectReason.ENDED, DONE)
        assert results[2] == Rejected(RejectReason.STALE, Running(1))
        assert isinstance(results[3], Accepted)
        assert results[3].state == Running(1)
        assert (await _loaded(store, "a")).checkpoint == {"after": "create"}
        assert results[4] == Rejected(RejectReason.UNKNOWN, None)
        assert results[5] == Rejected(RejectReason.EXISTS, Running(1))
        assert isinstance(results[6], Accepted)
        assert isinstance(results[7], Accepted)
        assert results[7].state == CANCELLED
        assert [r.last_seq for r in results if isinstance(r, Accepted)] == list(
            range(before[-1].seq + 1, before[-1].seq + 5)
        )

        after = await store.events_after(0)
        assert after[: len(before)] == before
        new = after[len(before) :]
        # One event per accepted commit, in batch order, with consecutive seqs.
        assert [(e.run_id, e.state) for e in new] == [
            ("a", Running(1)),
            ("a", Running(1)),
            ("b", Running(1)),
            ("b", CANCELLED),
        ]
        assert [e.seq for e in new] == list(range(before[-1].seq + 1, before[-1].seq + 5))
        loaded = await store.load("done")
        assert loaded is not None
        assert loaded.state == DONE

    async def test_an_empty_batch_returns_no_results(self, store: Store) -> None:
        assert await store.apply([]) == []
        assert await store.events_after(0) == []
