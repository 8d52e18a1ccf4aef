"""How many scheduler passes and task steps a run costs: the kernel adds none a bare Trio
task in a nursery of its own would not take before its end is known.

Counted with a `trio.abc.Instrument`, so the figures are exact and independent of the
machine: a step is one resumption of one task (``before_task_step``), a pass one turn of
the scheduler's loop, which waits for I/O once per turn (``after_io_wait``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable

import trio
import trio.testing

from awaken_trio import EndCause, LiveCommand, RunContext, RunState, Runtime, open_runtime
from awaken_trio.store import MemoryStore


class StepCounter(trio.abc.Instrument):
    """Task steps by task name, and scheduler passes, while ``counting``."""

    def __init__(self) -> None:
        self.counting = False
        self.steps: Counter[str] = Counter()
        self.passes = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.counting:
            self.steps[task.name] += 1

    def after_io_wait(self, timeout: float) -> None:
        if self.counting:
            self.passes += 1


async def _counted(counter: StepCounter, call: Callable[[], Awaitable[RunState]]) -> RunState:
    """``call``'s answer, with ``counter`` counting the passes and steps it takes."""
    trio.lowlevel.add_instrument(counter)
    try:
        counter.counting = True
        state = await call()
        counter.counting = False
    finally:
        trio.lowlevel.remove_instrument(counter)
    return state


async def _cancelled(rt: Runtime, counter: StepCounter) -> RunState:
    """A parked run's end after a cancel, counted from the cancel on."""
    handle = await rt.start(parked)
    await trio.testing.wait_all_tasks_blocked()

    async def cancel() -> RunState:
        rt.deliver(LiveCommand.Cancel(handle.run_id))
        return await handle.wait()

    return await _counted(counter, cancel)


async def parked(ctx: RunContext) -> None:
    await trio.sleep_forever()


async def trivial(ctx: RunContext) -> int:
    return 1


async def test_a_cancelled_parked_run_answers_its_waiter_in_two_passes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A pass for the actor (the body sees the cancel, the end is committed) and one for
    # the waiter (its wait returns): none in between for the attempt's empty nursery.
    counter = StepCounter()
    async with open_runtime() as rt:
        state = await _cancelled(rt, counter)
    assert state == RunState.Ended(EndCause.Cancelled())
    # As many as a bare task's scope.cancel() and an Event set back to the canceller.
    assert counter.passes == 2, (counter.passes, counter.steps)


async def test_a_trivial_run_is_answered_before_its_actor_leaves_its_nursery(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # ``execute``: a pass for the caller's checkpoint (then it commits and spawns), one for
    # the actor (it runs the body and commits the end), one for the caller to read it.
    # The actor's last step (leaving its empty nursery) shares that pass: nobody waits
    # for it.
    counter = StepCounter()
    async with open_runtime() as rt:
        state = await _counted(counter, lambda: rt.execute(trivial))
    assert state == RunState.Ended(EndCause.NaturalEnd())
    assert counter.passes == 3, (counter.passes, counter.steps)


async def test_through_the_mailbox_a_cancel_costs_only_the_mailbox_hop_more(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Through group commit the end's commit is a hand-over to the mailbox task: a pass
    # for the actor, two for the mailbox (woken; the store's apply is a checkpoint, and
    # the commit's effects answer the waiter), one for the waiter.
    counter = StepCounter()
    async with open_runtime(MemoryStore(inline=False)) as rt:
        state = await _cancelled(rt, counter)
    assert state == RunState.Ended(EndCause.Cancelled())
    assert counter.passes == 4, (counter.passes, counter.steps)
