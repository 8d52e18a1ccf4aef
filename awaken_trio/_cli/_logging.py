"""The log of the long-running commands (``worker``, ``ui``): one handler on the root
logger, on stderr, that writes each record as one redacted line (DESIGN §3.3, §3.6).

The library adds no handler (a program embedding it configures logging as it likes); these
commands own their process, so they install this one before importing anything of the
user's. It writes every record of every logger (the library's, psycopg_pool's, hypercorn's,
the user's bodies'):

- ``text``: ``2025-06-01 12:00:00.123 INFO awaken_trio.worker: message key=value ...``,
  the record's ``extra`` (``run_id``, ``worker_id``, ``event``, ...) as ``key=value``; the
  command's own lines (logger ``awaken_trio.cli``: the start line, stopping, a failure that
  ends it) as their message alone, as a person reads them.
- ``json``: one JSON object per line, those lines included: ``time`` (UTC, ISO 8601),
  ``level``, ``logger``, ``message``, and each ``extra`` by its own key.

Python's own error printing goes the same way: warnings, a thread's uncaught error, an
error raised where nothing can catch it (loggers ``py.warnings``, ``py.threads``,
``py.unraisable``).

An exception a record carries (``exc_info``) is named on its line (its type and message);
its traceback is the process's own, written only at ``DEBUG``. A run's stored failure
traceback in ``extra["traceback"]`` is the run's data, written at any level: under the line
in ``text``, as the ``traceback`` key in ``json``. Every string written goes through
`redact`: no password ever reaches the log. A record that cannot be formatted (its
arguments' ``__str__`` raises) is still one line, saying so, never ``logging``'s own
traceback.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import re
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any, Final, Literal, TextIO, TypeVar, get_args

import click

from .._redact import redact

F = TypeVar("F", bound=Callable[..., Any])

LogFormat = Literal["text", "json"]
LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR")
COMMAND_LOGGER: Final = "awaken_trio.cli"
"""The command's own lines: written whatever ``--log-level`` says."""
RUN_TRACEBACK: Final = "traceback"
"""The ``extra`` key of a run's stored failure traceback (run data, written at any level)."""

command_log: Final = logging.getLogger(COMMAND_LOGGER)

# What makes an ``extra`` more than one plain word in a text line: whitespace (``\s`` is
# `str.isspace`'s set), a quote, an ``=``.
_NOT_BARE: Final = re.compile(r"[\s\"'=]")
# The attributes every LogRecord has; any other is an ``extra``.
_STANDARD: Final = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


def log_options(default_level: str) -> Callable[[F], F]:
    """``--log-level`` and ``--log-format`` for a command that installs `install`."""

    def decorate(command: F) -> F:
        command = click.option(
            "--log-format",
            type=click.Choice(get_args(LogFormat)),
            default="text",
            show_default=True,
            help="One line of text per record, or one JSON object per line (every line,"
            " the start line too).",
        )(command)
        return click.option(
            "--log-level",
            type=click.Choice(LEVELS, case_sensitive=False),
            default=default_level,
            show_default=True,
            help="The least severe records written (all loggers); DEBUG also writes tracebacks.",
        )(command)

    return decorate


def install(level: str, log_format: LogFormat, stream: TextIO | None = None) -> None:
    """Make ``stream`` (stderr) the process's one log handler, at ``level``; the
    command's own lines are written at any level."""
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    numeric = logging.getLevelNamesMapping()[level.upper()]
    root.addHandler(LineHandler(stream or sys.stderr, log_format, tracebacks=numeric <= 10))
    root.setLevel(numeric)
    command_log.setLevel(min(numeric, logging.INFO))
    # Warnings (a library's DeprecationWarning, a ResourceWarning) become records too: one
    # line each, rather than Python's two-line warning text; so do the errors Python would
    # print with their traceback itself: a thread's (psycopg_pool's, a store's) and one
    # raised where nothing can catch it (a __del__, a finalizer).
    logging.captureWarnings(True)
    threading.excepthook = _thread_failed
    sys.unraisablehook = _unraisable


def say(text: str) -> None:
    """A last line of the command (interrupted, an internal error): a record of its log
    where the command logs (`install`), else a line on stderr."""
    if any(isinstance(handler, LineHandler) for handler in logging.getLogger().handlers):
        command_log.error("%s", text)
    else:
        click.echo(text, err=True)


