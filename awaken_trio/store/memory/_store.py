"""The memory store: committed truth in dicts, pure Trio, for tests and embedding.

Its writes are the store rules (``_rules``) over its tables (``_tx``); what is here
is the store's calls, its reads and when it forgets ended runs.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, final

import attrs
import trio

from ..._core import (
    CheckpointAt,
    CommandKind,
    Commit,
    CommitResult,
    InvalidArgument,
    JsonValue,
    Overdue,
    OverdueLook,
    Recovered,
    Rejected,
    RunEvent,
    RunFilter,
    RunRecord,
    RunState,
    StoredCommand,
    StreamChunk,
    StreamPage,
    WorkerInfo,
    WorkerRecord,
    WorkerState,
)
from .. import _rules as rules
from .._workers import bodies_text, worker_of
from ._tx import Entry, MemoryTx, Segment


@final
@attrs.define(eq=False)
class MemoryStore:
    """Keeps everything in this process.

    Applying a batch never yields in the middle, so each batch is one transaction. With
    ``inline=True`` (the default) the supervisor applies commits synchronously in the
    committing task; ``inline=False`` sends them through the supervisor's mailbox and
    group commit, as an I/O-bound store does.

    By default the store belongs to one runtime: leaving that runtime stops its runs. With
    ``shared=True`` it is a store several runtimes in this process share, with everything
    a durable store has (claims with leases and epochs, recovery of a lost owner's runs,
    stored commands): leaving a runtime releases its claims, and its named runs are picked
    up by another. That makes failover testable in one process, on Trio's virtual clock.
    Leases are measured by ``lease_clock`` (Trio's clock, `trio.current_time`, by default),
    read by the store itself, never by the runtimes' own clocks.

    So that a long-lived process does not grow without limit, the store keeps at most
    ``max_ended_runs`` ended runs (10,000 by default): once a call that ended one more run
    is done, the run that ended longest ago is forgotten, its record and its events with it
    (reading it then raises `UnknownRun`). Runs that have not ended are never forgotten.
    """

    inline: bool = True
    max_ended_runs: int = attrs.field(default=10_000, kw_only=True)
    shared: bool = attrs.field(default=False, kw_only=True)
    lease_clock: Callable[[], float] = attrs.field(default=trio.current_time, kw_only=True)

    # Everything the store holds (and the rules' transaction over it); its `shared` is
    # the store's.
    _tx: MemoryTx = attrs.field(init=False)
    _version: int = attrs.field(default=0, init=False)
    # Worker rows by id, oldest registered first: the `WORKER_COLUMNS` values.
    _workers: dict[str, list[Any]] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        if type(self.max_ended_runs) is not int or self.max_ended_runs < 1:
            raise InvalidArgument(
                f"max_ended_runs must be a positive int, not {self.max_ended_runs!r}"
            )
        self._tx = MemoryTx(self.shared)

    @property
    def durable(self) -> bool:
        return self.shared

    async def apply(self, batch: Sequence[Commit]) -> list[CommitResult]:
        """Apply ``batch`` as `Store.apply` does: in order, each commit fenced on its own."""
        await trio.lowlevel.checkpoint()
        return self.apply_now(batch)

    def apply_now(self, batch: Sequence[Commit]) -> list[CommitResult]:
        """Apply ``batch`` synchronously (the memory store needs no I/O)."""
        if self.shared:
            self._version += 1
            now = self.lease_clock()  # one reading for the whole transaction
        else:
            now = 0.0  # (no claims: no lease is ever read)
        if len(batch) == 1:  # the inline commit of one task: nothing to prefetch
            results = [rules.apply_one(self._tx, batch[0], now)]
        else:
            results = rules.apply_batch(self._tx, batch, now)
        if len(self._tx.ended) > self.max_ended_runs:
            self._evict()
        return results

    def _evict(self) -> None:
        """Forget the runs that ended longest ago, down to ``max_ended_runs`` ended runs.
        Done once a call's rules have run, so a run never disappears in the middle of one."""
        tx = self._tx
        ended = tx.ended
        while len(ended) > self.max_ended_runs:
            tx.forget(ended.popleft())

    # ------------------------------------------------------------------ reads

    async def load(self, run_id: str) -> RunRecord | None:
        """The committed record of ``run_id``, or None for a run this store does not hold."""
        await trio.lowlevel.checkpoint()
        row = self._tx.rows.get(run_id)
        return None if row is None else row.record()

    async def events_after(
        self, seq: int, run_id: str | None = None, limit: int = 1000
    ) -> list[RunEvent]:
        """Committed events after ``seq`` (of ``run_id`` only, if given), oldest first, at most
        ``limit``.
        """
        await trio.lowlevel.checkpoint()
        tx = self._tx
        if run_id is not None:
            row = tx.rows.get(run_id)
            if row is None:
                return []
            start = bisect.bisect_right(row.events, seq, key=_seq_of)
            return [_event(entry) for entry in row.events[start : start + limit]]
        log = tx.log
        start = bisect.bisect_right(log, seq, key=_seq_of)
        if not tx.forgotten_events:
            return [_event(entry) for entry in log[start : start + limit]]
        out: list[RunEvent] = []
        for entry in log[start:]:
            if tx.is_live(entry):
                out.append(_event(entry))
                if len(out) == limit:
                    break
        return out

    async def read_chunks(
        self, run_id: str, channel: str, after: int, limit: int
    ) -> StreamPage | None:
        """The chunks of ``run_id``'s ``channel`` after offset ``after`` (`StreamingStore`)."""
        await trio.lowlevel.checkpoint()
        tx = self._tx
        row = tx.rows.get(run_id)
        if row is None:
            return None
        ended = row.kind == "ended"
        found = tx.streams.get(run_id, {}).get(channel)
        if found is None:
            return StreamPage((), 0, ended)
        segments = found.segments
        start = bisect.bisect_right(segments, after, key=_last_offset)
        chunks: list[StreamChunk] = []
        for first, _, generation, kind, values, at in segments[start:]:
            # (The values are frozen already: each chunk is cut from them as they are.)
            skip = max(after + 1 - first, 0)
            wanted = values[skip : skip + limit - len(chunks)]
            chunks.extend(
                StreamChunk(offset, generation, kind, value, at)
                for offset, value in enumerate(wanted, first + skip)
            )
            if len(chunks) >= limit:
                break
        return StreamPage(tuple(chunks), found.head.last, ended)

    async def stream_channels(self, run_id: str) -> list[str] | None:
        """The channels ``run_id`` has written (`StreamingStore`)."""
        await trio.lowlevel.checkpoint()
        tx = self._tx
        if run_id not in tx.rows:
            return None
        channels = tx.streams.get(run_id, {})
        return sorted(channels, key=lambda name: (channels[name].segments[0][5], name))

    async def step_events(self, run_id: str) -> list[RunEvent]:
        """The run's ``step`` events, oldest first (`StepStore`), from the run's own index
        of them."""
        await trio.lowlevel.checkpoint()
        row = self._tx.rows.get(run_id)
        if row is None or row.step_entries is None:
            return []
        return [_event(entry) for entry in row.step_entries]

    async def checkpoint_at(self, run_id: str, seq: int | None) -> CheckpointAt | None:
        """The checkpoint ``run_id`` had committed as of its event ``seq`` (`ForkingStore`)."""
        await trio.lowlevel.checkpoint()
        row = self._tx.rows.get(run_id)
        if row is None or not row.events:
            return None
        if seq is None:
            seq = row.events[-1][0]
        else:
            at = bisect.bisect_left(row.events, seq, key=_seq_of)
            if at == len(row.events) or row.events[at][0] != seq:
                return None
        history = row.history or ()
        before = bisect.bisect_right(history, seq, key=_history_seq)
        return CheckpointAt(seq, history[before - 1][1] if before else None)

    async def prune(self, ended_before: float, *, dry_run: bool = False) -> int:
        """Delete the trees whose root ended before ``ended_before``; the number deleted
        (`PruningStore`).
        """
        await trio.lowlevel.checkpoint()
        tx = self._tx
        rows = tx.rows
        trees: dict[str, list[str]] = {}
        for run_id, row in rows.items():
            trees.setdefault(row.root_run_id, []).append(run_id)
        doomed: list[str] = []
        for run_id in tx.ended:
            row = rows[run_id]
            if row.parent_run_id is not None or row.events[-1][7] > ended_before:
                continue
            tree = trees[run_id]
            if all(rows[member].kind == "ended" for member in tree):
                doomed.extend(tree)
        if dry_run or not doomed:
            return len(doomed)
        self._version += 1
        gone = set(doomed)
        tx.ended = deque(run_id for run_id in tx.ended if run_id not in gone)
        for run_id in doomed:
            tx.forget(run_id)
            tx.claims.pop(run_id, None)
        for command_id in [c.id for c in tx.commands.values() if c.run_id in gone]:
            del tx.commands[command_id]
            tx.delivered.discard(command_id)
        return len(doomed)

    async def runnable(self, names: Collection[str], now: float, limit: int) -> list[RunRecord]:
        """Queued named root runs and due scheduled resumes a runtime with ``names`` may claim."""
        await trio.lowlevel.checkpoint()
        tx = self._tx
        out: list[RunRecord] = []
        rows = tx.rows
        # Leases by the store's clock; ``now`` (the runtime's) is for scheduled tickets.
        lease_now = self.lease_clock() if self.shared else 0.0
        for run_id in sorted(tx.queued, key=lambda r: rows[r].created):
            if len(out) >= limit:
                return out
            row = rows[run_id]
            if row.name not in names or (row.not_before is not None and row.not_before > now):
                continue
            held = tx.claims.get(run_id)
            if held is not None and held.lease_until >= lease_now:
                continue
            # (A store of one runtime leaves threads to that runtime's own thread gate.)
            if not tx.thread_busy(row.thread_id, run_id, lease_now):
                out.append(row.record())
        for run_id, due in sorted(tx.scheduled.items(), key=lambda item: item[1]):
            if len(out) >= limit or due > now:
                break
            row = rows[run_id]
            if row.name in names:
                out.append(row.record())
        return out

    async def overdue(self, now: float, limit: int) -> OverdueLook:
        """The root runs past a time limit (`DeadlineStore.overdue`), from the index of
        the unended runs that have one."""
        await trio.lowlevel.checkpoint()
        rows = self._tx.rows
        runs: list[Overdue] = []
        upcoming: list[float] = []
        for run_id in self._tx.limited:
            row = rows[run_id]
            due = row.deadline if row.kind == "queued" or row.kind == "awaiting" else None
            queue_due = row.queue_deadline if row.kind == "queued" and row.generation == 0 else None
            upcoming.extend(t for t in (due, queue_due) if t is not None and t > now)
            if due is not None and due <= now:
                found: Overdue | None = Overdue(row.record(), "deadline")
            elif queue_due is not None and queue_due <= now:
                found = Overdue(row.record(), "queue_timeout")
            else:
                found = None
            if found is not None and len(runs) < limit:
                runs.append(found)
        return OverdueLook(tuple(runs), min(upcoming, default=None))

    async def list_runs(
        self,
        *,
        state: RunFilter | None = None,
        thread_id: str | None = None,
        name: str | None = None,
        limit: int = 50,
        before: str | None = None,
    ) -> list[RunRecord]:
        """Runs newest first (`ListingStore.list_runs`): the rows are kept in the order
        they were created, so this walks them backwards, from ``before`` if given."""
        await trio.lowlevel.checkpoint()
        rows = self._tx.rows
        out: list[RunRecord] = []
        if limit <= 0 or (before is not None and before not in rows):
            return out
        skipping = before is not None
        for run_id in reversed(rows):
            if skipping:
                skipping = run_id != before
                continue
            row = rows[run_id]
            if (
                (state is None or rules.run_matches(row.kind, row.state, state))
                and (thread_id is None or row.thread_id == thread_id)
                and (name is None or row.name == name)
            ):
                out.append(row.record())
                if len(out) == limit:
                    break
        return out

    async def count_runs(self) -> dict[str, int]:
        """How many runs the store keeps of each state kind and end cause kind
        (`CountingStore.count_runs`)."""
        await trio.lowlevel.checkpoint()
        counts: dict[str, int] = {}
        for row in self._tx.rows.values():
            kind = row.kind
            counts[kind] = counts.get(kind, 0) + 1
            if kind == "ended":
                cause = rules.cause_of(row.state)
                counts[cause] = counts.get(cause, 0) + 1
        return counts

    async def aclose(self) -> None:
        """Close the store; it holds nothing outside this process, so nothing is flushed."""
        await trio.lowlevel.checkpoint()

    # ------------------------------------------------------------------ claims

    async def renew(self, owner: str, held: Mapping[str, int], lease: float) -> list[str]:
        """Extend ``owner``'s live claims by ``lease``; the run ids whose claims were lost.
        The owner's worker row, if it has one, is seen now."""
        await trio.lowlevel.checkpoint()
        self._version += 1
        now = self.lease_clock()
        lost = rules.renew(self._tx, owner, held, now, lease)
        self._seen(owner, len(held) - len(lost), now)
        return lost

    # ------------------------------------------------------------------ workers

    def _seen(self, worker_id: str, active: int, now: float) -> WorkerState | None:
        row = self._workers.get(worker_id)
        if row is None:
            return None
        row[5], row[8] = now, active
        stored: WorkerState = row[3]
        return stored

    async def register_worker(self, worker: WorkerInfo) -> None:
        """`WorkerStore.register_worker`."""
        await trio.lowlevel.checkpoint()
        now = self.lease_clock()
        self._workers.pop(worker.worker_id, None)  # (re-inserted last: newest)
        self._workers[worker.worker_id] = [
            worker.worker_id,
            worker.host,
            worker.pid,
            "serving",
            now,
            now,
            bodies_text(worker.bodies),
            worker.concurrency,
            0,
            worker.lease,
        ]

    async def worker_seen(self, worker_id: str, active: int) -> WorkerState | None:
        """`WorkerStore.worker_seen`."""
        await trio.lowlevel.checkpoint()
        return self._seen(worker_id, active, self.lease_clock())

    async def worker_state(self, worker_id: str) -> WorkerState | None:
        """`WorkerStore.worker_state`."""
        await trio.lowlevel.checkpoint()
        row = self._workers.get(worker_id)
        return None if row is None else row[3]

    async def list_workers(self, *, ended: bool = False) -> list[WorkerRecord]:
        """`WorkerStore.list_workers`."""
        await trio.lowlevel.checkpoint()
        now = self.lease_clock()
        return [
            worker_of(tuple(row), now)
            for row in reversed(self._workers.values())
            if ended or row[3] != "stopped"
        ]

    async def drain_worker(self, worker_id: str) -> WorkerRecord | None:
        """`WorkerStore.drain_worker`."""
        await trio.lowlevel.checkpoint()
        row = self._workers.get(worker_id)
        if row is None:
            return None
        if row[3] == "serving":
            row[3] = "draining"
        return worker_of(tuple(row), self.lease_clock())

    async def end_worker(self, worker_id: str) -> None:
        """`WorkerStore.end_worker`."""
        await trio.lowlevel.checkpoint()
        row = self._workers.get(worker_id)
        if row is not None:
            row[3], row[5], row[8] = "stopped", self.lease_clock(), 0

    async def forget_workers(self, age: float) -> int:
        """`WorkerStore.forget_workers`."""
        await trio.lowlevel.checkpoint()
        before = self.lease_clock() - age
        gone = [w for w, row in self._workers.items() if row[5] < before]
        for worker_id in gone:
            del self._workers[worker_id]
        return len(gone)

    async def release(self, owner: str, run_id: str) -> None:
        """Drop ``owner``'s claim on ``run_id``, leaving the run for another runtime."""
        await trio.lowlevel.checkpoint()
        tx = self._tx
        tx.wrote_claims = False
        rules.release(tx, owner, run_id)
        if tx.wrote_claims:
            self._version += 1

    async def recover(
        self,
        owner: str,
        names: Collection[str],
        at: float,
        lease: float,
        max_recoveries: int,
        limit: int,
    ) -> list[Recovered]:
        """Claim or end runs whose owner's lease expired (durable rule 17)."""
        await trio.lowlevel.checkpoint()
        tx = self._tx
        tx.wrote_claims = False  # every run recover deals with has its claim written
        now = self.lease_clock()
        recovered = rules.recover(tx, owner, names, now, at, lease, max_recoveries, limit)
        if tx.wrote_claims:
            self._version += 1
        self._evict()
        return recovered

    # ------------------------------------------------------------------ commands

    async def post_command(
        self, run_id: str, kind: CommandKind, payload: JsonValue, reason: str | None, at: float
    ) -> int | Rejected:
        """Store a live command for a queued or running run, for its current or next attempt."""
        await trio.lowlevel.checkpoint()
        posted = rules.post_command(self._tx, run_id, kind, payload, reason, at)
        if not isinstance(posted, Rejected):
            self._version += 1
        return posted

    async def commands(self, run_ids: Collection[str], after: int = 0) -> list[StoredCommand]:
        """Stored commands of ``run_ids`` with an id greater than ``after``, oldest first."""
        await trio.lowlevel.checkpoint()
        wanted = set(run_ids)
        return [c for i, c in self._tx.commands.items() if i > after and c.run_id in wanted]

    async def states(self, run_ids: Collection[str]) -> dict[str, RunState]:
        """The committed states of those of ``run_ids`` this store holds."""
        await trio.lowlevel.checkpoint()
        rows = self._tx.rows
        return {run_id: rows[run_id].state for run_id in run_ids if run_id in rows}

    async def version(self) -> int:
        """A number that moves whenever anything is committed (what a runtime polls)."""
        await trio.lowlevel.checkpoint()
        return self._version


def _seq_of(entry: Entry) -> int:
    return entry[0]


def _last_offset(segment: Segment) -> int:
    return segment[1]


def _history_seq(entry: tuple[int, JsonValue]) -> int:
    return entry[0]


def _event(entry: Entry) -> RunEvent:
    seq, run_id, thread_id, generation, kind, state, detail, at = entry
    return RunEvent(
        seq=seq,
        run_id=run_id,
        thread_id=thread_id,
        generation=generation,
        kind=kind,
        state=state,
        detail=detail,
        at=at,
    )
