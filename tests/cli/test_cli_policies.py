"""``runs submit --timeout/--deadline/--queue-timeout/--not-before`` end to end in real
processes (no worker: the runs stay where the commands put them, or end at their limits
when the command's own runtime finds them), and ``runs show`` with a deadline."""

from __future__ import annotations

import datetime
import time

import pytest

from awaken_trio import open_runtime
from tests.cli.cli_helpers import cli

pytestmark = pytest.mark.slow


async def _record(store: str, run_id: str) -> dict[str, object]:
    shown = await cli("runs", "show", run_id, "--store", store, "--json")
    assert shown.code == 0, shown.stderr
    record: dict[str, object] = shown.json()
    return record


async def test_submit_with_a_deadline_shows_it_in_the_record(store: str) -> None:
    at = datetime.datetime(2099, 1, 31, 9, 0, tzinfo=datetime.UTC)
    done = await cli(
        "runs", "submit", "job", "--run-id", "d-1", "--deadline", at.isoformat(), "--store", store
    )
    assert (done.code, done.stdout) == (0, "d-1\n"), done.stderr
    record = await _record(store, "d-1")
    assert record["deadline"] == at.timestamp()
    assert record["state"] == {"kind": "queued"}
    text = await cli("runs", "show", "d-1", "--store", store)
    assert text.code == 0
    [line] = [line for line in text.stdout.splitlines() if line.startswith("deadline")]
    assert "2099-01-31" in line


async def test_submit_with_a_timeout_and_a_delayed_start(store: str) -> None:
    before = time.time()
    done = await cli(
        "runs",
        "submit",
        "job",
        "--run-id",
        "d-2",
        "--timeout",
        "3600",
        "--queue-timeout",
        "600",
        "--not-before",
        "30m",
        "--store",
        store,
        "--json",
    )
    assert done.code == 0, done.stderr
    after = time.time()
    record = await _record(store, "d-2")
    deadline = record["deadline"]
    assert isinstance(deadline, float)
    assert before + 3600 <= deadline <= after + 3600
    async with open_runtime(store) as runtime:
        found = await runtime.record("d-2")
    assert found.not_before is not None
    assert before + 1800 <= found.not_before <= after + 1800
    later = datetime.datetime(2099, 2, 1, tzinfo=datetime.UTC)
    iso = await cli(
        "runs",
        "submit",
        "job",
        "--run-id",
        "d-3",
        "--not-before",
        later.isoformat(),
        "--store",
        store,
    )
    assert iso.code == 0, iso.stderr
    async with open_runtime(store) as runtime:
        assert (await runtime.record("d-3")).not_before == later.timestamp()


async def test_a_deadline_already_past_commits_the_run_ended(store: str) -> None:
    done = await cli(
        "runs",
        "submit",
        "job",
        "--run-id",
        "d-4",
        "--deadline",
        "2001-01-01T00:00:00+00:00",
        "--store",
        store,
        "--json",
    )
    assert done.code == 0, done.stderr
    assert done.json()["state"] == {
        "kind": "ended",
        "cause": {"kind": "stopped", "reason": "deadline"},
    }


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--timeout", "-1"), "--timeout"),
        (("--timeout", "soon"), "--timeout"),
        (("--queue-timeout", "-5"), "--queue-timeout"),
        (("--deadline", "tomorrow"), "--deadline needs an ISO 8601 time"),
        (("--not-before", "later"), "--not-before needs an ISO 8601 time"),
        (("--not-before", "5x"), "--not-before needs"),
        (("--timeout", "5", "--deadline", "2099-01-01T00:00:00"), "not both"),
        (("--timeout", "nan"), "timeout must be a finite number"),
    ],
)
async def test_bad_limits_are_usage_errors_and_nothing_is_committed(
    store: str, args: tuple[str, ...], words: str
) -> None:
    done = await cli("runs", "submit", "job", "--run-id", "bad-1", *args, "--store", store)
    assert done.code == 2, (done.stdout, done.stderr)
    assert words in done.stderr
    assert "Traceback" not in done.stderr
    missing = await cli("runs", "show", "bad-1", "--store", store)
    assert missing.code == 1


async def test_submit_with_retries_stores_the_policy_and_show_says_where_it_stands(
    store: str,
) -> None:
    done = await cli(
        "runs",
        "submit",
        "job",
        "--run-id",
        "rt-1",
        "--retries",
        "2",
        "--retry-backoff",
        "0.5",
        "--store",
        store,
        "--json",
    )
    assert done.code == 0, done.stderr
    record = await _record(store, "rt-1")
    assert record["retry"] == {
        "attempts": 3,
        "backoff": 0.5,
        "factor": 2.0,
        "max_backoff": 60.0,
        "codes": None,
    }
    assert record["retries"] == 0
    text = await cli("runs", "show", "rt-1", "--store", store)
    [line] = [line for line in text.stdout.splitlines() if line.startswith("retry")]
    assert "0 of 2 retries used (3 attempts; waits 0.5s, x2, at most 1m 00s)" in line
    plain = await cli("runs", "submit", "job", "--run-id", "rt-2", "--store", store, "--json")
    assert plain.code == 0
    assert (await _record(store, "rt-2"))["retry"] is None
    shown = await cli("runs", "show", "rt-2", "--store", store)
    assert not [line for line in shown.stdout.splitlines() if line.startswith("retry")]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--retries", "-1"], "--retries"),
        (["--retries", "x"], "--retries"),
        (["--retries", "2", "--retry-backoff", "-1"], "--retry-backoff"),
        (["--retry-backoff", "2"], "--retries"),
    ],
)
async def test_bad_retry_options_exit_2_naming_the_option(
    store: str, args: list[str], named: str
) -> None:
    run_id = f"bad-{abs(hash(tuple(args)))}"
    refused = await cli(
        "runs", "submit", "job", "--run-id", run_id, *args, "--store", store, "--json"
    )
    assert refused.code == 2, refused.stderr
    assert named in refused.json()["message"]
    unknown = await cli("runs", "show", run_id, "--store", store, "--json")
    assert unknown.code != 0  # nothing committed
    assert unknown.json()["error"] in ("unknown_run", "store_error")
