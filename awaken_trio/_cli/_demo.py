"""``awaken-trio demo``: plain and agent runs on an embedded SQLite file under a live table,
every control path exercised, then the final table of what each run committed.

The scenario: ``count`` (plain) runs to its end; ``assistant`` (an agent) is paused at a
boundary and resumed from its checkpoint; ``stuck`` (a call that never returns) is cancelled
live; ``spender`` (an agent calling a tool in a loop) is stopped for a budget; ``tree`` is
cancelled with its children and grandchildren; ``flaky`` fails. The agents run on a
`ScriptedModel`: no network.

The live table is fed by ``runtime.events(follow=True)``; off a terminal the same story is
printed as plain lines.
"""

from __future__ import annotations

import logging
import os
import secrets
import tempfile
from collections.abc import Callable
from typing import Any, Final

import attrs
import trio
from rich.console import Console
from rich.live import Live

from .. import (
    EndCause,
    LiveCommand,
    RunContext,
    RunEvent,
    RunRecord,
    RunState,
    Runtime,
)
from .._face.shapes import dumps, end_of, row_json, state_word
from .._redact import redact
from ..agent import Agent, ModelReply, ScriptedModel, Tool, ToolCall
from ..store import cause_to_json
from ._common import console, emit, execute, open_cli_runtime
from ._tables import print_table, table

# ---------------------------------------------------------------------------- bodies


async def count_to_ten(ctx: RunContext) -> object:
    """Ten steps of work (``input["step_seconds"]`` each); each step commits its progress
    at a boundary."""
    pace = ctx.input["step_seconds"] if isinstance(ctx.input, dict) else 0.01
    progress = ctx.checkpoint or {"step": 0}
    while progress["step"] < 10:
        await trio.sleep(pace)  # stands for a model or tool call: a cancellation point
        progress = {"step": progress["step"] + 1}
        await ctx.boundary(progress)
    return {"done": True}


async def hang(ctx: RunContext) -> object:
    """A tool call that never returns; only cancellation ends it."""
    await trio.sleep_forever()


async def grandchild(ctx: RunContext) -> object:
    await trio.sleep_forever()


async def child(ctx: RunContext) -> object:
    await ctx.start_child(grandchild, run_id=f"{ctx.run_id}.grandchild")
    await trio.sleep_forever()


async def parent(ctx: RunContext) -> object:
    await ctx.start_child(child, run_id=f"{ctx.run_id}.child-1")
    await ctx.start_child(child, run_id=f"{ctx.run_id}.child-2")
    await trio.sleep_forever()


async def flaky(ctx: RunContext) -> object:
    """Waits to be woken, then fails as a tool endpoint that refuses would."""
    await ctx.boundary(wait=True)
    raise ConnectionError("tool endpoint refused the connection")


async def search(arguments: dict[str, Any], ctx: RunContext) -> object:
    await trio.sleep(0.1)  # a slow tool: each call costs budget
    return {"hits": len(str(arguments.get("q", "")))}


async def add(arguments: dict[str, Any], ctx: RunContext) -> object:
    await trio.sleep(0.05)
    return arguments["a"] + arguments["b"]


def assistant() -> Agent:
    """An agent that adds two numbers with a tool, then answers."""
    model = ScriptedModel(
        [
            ModelReply(tool_calls=(ToolCall("c1", "add", {"a": 1, "b": 2}),)),
            ModelReply(tool_calls=(ToolCall("c2", "add", {"a": 3, "b": 4}),)),
            ModelReply(tool_calls=(ToolCall("c3", "add", {"a": 3, "b": 7}),)),
            ModelReply(text="1 + 2 = 3, 3 + 4 = 7, 3 + 7 = 10"),
        ]
    )
    return Agent(model, [Tool("add", add, description="adds a and b")], system="be brief")


def spender() -> Agent:
    """An agent that keeps searching: only a budget stops it."""
    model = ScriptedModel(
        [ModelReply(tool_calls=(ToolCall(f"s{i}", "search", {"q": "x" * i}),)) for i in range(200)]
    )
    return Agent(model, [Tool("search", search, description="searches")])


def demo_bodies() -> dict[str, Any]:
    """The demo's bodies by name (registered, so each run's name shows in the table)."""
    return {
        "count": count_to_ten,
        "assistant": assistant(),
        "hang": hang,
        "spender": spender(),
        "tree": parent,
        "flaky": flaky,
    }


# ---------------------------------------------------------------------------- display


