"""Random sequences of run control checked against a small model and the event log.

Every run executes the same scripted body: it waits at ``ctx.boundary(wait=True)`` and acts
on the messages it receives ("finish", "fail", start a child, commit progress). The test
drives the runs with live commands, committed control (``cancel_run``, ``stop_run``,
``resume``) and starts, predicts each outcome with the model, and after every step and
after leaving ``open_runtime`` checks the committed truth: each run's state against the
model, and the store's event log against the invariants of the design (one terminal commit
per ended run and nothing after it, tickets only in ``Awaiting`` commits, children ending
before their parent's attempt, generations never decreasing, seq strictly increasing).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from awaken_trio import (
    EndCause,
    JsonValue,
    LiveCommand,
    NotActive,
    NotAwaiting,
    ResumeTicket,
    RunAlreadyEnded,
    RunContext,
    RunEvent,
    RunExists,
    RunState,
    Runtime,
    TicketMismatch,
    open_runtime,
)
from awaken_trio.store import MemoryStore

CANCELLED = RunState.Ended(EndCause.Cancelled())
FAILED = RunState.Ended(EndCause.Failed("value_error", "boom"))
STOPPED = RunState.Ended(EndCause.Stopped("budget"))
SHUTDOWN = RunState.Ended(EndCause.Stopped("runtime shutdown"))
NATURAL = RunState.Ended(EndCause.NaturalEnd())


# ---------------------------------------------------------------- the scripted body


async def script(ctx: RunContext) -> JsonValue:
    """Wait for messages and act on each, in order."""
    pending: collections.deque[Any] = collections.deque()
    while True:
        if not pending:
            pending.extend(await ctx.boundary(wait=True))
            continue
        message = pending.popleft()
        if message == "finish":
            return {
                "done": ctx.run_id,
                "generation": ctx.generation,
                "resume_value": ctx.resume_value,
                "checkpoint": ctx.checkpoint,
            }
        if message == "fail":
            raise ValueError("boom")
        if isinstance(message, dict):
            if "child" in message:
                await ctx.start_child(script, run_id=message["child"], thread_id=message["thread"])
            elif "progress" in message:
                pending.extend(await ctx.boundary({"step": message["progress"]}))


# ---------------------------------------------------------------- the model


@dataclasses.dataclass
class ModelRun:
    run_id: str
    thread: str
    parent: str | None
    status: str = "queued"  # running, queued, awaiting or ended
    generation: int = 1  # the generation of the run's latest attempt
    committed_generation: int = 0  # what the store's record holds
    checkpoint: JsonValue = None
    resume_value: JsonValue = None
    carried: list[JsonValue] = dataclasses.field(default_factory=list)
    end: RunState | None = None
    source: str | None = None
    result: JsonValue = None
    discarded: list[JsonValue] = dataclasses.field(default_factory=list)
    children: list[str] = dataclasses.field(default_factory=list)

    def finish_value(self) -> JsonValue:
        """What the scripted body returns on "finish" in the current attempt."""
        return {
            "done": self.run_id,
            "generation": self.generation,
            "resume_value": self.resume_value,
            "checkpoint": self.checkpoint,
        }

    def expected_state(self) -> RunState:
        if self.status == "running":
            return RunState.Running(self.generation)
        if self.status == "queued":
            return RunState.Queued()
        if self.status == "awaiting":
            return RunState.Awaiting(_pause_ticket(self.run_id, self.thread, self.generation))
        assert self.end is not None
        return self.end


def _pause_ticket(run_id: str, thread: str, generation: int) -> ResumeTicket:
    return ResumeTicket(
        correlation_id=f"{run_id}/pause/{generation}",
        run_id=run_id,
        thread_id=thread,
        reason="manual_pause",
    )


class Model:
    """What the runtime should have committed after each step."""

    def __init__(self) -> None:
        self.runs: dict[str, ModelRun] = {}
        # Per thread: the running holder first, then its FIFO waiters.
        self.threads: dict[str, list[str]] = {}

    def new_id(self) -> str:
        return f"r{len(self.runs)}"

    def with_status(self, *statuses: str) -> list[ModelRun]:
        return [r for r in self.runs.values() if r.status in statuses]

    def add(self, run_id: str, thread: str, parent: str | None) -> ModelRun:
        run = ModelRun(run_id, thread, parent)
        self.runs[run_id] = run
        if parent is not None:
            self.runs[parent].children.append(run_id)
        self.enter(run)
        return run

    def enter(self, run: ModelRun) -> None:
        """A new attempt of ``run`` takes its thread, or queues behind the holder."""
        queue = self.threads.setdefault(run.thread, [])
        queue.append(run.run_id)
        run.status = "queued"
        run.committed_generation = run.generation - 1
        if len(queue) == 1:
            self._begin(run)

    def _begin(self, run: ModelRun) -> None:
        run.status = "running"
        run.committed_generation = run.generation
        messages, run.carried = run.carried, []
        # The first boundary of the attempt hands the carried messages to the body.
        if "finish" in messages:
            self.end(run, NATURAL, None, result=run.finish_value())

    def _live_descendants(self, run: ModelRun) -> list[ModelRun]:
        out: list[ModelRun] = []
        for child_id in run.children:
            child = self.runs[child_id]
            if child.status != "ended":
                out.extend(self._live_descendants(child))
                out.append(child)
        return out

    def end(
        self,
        run: ModelRun,
        state: RunState | None,
        source: str | None,
        *,
        result: JsonValue = None,
    ) -> None:
        """End ``run``'s attempt: ``state`` None means it paused (``Awaiting``)."""
        descendants = self._live_descendants(run)
        for child in descendants:
            self._seal(child, CANCELLED, "parent")
        if state is None:
            run.status = "awaiting"
            run.committed_generation = run.generation
        else:
            self._seal(run, state, source)
            run.result = result
        for gone in [*descendants, run]:
            queue = self.threads.get(gone.thread)
            if queue is not None and gone.run_id in queue:
                queue.remove(gone.run_id)
                if not queue:
                    del self.threads[gone.thread]
        self._hand_over()

    def _seal(self, run: ModelRun, state: RunState, source: str | None) -> None:
        run.committed_generation = run.generation - 1 if run.status == "queued" else run.generation
        run.status = "ended"
        run.end = state
        run.source = source
        run.discarded, run.carried = run.carried, []

    def _hand_over(self) -> None:
        for queue in list(self.threads.values()):
            if queue and self.runs[queue[0]].status == "queued":
                self._begin(self.runs[queue[0]])

    def shutdown(self) -> None:
        """Leaving open_runtime: active and queued runs (and awaiting children) stop."""
        for run in self.runs.values():
            if run.status in ("running", "queued") or (
                run.status == "awaiting" and run.parent is not None
            ):
                self._seal(run, SHUTDOWN, "shutdown")
        self.threads.clear()


