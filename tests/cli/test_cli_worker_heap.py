"""``awaken-trio worker`` settles its heap once it has started (`settle_heap`): garbage is
collected first, what was alive then is frozen out of garbage collection, what is made
afterwards is collected as before, and the young generation is collected less often: the
more runs the process serves at once, the less often (`young_threshold`)."""

from __future__ import annotations

import functools
import gc
import re
import signal
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from awaken_trio import RunContext, open_runtime
from awaken_trio._heap import (
    YOUNG_PER_RUN,
    YOUNG_THRESHOLD,
    SettledHeap,
    settle_heap,
    young_threshold,
)
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
    thresholds = gc.get_threshold()
    gc.set_threshold(700, *thresholds[1:])
    yield
    gc.unfreeze()  # this test process's heap goes back to the collector
    gc.set_threshold(*thresholds)


def test_it_collects_garbage_first_then_freezes_what_is_alive(unfrozen: None) -> None:
    garbage = cycle()
    kept = Node()
    kept.other = kept
    settled = settle_heap(8)
    assert garbage() is None, "a cycle that was garbage was frozen instead of freed"
    assert settled.frozen == gc.get_freeze_count() > 0
    assert gc.is_tracked(kept)
    assert not any(o is kept for o in gc.get_objects()), "what was alive was not frozen"


def test_what_is_made_afterwards_is_collected_as_before(unfrozen: None) -> None:
    settle_heap(8)
    later = cycle()
    assert later() is not None
    gc.collect()
    assert later() is None


@pytest.mark.parametrize(
    ("concurrency", "young"),
    [(1, YOUNG_THRESHOLD), (8, YOUNG_THRESHOLD), (78, YOUNG_THRESHOLD), (1024, 131_072)],
)
def test_the_young_generation_is_collected_less_often(
    unfrozen: None, concurrency: int, young: int
) -> None:
    middle, old = gc.get_threshold()[1:]
    settled = settle_heap(concurrency)
    assert settled == SettledHeap(frozen=gc.get_freeze_count(), young_threshold=young)
    assert gc.get_threshold() == (young, middle, old)


def test_the_threshold_grows_with_the_runs_held_at_once_past_its_least() -> None:
    least_runs = YOUNG_THRESHOLD // YOUNG_PER_RUN
    assert young_threshold(least_runs) == YOUNG_THRESHOLD
    assert young_threshold(least_runs + 1) == YOUNG_PER_RUN * (least_runs + 1) > YOUNG_THRESHOLD
    assert young_threshold(1024) == 1024 * YOUNG_PER_RUN


@pytest.mark.parametrize("concurrency", [0, -1])
def test_a_concurrency_below_one_is_refused(unfrozen: None, concurrency: int) -> None:
    thresholds = gc.get_threshold()
    with pytest.raises(ValueError, match=f"concurrency must be at least 1, got {concurrency}"):
        settle_heap(concurrency)
    assert gc.get_threshold() == thresholds
    assert gc.get_freeze_count() == 0, "refused, yet the heap was frozen"


def test_garbage_is_still_collected_by_allocation_alone(unfrozen: None) -> None:
    settle_heap(8)
    garbage = cycle()
    # No explicit collection: the young generation's own threshold frees the cycle.
    kept: list[list[object]] = [[] for _ in range(2 * YOUNG_THRESHOLD)]
    assert garbage() is None, "the young generation was never collected"
    assert len(kept) == 2 * YOUNG_THRESHOLD


def test_a_threshold_set_lower_than_the_runs_need_is_raised(unfrozen: None) -> None:
    rest = gc.get_threshold()[1:]
    gc.set_threshold(50_000, *rest)
    assert settle_heap(1024).young_threshold == 131_072
    assert gc.get_threshold() == (131_072, *rest)


@pytest.mark.parametrize("young", [0, 200_000])
def test_a_threshold_the_process_chose_is_left_as_it_is(unfrozen: None, young: int) -> None:
    rest = gc.get_threshold()[1:]
    gc.set_threshold(young, *rest)
    assert settle_heap(1024).young_threshold == young
    assert gc.get_threshold() == (young, *rest)


async def _noop(ctx: RunContext) -> None:
    return None


async def test_a_drain_its_runs_at_once_makes_no_young_collection(
    unfrozen: None, durable_at: Path | str
) -> None:
    """What the threshold is for: a worker settled for ``concurrency`` runs at once drains
    no-op runs that many at a time with no collection at all, on each store real workers
    share. (Fails if a run in flight comes to keep alive more than the threshold allows
    it: `YOUNG_PER_RUN` must then grow.)"""
    concurrency, batches = 256, 3
    store = f"sqlite:///{durable_at}" if isinstance(durable_at, Path) else durable_at
    async with open_runtime(store, bodies={"noop": _noop}, poll=0.05, lease=30) as runtime:
        handles = [await runtime.submit("noop") for _ in range(concurrency * batches)]
        settle_heap(concurrency)
        before = [generation["collections"] for generation in gc.get_stats()]
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(runtime.serve, concurrency=concurrency))
            with trio.fail_after(60):
                for handle in handles:
                    await handle.wait()
            nursery.cancel_scope.cancel()
        after = [generation["collections"] for generation in gc.get_stats()]
    assert after == before, f"collections by generation {before} -> {after}"


@pytest.mark.slow
async def test_the_worker_says_at_debug_how_it_settled_its_heap(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/runs.db"
    args = ["worker", "cli_bodies", "--store", store, "--poll", "0.02", "--log-level", "DEBUG"]
    args += ["--concurrency", "200"]
    async with background(*args, cwd=HERE) as worker:
        seen = bytearray()
        log = await read_until(worker.stderr, "Ctrl-C or SIGTERM to stop", seen)
        found = re.search(
            r"awaken-trio worker: (\d+) objects alive at start frozen out of garbage"
            r" collection; the young generation is collected every (\d+) allocations",
            log,
        )
        assert found is not None, log
        assert int(found.group(1)) > 1000  # the modules and runtime of a process
        assert int(found.group(2)) == 200 * YOUNG_PER_RUN == young_threshold(200)
        worker.send_signal(signal.SIGTERM)
        assert await wait_exit(worker) == 0
