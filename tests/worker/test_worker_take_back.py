"""Children across their parent's attempts (DESIGN rule 22): a durable root's attempt that is
released (shutdown) or lost hands its unended descendants back with it, and the parent's next
attempt takes each one back by starting it again under the same run id; those it does not
take back end ``Stopped("not resumed by parent")`` before it ends."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from awaken_trio import (
    EndCause,
    RunContext,
    RunExists,
    RunHandle,
    RunRecord,
    RunState,
    StoreError,
    open_runtime,
)
from awaken_trio.store import MemoryStore
from tests.worker.worker_helpers import (
    CANCELLED,
    NATURAL,
    Stall,
    history,
    past_lease,
    serving,
    settle,
    shared_runtime,
    terminal,
    until_state,
)
from tests.wrapped_stores import DurableWrapper

NOT_RESUMED = RunState.Ended(EndCause.Stopped("not resumed by parent"))


def is_queued(state: RunState) -> bool:
    return state == RunState.Queued()


class Tree:
    """A parent with a running child that has a grandchild, an awaiting child, a child queued
    behind a busy thread, and a child that ended, all under fixed ids (the recommended
    pattern). Each attempt of the parent starts them again; what each start returned, and
    which generations ran, is recorded per attempt."""

    def __init__(self) -> None:
        self.generations: dict[str, list[int]] = {}
        self.checkpoints: dict[str, list[Any]] = {}
        self.taken: dict[int, dict[str, RunState | None]] = {}
        self.parent_ready = trio.Event()
        self.finish = trio.Event()
        self.release_stepper = trio.Event()

    def _ran(self, ctx: RunContext) -> None:
        self.generations.setdefault(ctx.run_id, []).append(ctx.generation)
        self.checkpoints.setdefault(ctx.run_id, []).append(ctx.checkpoint)

    async def leaf(self, ctx: RunContext) -> object:
        self._ran(ctx)
        await self.finish.wait()
        return {"leaf": ctx.generation}

    async def stepper(self, ctx: RunContext) -> object:
        self._ran(ctx)
        grandchild = await ctx.start_child(self.leaf, run_id=f"{ctx.run_id}.g")
        step = (ctx.checkpoint or {"step": 0})["step"]
        if step == 0:
            await ctx.boundary({"step": 1})
        await self.finish.wait()
        assert await grandchild.wait() == NATURAL
        return {"steps": 1, "generation": ctx.generation}

    async def asking(self, ctx: RunContext) -> object:
        self._ran(ctx)
        if ctx.resumed_ticket is None:
            await ctx.await_input("user_input", payload={"q": "name?"})
        return {"answer": ctx.resume_value}

    async def quick(self, ctx: RunContext) -> object:
        self._ran(ctx)
        return {"quick": True}

    async def parent(self, ctx: RunContext) -> object:
        self._ran(ctx)
        me = ctx.run_id
        taken: dict[str, RunState | None] = {}
        self.taken[ctx.generation] = taken
        taken["quick"] = await ctx.run_child(self.quick, run_id=f"{me}.quick")
        running = await ctx.start_child(self.stepper, run_id=f"{me}.run", input={"n": 1})
        taken["ask"] = await ctx.run_child(self.asking, run_id=f"{me}.ask")
        # Queued behind the running child's thread.
        queued = await ctx.start_child(self.leaf, run_id=f"{me}.queued", thread_id=f"{me}.run")
        await ctx.boundary({"started": True})
        self.parent_ready.set()
        await self.finish.wait()
        taken["run"] = await running.wait()
        taken["queued"] = await queued.wait()
        return {"generation": ctx.generation}


async def _states(runtime: Any, run_ids: list[str]) -> dict[str, RunState]:
    return {run_id: await runtime.state(run_id) for run_id in run_ids}


KIDS = ["p.quick", "p.run", "p.run.g", "p.ask", "p.queued"]


async def test_a_released_tree_is_taken_back_by_the_next_attempt_of_its_parent(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    tree = Tree()
    bodies = {"p": tree.parent}
    async with shared_runtime(shared_store) as observer:
        async with shared_runtime(shared_store, bodies=bodies) as a:
            await a.start(tree.parent, run_id="p")
            with trio.fail_after(60):
                await tree.parent_ready.wait()
            await trio.testing.wait_all_tasks_blocked()
            ticket_before = await a.state("p.ask")
            assert isinstance(ticket_before, RunState.Awaiting)
        # Handed back, none ended: a running one is Queued at its generation.
        assert await _states(observer, ["p", *KIDS]) == {
            "p": RunState.Queued(),
            "p.quick": NATURAL,
            "p.run": RunState.Queued(),
            "p.run.g": RunState.Queued(),
            "p.ask": ticket_before,
            "p.queued": RunState.Queued(),
        }
        assert (await observer.record("p.run")).checkpoint == {"step": 1}
        tree.parent_ready = trio.Event()
        async with shared_runtime(shared_store, bodies=bodies) as b, serving(b):
            with trio.fail_after(60):
                await tree.parent_ready.wait()
            # The new attempt took every child back: the ended one answers its end, the
            # awaiting one its ticket (the same one), the running one runs again from its
            # checkpoint (generation + 1), and its own child is taken back by it in turn.
            assert tree.taken[2]["quick"] == NATURAL
            assert tree.taken[2]["ask"] == ticket_before
            assert await b.state("p.run") == RunState.Running(2)
            assert await b.state("p.run.g") == RunState.Running(2)
            assert tree.checkpoints["p.run"] == [None, {"step": 1}]
            assert tree.generations["p.quick"] == [1]
            assert tree.generations["p.ask"] == [1]
            # The taken-back awaiting child is this attempt's: it resumes through it.
            resumed = await b.resume("p.ask", "Ada")
            assert await settle(resumed) == NATURAL
            assert (await b.record("p.ask")).result == {"answer": "Ada"}
            tree.finish.set()
            assert await until_state(b, "p", lambda s: s == NATURAL) == NATURAL
        assert tree.taken[2]["run"] == NATURAL
        assert tree.taken[2]["queued"] == NATURAL
        assert tree.generations["p"] == [1, 2]
        assert tree.generations["p.run"] == [1, 2]
        assert tree.generations["p.run.g"] == [1, 2]
        # The queued child never ran before; its first attempt runs now.
        assert tree.generations["p.queued"] == [1]
        events = await history(observer)
        [parent_end] = terminal([e for e in events if e.run_id == "p"])
        for kid in KIDS:
            [end] = terminal([e for e in events if e.run_id == kid])
            assert end.state == NATURAL
            assert end.seq < parent_end.seq


async def test_a_lost_tree_is_taken_back_by_the_recovered_attempt(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    tree = Tree()
    bodies = {"p": tree.parent}
    async with (
        shared_runtime(shared_store, bodies=bodies) as a,
        shared_runtime(shared_store, bodies=bodies) as b,
    ):
        handle = await a.start(tree.parent, run_id="p")
        with trio.fail_after(60):
            await tree.parent_ready.wait()
        await trio.testing.wait_all_tasks_blocked()
        ticket_before = await a.state("p.ask")
        tree.parent_ready = trio.Event()
        with Stall(a):
            async with serving(b):
                await past_lease()
                with trio.fail_after(600):
                    await tree.parent_ready.wait()
                assert await b.state("p") == RunState.Running(2)
                assert await b.state("p.run") == RunState.Running(2)
                assert await b.state("p.run.g") == RunState.Running(2)
                assert tree.taken[2]["ask"] == ticket_before
                tree.finish.set()
                assert await settle(handle) == NATURAL
        assert tree.generations["p.run"] == [1, 2]
        # The lost attempt's children committed nothing after the loss: one end each.
        events = await history(b)
        for kid in KIDS:
            ends = terminal([e for e in events if e.run_id == kid])
            assert [e.state for e in ends] == ([CANCELLED] if kid == "p.ask" else [NATURAL])


async def test_children_not_taken_back_end_before_the_parent_whatever_ends_it(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    ready = trio.Event()

    async def parked(ctx: RunContext) -> object:
        await trio.sleep_forever()

    async def grand(ctx: RunContext) -> object:
        await ctx.start_child(parked, run_id=f"{ctx.run_id}.g")
        await trio.sleep_forever()

    async def parent(ctx: RunContext) -> object:
        if ctx.generation == 1:
            await ctx.start_child(grand, run_id="kid")
            await ctx.start_child(parked, run_id="other")
            ready.set()
            await trio.sleep_forever()
        # A later attempt takes back only "other", then pauses: "kid" (and its child) end
        # first, as the pause ends this attempt.
        await ctx.start_child(parked, run_id="other")
        await ctx.await_input("user_input")

    async with shared_runtime(shared_store) as observer:
        async with shared_runtime(shared_store, bodies={"p": parent}) as a:
            await a.start(parent, run_id="p")
            with trio.fail_after(60):
                await ready.wait()
            await trio.testing.wait_all_tasks_blocked()
        async with shared_runtime(shared_store, bodies={"p": parent}) as b, serving(b):
            await until_state(b, "p", lambda s: isinstance(s, RunState.Awaiting))
        events = await history(observer)
        [pause] = [e for e in events if e.run_id == "p" and isinstance(e.state, RunState.Awaiting)]
        ends = {e.run_id: e for e in terminal(events)}
        assert ends["kid"].state == NOT_RESUMED
        assert ends["kid.g"].state == NOT_RESUMED
        assert dict(ends["kid"].detail) == {"source": "parent", "reason": "not resumed by parent"}
        assert ends["kid.g"].seq < ends["kid"].seq < pause.seq
        # The child it took back is its own: cancelled as the attempt it lives in ends.
        assert ends["other"].state == CANCELLED
        assert ends["other"].seq < pause.seq


async def test_a_handed_back_tree_ends_with_its_root_cancelled_while_queued(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    ready = trio.Event()

    async def parked(ctx: RunContext) -> object:
        await trio.sleep_forever()

    async def parent(ctx: RunContext) -> object:
        await ctx.start_child(parked, run_id="kid")
        ready.set()
        await trio.sleep_forever()

    async with shared_runtime(shared_store) as observer:
        async with shared_runtime(shared_store, bodies={"p": parent}) as a:
            await a.start(parent, run_id="p")
            with trio.fail_after(60):
                await ready.wait()
        assert await observer.state("kid") == RunState.Queued()
        assert await observer.cancel_run("p") == CANCELLED
        assert await observer.state("kid") == CANCELLED
        kid_end = terminal(await history(observer, "kid"))[0]
        parent_end = terminal(await history(observer, "p"))[0]
        assert kid_end.seq < parent_end.seq
        assert dict(kid_end.detail)["source"] == "parent"


async def test_taking_back_refuses_another_input_and_a_run_that_is_not_a_child(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    refusals: list[str] = []
    ready = trio.Event()

    async def parked(ctx: RunContext) -> object:
        await trio.sleep_forever()

    async def parent(ctx: RunContext) -> object:
        if ctx.generation == 1:
            await ctx.start_child(parked, run_id="kid", input={"n": 1})
            ready.set()
            await trio.sleep_forever()
        for run_id, given in (("kid", {"n": 2}), ("stranger", None)):
            with pytest.raises(RunExists) as caught:
                await ctx.start_child(parked, run_id=run_id, input=given)
            refusals.append(str(caught.value))
        return None

    async with shared_runtime(shared_store) as observer:
        await observer.start(parked, run_id="stranger")
        async with shared_runtime(shared_store, bodies={"p": parent}) as a:
            await a.start(parent, run_id="p")
            with trio.fail_after(60):
                await ready.wait()
        kid_events = len(await history(observer, "kid"))
        async with shared_runtime(shared_store, bodies={"p": parent}) as b, serving(b):
            assert await until_state(b, "p", lambda s: s == NATURAL) == NATURAL
        assert "started with another input" in refusals[0]
        assert "is not a child of run 'p'" in refusals[1]
        # The refusal committed nothing; the child was never taken back, so it ended with
        # the attempt that did not take it.
        kid_history = await history(observer, "kid")
        assert len(kid_history) == kid_events + 1
        assert kid_history[-1].state == NOT_RESUMED
        assert await observer.state("stranger") == RunState.Running(1)
        await observer.cancel_run("stranger")


async def test_a_child_started_again_by_the_same_attempt_is_that_child() -> None:
    async def parked(ctx: RunContext) -> object:
        await trio.sleep_forever()

    handles: list[RunHandle] = []

    async def parent(ctx: RunContext) -> object:
        handles.append(await ctx.start_child(parked, run_id="kid"))
        handles.append(await ctx.start_child(parked, run_id="kid"))
        ctx.cancel_scope.cancel()
        await trio.sleep_forever()

    async with open_runtime() as runtime:
        state = await runtime.execute(parent, run_id="p")
        assert state == CANCELLED
        assert [h.generation for h in handles] == [1, 1]
        assert await handles[1].wait() == CANCELLED
        assert len(terminal(await history(runtime, "kid"))) == 1


async def test_after_a_resume_a_child_that_ended_answers_its_end(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls: list[int] = []

    async def kid(ctx: RunContext) -> object:
        calls.append(ctx.generation)
        return {"kid": "done"}

    async def parent(ctx: RunContext) -> object:
        state = await ctx.run_child(kid, run_id="p.kid")
        if ctx.resume_value is None:
            await ctx.await_input("user_input")
        return {"kid": repr(state)}

    async with open_runtime() as runtime:
        assert isinstance(await runtime.execute(parent, run_id="p"), RunState.Awaiting)
        handle = await runtime.resume("p", "go", body=parent)
        assert await handle.wait() == NATURAL
        assert calls == [1]
        assert (await runtime.record("p")).result == {"kid": repr(NATURAL)}


class HeldLoad(DurableWrapper):
    """The first `load` of ``run_id`` waits for ``go`` (``holding`` is set while it
    waits); with ``failing`` set it raises instead, as a store that went away would."""

    def __init__(self, inner: MemoryStore, run_id: str) -> None:
        super().__init__(inner)
        self.run_id = run_id
        self.holding = trio.Event()
        self.go = trio.Event()
        self.failing = False

    async def load(self, run_id: str) -> RunRecord | None:
        if run_id == self.run_id and not self.go.is_set():
            if self.failing:
                await trio.lowlevel.checkpoint()
                raise OSError("connection reset")
            self.holding.set()
            await self.go.wait()
        return await super().load(run_id)


async def _handed_back_kid(store: Any, parent: Any) -> None:
    """Run ``parent`` once on ``store`` until it has started its child, then leave (the
    child is handed back)."""
    async with shared_runtime(store, bodies={"p": parent}) as a:
        await a.start(parent, run_id="p")
        await trio.testing.wait_all_tasks_blocked()
    assert await shared_runtime_state(store, "kid") == RunState.Queued()


async def shared_runtime_state(store: Any, run_id: str) -> RunState:
    async with shared_runtime(store) as observer:
        state: RunState = await observer.state(run_id)
        return state


async def test_a_child_ended_while_it_is_being_taken_back_answers_that_end(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    answers: list[RunState] = []

    async def parked(ctx: RunContext) -> object:
        await trio.sleep_forever()

    async def parent(ctx: RunContext) -> object:
        handle = await ctx.start_child(parked, run_id="kid")
        if ctx.generation == 1:
            await trio.sleep_forever()
        answers.append(await handle.wait())
        return None

    await _handed_back_kid(shared_store, parent)
    held = HeldLoad(shared_store, "kid")
    async with (
        shared_runtime(shared_store) as other,
        shared_runtime(held, bodies={"p": parent}) as b,
        serving(b),
    ):
        with trio.fail_after(60):
            await held.holding.wait()
        # The take-back has read nothing yet; another runtime ends the child meanwhile.
        assert await other.cancel_run("kid") == CANCELLED
        held.go.set()
        assert await until_state(b, "p", lambda s: s == NATURAL) == NATURAL
    assert answers == [CANCELLED]
    assert len(terminal(await history(other, "kid"))) == 1


async def test_a_store_failing_a_take_back_raises_into_the_body_and_commits_nothing(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    errors: list[BaseException] = []

    async def parked(ctx: RunContext) -> object:
        await trio.sleep_forever()

    async def parent(ctx: RunContext) -> object:
        if ctx.generation == 1:
            await ctx.start_child(parked, run_id="kid")
            await trio.sleep_forever()
        try:
            await ctx.start_child(parked, run_id="kid")
        except StoreError as exc:
            errors.append(exc)
        return None

    await _handed_back_kid(shared_store, parent)
    async with shared_runtime(shared_store) as observer:
        kid_events = await history(observer, "kid")
    held = HeldLoad(shared_store, "kid")
    held.failing = True
    async with shared_runtime(held, bodies={"p": parent}) as b, serving(b):
        assert await until_state(b, "p", lambda s: s == NATURAL) == NATURAL
    assert len(errors) == 1
    assert "connection reset" in str(errors[0])
    async with shared_runtime(shared_store) as observer:
        events = await history(observer, "kid")
    # Nothing committed for the child but the end of the attempt that did not take it.
    assert events[: len(kid_events)] == kid_events
    assert [e.state for e in events[len(kid_events) :]] == [NOT_RESUMED]
