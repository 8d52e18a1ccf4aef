"""The dashboard in a real headless browser (Debian's chromium): the runs table follows a
worker process's commits, cancel ends a live run, a refusal is shown as the API gives it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio

from awaken_trio import EndCause, LiveCommand, RunState, open_runtime

if TYPE_CHECKING:
    from playwright.sync_api import Dialog

from tests.ui.browser_helpers import browser_page, need_browser
from tests.ui.server_helpers import TIMEOUT, environment, ui_server, worker
from tests.ui.ui_helpers import TOKEN, XSS

# Each starts a server, a worker and a browser: several seconds.
pytestmark = [pytest.mark.usefixtures("browser"), pytest.mark.slow]


@pytest.fixture
def browser() -> None:
    need_browser()


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/runs.db"


def state_is(run_id: str, text: str) -> str:
    """A page condition: the runs table's state cell of ``run_id`` reads ``text``."""
    return (
        "([id, text]) => { const row = [...document.querySelectorAll('#runs-body tr')]"
        ".find(r => r.dataset.runId === id);"
        " return !!row && row.querySelector('td.state').textContent === text; }"
    )


async def until_state(store: str, run_id: str, kind: type[RunState]) -> None:
    async with open_runtime(store) as runtime:
        with trio.fail_after(TIMEOUT):
            async for event in runtime.events(run_id):
                if isinstance(event.state, kind):
                    return


async def test_the_runs_table_follows_a_worker_process_and_new_runs(
    store: str, tmp_path: Path
) -> None:
    async with open_runtime(store) as runtime:
        await runtime.submit("steps", run_id="r1")
    async with ui_server(store) as server, trio.open_nursery() as nursery:

        async def serve_worker(*, task_status: trio.TaskStatus[None]) -> None:
            async with worker(store):
                task_status.started()
                await trio.sleep_forever()

        async def submit(run_id: str) -> None:
            async with open_runtime(store) as control:
                await control.submit("steps", run_id=run_id)

        def browse() -> None:
            with browser_page(tmp_path / "profile") as page:
                page.goto(f"{server.url}/")
                page.wait_for_selector("body[data-live=connected]")
                page.wait_for_function(state_is("r1", "queued"), arg=["r1", "queued"])
                # A worker in another process claims the run: the row follows.
                trio.from_thread.run(nursery.start, serve_worker)
                page.wait_for_function(state_is("r1", "running"), arg=["r1", "running"])
                # A run submitted elsewhere appears at the top, newest first.
                trio.from_thread.run(submit, "r2")
                page.wait_for_function(
                    "() => document.querySelector('#runs-body tr').dataset.runId === 'r2'"
                )
                ids = page.eval_on_selector_all(
                    "#runs-body tr", "rows => rows.map(r => r.dataset.runId)"
                )
                assert ids == ["r2", "r1"]

        await trio.to_thread.run_sync(browse)
        nursery.cancel_scope.cancel()


async def test_cancel_on_a_runs_page_ends_it_cancelled_and_then_offers_no_control(
    store: str, tmp_path: Path
) -> None:
    async with open_runtime(store) as runtime:
        await runtime.submit("steps", run_id="live")
    async with ui_server(store) as server, worker(store):
        await until_state(store, "live", RunState.Running)

        def browse() -> tuple[str, str]:
            with browser_page(tmp_path / "profile") as page:
                page.on("dialog", lambda dialog: dialog.accept())  # "Cancel run live?"
                page.goto(f"{server.url}/runs/live")
                page.wait_for_selector("body[data-live=connected]")
                page.wait_for_function(
                    "() => document.getElementById('run-state').textContent.startsWith('running')"
                )
                page.fill("form[data-control=cancel] input[name=reason]", "from the page")
                page.click("form[data-control=cancel] button")
                page.wait_for_selector("#control-result[data-status='200']")
                committed = page.text_content("#control-result strong") or ""
                page.wait_for_function(
                    "() => document.getElementById('run-state').textContent === 'ended: cancelled'"
                )
                # The run has ended: no control is offered any more, and the page says why.
                page.wait_for_selector("#no-controls:visible")
                assert not page.is_visible("form[data-control=pause]")
                return committed, page.text_content("#no-controls") or ""

        committed, why = await trio.to_thread.run_sync(browse)
        assert committed == "committed: ended: cancelled"
        assert why == "the run has ended (cancelled): no control can change it"
        async with open_runtime(store) as runtime:
            assert await runtime.state("live") == RunState.Ended(EndCause.Cancelled())
            events = [e async for e in runtime.events("live", follow=False)]
            assert events[-1].detail["reason"] == "from the page"


async def test_a_resume_value_the_ticket_refuses_is_shown_and_the_ticket_stays(
    store: str, tmp_path: Path
) -> None:
    async with open_runtime(store) as runtime:
        await runtime.submit("steps", run_id="p")
    async with ui_server(store) as server, worker(store):
        await until_state(store, "p", RunState.Running)
        async with open_runtime(store) as runtime:
            await runtime.send(LiveCommand.Pause("p"))
        await until_state(store, "p", RunState.Awaiting)

        def browse() -> tuple[str, str]:
            with browser_page(tmp_path / "profile") as page:
                page.goto(f"{server.url}/runs/p")
                page.wait_for_selector("body[data-live=connected]")
                assert page.is_visible("#ticket")
                page.fill("form[data-control=resume] textarea[name=value]", "{not json")
                page.click("form[data-control=resume] button")
                page.wait_for_selector("#control-result[data-status='0']")
                local = page.text_content("#control-result strong") or ""
                page.fill("form[data-control=resume] textarea[name=value]", "")
                page.fill("form[data-control=resume] input[name=correlation_id]", "wrong")
                page.click("form[data-control=resume] button")
                page.wait_for_selector("#control-result[data-status='409']")
                return local, page.text_content("#control-result strong") or ""

        local, refusal = await trio.to_thread.run_sync(browse)
        assert local.startswith("value is not valid JSON")
        assert refusal.startswith("refused (409): ticket_mismatch")
        async with open_runtime(store) as runtime:
            assert isinstance(await runtime.state("p"), RunState.Awaiting)


