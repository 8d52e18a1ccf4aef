"""Agent runs on awaken_trio: approve a tool call, delegate, cancel, pause and resume.

Run it with ``python examples/agent.py``. It plays scripted models, so it needs no
network; with ``OPENAI_BASE_URL`` set (and ``OPENAI_API_KEY``, ``OPENAI_MODEL`` if your
endpoint wants them) the same runs talk to that OpenAI-compatible endpoint instead (this
needs httpx: ``pip install -e '.[openai]'`` from this checkout), and what the model
chooses to do decides the trail. Every run ends in one committed state, printed as it is
committed.
"""

from __future__ import annotations

import os
from typing import Any

import trio

from awaken_trio import (
    EndCause,
    LiveCommand,
    NotActive,
    RunContext,
    RunHandle,
    RunState,
    Runtime,
    open_runtime,
)
from awaken_trio.agent import (
    Agent,
    Model,
    ModelReply,
    OpenAIChatModel,
    ScriptedModel,
    SubAgentTool,
    Tool,
    ToolCall,
)

REAL = bool(os.environ.get("OPENAI_BASE_URL"))
FILES = {"draft.txt": "an old draft", "notes.txt": "keep these notes"}


def model(script: list[Any]) -> Model:
    """The script, or the real endpoint when one is configured."""
    if REAL:
        return OpenAIChatModel(os.environ.get("OPENAI_MODEL", "gpt-4o-mini"))
    return ScriptedModel(script)


class Watched:
    """A model that says when an inference has begun, so the example can act while the
    model is thinking, whichever model it is."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.thinking = trio.Event()

    async def infer(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply:
        self.thinking.set()
        return await self.inner.infer(messages, tools)


async def list_files(arguments: dict[str, Any], ctx: RunContext) -> object:
    return sorted(FILES)


async def delete_file(arguments: dict[str, Any], ctx: RunContext) -> object:
    FILES.pop(arguments["path"], None)
    return {"deleted": arguments["path"]}


FILE_TOOLS = [
    Tool("list_files", list_files, description="Lists the files."),
    Tool(
        "delete_file",
        delete_file,
        description="Deletes one file.",
        parameters={
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
        permission="ask",  # a person approves every call
    ),
]


def show(label: str, state: RunState) -> None:
    if isinstance(state, RunState.Awaiting):
        ticket = state.ticket
        print(f"  {label}: Awaiting({ticket.reason}) ticket {ticket.correlation_id!r}")
    else:
        print(f"  {label}: {state}")


async def finish(runtime: Runtime, handle: RunHandle) -> None:
    """Answer the run's tickets (approving every tool call) until it ends; print each."""
    while True:
        state = await handle.wait()
        show("committed", state)
        if not isinstance(state, RunState.Awaiting):
            record = await runtime.record(handle.run_id)
            print(f"  result: {record.result}")
            return
        ticket = state.ticket
        if ticket.reason == "tool_permission":
            tool_call = ticket.payload["tool_call"]
            print(f"  approving {tool_call['name']}({dict(tool_call['arguments'])})")
            handle = await runtime.resume(handle.run_id, {"decision": "allow"})
        else:
            handle = await runtime.resume(handle.run_id)


async def approve_a_tool_call(runtime: Runtime) -> None:
    print("1. a tool call that needs approval")
    agent = Agent(
        model(
            [
                ModelReply(tool_calls=(ToolCall("c1", "list_files", {}),)),
                ModelReply(tool_calls=(ToolCall("c2", "delete_file", {"path": "draft.txt"}),)),
                ModelReply(text="Deleted draft.txt."),
            ]
        ),
        FILE_TOOLS,
        system="You tidy files. Use the tools; delete only drafts.",
    )
    handle = await runtime.start(agent, input="Delete the draft file.")
    await finish(runtime, handle)
    print(f"  files left: {sorted(FILES)}")


