"""``awaken-trio runs ...``: reading and steering runs in any store, from any process.

Each subcommand is one click command over one async function that opens a runtime on the
store (`open_cli_runtime`), makes its call, and prints the result: a text line or table
for people, the JSON shapes of DESIGN §3.3 with ``--json``. A new subcommand is one more
such pair.
"""

from __future__ import annotations

import datetime
import sys
import time
import typing
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, get_args

import click
from rich.live import Live

from .. import (
    EndCause,
    InvalidArgument,
    InvalidPayload,
    JsonValue,
    RetryPolicy,
    RunEvent,
    RunRecord,
    RunState,
    Runtime,
    StoreError,
    StreamChunk,
)
from .._core import check_channel
from .._face.controls import CONTROLS, ControlName
from .._face.failures import REFUSALS, CommandFailed, bad_input, failure_of, refused
from .._face.input import parse_json, shorten, whole_number
from .._face.shapes import (
    chunk_json,
    describe_retry,
    describe_state,
    dumps,
    duration_of,
    event_json,
    format_time,
    record_json,
    row_json,
    when,
)
from ..store import CauseKind, IfBusy, RunFilter, StateKind, state_to_json
from ._common import (
    STORE_ENV,
    SecondsRange,
    WholeRange,
    console,
    early,
    emit,
    execute,
    open_cli_runtime,
    store_url,
    until_signalled,
)
from ._tables import (
    EVENT_COLUMNS,
    EVENTS_SHOWN,
    ROW_COLUMNS,
    event_cells,
    print_table,
    row_cells,
    table,
)

STATE_KINDS: Final[tuple[str, ...]] = (*get_args(StateKind), *get_args(CauseKind))
"""What ``--state`` takes: a state kind, or an end cause kind (the ended runs with it)."""

store_option = click.option(
    "--store",
    "store",
    metavar="URL",
    envvar=STORE_ENV,
    show_envvar=True,
    help="The store the runs are in: sqlite:///relative.db, sqlite:////absolute.db or"
    f" postgresql://USER:PASSWORD@HOST:PORT/DB (default: ${STORE_ENV}).",
)
json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON (the shapes of the store's codec)."
)
state_filter = click.option(
    "--state",
    type=click.Choice(STATE_KINDS),
    help="Only runs in this state, or that ended with this cause.",
)
thread_filter = click.option("--thread", "thread_id", metavar="T", help="Only runs on thread T.")
name_filter = click.option("--name", metavar="N", help="Only runs named N.")

_PAGE: Final = 500
"""Runs read per page when a filter selects every match."""


@click.group()
def runs() -> None:
    """Read and steer runs in a store, wherever they execute.

    Exit codes: 0 done; 1 refused by the run's committed state (the reason and the state
    are printed); 2 bad input; 3 the store cannot be opened or read.
    """


# ---------------------------------------------------------------------------- reading


@runs.command("list")
@store_option
@json_option
@state_filter
@thread_filter
@name_filter
@click.option(
    "--limit", type=WholeRange(min=1), default=50, show_default=True, help="At most N runs."
)
@click.option("--before", metavar="ID", help="Only runs created before run ID (the next page).")
def list_runs(
    store: str | None,
    as_json: bool,
    state: RunFilter | None,
    thread_id: str | None,
    name: str | None,
    limit: int,
    before: str | None,
) -> None:
    """List runs, newest first."""

    async def run() -> None:
        async with open_cli_runtime(store_url(store), must_exist=True) as runtime:
            records = await _listed(
                runtime, before, state=state, thread_id=thread_id, name=name, limit=limit
            )
        if as_json:
            emit(dumps([row_json(record) for record in records]))
        else:
            print_table(console(), ROW_COLUMNS, [row_cells(record) for record in records])

    execute(run, as_json=as_json)


