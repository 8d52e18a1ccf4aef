"""``awaken-trio worker`` freezes its startup heap out of garbage collection once it has
started (`freeze_startup_heap`): what was alive then is frozen, garbage is collected first,
and what is made afterwards is collected as before."""

from __future__ import annotations

import gc
import re
import signal
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from awaken_trio._heap import freeze_startup_heap
from tests.cli.cli_helpers import HERE, background, read_until, wait_exit


class Node:
    """A cycle's member: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # this test process's heap goes back to the collector


def test_it_collects_garbage_first_then_freezes_what_is_alive(unfrozen: None) -> None:
    garbage = cycle()
    kept = Node()
    kept.other = kept
    frozen = freeze_startup_heap()
    assert garbage() is None, "a cycle that was garbage was frozen instead of freed"
    assert frozen == gc.get_freeze_count() > 0
    assert gc.is_tracked(kept)
    assert not any(o is kept for o in gc.get_objects()), "what was alive was not frozen"


def test_what_is_made_afterwards_is_collected_as_before(unfrozen: None) -> None:
    freeze_startup_heap()
    later = cycle()
    assert later() is not None
    gc.collect()
    assert later() is None


@pytest.mark.slow
async def test_the_worker_says_at_debug_how_many_objects_it_froze(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/runs.db"
    args = ["worker", "cli_bodies", "--store", store, "--poll", "0.02", "--log-level", "DEBUG"]
    async with background(*args, cwd=HERE) as worker:
        seen = bytearray()
        log = await read_until(worker.stderr, "Ctrl-C or SIGTERM to stop", seen)
        found = re.search(r"awaken-trio worker: (\d+) objects alive at start frozen", log)
        assert found is not None, log
        assert int(found.group(1)) > 1000  # the modules and runtime of a process
        worker.send_signal(signal.SIGTERM)
        assert await wait_exit(worker) == 0
