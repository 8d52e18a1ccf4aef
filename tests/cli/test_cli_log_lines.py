"""The log handler ``worker`` and ``ui`` install (`awaken_trio._cli._logging`): one
redacted line per record, in text or JSON, the record's ``extra`` kept, an exception named
but its traceback written only at DEBUG, a run's stored traceback written as run data at
any level, and a record that cannot be formatted still one line."""

from __future__ import annotations

import io
import json
import logging
import math
import re
import sys
from typing import Any

import pytest
import trio

from awaken_trio._cli._logging import COMMAND_LOGGER, LineHandler, LogFormat

SECRET = "hunter2"
URL = f"postgresql://alice:{SECRET}@db.example/runs"
TEXT_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (DEBUG|INFO|WARNING|ERROR) \S+: ")


def written(
    log_format: LogFormat,
    *,
    level: int = logging.INFO,
    msg: str = "claimed run %s",
    args: tuple[object, ...] = ("r1",),
    name: str = "awaken_trio.worker",
    exc: BaseException | None = None,
    debug: bool = False,
    **extra: Any,
) -> str:
    stream = io.StringIO()
    handler = LineHandler(stream, log_format, tracebacks=debug)
    exc_info = None if exc is None else (type(exc), exc, exc.__traceback__)
    record = logging.LogRecord(name, level, __file__, 1, msg, args, exc_info)
    record.__dict__.update(extra)
    handler.handle(record)
    return stream.getvalue()


def raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as caught:
        return caught


def test_a_text_record_is_one_line_with_its_time_level_logger_and_extras() -> None:
    text = written("text", run_id="r1", worker_id="w-7", event="claim")
    [line] = text.splitlines()
    assert TEXT_LINE.match(line), line
    assert line.endswith(
        "INFO awaken_trio.worker: claimed run r1 run_id=r1 worker_id=w-7 event=claim"
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("w-7", "w-7"),
        ("two words", '"two words"'),
        ("tab\there", '"tab\\there"'),
        ("no\u00a0break", '"no\u00a0break"'),
        ('say"so', '"say\\"so"'),
        ("it's", '"it\'s"'),
        ("k=v", '"k=v"'),
        ("", '""'),
    ],
)
def test_an_extra_is_bare_only_when_it_is_one_plain_word(value: str, shown: str) -> None:
    [line] = written("text", note=value).splitlines()
    assert line.endswith(f" note={shown}"), line


def test_a_json_record_is_one_object_with_its_extras() -> None:
    text = written("json", run_id="r1", worker_id="w-7", event="claim", generation=2)
    [line] = text.splitlines()
    data = json.loads(line)
    assert data["level"] == "INFO"
    assert data["logger"] == "awaken_trio.worker"
    assert data["message"] == "claimed run r1"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", data["time"])
    assert (data["run_id"], data["worker_id"], data["event"], data["generation"]) == (
        "r1",
        "w-7",
        "claim",
        2,
    )


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_an_exception_is_named_and_its_traceback_written_only_at_debug(
    log_format: LogFormat,
) -> None:
    error = raised(ValueError("the disk is full"))
    quiet = written(log_format, level=logging.ERROR, msg="serving failed", args=(), exc=error)
    assert len(quiet.splitlines()) == 1
    assert "Traceback" not in quiet
    assert "ValueError: the disk is full" in quiet
    loud = written(
        log_format, level=logging.ERROR, msg="serving failed", args=(), exc=error, debug=True
    )
    assert "Traceback (most recent call last)" in loud
    assert "in raised" in loud  # the frames
    if log_format == "json":
        [line] = loud.splitlines()
        assert "Traceback" in json.loads(line)["exception_traceback"]


