"""Retries (DESIGN §3.8): ``retry=RetryPolicy(...)`` on ``start``, ``execute``, ``submit``,
``ctx.start_child`` and ``ctx.run_child``. A failed attempt with tries left commits a
``retry_scheduled`` event and waits ``Queued`` until its backoff has passed, then runs again
(generation + 1) from its last checkpoint; the last failure ends the run ``Failed``; a
failure that will be retried is not an end, so ``wait()`` and ``run_child`` wait through it;
cancel and stop end a run waiting to retry at once."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from awaken_trio import (
    EndCause,
    InvalidArgument,
    LiveCommand,
    RetryPolicy,
    RunContext,
    RunError,
    RunState,
    StoreError,
    open_runtime,
)
from tests.run_helpers import history, settle, terminal_commits
from tests.wrapped_stores import FailingStore, HoldingStore

NATURAL = RunState.Ended(EndCause.NaturalEnd())
CANCELLED = RunState.Ended(EndCause.Cancelled())
QUEUED = RunState.Queued()


def runtime(**options: Any) -> Any:
    return open_runtime(clock=trio.current_time, **options)


class Flaky:
    """A body that fails its first ``failures`` calls (with ``code``), then returns what it
    was given and the checkpoint it started from; ``calls`` counts every call."""

    def __init__(self, failures: int, code: str = "flaky") -> None:
        self.failures = failures
        self.code = code
        self.calls = 0
        self.generations: list[int] = []

    async def __call__(self, ctx: RunContext) -> object:
        self.calls += 1
        self.generations.append(ctx.generation)
        await ctx.boundary(progress={"calls": self.calls})
        if self.calls <= self.failures:
            raise RunError(self.code, f"call {self.calls} failed")
        return {"input": ctx.input, "from": ctx.checkpoint}


def kinds(events: list[Any]) -> list[str]:
    return [e.kind if e.kind != "committed" else type(e.state).__name__ for e in events]


def retries_of(events: list[Any]) -> list[dict[str, Any]]:
    return [dict(e.detail) for e in events if e.kind == "retry_scheduled"]


# --------------------------------------------------------------------------- the policy


def test_the_policy_is_a_frozen_value_with_the_documented_defaults() -> None:
    policy = RetryPolicy()
    assert (policy.attempts, policy.backoff, policy.factor, policy.max_backoff) == (3, 1, 2, 60)
    assert policy.codes is None
    assert [policy.wait(n) for n in (1, 2, 3, 7, 8)] == [1, 2, 4, 60, 60]
    assert RetryPolicy(codes=["a", "b"]).codes == ("a", "b")
    assert RetryPolicy.from_json(RetryPolicy(5, 0.5, 3, 9, ("x",)).to_json()) == RetryPolicy(
        5, 0.5, 3, 9, ("x",)
    )
    assert RetryPolicy(attempts=2).retries("any", 1)
    assert not RetryPolicy(attempts=2).retries("any", 2)
    assert not RetryPolicy(codes=("timeout",)).retries("other", 1)
    assert RetryPolicy(backoff=1e300, factor=1e300).wait(5) == 60  # no overflow
    with pytest.raises(AttributeError):
        policy.attempts = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"attempts": 0}, "attempts"),
        ({"attempts": 2.5}, "attempts"),
        ({"attempts": True}, "attempts"),
        ({"backoff": -1}, "backoff"),
        ({"backoff": float("nan")}, "backoff"),
        ({"max_backoff": float("inf")}, "max_backoff"),
        ({"factor": 0.5}, "factor"),
        ({"codes": "timeout"}, "codes"),
        ({"codes": ("ok", 3)}, "codes"),
        ({"codes": ("",)}, "codes"),
    ],
)
def test_a_bad_policy_is_refused_with_one_error_naming_the_option(
    options: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidArgument, match=named):
        RetryPolicy(**options)


async def test_retry_takes_a_policy_and_nothing_is_committed_otherwise() -> None:
    async with runtime() as rt:
        rt.register("job", Flaky(0))
        for call in (
            rt.start(Flaky(0), run_id="s", retry=3),
            rt.submit("job", run_id="q", retry={"attempts": 3}),
        ):
            with pytest.raises(InvalidArgument, match="retry= takes a RetryPolicy"):
                await call
        assert await history(rt) == []


# --------------------------------------------------------------------------- retrying


async def test_a_failing_attempt_is_tried_again_after_its_backoff_from_its_checkpoint(
    autojump_clock: trio.testing.MockClock,
) -> None:
    body = Flaky(2)
    async with runtime() as rt:
        t0 = trio.current_time()
        handle = await rt.start(
            body, run_id="r", input=7, retry=RetryPolicy(attempts=3, backoff=1, factor=2)
        )
        # wait() waits through the retries, to the run's end.
        assert await settle(handle) == NATURAL
        assert trio.current_time() == t0 + 1 + 2
        record = await rt.record("r")
        assert record.result == {"input": 7, "from": {"calls": 3}}
        assert (record.generation, record.retries) == (3, 2)
        assert record.retry == RetryPolicy(attempts=3, backoff=1, factor=2)
        assert record.not_before is None
        assert body.generations == [1, 2, 3]
        events = await history(rt, "r")
        assert kinds(events) == [
            "Running",
            "Running",  # its checkpoint
            "retry_scheduled",
            "Queued",
            "Running",
            "Running",
            "retry_scheduled",
            "Queued",
            "Running",
            "Running",
            "Ended",
        ]
        first, second = retries_of(events)
        assert first["code"] == "flaky"
        assert first["message"] == "call 1 failed"
        assert "RunError" in first["traceback"]
        assert "call 1 failed" in first["traceback"]
        assert (first["attempt"], first["retry_at"]) == (1, t0 + 1)
        assert (second["attempt"], second["retry_at"]) == (2, t0 + 3)
        queued = [dict(e.detail) for e in events if e.kind == "committed" and e.state == QUEUED]
        assert queued == [{"source": "retry", "attempt": 2}, {"source": "retry", "attempt": 3}]


async def test_the_run_waits_queued_with_its_retry_time_until_then(
    autojump_clock: trio.testing.MockClock,
) -> None:
    body = Flaky(1)
    async with runtime() as rt:
        t0 = trio.current_time()
        handle = await rt.start(body, run_id="r", retry=RetryPolicy(backoff=10))
        await trio.sleep(5)
        record = await rt.record("r")
        assert (record.state, record.not_before, record.retries) == (QUEUED, t0 + 10, 1)
        assert body.calls == 1
        assert await settle(handle) == NATURAL
        assert trio.current_time() == t0 + 10


async def test_the_last_failure_ends_the_run_failed_as_without_a_policy(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    body = Flaky(10)
    async with runtime() as rt:
        with caplog.at_level(logging.INFO, logger="awaken_trio"):
            state = await rt.execute(body, run_id="r", retry=RetryPolicy(attempts=2))
        assert state == RunState.Ended(EndCause.Failed("flaky", "call 2 failed"))
        assert body.calls == 2
        record = await rt.record("r")
        assert (record.generation, record.retries) == (2, 1)
        assert len(retries_of(await history(rt, "r"))) == 1
    warned = [r for r in caplog.records if r.levelno == logging.INFO and "try 1 of 2" in r.message]
    failed = [r for r in caplog.records if r.levelno == logging.ERROR and "failed" in r.message]
    assert len(warned) == 1
    assert warned[0].__dict__["run_id"] == "r"
    assert "call 1 failed" in warned[0].__dict__["traceback"]
    assert len(failed) == 1


async def test_only_the_codes_given_are_retried(autojump_clock: trio.testing.MockClock) -> None:
    async with runtime() as rt:
        policy = RetryPolicy(codes=("rate_limited",))
        other = Flaky(1, code="bad_request")
        assert await rt.execute(other, run_id="o", retry=policy) == RunState.Ended(
            EndCause.Failed("bad_request", "call 1 failed")
        )
        assert other.calls == 1
        limited = Flaky(1, code="rate_limited")
        assert await rt.execute(limited, run_id="l", retry=policy) == NATURAL
        assert limited.calls == 2

        async def plain(ctx: RunContext) -> object:
            raise ValueError("a plain error")  # code "value_error"

        assert await rt.execute(
            plain, run_id="p", retry=RetryPolicy(codes=("value_error",), attempts=2)
        ) == RunState.Ended(EndCause.Failed("value_error", "a plain error"))
        assert (await rt.record("p")).retries == 1


async def test_a_cancel_a_stop_or_a_deadline_is_never_retried(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def hung(ctx: RunContext) -> object:
        await trio.sleep_forever()

    async with runtime() as rt:
        policy = RetryPolicy(attempts=5)
        cancelled = await rt.start(hung, run_id="c", retry=policy)
        stopped = await rt.start(hung, run_id="s", retry=policy)
        timed = await rt.start(hung, run_id="d", retry=policy, timeout=3)
        await trio.sleep(1)
        await rt.cancel_run("c")
        await rt.stop_run("s", "enough")
        assert await settle(cancelled) == CANCELLED
        assert await settle(stopped) == RunState.Ended(EndCause.Stopped("enough"))
        assert await settle(timed) == RunState.Ended(EndCause.Stopped("deadline"))
        for run_id in "csd":
            assert (await rt.record(run_id)).retries == 0


async def test_a_retry_that_would_start_after_the_deadline_is_not_scheduled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    body = Flaky(1)
    async with runtime() as rt:
        state = await rt.execute(body, run_id="r", timeout=5, retry=RetryPolicy(backoff=10))
        assert state == RunState.Ended(EndCause.Failed("flaky", "call 1 failed"))
        assert body.calls == 1


async def test_cancel_and_stop_end_a_run_waiting_to_retry_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with runtime() as rt:
        bodies = {name: Flaky(1) for name in "cs"}
        t0 = trio.current_time()
        cancelled = await rt.start(bodies["c"], run_id="c", retry=RetryPolicy(backoff=30))
        stopped = await rt.start(bodies["s"], run_id="s", retry=RetryPolicy(backoff=30))
        await trio.sleep(1)
        assert await rt.state("c") == QUEUED
        await rt.cancel_run("c", reason="not needed")
        await rt.stop_run("s", "operator")
        assert await settle(cancelled) == CANCELLED
        assert await settle(stopped) == RunState.Ended(EndCause.Stopped("operator"))
        assert trio.current_time() < t0 + 2
        await trio.sleep(60)  # the retry's time passes: nothing runs again
        assert [b.calls for b in bodies.values()] == [1, 1]
        assert [e.kind for e in terminal_commits(await history(rt, "c"))] == ["committed"]


async def test_unread_messages_go_to_the_next_attempt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[object] = []
    calls = 0

    async def body(ctx: RunContext) -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            await trio.sleep(1)  # a message arrives meanwhile, unread
            raise RunError("flaky", "first")
        seen.extend(await ctx.boundary())
        return "ok"

    async with runtime() as rt:
        handle = await rt.start(body, run_id="r", retry=RetryPolicy(backoff=1))
        await rt.send(LiveCommand.Message("r", "hello"))
        assert await settle(handle) == NATURAL
        assert seen == ["hello"]


# --------------------------------------------------------------------------- children


async def test_run_child_waits_through_the_childs_retries(
    autojump_clock: trio.testing.MockClock,
) -> None:
    child = Flaky(2)

    async def parent(ctx: RunContext) -> object:
        state = await ctx.run_child(child, run_id="p.c", retry=RetryPolicy(attempts=3, backoff=2))
        return repr(state)

    async with runtime() as rt:
        assert await rt.execute(parent, run_id="p") == NATURAL
        assert (await rt.record("p")).result == repr(NATURAL)
        assert child.calls == 3
        child_record = await rt.record("p.c")
        assert (child_record.parent_run_id, child_record.retries) == ("p", 2)


async def test_a_child_waiting_to_retry_ends_with_its_parent_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    child = Flaky(1)
    started = trio.Event()

    async def parent(ctx: RunContext) -> object:
        await ctx.start_child(child, run_id="p.c", retry=RetryPolicy(backoff=30))
        started.set()
        await trio.sleep_forever()

    async with runtime() as rt:
        handle = await rt.start(parent, run_id="p")
        await started.wait()
        await trio.sleep(1)
        assert await rt.state("p.c") == QUEUED
        await rt.cancel_run("p")
        assert await settle(handle) == CANCELLED
        assert await rt.state("p.c") == CANCELLED
        ends = terminal_commits(await history(rt))
        assert [e.run_id for e in ends] == ["p.c", "p"]  # children end first
        await trio.sleep(60)
        assert child.calls == 1


async def test_a_retried_parent_takes_its_fixed_id_children_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Rule 22 for retries: the failed attempt's children are handed back with it; the
    next attempt starting a child under the same id gets that child back (an ended child
    answers its end, a running one is taken back from its checkpoint) rather than
    `RunExists`."""
    done_child_calls = 0
    slow_child_calls = 0
    parent_calls = 0

    async def done_child(ctx: RunContext) -> object:
        nonlocal done_child_calls
        done_child_calls += 1
        return "done"

    async def slow_child(ctx: RunContext) -> object:
        nonlocal slow_child_calls
        slow_child_calls += 1
        began = ctx.checkpoint
        await ctx.boundary(progress={"started": slow_child_calls})
        await trio.sleep(10)
        return {"from": began}

    async def parent(ctx: RunContext) -> object:
        nonlocal parent_calls
        parent_calls += 1
        first = await ctx.run_child(done_child, run_id=f"{ctx.run_id}.c0")
        slow = await ctx.start_child(slow_child, run_id=f"{ctx.run_id}.c1")
        if parent_calls == 1:
            await trio.sleep(1)
            raise RunError("flaky", "the parent failed")
        return [repr(first), repr(await slow.wait())]

    async with runtime() as rt:
        state = await rt.execute(parent, run_id="p", retry=RetryPolicy(backoff=1))
        assert state == NATURAL, state
        assert (await rt.record("p")).result == [repr(NATURAL), repr(NATURAL)]
        assert (done_child_calls, slow_child_calls, parent_calls) == (1, 2, 2)
        # The slow child went back Queued with its parent, and its second attempt started
        # from its checkpoint.
        assert (await rt.record("p.c1")).result == {"from": {"started": 1}}
        c1 = [e for e in await history(rt, "p.c1") if e.kind == "committed" and e.state == QUEUED]
        assert [e.detail["source"] for e in c1] == ["retry"]


