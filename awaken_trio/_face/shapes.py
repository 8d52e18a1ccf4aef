"""What every face shows: the JSON shapes of DESIGN §3.3 (built on the store codec's
state encoding), which the command line prints with ``--json``, the dashboard's API
answers and its pages are drawn from; and the same values as short text for people."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from typing import Final

from .. import EndCause, JsonValue, RunEvent, RunRecord, RunState, StreamChunk, WorkerRecord
from ..store import state_to_json

# ---------------------------------------------------------------------------- JSON


def row_json(record: RunRecord) -> dict[str, JsonValue]:
    return {
        "run_id": record.run_id,
        "thread_id": record.thread_id,
        "parent_run_id": record.parent_run_id,
        "name": record.name,
        "state": state_to_json(record.state),
        "generation": record.generation,
        "created_at": record.created_at,
        "started_at": record.started_at,
        "ended_at": record.ended_at,
    }


def record_json(record: RunRecord) -> dict[str, JsonValue]:
    return {
        **row_json(record),
        "result": record.result,
        "checkpoint": record.checkpoint,
        "forked_from": record.forked_from,
        "updated_at": record.updated_at,
        "worker_id": record.worker_id,
        "body_version": record.body_version,
        "deadline": record.deadline,
        "retry": None if record.retry is None else record.retry.to_json(),
        "retries": record.retries,
        "not_before": record.not_before,
    }


def worker_json(worker: WorkerRecord) -> dict[str, JsonValue]:
    """A worker as ``--json`` and ``GET /api/workers`` give it (DESIGN §3.6)."""
    return {
        "worker_id": worker.worker_id,
        "host": worker.host,
        "pid": worker.pid,
        "state": worker.state,
        "started_at": worker.started_at,
        "last_seen": worker.last_seen,
        "bodies": dict(worker.bodies),
        "concurrency": worker.concurrency,
        "active": worker.active,
    }


def event_json(event: RunEvent) -> dict[str, JsonValue]:
    return {
        "seq": event.seq,
        "run_id": event.run_id,
        "thread_id": event.thread_id,
        "generation": event.generation,
        "kind": event.kind,
        "state": state_to_json(event.state),
        "detail": event.detail,
        "at": event.at,
    }


def chunk_json(chunk: StreamChunk) -> dict[str, JsonValue]:
    """A stream chunk (DESIGN §3.9): ``{"offset", "generation", "kind", "value", "at"}``."""
    return {
        "offset": chunk.offset,
        "generation": chunk.generation,
        "kind": chunk.kind,
        "value": chunk.value,
        "at": chunk.at,
    }


def dumps(value: JsonValue) -> str:
    """One line of JSON (non-ASCII text kept as is)."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


# ---------------------------------------------------------------------------- text


FIRST_TIME_SHOWN: Final = -62135596800.0
"""0001-01-01T00:00:00Z: the earliest time shown as a date (as the page's script)."""
END_OF_TIMES_SHOWN: Final = 253402300800.0
"""10000-01-01T00:00:00Z: the first time past those shown as a date."""


def format_time(at: float, *, date: bool = True) -> str:
    """A time (seconds since the epoch: an event's ``at``, a deadline) as local time,
    ``2024-05-01 12:00:03`` (or the time of day alone), for people.

    A time no calendar date stands for here (before the year 1, from the year 10000, not
    finite: a deadline of 1e18, an odd injected clock) is shown as its number, written as
    JavaScript writes a number, because the page's script (``formatTime`` in
    ``dashboard.js``) shows the times it adds by this same rule.
    """
    if math.isfinite(at) and FIRST_TIME_SHOWN <= at < END_OF_TIMES_SHOWN:
        try:
            return time.strftime("%Y-%m-%d %H:%M:%S" if date else "%H:%M:%S", time.localtime(at))
        except (OverflowError, OSError, ValueError):
            pass  # a platform whose calendar is narrower
    return _js_number(at)


