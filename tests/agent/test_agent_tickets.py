"""Tool permissions and client-executed tools: tickets, their schemas, one at a time."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

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
from tests.agent.agent_helpers import (
    agent_events,
    blocking_reply,
    call,
    calls,
    parsed,
    text,
    tool_contents,
    transcript,
)
from tests.run_helpers import reach, settle, snapshot

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
    assert first.correlation_id == f"{handle.run_id}/step-1/c2"
    second_attempt = await runtime.resume(handle.run_id, {"decision": "allow"})
    second = ticket_of(await settle(second_attempt))
    assert (second.reason, second.payload["tool_call"]["id"]) == ("client_execution", "c3")
    assert second.correlation_id != first.correlation_id
    # The answers so far are committed with the step, so a resume continues correctly.
    record = await runtime.record(handle.run_id)
    assert record.checkpoint["answers"] == {"c2": {"decision": "allow"}}
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
    assert "answers" not in (await runtime.record(handle.run_id)).checkpoint


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


async def test_a_pause_that_lands_before_a_permission_ticket_lets_the_ticket_be_asked_first(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    """The step is committed with its ticket, at no boundary: a pause that arrived while
    the model was replying does not end the attempt before the permission is asked."""
    tools = Recorder()
    release, entered = trio.Event(), trio.Event()
    model = ScriptedModel(
        [blocking_reply(calls(call("c1", "delete")), release, entered), text("done")]
    )
    handle = await runtime.start(Agent(model, [tools.tool("delete", permission="ask")]), input="go")
    await reach(entered)
    runtime.deliver(LiveCommand.Pause(handle.run_id))
    release.set()
    ticket = ticket_of(await settle(handle))
    assert ticket.reason == "tool_permission"
    assert ticket.payload["tool_call"]["id"] == "c1"
    checkpoint = (await runtime.record(handle.run_id)).checkpoint
    assert checkpoint["steps"] == 1
    assert checkpoint["messages"][-1]["tool_calls"][0]["id"] == "c1"
    assert tools.ran == []
    assert len(model.calls) == 1


async def test_a_pause_pending_at_a_permission_ticket_is_honoured_at_the_next_step_boundary(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    """Pause is honoured at the next boundary with no tool call pending: after the
    permission is given, the call runs and the step's boundary pauses the run."""
    tools = Recorder()
    release, entered = trio.Event(), trio.Event()
    model = ScriptedModel(
        [blocking_reply(calls(call("c1", "delete")), release, entered), text("done")]
    )
    handle = await runtime.start(Agent(model, [tools.tool("delete", permission="ask")]), input="go")
    await reach(entered)
    runtime.deliver(LiveCommand.Pause(handle.run_id))
    release.set()
    assert ticket_of(await settle(handle)).reason == "tool_permission"
    allowed = await runtime.resume(handle.run_id, {"decision": "allow"})
    assert ticket_of(await settle(allowed)).reason == "manual_pause"
    assert tools.ran == ["delete"]
    assert len(model.calls) == 1
    messages = await transcript(runtime, handle.run_id)
    assert tool_contents(messages) == {"c1": "delete done"}
    final = await runtime.resume(handle.run_id)
    assert await settle(final) == NATURAL_END
    assert len(model.calls) == 2


