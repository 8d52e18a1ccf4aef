"""Every method on every route of the dashboard (DESIGN §3.6): controls answer to POST
alone, nothing but a same-origin POST to a control ever changes a run, and the cross-origin
check applies to every method but GET (HEAD included)."""

from __future__ import annotations

from typing import Final

import httpx
import pytest

from awaken_trio import JsonValue, RunEvent, RunRecord
from tests.ui.ui_helpers import BASE, Dashboard, api, asks, dashboard, page, settle, waits

pytestmark = pytest.mark.usefixtures("autojump_clock")

METHODS: Final = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
CONTROLS: Final = ("cancel", "stop", "pause", "wake", "message", "resume")
BODIES: Final[dict[str, bytes]] = {
    "cancel": b'{"reason": "x"}',
    "stop": b'{"reason": "x"}',
    "pause": b"{}",
    "wake": b'{"reason": "x"}',
    "message": b'{"payload": "finish"}',
    "resume": b'{"value": "yes"}',
}
READS: Final = (
    "/",
    page("w"),
    "/ui/table",
    "/api/runs",
    api("w"),
    api("w", "events"),
    "/static/dashboard.js",
    "/static/dashboard.css",
)
"""The routes that only read (``/api/stream`` too, but its GET never ends: see below)."""
FOREIGN: Final = {"Origin": "http://evil.example"}


def control_url(control: str) -> str:
    # Each control aimed at the run it would change: resume at the awaiting one, the rest
    # at the one running.
    return api("a" if control == "resume" else "w", control)


async def committed(d: Dashboard) -> list[tuple[RunRecord, list[RunEvent]]]:
    """Both runs' records and events: what any control that ran would have changed."""
    found = []
    for run_id in ("w", "a"):
        events = [e async for e in d.runtime.events(run_id, follow=False)]
        found.append((await d.runtime.record(run_id), events))
    return found


async def started(d: Dashboard) -> None:
    await d.runtime.start(waits, run_id="w", name="waits")
    await d.runtime.start(asks, run_id="a", name="asks")
    await settle(d.runtime, "w", "running")
    await settle(d.runtime, "a", "awaiting")


async def request(
    d: Dashboard, method: str, path: str, body: bytes, *, foreign: bool
) -> httpx.Response:
    headers = {"Content-Type": "application/json", **(FOREIGN if foreign else {})}
    # HEAD carries no body (as a page's fetch(url, {method: "HEAD"}) sends it).
    content = None if method in ("GET", "HEAD") else body
    return await d.http.request(method, path, content=content, headers=headers)


def allowed(path: str) -> set[str]:
    return {"POST"} if path.rsplit("/", 1)[-1] in CONTROLS else {"GET", "HEAD"}


@pytest.mark.parametrize("foreign", [False, True], ids=["same-origin", "foreign-origin"])
@pytest.mark.parametrize("method", METHODS)
async def test_no_method_but_post_reaches_a_control_and_no_foreign_one_at_all(
    method: str, foreign: bool
) -> None:
    async with dashboard() as d:
        await started(d)
        before = await committed(d)
        paths = [*READS, "/api/stream", *(control_url(c) for c in CONTROLS)]
        for path in paths:
            if method == "GET" and path == "/api/stream":
                continue  # an endless stream; its GET is served in test_server.py
            control = path.rsplit("/", 1)[-1] if path.startswith("/api/runs/") else ""
            if method == "POST" and control in CONTROLS and not foreign:
                continue  # the one request that may change a run (below)
            answer = await request(d, method, path, BODIES.get(control, b"{}"), foreign=foreign)
            where = f"{method} {path}"
            if foreign and method != "GET":
                assert answer.status_code == 403, where
                if method != "HEAD":
                    assert answer.json()["error"] == "cross_origin", where
            elif method in ("GET", "HEAD") and allowed(path) != {"POST"}:
                assert answer.status_code == 200, where
            else:
                assert answer.status_code == 405, where
                assert set(answer.headers["allow"].split(", ")) == allowed(path), where
                if method != "HEAD" and path.startswith("/api/"):
                    error = answer.json()
                    assert error["error"] == "method_not_allowed", where
                    assert method in error["message"], where
                    assert all(m in error["message"] for m in allowed(path)), where
        assert await committed(d) == before, f"a {method} request changed a run"


@pytest.mark.parametrize("control", CONTROLS)
async def test_a_same_origin_post_runs_each_control(control: str) -> None:
    """(The counterpart of the test above: the runs it watches do change under a POST.)"""
    async with dashboard() as d:
        await started(d)
        before = await committed(d)
        answer = await request(d, "POST", control_url(control), BODIES[control], foreign=False)
        assert answer.status_code == 200, answer.text
        state: JsonValue = answer.json()
        assert isinstance(state, dict)
        assert await committed(d) != before


async def test_a_head_request_to_the_live_stream_answers_its_headers_and_ends() -> None:
    async with dashboard() as d:
        answer = await d.http.head("/api/stream")
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        assert answer.content == b""


async def test_a_foreign_head_request_is_refused_even_with_the_dashboards_own_referer() -> None:
    async with dashboard() as d:
        await started(d)
        before = await committed(d)
        headers = {"Sec-Fetch-Site": "cross-site", "Referer": f"{BASE}/"}
        answer = await d.http.head(control_url("cancel"), headers=headers)
        assert answer.status_code == 403
        assert await committed(d) == before
