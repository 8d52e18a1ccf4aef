"""What an operator expects of the dashboard (DESIGN §3.6), as the server renders and
answers it: the controls a run's committed state allows (and why not the others), the
confirmation a control that ends the run asks, a failure's traceback with its failing
attempt, the timeline, failures and cancels told apart, the search by run id."""

from __future__ import annotations

import html
import re

import pytest

from awaken_trio import LiveCommand, RunContext, RunState
from awaken_trio._face.controls import CONTROL_NAMES, unavailable
from awaken_trio._face.shapes import format_duration, format_time
from tests.ui.ui_helpers import XSS, asks, caught_up, dashboard, page, settle, waits

pytestmark = pytest.mark.usefixtures("autojump_clock")


def forms(text: str) -> dict[str, str]:
    """Each control's form on a run's page: ``""`` when offered, else its why."""
    found = {}
    for name, disabled, why in re.findall(
        r'<form data-control="(\w+)"[^>]*><fieldset( disabled)?>.*?<span class="why">(.*?)</span>',
        text,
    ):
        found[name] = html.unescape(why) if disabled else ""
        assert bool(disabled) == bool(why)
    return found


async def test_a_run_page_offers_the_controls_its_state_allows_and_says_why_not_others() -> None:
    async with dashboard() as d:
        await d.runtime.start(waits, run_id="w")
        await d.runtime.start(asks, run_id="a")
        await settle(d.runtime, "w", "running")
        await settle(d.runtime, "a", "awaiting")
        running = forms((await d.http.get(page("w"))).text)
        awaiting = forms((await d.http.get(page("a"))).text)
        await d.runtime.cancel_run("w", reason="done")
        ended_page = (await d.http.get(page("w"))).text
        ended = forms(ended_page)
        assert '<section id="controls" class="controls none-offered">' in ended_page
        assert (
            '<p id="no-controls" class="note">the run has ended (cancelled): no control can'
            " change it</p>" in ended_page
        )
        assert '<p id="no-controls" class="note"></p>' in (await d.http.get(page("a"))).text
        for run_id, shown in (("w", ended), ("a", awaiting)):
            state = await d.runtime.state(run_id)
            assert shown == {name: unavailable(name, state) or "" for name in CONTROL_NAMES}
        assert [name for name, why in running.items() if why] == ["resume"]
        assert [name for name, why in awaiting.items() if not why] == ["cancel", "stop", "resume"]
        assert set(ended.values()) == {
            f"the run has ended (cancelled): nothing is left to {name}" for name in CONTROL_NAMES
        }
        # What the page's script redraws the controls from.
        answer = (await d.http.get("/ui/controls/a")).json()
        assert answer["state"]["kind"] == "awaiting"
        assert answer["controls"] == {name: why or None for name, why in awaiting.items()}
        assert answer["none"] is None
        assert (await d.http.get("/ui/controls/w")).json()["none"] == (
            "the run has ended (cancelled): no control can change it"
        )


async def test_only_cancel_and_stop_ask_for_a_confirmation_naming_the_run() -> None:
    async with dashboard() as d:
        await d.runtime.start(waits, run_id=XSS)
        await settle(d.runtime, XSS, "running")
        text = (await d.http.get(page(XSS))).text
        confirm = r'<form data-control="(\w+)"[^>]*data-confirm="([^"]*)"'
        asks_first = dict(re.findall(confirm, text))
        assert set(asks_first) == {"cancel", "stop"}
        assert html.unescape(asks_first["cancel"]).startswith(f"Cancel run {XSS}? It ends now")
        assert html.unescape(asks_first["stop"]).startswith(f"Stop run {XSS}? It ends now")
        assert "<script>" not in text


async def test_ui_controls_answers_404_for_an_unknown_run_and_takes_no_query() -> None:
    async with dashboard() as d:
        missing = await d.http.get("/ui/controls/nope")
        assert missing.status_code == 404
        assert missing.json()["error"] == "unknown_run"
        await d.runtime.start(waits, run_id="w")
        extra = await d.http.get("/ui/controls/w?x=1")
        assert extra.status_code == 400
        assert (await d.http.post("/ui/controls/w")).status_code == 405


async def fails_later(ctx: RunContext) -> object:
    await ctx.boundary(wait=True)
    raise ValueError(f"the source is empty {XSS}")


async def test_a_failed_runs_page_shows_its_traceback_and_failing_attempt() -> None:
    async with dashboard() as d:
        await d.runtime.start(fails_later, run_id="f")
        await settle(d.runtime, "f", "running")
        healthy = (await d.http.get(page("f"))).text
        assert '<section id="failure" class="hidden"></section>' in healthy
        await d.runtime.send(LiveCommand.Wake("f"))
        await settle(d.runtime, "f", "ended")
        text = (await d.http.get(page("f"))).text
        failure = text[text.index('<section id="failure"') :]
        failure = failure[: failure.index("</section>")]
        error = re.search(r'<dd id="failure-error">(.*?)</dd>', failure)
        assert error is not None
        assert html.unescape(error.group(1)).startswith("ended: failed (value_error: the source")
        assert '<dd id="failure-attempt">generation 1 (event ' in failure
        traceback = re.search(r'<pre id="traceback" class="traceback">(.*?)</pre>', failure, re.S)
        assert traceback is not None
        shown = html.unescape(traceback.group(1))
        assert shown.startswith("Traceback (most recent call last)")
        assert f"ValueError: the source is empty {XSS}" in shown
        assert XSS not in failure  # escaped


