"""The dashboard's ASGI app: the JSON API of DESIGN §3.6, the live stream, the pages.

Every answer is built from the shapes the command line prints with ``--json``
(`awaken_trio._face.shapes`), and every control is the call of the controls table
(`awaken_trio._face.controls`) that ``awaken-trio runs ...`` makes too, so the page, the
API and the command line cannot disagree. A refusal is the command line's
error object (``{"error", "message", "state"}``) with 409, an unknown run 404, bad input
400; the store failing 503.

The app runs inside the trio.run that opened ``runtime`` (Starlette runs on Trio through
anyio), so a handler awaits the runtime's calls directly.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing
from functools import partial
from importlib import resources
from typing import Any, Final, get_args
from urllib.parse import quote, unquote_to_bytes, urlencode

import attrs
import trio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route, request_response
from starlette.types import ASGIApp, Receive, Scope, Send

from .. import (
    InvalidArgument,
    JsonValue,
    RunEvent,
    RunRecord,
    Runtime,
    StoreError,
    StreamGap,
    UnknownRun,
)
from .._core import check_channel
from .._face.controls import (
    CONTROL_NAMES,
    CONTROLS,
    ControlSpec,
    control_named,
    none_offered,
    unavailable,
)
from .._face.failures import (
    REFUSALS,
    CommandFailed,
    Exit,
    bad_input,
    error_json,
    failure_of,
    refused,
)
from .._face.input import parse_json, shorten, whole_number
from .._face.shapes import dumps, event_json, record_json, row_json, worker_json
from .._face.words import DASHBOARD
from ..store import CauseKind, StateKind, state_to_json
from . import _pages
from ._guard import Guard
from ._hub import EventHub
from ._streams import ChunkEvents, first_page, resume_after

STATE_KINDS: Final[tuple[str, ...]] = (*get_args(StateKind), *get_args(CauseKind))
"""What ``state=`` filters by: a state kind, or an end cause kind."""
PAGE_DEFAULT: Final = 50
PAGE_MAX: Final = 500
EVENTS_DEFAULT: Final = 1000
EVENTS_MAX: Final = 10_000
KEEPALIVE: Final = 15.0
"""Seconds between comment lines on an idle event stream (so proxies keep it open and a
closed page is noticed)."""
MAX_BODY: Final = 8 * 2**20
"""The most bytes a control's body may have: twice the runtime's default payload limit
(`open_runtime(max_payload_bytes=...)`), which checks the payload itself."""
TREE_SCAN: Final = 2000
"""Runs newer than a run scanned for its descendants (see `descendants`)."""

READ_METHODS: Final = ("GET", "HEAD")
"""What every resource but a control answers to (HEAD: the headers of a GET)."""
CONTROL_METHODS: Final = ("POST",)
"""What a control answers to: never HEAD, never GET, whatever the route."""

# ---------------------------------------------------------------------------- answers


def json_response(
    value: JsonValue, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(
        dumps(value),
        status_code=status,
        media_type="application/json",
        headers={"Cache-Control": "no-store", **(headers or {})},
    )


_STATUS: Final = {Exit.REFUSED: 409, Exit.BAD_INPUT: 400, Exit.STORE: 503}


class Failure(Exception):
    """An answer that is an error object; raised by a handler, answered by `_answer`."""

    def __init__(self, failure: CommandFailed, status: int | None = None) -> None:
        super().__init__(failure.message)
        self.failure = failure
        if status is None:
            unknown = failure.error == "unknown_run"
            status = 404 if unknown else _STATUS.get(failure.code, 500)
        self.status = status

    def response(self) -> Response:
        return json_response(error_json(self.failure), self.status)


def _bad(message: str, error: str = "bad_input") -> Failure:
    return Failure(bad_input(message, error), 400)


async def _answer(
    handler: Callable[[Request], Awaitable[Response]], request: Request, *, html: bool
) -> Response:
    """Run a handler; what it raises becomes its error object (a library error as the
    command line would report it), or for a page, an error page saying the same."""
    try:
        return await handler(request)
    except Failure as failure:
        answer = failure
    except CommandFailed as failure:
        answer = Failure(failure)
    except REFUSALS as exc:
        answer = Failure(failure_of(exc, words=DASHBOARD))
    except InvalidArgument as exc:
        answer = Failure(failure_of(exc, words=DASHBOARD), 400)
    except StoreError as exc:  # unreachable, corrupt: 503, the message without passwords
        answer = Failure(failure_of(exc, words=DASHBOARD))
    if html:
        page = _pages.error_page(answer.status, answer.failure.message)
        return HTMLResponse(page, answer.status)
    return answer.response()


def _api(
    handler: Callable[[Runtime, EventHub, Request], Awaitable[Response]],
    runtime: Runtime,
    hub: EventHub,
    *,
    html: bool = False,
) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        return await _answer(partial(handler, runtime, hub), request, html=html)

    return endpoint


# ---------------------------------------------------------------------------- input


def run_path(request: Request, prefix: str) -> list[str]:
    """The path segments after ``prefix``, each percent-decoded on its own: a run id may
    hold a ``/`` (sent as ``%2F``), which the decoded path would split."""
    raw: bytes = request.scope.get("raw_path") or request.scope["path"].encode()
    raw = raw.split(b"?", 1)[0]  # (some servers keep the query in raw_path)
    rest = raw[len(prefix.encode()) :] if raw.startswith(prefix.encode()) else b""
    try:
        return [unquote_to_bytes(part).decode() for part in rest.split(b"/")]
    except UnicodeDecodeError:
        raise _bad("the path is not UTF-8 text once percent-decoded") from None


def run_url(run_id: str, *rest: str) -> str:
    return "/".join(["/runs", quote(run_id, safe=""), *rest])


def query_params(request: Request, allowed: tuple[str, ...]) -> dict[str, str]:
    """The query's parameters, each given once, none but ``allowed``."""
    found: dict[str, str] = {}
    for key, value in request.query_params.multi_items():
        if key not in allowed:
            raise _bad(f"unknown query parameter {key!r}; this one takes {', '.join(allowed)}")
        if key in found:
            raise _bad(f"query parameter {key!r} is given twice; give it once")
        found[key] = value
    return found