async def _listed(runtime: Runtime, before: str | None, **filters: Any) -> list[RunRecord]:
    try:
        return await runtime.list_runs(before=before, **filters)
    except REFUSALS as exc:  # an unknown `before`
        raise await refused(runtime, exc, before) from None


async def _served(runtime: Runtime, name: str) -> bool:
    """Whether a live worker (serving: not draining, stopped or lost) serves ``name``; True
    when the store keeps no workers (nothing to tell)."""
    try:
        workers = await runtime.list_workers()
    except (InvalidArgument, StoreError):
        return True
    return any(w.state == "serving" and name in w.bodies for w in workers)


@runs.command("show")
@store_option
@json_option
@click.argument("run_id", metavar="ID")
def show(store: str | None, as_json: bool, run_id: str) -> None:
    """Show a run's record and its last events."""

    async def run() -> None:
        async with open_cli_runtime(store_url(store), must_exist=True) as runtime:
            try:
                record = await runtime.record(run_id)
                last: deque[RunEvent] = deque(maxlen=EVENTS_SHOWN)
                async for event in runtime.events(run_id, follow=False):
                    last.append(event)
            except REFUSALS as exc:
                raise await refused(runtime, exc, run_id) from None
        if as_json:
            emit(dumps({**record_json(record), "events": [event_json(e) for e in last]}))
            return
        out = console()
        fields = [
            ("run", record.run_id),
            ("name", record.name or ""),
            ("thread", record.thread_id),
            ("parent", record.parent_run_id or ""),
            ("state", describe_state(record.state)),
            ("generation", str(record.generation)),
            ("created", when(record.created_at)),
            ("started", when(record.started_at)),
            ("ended", when(record.ended_at)),
            ("duration", duration_of(record, time.time())),
            ("worker", record.worker_id or ""),
            ("deadline", "" if record.deadline is None else format_time(record.deadline)),
            ("input", dumps(record.input)),
            ("checkpoint", dumps(record.checkpoint)),
            ("result", dumps(record.result)),
        ]
        if record.body_version is not None:
            fields.append(("version", record.body_version))  # of its body (DESIGN §3.8)
        retry = describe_retry(record)
        if retry is not None:
            fields.append(("retry", retry))
        for label, value in fields:
            out.print(f"{label:<11}{value}", soft_wrap=True)
        print_table(out, EVENT_COLUMNS, [event_cells(e) for e in last], title="last events")
        traceback = _traceback(record, last)
        if traceback is not None:
            out.print("traceback:", soft_wrap=True)
            out.print(traceback, soft_wrap=True, markup=False, highlight=False)

    execute(run, as_json=as_json)


def retry_policy(retries: int | None, backoff: float | None) -> RetryPolicy | None:
    """``--retries N`` (N retries after the first attempt) and ``--retry-backoff S``.

    Raises:
        CommandFailed: ``--retry-backoff`` without ``--retries`` (exit 2).
    """
    if retries is None:
        if backoff is not None:
            raise bad_input(
                "--retry-backoff sets the wait before a retry: give --retries N too",
                "invalid_argument",
            )
        return None
    if backoff is None:
        return RetryPolicy(attempts=retries + 1)
    return RetryPolicy(attempts=retries + 1, backoff=backoff, max_backoff=max(60.0, backoff))


def _traceback(record: RunRecord, last: Sequence[RunEvent]) -> str | None:
    """A failed run's stored traceback: its terminal event's ``detail["traceback"]``."""
    if not isinstance(record.state, RunState.Ended):
        return None
    if not isinstance(record.state.cause, EndCause.Failed):
        return None
    for event in reversed(last):
        if event.state.is_ended:
            found = event.detail.get("traceback")
            return found if isinstance(found, str) else None
    return None


