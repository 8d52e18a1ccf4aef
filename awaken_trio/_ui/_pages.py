"""The dashboard's pages, rendered on the server as HTML text.

Every value that comes from a run (ids, names, payloads, reasons, transcripts) goes
through `esc` (``html.escape`` with quotes), in text and in attributes alike: nothing a
run holds can open a tag or leave an attribute. The pages carry no inline script or style
(the Content-Security-Policy forbids both); ``/static/dashboard.js`` reads what it needs
from ``data-`` attributes.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote, urlencode

from .. import EndCause, JsonValue, RunEvent, RunRecord, RunState
from .._core import Awaiting
from .._face.controls import CONTROL_NAMES, CONTROLS, ControlName, none_offered, unavailable
from .._face.shapes import (
    END_OF_TIMES_SHOWN,
    FIRST_TIME_SHOWN,
    describe_retry,
    describe_state,
    duration_of,
    end_of,
    format_duration,
    format_time,
    record_json,
    run_duration,
    state_word,
    when,
)
from ..store import state_to_json

TRAIL_SHOWN: Final = 500
"""A run's last events its page lists (the API pages through all of them)."""


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def pretty(value: JsonValue) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def run_href(run_id: str) -> str:
    return f"/runs/{quote(run_id, safe='')}"


def _layout(title: str, body: str, **data: str) -> str:
    # ``run_id`` becomes ``data-run-id``, which the script reads as ``dataset.runId``.
    attributes = "".join(
        f' data-{esc(key.replace("_", "-"))}="{esc(value)}"' for key, value in data.items()
    )
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · awaken-trio</title>"
        '<link rel="stylesheet" href="/static/dashboard.css">'
        '<script src="/static/dashboard.js" defer></script>'
        f"</head><body{attributes}>"
        '<header><a class="brand" href="/">awaken-trio</a>'
        '<nav class="pages"><a href="/">runs</a><a href="/workers">workers</a></nav>'
        '<span id="live" class="live" title="live updates">connecting…</span></header>'
        f"<main>{body}</main></body></html>\n"
    )


def _age(created_at: float | None, now: float) -> str:
    """How long ago ``created_at`` was (as the page's script's ``age``); a time no
    calendar date stands for is shown as `format_time` shows it."""
    if created_at is None:
        return ""
    if not FIRST_TIME_SHOWN <= created_at < END_OF_TIMES_SHOWN:
        return format_time(created_at)
    seconds = max(0, int(now - created_at))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def state_classes(state: Mapping[str, Any]) -> str:
    """The classes a state is drawn with (its JSON shape): ``state state-ended
    cause-failed``. A failure is red, a cancel or stop apart from a natural end (as the
    page's script's ``stateClasses``)."""
    kind = str(state["kind"])
    classes = f"state state-{kind}"
    if kind == "ended":
        classes += f" cause-{state['cause']['kind']}"
    return classes


def _state_cell(state: RunState) -> str:
    word = state_word(state)
    end = end_of(state)
    text = f"{word}: {end}" if end else word
    return f'<span class="{esc(state_classes(state_to_json(state)))}">{esc(text)}</span>'


# ---------------------------------------------------------------------------- runs


FILTERS: Final = (
    ("", "any"),
    ("queued", "queued"),
    ("running", "running"),
    ("awaiting", "awaiting"),
    ("ended", "ended (any cause)"),
    ("natural_end", "ended: natural end"),
    ("failed", "ended: failed"),
    ("cancelled", "ended: cancelled"),
    ("stopped", "ended: stopped"),
    ("max_steps", "ended: max steps"),
    ("indeterminate", "ended: indeterminate"),
)
"""What the runs table filters by (``state=``): a state kind or an end cause kind."""
COUNTED_STATES: Final = ("queued", "running", "awaiting", "ended")
COUNTED_CAUSES: Final = (
    "natural_end",
    "failed",
    "cancelled",
    "stopped",
    "max_steps",
    "indeterminate",
)