def int_param(params: dict[str, str], key: str, default: int, *, low: int, high: int) -> int:
    text = params.get(key)
    if text is None:
        return default
    number = whole_number(text, low=low, high=high)
    if number is None:
        raise _bad(f"{key} must be a whole number from {low} to {high}, not {shorten(text)}")
    return number


def list_filters(params: dict[str, str]) -> dict[str, Any]:
    """``runtime.list_runs`` arguments from the query (``state``, ``name``, ``thread``,
    ``limit``, ``before``); the runtime checks the values."""
    state = params.get("state") or None
    if state is not None and state not in STATE_KINDS:
        raise _bad(
            f"unknown state {state!r}; filter by one of {', '.join(STATE_KINDS)}",
            "invalid_argument",
        )
    return {
        "state": state,
        "name": params.get("name") or None,
        "thread_id": params.get("thread") or None,
        "before": params.get("before") or None,
        "limit": int_param(params, "limit", PAGE_DEFAULT, low=1, high=PAGE_MAX),
    }


LIST_PARAMS: Final = ("state", "name", "thread", "limit", "before")


async def listed(runtime: Runtime, filters: dict[str, Any]) -> list[RunRecord]:
    try:
        return await runtime.list_runs(**filters)
    except UnknownRun:
        raise _bad(
            f"before={filters['before']!r} names no run; pass the last run id of the page before",
            "unknown_run",
        ) from None


async def json_body(request: Request, allowed: dict[str, bool]) -> dict[str, JsonValue]:
    """A control's body: a JSON object whose keys are among ``allowed`` (mapped to whether
    each is required); an empty body is ``{}``."""
    raw = bytearray()
    async with aclosing(request.stream()) as chunks:
        async for chunk in chunks:
            raw += chunk
            if len(raw) > MAX_BODY:
                # Refused as it arrives: a huge body is never held whole.
                raise _bad(
                    f"the body is larger than {MAX_BODY} bytes, more than any payload the"
                    " runtime accepts; send a smaller JSON object"
                )
    if not bytes(raw).strip():
        body: JsonValue = {}
    else:
        try:
            text = bytes(raw).decode()
        except UnicodeDecodeError:
            raise _bad("the body is not UTF-8 text; send a JSON object") from None
        body = parse_json(text, "the body")
    if not isinstance(body, dict):
        raise _bad(f"the body must be a JSON object, not {type(body).__name__}")
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        keys = ", ".join(allowed) or "no keys"
        raise _bad(f"unknown key(s) {', '.join(map(repr, unknown))}; this control takes {keys}")
    missing = [key for key, required in allowed.items() if required and key not in body]
    if missing:
        raise _bad(f"the body needs {', '.join(map(repr, missing))}")
    return body


