"""The SQLite store, the PostgreSQL store and the shared memory store, given the same random
calls, answer the same and hold the same truth: every commit result, record, event, stored
command, claim decision, recovery and runnable list, call after call.

All run one rule engine (``awaken_trio.store._rules``) over three representations: frozen
values in dicts, JSON text in a file read through a cache and written in bulk, and JSON
text in PostgreSQL rows locked and written in bulk per transaction. So this checks what the
rules cannot: each text store's codec, its cache, its queued and batched writes and its
queries answer exactly as the values themselves do, far beyond the
contracts' hand-written cases (seeded, so a failure replays). Where the protocol leaves a
store free, the comparison is made loose on purpose: versions are only compared for moving,
and ``recover`` is given a limit it never reaches.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from awaken_trio import EndCause, FrozenDict, ResumeTicket, RunState
from awaken_trio.store import (
    UNSET,
    Claim,
    CommandKind,
    Commit,
    DescendantsEnd,
    DurableStore,
    EventDraft,
    Expect,
    Fence,
    MemoryStore,
    NewRun,
)
from awaken_trio.store.sqlite import _tx as _sqlite_tx
from awaken_trio.store.sqlite._store import SQLiteStore
from tests.wrapped_stores import LeaseClock

ROOTS = [f"r{i}" for i in range(12)]
CHILDREN = {
    **{f"c{i}": f"r{i}" for i in range(0, 12, 2)},
    **{f"d{i}": f"r{i}" for i in range(0, 12, 3)},
    **{f"g{i}": f"c{i}" for i in range(0, 12, 4)},
}
RUNS = [*ROOTS, *CHILDREN]
OWNERS = ["a", "b", "c"]
NAMES = ["job", "other", None]
THREADS = ["t0", "t1", "t2"]
CAUSES = [
    EndCause.NaturalEnd(),
    EndCause.Cancelled(),
    EndCause.Stopped("x"),
    EndCause.Failed("value_error", "bad"),
    EndCause.MaxSteps(),
]


# Most commits end no descendants; one in ten ends them, either way.
_DESCENDANTS_ENDS: tuple[DescendantsEnd | None, ...] = (
    *(None,) * 18,
    "parent_ended",
    "not_resumed",
)


def _root_of(run_id: str) -> str:
    while run_id in CHILDREN:
        run_id = CHILDREN[run_id]
    return run_id


class _Calls:
    """Random calls of the store protocol, drawn from one seed. The memory store (the
    reference) is peeked at so that many calls are ones that should land: fences and
    renewals name a claim that exists, creations name a run that does not."""

    def __init__(self, seed: int, reference: MemoryStore) -> None:
        self.rng = random.Random(seed)
        self.reference = reference
        self.command_ids: list[int] = []
        self.clock = 0.0

    def tick(self) -> float:
        self.clock += self.rng.uniform(0.0, 1.5)
        return self.clock

    def now(self) -> float:
        return round(self.clock + self.rng.choice([-1.0, 0.0, 0.0, 0.5, 1.0]), 3)

    def lease(self) -> float:
        """A lease duration (the stores measure it on their shared lease clock)."""
        return float(self.rng.randint(1, 8))

    def payload(self) -> Any:
        return self.rng.choice(
            [None, 1, "text", FrozenDict({"k": [1, {"n": None}]}), FrozenDict({"q": "\x00"})]
        )

    def ticket(self, run_id: str) -> ResumeTicket:
        rng = self.rng
        if rng.random() < 0.4:
            return ResumeTicket(
                f"s{rng.randint(0, 2)}",
                run_id,
                "t",
                "scheduled_action",
                FrozenDict({"wake_at": self.now() + rng.randint(-2, 4)}),
            )
        return ResumeTicket(f"c{rng.randint(0, 2)}", run_id, "t", "user_input", self.payload())

    def state(self, run_id: str) -> RunState:
        rng = self.rng
        kind = rng.choices(["queued", "running", "awaiting", "ended"], [3, 5, 3, 1])[0]
        if kind == "queued":
            return RunState.Queued()
        if kind == "running":
            return RunState.Running(rng.randint(1, 3))
        if kind == "awaiting":
            return RunState.Awaiting(self.ticket(run_id))
        return RunState.Ended(rng.choice(CAUSES))

    def fence(self, root: str) -> Fence | None:
        rng = self.rng
        held = self.reference._tx.claims.get(root)
        if held is not None and rng.random() < 0.6:
            return Fence(root, held.owner, held.epoch)
        if rng.random() < 0.3:
            return Fence(root, rng.choice(OWNERS), rng.randint(1, 4))
        return None

    def held(self, owner: str) -> dict[str, int]:
        rng = self.rng
        held = {r: c.epoch for r, c in self.reference._tx.claims.items() if c.owner == owner}
        for run_id in rng.sample(ROOTS, 2):
            if rng.random() < 0.3:
                held[run_id] = rng.randint(1, 4)
        return held

    def run_id(self) -> str:
        """Mostly a run that has not ended: an ended run refuses everything."""
        rows = self.reference._tx.rows
        live = [r for r in RUNS if r not in rows or not rows[r].state.is_ended]
        if live and self.rng.random() < 0.85:
            return self.rng.choice(live)
        return self.rng.choice(RUNS)

    def commit(self) -> Commit:
        rng = self.rng
        run_id = self.run_id()
        state = self.state(run_id)
        root = _root_of(run_id)
        expect = Expect()
        new_run = None
        exists = run_id in self.reference._tx.rows
        if (not exists and rng.random() < 0.8) or rng.random() < 0.05:
            expect = Expect(new=True)
            parent = CHILDREN.get(run_id)
            new_run = NewRun(
                rng.choice(THREADS),
                parent,
                rng.choice(NAMES) if parent is None else None,
                self.payload(),
                rng.choice([None, 5]),
                root if parent is not None else None,
            )
        elif rng.random() < 0.4:
            expect = Expect(
                generation=rng.choice([None, 0, 1, 2]),
                state=rng.choice([None, RunState.Running, RunState.Queued, RunState.Awaiting]),
                correlation_id=rng.choice([None, None, "c0", "s1"]),
            )
        consumed = tuple(rng.sample(self.command_ids, min(len(self.command_ids), 2)))
        return Commit(
            run_id=run_id,
            state=state,
            generation=rng.randint(0, 3),
            expect=expect,
            at=self.now(),
            new_run=new_run,
            result=self.payload(),
            checkpoint=rng.choice([UNSET, UNSET, None, self.payload()]),
            steps=rng.choice([None, 0, 3]),
            carried_messages=tuple(self.payload() for _ in range(rng.randint(0, 2))),
            carried_pause=rng.random() < 0.3,
            take_messages=rng.random() < 0.4,
            discarded_messages=tuple(self.payload() for _ in range(rng.randint(0, 1))),
            events=tuple(
                EventDraft("agent.note", FrozenDict({"i": i})) for i in range(rng.randint(0, 1))
            ),
            detail=FrozenDict({"source": "parity"}),
            announce=rng.random() < 0.85,
            resume_value=rng.choice([None, self.payload()]),
            resume_ticket=rng.choice([None, self.ticket(run_id)]),
            fence=self.fence(root),
            claim=(
                Claim(rng.choice(OWNERS), self.lease())
                if rng.random() < 0.35 and run_id == root
                else None
            ),
            release=rng.random() < 0.1,
            thread_guard=rng.random() < 0.5,
            consumed=consumed if rng.random() < 0.3 else (),
            end_descendants=rng.choice(_DESCENDANTS_ENDS),
        )


async def _same(memory: DurableStore, sqlite: DurableStore, what: str, call: Any) -> Any:
    expected = await call(memory)
    got = await call(sqlite)
    assert got == expected, what
    return got


async def _compare_records(memory: DurableStore, sqlite: DurableStore) -> None:
    for run_id in RUNS:
        await _same(memory, sqlite, f"load {run_id}", lambda s, r=run_id: s.load(r))
        await _same(memory, sqlite, f"events of {run_id}", lambda s, r=run_id: s.events_after(0, r))


async def _compare_everything(memory: DurableStore, sqlite: DurableStore, now: float) -> None:
    await _same(memory, sqlite, "all events", lambda s: s.events_after(0))
    await _same(memory, sqlite, "commands", lambda s: s.commands(RUNS))
    await _same(memory, sqlite, "states", lambda s: s.states(RUNS))
    for names in ({"job"}, {"job", "other"}):
        await _same(memory, sqlite, f"runnable {names}", lambda s, n=names: s.runnable(n, now, 100))


@pytest.fixture(params=["update-from", "row-at-a-time"])
async def stores(
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    lease_clock: LeaseClock,
) -> AsyncIterator[tuple[MemoryStore, SQLiteStore]]:
    # The row-at-a-time updates are what an SQLite older than 3.33 (no UPDATE ... FROM) gets.
    monkeypatch.setattr(_sqlite_tx, "UPDATE_FROM", request.param == "update-from")
    memory = MemoryStore(inline=False, shared=True, lease_clock=lease_clock)
    path = tmp_path / "runs.db"
    async with SQLiteStore(path, synchronous="normal", lease_clock=lease_clock) as sqlite:
        yield memory, sqlite


@pytest.fixture
def lease_clock() -> LeaseClock:
    """The one lease clock both stores read (the calls move it)."""
    return LeaseClock()


@pytest.mark.parametrize("seed", range(8))
async def test_the_sqlite_store_answers_as_the_memory_store_does(
    stores: tuple[MemoryStore, SQLiteStore], lease_clock: LeaseClock, seed: int
) -> None:
    memory, sqlite = stores
    await drive(memory, sqlite, lease_clock, seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
async def test_the_postgres_store_answers_as_the_memory_store_does(
    pg_url: str, lease_clock: LeaseClock, seed: int
) -> None:
    from awaken_trio.store.postgres._store import PostgresStore

    memory = MemoryStore(inline=False, shared=True, lease_clock=lease_clock)
    async with PostgresStore(pg_url, lease_clock=lease_clock) as postgres:
        await drive(memory, postgres, lease_clock, seed)


async def drive(
    memory: MemoryStore, sqlite: DurableStore, lease_clock: LeaseClock, seed: int
) -> None:
    """Make the same seeded calls of both stores, comparing every answer and, after each
    call, what they hold."""
    calls = _Calls(seed, memory)
    rng = calls.rng
    with trio.fail_after(120):
        for step in range(300):
            lease_clock.now = calls.tick()
            roll = rng.random()
            now = calls.now()
            where = f"seed {seed} step {step}"
            if roll < 0.6:
                batch = [calls.commit() for _ in range(rng.randint(1, 3))]
                await _same(memory, sqlite, f"{where}: apply", lambda s, b=batch: s.apply(b))
            elif roll < 0.72:
                run_id = calls.run_id()
                kind: CommandKind = rng.choice(["message", "pause", "wake", "cancel"])
                payload = calls.payload()
                reason = rng.choice([None, "why"])
                posted = await _same(
                    memory,
                    sqlite,
                    f"{where}: post_command",
                    lambda s, r=run_id, k=kind, p=payload, w=reason, n=now: s.post_command(
                        r, k, p, w, n
                    ),
                )
                if isinstance(posted, int):
                    calls.command_ids.append(posted)
            elif roll < 0.82:
                owner = rng.choice(OWNERS)
                held = calls.held(owner)
                lease = calls.lease()
                await _same(
                    memory,
                    sqlite,
                    f"{where}: renew",
                    lambda s, o=owner, h=held, u=lease: s.renew(o, h, u),
                )
            elif roll < 0.88:
                owner, run_id = rng.choice(OWNERS), rng.choice(ROOTS)
                await _same(
                    memory,
                    sqlite,
                    f"{where}: release",
                    lambda s, o=owner, r=run_id: s.release(o, r),
                )
            else:
                owner = rng.choice(OWNERS)
                names = rng.choice([frozenset({"job"}), frozenset(), frozenset({"job", "other"})])
                lease = calls.lease()
                most = rng.choice([0, 1, 3])
                expected = await memory.recover(owner, names, now, lease, most, 100)
                got = await sqlite.recover(owner, names, now, lease, most, 100)
                key = lambda r: r.record.run_id  # noqa: E731
                assert sorted(got, key=key) == sorted(expected, key=key), f"{where}: recover"
            await _compare_everything(memory, sqlite, now)
            if step % 10 == 9:
                await _compare_records(memory, sqlite)
