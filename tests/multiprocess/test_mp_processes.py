"""Durable runs across real processes on one SQLite file: worker processes started here are
killed (kill -9), stalled (SIGSTOP) and continued, while the test process submits, controls
and reads the runs through its own runtime on the same file. Every assertion is about what
the store committed (states, records, checkpoints, events), plus what the bodies printed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from awaken_trio import (
    EndCause,
    EventKind,
    JsonValue,
    LiveCommand,
    RunContext,
    RunEvent,
    RunState,
    Runtime,
    UnknownRun,
)
from tests.multiprocess.mp_harness import (
    CANCELLED,
    LEASE,
    NATURAL,
    POLL,
    ROOT,
    TICK,
    Cluster,
    StoreAt,
    Worker,
    claims,
    committed,
    history,
    is_awaiting,
    is_ended,
    is_running,
    store_url,
    terminal,
    until_line,
    until_said,
    until_state,
    wait_for,
    writable_now,
)

# Real worker processes: run by `.ci/run` (pytest -m slow), not by the README's command.
pytestmark = pytest.mark.slow

CONTROL = Path(__file__).resolve().parent / "control_process.py"

# "Within a few poll intervals": what a signal from another process may take to reach a
# body (the owner polls every POLL; a loaded machine gets some slack).
SIGNAL_BOUND = 15 * POLL

NOT_RESUMED = RunState.Ended(EndCause.Stopped("not resumed by parent"))


@pytest.fixture
def db(durable_at: StoreAt) -> StoreAt:
    """The test's store: an SQLite file, then a PostgreSQL database."""
    return durable_at


@pytest.fixture
def url(db: StoreAt) -> str:
    return store_url(db)


def check_story(events: list[RunEvent]) -> RunEvent:
    """One run's events: exactly one terminal commit, the last event; generations never go
    down. Returns the terminal event."""
    ends = terminal(events)
    assert len(ends) == 1, ends
    assert events[-1] == ends[0], events[events.index(ends[0]) :]
    generations = [e.generation for e in events]
    assert generations == sorted(generations), generations
    return ends[0]


def recovery_of(events: list[RunEvent], generation: int) -> RunEvent:
    """The commit that started ``generation`` by recovering the run from a lost owner."""
    found = [
        e
        for e in committed(events)
        if e.state == RunState.Running(generation) and e.detail.get("source") == "recovery"
    ]
    assert len(found) == 1, committed(events)
    return found[0]


def after(events: list[RunEvent], event: RunEvent) -> list[RunEvent]:
    return [e for e in events if e.seq > event.seq]


def printed_at(line_words: list[str]) -> float:
    """The time a body printed a line (its last word)."""
    return float(line_words[-1])


async def stall(worker: Worker, db: StoreAt) -> None:
    """SIGSTOP ``worker`` at a moment it does not hold the file's write lock (a process
    stopped inside a write transaction would block every other one until continued)."""
    for _ in range(200):
        worker.stop()
        if writable_now(db):
            return
        worker.cont()
        await trio.sleep(TICK)
    raise AssertionError(f"{worker.name} always held the write lock when stopped")


async def control_process(url: str, *args: str) -> list[str]:
    """Run ``control_process.py`` once (another process of the system) and return its
    lines; a failure if it fails."""
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, str(CONTROL), url, *args],
            capture_stdout=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd=str(ROOT),
        )
    return done.stdout.decode().splitlines()


# ---------------------------------------------------------------------------- 1. kill -9


