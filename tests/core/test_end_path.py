"""The common end (a body that returned a small scalar, with nothing else to settle),
committed in the attempt's own step on a store that needs no I/O: what it commits is what
the general finish boundary commits, and a store or a clock that fails there is answered
as it is there."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from awaken_trio import (
    EndCause,
    EventKind,
    JsonValue,
    RunContext,
    RunState,
    StoreError,
    open_runtime,
)
from awaken_trio.store import MemoryStore
from tests.run_helpers import history, settle, terminal_commits
from tests.wrapped_stores import InlineFailingStore

DONE = RunState.Ended(EndCause.NaturalEnd())
LIMIT = 64  # max_payload_bytes: small, so results near and over it are easy to make


def _returning(value: JsonValue):  # type: ignore[no-untyped-def]
    async def body(ctx: RunContext) -> JsonValue:
        return value

    return body


async def test_the_common_end_is_one_commit_and_records_what_the_general_end_records(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = InlineFailingStore()
    async with open_runtime(store) as rt:
        # "plain" ends the common way; "general" (a dict result) goes through the whole
        # finish boundary: both must leave the same kind of record and events.
        plain = await rt.start(_returning("ok"), run_id="plain")
        general = await rt.start(_returning({"ok": True}), run_id="general")
        assert await settle(plain) == DONE
        assert await settle(general) == DONE
        # One commit each to start, one each to end (in whatever order Trio ran them).
        assert sorted(store.batches) == [["general"]] * 2 + [["plain"]] * 2
        records = {run_id: await rt.record(run_id) for run_id in ("plain", "general")}
        assert records["plain"].result == "ok"
        assert records["general"].result == {"ok": True}
        for record in records.values():
            assert record.state == DONE
            assert (record.generation, record.steps) == (1, 0)
            assert record.ended_at is not None
            assert record.ended_at >= record.started_at  # type: ignore[operator]
        ends = {}
        for run_id in ("plain", "general"):
            events = await history(rt, run_id)
            assert [e.kind for e in events] == [EventKind.COMMITTED, EventKind.COMMITTED]
            [ends[run_id]] = terminal_commits(events)
        assert dict(ends["plain"].detail) == dict(ends["general"].detail) == {}
        assert (ends["plain"].state, ends["plain"].generation) == (DONE, 1)
        stats = rt.statistics()
        assert (stats.active_attempts, stats.busy_threads) == (0, 0)


async def test_a_common_end_records_the_steps_its_body_took(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def stepping(ctx: RunContext) -> int:
        for i in range(3):
            await ctx.boundary({"i": i})
        return ctx.steps

    async with open_runtime(MemoryStore()) as rt:
        handle = await rt.start(stepping, run_id="r")
        assert await settle(handle) == DONE
        record = await rt.record("r")
        assert (record.result, record.steps, record.checkpoint) == (3, 3, {"i": 2})


@pytest.mark.parametrize(
    "value",
    ["", "x" * 10, 0, -1, 2**63 - 1, 2**63, 2**200, 1.5, True, None, "é" * 10, "x" * 62],
)
async def test_every_result_that_fits_ends_the_run_with_it(
    value: JsonValue, autojump_clock: trio.testing.MockClock
) -> None:
    # Small scalars end the common way; the rest (a big int, a float, a string near the
    # limit) go the general way, which checks them exactly: the answer is the same.
    async with open_runtime(MemoryStore(), max_payload_bytes=LIMIT) as rt:
        handle = await rt.start(_returning(value), run_id="r")
        assert await settle(handle) == DONE
        assert (await rt.record("r")).result == value


@pytest.mark.parametrize("value", ["x" * LIMIT, "é" * 11, 10 ** (LIMIT + 1)])
async def test_a_result_over_the_limit_fails_the_run_as_invalid(
    value: JsonValue, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runtime(MemoryStore(), max_payload_bytes=LIMIT) as rt:
        handle = await rt.start(_returning(value), run_id="r")
        state = await settle(handle)
        assert isinstance(state, RunState.Ended)
        assert isinstance(state.cause, EndCause.Failed)
        assert state.cause.code == "invalid_result"
        assert (await rt.record("r")).result is None


async def test_a_store_failing_the_common_end_fails_the_wait_and_keeps_the_run_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = InlineFailingStore()
    go = trio.Event()

    async def body(ctx: RunContext) -> str:
        await go.wait()
        store.failing = True  # the end's commit is the next one
        return "lost"

    async with open_runtime(store) as rt:
        handle = await rt.start(body, run_id="r", thread_id="t")
        go.set()
        with pytest.raises(StoreError, match="disk full"):
            await handle.wait()
        store.failing = False
        # The attempt was let go: nothing runs, its thread is free; the store keeps the
        # last committed state, which cancel_run can end.
        stats = rt.statistics()
        assert (stats.active_attempts, stats.busy_threads) == (0, 0)
        assert await rt.state("r") == RunState.Running(1)
        assert await rt.execute(_returning(1), run_id="next", thread_id="t") == DONE
        assert await rt.cancel_run("r") == RunState.Ended(EndCause.Cancelled())
        assert (await rt.record("r")).result is None


async def test_a_store_failing_one_common_end_leaves_the_others_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class OneRunFails(InlineFailingStore):
        def apply_now(self, batch):  # type: ignore[no-untyped-def]
            if any(c.run_id == "bad" and c.state == DONE for c in batch):
                raise OSError("disk full")
            return super().apply_now(batch)

    async with open_runtime(OneRunFails()) as rt:
        handles = [await rt.start(_returning(i), run_id=f"r{i}") for i in range(3)]
        bad = await rt.start(_returning("x"), run_id="bad")
        with pytest.raises(StoreError, match="disk full"):
            await bad.wait()
        for i, handle in enumerate(handles):
            assert await settle(handle) == DONE
            assert (await rt.record(f"r{i}")).result == i
