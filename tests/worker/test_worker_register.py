"""Bodies by name: `register` and ``open_runtime(bodies=...)``, and the name a run carries."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from awaken_trio import (
    InvalidArgument,
    InvalidBody,
    RunContext,
    RunState,
    open_runtime,
)
from awaken_trio.store import MemoryStore
from tests.worker.worker_helpers import (
    NATURAL,
    is_ended,
    serving,
    settle,
    shared_runtime,
    until_state,
)


async def first(ctx: RunContext) -> object:
    return "first"


async def second(ctx: RunContext) -> object:
    return "second"


async def test_register_refuses_a_name_taken_by_another_body(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with shared_runtime(shared_store) as rt:
        rt.register("job", first)
        with pytest.raises(InvalidArgument, match="job"):
            rt.register("job", second)
        # The first registration stands: a run submitted by that name runs ``first``.
        async with serving(rt):
            handle = await rt.submit("job", run_id="r")
            assert await settle(handle) == NATURAL
        assert (await rt.record("r")).result == "first"


async def test_register_refuses_a_name_given_by_bodies_for_another_body(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with shared_runtime(shared_store, bodies={"job": first}) as rt:
        with pytest.raises(InvalidArgument, match="job"):
            rt.register("job", second)


async def test_registering_the_same_body_again_is_fine(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with shared_runtime(shared_store, bodies={"job": first}) as rt:
        rt.register("job", first)
        rt.register("job", first)
        handle = await rt.start(first, run_id="r")
        assert await settle(handle) == NATURAL
        assert (await rt.record("r")).name == "job"


@pytest.mark.parametrize("name", ["", 7, None, "x\x00y"])
async def test_register_refuses_a_bad_name(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock, name: Any
) -> None:
    async with shared_runtime(shared_store) as rt:
        with pytest.raises(InvalidArgument):
            rt.register(name, first)
        with pytest.raises(InvalidArgument):
            await rt.serve()  # still nothing registered


async def test_register_refuses_a_body_that_is_not_async(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    def not_async(ctx: RunContext) -> object:
        return None

    async with shared_runtime(shared_store) as rt:
        with pytest.raises(InvalidBody):
            rt.register("job", not_async)


async def test_open_runtime_refuses_bodies_that_are_not_a_mapping(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    with pytest.raises(InvalidArgument, match="bodies"):
        async with open_runtime(shared_store, bodies=[("job", first)]):  # type: ignore[arg-type]
            pass  # pragma: no cover


async def test_open_runtime_refuses_a_bad_body_in_bodies(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    with pytest.raises(InvalidArgument):
        async with open_runtime(shared_store, bodies={"": first}):
            pass  # pragma: no cover
    with pytest.raises(InvalidBody):
        async with open_runtime(shared_store, bodies={"job": "not a body"}):  # type: ignore[dict-item]
            pass  # pragma: no cover


async def test_a_started_run_carries_the_name_its_body_is_registered_under(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with shared_runtime(shared_store, bodies={"first-job": first}) as rt:
        rt.register("second-job", second)
        await settle(await rt.start(first, run_id="a"))
        await settle(await rt.start(second, run_id="b"))
        assert (await rt.record("a")).name == "first-job"
        assert (await rt.record("b")).name == "second-job"


async def test_an_unregistered_body_gives_a_run_no_name(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async def unregistered(ctx: RunContext) -> object:
        return None

    async with shared_runtime(shared_store, bodies={"first-job": first}) as rt:
        await settle(await rt.start(unregistered, run_id="a"))
        assert (await rt.record("a")).name is None


async def test_an_explicit_name_wins_over_the_registered_one(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with shared_runtime(shared_store, bodies={"first-job": first, "other": second}) as rt:
        await settle(await rt.start(first, run_id="a", name="other"))
        await settle(await rt.start(first, run_id="b", name="label"))
        assert (await rt.record("a")).name == "other"
        assert (await rt.record("b")).name == "label"


async def test_a_run_started_with_a_name_is_recovered_under_that_name(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    """The name a run carries is what another runtime runs it by: a runtime whose body is
    registered under the explicit name picks the released run up."""
    entered: list[tuple[str, int]] = []

    async def parked(ctx: RunContext) -> object:
        entered.append(("a", ctx.generation))
        await trio.sleep_forever()

    async def finisher(ctx: RunContext) -> object:
        entered.append(("b", ctx.generation))
        return "finished"

    async with shared_runtime(shared_store, bodies={"finisher": finisher}) as b:
        async with shared_runtime(shared_store) as a:
            await a.start(parked, run_id="r", name="finisher")
            await trio.testing.wait_all_tasks_blocked()
        assert await b.state("r") == RunState.Queued()
        async with serving(b):
            await until_state(b, "r", is_ended, seconds=60)
        assert await b.state("r") == NATURAL
        assert (await b.record("r")).result == "finished"
    assert entered == [("a", 1), ("b", 2)]


class Job:
    async def run(self, ctx: RunContext) -> object:
        return "job"


async def test_a_bound_method_body_is_known_by_its_registered_name(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    """``job.run`` makes a new bound-method object at each access; it is the same body
    all the same (they compare equal)."""
    job = Job()
    async with shared_runtime(shared_store, bodies={"job": job.run}) as rt:
        rt.register("job", job.run)  # the same body again: fine
        await settle(await rt.start(job.run, run_id="r"))
        assert (await rt.record("r")).name == "job"