async def test_a_page_opened_once_with_the_token_keeps_it_out_of_the_address_and_works(
    store: str, tmp_path: Path
) -> None:
    async with open_runtime(store) as runtime:
        await runtime.submit("steps", run_id="t1")
    env = environment(AWAKEN_TRIO_UI_TOKEN=TOKEN)
    async with ui_server(store, env=env) as server:

        def browse() -> tuple[str, str, str, str]:
            with browser_page(tmp_path / "profile") as page:
                page.goto(f"{server.url}/?token={TOKEN}")
                page.wait_for_selector("body[data-live=connected]")  # the stream is admitted
                address = page.url
                page.click('#runs-body a[href="/runs/t1"]')
                page.wait_for_selector("body[data-live=connected]")
                page.on("dialog", lambda dialog: dialog.accept())  # "Stop run t1?"
                page.fill("form[data-control=stop] input[name=reason]", "from the page")
                page.click("form[data-control=stop] button")
                page.wait_for_selector("#control-result[data-status='200']")
                stopped = page.text_content("#control-result strong") or ""
                # Without the cookie, the same page is refused.
                page.context.clear_cookies()
                refused = page.goto(f"{server.url}/runs/t1")
                assert refused is not None
                return address, stopped, str(refused.status), page.content()

        address, stopped, status, refused_page = await trio.to_thread.run_sync(browse)
        assert "token" not in address
        assert stopped == "committed: ended: stopped (from the page)"
        assert status == "401"
        assert TOKEN not in refused_page


async def test_a_payload_of_script_runs_nothing_in_the_browser(store: str, tmp_path: Path) -> None:
    """Rendered by the server and redrawn by the page's script alike, a run whose id,
    thread, input and stop reason are markup shows them as text and runs nothing."""
    run_id = f"x{XSS}"
    async with open_runtime(store) as runtime:
        await runtime.submit("steps", run_id=run_id, thread_id=XSS, input={"q": XSS})
    async with ui_server(store) as server:

        async def stop() -> None:
            async with open_runtime(store) as control:
                await control.stop_run(run_id, XSS)

        def browse() -> tuple[list[str], str, str]:
            dialogs: list[str] = []

            def on_dialog(dialog: Dialog) -> None:
                dialogs.append(dialog.message)  # an alert() that ran
                dialog.dismiss()

            with browser_page(tmp_path / "profile") as page:
                page.on("dialog", on_dialog)
                page.goto(f"{server.url}/")
                page.wait_for_selector("body[data-live=connected]")
                # A commit redraws the table through the script: still text.
                trio.from_thread.run(stop)
                page.wait_for_function(
                    "() => document.querySelector('#runs-body td.state')"
                    ".textContent.startsWith('ended: stopped')"
                )
                cell = page.text_content("#runs-body td.state") or ""
                page.click("#runs-body a")
                page.wait_for_selector("body[data-live=connected]")
                page.wait_for_function(
                    "() => document.getElementById('events-body').rows.length >= 2"
                )
                images = page.eval_on_selector_all("img", "found => found.length")
                assert images == 0
                return dialogs, cell, page.text_content("#run-state") or ""

        dialogs, cell, state = await trio.to_thread.run_sync(browse)
        assert dialogs == []
        assert cell == f"ended: stopped ({XSS})"
        assert state == f"ended: stopped ({XSS})"


async def test_the_script_shows_times_as_the_server_does(store: str, tmp_path: Path) -> None:
    """The events the page's script adds show their times by the server's rule: a time no
    calendar date stands for (an odd clock's) as its number, the same text the server
    wrote for the events it rendered, and the age column likewise."""
    odd = 1e18
    async with open_runtime(store, clock=lambda: odd) as runtime:
        await runtime.submit("steps", run_id="odd")
    async with ui_server(store) as server:

        async def stop() -> None:
            async with open_runtime(store, clock=lambda: odd) as control:
                await control.stop_run("odd", "over")

        def browse() -> tuple[list[str], str]:
            with browser_page(tmp_path / "profile") as page:
                page.goto(f"{server.url}/runs/odd")
                page.wait_for_selector("body[data-live=connected]")
                trio.from_thread.run(stop)
                page.wait_for_function(
                    "() => document.getElementById('events-body').rows.length >= 2"
                )
                times = page.eval_on_selector_all(
                    "#events-body tr", "rows => rows.map(r => r.lastElementChild.textContent)"
                )
                page.goto(f"{server.url}/")
                page.wait_for_selector("body[data-live=connected]")
                # The table as the script redraws it (at the stream's hello).
                page.wait_for_function("() => Number(document.body.dataset.refreshed) >= 1")
                return times, page.text_content("#runs-body td.age") or ""

        times, age = await trio.to_thread.run_sync(browse)
        assert times == ["1000000000000000000", "1000000000000000000"]
        assert age == "1000000000000000000"
