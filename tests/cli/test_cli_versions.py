"""Body versions across processes (DESIGN §3.8): two worker processes serving different
versions of one body on one store never run each other's runs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.cli.cli_helpers import HERE, background, cli, read_until
from tests.cli.test_cli_worker import SERVING, state_of, wait_for, worker_args


@pytest.fixture
def durable_url(durable_at: Path | str) -> str:
    return durable_at if isinstance(durable_at, str) else f"sqlite:///{durable_at}"


@pytest.mark.slow
async def test_workers_of_two_versions_never_run_each_others_runs(durable_url: str) -> None:
    store = durable_url
    runs = [f"v-{i}" for i in range(6)]
    async with background(*worker_args(store, "cli_bodies:versioned_v1"), cwd=HERE) as one:
        await read_until(one.stderr, SERVING, bytearray())
        for run_id in runs[:3]:
            assert (
                await cli("runs", "submit", "versioned", "--run-id", run_id, "--store", store)
            ).code == 0
        for run_id in runs[:3]:
            assert (await wait_for(store, run_id, "awaiting"))["body_version"] == "1"
        async with background(*worker_args(store, "cli_bodies:versioned_v2"), cwd=HERE) as two:
            await read_until(two.stderr, SERVING, bytearray())
            for run_id in runs[3:]:
                assert (
                    await cli("runs", "submit", "versioned", "--run-id", run_id, "--store", store)
                ).code == 0
            pinned: dict[str, Any] = {}
            for run_id in runs[3:]:
                pinned[run_id] = (await wait_for(store, run_id, "awaiting"))["body_version"]
            # Every answer is queued for a worker; each run goes back to its own version.
            for run_id in runs:
                answered = await cli("runs", "resume", run_id, "--value", '"ok"', "--store", store)
                assert answered.code == 0, answered.stderr
            for run_id in runs:
                done = await wait_for(store, run_id, "ended")
                version = done["body_version"]
                assert version == ("1" if run_id in runs[:3] else pinned[run_id])
                assert done["result"] == {"ran": [version, version]}
                shown = await cli("runs", "show", run_id, "--store", store)
                assert re.search(rf"^version\s+{version}$", shown.stdout, re.MULTILINE)
    assert (await state_of(store, runs[0]))["body_version"] == "1"