def test_an_exception_the_message_already_says_is_named_by_its_type_alone() -> None:
    error = raised(OSError("connection refused"))
    text = written(
        "text", level=logging.ERROR, msg="the store failed: %s", args=(error,), exc=error
    )
    assert text.rstrip().endswith("the store failed: connection refused [OSError]")


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_runs_stored_traceback_is_run_data_written_at_any_level(log_format: LogFormat) -> None:
    stored = 'Traceback (most recent call last):\n  File "body.py", line 3\nValueError: boom'
    text = written(
        log_format, msg="run %s failed", args=("r1",), run_id="r1", event="failed", traceback=stored
    )
    if log_format == "json":
        [line] = text.splitlines()
        assert json.loads(line)["traceback"] == stored
        return
    first, *rest = text.splitlines()
    assert "traceback=" not in first
    assert first.endswith("run r1 failed run_id=r1 event=failed")
    assert rest == [
        "  Traceback (most recent call last):",
        '    File "body.py", line 3',
        "  ValueError: boom",
    ]


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_no_password_is_ever_written(log_format: LogFormat) -> None:
    error = raised(ConnectionError(f"cannot reach {URL}"))
    for debug in (False, True):
        text = written(
            log_format,
            level=logging.ERROR,
            msg="reading %s failed (password=%s)",
            args=(URL, SECRET),
            exc=error,
            debug=debug,
            store=URL,
            options={"dsn": f"host=db password={SECRET}"},
            traceback=f"Traceback ...\nStoreError: {URL}",
        )
        assert SECRET not in text
        assert "alice:***@" in text


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text for you")

    __repr__ = __str__


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_record_that_cannot_be_formatted_is_still_one_line(
    log_format: LogFormat, capsys: pytest.CaptureFixture[str]
) -> None:
    for args in ((Unprintable(),), ("one", "two")):
        text = written(log_format, msg="value %s", args=args, thing=Unprintable())
        [line] = text.splitlines()
        assert "could not be formatted" in line
        if log_format == "json":
            assert "str() raised" in json.loads(line)["thing"]
    assert capsys.readouterr().err == ""  # never logging's own "--- Logging error ---"


def test_extras_json_cannot_hold_are_written_as_text() -> None:
    [line] = written(
        "json", ratio=math.nan, when=math.inf, item=object(), nested={"k": [1, (2,)]}
    ).splitlines()
    data = json.loads(line)
    assert (data["ratio"], data["when"]) == ("nan", "inf")
    assert data["item"].startswith("<object object")
    assert data["nested"] == {"k": [1, [2]]}


def test_the_commands_own_lines_are_their_message_in_text_and_objects_in_json() -> None:
    said = "awaken-trio worker: serving steps from sqlite:///runs.db; Ctrl-C or SIGTERM to stop"
    text = written("text", msg=said, args=(), name=COMMAND_LOGGER)
    assert text == said + "\n"
    data = json.loads(written("json", msg=said, args=(), name=COMMAND_LOGGER))
    assert (data["logger"], data["message"]) == (COMMAND_LOGGER, said)


def test_a_closed_stream_loses_the_record_quietly(capsys: pytest.CaptureFixture[str]) -> None:
    stream = io.StringIO()
    handler = LineHandler(stream, "text", tracebacks=False)
    stream.close()
    handler.handle(logging.LogRecord("x", logging.ERROR, __file__, 1, "lost", (), None))
    assert capsys.readouterr().err == ""
    assert sys.exc_info() == (None, None, None)


async def test_errors_python_would_print_with_their_traceback_are_one_line_each() -> None:
    """A thread's error nobody caught, and one raised where nothing can catch it (a
    ``__del__``), once the command's handler is installed."""
    program = (
        "import threading\n"
        "from awaken_trio._cli._logging import install\n"
        "install('INFO', 'text')\n"
        "thread = threading.Thread(target=lambda: 1 / 0, name='pool-worker')\n"
        "thread.start()\n"
        "thread.join()\n"
        "class Leaky:\n"
        "    def __del__(self):\n"
        f"        raise ValueError('closing {URL} failed')\n"
        "Leaky()\n"
    )
    done = await trio.run_process([sys.executable, "-c", program], capture_stderr=True, check=False)
    assert done.returncode == 0
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 2, lines
    assert "ERROR py.threads: thread 'pool-worker' ended with an error" in lines[0]
    assert lines[0].endswith("division by zero [ZeroDivisionError]")
    assert "ERROR py.unraisable: " in lines[1]
    assert lines[1].endswith("closing postgresql://alice:***@db.example/runs failed [ValueError]")
