"""What an operator expects of the dashboard (DESIGN §3.6), in a real headless browser:
only the controls a run's committed state allows, a confirmation before cancel and stop, a
failure's traceback with its failing attempt, failures red and cancels apart from natural
ends, an event timeline drawn live, and a search by run id."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio

from awaken_trio import EndCause, LiveCommand, RunState, open_runtime
from awaken_trio._face.shapes import format_duration, format_time
from tests.ui.browser_helpers import browser_page, need_browser
from tests.ui.server_helpers import ui_server, worker
from tests.ui.test_browser import until_state

if TYPE_CHECKING:
    from playwright.sync_api import Dialog, Page

# Each starts a server, a worker and a browser: several seconds.
pytestmark = [pytest.mark.usefixtures("browser"), pytest.mark.slow]


@pytest.fixture
def browser() -> None:
    need_browser()


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/runs.db"


def offered(page: Page) -> dict[str, str]:
    """Each control's form: ``""`` when it is offered, else why it is not."""
    found: dict[str, str] = page.eval_on_selector_all(
        "form[data-control]",
        "forms => Object.fromEntries(forms.map(f => [f.dataset.control,"
        " f.querySelector('fieldset').disabled ? f.querySelector('.why').textContent : '']))",
    )
    return found


async def test_a_run_page_offers_what_its_state_allows_and_asks_before_ending_it(
    store: str, tmp_path: Path
) -> None:
    async with open_runtime(store) as runtime:
        await runtime.submit("steps", run_id="live")
    async with ui_server(store) as server, worker(store):
        await until_state(store, "live", RunState.Running)

        async def pause() -> None:
            async with open_runtime(store) as control:
                await control.send(LiveCommand.Pause("live"))
            await until_state(store, "live", RunState.Awaiting)

        def browse() -> tuple[dict[str, str], list[str], str, dict[str, str], dict[str, str]]:
            asked: list[str] = []
            answers = iter([False, True])  # the first cancel is not confirmed, the stop is

            def on_dialog(dialog: Dialog) -> None:
                asked.append(f"{dialog.type}: {dialog.message}")
                if next(answers):
                    dialog.accept()
                else:
                    dialog.dismiss()

            with browser_page(tmp_path / "profile") as page:
                page.on("dialog", on_dialog)
                page.goto(f"{server.url}/runs/live")
                page.wait_for_selector("body[data-live=connected]")
                page.wait_for_function("() => Number(document.body.dataset.controlsShown) >= 1")
                running = offered(page)
                assert not page.is_visible("#no-controls")
                # An unavailable control shows its button disabled and why, not its fields.
                assert not page.is_visible("form[data-control=resume] textarea")
                assert page.is_visible("form[data-control=resume] .why")
                # Not confirmed: nothing is sent.
                page.click("form[data-control=cancel] button")
                page.wait_for_selector("#control-result[data-status='unconfirmed']")
                unconfirmed = page.text_content("#control-result strong") or ""
                # Paused elsewhere: the page offers what an awaiting run allows.
                trio.from_thread.run(pause)
                page.wait_for_selector("form[data-control=resume] fieldset:enabled")
                awaiting = offered(page)
                page.fill("form[data-control=stop] input[name=reason]", "budget")
                page.click("form[data-control=stop] button")
                page.wait_for_selector("#control-result[data-status='200']")
                page.wait_for_selector(
                    "form[data-control=cancel] fieldset:disabled", state="attached"
                )
                page.wait_for_selector("#no-controls:visible")
                assert (page.text_content("#no-controls") or "").startswith("the run has ended")
                return running, asked, unconfirmed, awaiting, offered(page)

        running, asked, unconfirmed, awaiting, ended = await trio.to_thread.run_sync(browse)
        assert running == {
            "cancel": "",
            "stop": "",
            "pause": "",
            "wake": "",
            "message": "",
            "resume": "the run is running: only an awaiting run has a ticket to answer",
        }
        assert asked == [
            "confirm: Cancel run live? It ends now, wherever it runs, as cancelled;"
            " this cannot be undone.",
            "confirm: Stop run live? It ends now, wherever it runs, as stopped with your"
            " reason; this cannot be undone.",
        ]
        assert unconfirmed == "not sent: cancel was not confirmed"
        assert awaiting["resume"] == ""
        assert awaiting["cancel"] == ""
        assert awaiting["pause"].startswith("the run is awaiting manual_pause: it is paused")
        assert set(ended.values()) == {
            f"the run has ended (stopped (budget)): nothing is left to {name}"
            for name in ("cancel", "stop", "pause", "wake", "message", "resume")
        }
        async with open_runtime(store) as runtime:
            assert await runtime.state("live") == RunState.Ended(EndCause.Stopped("budget"))
            kinds = [e.detail.get("source") async for e in runtime.events("live", follow=False)]
            assert "cancel_run" not in kinds  # the unconfirmed cancel never reached the run