def counts_bar(counts: Mapping[str, int], chosen: str) -> str:
    """How many runs are in each state and ended with each cause, each a link to the
    table filtered by it (as the page's script's ``showCounts``)."""

    def link(kind: str, label: str, classes: str) -> str:
        here = " chosen" if kind == chosen else ""
        return (
            f'<a class="count {classes}{here}" data-kind="{kind}" href="/?state={kind}">'
            f"{esc(label)} <b>{esc(counts.get(kind, 0))}</b></a>"
        )

    states = "".join(link(kind, kind, f"state-{kind}") for kind in COUNTED_STATES)
    causes = "".join(
        link(kind, kind.replace("_", " "), f"state-ended cause-{kind}") for kind in COUNTED_CAUSES
    )
    return (
        f'<nav id="counts" class="counts">{states}<span class="causes">{causes}</span>'
        f'<span class="total">{esc(sum(counts.get(k, 0) for k in COUNTED_STATES))} runs</span>'
        "</nav>"
    )


def runs_page(
    rows: Sequence[Mapping[str, Any]],
    params: Mapping[str, str],
    limit: int,
    counts: Mapping[str, int],
) -> str:
    """The runs table, newest first, with the counts per state and end cause, its filter
    form, the search by run id and the pager."""
    now = time.time()
    body_rows = "".join(_table_row(row, now) for row in rows)
    state = params.get("state", "")
    options = "".join(
        f'<option value="{kind}"{" selected" if kind == state else ""}>{esc(label)}</option>'
        for kind, label in FILTERS
    )
    pager = []
    if params.get("before"):
        newest = {k: v for k, v in params.items() if k != "before"}
        pager.append(f'<a id="newest" href="/?{esc(urlencode(newest))}">newest</a>')
    if len(rows) == limit:
        older = {**params, "before": rows[-1]["row"]["run_id"]}
        pager.append(f'<a id="older" href="/?{esc(urlencode(older))}">older →</a>')
    body = (
        "<h1>Runs</h1>"
        f"{counts_bar(counts, state)}"
        '<form id="filters" class="filters" method="get" action="/">'
        f'<label>state <select name="state">{options}</select></label>'
        f'<label>name <input name="name" value="{esc(params.get("name", ""))}"></label>'
        f'<label>thread <input name="thread" value="{esc(params.get("thread", ""))}"></label>'
        '<button type="submit">filter</button></form>'
        '<form id="search" class="filters search" method="get" action="/search">'
        '<label>run id <input name="run_id" required placeholder="go to a run by its id">'
        '</label><button type="submit">go</button></form>'
        '<table id="runs"><thead><tr><th>run</th><th>state</th><th>gen</th><th>thread</th>'
        "<th>name</th><th>last event</th><th>age</th><th>created</th><th>duration</th>"
        "</tr></thead>"
        f'<tbody id="runs-body">{body_rows}</tbody></table>'
        f'<p class="empty{" hidden" if rows else ""}" id="no-runs">no runs</p>'
        f'<nav class="pager">{"".join(pager)}</nav>'
    )
    query = urlencode({k: v for k, v in params.items() if v})
    return _layout("runs", body, page="runs", query=query)


def _table_row(row: Mapping[str, Any], now: float) -> str:
    record = row["row"]
    last = row["last_event"]
    state = state_to_json_text(record["state"])
    created = record["created_at"]
    started = record["started_at"]
    ended = record["ended_at"]
    return (
        f'<tr data-run-id="{esc(record["run_id"])}"'
        f' data-created-at="{esc("" if created is None else created)}"'
        f' data-started-at="{esc("" if started is None else started)}"'
        f' data-ended-at="{esc("" if ended is None else ended)}">'
        f'<td><a href="{esc(run_href(record["run_id"]))}">{esc(record["run_id"])}</a></td>'
        f'<td class="{esc(state_classes(record["state"]))}">{esc(state)}</td>'
        f"<td>{esc(record['generation'])}</td>"
        f"<td>{esc(record['thread_id'])}</td>"
        f"<td>{esc(record['name'] or '')}</td>"
        f"<td>{esc('' if last is None else last['text'])}</td>"
        f'<td class="age">{esc(_age(created, now))}</td>'
        f'<td class="created">{esc("" if created is None else format_time(created))}</td>'
        f'<td class="duration">{esc(_lasted(created, started, ended, now))}</td></tr>'
    )


def _lasted(
    created_at: float | None, started_at: float | None, ended_at: float | None, now: float
) -> str:
    """A row's duration cell (`run_duration`, from the row's JSON)."""
    seconds = run_duration(created_at, started_at, ended_at, now)
    return "" if seconds is None else format_duration(seconds)


