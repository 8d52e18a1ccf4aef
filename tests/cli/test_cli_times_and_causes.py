"""``runs list`` and ``runs show`` as an operator reads them: when each run was created
and how long it ran, failures found by ``--state failed``, and a failed run's traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from awaken_trio import RunContext, open_runtime
from tests.cli.cli_helpers import cli


async def broken(ctx: RunContext) -> object:
    raise ValueError("the input is not a number")


async def fine(ctx: RunContext) -> object:
    return {"ok": True}


@pytest.mark.slow
async def test_failures_are_found_by_cause_and_show_their_traceback(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/runs.db"
    async with open_runtime(store, bodies={"broken": broken, "fine": fine}) as runtime:
        await runtime.execute(fine, run_id="ok-1")
        await runtime.execute(broken, run_id="bad-1")
        await runtime.execute(fine, run_id="ok-2")
    listed = await cli("runs", "list", "--state", "failed", "--store", store, "--json")
    assert listed.code == 0, listed.stderr
    (row,) = listed.json()
    assert row["run_id"] == "bad-1"
    assert row["state"]["cause"]["kind"] == "failed"
    assert row["created_at"] <= row["started_at"] <= row["ended_at"]
    ended = await cli("runs", "list", "--state", "natural_end", "--store", store, "--json")
    assert [r["run_id"] for r in ended.json()] == ["ok-2", "ok-1"]

    table = await cli("runs", "list", "--store", store)
    header, *lines = table.stdout.splitlines()
    assert header.split("\t")[-2:] == ["created", "duration"]
    cells = dict(zip(header.split("\t"), lines[0].split("\t"), strict=True))
    assert cells["run"] == "ok-2"
    assert cells["created"][:2] == "20"  # a date: 2026-...
    assert cells["duration"].endswith("s")

    shown = await cli("runs", "show", "bad-1", "--store", store)
    assert shown.code == 0, shown.stderr
    assert "traceback:" in shown.stdout
    assert "ValueError: the input is not a number" in shown.stdout
    assert 'raise ValueError("the input is not a number")' in shown.stdout
    fine_shown = await cli("runs", "show", "ok-1", "--store", store)
    assert "traceback:" not in fine_shown.stdout
    assert "duration" in fine_shown.stdout

    # The bulk filters take a cause too; ended runs are never counted (nothing ends them).
    bulk = await cli("runs", "cancel", "--state", "failed", "--dry-run", "--store", store, "--json")
    assert bulk.code == 0, bulk.stderr
    assert bulk.json() == {"matched": 0, "run_ids": []}

    unknown = await cli("runs", "list", "--state", "exploded", "--store", store)
    assert unknown.code == 2
    assert "failed" in unknown.stderr  # the choices, causes included
