"""Stores for tests that need to hold back or break commits on purpose."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import trio

from awaken_trio import RunEvent, RunRecord, RunState
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
