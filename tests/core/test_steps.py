"""Journaled steps (`RunContext.step`): a step's JSON result is committed as a ``step``
event before ``step`` returns; a later attempt of the run gets the k-th committed result of
a name back without running the step; a step that raised, was cancelled or returned
something that is not JSON is never journaled. On the memory store (inline and through the
mailbox), SQLite and PostgreSQL, and through ``fork``."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from awaken_trio import (
    ContextMisuse,
    EndCause,
    EventKind,
    InvalidArgument,
    InvalidPayload,
    JsonValue,
    LiveCommand,
    NotActive,
    RunContext,
    RunEvent,
    RunState,
    Runtime,
    StoreError,
    open_runtime,
)
from awaken_trio.store import MemoryStore, StepStore, Store
from awaken_trio.store.sqlite._store import SQLiteStore
from tests.wrapped_stores import CountingStore, FailingStore, WrappedStore

NATURAL = RunState.Ended(EndCause.NaturalEnd())
CANCELLED = RunState.Ended(EndCause.Cancelled())


@pytest.fixture(params=["memory-inline", "memory-mailbox", "sqlite", "postgres"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store | str:
    """Every store the runtime ships: memory (both commit paths), SQLite, PostgreSQL."""
    if request.param == "sqlite":
        return SQLiteStore(tmp_path / "runs.db", synchronous="normal")
    if request.param == "postgres":
        url: str = request.getfixturevalue("pg_url")
        return url
    return MemoryStore(inline=request.param == "memory-inline")


@pytest.fixture
async def rt(any_store: Store | str) -> AsyncIterator[Runtime]:
    async with open_runtime(any_store) as runtime:
        yield runtime


async def events_of(runtime: Runtime, run_id: str) -> list[RunEvent]:
    return [event async for event in runtime.events(run_id, follow=False)]


def steps_of(events: list[RunEvent]) -> list[tuple[str, int, JsonValue]]:
    return [
        (e.detail["name"], e.detail["index"], e.detail["result"])
        for e in events
        if e.kind == EventKind.STEP
    ]


class Effects:
    """Counts the calls of the step functions a test hands to ``ctx.step``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, JsonValue]] = []

    async def fetch(self, value: JsonValue) -> JsonValue:
        await trio.lowlevel.checkpoint()
        self.calls.append(("fetch", value))
        return {"fetched": value}

    def compute(self, value: int, *, times: int = 2) -> JsonValue:
        # Sync: runs on a worker thread.
        assert threading.current_thread() is not threading.main_thread()
        self.calls.append(("compute", value))
        return [value * times]


# ---------------------------------------------------------------------------- journaling


async def test_a_steps_result_is_committed_before_step_returns(rt: Runtime) -> None:
    effects = Effects()
    seen_at_return: list[list[tuple[str, int, JsonValue]]] = []

    async def body(ctx: RunContext) -> JsonValue:
        fetched = await ctx.step("fetch", effects.fetch, "doc")
        seen_at_return.append(steps_of(await events_of(rt, ctx.run_id)))
        computed = await ctx.step("compute", effects.compute, 21, times=3)
        seen_at_return.append(steps_of(await events_of(rt, ctx.run_id)))
        return {"fetched": fetched, "computed": computed}

    handle = await rt.start(body, run_id="j1")
    assert await handle.wait() == NATURAL
    assert (await rt.record("j1")).result == {
        "fetched": {"fetched": "doc"},
        "computed": [63],
    }
    assert seen_at_return == [
        [("fetch", 0, {"fetched": "doc"})],
        [("fetch", 0, {"fetched": "doc"}), ("compute", 0, [63])],
    ]
    events = await events_of(rt, "j1")
    step_events = [e for e in events if e.kind == EventKind.STEP]
    # A step changes no state: its events carry the running attempt's state.
    assert {(e.state, e.generation) for e in step_events} == {(RunState.Running(1), 1)}
    assert all(set(e.detail) == {"name", "index", "result"} for e in step_events)
    assert effects.calls == [("fetch", "doc"), ("compute", 21)]