# ---------------------------------------------------------------- operations


KINDS = (
    *("start",) * 6,
    "finish",
    "fail",
    "cancel",
    "pause",
    "pause",
    "resume",
    "resume",
    "cancel_run",
    "stop_run",
    "progress",
    "wait",
)

# Which runs an operation normally targets (it may also target any run).
TARGETS: dict[str, tuple[str, ...]] = {
    "finish": ("running",),
    "fail": ("running",),
    "cancel": ("running",),
    "pause": ("running",),
    "progress": ("running",),
    "resume": ("awaiting",),
    "cancel_run": ("running", "queued", "awaiting"),
    "stop_run": ("running", "queued", "awaiting"),
}


@dataclasses.dataclass(frozen=True)
class Op:
    kind: str
    pick: int
    any_target: bool
    thread: str | None
    as_child: bool
    variant: int


ops_strategy = st.builds(
    Op,
    kind=st.sampled_from(KINDS),
    pick=st.integers(0, 15),
    any_target=st.sampled_from([False, False, False, True]),
    thread=st.sampled_from([None, None, "T0", "T1"]),
    as_child=st.booleans(),
    variant=st.integers(0, 3),
)


def _choose(model: Model, op: Op) -> ModelRun | None:
    wanted = model.with_status(*TARGETS[op.kind])
    pool = list(model.runs.values()) if op.any_target or not wanted else wanted
    return pool[op.pick % len(pool)] if pool else None


