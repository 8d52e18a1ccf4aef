"""The dashboard's app over a runtime on the memory store, driven through httpx's ASGI
transport (no network, no threads: the autojump clock applies)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Final
from urllib.parse import quote

import attrs
import httpx
import trio

from awaken_trio import JsonValue, RunContext, Runtime, open_runtime
from awaken_trio._ui import EventHub, dashboard_app
from awaken_trio.store import Store

BASE: Final = "http://127.0.0.1:8765"
TOKEN: Final = "test-token-0123456789abcdef"
XSS: Final = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
"""A payload that would run script if anything were not escaped."""


async def steps(ctx: RunContext) -> object:
    """Boundaries for ever (a message "finish" ends it), keeping the messages it gets."""
    seen: list[JsonValue] = []
    while True:
        await trio.sleep(1)
        messages = await ctx.boundary({"seen": seen})
        seen = [*seen, *messages]
        if "finish" in messages:
            return {"seen": seen}


async def asks(ctx: RunContext) -> object:
    """Awaits a string, then ends with it."""
    if ctx.resumed_ticket is None:
        await ctx.await_input("user_input", accepts={"type": "string"}, payload={"q": XSS})
    return {"answer": ctx.resume_value}


async def waits(ctx: RunContext) -> object:
    await ctx.boundary(wait=True)
    return {"woken": True}


async def parent(ctx: RunContext) -> object:
    """Starts a child that starts a grandchild, then waits for ever."""
    await ctx.start_child(child, run_id=f"{ctx.run_id}.child")
    await trio.sleep_forever()


async def child(ctx: RunContext) -> object:
    await ctx.start_child(waits, run_id=f"{ctx.run_id}.grandchild")
    await trio.sleep_forever()


BODIES: Final[dict[str, Any]] = {"steps": steps, "asks": asks, "waits": waits, "parent": parent}


@attrs.frozen
class Dashboard:
    runtime: Runtime
    hub: EventHub
    http: httpx.AsyncClient


def api(run_id: str, *rest: str) -> str:
    return "/".join(["/api/runs", quote(run_id, safe=""), *rest])


def page(run_id: str) -> str:
    return f"/runs/{quote(run_id, safe='')}"


@asynccontextmanager
async def dashboard(
    *,
    token: str | None = None,
    store: str | Store = "memory://",
    clock: Callable[[], float] = time.time,
    **headers: str,
) -> AsyncIterator[Dashboard]:
    async with (
        open_runtime(store, bodies=BODIES, clock=clock) as runtime,
        trio.open_nursery() as nursery,
    ):
        hub = EventHub(runtime)
        await nursery.start(hub.run)
        app = dashboard_app(runtime, hub, token=token)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE, headers=headers) as http:
            yield Dashboard(runtime, hub, http)
        nursery.cancel_scope.cancel()


async def settle(runtime: Runtime, run_id: str, kind: str) -> None:
    """Wait until the run (perhaps not yet created) has committed a state of ``kind``, by
    its events, not by time."""
    from awaken_trio.store import state_to_json

    async for event in runtime.events():
        if event.run_id == run_id and state_to_json(event.state)["kind"] == kind:
            return
    raise AssertionError(f"the runtime closed before run {run_id} reached {kind}")


async def caught_up(d: Dashboard) -> None:
    """Wait until the hub has seen every event committed so far (the table's activity
    columns come from it): it has once a stream subscribed now sees a later event."""
    last = 0
    async for event in d.runtime.events(follow=False):
        last = event.seq
    if d.hub.seq >= last:
        return
    with d.hub.subscribe() as events, trio.fail_after(30):
        async for event in events:
            if event.seq >= last:
                return
