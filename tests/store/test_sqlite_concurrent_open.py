"""Processes opening the same fresh SQLite file at once: every one of them opens the store
(whichever creates the schema, the others find it), none is refused or finds the file
locked."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import trio

from awaken_trio.store.sqlite import _schema as schema
from tests.store.sqlite_helpers import run_python

PROCESSES = 4
FILES = 25
SLOT = 0.02
"""Seconds between the files: every process opens file ``i`` at the same instant."""

_OPENER = """
import os, sys, time
from pathlib import Path
import trio
from awaken_trio.store.sqlite._store import SQLiteStore

directory, me, processes, files, slot = (
    Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
)

async def main():
    # Meet the others: each says it is ready, then all start from the last one's word, so
    # the openings of one file fall within a millisecond or two of each other.
    (directory / f"ready-{me}").touch()
    with trio.fail_after(30):
        while len(list(directory.glob("ready-*"))) < processes:
            await trio.sleep(0.001)
    t0 = max(p.stat().st_mtime for p in directory.glob("ready-*")) + 0.1
    failures = []
    for i in range(files):
        # Some files get the processes a few milliseconds apart, so an opening also meets
        # a creation half done, not only another opening.
        at = t0 + i * slot + (me * i % 3) * 0.002
        await trio.sleep(max(0.0, at - time.time()))
        store = SQLiteStore(directory / f"{i}.db", synchronous="normal")
        try:
            await store.open()
        except Exception as exc:
            failures.append(f"file {i}: {exc}")
        finally:
            await store.aclose()
    print("\\n".join(failures))

trio.run(main)
"""


async def test_processes_opening_fresh_files_at_once_all_open(tmp_path: Path) -> None:
    outputs: list[str] = []

    async def opener(me: int) -> None:
        outputs.append(
            await run_python(_OPENER, str(tmp_path), str(me), str(PROCESSES), str(FILES), str(SLOT))
        )

    async with trio.open_nursery() as nursery:
        for me in range(PROCESSES):
            nursery.start_soon(opener, me)
    failures = [line for output in outputs for line in output.splitlines() if line]
    assert failures == []
    for i in range(FILES):
        conn = sqlite3.connect(tmp_path / f"{i}.db")
        try:
            found = schema.read_found(conn)
        finally:
            conn.close()
        assert (found.application_id, found.version, found.application) == (
            schema.APPLICATION_ID,
            len(schema.MIGRATIONS),
            schema.APPLICATION,
        )
