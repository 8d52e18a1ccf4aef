"""``awaken-trio worker``: a worker process serves a module's bodies while other processes
steer its runs with ``awaken-trio runs ...``; SIGINT and SIGTERM release its claims and exit
0; a second signal while it drains exits at once."""

from __future__ import annotations

import signal
from typing import Any

import pytest
import trio

from tests.cli.cli_helpers import HERE, Result, background, cli, read_until, wait_exit

SERVING = "Ctrl-C or SIGTERM to stop"


async def state_of(store: str, run_id: str) -> dict[str, Any]:
    shown = await cli("runs", "show", run_id, "--store", store, "--json")
    assert shown.code == 0, shown.stderr
    record: dict[str, Any] = shown.json()
    return record


async def wait_for(store: str, run_id: str, kind: str) -> dict[str, Any]:
    """Poll the run's committed record until its state is of ``kind``."""
    with trio.fail_after(60):
        while True:
            record = await state_of(store, run_id)
            if record["state"]["kind"] == kind:
                return record
            await trio.sleep(0.05)


def worker_args(store: str, target: str = "cli_bodies") -> list[str]:
    return ["worker", target, "--store", store, "--poll", "0.02", "--lease", "10"]


@pytest.mark.slow
async def test_runs_served_by_a_worker_are_steered_from_other_processes(store: str) -> None:
    async with background(*worker_args(store, "cli_bodies:make_bodies"), cwd=HERE) as worker:
        await read_until(worker.stderr, SERVING, bytearray())
        assert (await cli("runs", "submit", "steps", "--run-id", "w-s", "--store", store)).code == 0
        await wait_for(store, "w-s", "running")
        sent = await cli("runs", "message", "w-s", '"hello"', "--store", store, "--json")
        assert sent.code == 0, sent.stderr
        assert sent.json()["kind"] == "running"
        assert (await cli("runs", "pause", "w-s", "--store", store)).code == 0
        paused = await wait_for(store, "w-s", "awaiting")
        assert paused["state"]["ticket"]["reason"] == "manual_pause"
        assert "hello" in paused["checkpoint"]["messages"]
        resumed = await cli("runs", "resume", "w-s", "--store", store, "--json")
        assert resumed.code == 0, resumed.stderr
        assert resumed.json()["kind"] in ("queued", "running")
        await wait_for(store, "w-s", "running")
        assert (await cli("runs", "message", "w-s", '"finish"', "--store", store)).code == 0
        done = await wait_for(store, "w-s", "ended")
        assert done["state"]["cause"] == {"kind": "natural_end"}
        assert done["generation"] == 2
        assert done["result"]["messages"] == ["hello", "finish"]

        await cli("runs", "submit", "asks", "--run-id", "w-a", "--store", store)
        await wait_for(store, "w-a", "awaiting")
        wrong = await cli("runs", "resume", "w-a", "--value", "3", "--store", store, "--json")
        assert wrong.code == 1
        assert wrong.json()["error"] == "invalid_payload"
        assert wrong.json()["state"]["kind"] == "awaiting"  # the ticket stays live
        mismatch = await cli(
            "runs",
            "resume",
            "w-a",
            "--value",
            '"x"',
            "--correlation-id",
            "other",
            "--store",
            store,
            "--json",
        )
        assert mismatch.code == 1
        assert mismatch.json()["error"] == "ticket_mismatch"
        right = await cli("runs", "resume", "w-a", "--value", '"yes"', "--store", store)
        assert right.code == 0, right.stderr
        answered = await wait_for(store, "w-a", "ended")
        assert answered["result"] == {"answer": "yes"}

        await cli("runs", "submit", "waits", "--run-id", "w-w", "--store", store)
        await wait_for(store, "w-w", "running")
        woken = await cli("runs", "wake", "w-w", "--reason", "go", "--store", store)
        assert woken.code == 0, woken.stderr
        assert (await wait_for(store, "w-w", "ended"))["result"] == {"woken": True}

        await cli("runs", "submit", "steps", "--run-id", "w-c", "--store", store)
        await wait_for(store, "w-c", "running")
        cancelled = await cli("runs", "cancel", "w-c", "--store", store, "--json")
        assert cancelled.json() == {"kind": "ended", "cause": {"kind": "cancelled"}}


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
async def test_a_signal_releases_the_workers_claims_and_exits_0(
    store: str, signum: signal.Signals
) -> None:
    run_id = f"rel-{signum.name}"
    async with background(*worker_args(store), cwd=HERE) as worker:
        seen = bytearray()
        await read_until(worker.stderr, SERVING, seen)
        await cli("runs", "submit", "steps", "--run-id", run_id, "--store", store)
        await wait_for(store, run_id, "running")
        worker.send_signal(signum)
        assert await wait_exit(worker) == 0
        log = await read_until(worker.stderr, "claims released", seen)
        assert "Traceback" not in log
    released = await state_of(store, run_id)
    assert released["state"] == {"kind": "queued"}  # back for another worker
    assert released["checkpoint"]["step"] >= 1
    async with background(*worker_args(store), cwd=HERE) as another:
        await read_until(another.stderr, SERVING, bytearray())
        again = await wait_for(store, run_id, "running")
        assert again["generation"] == 2
        await cli("runs", "stop", run_id, "--reason", "test over", "--store", store)