async def progresses(ctx: RunContext) -> object:
    """Two boundaries, a wait for input, two more boundaries."""
    for step in range(2):
        await ctx.boundary({"step": step})
    if ctx.resumed_ticket is None:
        await ctx.await_input("user_input")
    return None


async def test_the_timeline_lists_each_state_once_with_how_long_it_lasted() -> None:
    async with dashboard() as d:
        handle = await d.runtime.start(progresses, run_id="t")
        await handle.wait()
        await d.runtime.resume("t", "yes")
        await settle(d.runtime, "t", "ended")
        events = [e async for e in d.runtime.events("t", follow=False)]
        text = (await d.http.get(page("t"))).text
        timeline = text[text.index('<ol id="timeline"') :]
        timeline = timeline[: timeline.index("</ol>")]
        keys = re.findall(r'data-key="([^"]*)"', timeline)
        assert keys[0] == "running 1"
        assert keys[1].startswith("awaiting ")
        assert keys[2:] == ["running 2", "ended"]
        assert len(events) > len(keys)  # progress commits are not entries of their own
        lasted = re.findall(r'<span class="tl-for">([^<]*)</span>', timeline)
        assert lasted[-1] == ""
        assert all(text.startswith("for ") for text in lasted[:-1])
        started = re.findall(r'<span class="tl-at">\+([^<]*)</span>', timeline)
        assert started[0] == format_duration(0)


async def test_failures_cancels_and_natural_ends_are_drawn_apart_in_the_table() -> None:
    async with dashboard() as d:
        await d.runtime.start(fails_later, run_id="bad")
        await d.runtime.start(waits, run_id="gone")
        await d.runtime.start(waits, run_id="done")
        for run_id in ("bad", "gone", "done"):
            await settle(d.runtime, run_id, "running")
        await d.runtime.send(LiveCommand.Wake("bad"))
        await d.runtime.send(LiveCommand.Wake("done"))
        await d.runtime.cancel_run("gone")
        for run_id in ("bad", "done"):
            await settle(d.runtime, run_id, "ended")
        await caught_up(d)
        text = (await d.http.get("/")).text
        classes = dict(re.findall(r'<tr data-run-id="(\w+)".*?<td class="([^"]*)">', text))
        assert classes == {
            "bad": "state state-ended cause-failed",
            "gone": "state state-ended cause-cancelled",
            "done": "state state-ended cause-natural_end",
        }


async def test_each_row_and_run_page_shows_when_it_was_created_and_how_long_it_ran() -> None:
    async with dashboard() as d:
        await d.runtime.start(waits, run_id="w")
        await d.runtime.submit("steps", run_id="q")  # queued: nobody serves it here
        await settle(d.runtime, "w", "running")
        await d.runtime.send(LiveCommand.Wake("w"))
        await settle(d.runtime, "w", "ended")
        await caught_up(d)
        events = [e async for e in d.runtime.events("w", follow=False)]
        started = next(e.at for e in events if isinstance(e.state, RunState.Running))
        text = (await d.http.get("/")).text
        for run_id, duration in (("w", format_duration(events[-1].at - started)), ("q", "")):
            row = text[text.index(f'<tr data-run-id="{run_id}"') :]
            row = row[: row.index("</tr>")]
            assert '<td class="created">' in row
            assert f'<td class="duration">{duration}</td>' in row
        page_text = (await d.http.get(page("w"))).text
        assert f'<span id="run-started">{format_time(started)}</span>' in page_text
        assert f'<span id="run-ended">{format_time(events[-1].at)}</span>' in page_text
        shown = format_duration(events[-1].at - started)
        assert f'<span id="run-duration">{shown}</span>' in page_text
        queued = (await d.http.get(page("q"))).text
        assert '<span id="run-started"></span>' in queued
        assert '<span id="run-duration"></span>' in queued


async def test_the_search_goes_to_a_run_by_its_id_and_says_when_none_has_it() -> None:
    async with dashboard() as d:
        await d.runtime.start(waits, run_id="a/b c")
        found = await d.http.get("/search", params={"run_id": " a/b c "})
        assert found.status_code == 303
        assert found.headers["location"] == "/runs/a%2Fb%20c"
        missing = await d.http.get("/search", params={"run_id": "x" * 100})
        assert missing.status_code == 404
        assert "no run has the id &#x27;xxxxxxxxxxxxxxxxxxxxxxxx&#x27;... (100 characters)" in (
            missing.text
        )
        empty = await d.http.get("/search", params={"run_id": ""})
        assert empty.status_code == 400
        unknown = await d.http.get("/search", params={"id": "a"})
        assert unknown.status_code == 400
        assert 'id="search"' in (await d.http.get("/")).text


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "0.0s"),
        (0.44, "0.4s"),
        (59.94, "59.9s"),
        (59.96, "1m 00s"),
        (184, "3m 04s"),
        (7385, "2h 03m"),
        (273605, "3d 04h"),
        (-1, ""),
        (float("nan"), ""),
    ],
)
def test_durations_are_shown_in_two_units_at_most(seconds: float, shown: str) -> None:
    assert format_duration(seconds) == shown
