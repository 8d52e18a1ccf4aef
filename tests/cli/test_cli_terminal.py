"""``awaken-trio demo`` and ``runs watch``: a live table on a terminal (a pseudo-terminal
whose screen is read back), plain lines or JSON elsewhere."""

from __future__ import annotations

import signal

import pytest

from tests.cli.cli_helpers import cli, plain, terminal

DEMO_RUNS = [
    "count",
    "assistant",
    "stuck",
    "spender",
    "tree",
    "tree.child-1",
    "tree.child-1.grandchild",
    "tree.child-2",
    "tree.child-2.grandchild",
    "flaky",
]


@pytest.mark.slow
async def test_the_demo_draws_a_live_table_then_the_final_one(tmp_path: object) -> None:
    async with terminal("demo", "--store", f"sqlite:///{tmp_path}/demo.db") as screen:
        text = await screen.read_to_end()
        assert await screen.process.wait() == 0, text
    assert b"\x1b[" in screen.raw  # drawn: a terminal gets escape codes
    live, _, final = text.partition("final committed states")
    assert final, text
    # The live table showed the runs as they changed: running, paused, then ended.
    assert "awaiting" in live
    assert "running" in live
    assert "paused; resuming it from its checkpoint" in live
    for word in (
        "natural_end",
        "cancelled",
        "stopped",
        "token budget exhausted",
        "failed",
        "connection_error",
    ):
        assert word in final, word
    assert "┃ run" in final  # a drawn table


async def test_the_demo_off_a_terminal_prints_plain_lines_or_json(tmp_path: object) -> None:
    done = await cli("demo", "--store", f"sqlite:///{tmp_path}/a.db")
    assert done.code == 0, done.stderr
    assert "\x1b" not in done.stdout
    assert f"runs kept in sqlite:///{tmp_path}/a.db" in done.stdout
    lines = done.stdout.splitlines()
    final = lines[lines.index("final committed states") + 1 :]
    assert final[0].split("\t") == ["run", "name", "thread", "state", "cause", "reason", "attempts"]
    rows = {line.split("\t")[0]: line.split("\t") for line in final[1:] if "\t" in line}
    assert rows["spender"][3:6] == ["ended", "stopped", "token budget exhausted"]
    assert rows["assistant"][4:] == ["natural_end", "", "2"]  # paused once, resumed once
    assert rows["flaky"][4] == "failed"
    # The failure it tells is in its table, not also dumped by the library's log.
    assert done.stderr == ""
    as_json = await cli("demo", "--store", f"sqlite:///{tmp_path}/b.db", "--json")
    assert as_json.code == 0, as_json.stderr
    records = as_json.json()
    assert [row["run_id"] for row in records] == DEMO_RUNS
    causes = {row["run_id"]: row["state"]["cause"] for row in records}
    assert causes["stuck"] == {"kind": "cancelled"}
    assert causes["spender"] == {"kind": "stopped", "reason": "token budget exhausted"}
    assert causes["tree.child-2.grandchild"] == {"kind": "cancelled"}
    assert causes["flaky"]["kind"] == "failed"
    assert "runs kept in" in as_json.stderr  # the path, off stdout
    assert "Traceback" not in as_json.stderr


@pytest.mark.slow
async def test_watch_draws_a_run_until_it_ends_and_all_runs_until_ctrl_c(store: str) -> None:
    await cli("runs", "submit", "nobody-serves-this", "--run-id", "watched", "--store", store)
    async with terminal("runs", "watch", "watched", "--store", store) as screen:
        await screen.read_until(r"run watched: queued")
        cancelled = await cli("runs", "cancel", "watched", "--store", store)
        assert cancelled.code == 0
        text = await screen.read_until(r"ended: cancelled")
        assert await screen.process.wait() == 0, text  # the watched run ended
    async with terminal("runs", "watch", "--store", store) as screen:
        await screen.read_until(r"runs \(Ctrl-C to stop\)")
        await cli("runs", "submit", "nobody-serves-this", "--run-id", "watched-2", "--store", store)
        await screen.read_until("watched-2")
        screen.process.send_signal(signal.SIGINT)
        assert await screen.process.wait() == 0
    assert "Traceback" not in plain(screen.raw.decode())
