from __future__ import annotations

import trio

from awaken_trio import EndCause, LiveCommand, RunContext, RunState, Runtime


async def test_live_cancel_of_a_parked_run_commits_cancelled(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> object:
        await trio.sleep_forever()

    handle = await runtime.start(body, thread_id="t1", input={"q": 1})
    await trio.sleep(1)
    runtime.deliver(LiveCommand.Cancel(handle.run_id))
    assert await handle.wait() == RunState.Ended(EndCause.Cancelled())
    assert await runtime.state(handle.run_id) == RunState.Ended(EndCause.Cancelled())
