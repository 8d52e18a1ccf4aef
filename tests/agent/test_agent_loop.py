"""The agent loop: steps, transcript, checkpoint, tools, usage, max_steps, resumption."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from awaken_trio import (
    EndCause,
    LiveCommand,
    RunContext,
    RunError,
    RunState,
    Runtime,
)
from awaken_trio.agent import Agent, ModelReply, ScriptedModel, Tool, ToolCall
from tests.agent.agent_helpers import (
    Messages,
    agent_events,
    all_events,
    blocking_reply,
    call,
    calls,
    echo,
    parsed,
    text,
    tool_contents,
    transcript,
)
from tests.run_helpers import reach, settle

NATURAL_END = RunState.Ended(EndCause.NaturalEnd())


async def add(arguments: dict[str, Any], ctx: RunContext) -> object:
    return arguments["a"] + arguments["b"]


async def test_the_design_example_commits_an_openai_transcript_and_its_result(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel(
        [
            ModelReply(tool_calls=(ToolCall("c1", "add", {"a": 1, "b": 2}),)),
            ModelReply(text="3"),
        ]
    )
    agent = Agent(
        model,
        [Tool("add", add, description="adds", parameters={"type": "object"})],
        system="be brief",
        max_steps=8,
    )
    handle = await runtime.start(agent, input="what is 1 + 2?")
    assert await settle(handle) == NATURAL_END
    record = await runtime.record(handle.run_id)
    assert record.result == {"text": "3", "steps": 2}
    assert record.checkpoint == {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "what is 1 + 2?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "3"},
            {"role": "assistant", "content": "3"},
        ],
        "steps": 2,
    }
    # The model saw the tools as OpenAI function specs, and the transcript so far.
    assert model.tools[0] == [
        {
            "type": "function",
            "function": {"name": "add", "description": "adds", "parameters": {"type": "object"}},
        }
    ]
    assert model.calls[1] == record.checkpoint["messages"][:4]


async def test_every_step_commits_its_checkpoint_at_a_boundary(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel(
        [calls(call("c1", "echo", n=1)), calls(call("c2", "echo", n=2)), text("done")]
    )
    handle = await runtime.start(Agent(model, [Tool("echo", echo)]), input="go")
    assert await settle(handle) == NATURAL_END
    progress = [
        e.detail
        for e in await all_events(runtime, handle.run_id)
        if e.kind == "committed" and e.detail.get("source") == "boundary"
    ]
    assert len(progress) == 3  # one per step
    record = await runtime.record(handle.run_id)
    assert [m["role"] for m in record.checkpoint["messages"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert record.checkpoint["steps"] == 3


async def test_the_system_prompt_goes_first_only_when_the_input_has_none(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel([text("a"), text("b")])
    agent = Agent(model, system="be brief")
    given = [{"role": "system", "content": "mine"}, {"role": "user", "content": "hi"}]
    first = await runtime.start(agent, input={"messages": given})
    second = await runtime.start(agent, input={"messages": [{"role": "user", "content": "yo"}]})
    assert await settle(first) == NATURAL_END
    assert await settle(second) == NATURAL_END
    assert model.calls[0] == given
    assert model.calls[1] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "yo"},
    ]


@pytest.mark.parametrize(
    "bad_input", [None, 42, {"prompt": "x"}, {"messages": [{"role": "wizard"}]}]
)
async def test_an_input_that_is_not_a_prompt_or_messages_fails_invalid_input(
    runtime: Runtime, bad_input: Any, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel([text("never")])
    handle = await runtime.start(Agent(model), input=bad_input)
    state = await settle(handle)
    assert isinstance(state, RunState.Ended)
    assert isinstance(state.cause, EndCause.Failed)
    assert state.cause.code == "invalid_input"
    assert model.calls == []


async def test_the_tool_calls_of_one_step_run_concurrently(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    started = {"a": trio.Event(), "b": trio.Event()}

    async def meet(arguments: dict[str, Any], ctx: RunContext) -> object:
        me, other = arguments["me"], arguments["other"]
        started[me].set()
        await started[other].wait()  # deadlocks unless both run at once
        return me

    model = ScriptedModel(
        [
            calls(call("c1", "meet", me="a", other="b"), call("c2", "meet", me="b", other="a")),
            text("ok"),
        ]
    )
    handle = await runtime.start(Agent(model, [Tool("meet", meet)]), input="go")
    with trio.fail_after(60):
        assert await handle.wait() == NATURAL_END
    messages = await transcript(runtime, handle.run_id)
    assert tool_contents(messages) == {"c1": "a", "c2": "b"}
    # Tool messages follow the assistant message in call order.
    assert [m.get("tool_call_id") for m in messages[2:4]] == ["c1", "c2"]


async def test_a_tool_that_raises_gives_the_model_an_error_message_and_the_run_goes_on(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def broken(arguments: dict[str, Any], ctx: RunContext) -> object:
        raise ValueError("no such file")

    async def quota(arguments: dict[str, Any], ctx: RunContext) -> object:
        raise RunError("quota_exceeded", "try tomorrow")

    model = ScriptedModel(
        [
            calls(call("c1", "broken"), call("c2", "quota"), call("c3", "missing")),
            text("sorry"),
        ]
    )
    agent = Agent(model, [Tool("broken", broken), Tool("quota", quota)])
    handle = await runtime.start(agent, input="go")
    assert await settle(handle) == NATURAL_END
    contents = tool_contents(await transcript(runtime, handle.run_id))
    assert parsed(contents["c1"]) == {"error": "value_error", "message": "no such file"}
    assert parsed(contents["c2"]) == {"error": "quota_exceeded", "message": "try tomorrow"}
    assert parsed(contents["c3"])["error"] == "unknown_tool"
    finished = [e.detail for e in await agent_events(runtime, handle.run_id)]
    finished = [d for d in finished if "ok" in d]
    assert {d["tool_call_id"]: (d["ok"], d["error"]) for d in finished} == {
        "c1": (False, "value_error"),
        "c2": (False, "quota_exceeded"),
    }


async def test_tool_results_are_json_text_and_strings_stay_as_they_are(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    results: dict[str, object] = {"obj": {"x": [1, None]}, "str": "plain", "bad": (1, 2)}

    async def give(arguments: dict[str, Any], ctx: RunContext) -> object:
        return results[arguments["which"]]

    model = ScriptedModel(
        [
            calls(
                call("c1", "give", which="obj"),
                call("c2", "give", which="str"),
                call("c3", "give", which="bad"),
            ),
            text("ok"),
        ]
    )
    handle = await runtime.start(Agent(model, [Tool("give", give)]), input="go")
    assert await settle(handle) == NATURAL_END
    contents = tool_contents(await transcript(runtime, handle.run_id))
    assert parsed(contents["c1"]) == {"x": [1, None]}
    assert contents["c2"] == "plain"
    assert parsed(contents["c3"])["error"] == "invalid_result"


async def test_tools_get_a_mutable_copy_of_the_arguments(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def mutate(arguments: dict[str, Any], ctx: RunContext) -> object:
        arguments["items"].append(3)
        arguments["added"] = True
        return arguments

    model = ScriptedModel([calls(call("c1", "mutate", items=[1, 2])), text("ok")])
    handle = await runtime.start(Agent(model, [Tool("mutate", mutate)]), input="go")
    assert await settle(handle) == NATURAL_END
    messages = await transcript(runtime, handle.run_id)
    assert json.loads(messages[1]["tool_calls"][0]["function"]["arguments"]) == {"items": [1, 2]}
    assert parsed(tool_contents(messages)["c1"]) == {"items": [1, 2, 3], "added": True}


async def test_tool_events_bracket_each_call_in_the_committed_log(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel([calls(call("c1", "echo", q=1)), text("ok")])
    handle = await runtime.start(Agent(model, [Tool("echo", echo)]), input="go")
    assert await settle(handle) == NATURAL_END
    events = await all_events(runtime, handle.run_id)
    kinds = [e.kind for e in events]
    assert kinds == [
        "committed",  # start
        "agent.tool_started",
        "agent.tool_finished",
        "committed",  # step 1
        "committed",  # step 2
        "committed",  # end
    ]
    assert events[1].detail == {
        "step": 1,
        "tool_call_id": "c1",
        "name": "echo",
        "arguments": {"q": 1},
    }
    assert events[2].detail == {"step": 1, "tool_call_id": "c1", "name": "echo", "ok": True}


async def test_usage_is_summed_across_steps_into_the_result(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel(
        [
            calls(
                call("c1", "echo"),
                usage={"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
            ),
            text(
                "ok",
                usage={
                    "prompt_tokens": 20,
                    "completion_tokens": 3,
                    "total_tokens": 23,
                    "prompt_tokens_details": {"cached_tokens": 4},
                },
            ),
        ]
    )
    handle = await runtime.start(Agent(model, [Tool("echo", echo)]), input="go")
    assert await settle(handle) == NATURAL_END
    record = await runtime.record(handle.run_id)
    assert record.result == {
        "text": "ok",
        "steps": 2,
        "usage": {
            "prompt_tokens": 30,
            "completion_tokens": 5,
            "total_tokens": 35,
            "prompt_tokens_details": {"cached_tokens": 4},
        },
    }


async def test_max_steps_runs_the_last_steps_tools_then_ends_max_steps(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    ran: list[int] = []

    async def work(arguments: dict[str, Any], ctx: RunContext) -> object:
        ran.append(arguments["n"])
        return "done"

    model = ScriptedModel([calls(call(f"c{n}", "work", n=n)) for n in range(1, 5)])
    handle = await runtime.start(Agent(model, [Tool("work", work)], max_steps=2), input="go")
    assert await settle(handle) == RunState.Ended(EndCause.MaxSteps())
    assert ran == [1, 2]
    assert len(model.calls) == 2
    record = await runtime.record(handle.run_id)
    assert record.checkpoint["steps"] == 2
    assert record.checkpoint["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "c2",
        "content": "done",
    }


async def test_a_final_reply_on_the_last_allowed_step_ends_naturally(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel([calls(call("c1", "echo")), text("fits")])
    handle = await runtime.start(Agent(model, [Tool("echo", echo)], max_steps=2), input="go")
    assert await settle(handle) == NATURAL_END
    assert (await runtime.record(handle.run_id)).result == {"text": "fits", "steps": 2}


async def test_max_steps_counts_the_steps_of_earlier_attempts(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    release, entered = trio.Event(), trio.Event()
    model = ScriptedModel(
        [
            blocking_reply(calls(call("c1", "echo")), release, entered),
            calls(call("c2", "echo")),
            calls(call("c3", "echo")),
        ]
    )
    handle = await runtime.start(Agent(model, [Tool("echo", echo)], max_steps=2), input="go")
    await reach(entered)
    runtime.deliver(LiveCommand.Pause(handle.run_id))
    release.set()
    paused = await settle(handle)
    assert isinstance(paused, RunState.Awaiting)
    assert paused.ticket.reason == "manual_pause"
    resumed = await runtime.resume(handle.run_id)
    assert await settle(resumed) == RunState.Ended(EndCause.MaxSteps())
    assert len(model.calls) == 2  # one step in each attempt, then the budget was spent
    assert (await runtime.record(handle.run_id)).checkpoint["steps"] == 2


async def test_one_agent_instance_serves_many_runs_at_once(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    class Parrot:
        """A stateless model: it repeats the last user message, after a tool round."""

        async def infer(self, messages: Messages, tools: Messages) -> ModelReply:
            await trio.sleep(1)
            if messages[-1]["role"] == "user":
                return calls(call("c", "echo", said=messages[-1]["content"]))
            return text(json.loads(messages[-1]["content"])["said"])

    agent = Agent(Parrot(), [Tool("echo", echo)])
    handles = [await runtime.start(agent, input=f"prompt {i}") for i in range(10)]
    for i, handle in enumerate(handles):
        assert await settle(handle) == NATURAL_END
        assert (await runtime.record(handle.run_id)).result == {"text": f"prompt {i}", "steps": 2}


async def test_wake_never_ends_an_agent_run(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    release, entered = trio.Event(), trio.Event()
    model = ScriptedModel([blocking_reply(calls(call("c1", "echo")), release, entered), text("ok")])
    handle = await runtime.start(Agent(model, [Tool("echo", echo)]), input="go")
    await reach(entered)
    runtime.deliver(LiveCommand.Wake(handle.run_id, "nudge"))
    await trio.testing.wait_all_tasks_blocked()
    assert await runtime.state(handle.run_id) == RunState.Running(1)
    release.set()
    assert await settle(handle) == NATURAL_END
    assert (await runtime.record(handle.run_id)).result == {"text": "ok", "steps": 2}


async def test_a_resumed_attempt_continues_from_the_committed_transcript_only(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    release, entered = trio.Event(), trio.Event()
    first_model = ScriptedModel(
        [blocking_reply(calls(call("c1", "add", a=2, b=3)), release, entered)]
    )
    tools = [Tool("add", add)]
    handle = await runtime.start(Agent(first_model, tools, system="s"), input="2 + 3?")
    await reach(entered)
    runtime.deliver(LiveCommand.Pause(handle.run_id))
    release.set()
    assert isinstance(await settle(handle), RunState.Awaiting)
    committed = await transcript(runtime, handle.run_id)
    # A different Agent instance with a fresh model: nothing but the store carries over.
    second_model = ScriptedModel([text("5")])
    resumed = await runtime.resume(handle.run_id, body=Agent(second_model, tools, system="s"))
    assert await settle(resumed) == NATURAL_END
    assert second_model.calls == [committed]
    assert committed[-1] == {"role": "tool", "tool_call_id": "c1", "content": "5"}
    assert len(first_model.calls) == 1
    assert (await runtime.record(handle.run_id)).result == {"text": "5", "steps": 2}


async def test_a_call_whose_arguments_are_not_a_json_object_is_answered_with_an_error(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    ran: list[dict[str, Any]] = []

    async def work(arguments: dict[str, Any], ctx: RunContext) -> object:
        ran.append(arguments)
        return "done"

    model = ScriptedModel(
        [
            calls(
                ToolCall("c1", "work", raw_arguments='{"path": "a'),
                call("c2", "work", n=2),
                # A call that would wait for permission is answered at once: there is
                # nothing a person could approve.
                ToolCall("c3", "guarded", raw_arguments="[1, 2]"),
            ),
            text("ok"),
        ]
    )
    agent = Agent(model, [Tool("work", work), Tool("guarded", work, permission="ask")])
    handle = await runtime.start(agent, input="go")
    assert await settle(handle) == NATURAL_END
    assert ran == [{"n": 2}]
    messages = await transcript(runtime, handle.run_id)
    # The assistant message keeps the text the model sent: the transcript is what it said.
    assert [c["function"]["arguments"] for c in messages[1]["tool_calls"]] == [
        '{"path": "a',
        '{"n": 2}',
        "[1, 2]",
    ]
    contents = tool_contents(messages)
    assert contents["c2"] == "done"
    for call_id in ("c1", "c3"):
        error = parsed(contents[call_id])
        assert error["error"] == "invalid_arguments"
        assert "JSON object" in error["message"]
    assert model.calls[1] == messages[:-1]  # the model was told, and answered
    assert (await runtime.record(handle.run_id)).result == {"text": "ok", "steps": 2}


async def test_a_final_reply_cut_off_by_the_length_limit_is_recorded(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel([ModelReply(text="The answer is", finish_reason="length")])
    handle = await runtime.start(Agent(model), input="go")
    assert await settle(handle) == NATURAL_END
    record = await runtime.record(handle.run_id)
    assert record.result == {"text": "The answer is", "steps": 1, "finish_reason": "length"}
    events = await agent_events(runtime, handle.run_id)
    assert [(e.kind, e.detail) for e in events] == [
        ("agent.truncated", {"step": 1, "finish_reason": "length"})
    ]


@pytest.mark.parametrize("finish_reason", [None, "stop"])
async def test_a_normal_stop_adds_nothing_to_the_result(
    runtime: Runtime, autojump_clock: trio.testing.MockClock, finish_reason: str | None
) -> None:
    model = ScriptedModel([ModelReply(text="ok", finish_reason=finish_reason)])
    handle = await runtime.start(Agent(model), input="go")
    assert await settle(handle) == NATURAL_END
    assert (await runtime.record(handle.run_id)).result == {"text": "ok", "steps": 1}
    assert await agent_events(runtime, handle.run_id) == []


async def test_a_final_reply_that_stopped_another_way_says_why_in_the_result(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel([ModelReply(text="I can", finish_reason="content_filter")])
    handle = await runtime.start(Agent(model), input="go")
    assert await settle(handle) == NATURAL_END
    record = await runtime.record(handle.run_id)
    assert record.result == {"text": "I can", "steps": 1, "finish_reason": "content_filter"}
    assert await agent_events(runtime, handle.run_id) == []  # not cut off by the limit


async def test_a_step_cut_off_mid_tool_call_is_recorded_and_the_run_goes_on(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel(
        [
            ModelReply(
                tool_calls=(ToolCall("c1", "echo", raw_arguments='{"n": '),),
                finish_reason="length",
            ),
            ModelReply(text="ok", finish_reason="stop"),
        ]
    )
    handle = await runtime.start(Agent(model, [Tool("echo", echo)]), input="go")
    assert await settle(handle) == NATURAL_END
    # The final reply stopped normally: the result has no finish_reason.
    assert (await runtime.record(handle.run_id)).result == {"text": "ok", "steps": 2}
    events = await agent_events(runtime, handle.run_id)
    assert [(e.kind, e.detail) for e in events] == [
        ("agent.truncated", {"step": 1, "finish_reason": "length"})
    ]
    contents = tool_contents(await transcript(runtime, handle.run_id))
    assert parsed(contents["c1"])["error"] == "invalid_arguments"


async def test_a_cut_off_final_reply_is_still_reported_after_a_pause_and_resume(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    release, entered = trio.Event(), trio.Event()
    cut = ModelReply(text="The answer is", finish_reason="length")
    model = ScriptedModel([blocking_reply(cut, release, entered)])
    handle = await runtime.start(Agent(model), input="go")
    await reach(entered)
    runtime.deliver(LiveCommand.Pause(handle.run_id))
    release.set()
    assert isinstance(await settle(handle), RunState.Awaiting)
    record = await runtime.record(handle.run_id)
    assert record.checkpoint["finish_reason"] == "length"
    resumed = await runtime.resume(handle.run_id)
    assert await settle(resumed) == NATURAL_END
    assert len(model.calls) == 1
    record = await runtime.record(handle.run_id)
    assert record.result == {"text": "The answer is", "steps": 1, "finish_reason": "length"}


async def test_a_message_taken_after_a_cut_off_final_reply_leaves_no_stale_finish_reason(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    release, entered = trio.Event(), trio.Event()
    second_release, second_entered = trio.Event(), trio.Event()
    cut = ModelReply(text="The answer is", finish_reason="length")
    model = ScriptedModel(
        [
            blocking_reply(cut, release, entered),
            blocking_reply(text("The answer is 4."), second_release, second_entered),
        ]
    )
    handle = await runtime.start(Agent(model), input="2 + 2?")
    await reach(entered)
    runtime.deliver(LiveCommand.Message(handle.run_id, "go on"))
    release.set()
    await reach(second_entered)
    # Committed with the message: the cut-off reply is no longer the final one.
    record = await runtime.record(handle.run_id)
    assert record.checkpoint["messages"][-1] == {"role": "user", "content": "go on"}
    assert "finish_reason" not in record.checkpoint
    second_release.set()
    assert await settle(handle) == NATURAL_END
    record = await runtime.record(handle.run_id)
    assert record.result == {"text": "The answer is 4.", "steps": 2}
    assert model.calls[1][-2:] == [
        {"role": "assistant", "content": "The answer is"},
        {"role": "user", "content": "go on"},
    ]