async def test_a_failure_shows_its_traceback_and_is_red_and_a_cancel_is_apart(
    store: str, tmp_path: Path
) -> None:
    async with open_runtime(store) as runtime:
        await runtime.submit("fails", run_id="bad")
        await runtime.submit("steps", run_id="done")
        await runtime.submit("steps", run_id="gone")
    async with ui_server(store) as server, worker(store):
        for run_id in ("bad", "done", "gone"):
            await until_state(store, run_id, RunState.Running)

        async def end_them() -> None:
            async with open_runtime(store) as control:
                await control.send(LiveCommand.Message("bad", "fail"))
                await control.send(LiveCommand.Message("done", "finish"))
                await control.cancel_run("gone")

        Seen = tuple[str, str, str, dict[str, str], dict[str, str], dict[str, list[str]]]

        def browse() -> Seen:
            with browser_page(tmp_path / "profile") as page:
                # Open while it runs: the failure is drawn by the script as it happens.
                page.goto(f"{server.url}/runs/bad")
                page.wait_for_selector("body[data-live=connected]")
                assert not page.is_visible("#failure")
                trio.from_thread.run(end_them)
                page.wait_for_selector("#failure #traceback")
                live = page.text_content("#traceback") or ""
                attempt = page.text_content("#failure-attempt") or ""
                # Rendered by the server alike.
                page.reload()
                page.wait_for_selector("#failure #traceback")
                rendered = page.text_content("#traceback") or ""
                page.goto(f"{server.url}/")
                page.wait_for_selector("body[data-live=connected]")
                page.wait_for_function(
                    "() => [...document.querySelectorAll('#runs-body td.state')]"
                    ".every(td => td.textContent.startsWith('ended'))"
                )
                colours: dict[str, str] = page.eval_on_selector_all(
                    "#runs-body tr",
                    "rows => Object.fromEntries(rows.map(r => [r.dataset.runId,"
                    " getComputedStyle(r.querySelector('td.state')).color]))",
                )
                classes: dict[str, str] = page.eval_on_selector_all(
                    "#runs-body tr",
                    "rows => Object.fromEntries(rows.map(r => [r.dataset.runId,"
                    " r.querySelector('td.state').className]))",
                )
                page.wait_for_function("() => Number(document.body.dataset.refreshed) >= 1")
                times: dict[str, list[str]] = page.eval_on_selector_all(
                    "#runs-body tr",
                    "rows => Object.fromEntries(rows.map(r => [r.dataset.runId,"
                    " [r.querySelector('td.created').textContent,"
                    " r.querySelector('td.duration').textContent]]))",
                )
                return live, rendered, attempt, colours, classes, times

        live, rendered, attempt, colours, classes, times = await trio.to_thread.run_sync(browse)
        for traceback in (live, rendered):
            assert traceback.startswith("Traceback (most recent call last)")
            assert "ValueError: the source document is empty" in traceback
            assert "ui_bodies.py" in traceback
        assert live == rendered
        assert attempt.startswith("generation 1 (event ")
        assert classes == {
            "bad": "state state-ended cause-failed",
            "done": "state state-ended cause-natural_end",
            "gone": "state state-ended cause-cancelled",
        }
        assert colours["bad"] == "rgb(180, 35, 24)"  # red
        assert len(set(colours.values())) == 3  # a cancel apart from a natural end
        # The script draws each row's created time and duration as the server would.
        async with open_runtime(store) as runtime:
            for run_id in ("bad", "done", "gone"):
                events = [e async for e in runtime.events(run_id, follow=False)]
                started = next(e.at for e in events if isinstance(e.state, RunState.Running))
                ran = format_duration(events[-1].at - started)
                assert times[run_id] == [format_time(events[0].at), ran]