async def test_a_worker_killed_mid_run_has_its_run_recovered_from_the_checkpoint(
    control: Runtime, cluster: Cluster
) -> None:
    await cluster.start_many(["w1", "w2"])
    handle = await control.submit("loud_stepper", input={"steps": 20, "delay": 0.05}, run_id="r")
    w1, _ = await until_said(cluster, "enter", "r", "1")
    (w2,) = [w for w in cluster.workers if w is not w1]
    await until_line(w1, "step", "r", "1", "3")
    await w1.kill()
    at_kill = await control.record("r")
    assert at_kill.state == RunState.Running(1), "killed mid-run"
    checkpoint: Any = at_kill.checkpoint
    done_by_w1 = checkpoint["step"]
    assert done_by_w1 >= 3

    with trio.fail_after(30):
        assert await handle.wait() == NATURAL

    record = await control.record("r")
    assert record.generation == 2
    assert record.result == {"steps": 20, "generation": 2}
    # The second attempt started from the checkpoint: it did only the remaining steps.
    assert record.checkpoint == {"step": 20, "generations": [1, 2]}
    assert record.steps == 20
    (enter,) = w2.said("enter", "r", "2")
    assert enter.words[3] == str(done_by_w1), "generation 2 saw the committed checkpoint"
    assert not w1.said("enter", "r", "2")

    events = await history(control, "r")
    end = check_story(events)
    assert end.generation == 2
    recovery = recovery_of(events, 2)
    assert all(e.generation == 2 for e in after(events, recovery))
    steps_in_1 = [
        e for e in committed(events) if e.generation == 1 and e.state == RunState.Running(1)
    ]
    assert len(steps_in_1) == 1 + done_by_w1  # its start, then one commit per step


# ---------------------------------------------------------------------------- 2. SIGSTOP


async def test_a_stalled_owner_is_fenced_and_its_late_commits_are_rejected(
    control: Runtime, cluster: Cluster, db: StoreAt
) -> None:
    await cluster.start_many(["w1", "w2"])
    handle = await control.submit("loud_stepper", input={"steps": 40, "delay": 0.05}, run_id="r")
    w1, _ = await until_said(cluster, "enter", "r", "1")
    (w2,) = [w for w in cluster.workers if w is not w1]
    await until_line(w1, "step", "r", "1", "2")
    await stall(w1, db)
    owner_pid, stalled_epoch, lease_until = claims(db)["r"]
    assert owner_pid == w1.pid

    # Past its lease, the run is recovered by the other worker.
    await until_state(control, "r", lambda s: s == RunState.Running(2), seconds=10 * LEASE)
    new_pid, new_epoch, _ = claims(db)["r"]
    assert (new_pid, new_epoch) == (w2.pid, stalled_epoch + 1)  # w1's claim is superseded
    entered = await until_line(w2, "enter", "r", "2")
    recovered_from = int(entered.words[3])
    await until_line(w2, "step", "r", "2", str(recovered_from + 2))

    # Continued, the stalled owner wakes up with an attempt it no longer owns: it stops.
    w1.cont()
    continued_at = time.time()
    gone = await until_line(w1, "exit", "r", "1", seconds=5)
    # Cancelled by its lost claim, or told by the fenced boundary (a StoreError).
    assert gone.words[3] in {"cancelled", "StoreError"}, gone
    stopped_after = printed_at(gone.words) - continued_at
    print(f"the fenced attempt stopped {stopped_after * 1000:.1f} ms after SIGCONT ({gone.text})")

    with trio.fail_after(30):
        assert await handle.wait() == NATURAL
    record = await control.record("r")
    assert record.result == {"steps": 40, "generation": 2}
    assert record.checkpoint == {"step": 40, "generations": [1, 2]}

    events = await history(control, "r")
    end = check_story(events)
    assert end.generation == 2
    recovery = recovery_of(events, 2)
    assert recovery.at >= lease_until, "recovered only once the stalled owner's lease lapsed"
    # No commit of the fenced attempt after the recovery: its late commits were rejected.
    assert [e for e in after(events, recovery) if e.generation != 2] == []
    committed_by_1 = [
        e for e in committed(events) if e.generation == 1 and e.state == RunState.Running(1)
    ]
    assert len(committed_by_1) == 1 + recovered_from
    # Every step the stalled body saw returned was one the store had accepted before.
    steps_seen_by_1 = [int(line.words[3]) for line in w1.said("step", "r", "1")]
    assert max(steps_seen_by_1) <= recovered_from, (steps_seen_by_1, recovered_from)
    assert w1.alive, "the fenced worker goes on serving"
    assert stopped_after < 5 * LEASE


# ---------------------------------------------------------------------------- 3. cancel / stop


