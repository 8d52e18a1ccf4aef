"""An idle serving loop looks at the store less and less often while nothing changes (up to
a bound), and at once again when something does: idling costs little, and a run submitted
elsewhere is still claimed within the poll bound. All on the virtual clock."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import trio
import trio.testing

from awaken_trio import RunContext, RunState
from awaken_trio.store import MemoryStore
from awaken_trio.worker import _serve
from awaken_trio.worker._cadence import IDLE_CEILING, serve_backoff
from tests.worker.worker_helpers import POLL, POLL_BOUND, serving, shared_runtime, until_state


def test_the_idle_looks_double_from_the_poll_up_to_their_ceiling() -> None:
    looks = serve_backoff(0.05, 0.9)
    assert [looks.wait(n) for n in range(5)] == pytest.approx([0.05, 0.1, 0.2, 0.3, 0.3])
    assert looks.wait(10_000) == pytest.approx(0.3)  # a worker idle for days
    assert not looks.spent(10_000)  # an idle loop never gives up


def test_the_serving_backoff_stays_within_a_third_of_the_lease_and_above_the_poll() -> None:
    assert serve_backoff(0.05, 30.0).ceiling == IDLE_CEILING
    assert serve_backoff(0.05, 0.6).ceiling == pytest.approx(0.2)
    assert serve_backoff(0.5, 0.6).ceiling == 0.5  # never faster than asked
    assert serve_backoff(0.05, None).ceiling == IDLE_CEILING


Running = RunState.Running


def is_running(state: RunState) -> bool:
    return isinstance(state, Running)


async def _wait(ctx: RunContext) -> object:
    await trio.sleep_forever()


async def test_an_idle_serving_loop_backs_off_and_wakes_at_once_for_new_work(
    shared_store: MemoryStore,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    passes: list[float] = []
    one_pass = _serve._one_pass

    async def counted(*args: Any) -> tuple[bool, float | None]:
        passes.append(trio.current_time())
        return await one_pass(*args)

    monkeypatch.setattr(_serve, "_one_pass", counted)
    idle = 30.0
    async with (
        shared_runtime(shared_store, bodies={"job": _wait}) as worker,
        shared_runtime(shared_store) as control,
        serving(worker),
    ):
        start = trio.current_time()
        await trio.sleep(idle)
        idle_passes = [t for t in passes if t >= start]
        # Every poll interval that would be idle / POLL = 600 passes; backing off, about
        # one a second once the wait has grown.
        assert len(idle_passes) <= idle / IDLE_CEILING + 10
        gaps = [b - a for a, b in itertools.pairwise(idle_passes)]
        assert max(gaps) <= IDLE_CEILING + POLL
        # New work from another runtime is still claimed within the poll bound.
        handle = await control.submit("job")
        assert await until_state(control, handle.run_id, is_running, POLL_BOUND) == Running(1)
        await control.cancel_run(handle.run_id)