@runs.command("events")
@store_option
@json_option
@click.argument("run_id", metavar="[ID]", required=False)
@click.option(
    "--after", type=WholeRange(min=0), default=0, metavar="SEQ", help="Only events after SEQ."
)
@click.option(
    "--follow",
    is_flag=True,
    help="Then follow new events: for one run until it ends, for all until Ctrl-C.",
)
def events(store: str | None, as_json: bool, run_id: str | None, after: int, follow: bool) -> None:
    """Print committed events, oldest first (--json: JSON Lines)."""
    out = console()

    async def run() -> None:
        async with open_cli_runtime(store_url(store), must_exist=True) as runtime:

            async def print_events() -> None:
                try:
                    async for event in runtime.events(run_id, follow=follow):
                        if event.seq <= after:
                            continue
                        if as_json:
                            emit(dumps(event_json(event)))
                        else:
                            out.print("  ".join(event_cells(event)), soft_wrap=True)
                except REFUSALS as exc:
                    raise await refused(runtime, exc, run_id) from None

            await until_signalled(print_events)

    execute(run, as_json=as_json)


@runs.command("stream")
@store_option
@json_option
@click.argument("run_id", metavar="ID")
@click.option(
    "--channel",
    default="output",
    show_default=True,
    metavar="C",
    help="The stream's channel (an agent's tokens: agent.tokens).",
)
@click.option(
    "--after",
    type=click.IntRange(min=0),
    default=0,
    metavar="OFFSET",
    help="Only chunks after OFFSET (to resume where an earlier read stopped).",
)
def stream(store: str | None, as_json: bool, run_id: str, channel: str, after: int) -> None:
    """Print a run's stream as it is written, until the run ends (or Ctrl-C).

    Text chunks are printed as they are, one after the other (an agent's tokens make its
    text); other chunks as one JSON line each. A new attempt starting the output over is
    noted on stderr. With --json, one chunk object per line:
    {"offset", "generation", "kind", "value", "at"}.
    """
    early(lambda: _check_channel(channel), as_json=as_json)

    async def run() -> None:
        async with open_cli_runtime(store_url(store), must_exist=True) as runtime:

            async def print_chunks() -> None:
                text = _TextOut()
                try:
                    async for chunk in runtime.read_stream(run_id, channel, after=after):
                        if as_json:
                            emit(dumps(chunk_json(chunk)))
                        else:
                            text.show(chunk)
                except REFUSALS as exc:
                    raise await refused(runtime, exc, run_id) from None
                finally:
                    text.close()

            await until_signalled(print_chunks)

    execute(run, as_json=as_json)


def _check_channel(channel: str) -> None:
    try:
        check_channel(channel, "--channel")
    except InvalidArgument as exc:
        raise bad_input(str(exc), "invalid_argument") from None


class _TextOut:
    """A stream as text for people: text chunks as they are, others a JSON line each, a
    reset noted on stderr; the output ends with a newline."""

    def __init__(self) -> None:
        self._open_line = False

    def show(self, chunk: StreamChunk) -> None:
        if chunk.kind == "data":
            value = chunk.value
            text = value if isinstance(value, str) else dumps(value) + "\n"
            if text:
                sys.stdout.write(text)
                sys.stdout.flush()
                self._open_line = not text.endswith("\n")
        elif chunk.kind == "reset":
            self.close()
            click.echo(
                f"[attempt {chunk.generation} starts the output over from offset"
                f" {chunk.offset + 1}]",
                err=True,
            )

    def close(self) -> None:
        if self._open_line:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self._open_line = False


@runs.command("watch")
@store_option
@json_option
@click.argument("run_id", metavar="[ID]", required=False)
@click.option("--limit", type=WholeRange(min=1), default=20, show_default=True, help="Runs shown.")
def watch(store: str | None, as_json: bool, run_id: str | None, limit: int) -> None:
    """A live table of the newest runs (or of one run's events), until Ctrl-C or until the
    watched run ends. Off a terminal, or with --json, one line per event instead."""
    out = console()

    async def run() -> None:
        async with open_cli_runtime(store_url(store), must_exist=True) as runtime:

            async def follow() -> None:
                try:
                    if as_json or not out.is_terminal:
                        async for event in runtime.events(run_id):
                            line = (
                                dumps(event_json(event))
                                if as_json
                                else "  ".join(event_cells(event))
                            )
                            emit(line)
                    elif run_id is None:
                        await _watch_runs(runtime, limit)
                    else:
                        await _watch_events(runtime, run_id)
                except REFUSALS as exc:
                    raise await refused(runtime, exc, run_id) from None

            await until_signalled(follow)

    execute(run, as_json=as_json)


