"""The held look's invariant (``_held.HeldLooks``), on Trio's clock alone: while a look is
held every batch is written in it, and a look is taken only once no batch is being
applied; batches that come while one is being taken wait for it."""

from __future__ import annotations

from typing import Any, cast

import trio
import trio.testing

from awaken_trio.store.postgres._held import HeldLook, HeldLooks


def _look(name: str) -> HeldLook:
    return HeldLook(cast("Any", name), [], [], {}, {}, {}, 0.0, 0.0)


async def test_a_batch_applied_while_a_look_is_held_takes_it_and_the_next_does_not() -> None:
    looks = HeldLooks()
    held = _look("a")

    async def found() -> HeldLook:
        return held

    assert await looks.take(found) is held
    assert looks.busy
    async with looks.applying() as first:
        assert first is held
        assert not looks.busy
    async with looks.applying() as second:
        assert second is None
    assert not looks.give_up(held)  # a batch took it: nothing to let go


async def test_a_look_no_batch_took_is_given_up_once() -> None:
    looks = HeldLooks()
    held = _look("a")

    async def found() -> HeldLook:
        return held

    await looks.take(found)
    assert looks.give_up(held)
    assert not looks.give_up(held)
    assert not looks.busy
    async with looks.applying() as applied:
        assert applied is None


async def test_a_look_that_found_nothing_holds_nothing() -> None:
    looks = HeldLooks()

    async def nothing() -> None:
        await trio.lowlevel.checkpoint()

    assert await looks.take(nothing) is None
    assert not looks.busy


async def test_a_look_waits_for_the_batches_being_applied(
    autojump_clock: trio.testing.MockClock,
) -> None:
    looks = HeldLooks()
    order: list[str] = []
    held = _look("a")

    async def found() -> HeldLook:
        order.append("look")
        return held

    async def batch(name: str, seconds: float) -> None:
        async with looks.applying() as taken:
            assert taken is None
            order.append(f"{name} begins")
            await trio.sleep(seconds)
            order.append(f"{name} ends")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(batch, "one", 2.0)
        nursery.start_soon(batch, "two", 1.0)
        await trio.sleep(0.5)
        assert await looks.take(found) is held
    # (The two batches begin in either order.)
    assert sorted(order[:2]) == ["one begins", "two begins"]
    assert order[2:] == ["two ends", "one ends", "look"]


async def test_a_batch_that_comes_while_a_look_is_taken_waits_and_is_written_in_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    looks = HeldLooks()
    held = _look("a")
    taking = trio.Event()
    got: list[HeldLook | None] = []

    async def slow() -> HeldLook:
        taking.set()
        await trio.sleep(1.0)
        return held

    async def batch() -> None:
        async with looks.applying() as taken:
            got.append(taken)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(looks.take, slow)
        await taking.wait()
        assert looks.busy
        nursery.start_soon(batch)
        await trio.sleep(0.5)
        assert got == []  # waiting for the look
    assert got == [held]
    assert not looks.busy


async def test_a_look_cancelled_while_taken_holds_nothing_and_frees_the_batches(
    autojump_clock: trio.testing.MockClock,
) -> None:
    looks = HeldLooks()
    got: list[HeldLook | None] = []

    async def never() -> HeldLook:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def batch() -> None:
        async with looks.applying() as taken:
            got.append(taken)

    async with trio.open_nursery() as nursery:
        with trio.move_on_after(1.0):
            async with trio.open_nursery() as inner:
                inner.start_soon(looks.take, never)
                await trio.sleep(0.1)
                nursery.start_soon(batch)
                await trio.sleep_forever()
    assert got == [None]
    assert not looks.busy