@attrs.define
class _Seen:
    """What the live table shows of one run, from its events."""

    name: str
    thread_id: str
    state: RunState
    generation: int
    last_event: str


LIVE_COLUMNS: Final = ("run", "name", "thread", "state", "gen", "last event")


@attrs.define
class Board:
    """The runs seen so far, in the order they appeared, and the story so far."""

    runs: dict[str, _Seen] = attrs.field(factory=dict)
    step: str = ""

    def render(self) -> Any:
        rows = [
            [
                run_id,
                seen.name,
                seen.thread_id,
                state_word(seen.state) + (f": {end_of(seen.state)}" if end_of(seen.state) else ""),
                str(seen.generation),
                seen.last_event,
            ]
            for run_id, seen in self.runs.items()
        ]
        return table(LIVE_COLUMNS, rows, title=self.step or "starting")


async def follow_board(
    runtime: Runtime, board: Board, redraw: Callable[[], None], names: dict[str, str]
) -> None:
    async for event in runtime.events(follow=True):
        _note(board, event, names)
        redraw()


def _note(board: Board, event: RunEvent, names: dict[str, str]) -> None:
    seen = board.runs.get(event.run_id)
    what = event.kind if event.kind != "committed" else f"committed {state_word(event.state)}"
    if seen is None:
        board.runs[event.run_id] = _Seen(
            names.get(event.run_id, ""), event.thread_id, event.state, event.generation, what
        )
        return
    seen.state = event.state
    seen.generation = event.generation
    seen.last_event = what


# ---------------------------------------------------------------------------- the story


@attrs.define
class Story:
    """The demo's steps, told on the live table's title (terminal) or as lines."""

    board: Board
    out: Console
    live: bool
    quiet: bool
    pace: float

    async def step(self, text: str) -> None:
        self.board.step = text
        if not self.live and not self.quiet:
            self.out.print(text, soft_wrap=True)
        await trio.sleep(self.pace)


class _Told(logging.Filter):
    """Drops the library's records about one run (``run_id`` in their extra), once it is
    named."""

    def __init__(self) -> None:
        super().__init__()
        self.run_id: str | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        return record.__dict__.get("run_id") != self.run_id


async def tell(runtime: Runtime, bodies: dict[str, Any], story: Story, prefix: str) -> list[str]:
    """Exercise every control path; the root run ids, in the order they were started.
    ``bodies`` are the ones registered (a run started with one carries its name)."""
    ids = {run: f"{prefix}{run}" for run in _NAMES}
    await story.step("starting plain and agent runs")
    step_seconds = story.pace / 3 or 0.01
    count = await runtime.start(
        bodies["count"],
        run_id=ids["count"],
        thread_id="batch",
        input={"step_seconds": step_seconds},
    )
    helper = await runtime.start(
        bodies["assistant"], run_id=ids["assistant"], thread_id="chat-1", input="add some"
    )
    # Asked at once, so the pause lands at its first step's boundary, before it can end.
    runtime.deliver(LiveCommand.Pause(ids["assistant"]))
    await runtime.start(bodies["hang"], run_id=ids["stuck"], thread_id="chat-2")
    spending = await runtime.start(bodies["spender"], run_id=ids["spender"], input="find it all")
    tree = await runtime.start(bodies["tree"], run_id=ids["tree"])
    failing = await runtime.start(bodies["flaky"], run_id=ids["flaky"])
    await story.step(f"runs started; {ids['assistant']} asked to pause at its next boundary")

    await story.step(f"cancelling {ids['stuck']} live (a call that never returns)")
    runtime.deliver(LiveCommand.Cancel(ids["stuck"], reason="user pressed stop"))

    await helper.wait()
    await story.step(f"{ids['assistant']} paused; resuming it from its checkpoint")
    helper = await runtime.resume(ids["assistant"])

    await story.step(f"stopping {ids['spender']}: token budget exhausted")
    await runtime.stop_run(spending.run_id, "token budget exhausted")

    await story.step(f"cancelling {ids['tree']} and, with it, its children")
    runtime.deliver(LiveCommand.Cancel(tree.run_id))
    await tree.wait()

    await story.step(f"waking {ids['flaky']}, whose tool call fails")
    runtime.deliver(LiveCommand.Wake(ids["flaky"]))
    await failing.wait()
    await helper.wait()
    await count.wait()
    await story.step("every run has ended")
    return list(ids.values())


FINAL_COLUMNS: Final = ("run", "name", "thread", "state", "cause", "reason", "attempts")