async def test_messages_sent_while_a_step_waits_for_tickets_ride_with_them_in_order(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    """No boundary is passed while a step's calls are asked, so live messages stay in the
    inbox and ride with each ticket; the step's boundary takes them, after its tool
    messages, in send order."""
    tools = Recorder()
    release, entered = trio.Event(), trio.Event()
    model = ScriptedModel(
        [blocking_reply(calls(call("c1", "one"), call("c2", "two")), release, entered), text("ok")]
    )
    agent = Agent(model, [tools.tool("one", permission="ask"), tools.tool("two", permission="ask")])
    handle = await runtime.start(agent, input="go")
    await reach(entered)
    runtime.deliver(LiveCommand.Message(handle.run_id, "first"))
    release.set()
    assert ticket_of(await settle(handle)).payload["tool_call"]["id"] == "c1"
    second = await runtime.resume(handle.run_id, {"decision": "allow"})
    runtime.deliver(LiveCommand.Message(handle.run_id, {"content": "second"}))
    assert ticket_of(await settle(second)).payload["tool_call"]["id"] == "c2"
    # Committed with the second ticket: the step and its first answer, no user message.
    checkpoint = (await runtime.record(handle.run_id)).checkpoint
    assert checkpoint["answers"] == {"c1": {"decision": "allow"}}
    assert checkpoint["messages"][-1]["role"] == "assistant"
    assert [m for m in checkpoint["messages"] if m["role"] == "user"] == [
        {"role": "user", "content": "go"}
    ]
    last = await runtime.resume(handle.run_id, {"decision": "allow"})
    runtime.deliver(LiveCommand.Message(handle.run_id, "third"))
    assert await settle(last) == NATURAL_END
    assert [(m["role"], m.get("tool_call_id"), m.get("content")) for m in model.calls[1][-6:]] == [
        ("assistant", None, None),
        ("tool", "c1", "one done"),
        ("tool", "c2", "two done"),
        ("user", None, "first"),
        ("user", None, "second"),
        ("user", None, "third"),
    ]
    assert "answers" not in (await runtime.record(handle.run_id)).checkpoint


async def test_a_manual_pause_never_answers_a_waiting_call_whatever_its_value(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    """A run paused with a step whose call still waits (a checkpoint an earlier body
    committed), resumed with a value shaped like a permission answer: the value answers
    the pause, not the call, which is still asked."""
    pending_step = {
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "delete", "arguments": "{}"},
                    }
                ],
            },
        ],
        "steps": 1,
    }

    async def paused_mid_step(ctx: RunContext) -> None:
        await ctx.boundary(pending_step)  # the pause delivered below is honoured here

    handle = await runtime.start(paused_mid_step)
    runtime.deliver(LiveCommand.Pause(handle.run_id))
    assert ticket_of(await settle(handle)).reason == "manual_pause"
    tools = Recorder()
    model = ScriptedModel([text("done")])
    agent = Agent(model, [tools.tool("delete", permission="ask")])
    resumed = await runtime.resume(handle.run_id, {"decision": "allow"}, body=agent)
    ticket = ticket_of(await settle(resumed))
    assert ticket.reason == "tool_permission"
    assert ticket.payload["tool_call"]["id"] == "c1"
    assert tools.ran == []
    assert model.calls == []
    allowed = await runtime.resume(handle.run_id, {"decision": "allow"}, body=agent)
    assert await settle(allowed) == NATURAL_END
    assert tools.ran == ["delete"]


async def test_a_resume_of_a_ticket_that_is_not_the_calls_own_leaves_the_call_waiting(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    """An answer is matched to a call by its ticket's reason and correlation id: a
    permission-shaped answer to some other tool_permission ticket is not the call's."""
    pending_step = {
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "delete", "arguments": "{}"},
                    }
                ],
            },
        ],
        "steps": 1,
    }

    async def asks_its_own(ctx: RunContext) -> None:
        await ctx.await_input("tool_permission", correlation_id="elsewhere", progress=pending_step)

    handle = await runtime.start(asks_its_own)
    assert ticket_of(await settle(handle)).correlation_id == "elsewhere"
    tools = Recorder()
    agent = Agent(ScriptedModel([text("done")]), [tools.tool("delete", permission="ask")])
    resumed = await runtime.resume(handle.run_id, {"decision": "allow"}, body=agent)
    ticket = ticket_of(await settle(resumed))
    assert (ticket.reason, ticket.correlation_id) == (
        "tool_permission",
        f"{handle.run_id}/step-1/c1",
    )
    assert tools.ran == []


@pytest.mark.parametrize("call_id", ["x" * 300, "tab\there", "c1\n"])
async def test_a_call_id_unfit_for_a_correlation_id_still_gets_a_ticket_of_its_own(
    runtime: Runtime, call_id: str, autojump_clock: trio.testing.MockClock
) -> None:
    tools = Recorder()
    model = ScriptedModel([calls(call(call_id, "delete"), call("c2", "delete")), text("done")])
    handle = await runtime.start(Agent(model, [tools.tool("delete", permission="ask")]), input="go")
    first = ticket_of(await settle(handle))
    assert first.payload["tool_call"]["id"] == call_id
    assert first.correlation_id.startswith(f"{handle.run_id}/step-1/call-0-")
    assert first.correlation_id.isprintable()
    assert len(first.correlation_id) <= 256
    second_attempt = await runtime.resume(handle.run_id, {"decision": "deny"})
    second = ticket_of(await settle(second_attempt))
    assert second.correlation_id == f"{handle.run_id}/step-1/c2"
    last = await runtime.resume(handle.run_id, {"decision": "allow"})
    assert await settle(last) == NATURAL_END
    assert tools.ran == ["delete"]
    contents = tool_contents(await transcript(runtime, handle.run_id))
    assert parsed(contents[call_id])["error"] == "permission_denied"
    assert contents["c2"] == "delete done"


async def test_a_ticket_passes_no_boundary_so_it_costs_no_runtime_step(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    """Two steps, the first asking a permission: two boundaries, within max_steps=2."""
    tools = Recorder()
    model = ScriptedModel([calls(call("c1", "delete")), text("done")])
    agent = Agent(model, [tools.tool("delete", permission="ask")])
    handle = await runtime.start(agent, input="go", max_steps=2)
    ticket_of(await settle(handle))
    assert (await runtime.record(handle.run_id)).steps == 0
    resumed = await runtime.resume(handle.run_id, {"decision": "allow"})
    assert await settle(resumed) == NATURAL_END
    assert (await runtime.record(handle.run_id)).steps == 2