@pytest.mark.parametrize("how", ["cancel_run", "stop_run"])
async def test_ending_a_run_owned_by_another_process_commits_at_once(
    control: Runtime, cluster: Cluster, how: str
) -> None:
    await cluster.start_many(["w1", "w2"])
    # "a" lingers 0.3 s after it sees the cancellation; "b" waits for their thread.
    await control.submit("probe", input={"linger": 0.3}, run_id="a", thread_id="t")
    owner, _ = await until_said(cluster, "enter", "a")
    await control.submit("probe", run_id="b", thread_id="t")
    assert await control.state("b") == RunState.Queued()

    asked = time.time()
    if how == "cancel_run":
        state = await control.cancel_run("a")
        wanted = CANCELLED
    else:
        state = await control.stop_run("a", "operator")
        wanted = RunState.Ended(EndCause.Stopped("operator"))
    returned = time.time()
    assert state == wanted
    assert await control.state("a") == wanted  # committed before the call returned
    assert returned - asked < 1.0

    observed = await until_line(owner, "observed", "a", "1")
    latency = printed_at(observed.words) - returned
    print(f"{how}: returned in {(returned - asked) * 1000:.1f} ms, seen in {latency * 1000:.1f} ms")
    assert latency < SIGNAL_BOUND, f"the owner saw the end {latency * 1000:.0f} ms later"

    # Their thread stayed occupied until a's attempt had stopped: b entered after it exited.
    exited = await until_line(owner, "exit", "a", "1")
    _, entered = await until_said(cluster, "enter", "b", "1")
    assert printed_at(entered.words) >= printed_at(exited.words)

    events = await history(control, "a")
    end = check_story(events)
    assert end.state == wanted
    assert end.generation == 1
    assert end.detail.get("source") == how

    assert await control.cancel_run("b") == CANCELLED
    check_story(await history(control, "b"))


async def test_cancelling_a_parent_owned_by_another_process_ends_its_children_first(
    control: Runtime, cluster: Cluster
) -> None:
    await cluster.start("w1")
    await control.submit("parent_of_two", run_id="p")

    async def progressed() -> bool:
        return bool((await control.record("p")).checkpoint == {"generation": 1})

    await wait_for(progressed, "the parent's first progress, after its children started")
    for child in ("p-child-0", "p-child-1"):
        assert is_running(await control.state(child))
    assert await control.cancel_run("p") == CANCELLED
    events = await history(control)
    ends = {e.run_id: e for e in terminal(events)}
    assert set(ends) == {"p", "p-child-0", "p-child-1"}
    for child in ("p-child-0", "p-child-1"):
        assert ends[child].state == CANCELLED
        assert ends[child].seq < ends["p"].seq
        check_story(await history(control, child))
    check_story(await history(control, "p"))


# ---------------------------------------------------------------------------- 4. nobody alive


async def test_a_run_cancelled_while_no_worker_is_alive_never_runs(
    control: Runtime, cluster: Cluster
) -> None:
    await control.submit("probe", run_id="a")
    asked = time.time()
    assert await control.cancel_run("a") == CANCELLED
    assert time.time() - asked < 1.0

    w1 = await cluster.start("w1")
    # A run submitted after it runs: the worker had every chance to take "a" first.
    await control.submit("probe", run_id="later")
    await until_line(w1, "enter", "later")
    assert not w1.said("enter", "a")
    events = await history(control, "a")
    check_story(events)
    assert [e.state for e in committed(events)] == [RunState.Queued(), CANCELLED]


async def test_a_run_cancelled_after_its_owner_was_killed_never_runs_again(
    control: Runtime, cluster: Cluster
) -> None:
    w1 = await cluster.start("w1")
    await control.submit("probe", run_id="a", thread_id="t")
    await until_line(w1, "enter", "a", "1")
    await w1.kill()
    asked = time.time()
    assert await control.cancel_run("a") == CANCELLED  # its owner's lease still runs
    assert time.time() - asked < 1.0

    w2 = await cluster.start("w2")
    # A run on the same thread can only start once the dead owner's lease has lapsed, which
    # is when "a" would have been recovered.
    await control.submit("probe", run_id="later", thread_id="t")
    await until_line(w2, "enter", "later", seconds=10 * LEASE)
    assert not w2.said("enter", "a")
    events = await history(control, "a")
    end = check_story(events)
    assert end.state == CANCELLED
    assert {e.generation for e in events} <= {0, 1}


