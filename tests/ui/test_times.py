"""Times on the dashboard's pages: one formatting function (`format_time`, which the page's
script mirrors) shows a time as local date and time, and a time no calendar date stands for
(a ticket deadline of 1e18, an odd injected clock's event times) as its number, never a 500."""

from __future__ import annotations

import math
import re
import time

import pytest

from awaken_trio import RunContext
from awaken_trio._face.shapes import format_time
from tests.ui.ui_helpers import caught_up, dashboard, page, settle

pytestmark = pytest.mark.usefixtures("autojump_clock")


def test_a_time_is_local_date_and_time_or_time_of_day() -> None:
    at = 1_700_000_000.75
    assert format_time(at) == time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
    assert format_time(at, date=False) == time.strftime("%H:%M:%S", time.localtime(at))
    assert format_time(0.0) == time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(0))
    assert re.fullmatch(r"19\d\d-\d\d-\d\d \d\d:\d\d:\d\d", format_time(-86400.0 * 365))


@pytest.mark.parametrize(
    ("at", "shown"),
    [
        (1e18, "1000000000000000000"),
        (-1e18, "-1000000000000000000"),
        (1e21, "1e+21"),
        (1.5e300, "1.5e+300"),
        (253402300800.0, "253402300800"),  # 10000-01-01: past the last year shown
        (-62135596801.0, "-62135596801"),  # before the year 1
        (300000000000.25, "300000000000.25"),
        (math.inf, "Infinity"),
        (-math.inf, "-Infinity"),
        (math.nan, "NaN"),
    ],
)
def test_a_time_no_calendar_date_stands_for_is_its_number_as_javascript_writes_it(
    at: float, shown: str
) -> None:
    assert format_time(at) == shown
    assert format_time(at, date=False) == shown


async def asks_for_ever(ctx: RunContext) -> object:
    if ctx.resumed_ticket is None:
        await ctx.await_input("user_input", deadline=1e18)
    return ctx.resume_value


async def test_a_ticket_deadline_far_in_the_future_is_shown_as_its_number() -> None:
    async with dashboard() as d:
        await d.runtime.start(asks_for_ever, run_id="far")
        await settle(d.runtime, "far", "awaiting")
        answer = await d.http.get(page("far"))
        assert answer.status_code == 200, answer.text[:500]
        assert "<dt>deadline</dt><dd>1000000000000000000</dd>" in answer.text


@pytest.mark.parametrize("at", [1e300, -1e18, 1e18])
async def test_event_times_of_an_odd_clock_are_shown_as_numbers(at: float) -> None:
    async with dashboard(clock=lambda: at) as d:
        await d.runtime.submit("steps", run_id="odd")
        await d.runtime.cancel_run("odd")
        await caught_up(d)
        shown = format_time(at)
        run = await d.http.get(page("odd"))
        assert run.status_code == 200, run.text[:500]
        assert f"<td>{shown}</td></tr>" in run.text
        for path in ("/", "/ui/table", "/api/runs"):
            answer = await d.http.get(path)
            assert answer.status_code == 200, (path, answer.text[:500])
