"""The dashboard's pages as the server renders them: the runs table (columns, filters,
pages, newest first) and one run's page (record, children, transcript, ticket, events)."""

from __future__ import annotations

import html
import re

import pytest

from awaken_trio import LiveCommand, RetryPolicy, RunContext
from awaken_trio._face.shapes import SUMMARY_LENGTH
from awaken_trio.agent import Agent, ModelReply, ScriptedModel, Tool, ToolCall
from tests.ui.ui_helpers import asks, caught_up, dashboard, page, parent, settle

pytestmark = pytest.mark.usefixtures("autojump_clock")


def row_ids(text: str) -> list[str]:
    return re.findall(r'<tr data-run-id="([^"]*)"', text)


async def test_the_runs_table_lists_newest_first_with_state_thread_name_and_last_event() -> None:
    async with dashboard() as d:
        await d.runtime.submit("steps", run_id="old", thread_id="t-old")
        await d.runtime.submit("waits", run_id="new", thread_id="t-new")
        await d.runtime.stop_run("old", "budget")
        await caught_up(d)
        text = (await d.http.get("/")).text
        assert row_ids(text) == ["new", "old"]
        old = text[text.index('data-run-id="old"') :]
        cells = re.findall(r"<td[^>]*>(.*?)</td>", old[: old.index("</tr>")])
        last = html.escape('committed {"source": "stop_run", "reason": "budget"}')
        assert cells[1:6] == ["ended: stopped (budget)", "0", "t-old", "steps", last]
        assert re.fullmatch(r"\d+[smhd]", cells[6])  # its age
        new = text[text.index('data-run-id="new"') :]
        assert "committed {&quot;source&quot;: &quot;submit&quot;}" in new[: new.index("</tr>")]


async def emits_and_fails(ctx: RunContext) -> object:
    await ctx.emit("agent.tool_started", {"tool": "search", "query": "x" * 500})
    await ctx.boundary(wait=True)
    raise ValueError("boom")


async def test_the_last_event_column_shows_its_kind_and_detail_in_short() -> None:
    """Each row's own last event, never "committed" alone; a long detail is cut, and a
    failure's traceback is left to the run's page."""
    async with dashboard() as d:
        await d.runtime.start(emits_and_fails, run_id="e")
        await settle(d.runtime, "e", "running")
        await caught_up(d)
        [row] = (await d.http.get("/ui/table")).json()
        emitted = row["last_event"]["text"]
        assert emitted.startswith('agent.tool_started {"tool": "search", "query": "xxx')
        assert emitted.endswith("…")
        assert len(emitted) == SUMMARY_LENGTH
        await d.runtime.send(LiveCommand.Wake("e"))
        await settle(d.runtime, "e", "ended")
        await caught_up(d)
        [row] = (await d.http.get("/ui/table")).json()
        failed = row["last_event"]["text"]
        assert failed.startswith("committed {")
        assert "value_error" in failed or "ValueError" in failed
        assert "Traceback" not in failed


async def test_the_table_filters_and_pages_through_thousands_of_runs() -> None:
    async with dashboard() as d:
        for n in range(1200):
            await d.runtime.submit("steps" if n % 2 else "waits", run_id=f"r{n:04}")
        await caught_up(d)
        first = (await d.http.get("/")).text
        assert row_ids(first) == [f"r{n:04}" for n in range(1199, 1149, -1)]
        older = re.search(r'<a id="older" href="([^"]*)"', first)
        assert older is not None
        second = (await d.http.get(older.group(1).replace("&amp;", "&"))).text
        assert row_ids(second)[0] == "r1149"
        assert 'id="newest"' in second
        named = (await d.http.get("/", params={"name": "waits", "limit": "3"})).text
        assert row_ids(named) == ["r1198", "r1196", "r1194"]
        table = (await d.http.get("/ui/table", params={"name": "waits", "limit": "3"})).json()
        assert [item["row"]["run_id"] for item in table] == ["r1198", "r1196", "r1194"]
        assert all(item["last_event"]["kind"] == "committed" for item in table)
        assert all(isinstance(item["created_at"], float) for item in table)
        assert (await d.http.get("/", params={"state": "nope"})).status_code == 400


