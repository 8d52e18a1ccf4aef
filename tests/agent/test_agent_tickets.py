"""Tool permissions and client-executed tools: tickets, their schemas, one at a time."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from agent_helpers import (
    agent_events,
    blocking_reply,
    call,
    calls,
    parsed,
    text,
    tool_contents,
    transcript,
)
from run_helpers import reach, settle, snapshot

from awaken_trio import (
    EndCause,
    InvalidPayload,
    LiveCommand,
    NotAwaiting,
    ResumeTicket,
    RunContext,
    RunState,
    Runtime,
)
from awaken_trio.agent import Agent, ScriptedModel, Tool

NATURAL_END = RunState.Ended(EndCause.NaturalEnd())


def ticket_of(state: RunState) -> ResumeTicket:
    assert isinstance(state, RunState.Awaiting), state
    return state.ticket


class Recorder:
    """Tools that note when they ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def tool(self, name: str, **options: Any) -> Tool:
        async def run(arguments: dict[str, Any], ctx: RunContext) -> object:
            self.ran.append(name)
            return f"{name} done"

        return Tool(name, run, **options)


async def test_permission_ask_commits_a_ticket_and_allow_runs_the_call(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    tools = Recorder()
    model = ScriptedModel([calls(call("c1", "delete", path="draft.txt")), text("deleted")])
    agent = Agent(model, [tools.tool("delete", permission="ask")])
    handle = await runtime.start(agent, input="clean up")
    ticket = ticket_of(await settle(handle))
    assert ticket.reason == "tool_permission"
    assert ticket.payload == {
        "tool_call": {"id": "c1", "name": "delete", "arguments": {"path": "draft.txt"}}
    }
    assert ticket.accepts is not None
    assert tools.ran == []
    # The step is committed before the ticket: its assistant message, no tool message yet.
    record = await runtime.record(handle.run_id)
    assert record.checkpoint["steps"] == 1
    assert record.checkpoint["messages"][-1]["tool_calls"][0]["id"] == "c1"
    resumed = await runtime.resume(
        handle.run_id, {"decision": "allow"}, correlation_id=ticket.correlation_id
    )
    assert await settle(resumed) == NATURAL_END
    assert tools.ran == ["delete"]
    assert tool_contents(await transcript(runtime, handle.run_id)) == {"c1": "delete done"}
    assert (await runtime.record(handle.run_id)).result == {"text": "deleted", "steps": 2}
    assert len(model.calls) == 2


@pytest.mark.parametrize("note", [None, "not that file"])
async def test_a_denied_call_never_runs_and_the_model_is_told_with_the_note(
    runtime: Runtime, note: str | None, autojump_clock: trio.testing.MockClock
) -> None:
    tools = Recorder()
    model = ScriptedModel([calls(call("c1", "delete", path="x")), text("ok, I won't")])
    handle = await runtime.start(Agent(model, [tools.tool("delete", permission="ask")]), input="go")
    ticket_of(await settle(handle))
    answer: dict[str, Any] = {"decision": "deny"}
    if note is not None:
        answer["note"] = note
    resumed = await runtime.resume(handle.run_id, answer)
    assert await settle(resumed) == NATURAL_END
    assert tools.ran == []
    content = parsed(tool_contents(model.calls[1])["c1"])
    assert content["error"] == "permission_denied"
    if note is None:
        assert "note" not in content
    else:
        assert content["note"] == note
        assert note in content["message"]


@pytest.mark.parametrize(
    "wrong",
    [
        "allow",
        {"decision": "maybe"},
        {"decision": "deny", "note": 3},
        {"result": 1},
        {"decision": "allow", "extra": True},
        None,
    ],
)
async def test_a_wrong_shaped_permission_answer_is_refused_and_the_ticket_stays_live(
    runtime: Runtime, wrong: Any, autojump_clock: trio.testing.MockClock
) -> None:
    tools = Recorder()
    model = ScriptedModel([calls(call("c1", "delete")), text("done")])
    handle = await runtime.start(Agent(model, [tools.tool("delete", permission="ask")]), input="go")
    ticket = ticket_of(await settle(handle))
    before = await snapshot(runtime, handle.run_id)
    with pytest.raises(InvalidPayload):
        await runtime.resume(handle.run_id, wrong)
    assert await snapshot(runtime, handle.run_id) == before
    assert ticket_of(await runtime.state(handle.run_id)) == ticket
    resumed = await runtime.resume(handle.run_id, {"decision": "allow"})
    assert await settle(resumed) == NATURAL_END
    assert tools.ran == ["delete"]


async def test_a_client_executed_call_takes_its_result_from_the_resume(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel([calls(call("c1", "pick_file", kind="image")), text("thanks")])
    agent = Agent(model, [Tool("pick_file", None, permission="client")])
    handle = await runtime.start(agent, input="attach a picture")
    ticket = ticket_of(await settle(handle))
    assert ticket.reason == "client_execution"
    assert ticket.payload == {
        "tool_call": {"id": "c1", "name": "pick_file", "arguments": {"kind": "image"}}
    }
    with pytest.raises(InvalidPayload):
        await runtime.resume(handle.run_id, {"decision": "allow"})
    resumed = await runtime.resume(handle.run_id, {"result": {"path": "cat.png", "size": [3, 4]}})
    assert await settle(resumed) == NATURAL_END
    assert parsed(tool_contents(model.calls[1])["c1"]) == {"path": "cat.png", "size": [3, 4]}


async def test_waiting_calls_of_one_step_are_asked_one_at_a_time_in_call_order(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    tools = Recorder()
    model = ScriptedModel(
        [
            calls(
                call("c1", "auto_a"),
                call("c2", "ask_b"),
                call("c3", "client_c"),
                call("c4", "ask_d"),
            ),
            text("all done"),
        ]
    )
    agent = Agent(
        model,
        [
            tools.tool("auto_a"),
            tools.tool("ask_b", permission="ask"),
            Tool("client_c", None, permission="client"),
            tools.tool("ask_d", permission="ask"),
        ],
    )
    handle = await runtime.start(agent, input="go")
    first = ticket_of(await settle(handle))
    assert (first.reason, first.payload["tool_call"]["id"]) == ("tool_permission", "c2")
    second_attempt = await runtime.resume(handle.run_id, {"decision": "allow"})
    second = ticket_of(await settle(second_attempt))
    assert (second.reason, second.payload["tool_call"]["id"]) == ("client_execution", "c3")
    assert second.correlation_id != first.correlation_id
    # The answers so far are committed with the step, so a resume continues correctly.
    record = await runtime.record(handle.run_id)
    assert record.checkpoint["pending"]["answers"] == {"c2": {"decision": "allow"}}
    third_attempt = await runtime.resume(handle.run_id, {"result": "client ok"})
    third = ticket_of(await settle(third_attempt))
    assert third.payload["tool_call"]["id"] == "c4"
    assert tools.ran == []  # nothing runs until every call of the step is decided
    last = await runtime.resume(handle.run_id, {"decision": "deny", "note": "no"})
    assert await settle(last) == NATURAL_END
    assert sorted(tools.ran) == ["ask_b", "auto_a"]
    messages = await transcript(runtime, handle.run_id)
    assert [m.get("tool_call_id") for m in messages if m["role"] == "tool"] == [
        "c1",
        "c2",
        "c3",
        "c4",
    ]
    contents = tool_contents(messages)
    assert contents["c1"] == "auto_a done"
    assert contents["c2"] == "ask_b done"
    assert contents["c3"] == "client ok"
    assert parsed(contents["c4"])["error"] == "permission_denied"
    assert "pending" not in (await runtime.record(handle.run_id)).checkpoint


async def test_cancel_run_ends_a_run_awaiting_permission_and_the_ticket_is_gone(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    tools = Recorder()
    model = ScriptedModel([calls(call("c1", "delete")), text("never")])
    handle = await runtime.start(Agent(model, [tools.tool("delete", permission="ask")]), input="go")
    ticket_of(await settle(handle))
    assert await runtime.cancel_run(handle.run_id) == RunState.Ended(EndCause.Cancelled())
    with pytest.raises(NotAwaiting):
        await runtime.resume(handle.run_id, {"decision": "allow"})
    assert tools.ran == []
    assert len(model.calls) == 1


async def test_messages_that_arrive_while_a_step_waits_follow_its_tool_messages(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    tools = Recorder()
    model = ScriptedModel([calls(call("c1", "delete")), text("done")])
    handle = await runtime.start(Agent(model, [tools.tool("delete", permission="ask")]), input="go")
    ticket_of(await settle(handle))
    resumed = await runtime.resume(handle.run_id, {"decision": "allow"})
    runtime.deliver(LiveCommand.Message(resumed.run_id, "by the way"))
    assert await settle(resumed) == NATURAL_END
    assert [(m["role"], m.get("tool_call_id")) for m in model.calls[1][-3:]] == [
        ("assistant", None),
        ("tool", "c1"),
        ("user", None),
    ]
    assert model.calls[1][-1]["content"] == "by the way"


async def test_a_manual_pause_ignores_a_resume_value_shaped_like_a_permission_answer(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    tools = Recorder()
    release, entered = trio.Event(), trio.Event()
    model = ScriptedModel(
        [calls(call("c1", "delete")), blocking_reply(text("done"), release, entered)]
    )
    handle = await runtime.start(Agent(model, [tools.tool("delete", permission="ask")]), input="go")
    ticket_of(await settle(handle))
    resumed = await runtime.resume(handle.run_id, {"decision": "allow"})
    await reach(entered)
    runtime.deliver(LiveCommand.Pause(handle.run_id))
    release.set()
    pause = ticket_of(await settle(resumed))
    assert pause.reason == "manual_pause"
    final = await runtime.resume(handle.run_id, {"decision": "deny", "note": "ignored"})
    assert await settle(final) == NATURAL_END
    assert tools.ran == ["delete"]
    assert "ignored" not in repr(await runtime.record(handle.run_id))
    assert not [e for e in await agent_events(runtime, handle.run_id) if "note" in e.detail]


async def test_a_pause_that_lands_before_a_permission_ticket_keeps_the_step(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    """The step must be committed before its ticket, at a boundary, and a pending pause
    is honoured there; resuming the pause then asks for the permission."""
    tools = Recorder()
    release, entered = trio.Event(), trio.Event()
    model = ScriptedModel(
        [blocking_reply(calls(call("c1", "delete")), release, entered), text("done")]
    )
    handle = await runtime.start(Agent(model, [tools.tool("delete", permission="ask")]), input="go")
    await reach(entered)
    runtime.deliver(LiveCommand.Pause(handle.run_id))
    release.set()
    assert ticket_of(await settle(handle)).reason == "manual_pause"
    asked = await runtime.resume(handle.run_id)
    ticket = ticket_of(await settle(asked))
    assert ticket.reason == "tool_permission"
    assert ticket.payload["tool_call"]["id"] == "c1"
    assert len(model.calls) == 1  # the step's reply was committed, never asked again
    final = await runtime.resume(handle.run_id, {"decision": "allow"})
    assert await settle(final) == NATURAL_END
    assert tools.ran == ["delete"]


async def test_messages_taken_between_two_tickets_of_a_step_wait_in_the_checkpoint(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    tools = Recorder()
    model = ScriptedModel([calls(call("c1", "one"), call("c2", "two")), text("done")])
    agent = Agent(model, [tools.tool("one", permission="ask"), tools.tool("two", permission="ask")])
    handle = await runtime.start(agent, input="go")
    assert ticket_of(await settle(handle)).payload["tool_call"]["id"] == "c1"
    second = await runtime.resume(handle.run_id, {"decision": "allow"})
    runtime.deliver(LiveCommand.Message(handle.run_id, "meanwhile"))
    assert ticket_of(await settle(second)).payload["tool_call"]["id"] == "c2"
    # Taken at the boundary that committed the first answer; a user message cannot sit
    # between an assistant's tool calls and their results, so it waits with the step.
    checkpoint = (await runtime.record(handle.run_id)).checkpoint
    assert checkpoint["pending"]["queued"] == [{"role": "user", "content": "meanwhile"}]
    assert checkpoint["messages"][-1]["role"] == "assistant"
    last = await runtime.resume(handle.run_id, {"decision": "allow"})
    assert await settle(last) == NATURAL_END
    assert [(m["role"], m.get("tool_call_id")) for m in model.calls[1][-4:]] == [
        ("assistant", None),
        ("tool", "c1"),
        ("tool", "c2"),
        ("user", None),
    ]
    assert "pending" not in (await runtime.record(handle.run_id)).checkpoint
