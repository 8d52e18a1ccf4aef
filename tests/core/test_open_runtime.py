"""open_runtime's arguments: every bad one is refused with a message naming it."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from awaken_trio import EndCause, InvalidArgument, RunContext, RunState, open_runtime
from awaken_trio.store import MemoryStore


async def test_unknown_option_is_named() -> None:
    # Options are keyword parameters, so mypy catches a misspelling and Python names it.
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'retries'"):
        async with open_runtime(retries=3):  # type: ignore[call-arg]
            pass  # pragma: no cover


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"clock": 12.0}, "clock must be a callable"),
        ({"max_batch": 0}, "max_batch must be a positive int"),
        ({"max_batch": True}, "max_batch must be a positive int"),
        ({"ownership_verifier": "yes"}, "ownership_verifier must be a callable"),
    ],
)
async def test_bad_option_values_are_refused(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        async with open_runtime(**kwargs):
            pass  # pragma: no cover


async def test_unsupported_store_url_is_refused() -> None:
    with pytest.raises(InvalidArgument, match=r"unsupported store URL 'redis://x'"):
        async with open_runtime("redis://x"):
            pass  # pragma: no cover


async def test_an_object_that_is_not_a_store_is_refused() -> None:
    with pytest.raises(InvalidArgument, match=r"is not a Store: it has no apply\(\) method"):
        async with open_runtime(object()):  # type: ignore[arg-type]
            pass  # pragma: no cover


async def test_memory_url_and_store_instance_both_work() -> None:
    async def body(ctx: RunContext) -> object:
        return ctx.input

    for store in ("memory://", MemoryStore()):
        async with open_runtime(store) as runtime:
            assert await runtime.execute(body, input=[1]) == RunState.Ended(EndCause.NaturalEnd())


async def test_a_store_passed_in_stays_readable_after_the_runtime_closes() -> None:
    store = MemoryStore()

    async def body(ctx: RunContext) -> object:
        return {"ok": True}

    async with open_runtime(store) as runtime:
        handle = await runtime.start(body, run_id="kept")
        await handle.wait()
    record = await store.load("kept")
    assert record is not None
    assert record.result == {"ok": True}


async def test_max_batch_caps_the_size_of_a_group_commit() -> None:
    async def body(ctx: RunContext) -> object:
        return None

    async with open_runtime(MemoryStore(inline=False), max_batch=3) as runtime:
        async with trio.open_nursery() as nursery:
            for _ in range(30):
                nursery.start_soon(runtime.execute, body)
        stats = runtime.statistics().supervisor
    assert stats.commits == 60
    assert stats.largest_batch == 3