async def test_a_runs_page_shows_its_children_as_a_tree() -> None:
    async with dashboard() as d:
        await d.runtime.submit("steps", run_id="unrelated")
        await d.runtime.start(parent, run_id="p", name="parent")
        await settle(d.runtime, "p.child.grandchild", "running")
        text = (await d.http.get(page("p"))).text
        tree = text[text.index('id="children"') :]
        tree = tree[: tree.index("</div>")]
        assert "unrelated" not in tree
        # The grandchild is nested inside the child's item.
        assert re.search(r"<li><a [^>]*>p\.child</a>.*<ul><li><a [^>]*>p\.child\.grandchild<", tree)
        child = (await d.http.get(page("p.child"))).text
        assert 'href="/runs/p"' in child  # its parent


async def lookup(arguments: dict[str, object], ctx: object) -> object:
    return {"found": arguments["q"]}


async def test_an_agent_runs_page_shows_its_transcript_with_tool_calls_and_results() -> None:
    model = ScriptedModel(
        [
            ModelReply(tool_calls=(ToolCall("call-1", "lookup", {"q": "trio"}),)),
            ModelReply(text="it is a library"),
        ]
    )
    agent = Agent(model, [Tool("lookup", lookup)], system="be brief")
    async with dashboard() as d:
        handle = await d.runtime.start(agent, input="what is trio?", run_id="agent")
        await handle.wait()
        text = (await d.http.get(page("agent"))).text
        transcript = text[text.index('id="transcript"') : text.index("</ol>")]
        roles = re.findall(r'<li class="message role-(\w+)">', transcript)
        assert roles == ["system", "user", "assistant", "tool", "assistant"]
        assert '<span class="tool">lookup</span>' in transcript
        assert "call-1" in transcript
        assert "result of call-1" in transcript
        assert "&quot;found&quot;: &quot;trio&quot;" in transcript
        assert "it is a library" in transcript


async def test_an_awaiting_runs_page_shows_its_live_ticket_with_what_it_accepts() -> None:
    async with dashboard() as d:
        await d.runtime.start(asks, run_id="a", name="asks")
        await settle(d.runtime, "a", "awaiting")
        text = (await d.http.get(page("a"))).text
        assert 'id="ticket" class="ticket"' in text
        accepts = re.search(r'<pre id="ticket-accepts" class="json">(.*?)</pre>', text, re.S)
        assert accepts is not None
        assert "&quot;type&quot;: &quot;string&quot;" in accepts.group(1)
        assert "user_input" in text
        assert re.findall(r'<form data-control="(\w+)"', text) == [
            "cancel",
            "stop",
            "pause",
            "wake",
            "message",
            "resume",
        ]
        events = re.findall(r"<tr><td>(\d+)</td>", text)
        assert events == sorted(events, key=int)
        assert len(events) >= 2


async def test_a_runs_page_shows_its_deadline() -> None:
    async with dashboard() as d:
        await d.runtime.submit("steps", run_id="limited", deadline=4102444800.0)  # 2100
        await d.runtime.submit("steps", run_id="free")
        text = (await d.http.get(page("limited"))).text
        shown = re.search(r'<dt>deadline</dt><dd><span id="run-deadline">([^<]*)<', text)
        assert shown is not None
        assert shown.group(1).startswith(("2099-12-31", "2100-01-01"))  # the local date
        assert "&quot;deadline&quot;: 4102444800.0" in text  # the record, as JSON
        free = (await d.http.get(page("free"))).text
        assert 'id="run-deadline"' not in free
        assert "&quot;deadline&quot;: null" in free


async def test_a_runs_page_shows_where_its_retries_stand() -> None:
    async with dashboard() as d:
        policy = RetryPolicy(attempts=3, backoff=2, codes=("rate_limited",))
        await d.runtime.submit("steps", run_id="retried", retry=policy)
        await d.runtime.submit("steps", run_id="once")
        text = (await d.http.get(page("retried"))).text
        shown = re.search(r'<dt>retry</dt><dd><span id="run-retry">([^<]*)<', text)
        assert shown is not None
        assert shown.group(1) == (
            "0 of 2 retries used (3 attempts; waits 2.0s, x2, at most 1m 00s; codes rate_limited)"
        )
        assert "&quot;retries&quot;: 0" in text  # the record, as JSON
        once = (await d.http.get(page("once"))).text
        assert 'id="run-retry"' not in once
        assert "&quot;retry&quot;: null" in once