async def _watch_runs(runtime: Runtime, limit: int) -> None:
    """The newest runs, redrawn as each committed event arrives."""

    async def draw() -> Any:
        records = await runtime.list_runs(limit=limit)
        return table(ROW_COLUMNS, [row_cells(r) for r in records], title="runs (Ctrl-C to stop)")

    with Live(await draw(), console=console(), auto_refresh=False) as live:
        async for _ in runtime.events(follow=True):
            live.update(await draw(), refresh=True)


async def _watch_events(runtime: Runtime, run_id: str) -> None:
    """One run's events, the newest last, until its terminal event."""
    shown: deque[list[str]] = deque(maxlen=EVENTS_SHOWN)
    await runtime.record(run_id)  # an unknown run is refused before anything is drawn

    def draw(state: RunState) -> Any:
        title = f"run {run_id}: {describe_state(state)}"
        return table(EVENT_COLUMNS, list(shown), title=title)

    with Live(draw(await runtime.state(run_id)), console=console(), auto_refresh=False) as live:
        async for event in runtime.events(run_id, follow=True):
            shown.append(event_cells(event))
            live.update(draw(event.state), refresh=True)


# ---------------------------------------------------------------------------- steering


@runs.command("submit")
@store_option
@json_option
@click.argument("name", metavar="NAME")
@click.option("--input", "input_", metavar="JSON", help="The run's input, a JSON value.")
@click.option("--thread", "thread_id", metavar="T", help="The run's thread (default: its own).")
@click.option("--run-id", metavar="ID", help="The run's id (default: a fresh one).")
@click.option(
    "--timeout",
    type=SecondsRange(min=0),
    metavar="S",
    help="End the run Stopped(deadline) S seconds from now, whatever its state.",
)
@click.option(
    "--deadline",
    metavar="ISO8601",
    help="End the run Stopped(deadline) at this time (2030-01-31T09:00:00+00:00; local"
    " time without an offset).",
)
@click.option(
    "--queue-timeout",
    type=SecondsRange(min=0),
    metavar="S",
    help="End the run Stopped(queue_timeout) if no worker starts it within S seconds.",
)
@click.option(
    "--not-before",
    metavar="ISO8601|DURATION",
    help="Start it no earlier than this time, or this long from now (30m, 12h, 7d).",
)
@click.option(
    "--if-busy",
    type=click.Choice(typing.get_args(IfBusy)),
    default="queue",
    show_default=True,
    help="When the thread has a running or queued run: wait for it (queue), refuse with"
    " exit 1 (reject), or stop every other run of the thread and run instead (supersede).",
)
@click.option(
    "--retries",
    type=WholeRange(min=0, max=1000),
    metavar="N",
    help="Try the run again up to N times when its body fails (the first retry 1s after the"
    " failure, each wait twice the one before, at most 60s; see --retry-backoff).",
)
@click.option(
    "--retry-backoff",
    type=SecondsRange(min=0),
    metavar="S",
    help="Seconds before the first retry (with --retries; default 1).",
)
def submit(
    store: str | None,
    as_json: bool,
    name: str,
    input_: str | None,
    thread_id: str | None,
    run_id: str | None,
    timeout: float | None,
    deadline: str | None,
    queue_timeout: float | None,
    not_before: str | None,
    if_busy: IfBusy,
    retries: int | None,
    retry_backoff: float | None,
) -> None:
    """Queue a run of the body named NAME for a worker that serves it; print its id."""
    value = (
        None if input_ is None else early(lambda: parse_json(input_, "--input"), as_json=as_json)
    )
    at = None if deadline is None else early(lambda: parse_time(deadline), as_json=as_json)
    start_at = (
        None if not_before is None else early(lambda: parse_start(not_before), as_json=as_json)
    )
    retry = early(lambda: retry_policy(retries, retry_backoff), as_json=as_json)

    async def run() -> None:
        async with open_cli_runtime(store_url(store), must_exist=False) as runtime:
            try:
                handle = await runtime.submit(
                    name,
                    input=value,
                    run_id=run_id,
                    thread_id=thread_id,
                    timeout=timeout,
                    deadline=at,
                    queue_timeout=queue_timeout,
                    not_before=start_at,
                    if_busy=if_busy,
                    retry=retry,
                )
                record = await runtime.record(handle.run_id)
            except REFUSALS as exc:
                raise await refused(runtime, exc, run_id) from None
            served = await _served(runtime, name)
        emit(dumps(row_json(record)) if as_json else record.run_id)
        if not served and not record.state.is_ended:
            click.echo(
                f"awaken-trio: warning: no live worker serves {name!r}; the run waits"
                " queued until one does (`awaken-trio workers list` shows the workers)",
                err=True,
            )

    execute(run, as_json=as_json)


