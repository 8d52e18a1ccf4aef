"""What ``awaken-trio worker`` and ``awaken-trio ui`` write on stderr, in real processes:
one redacted line per record (the library's, psycopg_pool's), or one JSON object per line
with ``--log-format json``; no Python traceback but at ``--log-level DEBUG``, through a
PostgreSQL outage under a worker and an SQLite file deleted under the dashboard."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
import trio

from tests.cli.cli_helpers import HERE, background, cli, read_until, wait_exit
from tests.pg_server import PgServer, start_server

pytestmark = pytest.mark.slow

SERVING: Final = "Ctrl-C or SIGTERM to stop"
PASSWORD: Final = "s3cret-pw"
"""In the error of the ``fails`` body (cli_bodies.py)."""
RECORD: Final = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (DEBUG|INFO|WARNING|ERROR) [\w.]+: \S"
)
JSON_KEYS: Final = {"time", "level", "logger", "message"}


def assert_text_lines(log: str) -> None:
    """Every line a record (time, level, logger, message) or the command's own line."""
    for line in log.splitlines():
        assert RECORD.match(line) or line.startswith(("awaken-trio ", "awaken-trio: ")), line


def json_lines(log: str) -> list[dict[str, object]]:
    objects = [json.loads(line) for line in log.splitlines()]
    for data in objects:
        assert set(data) >= JSON_KEYS, data
    return objects


async def run_state(store: str, run_id: str) -> str:
    shown = await cli("runs", "show", run_id, "--store", store, "--json")
    assert shown.code == 0, shown.stderr
    kind: str = shown.json()["state"]["kind"]
    return kind


async def wait_state(store: str, run_id: str, kind: str) -> None:
    with trio.fail_after(60):
        while True:
            if await run_state(store, run_id) == kind:
                return
            await trio.sleep(0.05)


def worker_args(store: str, *extra: str) -> list[str]:
    return ["worker", "cli_bodies", "--store", store, "--poll", "0.02", "--lease", "3", *extra]


async def log_of_a_failed_run(tmp_path: Path, run_id: str, *options: str) -> str:
    """All a worker writes, started with ``options``, while a run of ``fails`` fails
    under it and until SIGTERM ends it (exit 0)."""
    store = f"sqlite:///{tmp_path}/runs.db"
    async with background(*worker_args(store, *options), cwd=HERE) as worker:
        seen = bytearray()
        await read_until(worker.stderr, SERVING, seen)
        await cli("runs", "submit", "fails", "--run-id", run_id, "--store", store)
        await wait_state(store, run_id, "ended")
        await read_until(worker.stderr, "ValueError", seen)
        worker.send_signal(signal.SIGTERM)
        assert await wait_exit(worker) == 0
        return await read_until(worker.stderr, "claims released", seen)


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
async def test_a_failed_run_is_one_line_with_its_traceback_under_it_once(
    tmp_path: Path, level: str
) -> None:
    # The run's failure traceback is the run's data (the one its terminal event stores),
    # written under the failure's line at any level, and once, even at DEBUG where the
    # record's own exception would be written too.
    log = await log_of_a_failed_run(tmp_path, "f-1", "--log-level", level)
    assert PASSWORD not in log
    assert "bob:***@" in log
    assert log.count("Traceback (most recent call last)") == 1, log
    records = [line for line in log.splitlines() if not line.startswith("  ")]
    assert_text_lines("\n".join(records))
    [failed] = [line for line in records if "attempt 1 failed" in line]
    assert "run_id=f-1" in failed
    lines = log.splitlines()
    under = lines[lines.index(failed) + 1 :]
    assert under[0] == "  Traceback (most recent call last):", under[:3]
    assert any(line.startswith("  ValueError") for line in under), under


