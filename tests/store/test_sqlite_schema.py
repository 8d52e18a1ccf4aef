"""The SQLite store's file: created with its schema (and its directory), migrated forward by
ordered migrations, and refused, byte for byte unchanged, when it is not a store this version
may open; ``sqlite://`` URLs."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest

from awaken_trio import EndCause, InvalidArgument, RunState, StoreError
from awaken_trio.store import Accepted, Commit, Expect, open_store
from awaken_trio.store.sqlite import _schema as schema
from awaken_trio.store.sqlite._store import SQLiteStore
from tests.store.sqlite_helpers import (
    ROOT,
    any_store_threads,
    digest,
    execute,
    pragma,
    run_python,
    start,
    tables,
)

RELEASED = schema.MIGRATIONS
LATEST = len(RELEASED)
STORE_TABLES = {"awaken_meta", "runs", "events", "tickets", "inbox", "claims"}


async def _open_and_close(path: Path) -> None:
    store = SQLiteStore(path, synchronous="normal")
    try:
        await store.open()
    finally:
        await store.aclose()


async def _write_a_run(path: Path, run_id: str = "r1") -> None:
    async with SQLiteStore(path, synchronous="normal") as store:
        (result,) = await store.apply([start(run_id)])
        assert isinstance(result, Accepted)


def _on_disk(path: Path) -> tuple[str | None, list[str] | None]:
    """The file's bytes (a digest) and what is next to it."""
    before = digest(path) if path.is_file() else None
    siblings = sorted(os.listdir(path.parent)) if path.parent.is_dir() else None
    return before, siblings


async def _refused(path: Path) -> StoreError:
    """Open ``path``, expecting a refusal that writes nothing and leaves no thread."""
    before = _on_disk(path)
    store = SQLiteStore(path)
    with pytest.raises(StoreError) as caught:
        await store.open()
    assert caught.value.outcome_unknown is False
    assert _on_disk(path) == before, "a refusal changed the file or left files behind"
    assert any_store_threads() == []
    await store.aclose()
    return caught.value


# ---------------------------------------------------------------------------- created