# ---------------------------------------------------------------------------- 5. from anywhere


async def test_pause_resume_messages_and_events_across_processes(
    control: Runtime, cluster: Cluster, url: str
) -> None:
    await cluster.start_many(["w1", "w2"])
    handle = await control.submit("parker", run_id="p")
    followed_here: list[RunEvent] = []

    async def follow_here() -> None:
        with trio.fail_after(60):
            followed_here.extend([event async for event in control.events("p", follow=True)])

    async with trio.open_nursery() as nursery:
        followed_there: list[str] = []

        async def follow_there() -> None:
            followed_there.extend(await control_process(url, "follow", "p"))

        nursery.start_soon(follow_here)
        nursery.start_soon(follow_there)

        await until_state(control, "p", is_running)
        for message in ("m1", "m2", "m3"):
            await control.send(LiveCommand.Message("p", message))

        async def holds(*messages: str) -> bool:
            checkpoint: Any = (await control.record("p")).checkpoint
            return checkpoint is not None and checkpoint["messages"] == list(messages)

        await wait_for(lambda: holds("m1", "m2", "m3"), "the messages in the checkpoint")
        await control.send(LiveCommand.Pause("p"))
        with trio.fail_after(30):
            paused = await handle.wait()
        assert is_awaiting(paused)
        assert paused.ticket.reason == "manual_pause"  # type: ignore[attr-defined]

        # Resumed by another process, the run goes on in a worker; messages from yet
        # other processes reach it in order.
        assert await control_process(url, "resume", "p") == ["resumed p 2"]
        await until_state(control, "p", lambda s: s == RunState.Running(2))
        for message in ("m4", "m5", "finish"):
            assert await control_process(url, "send", "p", message) == [f"sent p {message}"]
        final = await until_state(control, "p", is_ended)
        assert final == NATURAL
        # Both followers return by themselves after the terminal event.

    record = await control.record("p")
    assert record.result == {"messages": ["m1", "m2", "m3", "m4", "m5", "finish"], "generation": 2}
    events = await history(control, "p")
    check_story(events)
    assert followed_here == events
    assert [json.loads(line) for line in followed_there] == [
        {"seq": e.seq, "kind": e.kind, "generation": e.generation, "state": repr(e.state)}
        for e in events
    ]
    states = [e.state for e in committed(events)]
    assert RunState.Queued() in states  # the resume, queued for a worker
    assert states[-1] == NATURAL


async def test_a_persons_answer_survives_the_kill_of_the_owner_running_it(
    control: Runtime, cluster: Cluster
) -> None:
    await cluster.start_many(["w1", "w2"])
    asked = await control.submit("asker", run_id="ask")
    with trio.fail_after(30):
        assert is_awaiting(await asked.wait())
    resumed = await control.resume("ask", "yes")  # no body here: a worker takes it
    owner, line = await until_said(cluster, "answered", "ask", "2")
    assert line.words[3:5] == ['"yes"', "ask"]
    await owner.kill()
    (other,) = [w for w in cluster.workers if w is not owner]

    with trio.fail_after(30):
        final = await resumed.wait()
    assert final == NATURAL  # not Awaiting: the recovered attempt did not ask again
    (again,) = other.said("answered", "ask", "3")
    assert again.words[3:5] == ['"yes"', "ask"]
    record = await control.record("ask")
    assert record.result == {"answer": "yes", "ticket": "ask", "generation": 3}
    events = await history(control, "ask")
    check_story(events)
    recovery_of(events, 3)


# ---------------------------------------------------------------------------- 6. children


