"""A seeded chaos run over real worker processes on one SQLite file: 1,000 runs, random
cancels, stops, pauses, resumes and messages from the test process, and one worker killed
with kill -9 partway. Afterwards every event the store holds is read back and checked.

The seed picks the workload and every decision of the test (which run, which operation,
which worker dies, whether it is replaced); the interleaving with the workers is real time
and varies. Rerun a failure's decisions with ``AWAKEN_CHAOS_SEED=<seed>``.

What the store cannot show from the outside: events carry a run's generation, not the
claim epoch they were committed under, and the claims table keeps only each run's current
claim, so "no commit from a fenced epoch" is checked as strongly as the events allow: after
a run's recovery (generation g committed with source ``recovery``), no event of an older
generation; after its terminal commit, no event at all.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import trio

from awaken_trio import (
    EventKind,
    LiveCommand,
    NotActive,
    NotAwaiting,
    RunAlreadyEnded,
    RunEvent,
    RunState,
    Runtime,
    StoreError,
    TicketMismatch,
)
from tests.multiprocess.mp_harness import (
    Cluster,
    StoreAt,
    Worker,
    committed,
    control_runtime,
    held_by,
    history,
    is_awaiting,
    open_cluster,
    store_url,
    terminal,
)
from tests.pg_server import PgServer

# Real worker processes: run by `.ci/run` (pytest -m slow), not by the README's command.
pytestmark = pytest.mark.slow

RUNS = 1000
WORKERS = 3
CONCURRENCY = 100  # parkers hold a slot until finished: room for all of them
OPERATIONS = 4000
SHARED_THREADS = 20


@attrs.define
class Plan:
    run_id: str
    body: str
    input: Any
    thread_id: str | None


@attrs.define
class Chaos:
    """What the test did, to check against what the store holds."""

    seed: int
    plans: list[Plan]
    submitted: list[str] = attrs.Factory(list)
    ended: set[str] = attrs.Factory(set)
    accepted: dict[str, list[str]] = attrs.Factory(lambda: defaultdict(list))
    finished: set[str] = attrs.Factory(set)  # parkers sent "finish": nothing more to send
    paused: list[str] = attrs.Factory(list)  # sent a Pause: to resume later
    done: dict[str, int] = attrs.Factory(lambda: defaultdict(int))
    victim: Worker | None = None
    victim_runs: dict[str, int] = attrs.Factory(dict)  # run_id -> generation at the kill
    replaced: bool = False

    def fail(self, message: str) -> str:
        return f"{message} (chaos seed {self.seed}: rerun with AWAKEN_CHAOS_SEED={self.seed})"


def plan(rng: random.Random) -> list[Plan]:
    plans = []
    for i in range(RUNS):
        thread = f"shared-{rng.randrange(SHARED_THREADS)}" if rng.random() < 0.1 else None
        if rng.random() < 0.25:
            plans.append(Plan(f"park-{i}", "parker", None, thread))
        else:
            steps = {"steps": rng.randint(1, 4), "delay": rng.uniform(0.05, 0.2)}
            plans.append(Plan(f"step-{i}", "inbox_stepper", steps, thread))
    return plans


async def submit_all(control: Runtime, chaos: Chaos) -> None:
    for p in chaos.plans:
        await submit_surely(control, p)
        chaos.submitted.append(p.run_id)
        if len(chaos.submitted) % 50 == 0:
            await trio.sleep(0.02)  # a steady stream rather than one burst


async def submit_surely(control: Runtime, p: Plan) -> None:
    """Submit ``p``, again while the store fails (the server restarting under it, the
    submit in flight answered "outcome unknown"): a submit under a fixed run id is
    idempotent, so a repeat either finds the run committed or commits it, as an application
    would do it."""
    with trio.fail_after(60):
        while True:
            try:
                await control.submit(p.body, input=p.input, run_id=p.run_id, thread_id=p.thread_id)
            except StoreError:
                await trio.sleep(0.1)
            else:
                return


async def note_if_ended(control: Runtime, chaos: Chaos, run_id: str) -> None:
    if isinstance(await control.state(run_id), RunState.Ended):
        chaos.ended.add(run_id)


async def send_message(control: Runtime, chaos: Chaos, run_id: str, text: str) -> bool:
    try:
        await control.send(LiveCommand.Message(run_id, text))
    except NotActive:
        await note_if_ended(control, chaos, run_id)
        return False
    chaos.accepted[run_id].append(text)
    return True


@attrs.frozen
class Faults:
    """What else happens partway, beyond the kill -9 at 40% of the runs submitted: a worker
    stalled (SIGSTOP, then SIGCONT ``stall`` seconds later) at 55%, and the server
    restarted (``restart``, blocking: run in a thread) at 70%."""

    stall: float | None = None
    restart: Callable[[], None] | None = None
    ready_within: float = 30.0
    """Seconds a worker started (the replacement too) may take to say it serves: many
    processes on a small machine start slowly."""


async def operate(
    control: Runtime,
    chaos: Chaos,
    rng: random.Random,
    cluster: Cluster,
    db: StoreAt,
    faults: Faults = Faults(),
) -> None:
    """Random operations on runs submitted so far; the kill -9 partway, and ``faults``."""
    stalled = restarted = False
    for n in range(OPERATIONS):
        if chaos.victim is None and len(chaos.submitted) >= RUNS * 0.4:
            await kill_one(control, chaos, rng, cluster, db, faults.ready_within)
        if faults.stall is not None and not stalled and len(chaos.submitted) >= RUNS * 0.55:
            stalled = True
            stalled_worker = rng.choice(cluster.alive)
            stalled_worker.stop()
            chaos.done["stalled"] += 1
            await trio.sleep(faults.stall)
            stalled_worker.cont()
        if faults.restart is not None and not restarted and len(chaos.submitted) >= RUNS * 0.7:
            restarted = True
            await trio.to_thread.run_sync(faults.restart)
            chaos.done["server restarted"] += 1
        live = [r for r in chaos.submitted[-300:] if r not in chaos.ended]
        if not live:
            await trio.sleep(0.01)
            continue
        run_id = rng.choice(live)
        roll = rng.random()
        if roll < 0.45:
            if run_id not in chaos.finished:
                await send_message(control, chaos, run_id, f"{run_id}:{n}")
        elif roll < 0.55:
            if (
                run_id.startswith("park-")
                and run_id not in chaos.finished
                and await send_message(control, chaos, run_id, "finish")
            ):
                chaos.finished.add(run_id)
        elif roll < 0.65:
            try:
                await control.send(LiveCommand.Pause(run_id))
            except NotActive:
                await note_if_ended(control, chaos, run_id)
            else:
                chaos.done["pause"] += 1
                chaos.paused.append(run_id)
        elif roll < 0.80:
            if chaos.paused:
                # Resume a run sent a Pause earlier (if the pause took effect by now).
                run_id = chaos.paused.pop(rng.randrange(len(chaos.paused)))
            try:
                await control.resume(run_id)
            except (NotAwaiting, TicketMismatch):
                await note_if_ended(control, chaos, run_id)
            else:
                chaos.done["resume"] += 1
        elif roll < 0.86:
            try:
                await control.cancel_run(run_id)
            except RunAlreadyEnded:
                pass
            else:
                chaos.done["cancel_run"] += 1
            chaos.ended.add(run_id)
        elif roll < 0.90:
            try:
                await control.stop_run(run_id, "chaos")
            except RunAlreadyEnded:
                pass
            else:
                chaos.done["stop_run"] += 1
            chaos.ended.add(run_id)
        else:
            await note_if_ended(control, chaos, run_id)


async def kill_one(
    control: Runtime,
    chaos: Chaos,
    rng: random.Random,
    cluster: Cluster,
    db: StoreAt,
    ready_within: float,
) -> None:
    victim = rng.choice(cluster.alive)
    await victim.kill()
    chaos.victim = victim
    # Its claims outlive it (until their lease lapses): the runs it owned when it died,
    # with their generations as of that moment (a run already recovered elsewhere by the
    # time of the read is held by its new owner, and is not counted).
    chaos.victim_runs.update(held_by(db, victim.pid))
    if rng.random() < 0.5:
        await cluster.start("replacement", concurrency=CONCURRENCY, ready_within=ready_within)
        chaos.replaced = True


async def finish_everything(control: Runtime, chaos: Chaos) -> None:
    """Send "finish" to parkers still running, cancel what is queued or awaiting, and
    wait for every run to end.

    The bound is for liveness, not speed: on PostgreSQL a run a killed owner held waits out
    its lease before recovery, and the store commits a quarter as fast as SQLite here. A
    run still open at the bound is named with its state, so a stuck run can be told from a
    slow one.
    """
    open_runs: list[str] = []
    try:
        await _finish_within(control, chaos, open_runs, seconds=180)
    except trio.TooSlowError:
        states = {run_id: await control.state(run_id) for run_id in open_runs[:20]}
        raise AssertionError(
            f"{len(open_runs)} runs still open after 180 s; the first: {states}"
        ) from None


async def _finish_within(
    control: Runtime, chaos: Chaos, open_runs: list[str], *, seconds: float
) -> None:
    with trio.fail_after(seconds):
        while True:
            open_runs.clear()
            for p in chaos.plans:
                if p.run_id in chaos.ended:
                    continue
                state = await control.state(p.run_id)
                if isinstance(state, RunState.Ended):
                    chaos.ended.add(p.run_id)
                    continue
                open_runs.append(p.run_id)
                if isinstance(state, RunState.Queued | RunState.Awaiting):
                    with contextlib.suppress(RunAlreadyEnded):
                        await control.cancel_run(p.run_id)
                elif (
                    p.body == "parker"
                    and p.run_id not in chaos.finished
                    and await send_message(control, chaos, p.run_id, "finish")
                ):
                    chaos.finished.add(p.run_id)
            if not open_runs:
                return
            await trio.sleep(0.1)


def describe(story: list[RunEvent]) -> list[str]:
    return [f"{e.seq} g{e.generation} {e.kind} {e.state!r} {dict(e.detail)}" for e in story]


def messages_kept(record_checkpoint: Any, record_result: Any) -> list[Any]:
    """The messages a run's body kept: its result's if it returned, else its checkpoint's."""
    for value in (record_result, record_checkpoint):
        if isinstance(value, dict) and "messages" in value:
            return list(value["messages"])
    return []