def state_to_json_text(state: Mapping[str, Any]) -> str:
    """A state's JSON shape in a few words (as the page's script writes it too)."""
    kind = str(state["kind"])
    if kind == "ended":
        cause = state["cause"]
        words = str(cause["kind"]).replace("_", " ")
        extra = cause.get("reason") or cause.get("code")
        return f"ended: {words}" + (f" ({extra})" if extra else "")
    if kind == "awaiting":
        return f"awaiting: {state['ticket']['reason']}"
    return kind


# ---------------------------------------------------------------------------- one run


def run_page(
    record: RunRecord,
    events: Sequence[RunEvent],
    tree: Sequence[RunRecord],
    *,
    truncated: bool,
    channels: Sequence[str] = (),
) -> str:
    """One run: its state and ticket, controls, streams, record, children, transcript,
    events."""
    state = record.state
    facts = [
        ("run", esc(record.run_id)),
        ("state", f'<span id="run-state">{esc(describe_state(state))}</span>'),
        ("name", esc(record.name or "")),
        ("thread", esc(record.thread_id)),
        ("generation", f'<span id="run-generation">{esc(record.generation)}</span>'),
    ]
    if record.parent_run_id is not None:
        parent = record.parent_run_id
        facts.append(("parent", f'<a href="{esc(run_href(parent))}">{esc(parent)}</a>'))
    facts.append(("times", _times(record)))
    if record.deadline is not None:
        facts.append(
            ("deadline", f'<span id="run-deadline">{esc(format_time(record.deadline))}</span>')
        )
    retry = describe_retry(record)
    if retry is not None:
        facts.append(("retry", f'<span id="run-retry">{esc(retry)}</span>'))
    if isinstance(record.forked_from, Mapping):
        source = str(record.forked_from.get("run_id"))
        seq = esc(record.forked_from.get("seq"))
        facts.append(("forked from", f'<a href="{esc(run_href(source))}">{esc(source)}</a> @{seq}'))
    dl = "".join(f"<dt>{label}</dt><dd>{value}</dd>" for label, value in facts)
    body = (
        f"<h1>Run <code>{esc(record.run_id)}</code></h1>"
        f'<dl class="facts">{dl}</dl>'
        f"{_failure(events)}{_ticket(state)}{_controls(record.run_id, state)}"
        f"{_streams(channels)}"
        f"<h2>Children</h2>{_tree(record.run_id, tree, truncated)}"
        f"{_transcript(record.checkpoint, record.result)}"
        "<h2>Record</h2>"
        f'<pre id="record" class="json">{esc(pretty(_record_shown(record)))}</pre>'
        f"<h2>Timeline</h2>{_timeline(events)}"
        f"<h2>Events</h2>{_trail(events)}"
    )
    last_seq = events[-1].seq if events else 0
    return _layout(
        f"run {record.run_id}", body, page="run", run_id=record.run_id, seq=str(last_seq)
    )


def _times(record: RunRecord) -> str:
    """The run's times: created, started, ended and how long it ran; the script keeps them
    up to date from its events (``data-`` attributes, as the runs table's rows)."""

    def data(at: float | None) -> str:
        return "" if at is None else str(at)

    parts = "".join(
        f'<span class="{name}">{name} <span id="run-{name}">{esc(when(at))}</span></span>'
        for name, at in (
            ("created", record.created_at),
            ("started", record.started_at),
            ("ended", record.ended_at),
        )
    )
    return (
        f'<span id="run-times" class="times" data-created-at="{esc(data(record.created_at))}"'
        f' data-started-at="{esc(data(record.started_at))}"'
        f' data-ended-at="{esc(data(record.ended_at))}">'
        f'{parts}<span class="duration">ran <span id="run-duration">'
        f"{esc(duration_of(record, time.time()))}</span></span></span>"
    )


def _record_shown(record: RunRecord) -> JsonValue:
    return {**record_json(record), "input": record.input}