async def test_children_a_recovered_parent_does_not_take_back_end_before_it(
    control: Runtime, cluster: Cluster
) -> None:
    # parent_of_two starts its children only in its first attempt: the recovered attempt
    # finds them handed back (rule 22) and never takes them back, so they end
    # Stopped("not resumed by parent") before it does.
    w1 = await cluster.start("w1")
    await control.submit("parent_of_two", input={"finish_on_recovery": True}, run_id="p")

    async def progressed() -> bool:
        return bool((await control.record("p")).checkpoint == {"generation": 1})

    await wait_for(progressed, "the parent's first progress")
    for child in ("p-child-0", "p-child-1"):
        assert is_running(await control.state(child))
    await cluster.start("w2")
    await w1.kill()

    final = await until_state(control, "p", is_ended, seconds=10 * LEASE)
    assert final == NATURAL
    record = await control.record("p")
    assert record.result == {"recovered_in": 2}
    assert record.generation == 2

    events = await history(control)
    recovery = recovery_of([e for e in events if e.run_id == "p"], 2)
    [parent_end] = terminal([e for e in events if e.run_id == "p"])
    for child in ("p-child-0", "p-child-1"):
        assert await control.state(child) == NOT_RESUMED
        mine = [e for e in events if e.run_id == child]
        end = check_story(mine)
        handed = [e for e in mine if e.state == RunState.Queued()]
        assert len(handed) == 1
        assert handed[0].seq < recovery.seq, "handed back in the recovery's transaction"
        assert recovery.seq < end.seq < parent_end.seq
    check_story([e for e in events if e.run_id == "p"])


TREE = ("t.node", "t.node.g", "t.ask")
HANDED_BACK_IN_RECOVERY = {"source": "recovery", "reason": "handed back with its parent"}


async def _tree_standing(control: Runtime) -> None:
    async def standing() -> bool:
        if (await control.record("t")).checkpoint != {"generation": 1}:
            return False
        try:
            grandchild = await control.record("t.node.g")
        except UnknownRun:  # its parent has not started it yet
            return False
        return bool(grandchild.checkpoint == {"generations": [1]})

    await wait_for(standing, "the tree to stand (the parent's and the grandchild's progress)")


async def _check_taken_back(control: Runtime, ticket: Any) -> None:
    """The tree finished in its parent's second attempt, every child taken back."""
    assert await until_state(control, "t", is_ended, seconds=10 * LEASE) == NATURAL
    record = await control.record("t")
    assert record.generation == 2
    assert record.result == {"generation": 2, "node": "NaturalEnd", "asked": "Awaiting"}
    for run_id in ("t.node", "t.node.g"):
        node = await control.record(run_id)
        assert node.state == NATURAL
        assert (node.generation, node.result) == (2, {"generations": [1, 2]})
    events = await history(control)
    [parent_end] = terminal([e for e in events if e.run_id == "t"])
    # The awaiting child kept its ticket across the parent's attempts (one Awaiting commit,
    # generation 1), and ended with the attempt that took it back.
    asked = [e for e in events if e.run_id == "t.ask"]
    assert [e.state for e in asked if isinstance(e.state, RunState.Awaiting)] == [ticket]
    assert check_story(asked).state == CANCELLED
    for run_id in TREE:
        end = check_story([e for e in events if e.run_id == run_id])
        assert end.seq < parent_end.seq
    check_story([e for e in events if e.run_id == "t"])


async def test_a_tree_with_fixed_child_ids_survives_a_deploy_by_sigterm(
    control: Runtime, cluster: Cluster
) -> None:
    w1 = await cluster.start("w1")
    await control.submit("tree", run_id="t")
    await _tree_standing(control)
    ticket = await control.state("t.ask")
    assert is_awaiting(ticket)
    await w1.terminate()
    # Released: the root and its running descendants back to Queued, nothing ended.
    assert await control.state("t") == RunState.Queued()
    assert await control.state("t.node") == RunState.Queued()
    assert await control.state("t.node.g") == RunState.Queued()
    assert await control.state("t.ask") == ticket
    await cluster.start("w2")
    await _check_taken_back(control, ticket)


