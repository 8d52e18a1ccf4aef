"""Small helpers the test modules share: reading the event log and bounded waits."""

from __future__ import annotations

import trio

from awaken_trio import RunContext, RunEvent, RunHandle, RunState, Runtime


async def history(runtime: Runtime, run_id: str | None = None) -> list[RunEvent]:
    """The committed events so far (of one run, or of all), oldest first."""
    return [event async for event in runtime.events(run_id, follow=False)]


def terminal_commits(events: list[RunEvent]) -> list[RunEvent]:
    return [e for e in events if e.kind == "committed" and isinstance(e.state, RunState.Ended)]


async def snapshot(runtime: Runtime, run_id: str) -> tuple[RunState, int]:
    """The run's committed state and the size of the whole log: 'nothing changed' checks."""
    return await runtime.state(run_id), len(await history(runtime))


async def reach(event: trio.Event) -> None:
    """Wait for a point the body signals; a failure instead of a hang if it never comes."""
    with trio.fail_after(600):
        await event.wait()


async def settle(handle: RunHandle) -> RunState:
    """The attempt's committed end; a failure instead of a hang if it never comes."""
    with trio.fail_after(600):
        return await handle.wait()


async def start_parked(runtime: Runtime, **options: object) -> RunHandle:
    """Start a run whose body parks forever, and return once the body is running."""
    entered = trio.Event()

    async def parked(ctx: RunContext) -> object:
        entered.set()
        await trio.sleep_forever()

    handle = await runtime.start(parked, **options)  # type: ignore[arg-type]
    await reach(entered)
    return handle
