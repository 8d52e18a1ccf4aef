"""Nothing silent (DESIGN §3, §3.6): a body's error leaves its traceback in the terminal event
and one ERROR record; a commit the store refuses is logged with the run id."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from awaken_trio import EndCause, RunContext, RunState, StoreError, open_runtime
from awaken_trio._core._verdict import TRACEBACK_LIMIT
from tests.run_helpers import history
from tests.wrapped_stores import FailingStore


def deep_down() -> None:
    raise ValueError("bad value 7")


async def test_a_failure_carries_its_traceback_and_is_logged_once(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(ctx: RunContext) -> None:
        await trio.sleep(1)
        deep_down()

    caplog.set_level(logging.ERROR, logger="awaken_trio")
    async with open_runtime() as runtime:
        state = await runtime.execute(body, run_id="f")
        assert state == RunState.Ended(EndCause.Failed("value_error", "bad value 7"))
        end = (await history(runtime, "f"))[-1]
    text = end.detail["traceback"]
    assert text.startswith("Traceback (most recent call last):")
    assert "in deep_down" in text
    assert text.rstrip().endswith("ValueError: bad value 7")
    records = [r for r in caplog.records if r.name == "awaken_trio" and r.levelno == logging.ERROR]
    assert len(records) == 1
    [record] = records
    assert record.run_id == "f"  # type: ignore[attr-defined]
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], ValueError)
    assert "'f'" in record.getMessage()


async def test_a_deep_traceback_keeps_its_innermost_part(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Two functions in turn: Python folds a frame repeated in a row into one line.
    def ping(n: int) -> None:
        if n == 0:
            raise RuntimeError("at the bottom")
        pong(n - 1)

    def pong(n: int) -> None:
        ping(n - 1)

    async def body(ctx: RunContext) -> None:
        await trio.lowlevel.checkpoint()
        ping(300)

    async with open_runtime() as runtime:
        await runtime.execute(body, run_id="deep")
        text = (await history(runtime, "deep"))[-1].detail["traceback"]
    assert len(text) <= TRACEBACK_LIMIT + 100
    assert text.startswith("... (")
    assert text.rstrip().endswith("RuntimeError: at the bottom")


async def test_an_error_whose_str_raises_still_gets_a_traceback(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class Nasty(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no str for you")

    async def body(ctx: RunContext) -> None:
        await trio.lowlevel.checkpoint()
        raise Nasty()

    async with open_runtime() as runtime:
        state = await runtime.execute(body, run_id="nasty")
        assert isinstance(state, RunState.Ended)
        assert isinstance(state.cause, EndCause.Failed)
        text = (await history(runtime, "nasty"))[-1].detail["traceback"]
    assert "Nasty" in text


async def test_a_refused_boundary_commit_is_logged_with_the_run_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FailingStore()
    raised: list[BaseException] = []

    async def body(ctx: RunContext) -> None:
        store.failing = True
        try:
            await ctx.boundary({"step": 1})
        except StoreError as exc:
            raised.append(exc)
        finally:
            store.failing = False

    caplog.set_level(logging.ERROR, logger="awaken_trio")
    async with open_runtime(store) as runtime:
        await runtime.execute(body, run_id="b")
    assert len(raised) == 1
    stored = [r for r in caplog.records if r.name == "awaken_trio.store"]
    assert len(stored) == 1
    assert stored[0].levelno == logging.ERROR
    assert stored[0].run_id == "b"  # type: ignore[attr-defined]
    assert "disk full" in stored[0].getMessage()
