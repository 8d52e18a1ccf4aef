"""Hosts whose clocks are wrong, on one SQLite file in real processes: leases are measured
by the store's clock (the machine's wall clock, read inside each transaction), never by a
runtime's ``clock=``. A worker whose clock runs an hour ahead takes no live claim and
starts nothing on a busy thread; one whose clock runs an hour behind still recovers a dead
owner's run."""

from __future__ import annotations

import pytest
import trio

from awaken_trio import LiveCommand, RunState, Runtime
from tests.multiprocess.mp_harness import (
    LEASE,
    NATURAL,
    Cluster,
    StoreAt,
    claims,
    committed,
    history,
    store_url,
    terminal,
    until_line,
    until_state,
    wait_for,
)

# Real worker processes: run by `.ci/run` (pytest -m slow), not by the README's command.
pytestmark = pytest.mark.slow

HOUR = 3600.0


@pytest.fixture
def db(durable_at: StoreAt) -> StoreAt:
    """The test's store: an SQLite file, then a PostgreSQL database."""
    return durable_at


@pytest.fixture
def url(db: StoreAt) -> str:
    return store_url(db)


async def test_a_worker_whose_clock_runs_ahead_takes_no_live_claim(
    control: Runtime, cluster: Cluster, db: StoreAt
) -> None:
    w1 = await cluster.start("w1")
    handle = await control.submit("parker", run_id="r", thread_id="t")
    await until_state(control, "r", lambda s: s == RunState.Running(1))
    owner, epoch, _ = claims(db)["r"]
    assert owner == w1.pid
    # Serving (its first pass, recovery included, is done when it says ready) with a
    # clock an hour ahead: by that clock, w1's lease looks long expired.
    ahead = await cluster.start("ahead", clock_offset=HOUR)
    _, _, lease_until = claims(db)["r"]
    # A run on the busy thread waits for it, whoever serves it.
    await control.submit("stepper", input={"steps": 1}, run_id="r2", thread_id="t")

    async def renewed_past_the_old_lease() -> bool:
        await trio.lowlevel.checkpoint()
        return claims(db)["r"][2] > lease_until + LEASE

    # Once the lease the ahead worker first saw would have lapsed, it has had every chance.
    await wait_for(renewed_past_the_old_lease, "w1 to renew its claim past the old lease")
    assert claims(db)["r"][:2] == (owner, epoch)
    assert await control.state("r") == RunState.Running(1)
    assert await control.state("r2") == RunState.Queued()

    await control.send(LiveCommand.Message("r", "finish"))
    assert await handle.wait() == NATURAL
    assert (await control.record("r")).result == {"messages": ["finish"], "generation": 1}
    assert await until_state(control, "r2", lambda s: s == NATURAL) == NATURAL
    (end_of_r,) = terminal(await history(control, "r"))
    started_r2 = [
        e for e in committed(await history(control, "r2")) if e.state == RunState.Running(1)
    ]
    assert started_r2, "r2 ran"
    assert started_r2[0].seq > end_of_r.seq, "never two attempts on one thread"
    assert ahead.alive


async def test_a_worker_whose_clock_runs_behind_recovers_a_dead_owners_run(
    control: Runtime, cluster: Cluster, db: StoreAt
) -> None:
    w1 = await cluster.start("w1")
    handle = await control.submit("loud_stepper", input={"steps": 20, "delay": 0.05}, run_id="r")
    await until_line(w1, "step", "r", "1", "2")
    await w1.kill()
    behind = await cluster.start("behind", clock_offset=-HOUR)
    # Within a few leases of the machine's clock, whatever the worker's own clock says.
    await until_state(control, "r", lambda s: s == RunState.Running(2), seconds=10 * LEASE)
    await until_line(behind, "enter", "r", "2")
    assert await handle.wait() == NATURAL
    assert (await control.record("r")).result == {"steps": 20, "generation": 2}
