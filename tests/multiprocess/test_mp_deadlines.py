"""A run's deadline across real processes (SQLite, then PostgreSQL): it survives the kill -9
of the worker running it, and a worker ends a run past its deadline whether it runs it or
not. Every assertion is about what the store committed, plus what the bodies printed."""

from __future__ import annotations

import time

import pytest
import trio

from awaken_trio import EndCause, RunState, Runtime
from tests.multiprocess.mp_harness import (
    Cluster,
    StoreAt,
    history,
    is_ended,
    is_running,
    store_url,
    terminal,
    until_line,
    until_state,
)

pytestmark = pytest.mark.slow

DEADLINE = RunState.Ended(EndCause.Stopped("deadline"))


@pytest.fixture
def db(durable_at: StoreAt) -> StoreAt:
    return durable_at


@pytest.fixture
def url(db: StoreAt) -> str:
    return store_url(db)


async def test_a_deadline_survives_the_kill_of_the_worker_running_the_run(
    control: Runtime, cluster: Cluster
) -> None:
    w1 = await cluster.start("w1")
    handle = await control.submit(
        "loud_stepper", input={"steps": 10_000, "delay": 0.05}, run_id="r", timeout=2.0
    )
    deadline = (await control.record("r")).deadline
    assert deadline is not None
    await until_line(w1, "step", "r", "1", "1")
    await w1.kill()
    await until_state(control, "r", is_running)  # its owner is lost, not the run
    # No worker runs it while its deadline passes; the next one to find it ends it at
    # once: its attempt starts past the deadline, and its body never runs.
    await trio.sleep(max(0.0, deadline + 0.2 - time.time()))  # (a wall-clock time)
    w2 = await cluster.start("w2")
    with trio.fail_after(30):
        assert await handle.wait() == DEADLINE
    (end,) = terminal(await history(control, "r"))
    assert dict(end.detail) == {"source": "deadline"}
    assert not w2.said("enter", "r")


async def test_a_recovered_run_keeps_its_deadline_and_meets_it_in_its_new_attempt(
    control: Runtime, cluster: Cluster
) -> None:
    w1 = await cluster.start("w1")
    handle = await control.submit(
        "loud_stepper", input={"steps": 10_000, "delay": 0.05}, run_id="r", timeout=6.0
    )
    deadline = (await control.record("r")).deadline
    assert deadline is not None
    await until_line(w1, "step", "r", "1", "1")
    await w1.kill()
    w2 = await cluster.start("w2")
    await until_line(w2, "enter", "r", "2")  # recovered well before its deadline
    await until_state(control, "r", is_ended, seconds=30)
    assert await handle.wait() == DEADLINE
    (end,) = terminal(await history(control, "r"))
    assert end.generation == 2
    assert deadline <= end.at
    (left,) = w2.said("exit", "r", "2")
    assert left.words[3] == "cancelled"  # interrupted in its await, at the deadline
