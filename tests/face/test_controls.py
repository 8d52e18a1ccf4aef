"""The controls table (`awaken_trio._face.controls`): each control's call, and the committed
states it is offered in, against what the runtime itself accepts and refuses."""

from __future__ import annotations

import pathlib
from collections.abc import Awaitable, Callable

import pytest
import trio

from awaken_trio import (
    JsonValue,
    RunContext,
    RunState,
    Runtime,
    open_runtime,
)
from awaken_trio._face.controls import (
    CONTROL_NAMES,
    CONTROLS,
    ControlName,
    control,
    control_named,
    unavailable,
)
from awaken_trio._face.failures import REFUSALS
from awaken_trio.store import state_to_json

ARGUMENTS: dict[ControlName, dict[str, JsonValue]] = {
    "cancel": {"reason": "operator"},
    "stop": {"reason": "budget"},
    "pause": {},
    "wake": {"reason": "now"},
    "message": {"payload": {"n": 1}},
    "resume": {"value": "yes"},
}


async def loops(ctx: RunContext) -> object:
    while True:
        await ctx.boundary()
        await trio.sleep(0.01)


async def asks(ctx: RunContext) -> object:
    if ctx.resumed_ticket is None:
        await ctx.await_input("user_input")
    await trio.sleep_forever()  # resumed: runs on, so the state read after is its own


async def done(ctx: RunContext) -> object:
    return {"done": True}


async def _running(runtime: Runtime, key: str) -> str:
    return (await runtime.start(loops, thread_id=f"r-{key}")).run_id


async def _queued(runtime: Runtime, key: str) -> str:
    await runtime.start(loops, thread_id=f"q-{key}")
    handle = await runtime.start(loops, thread_id=f"q-{key}")
    assert state_to_json(await runtime.state(handle.run_id))["kind"] == "queued"
    return handle.run_id


async def _awaiting(runtime: Runtime, key: str) -> str:
    handle = await runtime.start(asks, thread_id=f"a-{key}")
    await handle.wait()
    return handle.run_id


async def _ended(runtime: Runtime, key: str) -> str:
    handle = await runtime.start(done, thread_id=f"e-{key}")
    await handle.wait()
    return handle.run_id


MAKERS: dict[str, Callable[[Runtime, str], Awaitable[str]]] = {
    "running": _running,
    "queued": _queued,
    "awaiting": _awaiting,
    "ended": _ended,
}


@pytest.mark.parametrize("kind", list(MAKERS))
@pytest.mark.parametrize("name", CONTROL_NAMES)
async def test_a_control_is_offered_exactly_where_the_runtime_takes_it(
    tmp_path: pathlib.Path, name: ControlName, kind: str
) -> None:
    """Offered: the runtime takes the call. Not offered: it refuses it, save a wake of a
    queued run, which the runtime takes and drops (there is no attempt to wake)."""
    async with open_runtime(f"sqlite:///{tmp_path / 'runs.db'}") as runtime:
        run_id = await MAKERS[kind](runtime, name)
        state = await runtime.state(run_id)
        why = unavailable(name, state)
        try:
            after = await control(runtime, name, run_id, ARGUMENTS[name])
        except REFUSALS:
            assert why is not None, f"{name} is offered for a {kind} run, and was refused"
        else:
            if (name, kind) != ("wake", "queued"):
                assert why is None, f"{name} is not offered for a {kind} run ({why}), yet taken"
            assert isinstance(after, RunState)
            assert after.is_ended == CONTROLS[name].ends_run
        if why is not None:
            assert kind in why


def test_only_cancel_and_stop_end_a_run() -> None:
    assert {name for name, spec in CONTROLS.items() if spec.ends_run} == {"cancel", "stop"}


def test_control_named_knows_the_controls_and_nothing_else() -> None:
    assert [control_named(name) for name in CONTROL_NAMES] == list(CONTROL_NAMES)
    assert control_named("events") is None
    assert control_named("Cancel") is None
