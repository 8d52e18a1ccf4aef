"""What comes out of `open_runtime` when its block ends: the caller's own exception,
unwrapped and without false notes; a KeyboardInterrupt or SystemExit as itself, whatever
nursery it crossed on the way; an enclosing cancel as one plain `trio.Cancelled`.

The interrupt tests call `trio.run` themselves: a KeyboardInterrupt must never escape a
pytest-trio test, and the point is what comes out of `trio.run`.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

from awaken_trio import RunContext, Runtime, open_runtime

STORES = ["memory", "sqlite"]


def store_url(kind: str, tmp_path: Path) -> str:
    return "memory://" if kind == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"


async def sleeper(ctx: RunContext) -> None:
    await trio.sleep_forever()


@asynccontextmanager
async def opened(kind: str, tmp_path: Path) -> AsyncIterator[Runtime]:
    async with open_runtime(store_url(kind, tmp_path), bodies={"sleeper": sleeper}) as rt:
        yield rt


def leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


# ---------------------------------------------------------------- an enclosing cancel


@pytest.mark.parametrize("kind", STORES)
async def test_an_enclosing_cancel_comes_out_as_the_callers_plain_cancelled(
    kind: str, tmp_path: Path
) -> None:
    """The caller's Cancelled comes out alone: no group, no note saying the runtime failed
    (nothing did), and the enclosing scope catches it."""
    seen: list[BaseException] = []
    with trio.CancelScope() as scope:
        try:
            async with opened(kind, tmp_path) as runtime:
                await runtime.start(sleeper, run_id="r")
                scope.cancel()
                await trio.sleep_forever()
        except BaseException as exc:
            seen.append(exc)
            raise
    assert scope.cancelled_caught
    assert len(seen) == 1
    assert type(seen[0]) is trio.Cancelled, repr(seen[0])
    assert not getattr(seen[0], "__notes__", None)


@pytest.mark.parametrize("kind", STORES)
async def test_a_block_that_returns_under_an_enclosing_cancel_comes_out_as_nothing(
    kind: str, tmp_path: Path
) -> None:
    """The block returned before it met the cancel: leaving the runtime raises nothing
    (its shutdown is shielded); the cancel takes effect at the caller's next checkpoint."""
    after: list[str] = []
    with trio.CancelScope() as scope:
        async with opened(kind, tmp_path) as runtime:
            await runtime.start(sleeper, run_id="r")
            scope.cancel()
        after.append("left the runtime")
        await trio.lowlevel.checkpoint()
        after.append("not reached")
    assert after == ["left the runtime"]
    assert scope.cancelled_caught


@pytest.mark.parametrize("kind", STORES)
async def test_an_exception_from_the_block_comes_out_unwrapped_without_notes(
    kind: str, tmp_path: Path
) -> None:
    async def block() -> None:
        async with opened(kind, tmp_path) as runtime:
            await runtime.start(sleeper, run_id="r")
            raise LookupError("mine")

    with pytest.raises(LookupError) as info:
        await block()
    assert type(info.value) is LookupError
    assert not getattr(info.value, "__notes__", None)


@pytest.mark.parametrize("kind", STORES)
async def test_a_group_the_block_raised_comes_out_as_the_same_group(
    kind: str, tmp_path: Path
) -> None:
    """The caller's own groups are theirs: only interrupts are taken out of them."""

    async def fail() -> None:
        raise LookupError("mine")

    async def block() -> None:
        async with opened(kind, tmp_path), trio.open_nursery() as nursery:
            nursery.start_soon(fail)

    with pytest.raises(ExceptionGroup) as info:
        await block()
    assert [type(leaf) for leaf in leaves(info.value)] == [LookupError]
    assert not getattr(info.value, "__notes__", None)


# ---------------------------------------------------------------- interrupts


def run_expecting(kind: type[BaseException], main: Callable[[], Awaitable[None]]) -> None:
    """Run ``main`` in a fresh Trio run: exactly ``kind`` comes out, not a group."""
    with pytest.raises(BaseException) as info:
        trio.run(main)
    assert type(info.value) is kind, repr(info.value)


def in_a_nursery(exc: type[BaseException]) -> Callable[[Runtime], Awaitable[None]]:
    async def block(runtime: Runtime) -> None:
        async with trio.open_nursery() as nursery:

            async def interrupt() -> None:
                raise exc

            nursery.start_soon(interrupt)
            await trio.sleep_forever()

    return block


async def through_events(runtime: Runtime) -> None:
    """A real SIGINT while the block follows the event log (the case of a worker that
    tails its events and is stopped with Ctrl-C)."""

    async def signal_soon() -> None:
        await trio.testing.wait_all_tasks_blocked()
        signal.raise_signal(signal.SIGINT)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(signal_soon)
        async for _ in runtime.events(follow=True):
            pass


async def through_wait(runtime: Runtime) -> None:
    """A real SIGINT while the block waits for a submitted run that a worker serves."""
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.serve)
        handle = await runtime.submit("sleeper", run_id="r")
        nursery.start_soon(signal_soon_after_blocked)
        await handle.wait()


async def through_serve(runtime: Runtime) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(signal_soon_after_blocked)
        await runtime.serve()


async def signal_soon_after_blocked() -> None:
    # On SQLite the store's thread keeps the run from ever being "all blocked"; a short
    # real sleep lets the block reach its wait, which is what the signal must interrupt.
    await trio.sleep(0.05)
    signal.raise_signal(signal.SIGINT)


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize(
    ("raised", "block"),
    [
        (KeyboardInterrupt, in_a_nursery(KeyboardInterrupt)),
        (SystemExit, in_a_nursery(SystemExit)),
        (KeyboardInterrupt, through_events),
        (KeyboardInterrupt, through_wait),
        (KeyboardInterrupt, through_serve),
    ],
    ids=["ki-nursery", "exit-nursery", "sigint-events", "sigint-wait", "sigint-serve"],
)
def test_an_interrupt_that_crossed_a_nursery_comes_out_as_itself(
    kind: str,
    raised: type[BaseException],
    block: Callable[[Runtime], Awaitable[None]],
    tmp_path: Path,
) -> None:
    async def main() -> None:
        with trio.fail_after(30):
            async with opened(kind, tmp_path) as runtime:
                await block(runtime)

    run_expecting(raised, main)
