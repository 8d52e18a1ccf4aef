"""``awaken-trio runs ...`` end to end in real processes: the JSON shapes, the exit codes,
bad input and store errors (no worker: runs stay where the commands put them)."""

from __future__ import annotations

import inspect
import sqlite3
from pathlib import Path

import pytest
import trio

from awaken_trio import Runtime
from tests.cli.cli_helpers import cli, environment

ROW_KEYS = {
    "run_id",
    "thread_id",
    "parent_run_id",
    "name",
    "state",
    "generation",
    "created_at",
    "started_at",
    "ended_at",
}
EVENT_KEYS = {"seq", "run_id", "thread_id", "generation", "kind", "state", "detail", "at"}


@pytest.mark.slow
async def test_submit_list_and_show_print_the_codec_shapes(store: str) -> None:
    first = await cli(
        "runs",
        "submit",
        "job",
        "--run-id",
        "s-1",
        "--input",
        '{"q": 1}',
        "--store",
        store,
        "--json",
    )
    assert first.code == 0, first.stderr
    row = first.json()
    assert isinstance(row.pop("created_at"), float)
    assert first.json() | {"created_at": None} == {
        "created_at": None,
        "started_at": None,
        "ended_at": None,
        "run_id": "s-1",
        "thread_id": "s-1",
        "parent_run_id": None,
        "name": "job",
        "state": {"kind": "queued"},
        "generation": 0,
    }
    # The store from the environment; the id alone without --json.
    second = await cli(
        "runs",
        "submit",
        "other",
        "--run-id",
        "s-2",
        "--thread",
        "t-s",
        env=environment(AWAKEN_TRIO_STORE=store),
    )
    assert (second.code, second.stdout) == (0, "s-2\n")
    again = await cli(
        "runs", "submit", "job", "--run-id", "s-1", "--input", '{"q": 1}', "--store", store
    )
    assert (again.code, again.stdout) == (0, "s-1\n")  # idempotent

    listed = await cli("runs", "list", "--store", store, "--json")
    rows = listed.json()
    assert [row["run_id"] for row in rows][:2] == ["s-2", "s-1"]  # newest first
    assert all(set(row) == ROW_KEYS for row in rows)
    by_name = await cli(
        "runs", "list", "--name", "job", "--state", "queued", "--store", store, "--json"
    )
    assert [row["run_id"] for row in by_name.json()] == ["s-1"]
    by_thread = await cli(
        "runs", "list", "--thread", "t-s", "--limit", "1", "--store", store, "--json"
    )
    assert [row["run_id"] for row in by_thread.json()] == ["s-2"]
    table = await cli("runs", "list", "--name", "job", "--store", store)
    assert table.code == 0
    assert "s-1" in table.stdout
    assert "queued" in table.stdout
    assert "\x1b" not in table.stdout

    shown = await cli("runs", "show", "s-1", "--store", store, "--json")
    record = shown.json()
    assert set(record) == ROW_KEYS | {
        "result",
        "checkpoint",
        "forked_from",
        "updated_at",
        "worker_id",
        "deadline",
        "body_version",
        "retry",
        "retries",
        "not_before",
        "events",
    }
    assert record["updated_at"] == record["created_at"]
    assert record["worker_id"] is None  # never claimed
    assert record["forked_from"] is None
    assert record["deadline"] is None
    assert record["body_version"] is None  # never run
    assert (record["retry"], record["retries"], record["not_before"]) == (None, 0, None)
    assert record["result"] is None
    assert [event["kind"] for event in record["events"]] == ["committed"]
    assert set(record["events"][0]) == EVENT_KEYS
    assert record["events"][0]["state"] == {"kind": "queued"}
    text = await cli("runs", "show", "s-1", "--store", store)
    assert "s-1" in text.stdout
    assert '{"q": 1}' in text.stdout