async def test_a_tree_with_fixed_child_ids_survives_a_kill_of_its_worker(
    control: Runtime, cluster: Cluster
) -> None:
    w1 = await cluster.start("w1")
    await control.submit("tree", run_id="t")
    await _tree_standing(control)
    ticket = await control.state("t.ask")
    await cluster.start("w2")
    await w1.kill()
    await _check_taken_back(control, ticket)
    # Recovered, not released: the descendants went back to Queued in the recovery.
    events = await history(control)
    recovery = recovery_of([e for e in events if e.run_id == "t"], 2)
    for run_id in ("t.node", "t.node.g"):
        [handed] = [e for e in events if e.run_id == run_id and e.state == RunState.Queued()]
        assert dict(handed.detail) == {
            "source": "recovery",
            "reason": "handed back with its parent",
        }
        assert handed.seq < recovery.seq


# ---------------------------------------------------------------------------- 7. ctx.sleep


async def test_a_durable_sleep_is_resumed_by_another_worker_when_due(
    control: Runtime, cluster: Cluster
) -> None:
    w1 = await cluster.start("w1")
    await control.submit("napper", input={"seconds": 2.0}, run_id="n")
    asleep = await until_state(control, "n", is_awaiting)
    ticket = asleep.ticket  # type: ignore[attr-defined]
    assert ticket.reason == "scheduled_action"
    wake_at = ticket.payload["wake_at"]
    await w1.kill()  # the worker that would have woken it
    await cluster.start("w2")

    final = await until_state(control, "n", is_ended, seconds=30)
    assert final == NATURAL
    assert (await control.record("n")).result == {"woke_in": 2}
    events = await history(control, "n")
    check_story(events)
    (woke,) = [e for e in committed(events) if e.state == RunState.Running(2)]
    assert woke.detail.get("source") == "scheduled"
    assert woke.at >= wake_at, "never before it is due"
    assert woke.at - wake_at < 3.0


# ---------------------------------------------------------------------------- 8. max_recoveries


async def test_a_run_whose_owner_is_lost_too_often_ends_indeterminate(
    control: Runtime, cluster: Cluster
) -> None:
    limit = 2
    await cluster.start_many(["w1", "w2"], max_recoveries=limit)
    await control.submit("probe", run_id="m")
    for generation in range(1, limit + 2):
        owner, _ = await until_said(cluster, "enter", "m", str(generation), seconds=10 * LEASE)
        await cluster.start(f"w{generation + 2}", max_recoveries=limit)
        await owner.kill()

    final = await until_state(control, "m", is_ended, seconds=10 * LEASE)
    assert final == RunState.Ended(EndCause.Indeterminate(f"owner lost {limit + 1} times"))
    events = await history(control, "m")
    end = check_story(events)
    assert end.generation == limit + 1
    starts = [e.generation for e in committed(events) if is_running(e.state)]
    assert starts == list(range(1, limit + 2))
    assert not cluster.said("enter", "m", str(limit + 2))


# ---------------------------------------------------------------------------- 9. agent