async def apply(runtime: Runtime, store: MemoryStore, model: Model, op: Op) -> None:
    if op.kind == "wait":
        # The public history equals the store's log, for all runs and for one run.
        history = [event async for event in runtime.events(follow=False)]
        assert history == await store.events_after(0)
        if model.runs:
            rid = list(model.runs)[op.pick % len(model.runs)]
            one = [event async for event in runtime.events(rid, follow=False)]
            assert one == await store.events_after(0, rid)
        return
    if op.kind == "start":
        await _start(runtime, model, op)
        return
    run = _choose(model, op)
    if run is None:
        return
    rid = run.run_id
    live = run.status == "running"
    if op.kind in ("finish", "fail", "cancel", "pause", "progress") and not live:
        command: LiveCommand = LiveCommand.Message(rid, "finish")
        if op.kind == "cancel":
            command = LiveCommand.Cancel(rid)
        elif op.kind == "pause":
            command = LiveCommand.Pause(rid)
        with pytest.raises(NotActive):
            runtime.deliver(command)
        return

    if op.kind == "finish":
        runtime.deliver(LiveCommand.Message(rid, "finish"))
        model.end(run, NATURAL, None, result=run.finish_value())
    elif op.kind == "fail":
        runtime.deliver(LiveCommand.Message(rid, "fail"))
        model.end(run, FAILED, None)
    elif op.kind == "progress":
        runtime.deliver(LiveCommand.Message(rid, {"progress": op.pick}))
        run.checkpoint = {"step": op.pick}
    elif op.kind == "cancel":
        # A message that arrives with the cancel (in the same step) is never handed to the
        # waiting body: the cancel wins at the boundary, and the message is discarded.
        arrived: list[JsonValue] = []
        if op.variant == 1:  # a pending pause loses to the cancel
            runtime.deliver(LiveCommand.Pause(rid))
        elif op.variant == 2:
            arrived = ["finish"]
        elif op.variant == 3:
            arrived = ["fail"]
        for message in arrived:
            runtime.deliver(LiveCommand.Message(rid, message))
        runtime.deliver(LiveCommand.Cancel(rid, reason="op"))
        model.end(run, CANCELLED, "deliver")
        run.discarded = [*run.discarded, *arrived]
    elif op.kind == "pause":
        carried: list[JsonValue] = []
        if op.variant == 2:
            carried = ["finish"]
        elif op.variant == 3:
            carried = [{"note": op.pick}]
        for message in carried:
            runtime.deliver(LiveCommand.Message(rid, message))
        runtime.deliver(LiveCommand.Pause(rid))
        run.carried = list(carried)
        model.end(run, None, None)
    elif op.kind == "resume":
        await _resume(runtime, model, run, op)
    elif op.kind in ("cancel_run", "stop_run"):
        wanted, source = (
            (CANCELLED, "cancel_run") if op.kind == "cancel_run" else (STOPPED, "stop_run")
        )
        if run.status == "ended":
            with pytest.raises(RunAlreadyEnded) as info:
                await _end_run(runtime, op.kind, rid)
            assert info.value.state == run.end
            return
        assert await _end_run(runtime, op.kind, rid) == wanted
        model.end(run, wanted, source)
    else:  # pragma: no cover - KINDS and this function list the same operations
        raise AssertionError(op.kind)


async def _end_run(runtime: Runtime, kind: str, run_id: str) -> RunState:
    if kind == "cancel_run":
        return await runtime.cancel_run(run_id)
    return await runtime.stop_run(run_id, "budget")


async def _start(runtime: Runtime, model: Model, op: Op) -> None:
    if op.variant == 3 and model.runs:
        taken = list(model.runs)[op.pick % len(model.runs)]
        with pytest.raises(RunExists):
            await runtime.start(script, run_id=taken, thread_id=op.thread)
        return
    run_id = model.new_id()
    parents = model.with_status("running")
    if op.as_child and parents:
        # Newest first, so that children of children are common.
        parent = parents[-1 - op.pick % len(parents)]
        runtime.deliver(LiveCommand.Message(parent.run_id, {"child": run_id, "thread": op.thread}))
        model.add(run_id, op.thread or run_id, parent.run_id)
        return
    handle = await runtime.start(script, run_id=run_id, thread_id=op.thread)
    assert (handle.run_id, handle.thread_id, handle.generation) == (
        run_id,
        op.thread or run_id,
        1,
    )
    model.add(run_id, op.thread or run_id, None)