@pytest.mark.slow
async def test_control_commands_print_the_committed_state(store: str) -> None:
    await cli("runs", "submit", "job", "--run-id", "c-1", "--store", store)
    await cli("runs", "submit", "job", "--run-id", "c-2", "--store", store)
    stopped = await cli("runs", "stop", "c-1", "--reason", "budget", "--store", store, "--json")
    assert stopped.code == 0, stopped.stderr
    assert stopped.json() == {"kind": "ended", "cause": {"kind": "stopped", "reason": "budget"}}
    cancelled = await cli("runs", "cancel", "c-2", "--store", store)
    assert (cancelled.code, cancelled.stdout) == (0, "c-2: ended: cancelled\n")
    events = await cli("runs", "events", "c-1", "--store", store, "--json")
    lines = [line for line in events.stdout.splitlines() if line]
    assert len(lines) == 2  # JSON Lines: submitted, stopped
    after = await cli("runs", "events", "c-1", "--after", "0", "--store", store, "--json")
    assert after.stdout == events.stdout
    first_seq = int(lines[0].split('"seq": ')[1].split(",")[0])
    later = await cli(
        "runs", "events", "c-1", "--after", str(first_seq), "--store", store, "--json"
    )
    assert later.stdout.splitlines() == lines[1:]


async def test_a_cancel_records_its_reason(store: str) -> None:
    await cli("runs", "submit", "job", "--run-id", "r-1", "--store", store)
    done = await cli("runs", "cancel", "r-1", "--reason", "operator", "--store", store, "--json")
    if "reason" not in inspect.signature(Runtime.cancel_run).parameters:
        # A runtime whose cancel_run records no reason: refused as bad input, nothing done.
        assert done.code == 2
        assert "omit --reason" in done.json()["message"]
        return
    assert done.code == 0, done.stderr
    assert done.json() == {"kind": "ended", "cause": {"kind": "cancelled"}}
    shown = (await cli("runs", "show", "r-1", "--store", store, "--json")).json()
    assert shown["events"][-1]["detail"].get("reason") == "operator"


CANCELLED = {"kind": "ended", "cause": {"kind": "cancelled"}}
REFUSALS = [
    (["runs", "show", "nope"], "unknown_run", None),
    (["runs", "resume", "f-q"], "not_awaiting", {"kind": "queued"}),
    (
        ["runs", "cancel", "f-e"],
        "run_already_ended",
        {"kind": "ended", "cause": {"kind": "cancelled"}},
    ),
    (["runs", "pause", "f-e"], "not_active", CANCELLED),
    (["runs", "wake", "f-e"], "not_active", CANCELLED),
    (
        ["runs", "message", "f-e", '"hi"'],
        "not_active",
        {"kind": "ended", "cause": {"kind": "cancelled"}},
    ),
    (["runs", "submit", "else", "--run-id", "f-q"], "run_exists", {"kind": "queued"}),
]


@pytest.mark.slow
async def test_a_refusal_exits_1_naming_why_and_the_committed_state(store: str) -> None:
    await cli("runs", "submit", "job", "--run-id", "f-q", "--store", store)
    await cli("runs", "submit", "job", "--run-id", "f-e", "--store", store)
    await cli("runs", "cancel", "f-e", "--store", store)

    async def check(args: list[str], error: str, state: object) -> None:
        as_json = await cli(*args, "--store", store, "--json")
        assert as_json.code == 1, (args, as_json.stderr)
        assert as_json.json()["error"] == error
        assert as_json.json()["state"] == state
        assert as_json.json()["message"]
        as_text = await cli(*args, "--store", store)
        assert as_text.code == 1
        assert as_text.stdout == ""
        lines = as_text.stderr.splitlines()
        assert len(lines) == 1, as_text.stderr
        assert error in lines[0]
        assert "committed state:" in lines[0]

    async with trio.open_nursery() as nursery:
        for case in REFUSALS:
            nursery.start_soon(check, *case)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["runs", "submit", "job", "--input", "{bad"], "not valid JSON"),
        (["runs", "submit", "job", "--input", "NaN"], "not valid JSON"),
        (["runs", "message", "x", "[1,"], "not valid JSON"),
        (["runs", "list", "--state", "paused"], "paused"),
        (["runs", "list", "--limit", "0"], "limit"),
        (["runs", "submit", ""], "name"),
        (["runs", "cancel", "--name", "job"], "--dry-run"),
        (["runs", "cancel", "x", "--name", "job"], "not both"),
        (["runs", "cancel"], "run ID"),
        (["runs", "stop", "x"], "--reason"),
        (["runs", "nonsense"], "nonsense"),
    ],
)
async def test_bad_input_exits_2_with_one_clear_line(
    store: str, args: list[str], says: str
) -> None:
    done = await cli(*args, "--store", store)
    assert done.code == 2, (done.stdout, done.stderr)
    assert says in done.stderr
    assert "Traceback" not in done.stderr