# ---------------------------------------------------------------------------- controls


def checked_arguments(spec: ControlSpec, body: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """A control's body, each key of the kind its argument takes (see `Argument`)."""
    for key, argument in spec.arguments.items():
        value = body.get(key)
        if argument.kind == "json" or value is None:
            continue
        if not isinstance(value, str):
            raise _bad(f"{key!r} must be a string, not {type(value).__name__}")
    for key, argument in spec.arguments.items():
        if argument.kind == "reason" and not body.get(key):
            raise _bad(f"{key!r} must be a non-empty string: why the run is stopped")
    return body


# ---------------------------------------------------------------------------- API


async def api_runs(runtime: Runtime, hub: EventHub, request: Request) -> Response:
    """``GET /api/runs``: rows, newest first; a full page links the next (``Link``)."""
    filters = list_filters(query_params(request, LIST_PARAMS))
    records = await listed(runtime, filters)
    headers: dict[str, str] = {}
    if len(records) == filters["limit"]:
        query = {k: v for k, v in request.query_params.items() if k != "before"}
        query["before"] = records[-1].run_id
        headers["Link"] = f'</api/runs?{urlencode(query)}>; rel="next"'
    return json_response([row_json(record) for record in records], headers=headers)


async def api_counts(runtime: Runtime, hub: EventHub, request: Request) -> Response:
    """``GET /api/counts``: how many runs are in each state and ended with each cause, one
    JSON object (`Runtime.count_runs`), with ``"total"``."""
    query_params(request, ())
    counts = await runtime.count_runs()
    return json_response({**dict(counts), "total": counts.total})


async def api_workers(runtime: Runtime, hub: EventHub, request: Request) -> Response:
    """``GET /api/workers``: the workers serving, draining or lost, the most recently
    started first (``?all=1``: the stopped ones too), as ``workers list --json``."""
    params = query_params(request, ("all",))
    ended = params.get("all") in ("1", "true")
    return json_response([worker_json(w) for w in await runtime.list_workers(ended=ended)])


async def api_run(runtime: Runtime, hub: EventHub, request: Request) -> Response:
    """``GET /api/runs/{id}``, ``GET /api/runs/{id}/events``, ``POST
    /api/runs/{id}/{control}``.

    The route takes every method, so that this handler alone decides what each resource
    answers to: a control POST alone (never HEAD, which Starlette would add to a GET
    route), the record and the events GET and HEAD; anything else is 405 with ``Allow``.
    """
    parts = run_path(request, "/api/runs/")
    run_id, rest = parts[0], parts[1:]
    if rest[:1] == ["streams"]:
        return await _streams(runtime, hub, request, run_id, rest[1:])
    if not run_id or len(rest) > 1 or (rest and rest[0] not in ("events", *CONTROLS)):
        raise HTTPException(404)
    name = control_named(rest[0]) if rest else None
    if name is not None:
        _allow(request, CONTROL_METHODS)
        return await _control(runtime, run_id, CONTROLS[name], request)
    _allow(request, READ_METHODS)
    if rest == ["events"]:
        return await _events(runtime, run_id, request)
    query_params(request, ())
    return json_response(record_json(await _record(runtime, run_id)))


def _allow(request: Request, methods: tuple[str, ...]) -> None:
    """Refuse (405, with ``Allow``) a method the resource does not answer to."""
    if request.method not in methods:
        raise HTTPException(405, headers={"Allow": ", ".join(methods)})


async def _control(runtime: Runtime, run_id: str, spec: ControlSpec, request: Request) -> Response:
    keys = {key: argument.required for key, argument in spec.arguments.items()}
    body = await json_body(request, keys)
    await _record(runtime, run_id)  # an unknown run is 404, whatever the control
    try:
        state = await spec.call(runtime, run_id, checked_arguments(spec, body))
        if state is None:
            state = await runtime.state(run_id)
    except REFUSALS as exc:
        raise Failure(await refused(runtime, exc, run_id, words=DASHBOARD)) from None
    return json_response(state_to_json(state))


async def _record(runtime: Runtime, run_id: str) -> RunRecord:
    try:
        return await runtime.record(run_id)
    except UnknownRun as exc:
        raise Failure(failure_of(exc, words=DASHBOARD), 404) from None


async def _events(runtime: Runtime, run_id: str, request: Request) -> Response:
    """A run's events, oldest first, after ``after`` (a seq), at most ``limit``; a full
    page links the next."""
    params = query_params(request, ("after", "limit"))
    after = int_param(params, "after", 0, low=0, high=2**63 - 1)
    limit = int_param(params, "limit", EVENTS_DEFAULT, low=1, high=EVENTS_MAX)
    await _record(runtime, run_id)
    events = await run_events(runtime, run_id, after=after, limit=limit)
    headers: dict[str, str] = {}
    if len(events) == limit:
        query = urlencode({"after": events[-1].seq, "limit": limit})
        headers["Link"] = f'</api/runs/{quote(run_id, safe="")}/events?{query}>; rel="next"'
    return json_response([event_json(event) for event in events], headers=headers)


async def run_events(
    runtime: Runtime, run_id: str, *, after: int = 0, limit: float = math.inf
) -> list[RunEvent]:
    found: list[RunEvent] = []
    async for event in runtime.events(run_id, follow=False):
        if event.seq > after:
            found.append(event)
            if len(found) >= limit:
                break
    return found


async def _streams(
    runtime: Runtime, hub: EventHub, request: Request, run_id: str, rest: list[str]
) -> Response:
    """``GET /api/runs/{id}/streams``: the run's channels (a JSON array of names);
    ``GET /api/runs/{id}/streams/{channel}?after=N``: the channel as server-sent events
    (`ChunkEvents`), from the chunk after ``Last-Event-ID`` when a browser reconnects, else
    after ``after``; 204 when the channel has ended before it."""
    # GET alone: a stream begun for HEAD would never end.
    _allow(request, ("GET",))
    if not run_id or len(rest) > 1 or rest == [""]:
        raise HTTPException(404)
    if not rest:
        query_params(request, ())
        try:
            return json_response(list(await runtime.stream_channels(run_id)))
        except UnknownRun as exc:
            raise Failure(failure_of(exc), 404) from None
    channel = rest[0]
    params = query_params(request, ("after",))
    after = int_param(params, "after", 0, low=0, high=2**63 - 1)
    after = resume_after(after, request.headers.get("last-event-id"))
    check_channel(channel, f"the stream of run {run_id!r}")
    try:
        more = await first_page(runtime, run_id, channel, after)
    except UnknownRun as exc:
        raise Failure(failure_of(exc), 404) from None
    except StreamGap as exc:
        raise Failure(failure_of(exc), 409) from None
    except InvalidArgument as exc:  # the run ended without writing the channel
        raise Failure(bad_input(str(exc), "unknown_stream"), 404) from None
    if not more:
        return Response(status_code=204, headers={"Cache-Control": "no-store"})
    return ChunkEvents(runtime, run_id, channel, after, hub.closed)


async def api_stream(runtime: Runtime, hub: EventHub, request: Request) -> Response:
    """``GET /api/stream[?run_id=ID]``: server-sent events, one ``run_event`` (an event's
    JSON) per commit from now on, after a ``hello`` (``{"seq"}``: the last event before
    the stream began). It ends when the dashboard shuts down."""
    params = query_params(request, ("run_id",))
    only = params.get("run_id") or None
    if only is not None:
        await _record(runtime, only)
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    if request.method == "HEAD":
        # The stream's headers alone: a stream begun for HEAD would never end.
        return Response(media_type="text/event-stream", headers=headers)
    return StreamingResponse(_stream(hub, only), media_type="text/event-stream", headers=headers)


async def _stream(hub: EventHub, only: str | None) -> AsyncIterator[str]:
    with hub.subscribe() as events:
        yield f"event: hello\ndata: {dumps({'seq': hub.seq})}\n\n"
        while True:
            with trio.move_on_after(KEEPALIVE) as idle:
                try:
                    event = await events.receive()
                except trio.EndOfChannel:
                    return
            if idle.cancelled_caught:
                yield ": keepalive\n\n"
            elif only is None or event.run_id == only:
                yield f"id: {event.seq}\nevent: run_event\ndata: {dumps(event_json(event))}\n\n"


# ---------------------------------------------------------------------------- pages


async def table_rows(
    runtime: Runtime, hub: EventHub, filters: dict[str, Any]
) -> list[dict[str, JsonValue]]:
    """The runs table's rows: each run's row (with its times) and the last event the hub
    knows of it."""
    rows: list[dict[str, JsonValue]] = []
    for record in await listed(runtime, filters):
        activity = hub.activity(record.run_id)
        rows.append(
            {
                "row": row_json(record),
                "created_at": record.created_at,
                "last_event": None
                if activity is None
                else {
                    "kind": activity.last_kind,
                    "at": activity.last_at,
                    "seq": activity.last_seq,
                    "text": activity.last_text,
                },
            }
        )
    return rows


async def ui_table(runtime: Runtime, hub: EventHub, request: Request) -> Response:
    """``GET /ui/table``: what the runs page redraws its table from (the rows of ``GET
    /api/runs`` with their activity)."""
    filters = list_filters(query_params(request, LIST_PARAMS))
    return json_response(list(await table_rows(runtime, hub, filters)))


async def page_runs(runtime: Runtime, hub: EventHub, request: Request) -> Response:
    params = query_params(request, (*LIST_PARAMS, "token"))
    params.pop("token", None)
    filters = list_filters(params)
    rows = await table_rows(runtime, hub, filters)
    counts = await runtime.count_runs()
    return HTMLResponse(_pages.runs_page(rows, params, filters["limit"], counts))


async def page_workers(runtime: Runtime, hub: EventHub, request: Request) -> Response:
    """``GET /workers``: the workers page (``?all=1``: the stopped ones too); its script
    redraws it from ``GET /api/workers`` (a worker's heartbeats are not events)."""
    params = query_params(request, ("all", "token"))
    ended = params.get("all") in ("1", "true")
    workers = [worker_json(w) for w in await runtime.list_workers(ended=ended)]
    return HTMLResponse(_pages.workers_page(workers, ended=ended))


async def page_run(runtime: Runtime, hub: EventHub, request: Request) -> Response:
    parts = run_path(request, "/runs/")
    if len(parts) != 1 or not parts[0]:
        raise HTTPException(404)
    run_id = parts[0]
    query_params(request, ("token",))
    record = await _record(runtime, run_id)
    events = await run_events(runtime, run_id)
    tree = await descendants(runtime, record)
    try:
        channels = await runtime.stream_channels(run_id)
    except InvalidArgument:  # a store that keeps no streams
        channels = []
    page = _pages.run_page(record, events, tree.runs, truncated=tree.truncated, channels=channels)
    return HTMLResponse(page)


async def ui_controls(runtime: Runtime, hub: EventHub, request: Request) -> Response:
    """``GET /ui/controls/{id}``: what a run's page redraws its controls from: the run's
    committed state, for each control why that state does not allow it (None when it
    does; see `unavailable`), and why none is offered (``none``; None when one is)."""
    parts = run_path(request, "/ui/controls/")
    if len(parts) != 1 or not parts[0]:
        raise HTTPException(404)
    query_params(request, ())
    state = (await _record(runtime, parts[0])).state
    controls: dict[str, JsonValue] = {name: unavailable(name, state) for name in CONTROL_NAMES}
    answer = {"state": state_to_json(state), "controls": controls, "none": none_offered(state)}
    return json_response(answer)


async def search(runtime: Runtime, hub: EventHub, request: Request) -> Response:
    """``GET /search?run_id=ID``: the run's page (a redirect), or a page saying no run
    has that id."""
    params = query_params(request, ("run_id", "token"))
    run_id = params.get("run_id", "").strip()
    if not run_id:
        raise _bad("give the id of the run to go to: /search?run_id=ID")
    try:
        await runtime.record(run_id)
    except UnknownRun:
        raise Failure(
            bad_input(
                f"no run has the id {shorten(run_id)} in this store; check the id, or find"
                " the run in the table by its name or thread",
                "unknown_run",
            ),
            404,
        ) from None
    return RedirectResponse(run_url(run_id), status_code=303)


@attrs.frozen
class Descendants:
    """A run's descendants, oldest first, and whether the scan stopped before it could
    find them all (``truncated``)."""

    runs: list[RunRecord]
    truncated: bool


async def descendants(runtime: Runtime, root: RunRecord) -> Descendants:
    """The run's descendants (see `Descendants`).

    A child is created after its parent and `Runtime.list_runs` lists newest first, so
    every descendant is among the runs listed before the root itself: the scan reads pages
    down to the root, at most `TREE_SCAN` runs.
    """
    newer: list[RunRecord] = []
    before: str | None = None
    while len(newer) < TREE_SCAN:
        page = await runtime.list_runs(limit=200, before=before)
        for record in page:
            if record.run_id == root.run_id:
                return Descendants(_under(root, newer), truncated=False)
            newer.append(record)
        if len(page) < 200:
            return Descendants(_under(root, newer), truncated=False)
        before = page[-1].run_id
    return Descendants(_under(root, newer), truncated=True)


def _under(root: RunRecord, newer: list[RunRecord]) -> list[RunRecord]:
    inside = {root.run_id}
    found: list[RunRecord] = []
    # Oldest first: a parent is seen before its children.
    for record in reversed(newer):
        if record.parent_run_id in inside:
            inside.add(record.run_id)
            found.append(record)
    return found


# ---------------------------------------------------------------------------- static


def _static(name: str, media_type: str) -> Callable[[Request], Awaitable[Response]]:
    # Read once, served from memory: no file system access per request.
    data = resources.files(__package__).joinpath("static", name).read_bytes()

    async def endpoint(request: Request) -> Response:
        return Response(data, media_type=media_type, headers={"Cache-Control": "no-cache"})

    return endpoint


# ---------------------------------------------------------------------------- the app


async def _not_found(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    status = exc.status_code
    error = {404: "not_found", 405: "method_not_allowed"}.get(status, "http_error")
    allow = (exc.headers or {}).get("Allow", "")
    answers = "a control answers POST only" if allow == "POST" else f"it answers {allow} only"
    message = {
        404: f"no such page or resource: {request.url.path}",
        405: f"{request.method} is not allowed on {request.url.path}; {answers}",
    }.get(status, str(exc.detail))
    data: JsonValue = {"error": error, "message": message, "state": None}
    if request.url.path.startswith("/api/"):
        return json_response(data, status, exc.headers)
    return HTMLResponse(_pages.error_page(status, message), status, headers=exc.headers)


class _EveryMethod:
    """An endpoint that Starlette routes every method to (it takes a class for an ASGI
    app, whose methods it leaves alone), so that the endpoint answers 405 itself, with the
    ``Allow`` of the resource the path names (see `api_run`)."""

    def __init__(self, endpoint: Callable[[Request], Awaitable[Response]]) -> None:
        self._app = request_response(endpoint)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)


def dashboard_app(runtime: Runtime, hub: EventHub, *, token: str | None = None) -> ASGIApp:
    """The dashboard as an ASGI app over ``runtime`` (whose trio.run serves it), fed by
    ``hub`` (whose task must be running). With ``token``, every request must carry it;
    without, only requests to a loopback host name are served (see `Guard`)."""

    def api(
        handler: Callable[[Runtime, EventHub, Request], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        return _api(handler, runtime, hub)

    def page(
        handler: Callable[[Runtime, EventHub, Request], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        return _api(handler, runtime, hub, html=True)

    routes = [
        Route("/", page(page_runs), methods=["GET"]),
        Route("/runs/{rest:path}", page(page_run), methods=["GET"]),
        Route("/ui/table", api(ui_table), methods=["GET"]),
        Route("/ui/controls/{rest:path}", api(ui_controls), methods=["GET"]),
        Route("/search", page(search), methods=["GET"]),
        Route("/workers", page(page_workers), methods=["GET"]),
        Route("/api/runs", api(api_runs), methods=["GET"]),
        Route("/api/counts", api(api_counts), methods=["GET"]),
        Route("/api/workers", api(api_workers), methods=["GET"]),
        Route("/api/runs/{rest:path}", _EveryMethod(api(api_run))),
        Route("/api/stream", api(api_stream), methods=["GET"]),
        Route("/static/dashboard.js", _static("dashboard.js", "text/javascript"), methods=["GET"]),
        Route("/static/dashboard.css", _static("dashboard.css", "text/css"), methods=["GET"]),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _not_found})
    return Guard(app, token=token)
