"""Body versions (DESIGN §3.8): a run's first attempt pins the version of its body, and
every later attempt (resume, recovery, scheduled wake) runs only with a body that accepts
it, on runtimes sharing a store."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from awaken_trio import InvalidArgument, InvalidBody, RunContext, RunState, VersionedBody
from awaken_trio._core import Body
from awaken_trio.store import MemoryStore
from tests.worker.worker_helpers import (
    NATURAL,
    serving,
    settle,
    shared_runtime,
    until_state,
)


def asking(version: str) -> Body:
    async def body(ctx: RunContext) -> object:
        ran = [*(ctx.checkpoint or {"ran": []})["ran"], version]
        await ctx.boundary({"ran": ran})
        if ctx.resumed_ticket is None:
            await ctx.await_input("user_input")
        return {"ran": ran}

    return body


def is_awaiting(state: RunState) -> bool:
    return isinstance(state, RunState.Awaiting)


def is_ended(state: RunState) -> bool:
    return isinstance(state, RunState.Ended)


async def test_the_first_attempt_pins_the_version_and_later_ones_follow_it(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    v1 = {"ask": VersionedBody(asking("1"), version="1")}
    v2 = {"ask": VersionedBody(asking("2"), version="2")}
    async with shared_runtime(shared_store, bodies=v1) as one:
        async with serving(one):
            await one.submit("ask", run_id="r1")
            await until_state(one, "r1", is_awaiting)
        assert (await one.record("r1")).body_version == "1"
        async with shared_runtime(shared_store, bodies=v2) as two, serving(two):
            # Answered where no version-1 body serves: it waits, queued, untouched.
            handle = await two.resume("r1", "ok")
            await trio.sleep(30)
            assert await two.state("r1") == RunState.Queued()
            async with serving(one):
                assert await settle(handle) == NATURAL
        assert (await one.record("r1")).result == {"ran": ["1", "1"]}


async def test_a_body_that_lists_the_pinned_version_compatible_runs_it(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    v1 = {"ask": VersionedBody(asking("1"), version="1")}
    v2 = {"ask": VersionedBody(asking("2"), version="2", compatible=("1",))}
    async with shared_runtime(shared_store, bodies=v1) as one, serving(one):
        await one.submit("ask", run_id="r1")
        await until_state(one, "r1", is_awaiting)
    async with shared_runtime(shared_store, bodies=v2) as two:
        handle = await two.resume("r1", "ok")  # runs here, its body accepting version 1
        assert await settle(handle) == NATURAL
        record = await two.record("r1")
        assert record.result == {"ran": ["1", "2"]}
        assert record.body_version == "1"  # pinned once, by the first attempt


async def test_start_pins_the_registered_version_and_unversioned_bodies_pin_none(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async def plain(ctx: RunContext) -> int:
        return 1

    async with shared_runtime(shared_store) as runtime:
        body = asking("3")
        runtime.register("ask", body, version="3")
        runtime.register("plain", plain)
        assert runtime.body_versions() == {"ask": "3", "plain": None}
        handle = await runtime.start(body, run_id="r1")
        await until_state(runtime, "r1", is_awaiting)
        assert (await runtime.record("r1")).body_version == "3"
        await runtime.execute(plain, run_id="r2")
        assert (await runtime.record("r2")).body_version is None
        await runtime.cancel_run(handle.run_id)


async def test_bad_versions_are_refused_by_register(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    body = asking("1")
    async with shared_runtime(shared_store) as runtime:
        for version, compatible in ((3, ()), ("", ()), ("1", "0"), ("1", (2,)), ("1", ("",))):
            with pytest.raises(InvalidArgument, match=r"version|compatible"):
                runtime.register("ask", body, version=version, compatible=compatible)
        assert runtime.body_versions() == {}
        runtime.register("ask", body, version="1")
        runtime.register("ask", body, version="1")  # again: fine
        with pytest.raises(InvalidArgument, match="version '1' already"):
            runtime.register("ask", body, version="2")
        with pytest.raises(InvalidBody):
            runtime.register("other", "not a body", version="1")
        assert runtime.body_versions() == {"ask": "1"}
