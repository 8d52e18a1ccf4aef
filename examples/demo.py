"""A tour of awaken_trio: every control path, each ending in one committed state.

Run it with ``python examples/demo.py``. It keeps its runs in a SQLite file, the embedded
durable store (in a temporary directory, removed at the end), and: cancels one run live,
pauses one and resumes it from its checkpoint, stops one for a host reason, cancels a
parent with a tree of children, cancels a queued run before it ever runs, prints a run's
committed event trail; then shows what durability adds: a run that outlives the runtime
that started it and continues in another from its checkpoint, a run steered from another
runtime, and a durable sleep.
"""

from __future__ import annotations

import tempfile

import trio

from awaken_trio import (
    EndCause,
    LiveCommand,
    RunContext,
    RunRecord,
    RunState,
    Runtime,
    open_runtime,
)


async def count_to_ten(ctx: RunContext) -> object:
    """Ten steps of work; each step commits its progress at a boundary."""
    progress = ctx.checkpoint or {"step": 0}
    notes: list[object] = []
    while progress["step"] < 10:
        await trio.sleep(0.01)  # stands for a model or tool call: a cancellation point
        progress = {"step": progress["step"] + 1}
        notes += await ctx.boundary(progress)
    return {"done": True, "resumed_with": ctx.resume_value, "notes": notes}


async def hang(ctx: RunContext) -> object:
    """A tool call that never returns; only cancellation ends it."""
    await trio.sleep_forever()


async def grandchild(ctx: RunContext) -> object:
    await trio.sleep_forever()


async def child(ctx: RunContext) -> object:
    await ctx.start_child(grandchild, run_id=f"{ctx.run_id}.grandchild")
    await trio.sleep_forever()


async def parent(ctx: RunContext) -> object:
    await ctx.start_child(child, run_id="tree.child-1")
    await ctx.start_child(child, run_id="tree.child-2")
    # A failing child comes back as a value; it never tears the parent down.
    failed = await ctx.run_child(flaky, run_id="tree.flaky")
    print(f"  parent saw its flaky child end as {failed}")
    # A failure is never silent: the library also logs it once, at ERROR with its
    # traceback, to the "awaken_trio" logger (on stderr here, where no handler is set).
    print("  (its traceback is logged once at ERROR on the 'awaken_trio' logger)")
    await trio.sleep_forever()


async def flaky(ctx: RunContext) -> object:
    raise ConnectionError("tool endpoint refused the connection")


def show(label: str, state: RunState) -> None:
    print(f"{label:<34} {state}")


async def tour(runtime: Runtime) -> None:
    print("1. live cancel of an attempt stuck in a call that never returns")
    stuck = await runtime.start(hang, run_id="stuck")
    await trio.sleep(0.05)
    runtime.deliver(LiveCommand.Cancel("stuck", reason="user pressed stop"))
    show("   stuck", await stuck.wait())

    print("2. pause at a boundary, then resume from the checkpoint")
    worker = await runtime.start(count_to_ten, run_id="worker", thread_id="conversation-1")
    await trio.sleep(0.035)
    runtime.deliver(LiveCommand.Message("worker", "keep it short"))
    runtime.deliver(LiveCommand.Pause("worker"))
    paused = await worker.wait()
    show("   worker (paused)", paused)
    print(f"   checkpoint kept: {(await runtime.record('worker')).checkpoint}")
    resumed = await runtime.resume("worker", "go on")
    show("   worker (resumed, generation 2)", await resumed.wait())
    print(f"   result: {(await runtime.record('worker')).result}")

    print("3. a host policy stops a run")
    spender = await runtime.start(hang, run_id="spender")
    show("   spender", await runtime.stop_run(spender.run_id, "token budget exhausted"))

    print("4. cancelling a parent cancels its whole tree, children first")
    tree = await runtime.start(parent, run_id="tree")
    await trio.sleep(0.05)
    runtime.deliver(LiveCommand.Cancel("tree"))
    show("   tree", await tree.wait())
    for run_id in (
        "tree.child-1",
        "tree.child-1.grandchild",
        "tree.child-2",
        "tree.child-2.grandchild",
        "tree.flaky",
    ):
        show(f"   {run_id}", await runtime.state(run_id))

    print("5. a queued run is cancelled before it ever runs")
    first = await runtime.start(hang, run_id="first", thread_id="conversation-2")
    queued = await runtime.start(hang, run_id="queued", thread_id="conversation-2")
    show("   queued (before)", await runtime.state("queued"))
    show("   queued", await runtime.cancel_run(queued.run_id))
    show("   first (cancel_run while running)", await runtime.cancel_run(first.run_id))

    print("6. late answers fail closed")
    try:
        await runtime.resume("spender", "too late")
    except Exception as exc:
        print(f"   resume after stop -> {type(exc).__name__}: {exc}")
    assert await runtime.state("spender") == RunState.Ended(
        EndCause.Stopped("token budget exhausted")
    )

    print("7. the committed event trail of 'worker'")
    async for event in runtime.events("worker"):
        print(f"   #{event.seq:<3} gen {event.generation} {event.kind:<10} {event.state}")


async def durable(url: str) -> None:
    print("9. a named run outlives its runtime: released at shutdown, resumed elsewhere")
    async with open_runtime(url, bodies={"count": count_to_ten}) as first:
        await first.start(count_to_ten, run_id="long-job")
        await trio.sleep(0.045)  # a few steps are committed
    record = await _record(url, "long-job")
    print(f"   after the first runtime closed: {record.state}, checkpoint {record.checkpoint}")
    async with (
        open_runtime(url, bodies={"count": count_to_ten}) as second,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(second.serve)
        async for event in second.events("long-job"):  # follows until the end
            last = event
        show("   long-job (served by another runtime)", last.state)
        record = await second.record("long-job")
        print(f"   generation {record.generation}, result {record.result}")

        print("10. steering a run that another runtime executes")
        async with open_runtime(url) as elsewhere:
            handle = await elsewhere.submit("count", run_id="steered")
            async for event in elsewhere.events("steered"):  # until a runtime runs it
                if isinstance(event.state, RunState.Running):
                    break
            await elsewhere.send(LiveCommand.Message("steered", "from afar"))
            await elsewhere.send(LiveCommand.Pause("steered"))
            show("   steered (paused from afar)", await handle.wait())
            show("   steered (cancelled from afar)", await elsewhere.cancel_run("steered"))

        print("11. a durable sleep: the attempt ends, the run wakes when it is due")
        napping = await second.start(nap, run_id="napping")
        show("   napping (asleep)", await napping.wait())
        async for event in second.events("napping"):  # follows it to its end
            last = event
        show("   napping (woke and finished)", last.state)
        nursery.cancel_scope.cancel()


async def nap(ctx: RunContext) -> object:
    if ctx.resumed_ticket is None:
        await ctx.sleep(0.1)  # commits Awaiting(scheduled_action); nothing stays in memory
    return {"woke_in_generation": ctx.generation}


async def _record(url: str, run_id: str) -> RunRecord:
    async with open_runtime(url) as reader:
        return await reader.record(run_id)


async def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{directory}/demo.db"
        async with open_runtime(url) as runtime:
            await tour(runtime)
            survivor = await runtime.start(hang, run_id="survivor")
        print("8. leaving the runtime stops what is still running (it has no name to resume by)")
        show("   survivor", await survivor.wait())
        await durable(url)


if __name__ == "__main__":
    trio.run(main)