async def test_chaos_over_three_worker_processes(durable_at: StoreAt) -> None:
    await _chaos(durable_at, workers=WORKERS, concurrency=CONCURRENCY)


async def test_chaos_over_sixteen_worker_processes_on_one_postgresql_server(
    pg_server: PgServer, pg_url: str
) -> None:
    """Sixteen workers, each its own process with its own pool, as sixteen machines would
    be, on one server: besides the kill -9, one worker stalled past its lease (SIGSTOP,
    then SIGCONT: its late commits are fenced) and the server restarted under them."""
    await _chaos(
        pg_url,
        workers=16,
        concurrency=20,  # 320 slots: room for every parker, as the three workers have
        faults=Faults(stall=6.0, restart=pg_server.restart, ready_within=180.0),
    )


async def _chaos(db: StoreAt, *, workers: int, concurrency: int, faults: Faults = Faults()) -> None:
    url = store_url(db)
    seed = int(os.environ.get("AWAKEN_CHAOS_SEED", random.randrange(2**32)))
    print(f"chaos seed {seed} (rerun with AWAKEN_CHAOS_SEED={seed})")
    rng = random.Random(seed)
    chaos = Chaos(seed, plan(rng))
    began = time.perf_counter()
    async with control_runtime(url) as control, open_cluster(url) as cluster:
        for i in range(workers):
            await cluster.start(
                f"w{i + 1}", concurrency=concurrency, ready_within=faults.ready_within
            )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(submit_all, control, chaos)
            await operate(control, chaos, rng, cluster, db, faults)
        await finish_everything(control, chaos)
        driven = time.perf_counter() - began
        events = await history(control)
        records = {p.run_id: await control.record(p.run_id) for p in chaos.plans}
    recovered = check(chaos, events, records)
    ends: dict[str, int] = defaultdict(int)
    for e in terminal(events):
        ends[type(e.state.cause).__name__] += 1  # type: ignore[attr-defined]
    print(
        f"chaos: {RUNS} runs, {len(events)} events, {dict(chaos.done)}, ends {dict(ends)},"
        f" {len({e.run_id for e in committed(events) if is_awaiting(e.state)})} runs paused,"
        f" {len(recovered)} runs recovered,"
        f" {sum(map(len, chaos.accepted.values()))} messages accepted;"
        f" killed {chaos.victim.name if chaos.victim else None} owning"
        f" {len(chaos.victim_runs)} runs, replaced: {chaos.replaced}; driven in {driven:.1f} s"
    )