def _ticket(state: RunState) -> str:
    if not isinstance(state, Awaiting):
        return '<section id="ticket" class="hidden"></section>'
    ticket = state.ticket
    deadline = "never" if ticket.deadline is None else format_time(ticket.deadline)
    accepts = "any JSON value" if ticket.accepts is None else pretty(ticket.accepts)
    return (
        '<section id="ticket" class="ticket"><h2>Live ticket</h2><dl class="facts">'
        f"<dt>reason</dt><dd>{esc(ticket.reason)}</dd>"
        f'<dt>correlation id</dt><dd id="ticket-correlation">{esc(ticket.correlation_id)}</dd>'
        f"<dt>deadline</dt><dd>{esc(deadline)}</dd></dl>"
        f'<h3>payload</h3><pre class="json">{esc(pretty(ticket.payload))}</pre>'
        f'<h3>accepts</h3><pre id="ticket-accepts" class="json">{esc(accepts)}</pre></section>'
    )


CONFIRMATIONS: Final[Mapping[ControlName, str]] = {
    "cancel": "Cancel run {run_id}? It ends now, wherever it runs, as cancelled;"
    " this cannot be undone.",
    "stop": "Stop run {run_id}? It ends now, wherever it runs, as stopped with your reason;"
    " this cannot be undone.",
}
"""What the page asks before a control that ends the run (`ControlSpec.ends_run`)."""


def _controls(run_id: str, state: RunState) -> str:
    """A form per control; those the committed state does not allow are disabled, with
    why (`unavailable`); the script redraws them as the state changes (``/ui/controls``)."""
    forms = "".join(_control_form(run_id, name, state) for name in CONTROL_NAMES)
    none = none_offered(state)
    return (
        f'<section id="controls" class="controls{" none-offered" if none else ""}">'
        f'<h2>Controls</h2><p id="no-controls" class="note">{esc(none or "")}</p>{forms}'
        '<div id="control-result" class="result hidden" role="status"></div></section>'
    )


def _control_form(run_id: str, name: ControlName, state: RunState) -> str:
    why = unavailable(name, state)
    attributes = f' data-control="{name}" class="control{" unavailable" if why else ""}"'
    if CONTROLS[name].ends_run:
        attributes += f' data-confirm="{esc(CONFIRMATIONS[name].format(run_id=run_id))}"'
    return (
        f"<form{attributes}><fieldset{' disabled' if why else ''}>"
        f'{_control_fields(name, state)}<button type="submit">{name}</button></fieldset>'
        f'<span class="why">{esc(why or "")}</span></form>'
    )


def _control_fields(name: ControlName, state: RunState) -> str:
    match name:
        case "cancel":
            return '<input name="reason" placeholder="reason (optional)">'
        case "stop":
            return '<input name="reason" placeholder="reason" required>'
        case "wake":
            return '<input name="reason" placeholder="reason (optional)">'
        case "message":
            return (
                '<textarea name="payload" data-json="1" rows="1"'
                ' placeholder="message: a JSON value, e.g. &quot;hello&quot;"></textarea>'
            )
        case "resume":
            hint = _resume_hint(state) if isinstance(state, Awaiting) else ""
            return (
                '<textarea name="value" data-json="1" rows="2"'
                f' placeholder="resume value: a JSON value">{esc(hint)}</textarea>'
                '<input name="correlation_id"'
                ' placeholder="correlation id (default: the live ticket)">'
            )
    return ""


def failed_event(events: Sequence[RunEvent]) -> RunEvent | None:
    """The terminal event of a failed run (it carries the traceback), else None."""
    for event in reversed(events):
        if isinstance(event.state, RunState.Ended):
            return event if isinstance(event.state.cause, EndCause.Failed) else None
    return None


def _failure(events: Sequence[RunEvent]) -> str:
    """A failed run's error, the attempt that failed, and its traceback (from its terminal
    event); the script fills the same section when a run fails while its page is open."""
    event = failed_event(events)
    if event is None:
        return '<section id="failure" class="hidden"></section>'
    assert isinstance(event.state, RunState.Ended)
    traceback = event.detail.get("traceback")
    shown = (
        f'<pre id="traceback" class="traceback">{esc(traceback)}</pre>'
        if isinstance(traceback, str) and traceback
        else '<p id="traceback" class="note">no traceback was stored with this failure</p>'
    )
    return (
        '<section id="failure" class="failure"><h2>Failure</h2><dl class="facts">'
        f'<dt>error</dt><dd id="failure-error">{esc(describe_state(event.state))}</dd>'
        f'<dt>attempt</dt><dd id="failure-attempt">generation {event.generation}'
        f" (event {event.seq}, {esc(format_time(event.at))})</dd></dl>{shown}</section>"
    )