LAST_KEY_IS = (
    "(key) => { const last = document.querySelector('#timeline li:last-child');"
    " return !!last && last.dataset.key.startsWith(key); }"
)
"""A page condition: the timeline's last entry stands for a state whose key starts so."""


async def test_the_timeline_follows_a_run_through_its_states(store: str, tmp_path: Path) -> None:
    async with open_runtime(store) as runtime:
        await runtime.submit("steps", run_id="tl")
    async with ui_server(store) as server:

        async def step(what: str) -> None:
            async with open_runtime(store) as control:
                if what == "pause":
                    await control.send(LiveCommand.Pause("tl"))
                    await until_state(store, "tl", RunState.Awaiting)
                elif what == "resume":
                    await control.resume("tl", None)
                else:
                    await control.send(LiveCommand.Message("tl", "finish"))
                    await until_state(store, "tl", RunState.Ended)

        def browse(nursery: trio.Nursery) -> tuple[list[str], list[str], list[str]]:
            with browser_page(tmp_path / "profile") as page:
                page.goto(f"{server.url}/runs/tl")
                page.wait_for_selector("body[data-live=connected]")

                async def serve(*, task_status: trio.TaskStatus[None]) -> None:
                    async with worker(store):
                        task_status.started()
                        await trio.sleep_forever()

                trio.from_thread.run(nursery.start, serve)
                page.wait_for_function(LAST_KEY_IS, arg="running 1")
                trio.from_thread.run(step, "pause")
                page.wait_for_function(LAST_KEY_IS, arg="awaiting ")
                trio.from_thread.run(step, "resume")
                page.wait_for_function(LAST_KEY_IS, arg="running 2")
                trio.from_thread.run(step, "finish")
                page.wait_for_function(LAST_KEY_IS, arg="ended")
                keys = page.eval_on_selector_all("#timeline li", "l => l.map(i => i.dataset.key)")
                lasted = page.eval_on_selector_all(
                    "#timeline li .tl-for", "l => l.map(i => i.textContent)"
                )
                drawn = page.eval_on_selector_all("#timeline li", "l => l.map(i => i.textContent)")
                page.reload()
                page.wait_for_selector("body[data-live=connected]")
                rendered = page.eval_on_selector_all(
                    "#timeline li", "l => l.map(i => i.dataset.key)"
                )
                # The script draws what the server renders: the same times and durations.
                assert drawn == page.eval_on_selector_all(
                    "#timeline li", "l => l.map(i => i.textContent)"
                )
                return keys, lasted, rendered

        async with trio.open_nursery() as nursery:
            keys, lasted, rendered = await trio.to_thread.run_sync(browse, nursery)
            nursery.cancel_scope.cancel()
        # The resume is committed queued (for a worker that serves the body), then run.
        assert keys[:2] == ["queued", "running 1"]
        assert keys[2].startswith("awaiting ")
        assert keys[3:] == ["queued", "running 2", "ended"]
        assert rendered == keys
        assert all(text.startswith("for ") for text in lasted[:-1])
        assert lasted[-1] == ""


async def test_a_run_is_found_by_its_id(store: str, tmp_path: Path) -> None:
    async with open_runtime(store) as runtime:
        await runtime.submit("steps", run_id="needle/1")
        await runtime.submit("steps", run_id="hay")
    async with ui_server(store) as server:

        def browse() -> tuple[str, str, str, int]:
            with browser_page(tmp_path / "profile") as page:
                page.goto(f"{server.url}/")
                page.wait_for_selector("body[data-live=connected]")
                page.fill("#search input[name=run_id]", "needle/1")
                page.click("#search button")
                page.wait_for_selector("body[data-page=run]")
                found = page.url
                heading = page.text_content("h1 code") or ""
                page.goto(f"{server.url}/")
                page.fill("#search input[name=run_id]", "nothing-like-it")
                with page.expect_response(lambda r: "/search" in r.url) as answer:
                    page.click("#search button")
                return found, heading, page.text_content("p.error") or "", answer.value.status

        found, heading, missing, status = await trio.to_thread.run_sync(browse)
        assert found == f"{server.url}/runs/needle%2F1"
        assert heading == "needle/1"
        assert status == 404
        assert missing.startswith("no run has the id 'nothing-like-it' in this store")