async def test_a_resumed_attempt_gets_committed_results_without_running_the_steps(
    rt: Runtime,
) -> None:
    effects = Effects()
    results: list[JsonValue] = []

    async def body(ctx: RunContext) -> JsonValue:
        first = await ctx.step("fetch", effects.fetch, ctx.generation)
        twice = await ctx.step("compute", effects.compute, 5)
        if ctx.generation == 1:
            await ctx.await_input("user_input")
        # New in the second attempt: index 1 of "fetch" runs.
        second = await ctx.step("fetch", effects.fetch, ctx.generation)
        results.append([first, twice, second])
        return None

    handle = await rt.start(body, run_id="j2")
    assert isinstance(await handle.wait(), RunState.Awaiting)
    assert effects.calls == [("fetch", 1), ("compute", 5)]
    handle = await rt.resume("j2", "go")
    assert await handle.wait() == NATURAL
    # The first attempt's results came back as committed (generation 1 in "fetch" 0).
    assert results == [[{"fetched": 1}, [10], {"fetched": 2}]]
    assert effects.calls == [("fetch", 1), ("compute", 5), ("fetch", 2)]
    assert steps_of(await events_of(rt, "j2")) == [
        ("fetch", 0, {"fetched": 1}),
        ("compute", 0, [10]),
        ("fetch", 1, {"fetched": 2}),
    ]


async def test_results_are_returned_by_name_and_index_when_steps_change_order(
    rt: Runtime,
) -> None:
    effects = Effects()
    seen: list[JsonValue] = []

    async def body(ctx: RunContext) -> None:
        if ctx.generation == 1:
            await ctx.step("a", effects.fetch, "a0")
            await ctx.step("b", effects.fetch, "b0")
            await ctx.step("a", effects.fetch, "a1")
            await ctx.await_input("user_input")
        # The second attempt asks in another order: each name gets its own results.
        seen.append(await ctx.step("b", effects.fetch, "b-again"))
        seen.append(await ctx.step("a", effects.fetch, "a-again"))
        seen.append(await ctx.step("b", effects.fetch, "b1"))
        seen.append(await ctx.step("a", effects.fetch, "a-again-1"))

    assert isinstance(await rt.execute(body, run_id="j3"), RunState.Awaiting)
    assert await (await rt.resume("j3")).wait() == NATURAL
    assert seen == [
        {"fetched": "b0"},
        {"fetched": "a0"},
        {"fetched": "b1"},  # "b" had one result: index 1 runs now
        {"fetched": "a1"},
    ]
    assert [value for _, value in effects.calls] == ["a0", "b0", "a1", "b1"]


async def test_a_step_that_raises_is_not_journaled_and_reraises(rt: Runtime) -> None:
    attempts: list[int] = []

    async def flaky(n: int) -> JsonValue:
        await trio.lowlevel.checkpoint()
        attempts.append(n)
        if len(attempts) == 1:
            raise ConnectionError("the service is down")
        return n

    caught: list[BaseException] = []

    async def body(ctx: RunContext) -> JsonValue:
        try:
            await ctx.step("call", flaky, 1)
        except ConnectionError as exc:
            caught.append(exc)
        # The retry is the same call: it commits under index 0.
        return await ctx.step("call", flaky, 2)

    assert await rt.execute(body, run_id="j4") == NATURAL
    assert [str(exc) for exc in caught] == ["the service is down"]
    assert steps_of(await events_of(rt, "j4")) == [("call", 0, 2)]
    assert (await rt.record("j4")).result == 2


async def test_a_step_that_raises_fails_the_run_and_runs_again_next_attempt(
    rt: Runtime,
) -> None:
    calls: list[str] = []

    def ok() -> JsonValue:
        calls.append("ok")
        return "fine"

    def sync_fails(name: str) -> JsonValue:
        calls.append(name)
        raise ValueError(f"{name} failed")

    async def body(ctx: RunContext) -> JsonValue:
        await ctx.step("ok", ok)
        return await ctx.step("bad", sync_fails, "bad")

    state = await rt.execute(body, run_id="j5")
    assert state == RunState.Ended(EndCause.Failed("value_error", "bad failed"))
    assert steps_of(await events_of(rt, "j5")) == [("ok", 0, "fine")]
    assert calls == ["ok", "bad"]