async def test_a_store_url_is_checked_and_its_password_never_printed(tmp_path: Path) -> None:
    secret = "postgresql://alice:hunter2@db.example:5432/runs?pool_size=0"
    for args in (["runs", "list", "--store", secret], ["worker", "cli_bodies", "--store", secret]):
        done = await cli(*args, cwd=Path(__file__).parent)
        assert done.code == 2, done.stderr
        assert "hunter2" not in done.stdout + done.stderr
        assert "alice:***@" in done.stderr
    # A well-formed URL of a server that cannot be reached: a store error, no password.
    unreachable = "postgresql://alice:hunter2@db.invalid:5432/runs"
    done = await cli("runs", "list", "--store", unreachable)
    assert done.code == 3, done.stderr
    assert "hunter2" not in done.stdout + done.stderr
    assert "alice:***@" in done.stderr
    unknown = await cli("runs", "list", "--store", "redis://x", "--json")
    assert unknown.code == 2
    assert unknown.json()["error"] == "invalid_argument"
    missing = await cli("runs", "list")
    assert missing.code == 2
    assert "AWAKEN_TRIO_STORE" in missing.stderr


async def test_a_store_that_cannot_be_opened_exits_3(tmp_path: Path) -> None:
    absent = tmp_path / "absent.db"
    done = await cli("runs", "list", "--store", f"sqlite:///{absent}")
    assert done.code == 3
    assert "no store" in done.stderr
    assert not absent.exists()  # a read creates nothing
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all" * 10)
    done = await cli("runs", "show", "x", "--store", f"sqlite:///{garbage}", "--json")
    assert done.code == 3
    assert done.json()["error"] == "store_error"
    assert done.json()["state"] is None
    assert garbage.read_bytes() == b"not a database at all" * 10
    newer = tmp_path / "newer.db"
    made = await cli("runs", "submit", "job", "--store", f"sqlite:///{newer}")
    assert made.code == 0
    with sqlite3.connect(newer) as conn:
        conn.execute("PRAGMA user_version = 999")
    done = await cli("runs", "list", "--store", f"sqlite:///{newer}")
    assert done.code == 3
    assert "newer" in done.stderr.lower()
    assert "Traceback" not in done.stderr


@pytest.mark.slow
async def test_cancel_by_filters_needs_dry_run_or_yes(store: str) -> None:
    for run_id in ("b-1", "b-2", "b-3"):
        await cli(
            "runs", "submit", "batch", "--run-id", run_id, "--thread", "t-b", "--store", store
        )
    dry = await cli(
        "runs",
        "cancel",
        "--name",
        "batch",
        "--state",
        "queued",
        "--dry-run",
        "--store",
        store,
        "--json",
    )
    assert dry.code == 0, dry.stderr
    assert dry.json() == {"matched": 3, "run_ids": ["b-3", "b-2", "b-1"]}
    listed = await cli(
        "runs", "list", "--name", "batch", "--state", "queued", "--store", store, "--json"
    )
    assert len(listed.json()) == 3  # a dry run changes nothing
    done = await cli("runs", "cancel", "--thread", "t-b", "--yes", "--store", store, "--json")
    assert done.code == 0, done.stderr
    assert done.json()["matched"] == 3
    assert sorted(done.json()["run_ids"]) == ["b-1", "b-2", "b-3"]
    left = await cli(
        "runs", "list", "--name", "batch", "--state", "ended", "--store", store, "--json"
    )
    assert {row["state"]["cause"]["kind"] for row in left.json()} == {"cancelled"}
    text = await cli("runs", "cancel", "--name", "batch", "--dry-run", "--store", store)
    assert text.stdout == "0 runs would be cancelled\n"  # all three have ended


