"""Ending many runs by filters (DESIGN §3.3): a dry run counts exactly the runs the same
filters with ``--yes`` would end, never an ended one; ``--yes`` lists the runs it ended."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.cli_helpers import cli

pytestmark = pytest.mark.slow  # a dozen commands, each a process


async def test_a_dry_run_counts_exactly_the_runs_yes_ends(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/bulk.db"
    for run_id in ("b-1", "b-2", "b-3"):
        assert (
            await cli("runs", "submit", "batch", "--run-id", run_id, "--store", store)
        ).code == 0
    assert (await cli("runs", "cancel", "b-3", "--store", store)).code == 0

    async def bulk(*args: str) -> dict[str, object]:
        done = await cli("runs", *args, "--name", "batch", "--store", store, "--json")
        assert done.code == 0, done.stderr
        answer: dict[str, object] = done.json()
        return answer

    # An ended run is never counted: --yes could not end it.
    assert await bulk("cancel", "--dry-run") == {"matched": 2, "run_ids": ["b-2", "b-1"]}
    ended = await bulk("cancel", "--state", "ended", "--dry-run")
    assert ended == {"matched": 0, "run_ids": []}
    assert await bulk("cancel", "--state", "ended", "--yes") == {"matched": 0, "run_ids": []}
    text = await cli(
        "runs", "stop", "--name", "batch", "--reason", "r", "--dry-run", "--store", store
    )
    assert text.stdout.splitlines() == ["2 runs would be stopped:", "  b-2", "  b-1"]

    stopped = await bulk("stop", "--reason", "over", "--yes")
    assert stopped == {"matched": 2, "run_ids": ["b-2", "b-1"]}
    rows = (await cli("runs", "list", "--store", store, "--json")).json()
    causes = {row["run_id"]: row["state"]["cause"]["kind"] for row in rows}
    assert causes == {"b-1": "stopped", "b-2": "stopped", "b-3": "cancelled"}
    again = await cli("runs", "cancel", "--name", "batch", "--yes", "--store", store)
    assert again.stdout.splitlines() == ["0 runs cancelled"]