def cause_and_reason(state: RunState) -> tuple[str, str]:
    """An end's cause and its reason (a failure's code and message), or two blanks."""
    if not isinstance(state, RunState.Ended):
        return "", ""
    cause = state.cause
    kind = str(cause_to_json(cause)["kind"])
    match cause:
        case EndCause.Stopped(reason) | EndCause.Indeterminate(reason):
            return kind, reason
        case EndCause.Failed(code, message):
            return kind, f"{code}: {message}"
    return kind, ""


def attempts(record: RunRecord) -> int:
    """How many attempts the run had: its generation (0 for a run that never started)."""
    return record.generation


async def demo(store: str | None, as_json: bool) -> None:
    out = console()
    if store is None:
        directory = tempfile.mkdtemp(prefix="awaken-trio-demo-")
        store = f"sqlite:///{os.path.join(directory, 'demo.db')}"
    where = f"runs kept in {redact(store)}"
    # The store path goes to stderr with --json, so stdout is exactly the JSON array.
    (console(stderr=True) if as_json else out).print(where, soft_wrap=True)
    live_display = out.is_terminal and not as_json
    board = Board()
    story = Story(board, out, live_display, as_json, 0.5 if live_display else 0.0)
    runtime_bodies = demo_bodies()
    library = logging.getLogger("awaken_trio")
    told = _Told()
    # The flaky run's failure is the story's, told by it and in the table of final states
    # (`runs show` prints the traceback it stored): the library's log record of it is not
    # written again in the middle of the story. Every other record passes. Kept until the
    # runtime has closed: the record is made after the end's waiters are answered.
    library.addFilter(told)
    try:
        records = await _tell_all(store, runtime_bodies, board, out, story, told, live_display)
    finally:
        library.removeFilter(told)
    if as_json:
        emit(dumps([row_json(record) for record in records]))
        return
    rows = [
        [
            record.run_id,
            record.name or "",
            record.thread_id,
            state_word(record.state),
            *cause_and_reason(record.state),
            str(attempts(record)),
        ]
        for record in records
    ]
    print_table(out, FINAL_COLUMNS, rows, title="final committed states")
    out.print(f"inspect them: awaken-trio runs list --store {redact(store)}", soft_wrap=True)


_NAMES: Final = {
    "count": "count",
    "assistant": "assistant",
    "stuck": "hang",
    "spender": "spender",
    "tree": "tree",
    "flaky": "flaky",
}
"""The demo's root runs (by id, before the prefix) and the names of their bodies."""


async def _tell_all(
    store: str,
    runtime_bodies: dict[str, Any],
    board: Board,
    out: Console,
    story: Story,
    told: _Told,
    live_display: bool,
) -> list[RunRecord]:
    """Tell the story on a runtime over ``store`` (drawing the board on a terminal), and
    read every run of it back once it has ended."""
    async with open_cli_runtime(store, must_exist=False, bodies=runtime_bodies) as runtime:
        prefix = "" if not await runtime.list_runs(limit=1) else f"{secrets.token_hex(2)}-"
        told.run_id = f"{prefix}flaky"
        names = {f"{prefix}{run}": name for run, name in _NAMES.items()}
        async with trio.open_nursery() as nursery:
            if live_display:
                with Live(board.render(), console=out, auto_refresh=False) as live:

                    def redraw() -> None:
                        live.update(board.render(), refresh=True)

                    nursery.start_soon(follow_board, runtime, board, redraw, names)
                    started = await tell(runtime, runtime_bodies, story, prefix)
                    await trio.sleep(0.3)  # the last events reach the table
                    nursery.cancel_scope.cancel()
            else:
                started = await tell(runtime, runtime_bodies, story, prefix)
                nursery.cancel_scope.cancel()
        return await _final(runtime, started)


async def _final(runtime: Runtime, started: list[str]) -> list[RunRecord]:
    """Every run of the demo, children after their parent, as committed."""
    records: list[RunRecord] = []
    for run_id in started:
        records.append(await runtime.record(run_id))
        if run_id.endswith("tree"):
            for child_id in ("child-1", "child-2"):
                records.append(await runtime.record(f"{run_id}.{child_id}"))
                records.append(await runtime.record(f"{run_id}.{child_id}.grandchild"))
    return records


def run_demo(store: str | None, as_json: bool) -> None:
    async def main() -> None:
        await demo(store, as_json)

    execute(main, as_json=as_json)
