"""Journaled steps across real processes: a worker killed (kill -9) in the middle of a run;
the worker that recovers the run does not run again the steps the dead one committed, and
runs again the one it had not committed. On SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from awaken_trio import EventKind, Runtime
from tests.multiprocess.mp_harness import (
    NATURAL,
    Cluster,
    StoreAt,
    history,
    is_ended,
    store_url,
    until_line,
    until_state,
    wait_for,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def url(durable_at: StoreAt) -> str:
    return store_url(durable_at)


async def test_a_committed_step_is_not_run_again_after_kill_9_and_an_uncommitted_one_is(
    control: Runtime, cluster: Cluster
) -> None:
    first = await cluster.start("w1")
    handle = await control.submit("journaled", input={"steps": 3, "hang_at": 1}, run_id="j")
    # Step 0 ran and was committed; step 1 runs (and hangs) when the worker dies.
    await until_line(first, "effect", "j", "1", "1")

    async def step_zero_committed() -> bool:
        return any(e.kind == EventKind.STEP for e in await history(control, "j"))

    await wait_for(step_zero_committed, "step 0 of run 'j' to be committed")
    await first.kill()

    second = await cluster.start("w2")
    assert await until_state(control, "j", is_ended) == NATURAL
    result = (await control.record(handle.run_id)).result
    assert [step["i"] for step in result] == [0, 1, 2]
    assert result[0]["generation"] == 1  # committed by the worker that died
    assert result[1]["generation"] == result[2]["generation"] > 1
    ran_by_second = [(line.words[1], line.words[3]) for line in second.said("effect")]
    assert ran_by_second == [("j", "1"), ("j", "2")]  # never step 0 again
    steps = [
        (e.detail["index"], e.generation) for e in await history(control, "j") if e.kind == "step"
    ]
    assert [index for index, _ in steps] == [0, 1, 2]
    assert steps[0][1] == 1
