"""What every command shares: the store option, exit codes, how a failure is reported, JSON
arguments, and the redaction of passwords from anything printed.

A command runs as one `trio.run` of an async function that opens a runtime on the store
(`open_cli_runtime`); whatever goes wrong comes out of it as a `CommandFailed`, which the
top-level handler (`awaken_trio._cli._app.main`) prints as one line and turns into the exit
code. Nothing else decides an exit code.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar, final

import attrs
import click
import trio
from rich.console import Console

from .. import (
    AwakenError,
    InvalidArgument,
    InvalidPayload,
    JsonValue,
    NotActive,
    NotAwaiting,
    RunAlreadyEnded,
    RunExists,
    RunState,
    Runtime,
    StoreError,
    StreamGap,
    ThreadBusy,
    TicketExpired,
    TicketMismatch,
    UnknownRun,
    open_runtime,
)
from ..store import MemoryStore, open_store, state_to_json
from ._shapes import describe_state
from ._words import COMMAND_LINE, Words, refusal_message

T = TypeVar("T")

STORE_ENV: Final = "AWAKEN_TRIO_STORE"


class Exit(enum.IntEnum):
    """The exit codes (DESIGN §3.3)."""

    DONE = 0
    REFUSED = 1
    """The run's committed state refused the request."""
    BAD_INPUT = 2
    """Usage errors and bad input."""
    STORE = 3
    """The store cannot be opened or read."""
    INTERNAL = 70
    """An error nobody foresaw (a bug; EX_SOFTWARE)."""
    INTERRUPTED = 130
    """Ctrl-C where it is not the normal way to stop (128 + SIGINT)."""


REFUSALS: Final = (
    NotActive,
    NotAwaiting,
    RunAlreadyEnded,
    TicketMismatch,
    TicketExpired,
    InvalidPayload,
    UnknownRun,
    RunExists,
    StreamGap,
    ThreadBusy,
)
"""Errors by which a run's committed state refuses a request (exit 1). `InvalidPayload` is
an `InvalidArgument`, so it must be matched before it."""


@final
@attrs.frozen
class CommandFailed(Exception):
    """A command's failure, ready to print: ``error`` is the snake_case name of what went
    wrong, ``state`` the run's committed state (None when there is no run to speak of)."""

    code: Exit
    error: str
    message: str
    state: RunState | None = None


# ---------------------------------------------------------------------------- redaction

