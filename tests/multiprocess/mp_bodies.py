"""Run bodies the multi-process tests register in every worker process (by name)."""

from __future__ import annotations

import json
import time
from typing import Any

import trio

from awaken_trio import JsonValue, RunContext, RunError, RunState
from awaken_trio._core import Body
from awaken_trio.agent import Agent, ModelReply, Tool, ToolCall


async def stepper(ctx: RunContext) -> JsonValue:
    """``input = {"steps": n, "delay": seconds}``: n steps, each committed as progress
    ``{"step": i, "generations": [...]}``; a new attempt continues from the checkpoint."""
    done = dict(ctx.checkpoint or {"step": 0, "generations": []})
    generations = [*done["generations"], ctx.generation]
    for step in range(done["step"], ctx.input["steps"]):
        await trio.sleep(ctx.input.get("delay", 0.05))
        await ctx.boundary({"step": step + 1, "generations": generations})
    return {"steps": ctx.input["steps"], "generation": ctx.generation}


async def parker(ctx: RunContext) -> JsonValue:
    """Waits for messages, committing each in its checkpoint; ``"finish"`` ends it.

    An attempt that starts from a checkpoint holding ``"finish"`` ends at once: the attempt
    before it received the message and committed it (which consumed it, so it is never
    handed out again), then lost its claim before its end was committed."""
    seen = list((ctx.checkpoint or {}).get("messages", []))
    while "finish" not in seen:
        messages = await ctx.boundary({"messages": seen, "generation": ctx.generation}, wait=True)
        seen.extend(messages)
        if "finish" in messages:
            await ctx.boundary({"messages": seen, "generation": ctx.generation})
    return {"messages": seen, "generation": ctx.generation}


async def child_parker(ctx: RunContext) -> JsonValue:
    await trio.sleep_forever()


async def parent_of_two(ctx: RunContext) -> JsonValue:
    """Starts two children that park, commits progress, then parks itself."""
    if ctx.generation == 1:
        for i in range(2):
            await ctx.start_child(child_parker, run_id=f"{ctx.run_id}-child-{i}")
    await ctx.boundary({"generation": ctx.generation})
    if ctx.input and ctx.input.get("finish_on_recovery") and ctx.generation > 1:
        return {"recovered_in": ctx.generation}
    await trio.sleep_forever()


async def napper(ctx: RunContext) -> JsonValue:
    """Sleeps durably (``ctx.sleep``) once, then returns."""
    if ctx.resumed_ticket is None:
        await ctx.sleep(ctx.input["seconds"])
    return {"woke_in": ctx.generation}


async def reporter(ctx: RunContext) -> JsonValue:
    """Says on stdout when it runs and when it observes a cancellation (with the time), so
    a test or benchmark in another process can see both."""
    print(f"running {ctx.run_id}", flush=True)
    try:
        await trio.sleep_forever()
    finally:
        print(f"cancelled {ctx.run_id} {time.time()!r}", flush=True)


def _say(word: str, ctx: RunContext, *more: object) -> None:
    # One line a test in another process reads: what, which run, which attempt, when.
    print(word, ctx.run_id, ctx.generation, *more, repr(time.time()), flush=True)


async def probe(ctx: RunContext) -> JsonValue:
    """Parks until it is cancelled, saying so on stdout: ``enter``, then ``observed`` when
    it sees the cancellation, then (``input = {"linger": seconds}``, shielded) ``exit``
    when its attempt is done. Each line is ``<word> <run_id> <generation> <time>``."""
    _say("enter", ctx)
    try:
        await trio.sleep_forever()
    finally:
        _say("observed", ctx)
        with trio.CancelScope(shield=True):
            await trio.sleep((ctx.input or {}).get("linger", 0))
        _say("exit", ctx)


