"""A pydantic-ai agent as a durable run across real processes on one SQLite file: a worker
killed (kill -9) in the middle of the agent's run, a cancel, a pause and its resume, an
approval answered from another process. Every model request and tool call is a step: what
was committed is never run again. The agent is ``tests/multiprocess/mp_agents.py``'s."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integrations.pa_helpers import require_pydantic_ai

require_pydantic_ai()

from awaken_trio import EventKind, LiveCommand, RunState, Runtime  # noqa: E402
from tests.multiprocess.mp_harness import (  # noqa: E402
    CANCELLED,
    NATURAL,
    Cluster,
    history,
    is_awaiting,
    is_ended,
    until_line,
    until_state,
    wait_for,
)

pytestmark = pytest.mark.slow

MODEL = "pa__model.request"
LOOKUP = "pa__function_toolset__<agent>.call_tool:lookup"


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


async def steps(control: Runtime, run_id: str) -> list[tuple[str, int, int]]:
    return [
        (e.detail["name"], e.detail["index"], e.generation)
        for e in await history(control, run_id)
        if e.kind == EventKind.STEP
    ]


async def test_after_kill_9_the_agent_goes_on_without_calling_the_model_again(
    control: Runtime, cluster: Cluster, tmp_path: Path
) -> None:
    first = await cluster.start("w1", agents=True)
    marker = tmp_path / "hung"
    await control.submit("pa", input=f"hang-once:{marker}", run_id="k")
    # The first request and the lookup are committed; the second request hangs.
    await until_line(first, "hanging", "k")

    async def two_committed() -> bool:
        return len(await steps(control, "k")) == 2

    await wait_for(two_committed, "the first request and the lookup to be committed")
    await first.kill()

    second = await cluster.start("w2", agents=True)
    assert await until_state(control, "k", is_ended) == NATURAL
    assert (await control.record("k")).result["output"] == "found value of k"
    # The second worker made the one request that was not committed, and no tool call.
    assert [line.words[:2] for line in second.lines if line.words[0] in ("model", "tool")] == [
        ["model", "k"]
    ]
    *replayed, (name, index, generation) = await steps(control, "k")
    assert replayed == [(MODEL, 0, 1), (LOOKUP, 0, 1)]
    assert (name, index) == (MODEL, 1)
    assert generation > 1


async def test_after_kill_9_mid_reply_the_stream_resets_and_the_reply_is_streamed_anew(
    control: Runtime, cluster: Cluster, tmp_path: Path
) -> None:
    first = await cluster.start("w1", agents=True)
    marker = tmp_path / "hung"
    await control.submit("pa_tokens", input=f"hang-once:{marker}", run_id="s")
    await until_line(first, "hanging", "s")

    async def tokens() -> list[tuple[str, object]]:
        return [
            (chunk.kind, chunk.value)
            async for chunk in control.read_stream("s", "agent.tokens", follow=False)
        ]

    async def half_reply_written() -> bool:
        return await tokens() == [("data", "Let me look."), ("data", "found ")]

    # The text of the answer's first piece is on the stream; its step is not committed.
    await wait_for(half_reply_written, "the first piece of the answer on the stream")
    await first.kill()

    second = await cluster.start("w2", agents=True)
    assert await until_state(control, "s", is_ended) == NATURAL
    assert (await control.record("s")).result["output"] == "found value of k"
    # The second worker asked the model once: the first request and the lookup replayed.
    assert [line.words[:2] for line in second.lines if line.words[0] in ("model", "tool")] == [
        ["model", "s"]
    ]
    assert await tokens() == [
        ("data", "Let me look."),
        ("data", "found "),
        ("reset", None),
        ("data", "found "),
        ("data", "value of k"),
        ("end", None),
    ]


async def test_a_cancel_from_another_process_reaches_the_models_request(
    control: Runtime, cluster: Cluster
) -> None:
    worker = await cluster.start("w1", agents=True)
    await control.submit("pa", input="hang-first", run_id="c")
    await until_line(worker, "hanging", "c")
    assert await control.cancel_run("c") == CANCELLED
    await until_line(worker, "cancelled", "c")
    assert await steps(control, "c") == []
    assert worker.alive


async def test_a_pause_and_its_resume_replay_what_was_committed(
    control: Runtime, cluster: Cluster
) -> None:
    worker = await cluster.start("w1", agents=True)
    await control.submit("pa", input="slow-tool", run_id="p")
    await until_line(worker, "tool", "p")
    await control.send(LiveCommand.Pause("p"))  # while the tool runs
    state = await until_state(control, "p", is_awaiting)
    assert isinstance(state, RunState.Awaiting)
    assert state.ticket.reason == "manual_pause"
    await control.resume("p")
    assert await until_state(control, "p", is_ended) == NATURAL
    ran = [line.words[:2] for line in worker.lines if line.words[0] in ("model", "tool")]
    assert ran == [["model", "p"], ["tool", "p"], ["model", "p"]]
    *replayed, (name, index, generation) = await steps(control, "p")
    assert replayed == [(MODEL, 0, 1), (LOOKUP, 0, 1)]
    assert (name, index) == (MODEL, 1)
    assert generation > 1


async def test_an_approval_answered_from_another_process(
    control: Runtime, cluster: Cluster
) -> None:
    worker = await cluster.start("w1", agents=True)
    await control.submit("pa", input="approve", run_id="a")
    state = await until_state(control, "a", is_awaiting)
    assert isinstance(state, RunState.Awaiting)
    assert state.ticket.reason == "tool_permission"
    assert state.ticket.payload == {
        "tool_call": {"id": "c2", "name": "delete", "arguments": {"path": "/x"}}
    }
    await control.resume("a", {"decision": "allow"})
    assert await until_state(control, "a", is_ended) == NATURAL
    assert (await control.record("a")).result["output"] == "found value of k; deleted /x"
    models = [line for line in worker.lines if line.words[:2] == ["model", "a"]]
    assert len(models) == 3  # two before the ticket, one after: none made twice
