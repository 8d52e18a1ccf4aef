"""The step journal: what `RunContext.step` hands back instead of running a step again, and
the index each new step is committed under.

A step's result is committed as an event of kind ``"step"``, detail ``{"name", "index",
"result"}``. The events are the journal: there is no other copy to keep in agreement. An
attempt reads them once, at its first step (most runs never take one, and pay nothing), by
their kind through the store's index (`StepStore.step_events`), never by scanning the
run's history at each step.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterable
from typing import Final, final

import trio

from ._json import FrozenDict, JsonValue, freeze_detail
from ._state import EventKind, RunEvent
from ._storage import StepStore, Store, read_store


class _Missing(enum.Enum):
    MISSING = "MISSING"


MISSING: Final = _Missing.MISSING
"""`Journal.replay` found no committed result for the call."""

_PAGE = 1000


@final
class Journal:
    """One attempt's view of its run's journaled steps.

    Per step name it keeps the results the run had committed when the attempt loaded them
    (by index), how many calls of that name have returned in this attempt (``cursor``), and
    the index its next new result takes (``next_index``).

    Invariants:

    - a call of ``name`` replays the committed result whose index is the cursor, if there
      is one, and moves the cursor on; a call that raised, or was cancelled, moves nothing,
      so its retry is the same call as far as the journal is concerned;
    - a new result of ``name`` takes ``next_index``: one more than the highest index the
      run had committed when the journal was loaded (0 for none), then counting up in the
      order this attempt hands its step commits to the store. The supervisor's mailbox
      applies commits in the order they are handed over, so indexes are in the order the
      commits land, also when two tasks of one attempt race steps of one name;
    - the journal is loaded once, before any step of its attempt commits: what the attempt
      commits itself is never read back, it only moves ``next_index`` on.
    """

    __slots__ = ("_committed", "_cursor", "_lock", "_next")

    def __init__(self) -> None:
        self._committed: dict[str, dict[int, JsonValue]] | None = None
        self._cursor: dict[str, int] = {}
        self._next: dict[str, int] = {}
        self._lock = trio.Lock()

    async def load(self, read: Callable[[], Awaitable[list[RunEvent]]]) -> None:
        """Load the committed steps with ``read``, unless they are loaded: tasks that
        take their first steps at once wait for one read. A read that fails or is cancelled
        leaves the journal unloaded, for the next step to try again."""
        if self._committed is not None:
            return
        async with self._lock:
            if self._committed is None:
                self._committed = by_name(await read())

    def replay(self, name: str) -> JsonValue | _Missing:
        """The committed result of this call of ``name``, the cursor moved past it; or
        `MISSING` when the run has none (the step must run)."""
        assert self._committed is not None, "loaded at the attempt's first step"
        results = self._committed.get(name)
        if results is None:
            return MISSING
        cursor = self._cursor.get(name, 0)
        if cursor not in results:
            return MISSING
        self._cursor[name] = cursor + 1
        return results[cursor]

    def take_index(self, name: str) -> int:
        """The index of a new result of ``name``, taken right before its commit is handed
        to the store (no checkpoint in between)."""
        index = self._next.get(name)
        if index is None:
            assert self._committed is not None
            results = self._committed.get(name)
            index = max(results) + 1 if results else 0
        self._next[name] = index + 1
        self._cursor[name] = self._cursor.get(name, 0) + 1
        return index


def by_name(events: Iterable[RunEvent]) -> dict[str, dict[int, JsonValue]]:
    """The results of ``step`` events by name and index; of two events with one name and
    index (none of the runtime's stores writes such), the one committed first counts."""
    out: dict[str, dict[int, JsonValue]] = {}
    for event in events:
        detail = event.detail
        results = out.setdefault(detail["name"], {})
        results.setdefault(detail["index"], detail["result"])
    return out


async def read_steps(store: Store, run_id: str) -> list[RunEvent]:
    """The run's committed ``step`` events, oldest first: through the store's index where it
    has one (`StepStore`), else by reading the run's events a page at a time and keeping
    those of kind ``"step"``. A failed read raises `StoreError`."""
    what = f"the journaled steps of run {run_id!r}"
    if isinstance(store, StepStore):
        return await read_store(store.step_events(run_id), what)
    found: list[RunEvent] = []
    after = 0
    while True:
        page = await read_store(store.events_after(after, run_id, _PAGE), what)
        found.extend(event for event in page if event.kind == EventKind.STEP)
        if len(page) < _PAGE:
            return found
        after = page[-1].seq


def step_detail(name: str, index: int, result: JsonValue) -> FrozenDict:
    """The detail of a ``step`` event (``result`` is already checked and frozen, so
    freezing the detail walks nothing but its three members)."""
    return freeze_detail({"name": name, "index": index, "result": result}, "a step's detail")
