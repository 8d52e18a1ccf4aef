"""`AsyncClient` from asyncio and from anyio on either backend: its answers, its lifetime,
and what cancelling one of its calls does (it abandons the wait and changes no run)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from awaken_trio import (
    EndCause,
    LiveCommand,
    RetryPolicy,
    RunState,
    RuntimeClosed,
    StoreError,
    ThreadBusy,
    UnknownRun,
)
from awaken_trio.client import AsyncClient
from tests.client.client_helpers import POLL, TICK, WAIT, sqlite_url, until, until_async

QUEUED = RunState.Queued()
NATURAL = RunState.Ended(EndCause.NaturalEnd())
CANCELLED = RunState.Ended(EndCause.Cancelled())


def idle(client: AsyncClient) -> Callable[[], bool]:
    """Whether nothing the client was handed is still running in its Trio thread."""
    return lambda: client._thread.calls_in_flight == 0


async def parked(client: AsyncClient, run_id: str) -> None:
    """Wait until a ``parker`` run has committed its first boundary in the worker: from
    then on it commits nothing until it is told something."""
    try:
        with anyio.fail_after(WAIT):
            while True:
                if (await client.record(run_id)).checkpoint is not None:
                    return
                await anyio.sleep(TICK)
    except TimeoutError:
        raise AssertionError(f"{run_id} never parked") from None


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_calls_answer_and_a_cancelled_wait_leaves_its_run_and_the_trio_side_alone(
    backend: str,
) -> None:
    async def main() -> None:
        async with AsyncClient() as client:
            run_id = await client.submit("job", input={"n": 1})
            assert await client.state(run_id) == QUEUED
            with anyio.move_on_after(0.05) as scope:  # an anyio cancel scope gives up
                await client.wait(run_id)
            assert scope.cancelled_caught
            await until_async(idle(client), "the abandoned wait to stop in the Trio thread")
            events = await client.events(run_id)
            assert [e.state for e in events] == [QUEUED]  # the run is untouched
            with pytest.raises(TimeoutError, match=run_id):
                await client.wait(run_id, timeout=0)
            assert await client.cancel_run(run_id) == CANCELLED
            assert await client.wait(run_id, timeout=0) == CANCELLED
            assert [e.state for e in await client.events(run_id, after=events[-1].seq)] == [
                CANCELLED
            ]
            with pytest.raises(UnknownRun):
                await client.record("nope")
        with pytest.raises(RuntimeClosed):
            await client.state(run_id)

    anyio.run(main, backend=backend)


def test_a_wait_cancelled_by_asyncio_wait_for_leaves_a_running_run_as_it_was(
    served_url: str,
) -> None:
    async def main() -> None:
        async with AsyncClient(served_url, poll=POLL) as client:
            run_id = await client.submit("parker")
            await parked(client, run_id)
            before = await client.events(run_id)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(client.wait(run_id), 0.05)
            await until_async(idle(client), "the abandoned wait to stop in the Trio thread")
            assert await client.events(run_id) == before
            assert isinstance(await client.state(run_id), RunState.Running)
            # An explicit task.cancel() too.
            task = asyncio.create_task(client.wait(run_id))
            await until_async(lambda: client._thread.calls_in_flight == 1, "the wait to start")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await until_async(idle(client), "the cancelled wait to stop in the Trio thread")
            assert await client.events(run_id) == before
            # The run still answers to control.
            await client.send(LiveCommand.Message(run_id, "finish"))
            assert await client.wait(run_id, timeout=WAIT) == NATURAL
            assert (await client.record(run_id)).result == {
                "messages": ["finish"],
                "generation": 1,
            }

    asyncio.run(main())


def test_closing_ends_the_waits_in_flight_with_runtime_closed(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "runs.db")

    async def main() -> None:
        async with AsyncClient(url, poll=POLL) as client:
            run_id = await client.submit("job")
            task = asyncio.create_task(client.wait(run_id))
            await until_async(lambda: client._thread.calls_in_flight == 1, "the wait to start")
        with pytest.raises(RuntimeClosed):
            await task
        async with AsyncClient(url) as again:
            assert await again.state(run_id) == QUEUED
        await again.aclose()  # again: nothing happens

    asyncio.run(main())


def test_an_error_opening_the_store_is_raised_from_aenter(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not an SQLite database" * 200)

    async def main() -> None:
        client = AsyncClient(sqlite_url(junk))
        with pytest.raises(StoreError):
            async with client:
                raise AssertionError("the block must not run")
        with pytest.raises(RuntimeClosed):
            await client.submit("job")

    asyncio.run(main())


def test_a_submit_cancelled_after_its_commit_landed_stays_committed() -> None:
    async def main() -> None:
        async with AsyncClient() as client:
            task = asyncio.create_task(client.submit("job", run_id="kept"))
            await asyncio.sleep(0)  # one step: the task hands the submit over and waits
            # Hold the event loop (no await) until the Trio side has committed and handed
            # back its answer: the cancel below then comes after the commit, unread.
            until(idle(client), "the submit to finish in the Trio thread")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # Cancelling the call did not undo its commit, and repeating it is safe.
            assert await client.state("kept") == QUEUED
            assert await client.submit("job", run_id="kept") == "kept"

    asyncio.run(main())


def test_a_client_whose_opening_is_cancelled_closes_by_itself() -> None:
    async def main() -> None:
        client = AsyncClient()
        opening = asyncio.create_task(client.__aenter__())
        await asyncio.sleep(0)  # the thread has started; the runtime opens, or has opened
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening
        thread = client._thread._thread
        assert thread is not None
        await until_async(lambda: not thread.is_alive(), "the client's thread to end")
        with pytest.raises(RuntimeClosed):
            await client.submit("job")

    asyncio.run(main())


def test_fork_answers_with_the_new_run_id() -> None:
    async def main() -> tuple[str, object, str]:
        async with AsyncClient() as client:
            source = await client.submit("job", run_id="src")
            fork = await client.fork(source, new_run_id="f")
            record = await client.record(fork)
            with pytest.raises(UnknownRun):
                await client.fork("nobody")
            return fork, record.forked_from, record.name or ""

    fork, origin, name = asyncio.run(main())
    assert (fork, name) == ("f", "job")
    assert origin == {"run_id": "src", "seq": 1}


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_submit_takes_the_busy_thread_policies(backend: str) -> None:
    async def main() -> None:
        async with AsyncClient() as client:
            await client.submit("job", run_id="m1", thread_id="chat")
            with pytest.raises(ThreadBusy):
                await client.submit("job", run_id="m2", thread_id="chat", if_busy="reject")
            await client.submit("job", run_id="m3", thread_id="chat", if_busy="supersede")
            superseded = RunState.Ended(EndCause.Stopped("superseded"))
            assert await client.state("m1") == superseded
            assert await client.state("m3") == QUEUED

    anyio.run(main, backend=backend)


def test_submit_takes_the_runs_time_limits_and_a_delayed_start() -> None:
    async def main() -> None:
        async with AsyncClient() as client:
            now = time.time()
            run_id = await client.submit("job", deadline=now + 50, not_before=now + 10)
            record = await client.record(run_id)
            assert (record.deadline, record.not_before) == (now + 50, now + 10)
            late = await client.submit("job", timeout=0.05)
            assert await client.wait(late, timeout=30) == RunState.Ended(
                EndCause.Stopped("deadline")
            )

    anyio.run(main, backend="asyncio")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_submit_takes_a_retry_policy(backend: str) -> None:
    async def main() -> tuple[RetryPolicy | None, int]:
        async with AsyncClient() as client:
            await client.submit("job", run_id="rt", retry=RetryPolicy(attempts=2))
            record = await client.record("rt")
            return record.retry, record.retries

    assert anyio.run(main, backend=backend) == (RetryPolicy(attempts=2), 0)