@pytest.mark.slow
async def test_fork_prints_the_new_runs_row_and_refuses_a_bad_seq_or_an_unknown_run(
    store: str,
) -> None:
    await cli("runs", "submit", "job", "--run-id", "k-src", "--input", "[7]", "--store", store)
    [event] = (await cli("runs", "show", "k-src", "--store", store, "--json")).json()["events"]
    done = await cli(
        "runs",
        "fork",
        "k-src",
        "--at",
        str(event["seq"]),
        "--run-id",
        "k-f",
        "--store",
        store,
        "--json",
    )
    assert done.code == 0, done.stderr
    assert isinstance(done.json()["created_at"], float)
    assert done.json() | {"created_at": None} == {
        "created_at": None,
        "started_at": None,
        "ended_at": None,
        "run_id": "k-f",
        "thread_id": "k-f",
        "parent_run_id": None,
        "name": "job",
        "state": {"kind": "queued"},
        "generation": 0,
    }
    shown = (await cli("runs", "show", "k-f", "--store", store, "--json")).json()
    assert shown["forked_from"] == {"run_id": "k-src", "seq": event["seq"]}
    text = await cli("runs", "fork", "k-src", "--store", store)
    assert text.code == 0, text.stderr
    assert text.stdout.strip() not in ("", "k-src", "k-f")
    bad = await cli("runs", "fork", "k-src", "--at", "999999", "--store", store, "--json")
    assert bad.code == 2, bad.stderr
    assert bad.json()["error"] == "invalid_argument"
    unknown = await cli("runs", "fork", "k-nobody", "--store", store, "--json")
    assert unknown.code == 1, unknown.stderr
    assert unknown.json()["error"] == "unknown_run"
    taken = await cli("runs", "fork", "k-src", "--run-id", "k-f", "--store", store, "--json")
    assert taken.code == 1, taken.stderr
    assert taken.json()["error"] == "run_exists"


@pytest.mark.slow
async def test_prune_deletes_ended_runs_and_counts_them_with_dry_run(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/prune.db"
    for run_id in ("p-1", "p-2", "p-q"):
        await cli("runs", "submit", "job", "--run-id", run_id, "--store", store)
    for run_id in ("p-1", "p-2"):
        assert (await cli("runs", "cancel", run_id, "--store", store)).code == 0
    later = await cli("runs", "prune", "--ended-before", "7d", "--store", store, "--json")
    assert (later.code, later.json()) == (0, {"deleted": 0}), later.stderr
    dry = await cli(
        "runs", "prune", "--ended-before", "0s", "--dry-run", "--store", store, "--json"
    )
    assert (dry.code, dry.json()) == (0, {"deleted": 2}), dry.stderr
    assert len((await cli("runs", "list", "--store", store, "--json")).json()) == 3
    done = await cli("runs", "prune", "--ended-before", "0s", "--store", store)
    assert (done.code, done.stdout) == (0, "2 runs deleted\n"), done.stderr
    rows = (await cli("runs", "list", "--store", store, "--json")).json()
    assert [row["run_id"] for row in rows] == ["p-q"]  # the queued run stays
    assert (await cli("runs", "cancel", "p-q", "--store", store)).code == 0
    one = await cli("runs", "prune", "--ended-before", "0s", "--dry-run", "--store", store)
    assert (one.code, one.stdout) == (0, "1 run would be deleted\n"), one.stderr
    for bad in ("7", "3w", "-1d", "1.5h", "d"):
        refused = await cli("runs", "prune", "--ended-before", bad, "--store", store, "--json")
        assert refused.code == 2, (bad, refused.stderr)
        assert "--ended-before" in refused.json()["message"]