async def _resume(runtime: Runtime, model: Model, run: ModelRun, op: Op) -> None:
    rid = run.run_id
    if run.status != "awaiting":
        with pytest.raises(NotAwaiting) as info:
            await runtime.resume(rid, {"answer": op.pick})
        assert info.value.state == run.expected_state()
        return
    if op.variant == 3:
        with pytest.raises(TicketMismatch):
            await runtime.resume(rid, correlation_id="not-the-ticket")
        return
    correlation_id = f"{rid}/pause/{run.generation}" if op.variant == 2 else None
    handle = await runtime.resume(rid, {"answer": op.pick}, correlation_id=correlation_id)
    if run.parent is not None:
        # An awaiting child only exists while its parent's attempt runs.
        assert model.runs[run.parent].status == "running"
    run.generation += 1
    run.resume_value = {"answer": op.pick}
    assert (handle.run_id, handle.generation) == (rid, run.generation)
    model.enter(run)


# ---------------------------------------------------------------- checks


async def check_states(store: MemoryStore, model: Model, runtime: Runtime | None) -> None:
    for run in model.runs.values():
        record = await store.load(run.run_id)
        assert record is not None, run.run_id
        assert record.state == run.expected_state(), run.run_id
        assert record.generation == run.committed_generation, run.run_id
        assert (record.thread_id, record.parent_run_id) == (run.thread, run.parent)
        assert record.checkpoint == run.checkpoint, run.run_id
        if run.status == "ended" and run.end == NATURAL:
            assert record.result == run.result
        else:
            assert record.result is None
        # Carried messages are checked where they surface: the first boundary of the next
        # attempt returns them, and a terminal commit records them as discarded.
    if runtime is not None:
        stats = runtime.statistics()
        assert stats.active_attempts == len(model.with_status("running"))
        assert stats.queued_runs == len(model.with_status("queued"))
        assert stats.busy_threads == len(model.threads)
        for thread, queue in model.threads.items():
            assert runtime.active_attempt_run_id(thread) == queue[0]


def _attempt_ends(events: list[RunEvent]) -> list[int]:
    """Seqs of the commits that ended an attempt of a run (Awaiting or terminal)."""
    return [
        e.seq
        for e in events
        if e.kind == "committed" and isinstance(e.state, RunState.Awaiting | RunState.Ended)
    ]


async def check_log(store: MemoryStore, model: Model) -> None:
    events = await store.events_after(0)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    by_run: dict[str, list[RunEvent]] = collections.defaultdict(list)
    for event in events:
        by_run[event.run_id].append(event)
    assert set(by_run) == set(model.runs)

    terminal: dict[str, RunEvent] = {}
    for run_id, run_events in by_run.items():
        run = model.runs[run_id]
        assert await store.events_after(0, run_id) == run_events
        first = run_events[0]
        assert first.kind == "committed"
        assert first.detail == {"source": "start"}
        assert first.state in (RunState.Running(1), RunState.Queued())

        generations = [e.generation for e in run_events]
        assert generations == sorted(generations), run_id
        for event in run_events:
            assert event.thread_id == run.thread
            if isinstance(event.state, RunState.Awaiting):
                assert event.kind == "committed"
                assert event.state.ticket == _pause_ticket(run_id, run.thread, event.generation)
            if event.kind in ("late_result_discarded", "messages_discarded"):
                assert isinstance(event.state, RunState.Ended), run_id
        # The committed state is the last commit's state.
        record = await store.load(run_id)
        assert record is not None
        assert record.state == run_events[-1].state

        ends = [
            i
            for i, e in enumerate(run_events)
            if e.kind == "committed" and isinstance(e.state, RunState.Ended)
        ]
        if run.status != "ended":
            assert ends == [], run_id
            assert not any(isinstance(e.state, RunState.Ended) for e in run_events)
            continue
        # Exactly one terminal commit, and no event after it.
        assert ends == [len(run_events) - 1], run_id
        last = run_events[-1]
        terminal[run_id] = last
        assert last.state == run.end
        assert last.detail.get("source") == run.source, (run_id, last.detail)
        if run.end == FAILED:
            # An error that won over a cancel or stop requested in the same step keeps
            # that request in the detail.
            assert last.detail["error"] == "ValueError: boom"
            assert set(last.detail) <= {"error", "pending", "traceback"}, last.detail
            if "pending" in last.detail:
                assert last.detail["pending"]["source"] in (
                    "deliver",
                    "cancel_run",
                    "stop_run",
                    "parent",
                    "shutdown",
                )
        extras = [e for e in run_events[:-1] if isinstance(e.state, RunState.Ended)]
        # No body returns after a cancel here (a message that came with it is discarded
        # instead), so no late result is ever recorded.
        expected_kinds = ["messages_discarded"] if run.discarded else []
        assert [e.kind for e in extras] == expected_kinds, run_id
        assert extras == run_events[len(run_events) - 1 - len(extras) : -1]
        for extra in extras:
            assert extra.detail == {"messages": run.discarded}

    for run in model.runs.values():
        source = terminal[run.run_id].detail.get("source") if run.run_id in terminal else None
        if run.parent is None:
            # A run is never ended "by its parent" unless it has one.
            assert source != "parent", run.run_id
            continue
        created = by_run[run.run_id][0].seq
        parent_ends = [s for s in _attempt_ends(by_run[run.parent]) if s > created]
        if parent_ends:
            # The parent's attempt that started this child ended: the child ended first.
            assert run.run_id in terminal, run.run_id
            assert terminal[run.run_id].seq < parent_ends[0], run.run_id
        if source == "parent":
            # Cancelled as a child only because the parent's attempt ended right after.
            assert parent_ends, run.run_id
            assert terminal[run.run_id].state == CANCELLED
            between = [
                e
                for e in events
                if terminal[run.run_id].seq < e.seq < parent_ends[0] and e.run_id == run.parent
            ]
            assert all(not isinstance(e.state, RunState.Running) for e in between), run.run_id