def check(chaos: Chaos, events: list[RunEvent], records: dict[str, Any]) -> set[str]:
    """Check every run's story; the runs that were recovered."""
    seqs = [e.seq for e in events]
    assert seqs == sorted(set(seqs)), chaos.fail("one store-wide increasing seq")
    by_run: dict[str, list[RunEvent]] = defaultdict(list)
    for event in events:
        by_run[event.run_id].append(event)
    assert set(by_run) == {p.run_id for p in chaos.plans}, chaos.fail("events of unknown runs")

    problems: list[str] = []
    recovered: set[str] = set()
    for run_id, story in by_run.items():
        ends = terminal(story)
        if len(ends) != 1:
            # The whole story, so that a failure says how the run came to it.
            told = "\n    ".join(describe(story))
            problems.append(f"{run_id}: {len(ends)} terminal commits; its story:\n    {told}")
            continue
        if story[-1] != ends[0]:
            problems.append(f"{run_id}: events after its terminal commit {story[-3:]}")
        generations = [e.generation for e in story]
        if generations != sorted(generations):
            problems.append(f"{run_id}: generations go down {generations}")
        for event in committed(story):
            if event.detail.get("source") == "recovery":
                recovered.add(run_id)
                older = [e for e in story if e.seq > event.seq and e.generation < event.generation]
                if older:
                    problems.append(f"{run_id}: events of a fenced attempt {older}")
        if records[run_id].state != ends[0].state:
            problems.append(f"{run_id}: record {records[run_id].state} != {ends[0].state}")

        # No message lost: each accepted one is received by an attempt (its boundary's
        # commit says so) or discarded by the end, never both, in send order; what the body
        # kept it received. A message an attempt received and was then lost with it (before
        # its next checkpoint) is received again, only by a later generation.
        record = records[run_id]
        kept = messages_kept(record.checkpoint, record.result)
        receipts = [
            (e.generation, m)
            for e in story
            if e.kind == EventKind.COMMITTED
            for m in e.detail.get("received", ())
        ]
        received = list(dict.fromkeys(m for _, m in receipts))
        for message in received:
            generations = [g for g, m in receipts if m == message]
            if generations != sorted(set(generations)):
                problems.append(f"{run_id}: {message!r} received twice by one attempt")
        discarded = [
            m
            for e in story
            if e.kind == EventKind.MESSAGES_DISCARDED
            for m in e.detail.get("messages", ())
        ]
        accepted = chaos.accepted.get(run_id, [])
        lost = [m for m in accepted if m not in received and m not in discarded]
        if lost:
            problems.append(
                f"{run_id}: messages lost {lost} (received {received}, discarded {discarded})"
            )
        if received + discarded != accepted:
            problems.append(
                f"{run_id}: messages out of order or both received and discarded: sent"
                f" {accepted}, received {received}, discarded {discarded}"
            )
        unreceived = iter(received)
        if not all(m in unreceived for m in kept):  # kept is a subsequence of received
            problems.append(f"{run_id}: kept {kept} but received {received}")

    # The killed worker's runs were recovered elsewhere (a new attempt, generation + 1:
    # recovery commits it Running, or Queued behind a busy thread), or ended.
    went_on: set[str] = set()
    for run_id, generation in chaos.victim_runs.items():
        story = by_run[run_id]
        if any(e.state == RunState.Running(generation + 1) for e in committed(story)):
            went_on.add(run_id)
        elif not terminal(story):
            problems.append(
                f"{run_id}: owned by the killed worker, neither recovered nor ended:"
                f" {describe(story)}"
            )
    if chaos.victim_runs:
        shown = [
            f"{run_id} (generation {generation} at the kill): {describe(by_run[run_id])}"
            for run_id, generation in list(chaos.victim_runs.items())[:3]
        ]
        assert went_on, chaos.fail(
            f"no run of the {len(chaos.victim_runs)} the killed worker held was recovered;"
            " the first:\n" + "\n".join(shown)
        )
    assert not problems, chaos.fail(f"{len(problems)} problems:\n" + "\n".join(problems[:30]))
    return recovered