async def test_a_result_that_is_not_json_raises_invalid_payload_and_is_not_journaled(
    rt: Runtime,
) -> None:
    raised: list[InvalidPayload] = []

    async def tuple_result() -> object:
        await trio.lowlevel.checkpoint()
        return (1, 2)

    def set_result() -> object:
        return {"ids": {1, 2}}

    async def body(ctx: RunContext) -> JsonValue:
        for name, fn in (("t", tuple_result), ("s", set_result)):
            try:
                await ctx.step(name, fn)
            except InvalidPayload as exc:
                raised.append(exc)
        return "went on"

    assert await rt.execute(body, run_id="j6") == NATURAL
    assert len(raised) == 2
    assert "result of step 't' of run 'j6'" in str(raised[0])
    assert "tuple" in str(raised[0])
    assert "use a list" in str(raised[0])
    assert "result of step 's' of run 'j6'" in str(raised[1])
    assert "set" in str(raised[1])
    assert steps_of(await events_of(rt, "j6")) == []


async def test_an_uncaught_invalid_result_fails_the_run_with_nothing_journaled(
    rt: Runtime,
) -> None:
    async def body(ctx: RunContext) -> JsonValue:
        return await ctx.step("nan", lambda: float("nan"))

    state = await rt.execute(body, run_id="j7")
    assert isinstance(state, RunState.Ended)
    assert isinstance(state.cause, EndCause.Failed)
    assert state.cause.code == "invalid_payload"
    assert "NaN" in state.cause.message
    assert steps_of(await events_of(rt, "j7")) == []


async def test_a_result_over_max_payload_bytes_is_refused(tmp_path: Path) -> None:
    raised: list[InvalidPayload] = []

    async def body(ctx: RunContext) -> JsonValue:
        try:
            await ctx.step("big", lambda: "x" * 200)
        except InvalidPayload as exc:
            raised.append(exc)
        return await ctx.step("small", lambda: "x" * 10)

    async with open_runtime(MemoryStore(), max_payload_bytes=100) as runtime:
        assert await runtime.execute(body, run_id="big") == NATURAL
        assert steps_of(await events_of(runtime, "big")) == [("small", 0, "x" * 10)]
    assert len(raised) == 1
    assert "202" in str(raised[0])
    assert "100" in str(raised[0])


# ---------------------------------------------------------------------------- bad calls


@pytest.mark.parametrize("name", [3, "", None, b"name", "a\x00b"])
async def test_a_step_name_that_is_not_a_non_empty_str_is_refused(
    runtime: Runtime, name: object
) -> None:
    raised: list[InvalidArgument] = []
    ran: list[bool] = []

    async def body(ctx: RunContext) -> None:
        with pytest.raises(InvalidArgument) as caught:
            await ctx.step(name, lambda: ran.append(True))  # type: ignore[call-overload]
        raised.append(caught.value)

    assert await runtime.execute(body, run_id="bad-name") == NATURAL
    assert "step() of run 'bad-name': the step name must be" in str(raised[0])
    assert ran == []
    assert steps_of(await events_of(runtime, "bad-name")) == []


