"""``awaken-trio workers ...`` against real worker processes: the row a worker keeps, a
drain that lets its run finish and makes it exit 0, a killed worker read lost while its run
goes on elsewhere, refusals, and ``runs submit``'s warning when nobody serves a name."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.cli.cli_helpers import HERE, background, cli, read_until, wait_exit
from tests.cli.test_cli_worker import SERVING, wait_for


async def live_workers(store: str, *extra: str) -> list[dict[str, Any]]:
    listed = await cli("workers", "list", "--store", store, "--json", *extra)
    assert listed.code == 0, listed.stderr
    found: list[dict[str, Any]] = listed.json()
    return found


async def until_worker(store: str, worker_id: str, state: str) -> dict[str, Any]:
    with trio.fail_after(60):
        while True:
            for worker in await live_workers(store, "--all"):
                if worker["worker_id"] == worker_id and worker["state"] == state:
                    return worker
            await trio.sleep(0.1)


def args(store: str, lease: str = "10") -> list[str]:
    return ["worker", "cli_bodies", "--store", store, "--poll", "0.02", "--lease", lease]


@pytest.mark.slow
async def test_a_drained_worker_finishes_its_run_then_exits_0(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/runs.db"
    nobody = await cli("runs", "submit", "steps", "--run-id", "early", "--store", store)
    assert nobody.code == 0
    assert "no live worker serves 'steps'" in nobody.stderr
    async with background(*args(store), cwd=HERE) as worker:
        await read_until(worker.stderr, SERVING, bytearray())
        (row,) = await live_workers(store)
        assert row["pid"] == worker.pid
        assert row["state"] == "serving"
        assert row["bodies"] == dict.fromkeys(
            ["asks", "chat", "fails", "flaky", "steps", "stubborn", "waits"]
        )
        assert set(row) == {
            "worker_id",
            "host",
            "pid",
            "state",
            "started_at",
            "last_seen",
            "bodies",
            "concurrency",
            "active",
        }
        worker_id = row["worker_id"]
        served = await cli("runs", "submit", "waits", "--run-id", "w1", "--store", store)
        assert (served.code, served.stderr) == (0, "")  # served: no warning
        await wait_for(store, "w1", "running")
        assert (await wait_for(store, "early", "running"))["worker_id"] == worker_id

        drained = await cli("workers", "drain", worker_id, "--store", store, "--json")
        assert drained.code == 0, drained.stderr
        assert drained.json()["state"] == "draining"
        await trio.sleep(0.5)  # many poll intervals: it claims nothing new from here
        await cli("runs", "submit", "steps", "--run-id", "after", "--store", store)
        await trio.sleep(0.5)
        assert (await wait_for(store, "after", "queued"))["worker_id"] is None
        shown = await cli("workers", "show", worker_id, "--store", store)
        assert "draining" in shown.stdout
        assert (await cli("runs", "wake", "w1", "--store", store)).code == 0
        await wait_for(store, "w1", "ended")
        assert worker.poll() is None  # "early" still runs: the worker waits for it
        assert (await cli("runs", "message", "early", '"finish"', "--store", store)).code == 0
        assert await wait_exit(worker) == 0
        assert (await wait_for(store, "w1", "ended"))["state"]["cause"]["kind"] == "natural_end"
    stopped = await until_worker(store, worker_id, "stopped")
    assert stopped["active"] == 0
    again = await cli("workers", "drain", worker_id, "--store", store, "--json")
    assert again.code == 1
    assert again.json()["error"] == "not_serving"
    unknown = await cli("workers", "drain", "nobody", "--store", store)
    assert unknown.code == 1
    assert "unknown_worker" in unknown.stderr
    assert (await cli("workers", "show", "nobody", "--store", store)).code == 1


@pytest.mark.slow
async def test_a_killed_worker_reads_lost_and_its_run_goes_on(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/runs.db"
    async with background(*args(store, lease="1"), cwd=HERE) as first:
        await read_until(first.stderr, SERVING, bytearray())
        (row,) = await live_workers(store)
        await cli("runs", "submit", "steps", "--run-id", "k1", "--store", store)
        await wait_for(store, "k1", "running")
        first.send_signal(signal.SIGKILL)
        await first.wait()
        lost = await until_worker(store, row["worker_id"], "lost")
        assert lost["pid"] == first.pid
        async with background(*args(store, lease="1"), cwd=HERE) as second:
            await read_until(second.stderr, SERVING, bytearray())
            with trio.fail_after(60):
                while True:
                    record = await wait_for(store, "k1", "running")
                    if record["worker_id"] != row["worker_id"]:
                        break
                    await trio.sleep(0.1)
            assert record["generation"] == 2  # recovered from its checkpoint
            assert (await cli("runs", "message", "k1", '"finish"', "--store", store)).code == 0
            done = await wait_for(store, "k1", "ended")
            assert done["state"]["cause"]["kind"] == "natural_end"
        states = {w["worker_id"]: w["state"] for w in await live_workers(store, "--all")}
        assert states[row["worker_id"]] == "lost"


@pytest.mark.slow
async def test_the_worker_logs_each_claim_end_release_and_drain(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/runs.db"
    seen = bytearray()
    async with background(*args(store), "--log-format", "json", cwd=HERE) as worker:
        await read_until(worker.stderr, SERVING, seen)
        (row,) = await live_workers(store)
        worker_id = row["worker_id"]
        await cli("runs", "submit", "steps", "--run-id", "j1", "--store", store)
        await wait_for(store, "j1", "running")
        await cli("runs", "message", "j1", '"finish"', "--store", store)
        await wait_for(store, "j1", "ended")
        await cli("runs", "submit", "steps", "--run-id", "j2", "--store", store)
        await wait_for(store, "j2", "running")
        await read_until(worker.stderr, '"j2"', seen)
        worker.send_signal(signal.SIGTERM)  # j2 goes back to the queue
        assert await wait_exit(worker) == 0
        log = await read_until(worker.stderr, "claims released", seen)
    lines = [json.loads(line) for line in log.splitlines()]
    assert all(line.get("worker_id") == worker_id for line in lines), lines
    assert lines[0]["event"] == "start"
    events = [(line.get("event"), line.get("run_id")) for line in lines if line.get("run_id")]
    assert ("claim", "j1") in events
    assert ("end", "j1") in events
    assert ("claim", "j2") in events
    assert ("release", "j2") in events
    (end,) = [line for line in lines if line.get("event") == "end"]
    assert end["cause"] == "natural_end"
    assert end["level"] == "INFO"

    async with background(*args(store), cwd=HERE) as worker:
        text = bytearray()
        await read_until(worker.stderr, SERVING, text)
        (row,) = await live_workers(store)
        await wait_for(store, "j2", "running")
        await cli("workers", "drain", row["worker_id"], "--store", store)
        await read_until(worker.stderr, "draining", text)
        await cli("runs", "message", "j2", '"finish"', "--store", store)
        assert await wait_exit(worker) == 0
        log = await read_until(worker.stderr, "drained", text)
    assert "claimed run 'j2'" in log  # the released run, claimed again
    assert "draining: claiming nothing new" in log
    assert "event=drain" in log


@pytest.mark.slow
async def test_a_worker_killed_while_draining_reads_lost_and_loses_no_run(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path}/runs.db"
    async with background(*args(store, lease="1"), cwd=HERE) as first:
        await read_until(first.stderr, SERVING, bytearray())
        (row,) = await live_workers(store)
        await cli("runs", "submit", "steps", "--run-id", "d1", "--store", store)
        await wait_for(store, "d1", "running")
        drained = await cli("workers", "drain", row["worker_id"], "--store", store)
        assert (drained.code, drained.stdout) == (0, f"{row['worker_id']}: draining\n")
        first.send_signal(signal.SIGKILL)
        await first.wait()
    assert (await until_worker(store, row["worker_id"], "lost"))["state"] == "lost"
    async with background(*args(store, lease="1"), cwd=HERE) as second:
        await read_until(second.stderr, SERVING, bytearray())
        with trio.fail_after(60):
            while True:
                record = await wait_for(store, "d1", "running")
                if record["worker_id"] != row["worker_id"]:
                    break  # recovered by the second worker
                await trio.sleep(0.1)
        assert (await cli("runs", "message", "d1", '"finish"', "--store", store)).code == 0
        done = await wait_for(store, "d1", "ended")
        assert done["state"]["cause"]["kind"] == "natural_end"
    refused = await cli("workers", "drain", row["worker_id"], "--store", store)
    assert refused.code == 1
    assert "not_serving" in refused.stderr