def _js_number(value: float) -> str:
    """``String(value)`` in JavaScript, for the numbers `format_time` shows as such."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return repr(value)


def format_duration(seconds: float) -> str:
    """A length of time for people: ``0.4s``, ``12.0s``, ``3m 04s``, ``2h 03m``, ``3d 04h``
    (as the page's script's ``formatDuration``); a negative or unknown one is ``""``."""
    if not math.isfinite(seconds) or seconds < 0:
        return ""
    if seconds < 59.95:  # (what would show as 60.0s is a minute)
        return f"{seconds:.1f}s"
    whole = max(60, int(seconds))  # (59.95 and up: a minute)
    for unit, size, smaller, small_size in (
        ("d", 86400, "h", 3600),
        ("h", 3600, "m", 60),
        ("m", 60, "s", 1),
    ):
        if whole >= size:
            return f"{whole // size}{unit} {whole % size // small_size:02d}{smaller}"
    raise AssertionError("unreachable: a minute or more has a unit")


def run_duration(
    created_at: float | None, started_at: float | None, ended_at: float | None, now: float
) -> float | None:
    """How long a run has run: from its first ``Running`` (else its creation) to its end
    (else ``now``); None while it has neither run nor ended (queued, its age says how long).
    As the page's script's ``runDuration``."""
    begun = started_at if started_at is not None else created_at
    if begun is None or (started_at is None and ended_at is None):
        return None
    return (now if ended_at is None else ended_at) - begun


def cause_word(state: RunState) -> str:
    """How a run ended, as the cause's kind (``natural_end``, ``failed``, ``cancelled``
    ...), or ``""`` while it has not: what the dashboard colours a row by."""
    if not isinstance(state, RunState.Ended):
        return ""
    kind = state_to_json(state)["cause"]
    assert isinstance(kind, Mapping)
    return str(kind["kind"])


def describe_cause(cause: EndCause) -> str:
    match cause:
        case EndCause.Stopped(reason):
            return f"stopped ({reason})"
        case EndCause.Failed(code, message):
            return f"failed ({code}: {message})" if message else f"failed ({code})"
        case EndCause.Indeterminate(reason):
            return f"indeterminate ({reason})"
    kind = state_to_json(RunState.Ended(cause))["cause"]
    assert isinstance(kind, Mapping)
    return str(kind["kind"]).replace("_", " ")


def describe_state(state: RunState) -> str:
    """A state in a few words: ``queued``, ``running (generation 2)``, ``awaiting
    manual_pause``, ``ended: stopped (budget)``."""
    match state:
        case RunState.Running(generation):
            return f"running (generation {generation})"
        case RunState.Awaiting(ticket):
            return f"awaiting {ticket.reason} (ticket {ticket.correlation_id})"
        case RunState.Ended(cause):
            return f"ended: {describe_cause(cause)}"
    return "queued"


def state_word(state: RunState) -> str:
    """The state's kind alone: ``queued``, ``running``, ``awaiting``, ``ended``."""
    return str(state_to_json(state)["kind"])


def end_of(state: RunState) -> str:
    """How a run ended (cause and reason), or ``""`` while it has not."""
    return describe_cause(state.cause) if isinstance(state, RunState.Ended) else ""


def describe_detail(detail: Mapping[str, JsonValue]) -> str:
    return "" if not detail else dumps(dict(detail))


SUMMARY_LENGTH: Final = 120
"""The most characters `event_summary` writes."""


def event_summary(kind: str, detail: Mapping[str, JsonValue]) -> str:
    """An event in one short line: its kind, then its detail as compact JSON (a failure's
    traceback left out: a run's page shows it whole), cut at `SUMMARY_LENGTH` characters."""
    shown = {key: value for key, value in detail.items() if key != "traceback"}
    text = f"{kind} {dumps(shown)}" if shown else kind
    return text if len(text) <= SUMMARY_LENGTH else text[: SUMMARY_LENGTH - 1] + "…"


def when(at: float | None) -> str:
    """A time as `format_time` shows it, ``""`` when not known."""
    return "" if at is None else format_time(at)


def duration_of(record: RunRecord, now: float) -> str:
    """A run's `run_duration` for people (`format_duration`), ``""`` while it has none."""
    seconds = run_duration(record.created_at, record.started_at, record.ended_at, now)
    return "" if seconds is None else format_duration(seconds)


def describe_retry(record: RunRecord) -> str | None:
    """A run's retry policy and where it stands, for people (None: no policy):
    ``1 of 2 retries used (3 attempts; waits 1.0s, x2, at most 1m 00s); next try
    2024-05-01 12:00:03``."""
    policy = record.retry
    if policy is None:
        return None
    allowed = policy.attempts - 1
    text = (
        f"{record.retries} of {allowed} {'retry' if allowed == 1 else 'retries'} used"
        f" ({policy.attempts} {'attempt' if policy.attempts == 1 else 'attempts'};"
        f" waits {format_duration(policy.backoff)}, x{policy.factor:g},"
        f" at most {format_duration(policy.max_backoff)}"
    )
    if policy.codes is not None:
        text += f"; codes {', '.join(policy.codes)}"
    text += ")"
    waiting = record.not_before
    if record.retries and isinstance(record.state, RunState.Queued) and waiting is not None:
        text += f"; next try {format_time(waiting)}"
    return text
