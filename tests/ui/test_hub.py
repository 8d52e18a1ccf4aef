"""The event hub: one follower of the store's events for every open page; a page that
falls behind loses its stream rather than holding the others back; closing ends them all."""

from __future__ import annotations

import pytest
import trio

from awaken_trio import RunEvent, open_runtime
from awaken_trio._ui import EventHub
from awaken_trio._ui._hub import SUBSCRIBER_BUFFER

pytestmark = pytest.mark.usefixtures("autojump_clock")


async def test_the_hub_knows_each_runs_first_and_last_event_before_it_reports_started() -> None:
    async with open_runtime() as runtime, trio.open_nursery() as nursery:
        await runtime.submit("x", run_id="a")
        await runtime.submit("x", run_id="b")
        await runtime.stop_run("a", "why")
        events = [e async for e in runtime.events(follow=False)]
        hub = EventHub(runtime)
        await nursery.start(hub.run)
        a = hub.activity("a")
        assert a is not None
        first_a = next(e for e in events if e.run_id == "a")
        assert (a.created_at, a.last_kind, a.last_seq) == (first_a.at, "committed", events[-1].seq)
        assert hub.seq == events[-1].seq
        assert hub.activity("nobody") is None
        nursery.cancel_scope.cancel()


async def test_a_subscriber_gets_the_events_after_it_subscribed_in_order() -> None:
    async with open_runtime() as runtime, trio.open_nursery() as nursery:
        await runtime.submit("x", run_id="before")
        hub = EventHub(runtime)
        await nursery.start(hub.run)
        with hub.subscribe() as events:
            await runtime.submit("x", run_id="after")
            await runtime.cancel_run("after")
            got = [await events.receive(), await events.receive()]
        before = hub.activity("before")
        assert before is not None
        assert [e.run_id for e in got] == ["after", "after"]
        assert before.last_seq < got[0].seq
        assert got[0].seq < got[1].seq
        nursery.cancel_scope.cancel()


async def test_a_subscriber_that_falls_behind_is_closed_and_the_others_keep_up() -> None:
    async with open_runtime() as runtime, trio.open_nursery() as nursery:
        hub = EventHub(runtime)
        await nursery.start(hub.run)
        last = f"r{SUBSCRIBER_BUFFER + 4}"
        received: list[RunEvent] = []
        caught_up = trio.Event()
        with hub.subscribe() as slow, hub.subscribe() as quick:
            async with trio.open_nursery() as readers:

                async def keep_up() -> None:
                    async for event in quick:
                        received.append(event)
                        if event.run_id == last:
                            caught_up.set()

                readers.start_soon(keep_up)
                for n in range(SUBSCRIBER_BUFFER + 5):
                    await runtime.submit("x", run_id=f"r{n}")
                await caught_up.wait()
                readers.cancel_scope.cancel()
            drained = [e async for e in slow]  # what was buffered, then the end
        assert len(drained) == SUBSCRIBER_BUFFER
        assert [e.run_id for e in drained] == [f"r{n}" for n in range(SUBSCRIBER_BUFFER)]
        assert len(received) == SUBSCRIBER_BUFFER + 5
        nursery.cancel_scope.cancel()


async def test_closing_the_hub_ends_every_stream_and_a_later_one_at_once() -> None:
    async with open_runtime() as runtime, trio.open_nursery() as nursery:
        hub = EventHub(runtime)
        await nursery.start(hub.run)
        with hub.subscribe() as events:
            hub.close()
            with pytest.raises(trio.EndOfChannel):
                await events.receive()
        with hub.subscribe() as late, pytest.raises(trio.EndOfChannel):
            await late.receive()
        nursery.cancel_scope.cancel()


async def test_when_the_runtime_closes_the_streams_end() -> None:
    async with trio.open_nursery() as nursery:
        async with open_runtime() as runtime:
            hub = EventHub(runtime)
            await nursery.start(hub.run)
            subscription = hub.subscribe()
            events = subscription.__enter__()
        with trio.fail_after(10):
            with pytest.raises(trio.EndOfChannel):
                await events.receive()
        subscription.__exit__(None, None, None)
