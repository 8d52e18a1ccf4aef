"""The store contract's checks of a run's times and worker, and of the reads an operator
makes: runs listed by state or end cause, and counted by both (`StoreContract`)."""

from __future__ import annotations

import pytest

from .. import EndCause, RunCounts
from ..store import Claim, CountingStore, ListingStore, Store
from ._checks import _accepted, _loaded
from ._commits import DONE, Ended, Queued, Running, create, end, queue, run

FAILED = Ended(EndCause.Failed("value_error", "bad"))
STOPPED = Ended(EndCause.Stopped("enough"))


class TimesChecks:
    """`RunRecord.created_at`, ``updated_at``, ``started_at``, ``ended_at`` (each commit's
    ``at``) and ``worker_id`` (the owner of the claim taken last)."""

    async def test_times_follow_the_commits(self, store: Store) -> None:
        await _accepted(store, create("r1", Queued(), generation=0, at=10.0))
        record = await _loaded(store, "r1")
        assert (record.created_at, record.updated_at) == (10.0, 10.0)
        assert (record.started_at, record.ended_at) == (None, None)
        await _accepted(store, run("r1", 1, at=11.0))
        await _accepted(store, run("r1", 1, at=12.0, checkpoint={"step": 1}))
        await _accepted(store, queue("r1", 1, at=13.0))
        await _accepted(store, run("r1", 2, at=14.0))
        record = await _loaded(store, "r1")
        assert (record.created_at, record.updated_at) == (10.0, 14.0)
        assert (record.started_at, record.ended_at) == (11.0, None)  # its first Running
        await _accepted(store, end("r1", DONE, 2, at=15.5))
        record = await _loaded(store, "r1")
        assert record.created_at == 10.0
        assert record.started_at == 11.0
        assert record.updated_at == record.ended_at == 15.5

    async def test_a_run_created_ended_has_all_its_times(self, store: Store) -> None:
        await _accepted(store, create("r1", DONE, at=3.0))
        record = await _loaded(store, "r1")
        assert (record.created_at, record.updated_at, record.ended_at) == (3.0, 3.0, 3.0)
        assert record.started_at is None  # it never ran
        assert record.worker_id is None  # never claimed

    async def test_a_rejected_commit_changes_no_time(self, store: Store) -> None:
        await _accepted(store, create("r1", DONE, at=3.0))
        before = await _loaded(store, "r1")
        await store.apply([run("r1", 1, at=9.0)])
        assert await _loaded(store, "r1") == before


class WorkerOfRunChecks:
    """`RunRecord.worker_id` on a store shared by runtimes (`DurableStoreContract`)."""

    async def test_worker_id_is_the_owner_of_the_last_claim(self, store: Store) -> None:
        await _accepted(store, create("r1", claim=Claim("worker-a", 30.0)))
        assert (await _loaded(store, "r1")).worker_id == "worker-a"
        await _accepted(store, queue("r1", 1, release=True))
        assert (await _loaded(store, "r1")).worker_id == "worker-a"  # kept once released
        await _accepted(store, run("r1", 2, claim=Claim("worker-b", 30.0)))
        assert (await _loaded(store, "r1")).worker_id == "worker-b"


class ListingChecks:
    """`ListingStore.list_runs` by state kind and by end cause kind, and
    `CountingStore.count_runs`, on whatever mix of runs a store holds."""

    async def _mix(self, store: Store) -> None:
        # Oldest first: done, failed, queued, running, stopped, failed again.
        for run_id, state, generation in (
            ("a", DONE, 1),
            ("b", FAILED, 1),
            ("c", Queued(), 0),
            ("d", Running(1), 1),
            ("e", STOPPED, 1),
            ("f", FAILED, 1),
        ):
            await _accepted(store, create(run_id, state, generation=generation))

    async def test_an_end_cause_selects_the_runs_that_ended_with_it(self, store: Store) -> None:
        if not isinstance(store, ListingStore):
            pytest.skip("the store does not list its runs")
        await self._mix(store)

        async def listed(state: str, **kw: object) -> list[str]:
            found = await store.list_runs(state=state, **kw)  # type: ignore[arg-type]
            return [record.run_id for record in found]

        assert await listed("failed") == ["f", "b"]
        assert await listed("failed", limit=1) == ["f"]
        assert await listed("failed", before="f") == ["b"]
        assert await listed("stopped") == ["e"]
        assert await listed("natural_end") == ["a"]
        assert await listed("cancelled") == []
        assert await listed("ended") == ["f", "e", "b", "a"]
        assert await listed("queued") == ["c"]
        assert await listed("running") == ["d"]
        assert await listed("failed", thread_id="thread-b") == ["b"]

    async def test_counts_by_state_and_cause(self, store: Store) -> None:
        if not isinstance(store, CountingStore):
            pytest.skip("the store does not count its runs")
        assert {k: v for k, v in (await store.count_runs()).items() if v} == {}
        await self._mix(store)
        counts = RunCounts(**dict(await store.count_runs()))
        assert dict(counts) == {
            "queued": 1,
            "running": 1,
            "awaiting": 0,
            "ended": 4,
            "natural_end": 1,
            "max_steps": 0,
            "cancelled": 0,
            "stopped": 1,
            "failed": 2,
            "indeterminate": 0,
        }
        await _accepted(store, end("d", FAILED))
        counts = RunCounts(**dict(await store.count_runs()))
        assert (counts.running, counts.ended, counts.failed, counts.total) == (0, 5, 3, 6)
