"""OpenTelemetry tracing of attempts (the ``[otel]`` extra): a span per attempt.

Imported only when ``open_runtime(..., tracer_provider=...)`` is given a provider, so the
runtime needs no OpenTelemetry package otherwise. The names and attributes are a contract
(DESIGN §3.6): a span ``awaken_trio.attempt`` per attempt with ``awaken.run_id``,
``awaken.thread_id``, ``awaken.generation`` and ``awaken.name`` from its start, and
``awaken.state``, ``awaken.end_cause``, ``awaken.cancel_source`` and ``awaken.reason`` at its
end; attributes with no value are left out. A child run's span is a child of its parent
attempt's span.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, final

from opentelemetry import trace

from ._core import (
    Awaiting,
    Cancelled,
    Ended,
    InvalidArgument,
    Queued,
    Running,
    RunState,
    Stopped,
)

if TYPE_CHECKING:
    from ._core import Attempt, Attribute, JsonValue

SPAN_NAME = "awaken_trio.attempt"

logger = logging.getLogger("awaken_trio")

_STATE_NAMES: dict[type[RunState], str] = {
    Ended: "ended",
    Awaiting: "awaiting",
    Queued: "queued",
    Running: "running",
}


def _failed(what: str, exc: Exception) -> None:
    # A tracer provider is the caller's code: whatever it raises must not reach the run's
    # own path (a cancel request, the end's commit), which never raises.
    logger.error("tracing: %s failed: %r (the run is unaffected)", what, exc, exc_info=exc)


def _kept(attributes: Mapping[str, Attribute | None]) -> dict[str, Attribute]:
    return {key: value for key, value in attributes.items() if value is not None}


@final
class OtelSpan:
    """One attempt's span (an `AttemptSpan`)."""

    __slots__ = ("span",)

    def __init__(self, span: trace.Span) -> None:
        self.span = span

    def event(self, name: str, attributes: Mapping[str, Attribute | None]) -> None:
        try:
            self.span.add_event(name, _kept(attributes))
        except Exception as exc:
            _failed(f"adding the span event {name!r}", exc)

    def ended(self, state: RunState | None, detail: Mapping[str, JsonValue]) -> None:
        try:
            try:
                self._end(state, detail)
            finally:
                self.span.end()  # ended even if recording its end failed
        except Exception as exc:
            _failed("ending a span", exc)

    def _end(self, state: RunState | None, detail: Mapping[str, JsonValue]) -> None:
        from .store._codec import cause_to_json  # its JSON kinds are the contract

        span = self.span
        attributes: dict[str, Attribute | None] = {}
        if state is not None:
            attributes["awaken.state"] = _STATE_NAMES[type(state)]
        if isinstance(state, Awaiting) and state.ticket.reason == "manual_pause":
            span.add_event("awaken.pause")
        if isinstance(state, Ended):
            cause = state.cause
            kind = cause_to_json(cause)["kind"]
            assert isinstance(kind, str)
            attributes["awaken.end_cause"] = kind
            if isinstance(cause, Cancelled | Stopped):
                source, reason = detail.get("source"), detail.get("reason")
                if isinstance(source, str):
                    attributes["awaken.cancel_source"] = source
                if isinstance(reason, str):
                    attributes["awaken.reason"] = reason
                elif isinstance(cause, Stopped):
                    attributes["awaken.reason"] = cause.reason
        span.set_attributes(_kept(attributes))


@final
class OtelObserver:
    """The runtime's `AttemptObserver` when tracing is on."""

    __slots__ = ("tracer",)

    def __init__(self, provider: trace.TracerProvider) -> None:
        self.tracer = provider.get_tracer("awaken_trio")

    def started(self, attempt: Attempt) -> OtelSpan:
        try:
            return self._start(attempt)
        except Exception as exc:
            _failed("starting a span", exc)
            return OtelSpan(trace.INVALID_SPAN)  # records nothing

    def _start(self, attempt: Attempt) -> OtelSpan:
        parent = attempt.parent
        context = None
        if parent is not None and isinstance(parent.span, OtelSpan):
            context = trace.set_span_in_context(parent.span.span)
        span = self.tracer.start_span(
            SPAN_NAME,
            context=context,
            attributes=_kept(
                {
                    "awaken.run_id": attempt.run_id,
                    "awaken.thread_id": attempt.thread_id,
                    "awaken.generation": attempt.generation,
                    "awaken.name": attempt.name,
                }
            ),
        )
        return OtelSpan(span)


def observer_for(provider: object) -> OtelObserver:
    """The observer for ``open_runtime``'s ``tracer_provider``, checked."""
    if not isinstance(provider, trace.TracerProvider):
        raise InvalidArgument(
            "tracer_provider must be an opentelemetry.trace.TracerProvider (for example"
            f" opentelemetry.sdk.trace.TracerProvider()), not {type(provider).__name__}"
        )
    return OtelObserver(provider)