async def delegate_to_a_sub_agent(runtime: Runtime) -> None:
    print("2. delegation to a sub-agent (a child run)")
    researcher = Agent(
        model([ModelReply(text="Trio is a structured-concurrency library for Python.")]),
        system="You answer research questions in one sentence.",
    )
    lead = Agent(
        model(
            [
                ModelReply(tool_calls=(ToolCall("c1", "researcher", {"prompt": "What is Trio?"}),)),
                ModelReply(text="Per my researcher: Trio is a structured-concurrency library."),
            ]
        ),
        [SubAgentTool("researcher", researcher, description="Answers research questions.")],
        system="Delegate research questions to the researcher tool.",
    )
    handle = await runtime.start(lead, input="Find out what Trio is.")
    await finish(runtime, handle)
    record = await runtime.record(handle.run_id)
    for message in record.checkpoint["messages"] if record.checkpoint else ():
        if message["role"] == "tool":
            print(f"  the sub-agent's answer, as the lead saw it: {message['content']}")


async def cancel_one(runtime: Runtime) -> None:
    print("3. a live cancel while the model is still thinking")

    async def slow_provider(messages: list[dict[str, Any]], tools: list[Any]) -> ModelReply:
        await trio.sleep_forever()  # a provider that never answers
        raise AssertionError("unreachable")

    watched = Watched(model([slow_provider]))
    handle = await runtime.start(Agent(watched), input="Write a very long essay.")
    await watched.thinking.wait()
    try:
        runtime.deliver(LiveCommand.Cancel(handle.run_id, "the user closed the tab"))
    except NotActive:
        # A live command reaches only an active attempt. This run has none: it ended
        # first (a fast endpoint answered, or failed), and its committed end is the answer.
        print("  the run ended before the cancel reached it")
    state = await handle.wait()
    show("committed", state)
    record = await runtime.record(handle.run_id)
    if state == RunState.Ended(EndCause.Cancelled()):
        print(f"  committed transcript: {record.checkpoint} (the interrupted step left nothing)")
    else:
        print(f"  result: {record.result}")
    async for event in runtime.events(handle.run_id, follow=False):
        if event.kind.startswith("agent."):
            print(f"  event {event.kind}: {dict(event.detail)}")


async def pause_and_resume(runtime: Runtime) -> None:
    print("4. pause at the next step boundary, with a message for the resumed run")
    gate = trio.Event()

    async def held(messages: list[dict[str, Any]], tools: list[Any]) -> ModelReply:
        await gate.wait()
        return ModelReply(tool_calls=(ToolCall("c1", "list_files", {}),))

    agent = Agent(
        model([held, ModelReply(text="There is one file left: notes.txt.")]),
        FILE_TOOLS,
        system="You answer questions about the files.",
    )
    handle = await runtime.start(agent, input="What files are there?")
    # No await since start returned: the body has not run yet, so its attempt is active
    # and these reach it (the pause then waits for the first step's boundary).
    runtime.deliver(LiveCommand.Pause(handle.run_id))
    runtime.deliver(LiveCommand.Message(handle.run_id, "Answer in one line, please."))
    gate.set()
    state = await handle.wait()
    show("committed", state)
    if not isinstance(state, RunState.Awaiting):  # an endpoint that failed the run
        return
    record = await runtime.record(handle.run_id)
    print(f"  steps committed before the pause: {record.checkpoint['steps']}")
    resumed = await runtime.resume(handle.run_id)
    await finish(runtime, resumed)
    record = await runtime.record(handle.run_id)
    said = [m["content"] for m in record.checkpoint["messages"] if m["role"] == "user"]
    print(f"  user messages in the committed transcript: {said}")


async def main() -> None:
    print(f"model: {'OpenAI-compatible endpoint' if REAL else 'scripted'}")
    async with open_runtime() as runtime:
        await approve_a_tool_call(runtime)
        await delegate_to_a_sub_agent(runtime)
        await cancel_one(runtime)
        await pause_and_resume(runtime)


if __name__ == "__main__":
    trio.run(main)
