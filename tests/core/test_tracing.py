"""Tracing (DESIGN §3.6): a span ``awaken_trio.attempt`` per attempt, its attributes and
events, child runs as child spans, checked against the SDK's in-memory exporter."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trio
import trio.testing
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    INVALID_SPAN_CONTEXT,
    NonRecordingSpan,
    Span,
    Tracer,
)
from opentelemetry.trace import TracerProvider as OtelTracerProvider

from awaken_trio import (
    EndCause,
    InvalidArgument,
    JsonValue,
    LiveCommand,
    RunContext,
    RunState,
    Runtime,
    open_runtime,
)
from awaken_trio.store import MemoryStore
from tests.run_helpers import reach, settle


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.shutdown()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


@pytest.fixture
async def traced(provider: TracerProvider) -> AsyncIterator[Runtime]:
    async with open_runtime(MemoryStore(), tracer_provider=provider) as runtime:
        yield runtime


def spans_of(exporter: InMemorySpanExporter, run_id: str) -> list[ReadableSpan]:
    return [
        span
        for span in exporter.get_finished_spans()
        if (span.attributes or {}).get("awaken.run_id") == run_id
    ]


def only_span(exporter: InMemorySpanExporter, run_id: str) -> ReadableSpan:
    (span,) = spans_of(exporter, run_id)
    return span


def event_names(span: ReadableSpan) -> list[str]:
    return [event.name for event in span.events]


async def test_a_run_that_returns_has_one_span_with_every_attribute(
    traced: Runtime, exporter: InMemorySpanExporter
) -> None:
    async def body(ctx: RunContext) -> JsonValue:
        await ctx.boundary({"step": 1})
        return "done"

    traced.register("job", body)
    handle = await traced.start(body, run_id="r1", thread_id="t1")
    assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
    span = only_span(exporter, "r1")
    assert span.name == "awaken_trio.attempt"
    assert span.parent is None
    assert dict(span.attributes or {}) == {
        "awaken.run_id": "r1",
        "awaken.thread_id": "t1",
        "awaken.generation": 1,
        "awaken.name": "job",
        "awaken.state": "ended",
        "awaken.end_cause": "natural_end",
    }
    assert event_names(span) == []


async def test_a_run_with_no_name_leaves_the_name_out(
    traced: Runtime, exporter: InMemorySpanExporter
) -> None:
    async def body(ctx: RunContext) -> JsonValue:
        raise ValueError("boom")

    handle = await traced.start(body, run_id="r2")
    assert isinstance(await settle(handle), RunState.Ended)
    attributes = dict(only_span(exporter, "r2").attributes or {})
    assert "awaken.name" not in attributes
    assert attributes["awaken.thread_id"] == "r2"
    assert attributes["awaken.end_cause"] == "failed"
    assert "awaken.cancel_source" not in attributes
    assert "awaken.reason" not in attributes


async def test_a_cancel_records_its_request_its_source_and_its_reason(
    traced: Runtime, exporter: InMemorySpanExporter
) -> None:
    entered = trio.Event()

    async def body(ctx: RunContext) -> JsonValue:
        entered.set()
        await trio.sleep_forever()

    handle = await traced.start(body, run_id="c1")
    await reach(entered)
    await traced.cancel_run("c1", reason="user asked")
    assert await settle(handle) == RunState.Ended(EndCause.Cancelled())
    span = only_span(exporter, "c1")
    attributes = dict(span.attributes or {})
    assert attributes["awaken.state"] == "ended"
    assert attributes["awaken.end_cause"] == "cancelled"
    assert attributes["awaken.cancel_source"] == "cancel_run"
    assert attributes["awaken.reason"] == "user asked"
    assert event_names(span) == ["awaken.cancel_requested"]
    assert dict(span.events[0].attributes or {}) == {
        "awaken.cancel_source": "cancel_run",
        "awaken.reason": "user asked",
    }


async def test_a_live_cancel_with_no_reason_leaves_the_reason_out(
    traced: Runtime, exporter: InMemorySpanExporter
) -> None:
    entered = trio.Event()

    async def body(ctx: RunContext) -> JsonValue:
        entered.set()
        await trio.sleep_forever()

    handle = await traced.start(body, run_id="c2")
    await reach(entered)
    traced.deliver(LiveCommand.Cancel("c2"))
    assert await settle(handle) == RunState.Ended(EndCause.Cancelled())
    span = only_span(exporter, "c2")
    attributes = dict(span.attributes or {})
    assert attributes["awaken.cancel_source"] == "deliver"
    assert "awaken.reason" not in attributes
    assert dict(span.events[0].attributes or {}) == {"awaken.cancel_source": "deliver"}


async def test_a_stop_records_its_reason_and_a_late_result(
    traced: Runtime, exporter: InMemorySpanExporter
) -> None:
    entered = trio.Event()

    async def body(ctx: RunContext) -> JsonValue:
        with trio.CancelScope(shield=True):
            entered.set()
            await trio.sleep(1)
        return "late"

    handle = await traced.start(body, run_id="s1")
    await reach(entered)
    await traced.stop_run("s1", "budget")
    assert await settle(handle) == RunState.Ended(EndCause.Stopped("budget"))
    span = only_span(exporter, "s1")
    attributes = dict(span.attributes or {})
    assert attributes["awaken.end_cause"] == "stopped"
    assert attributes["awaken.cancel_source"] == "stop_run"
    assert attributes["awaken.reason"] == "budget"
    assert event_names(span) == ["awaken.cancel_requested", "awaken.late_result"]


async def test_a_child_runs_span_is_a_child_of_its_parents_attempt_span(
    traced: Runtime, exporter: InMemorySpanExporter
) -> None:
    async def child(ctx: RunContext) -> JsonValue:
        return "child"

    async def grandchild_parent(ctx: RunContext) -> JsonValue:
        await ctx.run_child(child, run_id="g")
        return "middle"

    async def parent(ctx: RunContext) -> JsonValue:
        await ctx.run_child(grandchild_parent, run_id="m")
        return "parent"

    handle = await traced.start(parent, run_id="p")
    await settle(handle)
    top, middle, bottom = (only_span(exporter, run_id) for run_id in ("p", "m", "g"))
    assert top.parent is None
    assert middle.parent is not None
    assert top.context is not None
    assert middle.parent.span_id == top.context.span_id
    assert bottom.parent is not None
    assert middle.context is not None
    assert bottom.parent.span_id == middle.context.span_id
    assert bottom.context is not None
    assert bottom.context.trace_id == top.context.trace_id


async def test_a_pause_ends_the_span_awaiting_and_the_resume_has_a_span_of_its_own(
    traced: Runtime, exporter: InMemorySpanExporter, autojump_clock: trio.testing.MockClock
) -> None:
    at_gate = trio.Event()
    gate = trio.Event()

    async def body(ctx: RunContext) -> JsonValue:
        if ctx.generation == 1:
            at_gate.set()
            await gate.wait()
        await ctx.boundary({"step": ctx.generation})
        return "done"

    handle = await traced.start(body, run_id="pz")
    await reach(at_gate)
    traced.deliver(LiveCommand.Pause("pz"))
    gate.set()
    assert isinstance(await settle(handle), RunState.Awaiting)
    resumed = await traced.resume("pz", None)
    await settle(resumed)
    first, second = sorted(spans_of(exporter, "pz"), key=lambda s: s.start_time or 0)
    assert dict(first.attributes or {})["awaken.state"] == "awaiting"
    assert "awaken.end_cause" not in dict(first.attributes or {})
    assert event_names(first) == ["awaken.pause"]
    assert dict(second.attributes or {})["awaken.generation"] == 2
    assert dict(second.attributes or {})["awaken.state"] == "ended"
    assert event_names(second) == []


async def test_messages_a_run_never_read_are_a_span_event(
    traced: Runtime, exporter: InMemorySpanExporter
) -> None:
    entered = trio.Event()
    release = trio.Event()

    async def body(ctx: RunContext) -> JsonValue:
        entered.set()
        await release.wait()
        return "unread"

    handle = await traced.start(body, run_id="mm")
    await reach(entered)
    traced.deliver(LiveCommand.Message("mm", {"n": 1}))
    traced.deliver(LiveCommand.Message("mm", {"n": 2}))
    release.set()
    await settle(handle)
    span = only_span(exporter, "mm")
    assert event_names(span) == ["awaken.messages_discarded"]
    assert dict(span.events[0].attributes or {}) == {"awaken.count": 2}


async def test_shutdown_ends_every_span_stopped_by_shutdown(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    entered = trio.Event()

    async def body(ctx: RunContext) -> JsonValue:
        entered.set()
        await trio.sleep_forever()

    async with open_runtime(MemoryStore(), tracer_provider=provider) as runtime:
        await runtime.start(body, run_id="sd")
        await reach(entered)
        assert spans_of(exporter, "sd") == []  # still open while the attempt runs
    span = only_span(exporter, "sd")
    attributes = dict(span.attributes or {})
    assert attributes["awaken.end_cause"] == "stopped"
    assert attributes["awaken.cancel_source"] == "shutdown"
    assert attributes["awaken.reason"] == "runtime shutdown"
    assert event_names(span) == ["awaken.cancel_requested"]


async def test_a_provider_that_is_not_one_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="TracerProvider"):
        async with open_runtime(tracer_provider=object()):
            pass  # pragma: no cover - refused before the block


async def test_without_the_extra_a_provider_is_refused_naming_the_extra(
    provider: TracerProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if opentelemetry were not installed: its import fails.
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.delitem(sys.modules, "awaken_trio._otel", raising=False)
    with pytest.raises(InvalidArgument, match=r"pip install -e '\.\[otel\]'"):
        async with open_runtime(tracer_provider=provider):
            pass  # pragma: no cover - refused before the block


def test_a_runtime_without_a_provider_imports_no_opentelemetry() -> None:
    code = (
        "import sys, trio\n"
        "from awaken_trio import open_runtime\n"
        "async def main():\n"
        "    async with open_runtime() as rt:\n"
        "        async def body(ctx):\n"
        "            return 1\n"
        "        await (await rt.start(body)).wait()\n"
        "trio.run(main)\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


class RaisingTracer(Tracer):
    """A tracer whose every span raises: a broken provider must not break a run."""

    def start_span(self, *args: object, **kwargs: object) -> Span:
        return RaisingSpan(INVALID_SPAN_CONTEXT)

    def start_as_current_span(self, *args: object, **kwargs: object) -> Any:
        raise AssertionError("not used")  # pragma: no cover


class RaisingSpan(NonRecordingSpan):
    def add_event(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("add_event broke")

    def set_attributes(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("set_attributes broke")


class RaisingProvider(OtelTracerProvider):
    def __init__(self, *, on_start: bool) -> None:
        self.on_start = on_start

    def get_tracer(self, *args: object, **kwargs: object) -> Tracer:
        if self.on_start:
            return BrokenTracer()
        return RaisingTracer()


class BrokenTracer(RaisingTracer):
    def start_span(self, *args: object, **kwargs: object) -> Span:
        raise RuntimeError("start_span broke")


@pytest.mark.parametrize("on_start", [True, False], ids=["start", "event-and-end"])
async def test_a_provider_that_raises_leaves_every_run_as_it_would_be(
    on_start: bool, caplog: pytest.LogCaptureFixture
) -> None:
    entered = trio.Event()

    async def body(ctx: RunContext) -> JsonValue:
        entered.set()
        await trio.sleep_forever()

    async def quick(ctx: RunContext) -> JsonValue:
        return 1

    async with open_runtime(
        MemoryStore(), tracer_provider=RaisingProvider(on_start=on_start)
    ) as runtime:
        assert await settle(await runtime.start(quick)) == RunState.Ended(EndCause.NaturalEnd())
        handle = await runtime.start(body, run_id="x")
        await reach(entered)
        assert await runtime.cancel_run("x", reason="r") == RunState.Ended(EndCause.Cancelled())
        assert await settle(handle) == RunState.Ended(EndCause.Cancelled())
    messages = [r.getMessage() for r in caplog.records if r.name == "awaken_trio"]
    assert messages
    assert all(m.startswith("tracing: ") and "broke" in m for m in messages)


async def test_a_span_whose_attributes_cannot_be_set_is_still_ended(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ended: list[int] = []

    class Counted(RaisingSpan):
        def end(self, end_time: int | None = None) -> None:
            ended.append(1)

    class CountedTracer(RaisingTracer):
        def start_span(self, *args: object, **kwargs: object) -> Span:
            return Counted(INVALID_SPAN_CONTEXT)

    class CountedProvider(OtelTracerProvider):
        def get_tracer(self, *args: object, **kwargs: object) -> Tracer:
            return CountedTracer()

    async def quick(ctx: RunContext) -> JsonValue:
        return 1

    async with open_runtime(MemoryStore(), tracer_provider=CountedProvider()) as runtime:
        assert await settle(await runtime.start(quick)) == RunState.Ended(EndCause.NaturalEnd())
    assert ended == [1]