async def test_a_handed_back_child_the_next_attempt_does_not_take_back_is_stopped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls = 0

    async def hung(ctx: RunContext) -> object:
        await trio.sleep_forever()

    async def parent(ctx: RunContext) -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            await ctx.start_child(hung, run_id="p.once")
            await trio.sleep(1)
            raise RunError("flaky", "first")
        return "second"

    async with runtime() as rt:
        assert await rt.execute(parent, run_id="p", retry=RetryPolicy(backoff=1)) == NATURAL
        assert await rt.state("p.once") == RunState.Ended(EndCause.Stopped("not resumed by parent"))


# --------------------------------------------------------------------------- durable


async def test_a_submitted_run_is_retried_by_the_serving_runtime_on_sqlite(
    tmp_path: Path,
) -> None:
    body = Flaky(1)
    store = f"sqlite:///{tmp_path}/runs.db"
    async with open_runtime(store, bodies={"job": body}, poll=0.05) as rt:
        async with trio.open_nursery() as nursery:
            await nursery.start(rt.serve)
            handle = await rt.submit("job", run_id="r", retry=RetryPolicy(backoff=0.2))
            with trio.fail_after(30):
                assert await handle.wait() == NATURAL
            nursery.cancel_scope.cancel()
        record = await rt.record("r")
        assert (record.retries, record.generation, record.retry) == (
            1,
            2,
            RetryPolicy(backoff=0.2),
        )
        assert body.calls == 2
    # Another process reads the same policy and count back from the file.
    async with open_runtime(store) as other:
        again = await other.record("r")
        assert (again.retry, again.retries) == (RetryPolicy(backoff=0.2), 1)


