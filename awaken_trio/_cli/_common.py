"""What every command shares: the store a command opens, how a failure is reported and
becomes the exit code, the console it prints on.

A command runs as one `trio.run` of an async function that opens a runtime on the store
(`open_cli_runtime`); whatever goes wrong comes out of it as a `CommandFailed`, which the
top-level handler (`awaken_trio._cli._app.main`) prints as one line and turns into the exit
code. Nothing else decides an exit code.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar

import click
import trio
from rich.console import Console

from .. import AwakenError, InvalidArgument, Runtime, StoreError, open_runtime
from .._face.failures import CommandFailed, Exit, bad_input, error_json, failure_of, one_line
from .._face.input import shorten
from .._face.shapes import describe_state
from ..store import MemoryStore, open_store

T = TypeVar("T")

STORE_ENV: Final = "AWAKEN_TRIO_STORE"


# ---------------------------------------------------------------------------- failures


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
        # The error behind the failure rides on the record at DEBUG, so its traceback is
        # written then (and only then, as for every record), whichever path noticed it.
        behind = failure.__cause__ or failure.__context__
        log.error(
            "%s",
            text,
            extra={"error": failure.error},
            exc_info=behind if behind is not None and log.isEnabledFor(logging.DEBUG) else None,
        )
        return
    click.echo(text, err=True)


# ---------------------------------------------------------------------------- input


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
        refused = failure_of(exc)
        refused.__cause__ = exc
        report(refused, as_json=as_json, log=log)
        sys.exit(refused.code)


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
