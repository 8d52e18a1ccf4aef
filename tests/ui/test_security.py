"""The dashboard's security (DESIGN §3.6): the token, cross-origin controls, the Host of a
tokenless dashboard, the headers of every answer, and escaping of everything a run holds."""

from __future__ import annotations

import pytest

from awaken_trio import RunState
from awaken_trio.agent import Agent, ModelReply, ScriptedModel, Tool, ToolCall
from tests.ui.ui_helpers import BASE, TOKEN, XSS, api, asks, dashboard, page, settle

pytestmark = pytest.mark.usefixtures("autojump_clock")

ROUTES = ("/", "/api/runs", "/ui/table", "/api/stream", "/static/dashboard.js", page("r"))


@pytest.mark.parametrize("path", ROUTES)
async def test_with_a_token_a_request_without_it_is_401(path: str) -> None:
    async with dashboard(token=TOKEN) as d:
        await d.runtime.submit("steps", run_id="r")
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            answer = await d.http.get(path, headers=headers)
            assert answer.status_code == 401, headers
            assert answer.json()["error"] == "unauthorized"
            assert TOKEN not in answer.text
            assert answer.headers["www-authenticate"].startswith("Bearer")


async def test_with_a_token_a_control_without_it_is_401_and_changes_nothing() -> None:
    async with dashboard(token=TOKEN) as d:
        await d.runtime.submit("steps", run_id="r")
        answer = await d.http.post(api("r", "cancel"), json={}, params={"token": TOKEN})
        assert answer.status_code == 401  # a token in the query opens pages, never a POST
        assert await d.runtime.state("r") == RunState.Queued()
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        answer = await d.http.post(api("r", "cancel"), json={}, headers=bearer)
        assert answer.status_code == 200


async def test_the_page_opened_with_the_token_sets_a_strict_httponly_cookie_that_admits() -> None:
    async with dashboard(token=TOKEN) as d:
        opened = await d.http.get("/", params={"token": TOKEN})
        assert opened.status_code == 200
        cookie = opened.headers["set-cookie"]
        assert cookie.startswith(f"awaken_trio_ui={TOKEN};")
        assert "HttpOnly" in cookie
        assert "SameSite=Strict" in cookie
        assert opened.headers["referrer-policy"] == "no-referrer"
        assert TOKEN not in opened.text  # never written into the page
        # The client kept the cookie: later requests are admitted without the query.
        assert (await d.http.get("/api/runs")).status_code == 200
        d.http.cookies.clear()
        assert (await d.http.get("/api/runs")).status_code == 401
        wrong = await d.http.get("/", params={"token": "x" * 26})
        assert wrong.status_code == 401
        assert "set-cookie" not in wrong.headers


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Origin": "http://127.0.0.1:9999"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": BASE, "Sec-Fetch-Site": "cross-site"},
    ],
)
async def test_a_cross_origin_control_is_403_and_changes_nothing(headers: dict[str, str]) -> None:
    async with dashboard() as d:
        await d.runtime.submit("steps", run_id="r")
        for control in ("cancel", "stop"):
            answer = await d.http.post(api("r", control), json={"reason": "x"}, headers=headers)
            assert answer.status_code == 403
            assert answer.json()["error"] == "cross_origin"
        assert await d.runtime.state("r") == RunState.Queued()


async def test_a_cross_origin_control_is_refused_even_with_the_token() -> None:
    async with dashboard(token=TOKEN) as d:
        await d.runtime.submit("steps", run_id="r")
        headers = {"Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.example"}
        answer = await d.http.post(api("r", "cancel"), json={}, headers=headers)
        assert answer.status_code == 403
        assert await d.runtime.state("r") == RunState.Queued()


async def test_a_same_origin_control_from_the_page_is_served() -> None:
    async with dashboard() as d:
        await d.runtime.submit("steps", run_id="r")
        headers = {"Origin": BASE, "Sec-Fetch-Site": "same-origin"}
        answer = await d.http.post(api("r", "cancel"), json={}, headers=headers)
        assert answer.status_code == 200


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8765", "10.0.0.1", "[2001:db8::1]"])
async def test_without_a_token_only_loopback_host_names_are_served(host: str) -> None:
    """A page on another site that points its own name at 127.0.0.1 (DNS rebinding) is
    refused."""
    async with dashboard() as d:
        answer = await d.http.get("/api/runs", headers={"Host": host})
        assert answer.status_code == 403
        assert answer.json()["error"] == "forbidden_host"
        for loopback in ("localhost:8765", "127.0.0.1", "[::1]:8765"):
            assert (await d.http.get("/api/runs", headers={"Host": loopback})).status_code == 200


@pytest.mark.parametrize(
    "path", [*(r for r in ROUTES if r != "/api/stream"), "/nothing", api("nobody")]
)
async def test_every_answer_forbids_inline_script_framing_and_sniffing(path: str) -> None:
    """(The live stream's headers are checked on a real server, test_server.py: this
    transport waits for a body's end, which a stream never reaches.)"""
    async with dashboard() as d:
        await d.runtime.submit("steps", run_id="r")
        headers = (await d.http.get(path)).headers
        policy = headers["content-security-policy"]
        assert "script-src 'self'" in policy
        assert "unsafe-inline" not in policy
        assert "frame-ancestors 'none'" in policy
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["x-frame-options"] == "DENY"


async def add(arguments: dict[str, object], ctx: object) -> object:
    return XSS


def assert_inert(text: str) -> None:
    """The payload appears only escaped: no tag or attribute of it survives."""
    assert "<script>alert" not in text
    assert "<img" not in text
    assert "onerror=alert(2)>" not in text
    assert text.count("<script") == 1  # the dashboard's own, from /static
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text


async def test_nothing_a_run_holds_becomes_markup_on_its_pages() -> None:
    model = ScriptedModel(
        [
            ModelReply(text=XSS, tool_calls=(ToolCall("c1", "add", {"q": XSS}),)),
            ModelReply(text=XSS),
        ]
    )
    agent = Agent(model, [Tool("add", add, description=XSS)], system=XSS)
    async with dashboard() as d:
        run_id = f"x{XSS}"
        handle = await d.runtime.start(agent, input=XSS, run_id=run_id, thread_id=XSS, name=XSS)
        await handle.wait()
        await d.runtime.start(asks, run_id=f"ask{XSS}", name="asks")
        await settle(d.runtime, f"ask{XSS}", "awaiting")
        runs = await d.http.get("/", params={"name": XSS, "thread": XSS})
        assert runs.status_code == 200
        assert_inert(runs.text)  # the filter form's values too
        assert_inert((await d.http.get("/")).text)
        run = await d.http.get(page(run_id))
        assert run.status_code == 200
        assert 'id="transcript"' in run.text
        assert_inert(run.text)
        ticket = await d.http.get(page(f"ask{XSS}"))
        assert 'id="ticket-accepts"' in ticket.text
        assert_inert(ticket.text)
        missing = await d.http.get(page(f"nobody{XSS}"))
        assert missing.status_code == 404
        assert "<img" not in missing.text