async def test_the_counts_and_a_cause_filter_find_the_failed_runs(
    store: str, tmp_path: Path
) -> None:
    async with open_runtime(store) as runtime:
        await runtime.submit("fails", run_id="bad")
        await runtime.submit("steps", run_id="done")
        await runtime.submit("steps", run_id="live")
    async with ui_server(store) as server, worker(store):
        for run_id in ("bad", "done", "live"):
            await until_state(store, run_id, RunState.Running)

        async def end_them() -> None:
            async with open_runtime(store) as control:
                await control.send(LiveCommand.Message("done", "finish"))
                await control.send(LiveCommand.Message("bad", "fail"))
            await until_state(store, "bad", RunState.Ended)

        def counted(page: Page) -> dict[str, str]:
            found: dict[str, str] = page.eval_on_selector_all(
                "#counts a.count",
                "links => Object.fromEntries(links.map(a => [a.dataset.kind,"
                " a.querySelector('b').textContent]))",
            )
            return found

        def browse() -> tuple[dict[str, str], dict[str, str], list[str], str]:
            with browser_page(tmp_path / "profile") as page:
                page.goto(f"{server.url}/")
                page.wait_for_selector("body[data-live=connected]")
                before = counted(page)
                # The counts follow the commits, drawn by the script.
                trio.from_thread.run(end_them)
                page.wait_for_function(
                    "() => document.querySelector('#counts a[data-kind=failed] b')"
                    ".textContent === '1'"
                )
                page.wait_for_function(
                    "() => document.querySelector('#counts a[data-kind=natural_end] b')"
                    ".textContent === '1'"
                )
                after = counted(page)
                page.select_option("#filters select[name=state]", "failed")
                page.click("#filters button")
                page.wait_for_selector("body[data-live=connected]")
                rows = page.eval_on_selector_all(
                    "#runs-body tr", "rows => rows.map(r => r.dataset.runId)"
                )
                # A count is a link to the table filtered by it.
                page.click("#counts a[data-kind=running]")
                page.wait_for_selector("body[data-live=connected]")
                return before, after, rows, page.url

        before, after, rows, address = await trio.to_thread.run_sync(browse)
        assert (before["running"], before["ended"], before["failed"]) == ("3", "0", "0")
        assert (after["running"], after["ended"]) == ("1", "2")
        assert (after["failed"], after["natural_end"], after["cancelled"]) == ("1", "1", "0")
        assert rows == ["bad"]
        assert address == f"{server.url}/?state=running"


async def test_the_workers_page_follows_a_worker_from_serving_to_stopped(
    store: str, tmp_path: Path
) -> None:
    async with open_runtime(store) as runtime:
        await runtime.submit("steps", run_id="s")
    async with ui_server(store) as server, worker(store) as process:
        await until_state(store, "s", RunState.Running)

        async def drain() -> None:
            async with open_runtime(store) as control:
                [serving] = await control.list_workers()
                await control.send(LiveCommand.Message("s", "finish"))
                await control.drain_worker(serving.worker_id)

        def row(page: Page) -> list[str]:
            cells: list[str] = page.eval_on_selector_all(
                "#workers-body tr:first-child td", "tds => tds.map(td => td.textContent)"
            )
            return cells

        def browse() -> tuple[list[str], list[str]]:
            with browser_page(tmp_path / "profile") as page:
                page.goto(f"{server.url}/workers?all=1")
                page.wait_for_selector("#workers-body .worker-serving")
                serving = row(page)
                trio.from_thread.run(drain)
                # Redrawn from /api/workers as the worker drains, then stops.
                page.wait_for_selector("#workers-body .worker-stopped")
                return serving, row(page)

        serving, stopped = await trio.to_thread.run_sync(browse)
        assert await process.wait() == 0  # a drained worker stops serving and exits
        assert serving[1] == "serving"
        assert serving[3] == str(process.process.pid)
        assert "steps" in serving[4].split(", ")
        assert stopped[0] == serving[0]
        assert stopped[1] == "stopped"