def timeline_key(state: Mapping[str, Any]) -> str:
    """What a timeline entry stands for (a state's JSON shape): a new entry starts where
    this changes (as the page's script's ``timelineKey``)."""
    kind = str(state["kind"])
    if kind == "running":
        return f"running {state['generation']}"
    if kind == "awaiting":
        return f"awaiting {state['ticket']['correlation_id']}"
    return kind


def _timeline(events: Sequence[RunEvent]) -> str:
    """The run's states one after another (each attempt, each wait, its end), when each
    began after the run's first event and how long it lasted."""
    entries: list[tuple[RunEvent, Mapping[str, Any]]] = []
    key = None
    for event in events:
        state = state_to_json(event.state)
        if timeline_key(state) != key:
            key = timeline_key(state)
            entries.append((event, state))
    start = events[0].at if events else 0.0
    items = []
    for index, (event, shape) in enumerate(entries):
        following = entries[index + 1][0].at if index + 1 < len(entries) else None
        lasted = "" if following is None else format_duration(following - event.at)
        items.append(
            f'<li class="{esc(state_classes(shape))}" data-at="{esc(event.at)}"'
            f' data-key="{esc(timeline_key(shape))}">'
            f'<span class="tl-at">+{esc(format_duration(event.at - start))}</span>'
            f'<span class="tl-state">{esc(describe_state(event.state))}</span>'
            f'<span class="tl-for">{esc(lasted and f"for {lasted}")}</span></li>'
        )
    return f'<ol id="timeline" class="timeline" data-start="{esc(start)}">{"".join(items)}</ol>'


def _streams(channels: Sequence[str]) -> str:
    """A panel per channel of the run's stream; the script fills each live (and adds the
    panels of channels written later)."""
    panels = "".join(stream_panel(channel) for channel in channels)
    empty = "" if channels else '<p id="no-streams" class="empty">no streams yet</p>'
    return f'<h2>Streams</h2><div id="streams" class="streams">{empty}{panels}</div>'


def stream_panel(channel: str) -> str:
    return (
        f'<section class="stream" data-channel="{esc(channel)}">'
        f'<h3><code>{esc(channel)}</code> <span class="stream-status"></span></h3>'
        '<pre class="stream-text"></pre></section>'
    )


def _resume_hint(state: Awaiting) -> str:
    reason = state.ticket.reason
    if reason == "tool_permission":
        return '{"decision": "allow"}'
    if reason == "client_execution":
        return '{"result": null}'
    return ""


def _tree(run_id: str, tree: Sequence[RunRecord], truncated: bool) -> str:
    children: dict[str, list[RunRecord]] = {}
    for record in tree:
        children.setdefault(record.parent_run_id or "", []).append(record)

    def branch(parent: str) -> str:
        items = "".join(
            f'<li><a href="{esc(run_href(child.run_id))}">{esc(child.run_id)}</a> '
            f"{esc(child.name or '')} {_state_cell(child.state)}{branch(child.run_id)}</li>"
            for child in children.get(parent, ())
        )
        return f"<ul>{items}</ul>" if items else ""

    shown = branch(run_id) or '<p class="empty">no child runs</p>'
    if truncated:
        shown += (
            '<p class="note">only children among the newest runs are shown; list the rest with'
            " <code>awaken-trio runs list</code></p>"
        )
    return f'<div id="children" class="tree">{shown}</div>'


def _transcript(checkpoint: JsonValue, result: JsonValue) -> str:
    """An agent run's chat transcript (its checkpoint's ``messages``), with tool calls and
    their results; nothing for other runs."""
    messages = checkpoint.get("messages") if isinstance(checkpoint, Mapping) else None
    if not isinstance(messages, Sequence) or isinstance(messages, str):
        return ""
    if not all(isinstance(m, Mapping) and "role" in m for m in messages):
        return ""
    items = "".join(_message(message) for message in messages)
    return f'<h2>Transcript</h2><ol id="transcript" class="transcript">{items}</ol>'


def _message(message: Mapping[str, Any]) -> str:
    role = str(message.get("role"))
    parts = [f'<span class="role">{esc(role)}</span>']
    if role == "tool":
        parts.append(f'<span class="call-id">result of {esc(message.get("tool_call_id"))}</span>')
    content = message.get("content")
    if content is not None:
        parts.append(f'<pre class="content">{esc(content)}</pre>')
    parts.extend(_calls(message.get("tool_calls")))
    return f'<li class="message role-{esc(role)}">{"".join(parts)}</li>'


