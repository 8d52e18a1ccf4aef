"""A serving process's heap, settled once it has started (``awaken-trio worker``)."""

from __future__ import annotations

import gc
from typing import Final, final

import attrs

YOUNG_THRESHOLD: Final = 10_000
"""The young generation's least threshold in a settled process: tracked objects allocated
(less those freed) between two collections of it. CPython's default is 700."""

YOUNG_PER_RUN: Final = 128
"""The young generation's threshold for each run the process may hold at once, where that
is more than `YOUNG_THRESHOLD`: about twice the tracked objects a run in flight keeps
alive (69, measured: a young count of 70,332 at most while a worker drained no-op runs
1,024 at a time), since the next runs' objects are made while the last ones' are still
alive."""


@final
@attrs.frozen
class SettledHeap:
    """What `settle_heap` did."""

    frozen: int  # objects left out of garbage collection (`gc.get_freeze_count`)
    young_threshold: int  # the young generation's threshold now (0: collection is off)


def young_threshold(concurrency: int) -> int:
    """The young generation's threshold for a process serving ``concurrency`` runs at once:
    `YOUNG_PER_RUN` a run, and at least `YOUNG_THRESHOLD`."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    return max(YOUNG_THRESHOLD, YOUNG_PER_RUN * concurrency)


def settle_heap(concurrency: int) -> SettledHeap:
    """Settle the heap of a process serving ``concurrency`` runs at once, once, when it has
    started: collect garbage, move every object alive into the permanent generation
    (`gc.freeze`), and collect the young generation every `young_threshold` allocations
    instead of CPython's 700.

    Why the freeze: CPython's full collections walk every object they track, and in a
    serving process most of those are the startup's (modules, bodies, pools, the runtime),
    which never become garbage. Left out of them, they cost nothing more: a worker draining
    no-op runs on PostgreSQL spent 12% less CPU a run.

    Why the threshold: a run's objects (its task, scopes, attempt, commits, records) live
    as long as the run, across many allocations of the runs in flight beside it. A young
    collection made while they are alive walks them all and promotes them, to be walked
    again in the older generations; and a batch of runs started together makes its
    objects before the last batch's are freed, so it crosses any threshold below its own
    size, whatever that threshold, and the collector walks its every object. At 700 a
    worker spent 22 µs a run in the collector; at 10,000, 11 (it promotes far fewer); at
    `YOUNG_PER_RUN` a run it may hold, above what its runs in flight keep alive, none: a
    batch's objects are freed, as its runs end, before the count reaches the threshold.

    The price is the pause when a young collection does come, from a body's own objects
    or a worker holding more than its runs: it walks up to the threshold's objects, about
    0.3 µs each (at a young count of 48,738 and 69,623: 17.6 and 21.4 ms), so up to 40 ms
    at 1,024 runs at once. At 10,000 the pauses were shorter but many: a young collection
    1.8 ms (the median; 7.6 at most), and every tenth a middle one, 10 ms (24 at most),
    eight of them in a drain of 20,000 runs. The default concurrency, 8, and the cancel
    benchmark's 64 stay at 10,000. Garbage cycles are freed as before, at most the
    threshold's allocations later. (``docs/guides/scaling-postgres.md`` has the
    measurements.)

    What was frozen is never collected, so this runs once, after startup, and not in a
    library that shares its process with an application. A threshold the process already
    set higher, or collection turned off (0), is left as it is.
    """
    wanted = young_threshold(concurrency)
    gc.collect()
    gc.freeze()
    young, middle, old = gc.get_threshold()
    if 0 < young < wanted:
        young = wanted
        gc.set_threshold(young, middle, old)
    return SettledHeap(frozen=gc.get_freeze_count(), young_threshold=young)
