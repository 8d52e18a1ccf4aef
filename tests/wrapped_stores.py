"""Stores for tests that need to hold back or break commits on purpose."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import trio

from awaken_trio import JsonValue, RunEvent, RunRecord, RunState
from awaken_trio._core._storage import CommandKind, Recovered, StoredCommand
from awaken_trio.store import Commit, CommitResult, MemoryStore, Rejected


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

    async def renew(
        self, owner: str, held: Mapping[str, int], now: float, lease_until: float
    ) -> list[str]:
        await self._gate("renew")
        return await self.inner.renew(owner, held, now, lease_until)

    async def release(self, owner: str, run_id: str) -> None:
        await self._gate("release")
        await self.inner.release(owner, run_id)

    async def recover(
        self,
        owner: str,
        names: Collection[str],
        now: float,
        lease_until: float,
        max_recoveries: int,
        limit: int,
    ) -> list[Recovered]:
        await self._gate("recover")
        return await self.inner.recover(owner, names, now, lease_until, max_recoveries, limit)

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
