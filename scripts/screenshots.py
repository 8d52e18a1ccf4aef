"""The dashboard's screenshots in ``docs/images/``: the runs table, one run's page, a run
awaiting input, a failed run and the workers page.

Builds a store with runs in every state (one running, an agent run with its transcript,
one awaiting input, one paused, cancelled, stopped and failed runs, a parent with children),
serves the dashboard over it, and photographs it in headless chromium (Debian's, driven by
Playwright, as the browser tests do).

    .venv/bin/python scripts/screenshots.py [--chromium /usr/bin/chromium]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
# The package is imported through a link of a plain name, so the failed run's traceback in
# the pictures shows /tmp/awaken-trio/awaken_trio/..., not where this checkout happens to be.
SHOWN_ROOT = Path(tempfile.gettempdir()) / "awaken-trio"
if not SHOWN_ROOT.exists():
    SHOWN_ROOT.symlink_to(ROOT, target_is_directory=True)
sys.path.insert(0, str(SHOWN_ROOT))

from awaken_trio import (  # noqa: E402
    JsonValue,
    LiveCommand,
    RunContext,
    RunState,
    Runtime,
    open_runtime,
)
from awaken_trio._ui import serve_dashboard  # noqa: E402
from awaken_trio.agent import Agent, ModelReply, ScriptedModel, Tool, ToolCall  # noqa: E402
from tests.ui.browser_helpers import CHROMIUM, browser_page  # noqa: E402

IMAGES = ROOT / "docs" / "images"
SHOTS = (
    "runs-table.png",
    "run-page.png",
    "run-page-ticket.png",
    "run-page-failure.png",
    "workers.png",
)


async def summarise(ctx: RunContext) -> object:
    progress = ctx.checkpoint or {"page": 0}
    while True:
        await trio.sleep(0.2)
        progress = {"page": progress["page"] + 1}
        await ctx.boundary(progress)


async def approve(ctx: RunContext) -> object:
    if ctx.resumed_ticket is None:
        await ctx.await_input(
            "user_input",
            payload={"question": "Publish the report to the team?"},
            accepts={"type": "object", "required": ["approved"]},
        )
    return ctx.resume_value


# The failing job, as an application's module ``jobs/imports.py`` (its traceback's file).
IMPORTS = """
import trio


def parse_rows(text):
    if not text.strip():
        raise ValueError("the source document is empty")
    return text.splitlines()


async def fails(ctx):
    await trio.sleep(0.1)
    return {"rows": len(parse_rows(""))}
"""
_imports: dict[str, Any] = {}
exec(compile(IMPORTS, "jobs/imports.py", "exec"), _imports)
fails = _imports["fails"]


async def crawl(ctx: RunContext) -> object:
    for n in range(3):
        await ctx.start_child(summarise, run_id=f"{ctx.run_id}.page-{n}")
    await trio.sleep_forever()


async def word_count(arguments: dict[str, JsonValue], ctx: RunContext) -> JsonValue:
    return {"words": len(str(arguments["text"]).split())}


def research_agent() -> Agent:
    model = ScriptedModel(
        [
            ModelReply(
                text="I will count the words first.",
                tool_calls=(ToolCall("call-1", "word_count", {"text": "structured concurrency"}),),
            ),
            ModelReply(text="The phrase has 2 words."),
        ]
    )
    tool = Tool(
        "word_count",
        word_count,
        description="counts the words of a text",
        parameters={"type": "object", "properties": {"text": {"type": "string"}}},
    )
    return Agent(model, [tool], system="You are a careful assistant.")


async def until(runtime: Runtime, run_id: str, kind: type[RunState]) -> None:
    """Until the run (perhaps not created yet) commits a state of ``kind``."""
    async for event in runtime.events():
        if event.run_id == run_id and isinstance(event.state, kind):
            return


async def main(chromium: str) -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        store = f"sqlite:///{scratch}/runs.db"
        bodies = {"summarise": summarise, "approve": approve, "fails": fails, "crawl": crawl}
        async with open_runtime(store, bodies=bodies) as runtime, trio.open_nursery() as nursery:
            await nursery.start(partial(runtime.serve, concurrency=16))
            await runtime.submit("fails", run_id="import-2026-11-30", thread_id="imports")
            await runtime.submit("summarise", run_id="digest-stopped", thread_id="digests")
            await runtime.stop_run("digest-stopped", "budget exhausted")
            await runtime.submit("summarise", run_id="digest-cancelled", thread_id="digests-2")
            await until(runtime, "digest-cancelled", RunState.Running)
            await runtime.cancel_run("digest-cancelled", reason="operator")
            handle = await runtime.start(
                research_agent(),
                input="How many words in 'structured concurrency'?",
                run_id="agent-research",
                thread_id="chat-42",
                name="research",
            )
            await handle.wait()
            await runtime.submit("approve", run_id="approve-report", thread_id="reports")
            await until(runtime, "approve-report", RunState.Awaiting)
            await runtime.submit("summarise", run_id="digest-paused", thread_id="digests-3")
            await until(runtime, "digest-paused", RunState.Running)
            await runtime.send(LiveCommand.Pause("digest-paused"))
            await until(runtime, "digest-paused", RunState.Awaiting)
            await runtime.submit("crawl", run_id="crawl-docs", thread_id="crawler")
            await runtime.submit("summarise", run_id="digest-live", thread_id="digests-4")
            await until(runtime, "digest-live", RunState.Running)
            await until(runtime, "crawl-docs.page-2", RunState.Running)

            url = await nursery.start(partial(serve_dashboard, runtime, port=0))

            def photograph() -> None:
                with (
                    tempfile.TemporaryDirectory() as profile,
                    browser_page(Path(profile), chromium) as page,
                ):
                    page.goto(f"{url}/")
                    page.wait_for_selector("body[data-live=connected]")
                    page.screenshot(path=str(IMAGES / "runs-table.png"), full_page=True)
                    page.goto(f"{url}/runs/agent-research")
                    page.wait_for_selector("body[data-live=connected]")
                    page.screenshot(path=str(IMAGES / "run-page.png"), full_page=True)
                    page.goto(f"{url}/runs/approve-report")
                    page.wait_for_selector("body[data-live=connected]")
                    page.wait_for_function("() => Number(document.body.dataset.controlsShown) >= 1")
                    page.screenshot(path=str(IMAGES / "run-page-ticket.png"), full_page=True)
                    page.goto(f"{url}/runs/import-2026-11-30")
                    page.wait_for_selector("body[data-live=connected]")
                    page.wait_for_selector("#failure #traceback")
                    page.screenshot(path=str(IMAGES / "run-page-failure.png"), full_page=True)
                    page.goto(f"{url}/workers")
                    page.wait_for_selector("#workers-body .worker-serving")
                    page.screenshot(path=str(IMAGES / "workers.png"), full_page=True)

            await trio.to_thread.run_sync(photograph)
            nursery.cancel_scope.cancel()
    for name in SHOTS:
        print(IMAGES / name)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default=CHROMIUM)
    trio.run(main, parser.parse_args().chromium)
