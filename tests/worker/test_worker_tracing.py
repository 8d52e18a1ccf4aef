"""Tracing across runtimes: a recovered attempt has a span of its own, and the lost one's
span ends with no state of its own."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import trio
import trio.testing
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from awaken_trio import RunContext, RunState, Runtime, open_runtime
from awaken_trio.store import MemoryStore
from tests.worker.worker_helpers import (
    LEASE,
    NATURAL,
    POLL,
    Body,
    Stall,
    is_ended,
    past_lease,
    serving,
    until_state,
)


def traced_provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def attributes(span: ReadableSpan) -> dict[str, object]:
    return dict(span.attributes or {})


async def test_a_recovered_attempt_has_its_own_span_and_the_lost_ones_ends_without_a_state(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    provider_a, spans_a = traced_provider()
    provider_b, spans_b = traced_provider()
    finish = trio.Event()
    lost = trio.Event()

    async def in_a(ctx: RunContext) -> object:
        await ctx.boundary({"step": 1})
        try:
            await trio.sleep_forever()
        finally:
            lost.set()

    async def in_b(ctx: RunContext) -> object:
        await finish.wait()
        return "by b"

    def opened(
        provider: TracerProvider, name: str, body: Body
    ) -> AbstractAsyncContextManager[Runtime]:
        return open_runtime(
            shared_store,
            clock=trio.current_time,
            bodies={name: body},
            lease=LEASE,
            poll=POLL,
            tracer_provider=provider,
        )

    try:
        async with (
            opened(provider_a, "w", in_a) as a,
            opened(provider_b, "w", in_b) as b,
        ):
            await a.start(in_a, run_id="r")
            await trio.testing.wait_all_tasks_blocked()
            with Stall(a):
                async with serving(b):
                    await past_lease()
                    assert await b.state("r") == RunState.Running(2)
                    finish.set()
                    assert await until_state(b, "r", is_ended) == NATURAL
                    with trio.fail_after(600):
                        await lost.wait()
        (recovered,) = spans_b.get_finished_spans()
        assert recovered.name == "awaken_trio.attempt"
        assert attributes(recovered) == {
            "awaken.run_id": "r",
            "awaken.thread_id": "r",
            "awaken.generation": 2,
            "awaken.name": "w",
            "awaken.state": "ended",
            "awaken.end_cause": "natural_end",
        }
        (first,) = spans_a.get_finished_spans()
        assert attributes(first)["awaken.generation"] == 1
        assert "awaken.state" not in attributes(first)  # lost: it committed no end
        assert [event.name for event in first.events] == ["awaken.cancel_requested"]
        assert dict(first.events[0].attributes or {})["awaken.cancel_source"] == "lost"
    finally:
        provider_a.shutdown()
        provider_b.shutdown()