@runs.command("fork")
@store_option
@json_option
@click.argument("run_id", metavar="ID")
@click.option(
    "--at",
    type=WholeRange(min=1),
    metavar="SEQ",
    help="Start from the checkpoint as of the run's event SEQ (default: its last).",
)
@click.option("--run-id", "new_run_id", metavar="NEW", help="The new run's id (default: fresh).")
def fork(
    store: str | None, as_json: bool, run_id: str, at: int | None, new_run_id: str | None
) -> None:
    """Queue a new run of ID's body, with its input, from its checkpoint as of event SEQ,
    for a worker that serves it (Runtime.fork); print its id."""

    async def run() -> None:
        async with open_cli_runtime(store_url(store), must_exist=True) as runtime:
            try:
                handle = await runtime.fork(run_id, at=at, new_run_id=new_run_id)
                record = await runtime.record(handle.run_id)
            except REFUSALS as exc:
                raise await refused(runtime, exc, new_run_id or run_id) from None
            except InvalidArgument as exc:
                raise await _unforkable(runtime, exc, run_id, at) from None
        emit(dumps(row_json(record)) if as_json else record.run_id)

    execute(run, as_json=as_json)


async def _unforkable(
    runtime: Runtime, exc: InvalidArgument, run_id: str, at: int | None
) -> CommandFailed:
    """Why ``run_id`` cannot be forked (at ``at``), in the command line's words."""
    record = await runtime.record(run_id)
    if record.name is None:
        return bad_input(
            f"run {run_id!r} has no body name (a program started it with its body, not by a"
            " name a worker serves), so no worker could run a fork of it",
            "invalid_argument",
        )
    if at is not None:
        return bad_input(
            f"--at {at} is not one of run {run_id!r}'s events; pick a SEQ from"
            f" `runs events {run_id}`, or leave --at out to fork from its last",
            "invalid_argument",
        )
    return failure_of(exc)


async def _unresumable(runtime: Runtime, exc: InvalidArgument, run_id: str) -> CommandFailed:
    """Why no worker could run the attempt a resume of ``run_id`` would start, in the
    command line's words."""
    record = await runtime.record(run_id)
    if record.parent_run_id is not None:
        return bad_input(
            f"run {run_id!r} is a child of run {record.parent_run_id!r}: only the process"
            " that runs its parent can resume it (a child never outlives its parent's"
            " attempt); its ticket is still live",
            "invalid_argument",
        )
    if record.name is None:
        return bad_input(
            f"run {run_id!r} has no body name (a program started it with its body, not by a"
            " name a worker serves), so no worker can run it: resume it from that program;"
            " its ticket is still live",
            "invalid_argument",
        )
    return failure_of(exc)