async def test_with_json_every_line_is_an_object_the_start_line_too(tmp_path: Path) -> None:
    log = await log_of_a_failed_run(tmp_path, "f-2", "--log-format", "json")
    objects = json_lines(log)
    start = objects[0]
    assert start["logger"] == "awaken_trio.cli"
    assert SERVING in str(start["message"])
    failure = [data for data in objects if "ValueError" in json.dumps(data)]
    assert failure
    assert all(data.get("run_id") == "f-2" for data in failure), failure
    assert PASSWORD not in log
    [failed] = [data for data in failure if "failed" in str(data["message"])]
    assert str(failed["traceback"]).startswith("Traceback (most recent call last)")
    assert "exception_traceback" not in failed  # the same frames, written once


@pytest.fixture
def own_pg_server(request: pytest.FixtureRequest) -> Iterator[PgServer]:
    """A PostgreSQL server of the test's own (it is stopped under a worker), where the
    suite's `pg_server` can run (that fixture says why not, and skips or fails)."""
    request.getfixturevalue("pg_server")
    server = start_server()
    try:
        yield server
    finally:
        server.stop()


async def test_a_postgresql_outage_under_a_worker_is_logged_in_lines_without_tracebacks(
    own_pg_server: PgServer,
) -> None:
    server = own_pg_server
    store = await trio.to_thread.run_sync(server.create_database)
    # The run waits at a boundary, committing nothing: a body whose commit is in flight as
    # the server stops may be told `StoreError` (the commit's outcome unknown) and fail,
    # and a failed run's line carries its traceback by design. What is logged here is the
    # outage's own records: the pool's, the store's, the worker's.
    assert (await cli("runs", "submit", "waits", "--run-id", "pg-1", "--store", store)).code == 0
    async with background(*worker_args(store), cwd=HERE) as worker:
        seen = bytearray()
        await read_until(worker.stderr, SERVING, seen)
        await wait_state(store, "pg-1", "running")
        await trio.to_thread.run_sync(server.stop_server, "fast")
        # psycopg_pool's own lines, and the worker's store errors.
        await read_until(worker.stderr, " WARNING psycopg.pool: ", seen)
        await read_until(worker.stderr, " ERROR awaken_trio.", seen)
        await trio.to_thread.run_sync(server.start)
        await wait_state(store, "pg-1", "running")
        worker.send_signal(signal.SIGTERM)
        assert await wait_exit(worker) == 0
        log = await read_until(worker.stderr, "claims released", seen)
    assert "Traceback" not in log
    assert server.password not in log
    assert_text_lines(log)


def delete(folder: Path) -> None:
    """The store file, its journal and its shared memory, as ``rm runs.db*`` would."""
    for file in folder.glob("runs.db*"):
        file.unlink()


@pytest.mark.parametrize(
    ("args", "traceback"),
    [([], False), (["--log-format", "json"], False), (["--log-level", "DEBUG"], True)],
    ids=["text", "json", "debug"],
)
async def test_an_sqlite_file_deleted_under_the_dashboard_ends_it_in_one_line(
    tmp_path: Path, args: list[str], traceback: bool
) -> None:
    path = tmp_path / "runs.db"
    store = f"sqlite:///{path}"
    assert (await cli("runs", "submit", "steps", "--run-id", "u-1", "--store", store)).code == 0
    async with background("ui", "--store", store, "--port", "0", *args) as ui:
        seen = bytearray()
        await read_until(ui.stderr, "Ctrl-C to stop", seen)
        await trio.to_thread.run_sync(delete, tmp_path)
        assert await wait_exit(ui) == 3
        log = await read_until(ui.stderr, "store_error", seen)
        assert ui.stderr is not None
        while chunk := await ui.stderr.receive_some():
            seen += chunk
        log = seen.decode()
    assert "deleted" in log
    assert ("Traceback" in log) is traceback
    if "--log-format" in args:
        last = json_lines(log)[-1]
        assert last["level"] == "ERROR"
        assert "store_error" in str(last["message"])
    elif not traceback:
        assert_text_lines(log)
        assert log.splitlines()[-1].startswith("awaken-trio: store_error: ")
