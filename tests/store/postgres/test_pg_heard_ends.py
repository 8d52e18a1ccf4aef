"""Ends announced in a commit's NOTIFY, as the runtime takes them: the owner stops the
attempt a notice names without reading the store first (its looks made blind here), and
never lets a notice end an attempt other than the one its end was committed against (its
claim epoch, and the seq the end follows). The store's side (what a commit announces, what
the listener reads) is in ``test_pg_listen.py``. Real time, bounded by ``trio.fail_after``."""

from __future__ import annotations

from collections.abc import Collection

import trio

from awaken_trio import EndCause, RunContext, RunState, Runtime, open_runtime
from awaken_trio._core import HeardEnd
from awaken_trio.store import ControlLook
from awaken_trio.store.postgres._store import PostgresStore

CANCELLED = RunState.Ended(EndCause.Cancelled())


async def parked(ctx: RunContext) -> object:
    await trio.sleep_forever()
    return None  # pragma: no cover


def _blind(store: PostgresStore) -> None:
    """Make ``store``'s looks find nothing, so a notice is the only way its runtime can
    learn of an end committed elsewhere."""

    async def look_at_control(
        run_ids: Collection[str], after: int, running: Collection[str], *, anyway: bool
    ) -> ControlLook:
        await trio.lowlevel.checkpoint()
        return ControlLook(version=0)

    store.look_at_control = look_at_control  # type: ignore[method-assign]


def _store(runtime: Runtime) -> PostgresStore:
    store = runtime._supervisor.kernel.store
    assert isinstance(store, PostgresStore)
    return store


async def test_a_cancel_from_another_runtime_stops_the_owner_by_its_notice(pg_url: str) -> None:
    """The owner's looks are made blind: the cancel still stops its attempt, from the
    notice alone, and the owner commits nothing of its own (the store keeps the one end
    the canceller committed)."""
    stopped = trio.Event()

    async def body(ctx: RunContext) -> object:
        try:
            await trio.sleep_forever()
        finally:
            stopped.set()

    with trio.fail_after(30):
        async with open_runtime(pg_url, poll=0.05) as owner, open_runtime(pg_url) as other:
            _blind(_store(owner))
            handle = await owner.start(body, run_id="r1")
            await trio.sleep(0.2)  # (the owner's relay rests, waiting for a notice)
            assert await other.cancel_run("r1", reason="from elsewhere") == CANCELLED
            await stopped.wait()
            assert (await other.record("r1")).state == CANCELLED
            ends = [
                e
                async for e in other.events("r1", follow=False)
                if e.kind == "committed" and isinstance(e.state, RunState.Ended)
            ]
            assert [e.detail for e in ends] == [
                {"source": "cancel_run", "reason": "from elsewhere"}
            ]
            assert await handle.wait() == CANCELLED


async def test_an_announced_end_stops_only_the_attempt_it_was_committed_against(
    pg_url: str,
) -> None:
    """A notice naming another claim epoch, or an end that came before the attempt was
    admitted (a run of the same id, long gone), leaves the attempt running; the notice of
    its own end stops it."""
    with trio.fail_after(30):
        async with open_runtime(pg_url) as owner:
            supervisor = owner._supervisor.serving
            await owner.start(parked, run_id="r1")
            attempt = owner._supervisor.kernel.registry.get("r1")
            assert attempt is not None
            assert attempt.fence is not None
            epoch, admitted = attempt.fence.epoch, attempt.start_seq
            assert admitted > 0
            supervisor.heard_end(HeardEnd("r1", CANCELLED, epoch + 1, admitted))
            supervisor.heard_end(HeardEnd("r1", CANCELLED, epoch, admitted - 1))
            supervisor.heard_end(HeardEnd("elsewhere", CANCELLED, epoch, admitted))
            await trio.sleep(0.1)
            assert attempt.request is None
            assert attempt.phase == "running"
            supervisor.heard_end(HeardEnd("r1", CANCELLED, epoch, admitted))
            assert attempt.request is not None
            assert attempt.request.disposition == "lost"
            with trio.fail_after(10):
                await attempt.completion.wait()
