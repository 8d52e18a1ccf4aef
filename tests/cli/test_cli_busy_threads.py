"""Busy threads across processes (DESIGN §3.8): a worker process runs a chat's answer while
``runs submit --if-busy`` from the command line rejects, or supersedes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.cli_helpers import HERE, background, cli, read_until
from tests.cli.test_cli_worker import SERVING, wait_for, worker_args


@pytest.fixture
def durable_url(durable_at: Path | str) -> str:
    return durable_at if isinstance(durable_at, str) else f"sqlite:///{durable_at}"


async def submit(store: str, run_id: str, chat: dict[str, Any], *options: str) -> Any:
    return await cli(
        "runs",
        "submit",
        "chat",
        "--run-id",
        run_id,
        "--thread",
        "chat-1",
        "--input",
        json.dumps(chat),
        "--store",
        store,
        "--json",
        *options,
    )


@pytest.mark.slow
async def test_the_command_line_rejects_or_supersedes_a_run_a_worker_process_runs(
    durable_url: str, tmp_path: Path
) -> None:
    store = durable_url
    log = tmp_path / "chat.log"
    slow = {"log": str(log), "slow": True}
    async with background(*worker_args(store), cwd=HERE) as worker:
        await read_until(worker.stderr, SERVING, bytearray())
        first = await submit(store, "m1", slow)
        assert first.code == 0, first.stderr
        await wait_for(store, "m1", "running")

        refused = await submit(store, "m2", slow, "--if-busy", "reject")
        assert refused.code == 1, refused.stderr
        error = refused.json()
        assert error["error"] == "thread_busy"
        assert error["state"] == {"kind": "running", "generation": 1}
        assert "'m1'" in error["message"]
        assert "--if-busy supersede" in error["message"]
        assert (await cli("runs", "show", "m2", "--store", store)).code == 1  # never committed
        unknown = await submit(store, "m2", slow, "--if-busy", "drop")
        assert unknown.code == 2
        assert unknown.json()["error"] == "bad_input"
        assert "'--if-busy'" in unknown.json()["message"]
        assert "'queue', 'reject', 'supersede'" in unknown.json()["message"]

        # A second message while the first is being answered: the first is stopped.
        second = await submit(store, "m3", {"log": str(log)}, "--if-busy", "supersede")
        assert second.code == 0, second.stderr
        done = await wait_for(store, "m3", "ended")
        assert done["state"]["cause"] == {"kind": "natural_end"}
        assert done["result"] == {"answered": "m3"}
        shown = await cli("runs", "show", "m1", "--store", store, "--json")
        old = shown.json()
        assert old["state"]["cause"] == {"kind": "stopped", "reason": "superseded"}
        assert old["events"][-1]["detail"] == {"superseded_by": "m3"}
        # One attempt per thread: the new answer started once the old one had stopped
        # (each writes its stop before its end is committed).
        assert log.read_text().split("\n")[:4] == ["start m1", "stop m1", "start m3", "stop m3"]
