"""When the SQLite store asks SQLite whether another connection committed: only when a look
at the file and its log from outside has moved, while the file has not been still for long
(timestamps have a coarse tick), or once a full interval has passed; and a commit from
another connection is seen at the very next poll."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import trio

from awaken_trio.store.sqlite._store import SQLiteStore
from awaken_trio.store.sqlite._watch import (
    FULL_POLL_EVERY,
    SETTLE,
    ChangeWatch,
    FileNotices,
    Looks,
    Stat,
)
from tests.store.sqlite_helpers import start

SECOND = 1_000_000_000


class Fake:
    """The files and clocks a `ChangeWatch` sees, moved by hand."""

    def __init__(self) -> None:
        self.wall_ns = 100 * SECOND
        self.mono = 0.0
        self.log_mtime_ns = 50 * SECOND
        self.log_size = 4096

    def look(self) -> Looks:
        return Looks(Stat(1, 2, 8192, 10 * SECOND), Stat(1, 3, self.log_size, self.log_mtime_ns))

    def watch(self) -> ChangeWatch:
        return ChangeWatch(self.look, wall_ns=lambda: self.wall_ns, monotonic=lambda: self.mono)

    def later(self, seconds: float) -> None:
        self.wall_ns += int(seconds * SECOND)
        self.mono += seconds

    def commit(self) -> None:
        """Another connection commits: its log is written now."""
        self.log_mtime_ns = self.wall_ns
        self.log_size += 4096


def test_a_still_file_is_not_asked_about_until_the_full_interval() -> None:
    fake = Fake()
    watch = fake.watch()
    assert watch.due()  # the first look always asks
    asked = []
    for _ in range(10):
        fake.later(FULL_POLL_EVERY / 20)
        asked.append(watch.due())
    assert asked == [False] * 10
    fake.later(FULL_POLL_EVERY / 2)
    assert watch.due()  # whatever the files show, once a full interval has passed


def test_a_commit_is_asked_about_at_the_next_look() -> None:
    fake = Fake()
    watch = fake.watch()
    watch.due()
    fake.later(0.05)
    fake.commit()
    fake.later(0.001)
    assert watch.due()


def test_a_file_written_within_the_settling_time_is_asked_about_at_every_look() -> None:
    # A second commit in the same timestamp tick as the look before it leaves size and
    # time unchanged only if nothing else moved: the watch keeps asking until the file has
    # been still for SETTLE.
    fake = Fake()
    watch = fake.watch()
    watch.due()
    fake.commit()
    assert watch.due()
    fake.later(SETTLE / 5)
    assert watch.due()  # nothing moved, but the last write is too recent to trust that
    fake.later(SETTLE)
    assert watch.due()  # the look that finds it settled
    fake.later(SETTLE / 5)
    assert not watch.due()


def test_a_forgotten_look_is_asked_about_again() -> None:
    fake = Fake()
    watch = fake.watch()
    watch.due()
    fake.later(0.01)
    assert not watch.due()
    watch.forget()
    assert watch.due()


async def test_a_commit_from_another_store_moves_the_version_at_the_next_poll(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    async with SQLiteStore(path, synchronous="normal") as store, SQLiteStore(path) as other:
        for i in range(50):
            before = await store.version()
            await other.apply([start(f"r{i}")])
            assert await store.version() != before


async def test_a_direct_write_moves_the_version_at_the_next_poll(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SQLiteStore(path, synchronous="normal") as store:
        await store.apply([start("r1")])
        for i in range(20):
            before = await store.version()
            conn = sqlite3.connect(path, isolation_level=None)
            try:
                conn.execute("UPDATE runs SET steps = ? WHERE run_id = 'r1'", (i + 1,))
            finally:
                conn.close()
            assert await store.version() != before


async def test_a_write_in_the_directory_wakes_a_waiter_for_notices(tmp_path: Path) -> None:
    notices = FileNotices.open(str(tmp_path))
    assert notices is not None  # (Linux: the kernel gives notices)
    try:
        (tmp_path / "other-wal").write_bytes(b"x")
        with trio.fail_after(10):  # a failure bound, not a timing: it returns at once
            assert await notices.wait(at_most=math.inf)

        async def write_soon() -> None:
            await trio.sleep(0.01)
            (tmp_path / "other-wal").write_bytes(b"y")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(write_soon)
            with trio.fail_after(10):
                assert await notices.wait(at_most=math.inf)  # returns when the write comes
        assert not await notices.wait(at_most=0)  # nothing since: no notice
    finally:
        notices.close()
    with trio.fail_after(10):
        assert not await notices.wait(at_most=0)  # closed: it only sleeps


async def test_a_sqlite_store_notices_another_stores_commit(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SQLiteStore(path, synchronous="normal") as store, SQLiteStore(path) as other:
        assert store.notices_changes()
        before = await store.version()
        await other.apply([start("r1")])
        with trio.fail_after(10):
            assert await store.wait_for_change(at_most=math.inf)
            while await store.version() == before:  # noqa: ASYNC110 (the commit shows shortly)
                await trio.sleep(0.001)
    assert not store.notices_changes()  # closed