async def test_a_killed_agent_is_recovered_from_its_committed_transcript(
    control: Runtime, cluster: Cluster
) -> None:
    w1 = await cluster.start("w1")
    handle = await control.submit("agent", input="do the work", run_id="ag")

    async def second_tool_started() -> bool:
        return any(
            e.kind == "agent.tool_started" and e.detail.get("tool_call_id") == "call-1"
            for e in await history(control, "ag")
        )

    await wait_for(second_tool_started, "the second tool call to start")
    await cluster.start("w2")
    await w1.kill()
    at_kill: Any = (await control.record("ag")).checkpoint
    tool_results = [m for m in at_kill["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_results] == ["call-0"]
    assert at_kill["steps"] == 1

    with trio.fail_after(30):
        assert await handle.wait() == NATURAL
    record = await control.record("ag")
    assert record.generation == 2
    result: Any = record.result
    assert result["text"] == "done after 2 tool results"
    final: Any = record.checkpoint
    assert result["steps"] == final["steps"]
    assert final["messages"][: len(at_kill["messages"])] == at_kill["messages"]
    tools = {
        m["tool_call_id"]: json.loads(m["content"])
        for m in final["messages"]
        if m["role"] == "tool"
    }
    assert tools == {
        "call-0": {"worked": 0, "generation": 1},
        "call-1": {"worked": 1, "generation": 2},
    }
    events = await history(control, "ag")
    end = check_story(events)
    assert end.generation == 2
    recovery_of(events, 2)
    assert EventKind.COMMITTED in {e.kind for e in events}


# ---------------------------------------------------------------------------- one per thread


async def test_a_lost_run_is_not_recovered_onto_a_thread_another_attempt_holds(
    control: Runtime, cluster: Cluster, db: StoreAt
) -> None:
    """Rule 18 across processes: one active attempt per thread. A run whose owner died
    leaves its thread free once its lease lapses; a run started there meanwhile (here, in
    the test process) holds it, and the lost run's recovery must wait for it."""
    w1 = await cluster.start("w1")
    await control.submit("probe", run_id="a", thread_id="t")
    await until_line(w1, "enter", "a", "1")
    await w1.kill()

    async def lapsed() -> bool:
        await trio.lowlevel.checkpoint()
        return claims(db)["a"][2] < time.time()

    await wait_for(lapsed, "the dead owner's lease to lapse", seconds=10 * LEASE)
    entered = trio.Event()

    async def here(ctx: RunContext) -> JsonValue:
        entered.set()
        await trio.sleep_forever()

    b = await control.start(here, run_id="b", thread_id="t")
    assert await control.state("b") == RunState.Running(1)
    with trio.fail_after(10):
        await entered.wait()

    w2 = await cluster.start("w2")
    # A run on another thread started by w2 shows w2 has made a serving pass, and each
    # pass deals with lost runs (recovery commits Running(2)) before it takes queued runs.
    await control.submit("probe", run_id="elsewhere")
    await until_line(w2, "enter", "elsewhere")
    recovered_meanwhile = await control.state("a")
    assert await control.cancel_run("b") == CANCELLED
    with trio.fail_after(10):
        assert await b.wait() == CANCELLED
    await until_line(w2, "enter", "a", "2", seconds=10 * LEASE)

    events = await history(control)
    (b_end,) = terminal([e for e in events if e.run_id == "b"])
    # While b held the thread, a's recovery waited Queued (its claim released) instead of
    # starting: its generation 2 starts only after b's end.
    assert recovered_meanwhile in (RunState.Running(1), RunState.Queued()), (
        f"run a was recovered onto thread t while run b held it: {recovered_meanwhile!r}"
    )
    a_events = [e for e in events if e.run_id == "a"]
    (a_second,) = [e for e in committed(a_events) if e.state == RunState.Running(2)]
    assert a_second.seq > b_end.seq


# ---------------------------------------------------------------------------- fork


async def test_a_fork_made_from_a_control_process_runs_in_a_worker_from_its_checkpoint(
    control: Runtime, cluster: Cluster
) -> None:
    """The control process has no bodies: its fork of an ended run waits Queued, and a
    worker process with the body runs it from the checkpoint the source had committed as
    of the chosen event. The source is untouched."""
    await cluster.start("w1")
    await control.submit("stepper", input={"steps": 3, "delay": 0.01}, run_id="src")
    assert await until_state(control, "src", is_ended) == NATURAL
    events = await history(control, "src")
    source_before = await control.record("src")
    # The event that committed progress step 1.
    at = next(e.seq for e in committed(events) if e.detail.get("source") == "boundary")
    handle = await control.fork("src", at=at, new_run_id="fork")
    assert handle.run_id == "fork"
    assert await until_state(control, "fork", is_ended) == NATURAL
    record = await control.record("fork")
    assert record.forked_from == {"run_id": "src", "seq": at}
    assert record.result == {"steps": 3, "generation": 1}
    assert record.checkpoint["step"] == 3

    # It started from step 1's checkpoint: it committed steps 2 and 3 only.
    def progress(story: list[RunEvent]) -> int:
        return len([e for e in committed(story) if e.detail.get("source") == "boundary"])

    assert progress(events) == 3
    assert progress(await history(control, "fork")) == 2
    assert await control.record("src") == source_before