@pytest.mark.slow
async def test_a_second_ctrl_c_while_draining_exits_at_once(store: str) -> None:
    async with background(*worker_args(store), cwd=HERE) as worker:
        seen = bytearray()
        await read_until(worker.stderr, SERVING, seen)
        await cli("runs", "submit", "stubborn", "--run-id", "stub", "--store", store)
        await wait_for(store, "stub", "running")
        worker.send_signal(signal.SIGINT)
        await read_until(worker.stderr, "releasing claims", seen)
        worker.send_signal(signal.SIGINT)  # the body takes 60 s to unwind: do not wait
        assert await wait_exit(worker) == 130
        assert "claims left to expire" in await read_until(worker.stderr, "expire", seen)
    left = await state_of(store, "stub")
    assert left["state"]["kind"] == "running"  # its claim expires; nobody released it
    stopped = await cli("runs", "stop", "stub", "--reason", "test over", "--store", store)
    assert stopped.code == 0


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("no_such_module_here", "cannot import"),
        ("cli_bodies:nothing", "has no 'nothing'"),
        ("cli_bodies:not_a_mapping", "mapping"),
        ("not a module", "MODULE[:ATTR]"),
    ],
)
async def test_a_bad_worker_target_exits_2(store: str, target: str, says: str) -> None:
    done: Result = await cli(*worker_args(store, target), cwd=HERE)
    assert done.code == 2, done.stderr
    assert says in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
async def test_a_worker_retries_a_failing_run_and_logs_each_retry(store: str) -> None:
    async with background(*worker_args(store), cwd=HERE) as worker:
        seen = bytearray()
        await read_until(worker.stderr, SERVING, seen)
        submitted = await cli(
            *("runs", "submit", "flaky", "--run-id", "fl-1", "--input", '{"fail": 2}'),
            *("--retries", "2", "--retry-backoff", "0.1", "--store", store),
        )
        assert submitted.code == 0, submitted.stderr
        ended = await wait_for(store, "fl-1", "ended")
        log = await read_until(worker.stderr, "try 2 of 3", seen)
        worker.send_signal(signal.SIGTERM)
        assert await wait_exit(worker) == 0
    assert ended["state"] == {"kind": "ended", "cause": {"kind": "natural_end"}}
    assert ended["result"] == {"tries": 3}
    assert (ended["retries"], ended["generation"]) == (2, 3)
    retried = [e for e in ended["events"] if e["kind"] == "retry_scheduled"]
    assert [e["detail"]["attempt"] for e in retried] == [1, 2]
    assert all(e["detail"]["code"] == "flaky" for e in retried)
    assert "INFO awaken_trio: run 'fl-1' attempt 1 failed (try 1 of 3)" in log
    text = await cli("runs", "show", "fl-1", "--store", store)
    assert "2 of 2 retries used" in text.stdout