async def loud_stepper(ctx: RunContext) -> JsonValue:
    """`stepper` that says on stdout when it enters, after each boundary returns (``step
    <run_id> <generation> <i> <time>``), and how its attempt left (``exit ... <how>``)."""
    done = dict(ctx.checkpoint or {"step": 0, "generations": []})
    generations = [*done["generations"], ctx.generation]
    _say("enter", ctx, done["step"])
    try:
        for step in range(done["step"], ctx.input["steps"]):
            await trio.sleep(ctx.input.get("delay", 0.05))
            await ctx.boundary({"step": step + 1, "generations": generations})
            _say("step", ctx, step + 1)
        how = "returned"
        return {"steps": ctx.input["steps"], "generation": ctx.generation}
    except trio.Cancelled:
        how = "cancelled"
        raise
    except BaseException as exc:
        how = type(exc).__name__
        raise
    finally:
        _say("exit", ctx, how)


async def inbox_stepper(ctx: RunContext) -> JsonValue:
    """`stepper` that keeps every message its boundaries return: in its checkpoint (from
    the next boundary) and in its result, so none it read is lost."""
    done = dict(ctx.checkpoint or {"step": 0, "generations": [], "messages": []})
    generations = [*done["generations"], ctx.generation]
    seen = list(done["messages"])
    for step in range(done["step"], ctx.input["steps"]):
        await trio.sleep(ctx.input.get("delay", 0.05))
        progress = {"step": step + 1, "generations": generations, "messages": seen}
        seen.extend(await ctx.boundary(progress))
    return {"steps": ctx.input["steps"], "generation": ctx.generation, "messages": seen}


async def asker(ctx: RunContext) -> JsonValue:
    """Asks a person once (ticket ``ask``), then says what it was answered: ``answered
    <run_id> <generation> <value as JSON> <correlation id> <time>``. Its second attempt
    then parks (so a test can kill its owner); any other returns the answer."""
    ticket = ctx.resumed_ticket
    if ticket is None:
        await ctx.await_input("user_input", correlation_id="ask", accepts={"type": "string"})
        raise AssertionError("await_input ends the attempt")
    _say("answered", ctx, json.dumps(ctx.resume_value), ticket.correlation_id)
    if ctx.generation == 2:
        await trio.sleep_forever()
    return {
        "answer": ctx.resume_value,
        "ticket": ticket.correlation_id,
        "generation": ctx.generation,
    }