# ``scheme://user:password@host``: the password, up to the ``@`` that ends the user info.
_URL_PASSWORD: Final = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@'\"]*):[^\s@'\"]*@")
# ``password=...`` in a query string or a connection string.
_PASSWORD_OPTION: Final = re.compile(r"(?P<head>\bpassword=)[^\s&'\"]*", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with every URL password (``user:secret@``) and ``password=`` value
    replaced by ``***``: applied to everything a command prints."""
    text = _URL_PASSWORD.sub(r"\g<head>:***@", text)
    return _PASSWORD_OPTION.sub(r"\g<head>***", text)


# ---------------------------------------------------------------------------- failures


def snake_case(name: str) -> str:
    """A class name in snake_case, acronyms kept together (``HTTPError`` -> ``http_error``)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def failure_of(
    exc: BaseException, state: RunState | None = None, *, words: Words = COMMAND_LINE
) -> CommandFailed:
    """The `CommandFailed` an error of the library (or of the input) comes out as: a
    refusal said in the face's ``words`` (see `refusal_message`), given the run's
    committed ``state`` when it is known."""
    said = refusal_message(exc, state, words) if isinstance(exc, AwakenError) else None
    message = one_line(str(exc) if said is None else said)
    name = snake_case(type(exc).__name__)
    if isinstance(exc, REFUSALS):
        return CommandFailed(Exit.REFUSED, name, message, state)
    if isinstance(exc, InvalidArgument):
        return CommandFailed(Exit.BAD_INPUT, name, message)
    if isinstance(exc, StoreError):
        return CommandFailed(Exit.STORE, name, message)
    return CommandFailed(Exit.INTERNAL, name, message)


def one_line(text: str) -> str:
    return redact(" ".join(text.split()))


def bad_input(message: str, error: str = "bad_input") -> CommandFailed:
    return CommandFailed(Exit.BAD_INPUT, error, one_line(message))


def error_json(failure: CommandFailed) -> dict[str, JsonValue]:
    """The error object of DESIGN §3.3: ``{"error", "message", "state"}`` (``state`` is
    None for an unknown run); the dashboard's API answers a refusal with the same."""
    state = None if failure.state is None else state_to_json(failure.state)
    return {"error": failure.error, "message": failure.message, "state": state}


def report(failure: CommandFailed, *, as_json: bool, log: logging.Logger | None = None) -> None:
    """Print a failure: one line on stderr, or (``as_json``) one object on stdout; or, for
    a command that logs (``log``: ``worker``, ``ui``), one ERROR record of its log."""
    if as_json:
        click.echo(json.dumps(error_json(failure), ensure_ascii=False))
        return
    text = f"awaken-trio: {failure.error}: {failure.message}"
    if failure.code is Exit.REFUSED:
        committed = "unknown run" if failure.state is None else describe_state(failure.state)
        text += f" [committed state: {committed}]"
    if log is not None:
        log.error("%s", text, extra={"error": failure.error})
        return
    click.echo(text, err=True)


async def refused(
    runtime: Runtime, exc: AwakenError, run_id: str | None, *, words: Words = COMMAND_LINE
) -> CommandFailed:
    """The failure of a refused request, with the committed state of the run it named
    (``run_id``; None when it named none) read after it."""
    state: RunState | None = getattr(exc, "state", None)
    if state is None and run_id is not None and not isinstance(exc, UnknownRun):
        try:
            state = await runtime.state(run_id)
        except (UnknownRun, InvalidArgument, StoreError):
            state = None
    return failure_of(exc, state, words=words)


# ---------------------------------------------------------------------------- input


def parse_json(text: str, what: str) -> JsonValue:
    """A JSON argument (``--input``, ``--value``, a message, a control's body), or bad
    input (exit 2, or 400) naming the problem; never Python's own error for text past its
    limits (a number of thousands of digits, nesting past the recursion limit)."""

    def refuse_constant(name: str) -> object:
        raise ValueError(f"{name} is not a JSON value")

    try:
        value: JsonValue = json.loads(text, parse_constant=refuse_constant)
    except RecursionError:
        raise bad_input(
            f"{what} is nested too deeply to read (more levels than this interpreter's"
            f" recursion limit of {sys.getrecursionlimit()}): send a value nested less deeply",
            "malformed_json",
        ) from None
    except ValueError as exc:
        raise bad_input(
            f"{what} is not valid JSON ({exc}): give a JSON value, e.g. '{{\"q\": 1}}',"
            " '\"text\"' or '3'",
            "malformed_json",
        ) from None
    return value


SHOWN_CHARACTERS: Final = 24
"""How much of a long value a message quotes."""


def shorten(text: str) -> str:
    """``text`` quoted for a message, its start alone when it is long (a value of
    thousands of characters is named, not echoed)."""
    if len(text) <= SHOWN_CHARACTERS:
        return repr(text)
    return f"{text[:SHOWN_CHARACTERS]!r}... ({len(text)} characters)"


def whole_number(text: str, *, low: int, high: int) -> int | None:
    """``text`` as a whole number from ``low`` to ``high`` (ASCII digits, leading zeros
    allowed), else None. A number too long to be in range is refused by its length, so
    Python's limit on digits converted (4,300) is never reached."""
    if not (text.isascii() and text.isdigit()):
        return None
    digits = text.lstrip("0") or "0"
    if len(digits) > len(str(high)):
        return None
    number = int(digits)
    return number if low <= number <= high else None


class _ShortNumbers(click.ParamType[Any, Any]):
    """A number option that refuses text longer than any number it could take by its
    length, quoting only its start (the conversion and the range are its base class's)."""

    LONGEST: Final = 32

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and len(value) > self.LONGEST:
            self.fail(f"{shorten(value)} is not a number this option takes", param, ctx)
        return super().convert(value, param, ctx)


class WholeRange(_ShortNumbers, click.IntRange):
    """`click.IntRange`, refusing a number of thousands of digits in one short line."""


class SecondsRange(_ShortNumbers, click.FloatRange):
    """`click.FloatRange`, refusing a number of thousands of digits in one short line."""


def store_url(url: str | None) -> str:
    """The store a command that reads, steers or serves runs opens: given, and shared with
    other processes (every command but ``demo``, which makes its own)."""
    if not url:
        raise bad_input(
            f"no store given: pass --store URL or set {STORE_ENV}"
            " (e.g. sqlite:///runs.db, sqlite:////absolute/runs.db)",
            "no_store",
        )
    try:
        store = open_store(url)  # no I/O: it only parses the URL
    except InvalidArgument as exc:
        raise failure_of(exc) from None
    if isinstance(store, MemoryStore):
        raise bad_input(
            f"--store {url} is a store inside one process: this command would open a new,"
            " empty one, holding none of your runs; give the store your runs are in, e.g."
            " sqlite:///runs.db or postgresql://USER@HOST/DB",
            "invalid_argument",
        )
    return url


def check_store_exists(url: str) -> None:
    """Refuse (exit 3) an SQLite URL naming no file: a read or a control request must not
    create an empty store by a typing mistake. Bad URLs exit 2."""
    try:
        store = open_store(url)  # no I/O: it only parses the URL
    except InvalidArgument as exc:
        raise failure_of(exc) from None
    path = getattr(store, "path", None)
    if isinstance(path, os.PathLike) and not os.path.exists(path):
        raise CommandFailed(
            Exit.STORE,
            "store_error",
            one_line(
                f"there is no store at {os.fspath(path)!r}; check --store (or {STORE_ENV}),"
                " or create one by submitting a run or starting a worker"
            ),
        )


@asynccontextmanager
async def open_cli_runtime(url: str, *, must_exist: bool, **options: Any) -> AsyncIterator[Runtime]:
    """A runtime on the store ``url``; its errors come out as `CommandFailed`.

    Errors of the block that are not `CommandFailed` are left to the block: it knows which
    run a refusal is about (see `refused`).
    """
    if must_exist:
        check_store_exists(url)
    try:
        async with open_runtime(url, **options) as runtime:
            yield runtime
    except CommandFailed:
        raise
    except (InvalidArgument, StoreError) as exc:
        raise failure_of(exc) from None


def console(*, stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr): it draws and colours only on a terminal;
    elsewhere it writes plain text with no escape codes. Text is never read as markup or
    emoji codes (run ids and payloads are the user's)."""
    return Console(stderr=stderr, highlight=False, markup=False, emoji=False)


def emit(text: str) -> None:
    """One line on stdout, flushed at once (a reader of a pipe sees it as it happens)."""
    click.echo(text)
    sys.stdout.flush()


def early(fn: Callable[[], T], *, as_json: bool, log: logging.Logger | None = None) -> T:
    """Check the input before anything opens (a bad argument is reported as such, whatever
    the store)."""
    try:
        return fn()
    except CommandFailed as failure:
        report(failure, as_json=as_json, log=log)
        sys.exit(failure.code)


def execute(
    fn: Callable[[], Awaitable[None]], *, as_json: bool, log: logging.Logger | None = None
) -> None:
    """Run a command's async function under Trio; a failure is reported (`report`) and
    becomes the exit code."""
    try:
        try:
            trio.run(fn)
        except BaseExceptionGroup as group:
            raise _sole_leaf(group) from None
    except CommandFailed as failure:
        report(failure, as_json=as_json, log=log)
        sys.exit(failure.code)
    except AwakenError as exc:
        report(failure_of(exc), as_json=as_json, log=log)
        sys.exit(failure_of(exc).code)


def _sole_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception a group (of nurseries nested in a command) holds, else the group."""
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        else:
            leaves.append(exc)

    walk(group)
    return leaves[0] if len(leaves) == 1 else group


async def until_signalled(fn: Callable[[], Awaitable[None]]) -> None:
    """Run ``fn`` until it returns or the process gets SIGINT (Ctrl-C) or SIGTERM: the
    normal way to stop following or watching, so it exits 0."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def stop_on_signal() -> None:
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(stop_on_signal)
            await fn()
            nursery.cancel_scope.cancel()