def set_context(**fields: Any) -> None:
    """Give every later ``json`` line of the installed handler these keys (a record's own
    ``extra`` wins): ``worker_id`` once the worker has one."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, LineHandler):
            handler.context.update(fields)


def _thread_failed(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return  # (as Python's own hook: a thread's normal way out)
    name = "a thread" if args.thread is None else f"thread {args.thread.name!r}"
    error = args.exc_value
    logging.getLogger("py.threads").error(
        "%s ended with an error it did not catch: %s",
        name,
        _safe_str(error),
        exc_info=None if error is None else (args.exc_type, error, args.exc_traceback),
    )


def _unraisable(args: Any) -> None:  # sys.UnraisableHookArgs
    error = args.exc_value
    where = _safe_str(args.object) if args.object is not None else "Python"
    logging.getLogger("py.unraisable").error(
        "%s in %s, where nothing can catch it: %s",
        args.err_msg or "an error was ignored",
        where,
        _safe_str(error),
        exc_info=None if error is None else (args.exc_type, error, args.exc_traceback),
    )


class LineHandler(logging.Handler):
    """Writes each record as one redacted line of ``text`` or ``json`` (see the module)."""

    def __init__(self, stream: TextIO, log_format: LogFormat, *, tracebacks: bool) -> None:
        super().__init__()
        self.stream = stream
        self.tracebacks = tracebacks
        self.render: Callable[[logging.LogRecord], str] = (
            self._json if log_format == "json" else self._text
        )
        self.context: dict[str, Any] = {}
        """Keys every ``json`` line carries unless its record has its own (`set_context`:
        the worker's id, once it has one)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.render(record)
            self.stream.write(text + "\n")
            self.stream.flush()
        except Exception:
            self.handleError(record)

    def handleError(self, record: logging.LogRecord) -> None:
        """One line saying a record was lost, never ``logging``'s traceback; nothing at all
        if even that cannot be written (stderr closed)."""
        error = sys.exc_info()[1]
        try:
            self.stream.write(
                f"awaken-trio: a log record of {record.name} could not be written"
                f" ({type(error).__name__})\n"
            )
            self.stream.flush()
        except Exception:
            pass

    # ------------------------------------------------------------------ the two formats

    def _text(self, record: logging.LogRecord) -> str:
        message = _one_line(_message(record))
        if record.name == COMMAND_LOGGER:
            line = message
        else:
            when = datetime.datetime.fromtimestamp(record.created).strftime("%Y-%m-%d %H:%M:%S.%f")[
                :-3
            ]
            fields = "".join(
                f" {key}={_token(value)}"
                for key, value in _extras(record).items()
                if key != RUN_TRACEBACK
            )
            line = f"{when} {record.levelname} {record.name}: {message}{fields}"
        exception = _exception(record)
        if exception is not None:
            error = record.exc_info[1] if record.exc_info else None
            # Named by its type alone when the message already says what it says.
            said = _one_line(_safe_str(error))
            line += (
                f" [{type(error).__name__}]"
                if said and said in message
                else f" [{_one_line(exception)}]"
            )
        # A run's stored traceback is the same frames as its exception's: written once.
        block = _run_traceback(record) or self._traceback(record)
        if block:
            line += "\n" + "\n".join(f"  {row}" for row in redact(block).splitlines())
        return line

    def _json(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        data: dict[str, Any] = {
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(_message(record)),
        }
        for key, value in _extras(record).items():
            data.setdefault(key, _jsonable(value))
        for key, value in self.context.items():
            data.setdefault(key, _jsonable(value))
        exception = _exception(record)
        if exception is not None:
            data["exception"] = redact(exception)
        block = self._traceback(record)
        if block and not _run_traceback(record):  # a run's stored traceback is the same
            data["exception_traceback"] = redact(block)
        return json.dumps(data, ensure_ascii=False, default=_safe_str)

    def _traceback(self, record: logging.LogRecord) -> str:
        """The traceback of the record's exception: only at DEBUG (it is the process's
        own; a person reading the log at INFO needs the line, not the frames)."""
        if not self.tracebacks:
            return ""
        parts = []
        if record.exc_info and record.exc_info[1] is not None:
            parts.append("".join(traceback.format_exception(record.exc_info[1])).rstrip())
        if record.stack_info:
            parts.append(record.stack_info.rstrip())
        return "\n".join(parts)


# ---------------------------------------------------------------------------- pieces


def _message(record: logging.LogRecord) -> str:
    """The record's message; if its arguments cannot be formatted into it, what it was
    and why not (the record still makes its line)."""
    try:
        return record.getMessage()
    except Exception as exc:
        return (
            f"{_safe_str(record.msg)} (its arguments could not be formatted: {type(exc).__name__})"
        )


def _exception(record: logging.LogRecord) -> str | None:
    """The record's exception, named: its type and message on one line."""
    if not record.exc_info or record.exc_info[1] is None:
        return None
    error = record.exc_info[1]
    text = _safe_str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _run_traceback(record: logging.LogRecord) -> str:
    value = record.__dict__.get(RUN_TRACEBACK)
    return value.rstrip() if isinstance(value, str) else ""


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {
        key: value
        for key, value in record.__dict__.items()
        if key not in _STANDARD and not key.startswith("_")
    }


def _jsonable(value: Any) -> Any:
    """An ``extra`` as JSON: strings redacted, containers walked, anything else its
    text."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # (JSON has no NaN nor Infinity)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    return redact(_safe_str(value))


def _token(value: Any) -> str:
    """An ``extra`` in a text line: bare when it is one plain word, else as JSON."""
    text = value if isinstance(value, str) else None
    if text is not None and text and _NOT_BARE.search(text) is None:
        return redact(text)
    return json.dumps(_jsonable(value), ensure_ascii=False, default=_safe_str)


def _one_line(text: str) -> str:
    return redact(" ".join(text.split()))


def _safe_str(value: object) -> str:
    try:
        return str(value)
    except Exception as exc:
        return f"<{type(value).__name__} whose str() raised {type(exc).__name__}>"