_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}


_LONGEST_DURATION: Final = 10**12
"""The most of any unit a duration may count (tens of millions of years in seconds; the
bound keeps the count far from Python's limit on digits converted)."""


def parse_duration(text: str, option: str = "--ended-before") -> float:
    """``30m``, ``12h``, ``7d``, ``0s``: a whole number and a unit, in seconds."""
    found = _duration(text)
    if found is None:
        raise bad_input(
            f"{option} needs a duration such as 0s, 30m, 12h or 7d (a whole number up"
            f" to {_LONGEST_DURATION} and one of s, m, h, d), not {shorten(text)}",
            "invalid_argument",
        )
    return found


def _duration(text: str) -> float | None:
    number, unit = text[:-1], text[-1:]
    count = whole_number(number, low=0, high=_LONGEST_DURATION) if unit in _UNITS else None
    return None if count is None else float(count * _UNITS[unit])


def _iso_time(text: str) -> float | None:
    """An ISO 8601 date and time as wall-clock seconds (local time without an offset)."""
    if len(text) > 64:
        return None
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except (ValueError, OverflowError, OSError):
        return None


def parse_time(text: str) -> float:
    """``--deadline``: an ISO 8601 time."""
    found = _iso_time(text)
    if found is None:
        raise bad_input(
            f"--deadline needs an ISO 8601 time such as 2030-01-31T09:00:00+00:00 (local"
            f" time without an offset), not {shorten(text)}",
            "invalid_argument",
        )
    return found


def parse_start(text: str) -> float:
    """``--not-before``: an ISO 8601 time, or a duration from now."""
    found = _iso_time(text)
    if found is None:
        after = _duration(text)
        if after is None:
            raise bad_input(
                f"--not-before needs an ISO 8601 time such as 2030-01-31T09:00:00+00:00, or a"
                f" duration from now such as 30m, 12h or 7d, not {shorten(text)}",
                "invalid_argument",
            )
        found = time.time() + after
    return found


@runs.command("prune")
@store_option
@json_option
@click.option(
    "--ended-before",
    "ended_before",
    metavar="DURATION",
    required=True,
    help="Delete runs that ended more than DURATION ago (0s, 30m, 12h, 7d).",
)
@click.option("--dry-run", is_flag=True, help="Count the runs that would go; delete nothing.")
def prune(store: str | None, as_json: bool, ended_before: str, dry_run: bool) -> None:
    """Delete ended runs with their events, tickets and messages (Runtime.prune); never a
    run that has not ended, nor one whose root has not ended. Prints how many."""
    seconds = early(lambda: parse_duration(ended_before), as_json=as_json)

    async def run() -> None:
        async with open_cli_runtime(store_url(store), must_exist=True) as runtime:
            deleted = await runtime.prune(ended_before=seconds, dry_run=dry_run)
        if as_json:
            emit(dumps({"deleted": deleted}))
        else:
            runs = "run" if deleted == 1 else "runs"
            emit(f"{deleted} {runs} {'would be deleted' if dry_run else 'deleted'}")

    execute(run, as_json=as_json)


Action = Callable[[Runtime], Awaitable[object]]


def _control(store: str | None, as_json: bool, run_id: str, action: Action) -> None:
    """Make one control call on one run, then print its committed state."""

    async def run() -> None:
        async with open_cli_runtime(store_url(store), must_exist=True) as runtime:
            try:
                await action(runtime)
                state = await runtime.state(run_id)
            except REFUSALS as exc:
                raise await refused(runtime, exc, run_id) from None
        _print_state(run_id, state, as_json=as_json)

    execute(run, as_json=as_json)