async def test_a_step_of_something_not_callable_is_refused(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> None:
        with pytest.raises(InvalidArgument, match=r"'n' needs a callable to run.*not 42"):
            await ctx.step("n", 42)  # type: ignore[call-overload]

    assert await runtime.execute(body, run_id="nc") == NATURAL


async def test_a_sync_step_that_returns_a_coroutine_is_refused_clearly(
    runtime: Runtime,
) -> None:
    async def later() -> int:
        await trio.lowlevel.checkpoint()
        return 1

    async def body(ctx: RunContext) -> None:
        with pytest.raises(InvalidArgument, match="pass the async function itself"):
            await ctx.step("later", lambda: later())

    assert await runtime.execute(body, run_id="co") == NATURAL
    assert steps_of(await events_of(runtime, "co")) == []


async def test_step_on_a_context_whose_attempt_ended_raises_not_active(
    runtime: Runtime,
) -> None:
    kept: list[RunContext] = []

    async def body(ctx: RunContext) -> None:
        kept.append(ctx)

    assert await runtime.execute(body, run_id="dead") == NATURAL
    ran: list[bool] = []
    with pytest.raises(NotActive, match="step"):
        await kept[0].step("late", lambda: ran.append(True))
    assert ran == []
    assert steps_of(await events_of(runtime, "dead")) == []


async def test_step_from_another_runs_task_raises_context_misuse(runtime: Runtime) -> None:
    owner: list[RunContext] = []
    entered = trio.Event()

    async def first(ctx: RunContext) -> None:
        owner.append(ctx)
        entered.set()
        await trio.sleep_forever()

    async def second(ctx: RunContext) -> None:
        with pytest.raises(ContextMisuse, match="each body must use the ctx it was given"):
            await owner[0].step("not mine", lambda: 1)

    handle = await runtime.start(first, run_id="owner")
    await entered.wait()
    assert await runtime.execute(second, run_id="other") == NATURAL
    with pytest.raises(ContextMisuse, match="outside any run"):
        await owner[0].step("outside", lambda: 1)
    runtime.deliver(LiveCommand.Cancel("owner"))
    assert await handle.wait() == CANCELLED
    assert steps_of(await events_of(runtime, "owner")) == []


# ---------------------------------------------------------------------------- concurrency


async def test_two_tasks_racing_one_name_take_indexes_in_the_order_their_commits_land(
    rt: Runtime,
) -> None:
    release_slow = trio.Event()
    replayed: list[tuple[str, JsonValue]] = []

    async def slow() -> JsonValue:
        await release_slow.wait()
        return "slow"

    async def fast() -> JsonValue:
        await trio.lowlevel.checkpoint()
        return "fast"

    async def body(ctx: RunContext) -> None:
        if ctx.generation == 1:
            async with trio.open_nursery() as nursery:

                async def take(fn: Callable[[], Any]) -> None:
                    await ctx.step("search", fn)

                nursery.start_soon(take, slow)  # called first
                await trio.testing.wait_all_tasks_blocked()
                await ctx.step("search", fast)  # called second, lands first
                release_slow.set()
            await ctx.await_input("user_input")
        # Replayed by call order: the first call gets the first result to land.
        replayed.append(("first", await ctx.step("search", slow)))
        replayed.append(("second", await ctx.step("search", fast)))

    assert isinstance(await rt.execute(body, run_id="race"), RunState.Awaiting)
    assert steps_of(await events_of(rt, "race")) == [
        ("search", 0, "fast"),
        ("search", 1, "slow"),
    ]
    assert await (await rt.resume("race")).wait() == NATURAL
    assert replayed == [("first", "fast"), ("second", "slow")]


async def test_tasks_taking_their_first_steps_at_once_read_the_journal_once(
    tmp_path: Path,
) -> None:
    counting = CountingStore(SQLiteStore(tmp_path / "runs.db", synchronous="normal"))

    async def body(ctx: RunContext) -> None:
        async with trio.open_nursery() as nursery:
            for n in range(5):
                nursery.start_soon(ctx.step, f"s{n}", lambda n=n: n)
        for _ in range(3):
            await ctx.step("more", lambda: 0)
        if ctx.generation == 1:
            await ctx.await_input("user_input")

    async with open_runtime(counting) as runtime:
        assert isinstance(await runtime.execute(body, run_id="once"), RunState.Awaiting)
        assert counting.reads == 1
        assert await (await runtime.resume("once")).wait() == NATURAL
        assert counting.reads == 2  # once per attempt
        assert len(steps_of(await events_of(runtime, "once"))) == 8


async def test_a_run_that_takes_no_step_reads_no_journal(tmp_path: Path) -> None:
    counting = CountingStore(SQLiteStore(tmp_path / "runs.db", synchronous="normal"))

    async def body(ctx: RunContext) -> None:
        await ctx.boundary({"n": 1})

    async with open_runtime(counting) as runtime:
        assert await runtime.execute(body) == NATURAL
    assert counting.reads == 0


async def test_an_agent_turn_of_three_steps_costs_at_most_three_writes_on_sqlite(
    tmp_path: Path,
) -> None:
    """A turn: a model call, a tool call, a model call, each a step. Each step is one
    commit; commits made together share one group-committed write."""
    counting = CountingStore(SQLiteStore(tmp_path / "runs.db", synchronous="normal"))
    during: list[int] = []

    async def model(messages: list[str]) -> JsonValue:
        await trio.lowlevel.checkpoint()
        return {"reply": f"after {len(messages)}"}

    def tool(query: str) -> JsonValue:
        return {"found": query.upper()}

    async def turn(ctx: RunContext) -> JsonValue:
        before = counting.applies
        first = await ctx.step("model", model, ["hi"])
        found = await ctx.step("tool", tool, "q")
        final = await ctx.step("model", model, ["hi", "tool"])
        during.append(counting.applies - before)
        return {"first": first, "found": found, "final": final}

    async with open_runtime(counting) as runtime:
        assert await runtime.execute(turn, run_id="turn") == NATURAL
        assert len(steps_of(await events_of(runtime, "turn"))) == 3
    assert during == [3]
    assert counting.reads == 1


# ---------------------------------------------------------------------------- cancellation


async def test_an_async_step_sees_the_cancel_and_nothing_is_journaled(
    rt: Runtime,
) -> None:
    entered = trio.Event()
    saw: list[str] = []

    async def hangs() -> JsonValue:
        entered.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            saw.append("cancelled")
            raise
        return None  # pragma: no cover

    async def body(ctx: RunContext) -> None:
        await ctx.step("hangs", hangs)

    handle = await rt.start(body, run_id="cx")
    await entered.wait()
    rt.deliver(LiveCommand.Cancel("cx"))
    assert await handle.wait() == CANCELLED
    assert saw == ["cancelled"]
    assert steps_of(await events_of(rt, "cx")) == []


async def test_a_sync_step_is_abandoned_at_a_cancel_and_its_result_never_committed(
    rt: Runtime,
) -> None:
    started = threading.Event()
    release = threading.Event()
    finished = threading.Event()

    def blocks() -> JsonValue:
        started.set()
        release.wait(30)
        finished.set()
        return "too late"

    async def body(ctx: RunContext) -> None:
        await ctx.step("blocks", blocks)

    handle = await rt.start(body, run_id="sx")
    await trio.to_thread.run_sync(started.wait, 30)
    rt.deliver(LiveCommand.Cancel("sx"))
    with trio.fail_after(10):
        # The attempt ends without waiting for the thread, which still blocks.
        assert await handle.wait() == CANCELLED
    assert not finished.is_set()
    release.set()
    await trio.to_thread.run_sync(finished.wait, 30)
    await trio.sleep(0.05)  # anything the abandoned thread could still cause, it would now
    assert steps_of(await events_of(rt, "sx")) == []
    assert (await rt.record("sx")).state == CANCELLED


async def test_a_cancel_after_the_step_ran_but_before_its_commit_journals_nothing(
    runtime: Runtime,
) -> None:
    async def body(ctx: RunContext) -> None:
        def cancels_its_own_run() -> JsonValue:
            return "done"

        async def then_cancel() -> JsonValue:
            ctx.cancel_scope.cancel()  # the result is ready, the attempt is cancelled
            return "done"

        await ctx.step("sync", cancels_its_own_run)
        await ctx.step("async", then_cancel)

    state = await runtime.execute(body, run_id="late")
    assert state == CANCELLED
    assert steps_of(await events_of(runtime, "late")) == [("sync", 0, "done")]


# ---------------------------------------------------------------------------- the store


async def test_a_store_without_a_step_index_is_read_through_its_events() -> None:
    store = WrappedStore()  # no step_events: the runtime pages through its events
    assert not isinstance(store, StepStore)
    effects = Effects()

    async def body(ctx: RunContext) -> JsonValue:
        for n in range(3):
            await ctx.boundary({"n": n})
        value = await ctx.step("fetch", effects.fetch, ctx.generation)
        if ctx.generation == 1:
            await ctx.await_input("user_input")
        return value

    async with open_runtime(store) as runtime:
        assert isinstance(await runtime.execute(body, run_id="w"), RunState.Awaiting)
        assert await (await runtime.resume("w")).wait() == NATURAL
        assert (await runtime.record("w")).result == {"fetched": 1}
    assert effects.calls == [("fetch", 1)]


async def test_a_failed_journal_read_raises_store_error_and_the_next_step_reads_again() -> None:
    class FailsFirstRead(WrappedStore):
        def __init__(self) -> None:
            super().__init__()
            self.fail = True

        async def step_events(self, run_id: str) -> list[RunEvent]:
            if self.fail:
                self.fail = False
                await trio.lowlevel.checkpoint()
                raise OSError("disk unreadable")
            return await self.inner.step_events(run_id)

    store = FailsFirstRead()
    errors: list[StoreError] = []
    ran: list[int] = []

    def ran_with(n: int) -> int:
        ran.append(n)
        return n

    async def body(ctx: RunContext) -> JsonValue:
        try:
            await ctx.step("s", ran_with, 1)
        except StoreError as exc:
            errors.append(exc)
        return await ctx.step("s", ran_with, 2)

    async with open_runtime(store) as runtime:
        assert await runtime.execute(body, run_id="fr") == NATURAL
        assert steps_of(await events_of(runtime, "fr")) == [("s", 0, 2)]
    assert ran == [2]
    assert len(errors) == 1
    assert "journaled steps of run 'fr'" in str(errors[0])
    assert "disk unreadable" in str(errors[0])


async def test_a_step_commit_the_store_fails_raises_store_error_in_the_body() -> None:
    store = FailingStore()
    errors: list[StoreError] = []

    async def body(ctx: RunContext) -> JsonValue:
        store.failing = True
        try:
            await ctx.step("s", lambda: 1)
        except StoreError as exc:
            errors.append(exc)
        store.failing = False
        return "after"

    async with open_runtime(store) as runtime:
        assert await runtime.execute(body, run_id="sf") == NATURAL
        assert steps_of(await events_of(runtime, "sf")) == []
    assert len(errors) == 1
    assert "disk full" in str(errors[0])


# ---------------------------------------------------------------------------- fork


async def test_a_fork_keeps_its_sources_steps_up_to_its_event(any_store: Store | str) -> None:
    effects = Effects()

    async def body(ctx: RunContext) -> JsonValue:
        got = []
        for n in range(3):
            got.append(await ctx.step("fetch", effects.fetch, f"{ctx.run_id}:{n}"))
            await ctx.boundary({"done": n + 1})
        return got

    async with open_runtime(any_store, bodies={"b": body}) as runtime:
        assert await runtime.execute(body, run_id="src") == NATURAL
        events = await events_of(runtime, "src")
        second_step = [e for e in events if e.kind == EventKind.STEP][1]
        effects.calls.clear()
        # Forked at its second step: the first two steps come along, the third runs.
        fork = await runtime.fork("src", at=second_step.seq, new_run_id="f1")
        assert await fork.wait() == NATURAL
        assert (await runtime.record("f1")).result == [
            {"fetched": "src:0"},
            {"fetched": "src:1"},
            {"fetched": "f1:2"},
        ]
        assert effects.calls == [("fetch", "f1:2")]
        f1_steps = [e for e in await events_of(runtime, "f1") if e.kind == EventKind.STEP]
        assert [(e.detail["index"], e.detail["result"]) for e in f1_steps] == [
            (0, {"fetched": "src:0"}),
            (1, {"fetched": "src:1"}),
            (2, {"fetched": "f1:2"}),
        ]
        # A fork of the fork, at its first copied step: one step comes along.
        effects.calls.clear()
        fork2 = await runtime.fork("f1", at=f1_steps[0].seq, new_run_id="f2")
        assert await fork2.wait() == NATURAL
        assert (await runtime.record("f2")).result == [
            {"fetched": "src:0"},
            {"fetched": "f2:1"},
            {"fetched": "f2:2"},
        ]
        assert effects.calls == [("fetch", "f2:1"), ("fetch", "f2:2")]
        # The source is untouched.
        assert steps_of(await events_of(runtime, "src")) == steps_of(events)


async def test_a_fork_queued_for_a_serving_runtime_keeps_its_sources_steps() -> None:
    effects = Effects()

    async def body(ctx: RunContext) -> JsonValue:
        return [await ctx.step("fetch", effects.fetch, f"{ctx.run_id}:{n}") for n in range(2)]

    store = MemoryStore(shared=True)
    async with open_runtime(store, bodies={"b": body}) as with_body:
        assert await with_body.execute(body, run_id="src") == NATURAL
        async with open_runtime(store) as without_body:
            handle = await without_body.fork("src", new_run_id="fq")
            assert isinstance(await without_body.state("fq"), RunState.Queued)
        effects.calls.clear()
        async with trio.open_nursery() as nursery:
            await nursery.start(with_body.serve)
            assert await handle.wait() == NATURAL
            nursery.cancel_scope.cancel()
        assert (await with_body.record("fq")).result == [
            {"fetched": "src:0"},
            {"fetched": "src:1"},
        ]
    assert effects.calls == []