async def _reply(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
    # Deterministic from the transcript: one tool call per step, then a final answer.
    results = [m for m in messages if m["role"] == "tool"]
    if len(results) < 2:
        return ModelReply(
            tool_calls=(ToolCall(f"call-{len(results)}", "work", {"n": len(results)}),)
        )
    return ModelReply(text=f"done after {len(results)} tool results")


class _TranscriptModel:
    async def infer(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply:
        await trio.lowlevel.checkpoint()
        return await _reply(messages, tools)


async def _work(arguments: dict[str, Any], ctx: RunContext) -> JsonValue:
    # The second step's tool hangs in the first attempt: the worker is killed there.
    if arguments["n"] == 1 and ctx.generation == 1:
        await trio.sleep_forever()
    return {"worked": arguments["n"], "generation": ctx.generation}


agent = Agent(_TranscriptModel(), [Tool("work", _work, description="does work")])


async def tree_node(ctx: RunContext) -> JsonValue:
    """A child of `tree`, ``input = {"depth": n}``: with a depth above 1 it starts a child of
    its own under a fixed id; it commits the generations it ran in, then its first attempt
    parks (a test stops its worker there) and any later one ends with its child."""
    generations = [*(ctx.checkpoint or {"generations": []})["generations"], ctx.generation]
    below = None
    if ctx.input["depth"] > 1:
        below = await ctx.start_child(
            tree_node, run_id=f"{ctx.run_id}.g", input={"depth": ctx.input["depth"] - 1}
        )
    await ctx.boundary({"generations": generations})
    if ctx.generation == 1:
        await trio.sleep_forever()
    if below is not None:
        await below.wait()
    return {"generations": generations}


async def tree_asker(ctx: RunContext) -> JsonValue:
    """A child of `tree` that awaits an answer (ticket ``tree-ask``)."""
    await ctx.await_input("user_input", correlation_id="tree-ask")
    raise AssertionError("await_input ends the attempt")


async def tree(ctx: RunContext) -> JsonValue:
    """A parent with a child two levels deep and a child that awaits, all under fixed ids
    (the pattern DESIGN rule 22 recommends): every attempt starts them again, and takes
    back what an earlier attempt handed back. Its first attempt parks once the tree
    stands; a later one returns once its running child has ended."""
    me = ctx.run_id
    node = await ctx.start_child(tree_node, run_id=f"{me}.node", input={"depth": 2})
    asked = await ctx.run_child(tree_asker, run_id=f"{me}.ask")
    await ctx.boundary({"generation": ctx.generation})
    if ctx.generation == 1:
        await trio.sleep_forever()
    ended = await node.wait()
    return {
        "generation": ctx.generation,
        "node": type(ended.cause).__name__ if isinstance(ended, RunState.Ended) else None,
        "asked": type(asked).__name__,
    }


async def streamer(ctx: RunContext) -> JsonValue:
    """``input = {"count": n, "delay": seconds, "channel": name}``: sends n chunks
    ``"<generation>:<i>"`` on its stream, each flushed (committed) before the next, then
    ends. A new attempt sends all of them again, after the reset the store puts first.
    With ``"loud": true`` it says ``enter`` and, after each flush, ``sent <run> <gen> <i>``."""
    spec = ctx.input or {}
    out = ctx.stream(spec.get("channel", "output"))
    count = spec.get("count", 10)
    if spec.get("loud"):
        _say("enter", ctx)
    for i in range(count):
        out.send(f"{ctx.generation}:{i}")
        await out.flush()
        if spec.get("loud"):
            _say("sent", ctx, i)
        await trio.sleep(spec.get("delay", 0.01))
    return {"sent": count, "generation": ctx.generation}


def _effect(run_id: str, generation: int, i: int, hang_at: int | None) -> JsonValue:
    """A journaled step's effect (on a worker thread): says so on stdout; in the first
    attempt, step ``hang_at`` never returns (the test kills the worker there)."""
    print("effect", run_id, generation, i, repr(time.time()), flush=True)
    if generation == 1 and i == hang_at:
        time.sleep(3600)
    return {"i": i, "generation": generation}


async def journaled(ctx: RunContext) -> JsonValue:
    """``input = {"steps": n, "hang_at": k}``: n journaled steps of one name, each printing
    ``effect <run> <generation> <i>`` when it runs; a recovered attempt gets the committed
    ones back without running them."""
    return [
        await ctx.step("effect", _effect, ctx.run_id, ctx.generation, i, ctx.input.get("hang_at"))
        for i in range(ctx.input["steps"])
    ]


async def failer(ctx: RunContext) -> JsonValue:
    """``input = {"fail_at": [generations], "hang_at": [generations]}``: says ``enter``,
    then parks for ever in a generation of ``hang_at`` (to be killed there), fails (code
    ``flaky``) in one of ``fail_at``, else ends with its generation."""
    _say("enter", ctx)
    if ctx.generation in ctx.input.get("hang_at", []):
        await trio.sleep_forever()
    if ctx.generation in ctx.input.get("fail_at", []):
        _say("fail", ctx)
        raise RunError("flaky", f"generation {ctx.generation} failed")
    return {"generation": ctx.generation}


BODIES: dict[str, Body] = {
    "failer": failer,
    "streamer": streamer,
    "journaled": journaled,
    "tree": tree,
    "stepper": stepper,
    "parker": parker,
    "child_parker": child_parker,
    "parent_of_two": parent_of_two,
    "napper": napper,
    "reporter": reporter,
    "agent": agent,
    "probe": probe,
    "loud_stepper": loud_stepper,
    "inbox_stepper": inbox_stepper,
    "asker": asker,
}