def _print_state(run_id: str, state: RunState, *, as_json: bool) -> None:
    emit(dumps(state_to_json(state)) if as_json else f"{run_id}: {describe_state(state)}")


def _end_many(
    store: str | None,
    as_json: bool,
    filters: dict[str, Any],
    *,
    dry_run: bool,
    yes: bool,
    end: Callable[[Runtime, str], Awaitable[object]],
    ended_word: str,
) -> None:
    """End every run the filters select that has not ended: ``--dry-run`` says which (an
    ended run is never counted: nothing could end it), ``--yes`` ends them and says which
    it ended (a run that ends meanwhile, a child with its parent, is left as it ended)."""
    if dry_run == yes:
        raise click.UsageError(
            "filters select many runs: add --dry-run to see which, or --yes to end them"
            if not dry_run
            else "give --dry-run or --yes, not both"
        )

    async def run() -> None:
        async with open_cli_runtime(store_url(store), must_exist=True) as runtime:
            matched: list[str] = []
            before: str | None = None
            while True:
                page = await runtime.list_runs(limit=_PAGE, before=before, **filters)
                matched += [record.run_id for record in page if not record.state.is_ended]
                if len(page) < _PAGE:
                    break
                before = page[-1].run_id
            ended: list[str] = []
            if yes:
                for run_id in matched:
                    try:
                        await end(runtime, run_id)
                    except REFUSALS:
                        continue  # it ended another way first (a parent took it along)
                    ended.append(run_id)
        shown = matched if dry_run else ended
        if as_json:
            emit(dumps({"matched": len(matched), "run_ids": list(shown)}))
            return
        runs = "run" if len(shown) == 1 else "runs"
        if dry_run:
            emit(f"{len(shown)} {runs} would be {ended_word}" + (":" if shown else ""))
        else:
            gone = len(matched) - len(ended)
            meanwhile = f" ({gone} ended meanwhile)" if gone else ""
            emit(f"{len(shown)} {runs} {ended_word}{meanwhile}" + (":" if shown else ""))
        for run_id in shown:
            emit(f"  {run_id}")

    execute(run, as_json=as_json)


def _one_or_filters(run_id: str | None, filters: dict[str, Any]) -> bool:
    """Whether filters select the runs (else ``run_id`` names one); exactly one way."""
    given = {key: value for key, value in filters.items() if value is not None}
    if run_id is not None and given:
        raise click.UsageError("give a run ID or filters (--name, --state, --thread), not both")
    if run_id is None and not given:
        raise click.UsageError("give a run ID, or filters (--name, --state, --thread)")
    return bool(given)


def _call(name: ControlName, **arguments: JsonValue) -> Callable[[Runtime, str], Awaitable[object]]:
    """Control ``name``'s call (`CONTROLS`) with these arguments, for any run."""

    async def call(runtime: Runtime, run_id: str) -> object:
        return await CONTROLS[name].call(runtime, run_id, arguments)

    return call


@runs.command("cancel")
@store_option
@json_option
@click.argument("run_id", metavar="[ID]", required=False)
@click.option("--reason", metavar="R", help="Recorded as the cancel's reason.")
@name_filter
@state_filter
@thread_filter
@click.option("--dry-run", is_flag=True, help="With filters: print how many and which.")
@click.option("--yes", is_flag=True, help="With filters: cancel every run they select.")
def cancel(
    store: str | None,
    as_json: bool,
    run_id: str | None,
    reason: str | None,
    name: str | None,
    state: RunFilter | None,
    thread_id: str | None,
    dry_run: bool,
    yes: bool,
) -> None:
    """Cancel a run wherever it is (cancel_run); or, with filters, every run they select."""
    filters = {"name": name, "state": state, "thread_id": thread_id}
    call = _call("cancel", reason=reason)
    if _one_or_filters(run_id, filters):
        _end_many(
            store, as_json, filters, dry_run=dry_run, yes=yes, end=call, ended_word="cancelled"
        )
        return
    assert run_id is not None
    if dry_run or yes:
        raise click.UsageError("--dry-run and --yes go with filters, not with a run ID")
    _control(store, as_json, run_id, lambda runtime: call(runtime, run_id))