async def settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


@settings(
    max_examples=200,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(ops_strategy, min_size=8, max_size=25), inline=st.booleans())
async def test_random_control_sequences_keep_the_invariants(ops: list[Op], inline: bool) -> None:
    store = MemoryStore(inline=inline)
    model = Model()
    with trio.fail_after(20):
        async with open_runtime(store) as runtime:
            for op in ops:
                await apply(runtime, store, model, op)
                await settle()
                await check_states(store, model, runtime)
                await check_log(store, model)
        model.shutdown()
        await check_states(store, model, None)
        await check_log(store, model)
        # Every run that was active or queued at shutdown is committed; only top-level
        # awaiting runs are left, still resumable by a later runtime.
        for run in model.runs.values():
            assert run.status in ("ended", "awaiting")
            assert run.status == "ended" or run.parent is None


# ---------------------------------------------------------------- a fixed sequence


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "mailbox"])
@pytest.mark.parametrize("grandchild", ["running", "queued"])
async def test_child_with_its_own_child_is_cancelled_by_the_parent(
    inline: bool, grandchild: str
) -> None:
    # p -> c -> g; when p finishes, c and g are both cancelled because their parent's
    # attempt ended, so both terminal commits name the parent as the source. g either
    # runs on its own thread or waits for "T0", which a top-level run holds.
    store = MemoryStore(inline=inline)
    async with open_runtime(store) as runtime:
        await runtime.start(script, run_id="holder", thread_id="T0")
        await runtime.start(script, run_id="p")
        await settle()
        runtime.deliver(LiveCommand.Message("p", {"child": "c", "thread": None}))
        await settle()
        thread = "T0" if grandchild == "queued" else None
        runtime.deliver(LiveCommand.Message("c", {"child": "g", "thread": thread}))
        await settle()
        expected_g = RunState.Queued() if grandchild == "queued" else RunState.Running(1)
        assert await runtime.state("g") == expected_g
        runtime.deliver(LiveCommand.Message("p", "finish"))
        await settle()
        ends = {
            e.run_id: e
            for e in await store.events_after(0)
            if e.kind == "committed" and isinstance(e.state, RunState.Ended)
        }
        assert await runtime.state("holder") == RunState.Running(1)
    assert ends["p"].state == NATURAL
    for run_id in ("c", "g"):
        assert ends[run_id].state == CANCELLED
        assert ends[run_id].detail["source"] == "parent", (run_id, ends[run_id].detail)
    assert ends["g"].seq < ends["c"].seq < ends["p"].seq
