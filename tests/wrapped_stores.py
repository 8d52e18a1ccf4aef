"""Stores for tests that need to hold back or break commits on purpose, and a lease clock a
test moves by hand."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import trio

from awaken_trio import JsonValue, RunEvent, RunRecord, RunState, StoreError
from awaken_trio._core import (
    CommandKind,
    Recovered,
    Rejected,
    StoredCommand,
)
from awaken_trio.store import Commit, CommitResult, MemoryStore


class WrappedStore:
    """A memory store on the mailbox path; subclasses change how ``apply`` behaves."""

    def __init__(self) -> None:
        self.inner = MemoryStore(inline=False)

    @property
    def durable(self) -> bool:
        return self.inner.durable

    async def apply(self, batch: Sequence[Commit]) -> list[CommitResult]:
        return await self.inner.apply(batch)

    async def runnable(self, names: Collection[str], now: float, limit: int) -> list[RunRecord]:
        return await self.inner.runnable(names, now, limit)

    async def load(self, run_id: str) -> RunRecord | None:
        return await self.inner.load(run_id)

    async def events_after(
        self, seq: int, run_id: str | None = None, limit: int = 1000
    ) -> list[RunEvent]:
        return await self.inner.events_after(seq, run_id, limit)

    async def aclose(self) -> None:
        await self.inner.aclose()


class HoldingStore(WrappedStore):
    """Holds back commits of one state variant until ``release`` is set, so a test can act
    while such a commit is in flight (``holding`` is set when one arrives)."""

    def __init__(self, hold: type[RunState]) -> None:
        super().__init__()
        self.hold = hold
        self.holding = trio.Event()
        self.release = trio.Event()

    async def apply(self, batch: Sequence[Commit]) -> list[CommitResult]:
        if any(isinstance(commit.state, self.hold) for commit in batch):
            self.holding.set()
            await self.release.wait()
        return await self.inner.apply(batch)


class InlineFailingStore(WrappedStore):
    """A memory store applied inline (in the caller's step, as its own is) that raises
    while ``failing``; ``batches`` lists the run ids of every batch it was given."""

    inline = True

    def __init__(self) -> None:
        super().__init__()
        self.failing = False
        self.batches: list[list[str]] = []

    def apply_now(self, batch: Sequence[Commit]) -> list[CommitResult]:
        self.batches.append([commit.run_id for commit in batch])
        if self.failing:
            raise OSError("disk full")
        return self.inner.apply_now(batch)


class FailingStore(WrappedStore):
    """Fails ``apply`` on demand.

    It raises while ``failing`` is set or when a batch holds a commit for a run in
    ``failing_runs``; with ``short`` set it applies the batch but answers one result short.
    """

    def __init__(self) -> None:
        super().__init__()
        self.failing = False
        self.failing_runs: set[str] = set()
        self.short = False
        self.failed_batches = 0

    async def apply(self, batch: Sequence[Commit]) -> list[CommitResult]:
        if self.failing or any(commit.run_id in self.failing_runs for commit in batch):
            self.failed_batches += 1
            await trio.lowlevel.checkpoint()
            raise OSError("disk full")
        results = await self.inner.apply(batch)
        return results[:-1] if self.short else results


class DurableWrapper:
    """A shared memory store behind a wrapper (another runtime's view of it, say);
    subclasses change how some calls behave. Everything else goes straight through."""

    def __init__(self, inner: MemoryStore) -> None:
        assert inner.durable, "wrap a MemoryStore(shared=True)"
        self.inner = inner

    @property
    def durable(self) -> bool:
        return True

    async def apply(self, batch: Sequence[Commit]) -> list[CommitResult]:
        return await self.inner.apply(batch)

    async def runnable(self, names: Collection[str], now: float, limit: int) -> list[RunRecord]:
        return await self.inner.runnable(names, now, limit)

    async def load(self, run_id: str) -> RunRecord | None:
        return await self.inner.load(run_id)

    async def events_after(
        self, seq: int, run_id: str | None = None, limit: int = 1000
    ) -> list[RunEvent]:
        return await self.inner.events_after(seq, run_id, limit)

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()  # the inner store is the test's to close

    async def renew(self, owner: str, held: Mapping[str, int], lease: float) -> list[str]:
        return await self.inner.renew(owner, held, lease)

    async def release(self, owner: str, run_id: str) -> None:
        await self.inner.release(owner, run_id)

    async def recover(
        self,
        owner: str,
        names: Collection[str],
        at: float,
        lease: float,
        max_recoveries: int,
        limit: int,
    ) -> list[Recovered]:
        return await self.inner.recover(owner, names, at, lease, max_recoveries, limit)

    async def post_command(
        self, run_id: str, kind: CommandKind, payload: JsonValue, reason: str | None, at: float
    ) -> int | Rejected:
        return await self.inner.post_command(run_id, kind, payload, reason, at)

    async def commands(self, run_ids: Collection[str], after: int = 0) -> list[StoredCommand]:
        return await self.inner.commands(run_ids, after)

    async def states(self, run_ids: Collection[str]) -> dict[str, RunState]:
        return await self.inner.states(run_ids)

    async def version(self) -> int:
        return await self.inner.version()


class LateRecovery(DurableWrapper):
    """The first recovery that claims something answers only after ``delay`` seconds, as
    an event loop blocked by a busy body would see it (the fresh lease may lapse before
    the attempt's first commit); ``answered`` is set then. Later recoveries find nothing,
    leaving the runs for other runtimes."""

    def __init__(self, inner: MemoryStore, delay: float) -> None:
        super().__init__(inner)
        self.delay = delay
        self.answered = trio.Event()

    async def recover(
        self,
        owner: str,
        names: Collection[str],
        at: float,
        lease: float,
        max_recoveries: int,
        limit: int,
    ) -> list[Recovered]:
        if self.answered.is_set():
            await trio.lowlevel.checkpoint()
            return []
        found = await super().recover(owner, names, at, lease, max_recoveries, limit)
        if found:
            await trio.sleep(self.delay)
            self.answered.set()
        return found


class FailingEnds(DurableWrapper):
    """The first terminal commit of run ``run_id`` fails (a full disk, say): the batch is
    refused whole and changes nothing; ``failed`` is set then."""

    def __init__(self, inner: MemoryStore, run_id: str) -> None:
        super().__init__(inner)
        self.run_id = run_id
        self.failed = trio.Event()

    async def apply(self, batch: Sequence[Commit]) -> list[CommitResult]:
        if not self.failed.is_set() and any(
            c.run_id == self.run_id and isinstance(c.state, RunState.Ended) for c in batch
        ):
            self.failed.set()
            await trio.lowlevel.checkpoint()
            raise StoreError("disk full", outcome_unknown=False)
        return await super().apply(batch)


class FlakyStore(DurableWrapper):
    """While ``failing`` is set, the store raises `StoreError` (a write lock held past the
    busy timeout, a full disk): from every call, or with ``commits_only`` from ``apply``
    alone, refusing each batch whole. ``failures`` counts the calls it failed."""

    def __init__(self, inner: MemoryStore, *, commits_only: bool = False) -> None:
        super().__init__(inner)
        self.failing = False
        self.commits_only = commits_only
        self.failures = 0

    async def _check(self, commit: bool = False) -> None:
        if self.failing and (commit or not self.commits_only):
            self.failures += 1
            await trio.lowlevel.checkpoint()
            raise StoreError("database is locked", outcome_unknown=False)

    async def apply(self, batch: Sequence[Commit]) -> list[CommitResult]:
        await self._check(commit=True)
        return await super().apply(batch)

    async def runnable(self, names: Collection[str], now: float, limit: int) -> list[RunRecord]:
        await self._check()
        return await super().runnable(names, now, limit)

    async def renew(self, owner: str, held: Mapping[str, int], lease: float) -> list[str]:
        await self._check()
        return await super().renew(owner, held, lease)

    async def recover(
        self,
        owner: str,
        names: Collection[str],
        at: float,
        lease: float,
        max_recoveries: int,
        limit: int,
    ) -> list[Recovered]:
        await self._check()
        return await super().recover(owner, names, at, lease, max_recoveries, limit)

    async def commands(self, run_ids: Collection[str], after: int = 0) -> list[StoredCommand]:
        await self._check()
        return await super().commands(run_ids, after)

    async def states(self, run_ids: Collection[str]) -> dict[str, RunState]:
        await self._check()
        return await super().states(run_ids)

    async def version(self) -> int:
        await self._check()
        return await super().version()


class LeaseClock:
    """A lease clock a test moves by hand, shared by every store on the file (it stands
    for the machine's wall clock, which every process on it shares)."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now

    async def elapse(self, seconds: float) -> None:
        self.now += seconds
        await trio.lowlevel.checkpoint()


class Parked:
    """One parked store call: ``arrived`` is set when it comes (its arguments are taken,
    the store has not seen it yet); it goes on once ``release`` is set."""

    def __init__(self) -> None:
        self.arrived = trio.Event()
        self.release = trio.Event()


class ParkingStore(WrappedStore):
    """A memory store on the mailbox path (shared, so durable, unless ``shared=False``)
    whose next call of a method can be parked (`park`), so a test can make things happen
    while that call is in flight, in an order it chooses rather than by luck, or made to
    fail (`fail`)."""

    def __init__(self, *, shared: bool = True) -> None:
        self.inner = MemoryStore(inline=False, shared=shared)
        self._parked: dict[str, Parked] = {}
        self._failing: set[str] = set()

    def park(self, method: str) -> Parked:
        """Park the next call of ``method`` until the returned `Parked` is released."""
        parked = self._parked[method] = Parked()
        return parked

    def fail(self, method: str) -> None:
        """Make the next call of ``method`` raise, as a full disk would."""
        self._failing.add(method)

    async def _gate(self, method: str) -> None:
        if method in self._failing:
            self._failing.discard(method)
            await trio.lowlevel.checkpoint()
            raise OSError("disk full")
        parked = self._parked.pop(method, None)
        if parked is None:
            await trio.lowlevel.checkpoint()
            return
        parked.arrived.set()
        await parked.release.wait()

    async def apply(self, batch: Sequence[Commit]) -> list[CommitResult]:
        await self._gate("apply")
        return await self.inner.apply(batch)

    async def renew(self, owner: str, held: Mapping[str, int], lease: float) -> list[str]:
        await self._gate("renew")
        return await self.inner.renew(owner, held, lease)

    async def release(self, owner: str, run_id: str) -> None:
        await self._gate("release")
        await self.inner.release(owner, run_id)

    async def recover(
        self,
        owner: str,
        names: Collection[str],
        at: float,
        lease: float,
        max_recoveries: int,
        limit: int,
    ) -> list[Recovered]:
        await self._gate("recover")
        return await self.inner.recover(owner, names, at, lease, max_recoveries, limit)

    async def post_command(
        self, run_id: str, kind: CommandKind, payload: JsonValue, reason: str | None, at: float
    ) -> int | Rejected:
        await self._gate("post_command")
        return await self.inner.post_command(run_id, kind, payload, reason, at)

    async def commands(self, run_ids: Collection[str], after: int = 0) -> list[StoredCommand]:
        # The ids are taken now, as a store reading them at once would.
        run_ids = list(run_ids)
        await self._gate("commands")
        return await self.inner.commands(run_ids, after)

    async def states(self, run_ids: Collection[str]) -> dict[str, RunState]:
        run_ids = list(run_ids)
        await self._gate("states")
        return await self.inner.states(run_ids)

    async def version(self) -> int:
        await self._gate("version")
        return await self.inner.version()


class CountingStore:
    """Any store, counting its write transactions (``applies``) and its journal reads
    (``reads``, of `StepStore.step_events`); everything else goes straight to it."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.reads = 0
        self.applies = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def step_events(self, run_id: str) -> list[RunEvent]:
        self.reads += 1
        found: list[RunEvent] = await self._inner.step_events(run_id)
        return found

    async def apply(self, batch: Sequence[Commit]) -> list[CommitResult]:
        self.applies += 1
        results: list[CommitResult] = await self._inner.apply(batch)
        return results