@runs.command("stop")
@store_option
@json_option
@click.argument("run_id", metavar="[ID]", required=False)
@click.option("--reason", metavar="R", required=True, help="Why (recorded in Stopped(R)).")
@name_filter
@state_filter
@thread_filter
@click.option("--dry-run", is_flag=True, help="With filters: print how many and which.")
@click.option("--yes", is_flag=True, help="With filters: stop every run they select.")
def stop(
    store: str | None,
    as_json: bool,
    run_id: str | None,
    reason: str,
    name: str | None,
    state: RunFilter | None,
    thread_id: str | None,
    dry_run: bool,
    yes: bool,
) -> None:
    """Stop a run for a host reason wherever it is (stop_run); or, with filters, every run
    they select."""
    filters = {"name": name, "state": state, "thread_id": thread_id}

    call = _call("stop", reason=reason)
    if _one_or_filters(run_id, filters):
        _end_many(store, as_json, filters, dry_run=dry_run, yes=yes, end=call, ended_word="stopped")
        return
    assert run_id is not None
    if dry_run or yes:
        raise click.UsageError("--dry-run and --yes go with filters, not with a run ID")
    _control(store, as_json, run_id, lambda runtime: call(runtime, run_id))


def _one(name: ControlName, run_id: str, **arguments: JsonValue) -> Action:
    """Control ``name``'s call (`CONTROLS`) on run ``run_id``."""
    call = _call(name, **arguments)
    return lambda runtime: call(runtime, run_id)


@runs.command("pause")
@store_option
@json_option
@click.argument("run_id", metavar="ID")
def pause(store: str | None, as_json: bool, run_id: str) -> None:
    """Ask the run to pause at its next boundary (send Pause)."""
    _control(store, as_json, run_id, _one("pause", run_id))


@runs.command("wake")
@store_option
@json_option
@click.argument("run_id", metavar="ID")
@click.option("--reason", metavar="R", default="", help="Handed to the waiting boundary.")
def wake(store: str | None, as_json: bool, run_id: str, reason: str) -> None:
    """Wake the run's boundary(wait=True) (send Wake)."""
    _control(store, as_json, run_id, _one("wake", run_id, reason=reason))


@runs.command("message")
@store_option
@json_option
@click.argument("run_id", metavar="ID")
@click.argument("payload", metavar="JSON")
def message(store: str | None, as_json: bool, run_id: str, payload: str) -> None:
    """Send the run a message, a JSON value its next boundary returns (send Message)."""
    value = early(lambda: parse_json(payload, "the message"), as_json=as_json)
    _control(store, as_json, run_id, _one("message", run_id, payload=value))


@runs.command("resume")
@store_option
@json_option
@click.argument("run_id", metavar="ID")
@click.option("--value", metavar="JSON", help="The resume value, a JSON value.")
@click.option("--correlation-id", metavar="C", help="The ticket answered (default: the live one).")
def resume(
    store: str | None, as_json: bool, run_id: str, value: str | None, correlation_id: str | None
) -> None:
    """Answer an awaiting run's ticket; it continues in a worker that serves its body."""
    resume_value = (
        None if value is None else early(lambda: parse_json(value, "--value"), as_json=as_json)
    )

    resume_call = _one("resume", run_id, value=resume_value, correlation_id=correlation_id)

    async def call(runtime: Runtime) -> None:
        try:
            await resume_call(runtime)
        except InvalidPayload:
            raise  # the ticket refused the value: a refusal, with the run's state
        except InvalidArgument as exc:
            raise await _unresumable(runtime, exc, run_id) from None

    _control(store, as_json, run_id, call)
