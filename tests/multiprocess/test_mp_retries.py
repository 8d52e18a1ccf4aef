"""Retries across real processes (SQLite, then PostgreSQL): a run waiting to retry is
anyone's to run, so another worker tries it again when the one it failed in is killed
during the backoff; and a recovery from a lost worker is not a try, so a run recovered
after a kill -9 keeps every retry its policy gives. Every assertion is about what the
store committed, plus what the bodies printed."""

from __future__ import annotations

import pytest
import trio

from awaken_trio import EndCause, RetryPolicy, RunState, Runtime
from tests.multiprocess.mp_harness import (
    Cluster,
    StoreAt,
    history,
    is_running,
    store_url,
    until_line,
    until_state,
)

pytestmark = pytest.mark.slow

NATURAL = RunState.Ended(EndCause.NaturalEnd())


@pytest.fixture
def db(durable_at: StoreAt) -> StoreAt:
    return durable_at


@pytest.fixture
def url(db: StoreAt) -> str:
    return store_url(db)


def _queued(state: RunState) -> bool:
    return isinstance(state, RunState.Queued)


async def test_a_run_waiting_to_retry_is_tried_again_by_another_worker(
    control: Runtime, cluster: Cluster
) -> None:
    w1 = await cluster.start("w1")
    handle = await control.submit(
        "failer", input={"fail_at": [1]}, run_id="r", retry=RetryPolicy(backoff=3.0)
    )
    await until_line(w1, "fail", "r", "1")
    await until_state(control, "r", _queued)
    await w1.kill()  # during the backoff: the one it failed in is gone
    w2 = await cluster.start("w2")
    await until_line(w2, "enter", "r", "2", seconds=30)
    with trio.fail_after(30):
        assert await handle.wait() == NATURAL
    record = await control.record("r")
    assert (record.retries, record.generation, record.result) == (1, 2, {"generation": 2})
    [retry] = [e for e in await history(control, "r") if e.kind == "retry_scheduled"]
    assert (retry.detail["code"], retry.detail["attempt"]) == ("flaky", 1)
    assert retry.detail["retry_at"] <= (await history(control, "r"))[-1].at


async def test_a_recovery_after_a_kill_is_not_a_try(control: Runtime, cluster: Cluster) -> None:
    w1 = await cluster.start("w1")
    handle = await control.submit(
        "failer",
        input={"hang_at": [1], "fail_at": [2]},
        run_id="r",
        retry=RetryPolicy(attempts=2, backoff=0.2),
    )
    await until_line(w1, "enter", "r", "1")
    await w1.kill()
    await until_state(control, "r", is_running)  # its owner is lost, not the run
    w2 = await cluster.start("w2")
    # Recovered (generation 2) and failed there: the one retry it has is still left.
    await until_line(w2, "fail", "r", "2", seconds=30)
    with trio.fail_after(30):
        assert await handle.wait() == NATURAL
    record = await control.record("r")
    assert (record.retries, record.generation) == (1, 3)