async def test_a_run_started_here_on_sqlite_is_retried_here_without_serving(
    tmp_path: Path,
) -> None:
    body = Flaky(2)
    async with open_runtime(f"sqlite:///{tmp_path}/runs.db", poll=0.05) as rt:
        with trio.fail_after(30):
            state = await rt.execute(body, run_id="r", retry=RetryPolicy(backoff=0.05))
        assert state == NATURAL
        assert body.calls == 3


async def test_the_store_failing_the_retry_commit_leaves_the_run_as_last_committed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Nothing half-done: a store that refuses the retry's commit leaves the run as last
    committed (its waiters get the store's error), and nothing runs again here."""
    calls = 0
    release = trio.Event()

    async def body(ctx: RunContext) -> object:
        nonlocal calls
        calls += 1
        await release.wait()
        raise RunError("flaky", "failed")

    store = FailingStore()
    async with runtime(store=store) as rt:
        handle = await rt.start(body, run_id="r", retry=RetryPolicy(backoff=1))
        await trio.sleep(0.5)
        store.failing = True
        release.set()
        with pytest.raises(StoreError, match="disk full"):
            await settle(handle)
        store.failing = False
        await trio.sleep(10)
        assert calls == 1
        record = await rt.record("r")
        assert isinstance(record.state, RunState.Running)
        assert record.retries == 0
        assert retries_of(await history(rt, "r")) == []


async def test_a_run_whose_retry_waits_for_a_busy_thread_still_ends_at_its_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    body = Flaky(1)

    async def hung(ctx: RunContext) -> object:
        await trio.sleep_forever()

    async with runtime() as rt:
        t0 = trio.current_time()
        handle = await rt.start(
            body, run_id="r", thread_id="t", timeout=20, retry=RetryPolicy(backoff=5)
        )
        await trio.sleep(1)  # it failed, and waits to retry at t0 + 5
        busy = await rt.start(hung, run_id="busy", thread_id="t")
        assert await settle(handle) == RunState.Ended(EndCause.Stopped("deadline"))
        assert trio.current_time() == t0 + 20
        assert body.calls == 1
        await rt.cancel_run("busy")
        await settle(busy)


async def test_a_cancel_racing_the_retrys_commit_ends_the_run_once_and_nothing_reruns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The retry's commit held in flight while a cancel arrives: the run ends once,
    ``Cancelled`` (the cancel after the retry landed ends the waiting run), its waiter gets
    that end, and the retry's time passes with nothing run again."""
    body = Flaky(5)
    store = HoldingStore(RunState.Queued)
    async with runtime(store=store) as rt:
        handle = await rt.start(body, run_id="r", retry=RetryPolicy(backoff=5))
        with trio.fail_after(60):
            await store.holding.wait()  # the failed attempt's retry commit, in flight
        async with trio.open_nursery() as nursery:
            nursery.start_soon(rt.cancel_run, "r")
            await trio.sleep(0.1)
            store.release.set()
        assert await settle(handle) == CANCELLED
        await trio.sleep(30)
        assert body.calls == 1
        assert len(terminal_commits(await history(rt, "r"))) == 1
        assert await rt.state("r") == CANCELLED


async def test_a_clock_that_fails_when_the_retry_is_decided_makes_the_failure_the_end(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broken = False
    release = trio.Event()

    def clock() -> float:
        if broken:
            raise OSError("the clock is gone")
        return trio.current_time()

    async def body(ctx: RunContext) -> object:
        await release.wait()
        raise RunError("flaky", "failed")

    async with open_runtime(clock=clock) as rt:
        handle = await rt.start(body, run_id="r", retry=RetryPolicy())
        await trio.sleep(1)
        broken = True
        release.set()
        state = await settle(handle)
        broken = False
        assert state == RunState.Ended(EndCause.Failed("flaky", "failed"))
        assert (await rt.record("r")).retries == 0


async def test_a_child_waiting_to_retry_cancelled_by_itself_answers_its_parent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    child = Flaky(1)

    async def parent(ctx: RunContext) -> object:
        state = await ctx.run_child(child, run_id="p.c", retry=RetryPolicy(backoff=30))
        return repr(state)

    async with runtime() as rt:
        handle = await rt.start(parent, run_id="p")
        await trio.sleep(1)
        assert await rt.state("p.c") == QUEUED
        await rt.cancel_run("p.c")
        assert await settle(handle) == NATURAL
        assert (await rt.record("p")).result == repr(CANCELLED)
        await trio.sleep(60)
        assert child.calls == 1