async def test_a_new_file_is_created_with_the_latest_schema(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    await _write_a_run(path)
    assert pragma(path, "user_version") == LATEST
    assert pragma(path, "application_id") == schema.APPLICATION_ID
    assert pragma(path, "journal_mode") == "wal"
    assert tables(path) >= STORE_TABLES
    conn = sqlite3.connect(path)
    try:
        meta = conn.execute("SELECT key, value FROM awaken_meta").fetchall()
        indexes = {
            name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
        }
    finally:
        conn.close()
    assert meta == [("application", "awaken_trio")]
    assert {
        "runs_queue_by_age",
        "runs_children",
        "runs_live_on_thread",
        "events_by_run",
        "tickets_due",
        "inbox_by_run",
        "claims_by_expiry",
    } <= indexes


async def test_the_parent_directories_are_created(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "c" / "runs.db"
    await _write_a_run(path)
    assert path.is_file()
    assert pragma(path, "user_version") == LATEST


async def test_an_empty_file_becomes_a_store(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    path.touch()
    await _write_a_run(path)
    assert pragma(path, "user_version") == LATEST


async def test_an_empty_sqlite_database_becomes_a_store(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    execute(path, "CREATE TABLE scratch (x)", "DROP TABLE scratch")  # a header, no tables
    assert path.stat().st_size > 0
    await _write_a_run(path)
    assert tables(path) >= STORE_TABLES


async def test_a_store_keeps_its_runs_and_events_across_reopening(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    await _write_a_run(path, "r1")
    await _write_a_run(path, "r2")  # reopening an existing store migrates nothing
    async with SQLiteStore(path) as store:
        first, second = await store.load("r1"), await store.load("r2")
        assert first is not None
        assert second is not None
        assert first.input == {"run": "r1"}
        assert [e.seq for e in await store.events_after(0)] == [1, 2]
    assert pragma(path, "user_version") == LATEST


# ---------------------------------------------------------------------------- migrated


def _hand_made_version_1(path: Path) -> None:
    """A version-1 file made by hand (the statements of the first migration, run outside
    the store), holding one run."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        RELEASED[0](conn)
        conn.execute("PRAGMA user_version = 1")
        conn.execute(
            "INSERT INTO runs (run_id, thread_id, root_run_id, name, input, kind, state,"
            " generation) VALUES ('old', 't-old', 'old', 'job', '{\"q\":1}', 'queued',"
            ' \'{"kind":"queued"}\', 0)'
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


def execute_fetch(path: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _add_notes(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE notes (n INTEGER PRIMARY KEY, text TEXT NOT NULL)")


def _note_runs(conn: sqlite3.Connection) -> None:
    # Needs the table the migration before it made: the order matters.
    conn.execute("INSERT INTO notes (text) SELECT run_id FROM runs")
    conn.execute("ALTER TABLE runs ADD COLUMN note TEXT")


def _fails(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE half_done (x)")
    raise RuntimeError("this migration fails half way")


def _migrations(*more: schema.Migration) -> Sequence[schema.Migration]:
    return (*RELEASED, *more)


async def test_an_older_schema_is_migrated_forward_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "runs.db"
    _hand_made_version_1(path)
    monkeypatch.setattr(schema, "MIGRATIONS", _migrations(_add_notes, _note_runs))
    async with SQLiteStore(path) as store:
        old = await store.load("old")
        assert old is not None
        assert (old.state, old.input, old.name) == (RunState.Queued(), {"q": 1}, "job")
        (result,) = await store.apply([start("new")])
        assert isinstance(result, Accepted)
    assert pragma(path, "user_version") == LATEST + 2
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT text FROM notes").fetchall() == [("old",)]
        columns = [row[1] for row in conn.execute("PRAGMA table_info(runs)")]
    finally:
        conn.close()
    assert "note" in columns


async def test_a_version_1_file_with_stored_messages_migrates_to_the_delivered_mark(
    tmp_path: Path,
) -> None:
    """Version 2 marks the stored messages an attempt received. A message stored by a
    version-1 release was received by no attempt: after the migration it is unmarked, is
    still handed out, and an end of its run lists it as discarded."""
    path = tmp_path / "runs.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        RELEASED[0](conn)
        conn.execute("PRAGMA user_version = 1")
        conn.execute(
            "INSERT INTO runs (run_id, thread_id, root_run_id, name, input, kind, state,"
            " generation) VALUES ('old', 'old', 'old', 'job', 'null', 'queued',"
            ' \'{"kind":"queued"}\', 0)'
        )
        conn.execute(
            "INSERT INTO inbox (run_id, kind, payload, reason, at)"
            " VALUES ('old', 'message', '\"hello\"', 'null', 1.0)"
        )
        conn.execute("COMMIT")
    finally:
        conn.close()
    async with SQLiteStore(path) as store:
        (command,) = await store.commands(["old"])
        assert (command.kind, command.payload) == ("message", "hello")
        ended = Commit(
            run_id="old",
            state=RunState.Ended(EndCause.Cancelled()),
            generation=0,
            expect=Expect(generation=0, state=RunState.Queued),
            at=2.0,
        )
        (result,) = await store.apply([ended])
        assert isinstance(result, Accepted)
        kinds = [(e.kind, dict(e.detail)) for e in await store.events_after(0, "old")]
    assert ("messages_discarded", {"messages": ["hello"]}) in kinds
    assert pragma(path, "user_version") == LATEST
    assert execute_fetch(path, "SELECT COUNT(*) FROM inbox") == [(0,)]


async def test_a_file_between_versions_runs_only_the_migrations_it_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "runs.db"
    _hand_made_version_1(path)
    monkeypatch.setattr(schema, "MIGRATIONS", _migrations(_add_notes))
    await _open_and_close(path)
    execute(path, "INSERT INTO notes (text) VALUES ('kept')")
    monkeypatch.setattr(schema, "MIGRATIONS", _migrations(_add_notes, _note_runs))
    await _open_and_close(path)  # _add_notes again would fail: the table exists
    conn = sqlite3.connect(path)
    try:
        notes = conn.execute("SELECT text FROM notes ORDER BY n").fetchall()
    finally:
        conn.close()
    assert notes == [("kept",), ("old",)]
    assert pragma(path, "user_version") == LATEST + 2


async def test_a_failing_migration_is_rolled_back_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "runs.db"
    _hand_made_version_1(path)
    monkeypatch.setattr(schema, "MIGRATIONS", _migrations(_add_notes, _fails))
    store = SQLiteStore(path)
    failing = f"from schema version {LATEST + 1} to {LATEST + 2} failed"
    with pytest.raises(StoreError, match=failing) as caught:
        await store.open()
    assert caught.value.outcome_unknown is False
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert pragma(path, "user_version") == 1
    assert "notes" not in tables(path)
    assert "half_done" not in tables(path)
    assert any_store_threads() == []
    await store.aclose()


# ---------------------------------------------------------------------------- refused


async def test_a_file_of_a_newer_version_is_refused_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    await _write_a_run(path)
    execute(path, f"PRAGMA user_version = {LATEST + 1}")
    assert sorted(os.listdir(tmp_path)) == ["runs.db"]
    error = await _refused(path)
    assert "newer version of awaken_trio" in str(error)
    assert f"schema version {LATEST + 1}" in str(error)


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(os.urandom(8192), id="random-bytes"),
        pytest.param(b"SQLite format 3\x00" + os.urandom(8192), id="sqlite-header-then-noise"),
        pytest.param(b"not a database\n", id="short-text"),
    ],
)
async def test_a_file_that_is_not_sqlite_is_refused_unchanged(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "runs.db"
    path.write_bytes(content)
    error = await _refused(path)
    assert "not an awaken_trio store" in str(error)
    assert "left unchanged" in str(error)


async def test_another_applications_database_is_refused_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    execute(
        path,
        "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)",
        "INSERT INTO users (name) VALUES ('ada')",
    )
    error = await _refused(path)
    assert "another application" in str(error)
    assert "users" in str(error)


async def test_another_applications_marked_database_is_refused_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    execute(path, "PRAGMA application_id = 1234", "CREATE TABLE scratch (x)", "DROP TABLE scratch")
    error = await _refused(path)
    assert "another application" in str(error)
    assert "0x000004d2" in str(error)


async def test_another_applications_database_in_wal_mode_is_refused_unchanged(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    execute(path, "PRAGMA journal_mode = WAL", "CREATE TABLE users (id INTEGER PRIMARY KEY)")
    assert sorted(os.listdir(tmp_path)) == ["runs.db"]  # its log was checkpointed on close
    await _refused(path)


async def test_a_store_marked_as_ours_without_its_meta_record_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    await _write_a_run(path)
    execute(path, "DELETE FROM awaken_meta")
    error = await _refused(path)
    assert "damaged" in str(error)


async def test_a_directory_is_refused(tmp_path: Path) -> None:
    error = await _refused(tmp_path)
    assert "is a directory" in str(error)


async def test_a_path_under_a_regular_file_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("in the way")
    error = await _refused(blocker / "runs.db")
    assert "cannot" in str(error)
    assert blocker.read_text() == "in the way"


# Runs in a process of its own that has no power to override file permissions (root gives
# them up: it drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH and starts again), opens the
# store and prints how that went.
_RESTRICTED = r"""
import ctypes, json, os, sys

if sys.argv[1] == "drop":
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
            if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
    again = [sys.executable, "-W", "error", "-c", sys.argv[0], "open", *sys.argv[2:]]
    os.execv(sys.executable, again)

import trio
from awaken_trio import StoreError
from awaken_trio.store.sqlite._store import SQLiteStore

async def main():
    store = SQLiteStore(sys.argv[2])
    try:
        await store.open()
    except StoreError as exc:
        return {"error": str(exc), "outcome_unknown": exc.outcome_unknown}
    finally:
        await store.aclose()
    return {"error": None}

print(json.dumps(trio.run(main)))
"""


async def _open_restricted(path: Path) -> dict[str, object]:
    out = await run_python(_RESTRICTED.replace("sys.argv[0]", repr(_RESTRICTED)), "drop", str(path))
    result = json.loads(out)
    assert isinstance(result, dict)
    return result


async def test_a_read_only_directory_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        result = await _open_restricted(locked / "runs.db")
        assert result["outcome_unknown"] is False
        assert "not writable" in str(result["error"])
        assert os.listdir(locked) == []
        # A store already in a directory that became read-only is refused too (SQLite
        # must write its log next to the file), and left as it was.
        locked.chmod(0o755)
        await _write_a_run(locked / "existing.db")
        before = digest(locked / "existing.db")
        locked.chmod(0o555)
        result = await _open_restricted(locked / "existing.db")
        assert "not writable" in str(result["error"])
        assert digest(locked / "existing.db") == before
        assert os.listdir(locked) == ["existing.db"]
    finally:
        locked.chmod(0o755)


async def test_an_unreadable_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    await _write_a_run(path)
    path.chmod(0o000)
    try:
        result = await _open_restricted(path)
        assert result["outcome_unknown"] is False
        assert "cannot read the store" in str(result["error"])
    finally:
        path.chmod(0o644)
    async with SQLiteStore(path) as store:  # untouched
        assert await store.load("r1") is not None


async def test_the_restricted_process_can_open_a_store_it_may_write(tmp_path: Path) -> None:
    # The check above is not refusing everything: with permissions, the same process opens.
    assert await _open_restricted(tmp_path / "fine.db") == {"error": None}


# ---------------------------------------------------------------------------- URLs


async def test_a_relative_sqlite_url_is_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store("sqlite:///data/runs.db")
    assert isinstance(store, SQLiteStore)
    monkeypatch.chdir(ROOT)  # the path was resolved when the URL was
    assert store.path == tmp_path / "data" / "runs.db"
    assert store.synchronous == "full"
    assert not store.path.exists()  # nothing happens before it opens
    try:
        await store.open()
        assert store.path.is_file()
    finally:
        await store.aclose()


async def test_an_absolute_sqlite_url_names_its_file(tmp_path: Path) -> None:
    path = tmp_path / "a b" / "runs.db"
    store = open_store(f"sqlite:///{path}".replace(" ", "%20") + "?synchronous=normal")
    assert isinstance(store, SQLiteStore)
    assert store.path == path
    assert store.synchronous == "normal"
    await _write_a_run(store.path)
    assert path.is_file()


@pytest.mark.parametrize(
    ("query", "expected"),
    [("", "full"), ("?synchronous=full", "full"), ("?synchronous=NORMAL", "normal")],
)
def test_the_synchronous_option_of_a_sqlite_url(query: str, expected: str) -> None:
    store = open_store(f"sqlite:////tmp/never-opened.db{query}")
    assert isinstance(store, SQLiteStore)
    assert store.synchronous == expected


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite://host/runs.db", "no host"),
        ("sqlite:/runs.db", "no host"),
        ("sqlite:runs.db", "no host"),
        ("sqlite:///", "names no file"),
        ("sqlite:////", "names no file"),
        ("sqlite:///dir/", "names no file"),
        ("sqlite:///runs.db?synchronous=off", "'full' or 'normal'"),
        ("sqlite:///runs.db?synchronous=", "'full' or 'normal'"),
        ("sqlite:///runs.db?mode=ro", "unknown option 'mode'"),
        ("sqlite:///runs.db?synchronous", "not 'name=value'"),
        ("sqlite:///runs.db?synchronous=full&synchronous=normal", "more than once"),
        ("sqlite:///runs.db#x", "fragment"),
        ("sqlite:///%ff.db", "percent-encoded UTF-8"),
        ("sqlite:///a%00b.db", "path of a file"),
        ("sqlite:///:memory:", "memory://"),
        ("sqlitex:///runs.db", "unsupported store URL"),
    ],
)
def test_a_malformed_sqlite_url_is_an_invalid_argument(url: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message.replace("?", r"\?").replace("(", r"\(")):
        open_store(url)


@pytest.mark.parametrize(
    ("path", "synchronous", "message"),
    [
        ("", "full", "path of a file"),
        (":memory:", "full", "memory://"),
        ("a\x00b", "full", "path of a file"),
        (3, "full", "a str or a path"),
        ("runs.db", "off", "'full' or 'normal'"),
        ("runs.db", "FULL", "'full' or 'normal'"),
    ],
)
def test_a_store_needs_a_file_path_and_a_known_synchronous_setting(
    path: object, synchronous: object, message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        SQLiteStore(path, synchronous=synchronous)  # type: ignore[arg-type]


async def test_the_sqlite_backend_is_imported_on_first_use_of_its_scheme() -> None:
    out = await run_python(
        "import sys\n"
        "import awaken_trio, awaken_trio.store\n"
        "from awaken_trio.store import open_store\n"
        "open_store('memory://')\n"
        "print('awaken_trio.store.sqlite._store' in sys.modules, 'sqlite3' in sys.modules)\n"
        "store = open_store('sqlite:///never-opened.db')\n"
        "print('awaken_trio.store.sqlite._store' in sys.modules, type(store).__name__)\n"
    )
    assert out.split("\n")[:2] == ["False False", "True SQLiteStore"]
    assert not (ROOT / "never-opened.db").exists()


_KILLED_MID_LIFE = """
import os, sys
import trio
from awaken_trio import RunState
from awaken_trio.store import Commit, Expect, NewRun
from awaken_trio.store.sqlite._store import SQLiteStore

async def main():
    store = SQLiteStore(sys.argv[1])
    await store.apply([Commit(
        run_id="survivor", state=RunState.Running(1), generation=1,
        expect=Expect(new=True), at=1.0, new_run=NewRun("t", None, "job", None),
    )])
    os._exit(0)  # as kill -9 would: no close, the log left as it is

trio.run(main)
"""


async def test_a_store_whose_process_died_mid_life_opens_with_its_commits(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    await run_python(_KILLED_MID_LIFE, str(path))
    assert sorted(os.listdir(tmp_path)) == ["runs.db", "runs.db-shm", "runs.db-wal"]
    async with SQLiteStore(path) as store:
        record = await store.load("survivor")
        assert record is not None
        assert record.state == RunState.Running(1)


async def test_a_newer_version_still_in_the_write_ahead_log_is_refused(tmp_path: Path) -> None:
    # Another process migrated the file and still has it open: the new version is in the
    # log, not yet in the file itself.
    path = tmp_path / "runs.db"
    await _write_a_run(path)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("PRAGMA wal_autocheckpoint = 0")
        other.execute(f"PRAGMA user_version = {LATEST + 1}")
        wal = tmp_path / "runs.db-wal"
        before = (digest(path), digest(wal))
        store = SQLiteStore(path)
        with pytest.raises(StoreError, match="newer version"):
            await store.open()
        await store.aclose()
        assert (digest(path), digest(wal)) == before
    finally:
        other.close()


async def test_a_version_2_file_migrates_to_forking_with_each_runs_checkpoint_kept(
    tmp_path: Path,
) -> None:
    """Version 3 keeps the checkpoint as of each event and where a run was forked from. A
    run of a version-2 file keeps its checkpoint as of its last event, and was not forked."""
    path = tmp_path / "runs.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        RELEASED[0](conn)
        RELEASED[1](conn)
        conn.execute("PRAGMA user_version = 2")
        conn.execute(
            "INSERT INTO runs (run_id, thread_id, root_run_id, name, input, kind, state,"
            " generation, checkpoint) VALUES ('old', 'old', 'old', 'job', 'null', 'ended',"
            ' \'{"kind":"ended","cause":{"kind":"natural_end"}}\', 1, \'{"n":5}\')'
        )
        for seq in (1, 2):
            conn.execute(
                "INSERT INTO events (seq, run_id, thread_id, generation, kind, state, detail,"
                " at) VALUES (?, 'old', 'old', 1, 'committed', '{\"kind\":\"queued\"}',"
                " '{}', 1.0)",
                (seq,),
            )
        conn.execute("COMMIT")
    finally:
        conn.close()
    async with SQLiteStore(path) as store:
        record = await store.load("old")
        assert record is not None
        assert (record.checkpoint, record.forked_from) == ({"n": 5}, None)
        last = await store.checkpoint_at("old", None)
        assert last is not None
        assert (last.seq, last.checkpoint) == (2, {"n": 5})
        assert await store.checkpoint_at("old", 3) is None
        assert await store.checkpoint_at("nobody", None) is None
        # What it had as of event 1 was never kept: refused, not started from nothing.
        with pytest.raises(InvalidArgument, match="forked as of event 2 or later, not 1"):
            await store.checkpoint_at("old", 1)
    assert pragma(path, "user_version") == LATEST
    assert "checkpoints" in tables(path)


async def test_a_version_3_file_gets_the_queue_index_and_hands_its_queue_out_in_order(
    tmp_path: Path,
) -> None:
    """Version 4 indexes the queue in the order `runnable` hands it out. A version-3
    file's queued runs are handed out oldest first, from the index, once migrated."""
    path = tmp_path / "runs.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        for migration in RELEASED[:3]:
            migration(conn)
        conn.execute("PRAGMA user_version = 3")
        # Queue places out of creation order, as a run released back to the queue has.
        for run_id, place in (("first", 3), ("ended", None), ("second", 1), ("third", 2)):
            kind = "ended" if place is None else "queued"
            conn.execute(
                "INSERT INTO runs (run_id, thread_id, root_run_id, name, input, kind, state,"
                " generation, queued_order) VALUES (?, ?, ?, 'job', 'null', ?, ?, 1, ?)",
                (run_id, run_id, run_id, kind, f'{{"kind":"{kind}"}}', place),
            )
        conn.execute("COMMIT")
    finally:
        conn.close()
    async with SQLiteStore(path) as store:
        handed = await store.runnable({"job"}, 0.0, 10)
    assert [record.run_id for record in handed] == ["first", "second", "third"]
    assert pragma(path, "user_version") == LATEST
    with contextlib.closing(sqlite3.connect(path)) as check:
        indexes = {
            name for (name,) in check.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
        }
    assert "runs_queue_by_age" in indexes
    assert "runs_queued" not in indexes


async def test_a_version_4_file_gets_the_index_its_journaled_steps_are_read_through(
    tmp_path: Path,
) -> None:
    """Version 5 indexes the ``step`` events alone. A version-4 file's events are kept,
    and the journal read walks the new index, not the run's whole history."""
    path = tmp_path / "runs.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        for migration in RELEASED[:4]:
            migration(conn)
        conn.execute("PRAGMA user_version = 4")
        conn.execute(
            "INSERT INTO runs (run_id, thread_id, root_run_id, name, input, kind, state,"
            " generation) VALUES ('r', 'r', 'r', 'job', 'null', 'running',"
            ' \'{"kind":"running","generation":1}\', 1)'
        )
        for kind, detail in (
            ("committed", '{"source":"start"}'),
            ("step", '{"name":"s","index":0,"result":[1]}'),
            ("committed", "{}"),
            ("step", '{"name":"s","index":1,"result":null}'),
        ):
            conn.execute(
                "INSERT INTO events (run_id, thread_id, generation, kind, state, detail, at)"
                " VALUES ('r', 'r', 1, ?, '{\"kind\":\"running\",\"generation\":1}', ?, 1.0)",
                (kind, detail),
            )
        conn.execute("COMMIT")
    finally:
        conn.close()
    async with SQLiteStore(path) as store:
        steps = await store.step_events("r")
    assert [(e.seq, e.detail["index"], e.detail["result"]) for e in steps] == [
        (2, 0, [1]),
        (4, 1, None),
    ]
    assert pragma(path, "user_version") == LATEST
    with contextlib.closing(sqlite3.connect(path)) as check:
        plan = " ".join(
            str(row[-1])
            for row in check.execute(
                "EXPLAIN QUERY PLAN SELECT seq FROM events"
                " WHERE run_id = 'r' AND kind = 'step' ORDER BY seq"
            )
        )
    assert "events_steps" in plan, plan
