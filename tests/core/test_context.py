"""What a body sees of its attempt, and what it can do with it."""

from __future__ import annotations

import contextlib

import pytest
import trio

import awaken_trio
from awaken_trio import (
    EndCause,
    NotActive,
    RunContext,
    RunState,
    Runtime,
)

CONTRACT_NAMES = [
    "open_runtime",
    "RunContext",
    "LiveCommand",
    "RunState",
    "EndCause",
    "ResumeTicket",
    "RunRecord",
    "RunEvent",
    "RunHandle",
    "AwakenError",
    "NotActive",
    "NotAwaiting",
    "TicketMismatch",
    "TicketExpired",
    "RunAlreadyEnded",
    "UnknownRun",
]


@pytest.mark.parametrize("name", CONTRACT_NAMES)
def test_contract_names_are_public_and_report_the_public_module(name: str) -> None:
    assert name in awaken_trio.__all__
    obj = getattr(awaken_trio, name)
    assert obj.__module__ == "awaken_trio"


async def test_the_body_sees_its_identity_and_a_private_copy_of_its_input(
    runtime: Runtime,
) -> None:
    seen: list[object] = []
    given = {"items": [1, 2]}

    async def body(ctx: RunContext) -> object:
        await trio.lowlevel.checkpoint()
        seen.extend([ctx.run_id, ctx.thread_id, ctx.parent_run_id, ctx.generation])
        seen.extend([ctx.input, ctx.checkpoint, ctx.resume_value, ctx.is_cancelled])
        return None

    handle = await runtime.start(body, run_id="r1", thread_id="t1", input=given)
    given["items"].append(3)  # the caller's later changes never reach the run
    await handle.wait()
    assert seen == ["r1", "t1", None, 1, {"items": [1, 2]}, None, None, False]
    assert (await runtime.record("r1")).input == {"items": [1, 2]}


async def test_a_body_cancelling_its_own_scope_ends_cancelled_with_source_body(
    runtime: Runtime,
) -> None:
    async def body(ctx: RunContext) -> object:
        ctx.cancel_scope.cancel()
        assert ctx.is_cancelled
        await trio.sleep_forever()

    handle = await runtime.start(body, run_id="self")
    assert await handle.wait() == RunState.Ended(EndCause.Cancelled())
    events = [e async for e in runtime.events("self", follow=False)]
    assert events[-1].detail["source"] == "body"


async def test_a_context_kept_after_its_attempt_ended_refuses_to_act(runtime: Runtime) -> None:
    kept: list[RunContext] = []

    async def body(ctx: RunContext) -> object:
        kept.append(ctx)
        return None

    async def child(ctx: RunContext) -> object:
        return None

    await runtime.execute(body, run_id="gone")
    ctx = kept[0]
    with pytest.raises(NotActive, match="boundary"):
        await ctx.boundary()
    with pytest.raises(NotActive, match="await_input"):
        await ctx.await_input("user_input")
    with pytest.raises(NotActive, match="start_child"):
        await ctx.start_child(child)
    assert await runtime.state("gone") == RunState.Ended(EndCause.NaturalEnd())


async def test_a_body_that_swallows_its_pause_still_ends_awaiting(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> object:
        with contextlib.suppress(BaseException):  # the point: a body that swallows it
            await ctx.await_input("user_input", correlation_id="q1")
        return {"too": "late"}

    state = await runtime.execute(body, run_id="swallow")
    assert isinstance(state, RunState.Awaiting)
    assert state.ticket.correlation_id == "q1"
    assert (await runtime.record("swallow")).result is None