def _calls(calls: object) -> Iterable[str]:
    if not isinstance(calls, Sequence) or isinstance(calls, str):
        return
    for call in calls:
        if not isinstance(call, Mapping):
            continue
        function = call.get("function")
        function = function if isinstance(function, Mapping) else {}
        yield (
            '<div class="tool-call">'
            f'<span class="call-id">{esc(call.get("id"))}</span> '
            f'<span class="tool">{esc(function.get("name"))}</span>'
            f'<pre class="json">{esc(function.get("arguments"))}</pre></div>'
        )


def _trail(events: Sequence[RunEvent]) -> str:
    shown = events[-TRAIL_SHOWN:]
    rows = "".join(_event_row(event) for event in shown)
    note = (
        f'<p class="note">the last {TRAIL_SHOWN} of {len(events)} events</p>'
        if len(events) > len(shown)
        else ""
    )
    return (
        f'{note}<table id="events"><thead><tr><th>seq</th><th>gen</th><th>kind</th>'
        "<th>state</th><th>detail</th><th>at</th></tr></thead>"
        f'<tbody id="events-body">{rows}</tbody></table>'
    )


def _event_row(event: RunEvent) -> str:
    detail = "" if not event.detail else json.dumps(dict(event.detail), ensure_ascii=False)
    at = format_time(event.at, date=False)
    text = state_to_json_text(state_to_json(event.state))
    return (
        f"<tr><td>{event.seq}</td><td>{event.generation}</td><td>{esc(event.kind)}</td>"
        f"<td>{esc(text)}</td><td><code>{esc(detail)}</code></td><td>{esc(at)}</td></tr>"
    )


# ---------------------------------------------------------------------------- workers

WORKER_COLUMNS: Final = (
    "worker",
    "state",
    "host",
    "pid",
    "bodies",
    "concurrency",
    "active",
    "started",
    "last seen",
)


def workers_page(workers: Sequence[Mapping[str, Any]], *, ended: bool) -> str:
    """The workers (§3.11): each runtime that serves, its state (a lost one red), where it
    runs, what it serves and how busy it is, the newest first."""
    rows = "".join(_worker_row(worker) for worker in workers)
    head = "".join(f"<th>{esc(column)}</th>" for column in WORKER_COLUMNS)
    checked = " checked" if ended else ""
    body = (
        "<h1>Workers</h1>"
        '<form id="worker-filters" class="filters" method="get" action="/workers">'
        f'<label class="inline"><input type="checkbox" name="all" value="1"{checked}>'
        " the stopped ones too</label>"
        '<button type="submit">show</button></form>'
        f'<table id="workers"><thead><tr>{head}</tr></thead>'
        f'<tbody id="workers-body">{rows}</tbody></table>'
        f'<p class="empty{" hidden" if workers else ""}" id="no-workers">no workers: start one'
        " with <code>awaken-trio worker MODULE --store URL</code></p>"
    )
    return _layout("workers", body, page="workers", query="all=1" if ended else "")


def worker_bodies(bodies: Mapping[str, Any]) -> str:
    """A worker's bodies in short: ``a, b (v2)`` (as the page's script's ``bodiesText``)."""
    return ", ".join(
        name if version is None else f"{name} ({version})" for name, version in bodies.items()
    )


def _worker_row(worker: Mapping[str, Any]) -> str:
    state = str(worker["state"])
    cells = (
        esc(worker["worker_id"]),
        f'<span class="worker-state worker-{esc(state)}">{esc(state)}</span>',
        esc(worker["host"]),
        esc(worker["pid"]),
        esc(worker_bodies(worker["bodies"])),
        esc(worker["concurrency"]),
        esc(worker["active"]),
        esc(when(worker["started_at"])),
        esc(when(worker["last_seen"])),
    )
    return (
        f'<tr data-worker-id="{esc(worker["worker_id"])}">'
        + "".join(f"<td>{cell}</td>" for cell in cells)
        + "</tr>"
    )


def error_page(status: int, message: str) -> str:
    return _layout(str(status), f'<h1>{status}</h1><p class="error">{esc(message)}</p>')
