"""How every face says where a run's retries stand (`describe_retry`), and the record's JSON
shape for them."""

from __future__ import annotations

import time

from awaken_trio import EndCause, RetryPolicy, RunRecord, RunState
from awaken_trio._face.shapes import describe_retry, format_time, record_json


def _record(**fields: object) -> RunRecord:
    base: dict[str, object] = {
        "run_id": "r",
        "thread_id": "r",
        "parent_run_id": None,
        "name": "job",
        "state": RunState.Queued(),
        "generation": 0,
        "result": None,
        "checkpoint": None,
        "input": None,
        "steps": 0,
        "max_steps": None,
    }
    return RunRecord(**{**base, **fields})  # type: ignore[arg-type]


def test_a_run_without_a_policy_says_nothing_of_retries() -> None:
    record = _record()
    assert describe_retry(record) is None
    shape = record_json(record)
    assert (shape["retry"], shape["retries"], shape["not_before"]) == (None, 0, None)


def test_a_run_waiting_to_retry_says_when_its_next_try_is() -> None:
    at = time.time() + 30
    record = _record(
        generation=1, retry=RetryPolicy(attempts=2, backoff=30), retries=1, not_before=at
    )
    assert describe_retry(record) == (
        "1 of 1 retry used (2 attempts; waits 30.0s, x2, at most 1m 00s); next try "
        + format_time(at)
    )
    assert record_json(record)["retry"] == {
        "attempts": 2,
        "backoff": 30,
        "factor": 2.0,
        "max_backoff": 60.0,
        "codes": None,
    }


def test_a_delayed_start_is_not_called_a_retry_and_an_ended_run_has_no_next_try() -> None:
    at = time.time() + 30
    delayed = _record(retry=RetryPolicy(), not_before=at)
    assert describe_retry(delayed) == (
        "0 of 2 retries used (3 attempts; waits 1.0s, x2, at most 1m 00s)"
    )
    ended = _record(
        state=RunState.Ended(EndCause.Failed("flaky", "x")),
        retry=RetryPolicy(attempts=1, codes=("flaky", "timeout")),
    )
    assert describe_retry(ended) == (
        "0 of 0 retries used (1 attempt; waits 1.0s, x2, at most 1m 00s; codes flaky, timeout)"
    )
