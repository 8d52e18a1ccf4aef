"""Cancel, stop, pause and live messages on agent runs: prompt cancellation of hung model
and tool calls, races between a reply and a cancel, and what reaches the transcript."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from awaken_trio import EndCause, LiveCommand, RunContext, RunState, Runtime, open_runtime
from awaken_trio.agent import Agent, ModelError, ModelReply, ScriptedModel, Tool
from awaken_trio.store import MemoryStore
from tests.agent.agent_helpers import (
    Messages,
    agent_events,
    all_events,
    blocking_reply,
    call,
    calls,
    echo,
    hang,
    terminal_index,
    text,
    tool_contents,
    transcript,
)
from tests.run_helpers import reach, settle

CANCELLED = RunState.Ended(EndCause.Cancelled())
NATURAL_END = RunState.Ended(EndCause.NaturalEnd())


async def test_a_cancel_before_the_first_inference_means_no_model_call(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel([text("never")])
    handle = await runtime.start(Agent(model), input="hi")
    runtime.deliver(LiveCommand.Cancel(handle.run_id))
    assert await settle(handle) == CANCELLED
    assert model.calls == []


async def test_a_hung_model_is_cancelled_promptly(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel([hang])
    handle = await runtime.start(Agent(model), input="hi")
    await trio.testing.wait_all_tasks_blocked()
    assert len(model.calls) == 1
    runtime.deliver(LiveCommand.Cancel(handle.run_id, "user left"))
    with trio.fail_after(1):  # virtual time: only a hang would make it pass
        assert await handle.wait() == CANCELLED
    events = await all_events(runtime, handle.run_id)
    interrupted = [e for e in events if e.kind == "agent.interrupted"]
    assert [e.detail for e in interrupted] == [
        {"step": 1, "phase": "inference", "tool_call_ids": []}
    ]
    assert events.index(interrupted[0]) < terminal_index(events)
    assert (await runtime.record(handle.run_id)).checkpoint is None


async def test_a_hung_tool_is_cancelled_promptly_and_the_step_reports_it_interrupted(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    dropped = trio.Event()
    hanging = trio.Event()

    async def stuck(arguments: dict[str, Any], ctx: RunContext) -> object:
        try:
            hanging.set()
            await trio.sleep_forever()
        finally:
            dropped.set()

    model = ScriptedModel([calls(call("fast", "echo"), call("slow", "stuck")), text("never")])
    agent = Agent(model, [Tool("echo", echo), Tool("stuck", stuck)])
    handle = await runtime.start(agent, input="go")
    await reach(hanging)
    await trio.testing.wait_all_tasks_blocked()  # the fast call has finished
    runtime.deliver(LiveCommand.Cancel(handle.run_id))
    with trio.fail_after(1):
        assert await handle.wait() == CANCELLED
    assert dropped.is_set()
    events = await all_events(runtime, handle.run_id)
    kinds = [e.kind for e in events]
    assert kinds[-2:] == ["agent.interrupted", "committed"]
    assert events[-2].detail == {"step": 1, "phase": "tools", "tool_call_ids": ["slow"]}
    finished = [e.detail["tool_call_id"] for e in events if e.kind == "agent.tool_finished"]
    assert finished == ["fast"]
    # The step never reached its boundary: nothing of it was committed.
    assert (await runtime.record(handle.run_id)).checkpoint is None
    assert len(model.calls) == 1


@pytest.mark.parametrize("order", ["reply_then_cancel", "cancel_then_reply"])
@pytest.mark.parametrize("reply", ["final_text", "tool_call"])
async def test_a_reply_racing_a_cancel_never_reaches_the_transcript(
    runtime: Runtime, order: str, reply: str, autojump_clock: trio.testing.MockClock
) -> None:
    ran: list[str] = []

    async def tool(arguments: dict[str, Any], ctx: RunContext) -> object:
        ran.append("tool")
        return "late"

    release = trio.Event()
    answer = text("late answer") if reply == "final_text" else calls(call("c2", "tool"))
    model = ScriptedModel([calls(call("c1", "echo")), blocking_reply(answer, release)])
    handle = await runtime.start(Agent(model, [Tool("echo", echo), Tool("tool", tool)]), input="go")
    await trio.testing.wait_all_tasks_blocked()
    assert len(model.calls) == 2  # step 1 is committed; step 2's inference is parked
    before = await transcript(runtime, handle.run_id)
    # Both in one scheduling step: the reply and the cancel arrive together.
    if order == "reply_then_cancel":
        release.set()
        runtime.deliver(LiveCommand.Cancel(handle.run_id))
    else:
        runtime.deliver(LiveCommand.Cancel(handle.run_id))
        release.set()
    assert await settle(handle) == CANCELLED
    record = await runtime.record(handle.run_id)
    assert record.checkpoint["messages"] == before
    assert record.checkpoint["steps"] == 1
    assert record.result is None
    assert ran == []
    started = [e for e in await agent_events(runtime, handle.run_id) if e.detail.get("step") == 2]
    assert [e.kind for e in started] == ["agent.interrupted"]


async def test_a_tool_result_that_arrives_after_the_cancel_is_never_committed(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    release, entered = trio.Event(), trio.Event()

    async def stubborn(arguments: dict[str, Any], ctx: RunContext) -> object:
        with trio.CancelScope(shield=True):  # ignores the cancel and answers anyway
            entered.set()
            await release.wait()
        return "late result"

    model = ScriptedModel([calls(call("c1", "echo")), calls(call("c2", "stubborn")), text("x")])
    agent = Agent(model, [Tool("echo", echo), Tool("stubborn", stubborn)])
    handle = await runtime.start(agent, input="go")
    await reach(entered)
    runtime.deliver(LiveCommand.Cancel(handle.run_id))
    await trio.testing.wait_all_tasks_blocked()
    release.set()
    assert await settle(handle) == CANCELLED
    record = await runtime.record(handle.run_id)
    assert record.checkpoint["steps"] == 1
    assert "c2" not in tool_contents(record.checkpoint["messages"])
    assert "late result" not in repr(record)
    events = await agent_events(runtime, handle.run_id)
    assert [e.detail for e in events if e.kind == "agent.interrupted"] == [
        {"step": 2, "phase": "tools", "tool_call_ids": ["c2"]}
    ]
    assert not [e for e in events if e.kind == "agent.tool_finished" and e.detail["step"] == 2]


async def test_stop_run_during_a_tool_call_ends_stopped(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    entered = trio.Event()

    async def slow(arguments: dict[str, Any], ctx: RunContext) -> object:
        entered.set()
        await trio.sleep_forever()

    model = ScriptedModel([calls(call("c1", "slow"))])
    handle = await runtime.start(Agent(model, [Tool("slow", slow)]), input="go")
    await reach(entered)
    with trio.fail_after(1):
        state = await runtime.stop_run(handle.run_id, "budget exhausted")
    assert state == RunState.Ended(EndCause.Stopped("budget exhausted"))
    events = await agent_events(runtime, handle.run_id)
    assert events[-1].detail == {"step": 1, "phase": "tools", "tool_call_ids": ["c1"]}


async def test_live_messages_become_user_messages_at_the_next_boundary_in_send_order(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    release, entered = trio.Event(), trio.Event()
    model = ScriptedModel([blocking_reply(calls(call("c1", "echo")), release, entered), text("ok")])
    handle = await runtime.start(Agent(model, [Tool("echo", echo)]), input="go")
    await reach(entered)
    runtime.deliver(LiveCommand.Message(handle.run_id, "first"))
    runtime.deliver(LiveCommand.Message(handle.run_id, {"content": "second"}))
    runtime.deliver(LiveCommand.Message(handle.run_id, {"not": "a message"}))
    runtime.deliver(LiveCommand.Message(handle.run_id, "third"))
    release.set()
    assert await settle(handle) == NATURAL_END
    # The step's tool message first (the transcript stays valid), then the messages.
    assert [(m["role"], m["content"]) for m in model.calls[1][-4:]] == [
        ("tool", "{}"),
        ("user", "first"),
        ("user", "second"),
        ("user", "third"),
    ]
    committed = await transcript(runtime, handle.run_id)
    assert committed[:-1] == model.calls[1]
    ignored = [
        e for e in await agent_events(runtime, handle.run_id) if e.kind == "agent.message_ignored"
    ]
    assert [e.detail["payload"] for e in ignored] == [{"not": "a message"}]


async def test_messages_after_the_final_reply_start_another_step(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    release, entered = trio.Event(), trio.Event()
    model = ScriptedModel([blocking_reply(text("hello"), release, entered), text("again")])
    handle = await runtime.start(Agent(model), input="hi")
    await reach(entered)
    runtime.deliver(LiveCommand.Message(handle.run_id, "one more thing"))
    release.set()
    assert await settle(handle) == NATURAL_END
    assert model.calls[1][-2:] == [
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "one more thing"},
    ]
    assert (await runtime.record(handle.run_id)).result == {"text": "again", "steps": 2}


async def test_pause_waits_for_the_step_boundary_and_keeps_queued_messages(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    tool_entered, tool_release = trio.Event(), trio.Event()

    async def slow(arguments: dict[str, Any], ctx: RunContext) -> object:
        tool_entered.set()
        await tool_release.wait()
        return "slow result"

    model = ScriptedModel([calls(call("c1", "slow")), text("answered")])
    handle = await runtime.start(Agent(model, [Tool("slow", slow)]), input="go")
    await reach(tool_entered)
    runtime.deliver(LiveCommand.Pause(handle.run_id))
    runtime.deliver(LiveCommand.Message(handle.run_id, "while you were busy"))
    runtime.deliver(LiveCommand.Message(handle.run_id, {"content": "and this"}))
    await trio.testing.wait_all_tasks_blocked()
    assert await runtime.state(handle.run_id) == RunState.Running(1)  # the tool call is pending
    tool_release.set()
    state = await settle(handle)
    assert isinstance(state, RunState.Awaiting)
    assert state.ticket.reason == "manual_pause"
    # The step is committed, tool message included; the messages wait for the resume.
    messages = await transcript(runtime, handle.run_id)
    assert messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": "slow result"}
    assert len(model.calls) == 1
    resumed = await runtime.resume(handle.run_id, {"any": "value"})
    assert await settle(resumed) == NATURAL_END
    assert model.calls[1] == [
        *messages,
        {"role": "user", "content": "while you were busy"},
        {"role": "user", "content": "and this"},
    ]
    record = await runtime.record(handle.run_id)
    assert record.result == {"text": "answered", "steps": 2}
    assert "any" not in repr(record.checkpoint)  # a pause's resume value is ignored


async def test_a_pause_at_the_final_boundary_ends_naturally_on_resume_without_inference(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    release, entered = trio.Event(), trio.Event()
    model = ScriptedModel([blocking_reply(text("all done"), release, entered)])
    handle = await runtime.start(Agent(model), input="hi")
    await reach(entered)
    runtime.deliver(LiveCommand.Pause(handle.run_id))
    release.set()
    assert isinstance(await settle(handle), RunState.Awaiting)
    resumed = await runtime.resume(handle.run_id, 42)
    assert await settle(resumed) == NATURAL_END
    assert len(model.calls) == 1
    assert (await runtime.record(handle.run_id)).result == {"text": "all done", "steps": 1}


async def test_a_cancel_during_a_retry_wait_is_prompt(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel([ModelError("rate_limited", "slow down", retryable=True), text("x")])
    agent = Agent(model, backoff=lambda retry: 1_000_000.0)
    handle = await runtime.start(agent, input="hi")
    await trio.testing.wait_all_tasks_blocked()
    start = trio.current_time()
    runtime.deliver(LiveCommand.Cancel(handle.run_id))
    assert await settle(handle) == CANCELLED
    assert trio.current_time() == start  # no virtual time passed: the wait was cancelled
    kinds = [e.kind for e in await agent_events(runtime, handle.run_id)]
    assert kinds == ["agent.retry", "agent.interrupted"]
    assert len(model.calls) == 1


async def test_a_model_that_ignores_messages_it_was_given_cannot_change_the_transcript(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def vandal(messages: Messages, tools: Messages) -> ModelReply:
        messages.clear()
        tools.clear()
        return text("fine")

    model = ScriptedModel([vandal])
    handle = await runtime.start(Agent(model, system="s"), input="hi")
    assert await settle(handle) == NATURAL_END
    assert await transcript(runtime, handle.run_id) == [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "fine"},
    ]


async def test_runtime_shutdown_stops_an_agent_mid_inference_and_records_the_interrupt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    model = ScriptedModel([hang])
    async with open_runtime(store) as runtime:
        handle = await runtime.start(Agent(model), input="hi")
        await trio.testing.wait_all_tasks_blocked()
    async with open_runtime(store) as reader:
        events = await all_events(reader, handle.run_id)
    assert events[-1].state == RunState.Ended(EndCause.Stopped("runtime shutdown"))
    assert events[-2].kind == "agent.interrupted"
    assert events[-2].detail == {"step": 1, "phase": "inference", "tool_call_ids": []}
