"""A run's stream on its page in a real headless browser: the words a worker process
streams appear as they are written, and the reset a resumed attempt starts with clears
the earlier attempt's text before its own appears."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from awaken_trio import RunState, open_runtime
from tests.ui.browser_helpers import browser_page, need_browser
from tests.ui.server_helpers import TIMEOUT, ui_server, worker

pytestmark = pytest.mark.slow

PANEL = "section.stream[data-channel='output']"


def text_is(text: str) -> str:
    return (
        f'(text) => {{ const p = document.querySelector("{PANEL} .stream-text");'
        " return !!p && p.textContent === text; }"
    )


def text_starts(text: str) -> str:
    return (
        f'(text) => {{ const p = document.querySelector("{PANEL} .stream-text");'
        " return !!p && p.textContent.startsWith(text); }"
    )


async def awaiting(store: str, run_id: str) -> None:
    async with open_runtime(store) as runtime:
        with trio.fail_after(TIMEOUT):
            async for event in runtime.events(run_id):
                if isinstance(event.state, RunState.Awaiting):
                    return


async def resume(store: str, run_id: str) -> None:
    await awaiting(store, run_id)
    async with open_runtime(store) as runtime:
        await runtime.resume(run_id, "go on")


async def test_a_runs_page_shows_its_stream_live_and_a_reset_clears_it(tmp_path: Path) -> None:
    need_browser()
    store = f"sqlite:///{tmp_path}/runs.db"
    async with open_runtime(store) as runtime:
        await runtime.submit("talks", run_id="r1")
    async with ui_server(store) as server, worker(store):

        def browse() -> dict[str, str]:
            with browser_page(tmp_path / "profile") as page:
                page.goto(f"{server.url}/runs/r1")
                # The words appear one by one while the first attempt runs.
                page.wait_for_function(text_starts("first "), arg="first ")
                page.wait_for_selector(f"{PANEL}[data-state=live]")
                page.wait_for_function(text_is("first attempt tokens"), arg="first attempt tokens")
                # The resumed attempt starts the output over: the text is cleared first.
                trio.from_thread.run(resume, store, "r1")
                page.wait_for_function(text_is("second attempt"), arg="second attempt")
                page.wait_for_selector(f"{PANEL}[data-state=ended]")
                data: dict[str, str] = page.eval_on_selector(PANEL, "s => ({...s.dataset})")
                return data

        data = await trio.to_thread.run_sync(browse)
        assert data["resets"] == "1"
        assert data["offset"] == "7"
