"""The JSON shapes text-keeping stores write: states, causes, tickets and payloads, exact and
stable, ASCII only, frozen when read back, and refused with a StoreError when malformed."""

from __future__ import annotations

import json
import math

import pytest

from awaken_trio import (
    EndCause,
    FrozenDict,
    FrozenList,
    ResumeTicket,
    RetryPolicy,
    RunState,
    StoreError,
)
from awaken_trio._core import wake_at
from awaken_trio.store._codec import (
    RECORD_COLUMNS,
    CodecError,
    dump_json,
    dump_retry,
    dump_shared,
    dump_state,
    dump_ticket,
    kind_of_variant,
    load_json,
    load_state,
    load_ticket,
    record_of,
    state_from_json,
    state_kind,
    state_to_json,
)

TICKET = ResumeTicket(
    correlation_id="c1",
    run_id="r1",
    thread_id="t1",
    reason="tool_permission",
    payload={"tool_call": {"id": "x", "arguments": [1, {"a": None}]}},
    deadline=12.5,
    accepts={"type": "object", "required": ["decision"]},
)

STATES = [
    RunState.Queued(),
    RunState.Running(1),
    RunState.Running(7),
    RunState.Awaiting(TICKET),
    RunState.Awaiting(ResumeTicket("c2", "r1", "t1", "manual_pause")),
    RunState.Ended(EndCause.NaturalEnd()),
    RunState.Ended(EndCause.MaxSteps()),
    RunState.Ended(EndCause.Cancelled()),
    RunState.Ended(EndCause.Stopped("runtime shutdown")),
    RunState.Ended(EndCause.Failed("value_error", "bad \x00 input \ud800")),
    RunState.Ended(EndCause.Indeterminate("owner lost 2 times")),
]


@pytest.mark.parametrize("state", STATES, ids=repr)
def test_every_state_survives_its_text(state: RunState) -> None:
    text = dump_state(state)
    assert text.isascii()
    assert "\x00" not in text
    assert load_state(text) == state
    assert state_from_json(state_to_json(state)) == state
    assert kind_of_variant(type(state)) == state_kind(state)


@pytest.mark.parametrize(
    ("state", "text"),
    [
        (RunState.Queued(), '{"kind":"queued"}'),
        (RunState.Running(2), '{"kind":"running","generation":2}'),
        (RunState.Ended(EndCause.Cancelled()), '{"kind":"ended","cause":{"kind":"cancelled"}}'),
        (
            RunState.Ended(EndCause.Stopped("x")),
            '{"kind":"ended","cause":{"kind":"stopped","reason":"x"}}',
        ),
        (
            RunState.Ended(EndCause.Failed("e", "m")),
            '{"kind":"ended","cause":{"kind":"failed","code":"e","message":"m"}}',
        ),
        (
            RunState.Awaiting(ResumeTicket("c", "r", "t", "user_input", deadline=None)),
            '{"kind":"awaiting","ticket":{"correlation_id":"c","run_id":"r","thread_id":"t",'
            '"reason":"user_input","payload":null,"deadline":null,"accepts":null}}',
        ),
    ],
)
def test_the_stored_shapes_are_stable(state: RunState, text: str) -> None:
    # These texts are the schema: files written by this version hold them.
    assert dump_state(state) == text
    assert load_state(text) == state


def test_a_ticket_keeps_every_field_and_comes_back_frozen() -> None:
    back = load_ticket(dump_ticket(TICKET))
    assert back == TICKET
    assert type(back.payload) is FrozenDict
    assert type(back.accepts) is FrozenDict
    awaiting = load_state(dump_state(RunState.Awaiting(TICKET)))
    assert isinstance(awaiting, RunState.Awaiting)
    assert type(awaiting.ticket.payload["tool_call"]["arguments"]) is FrozenList


def test_a_long_state_is_decoded_without_the_cache() -> None:
    big = RunState.Awaiting(ResumeTicket("c", "r", "t", "user_input", payload="x" * 10_000))
    text = dump_state(big)
    assert len(text) > 10_000
    assert load_state(text) == big
    assert load_state(text) is not load_state(text)
    short = dump_state(RunState.Running(3))
    assert load_state(short) is load_state(short)


def test_payloads_are_ascii_text_and_come_back_frozen() -> None:
    value = {"é": ["\x00", "\ud800", 1.5, 10**30, True, None], "n": {"m": []}}
    text = dump_json(value)
    assert text.isascii()
    assert "\x00" not in text
    assert " " not in text  # compact separators
    back = load_json(text, "a payload")
    assert back == value
    assert type(back) is FrozenDict
    assert type(back["é"]) is FrozenList
    assert load_json("null", "a payload") is None
    with pytest.raises(ValueError):
        dump_json({"x": math.nan})


def _encoded(value: object) -> str:
    return json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))


@pytest.mark.parametrize(
    "value",
    [
        0,
        -12,
        10**30,
        "",
        'é \x00 \ud800 "q"',
        None,
        True,
        1.5,
        {},
        {"step": 1},
        FrozenDict({"done": "x", "ok": True, "no": False, "none": None, "é": -3}),
        {"nested": {"a": 1}},
        {"f": 1.0},
        {"list": [1]},
        {str(i): i for i in range(20)},
        [1, "a", None],
    ],
)
def test_a_value_is_written_exactly_as_the_json_encoder_writes_it(value: object) -> None:
    assert dump_json(value) == _encoded(value)
    assert dump_shared(value) == _encoded(value)


def test_a_shared_value_is_kept_by_identity_never_by_equality() -> None:
    one, true, real = FrozenDict({"v": 1}), FrozenDict({"v": True}), FrozenDict({"v": 1.0})
    assert one == true == real  # equal, and yet their texts differ
    for _ in range(2):
        assert [dump_shared(v) for v in (one, true, real)] == ['{"v":1}', '{"v":true}', '{"v":1.0}']
    mutable = {"v": 1}
    assert dump_shared(mutable) == '{"v":1}'
    mutable["v"] = 2  # a plain dict can change: its text is not kept
    assert dump_shared(mutable) == '{"v":2}'


def test_an_end_is_written_the_same_from_the_cache() -> None:
    for state in STATES:
        if isinstance(state, RunState.Ended):
            assert (
                dump_state(state)
                == dump_state(state)
                == json.dumps(state_to_json(state), separators=(",", ":"))
            )


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"kind":"paused"}',
        '{"generation":1}',
        '{"kind":"running"}',
        '{"kind":"running","generation":"1"}',
        '{"kind":"running","generation":true}',
        '{"kind":"ended"}',
        '{"kind":"ended","cause":{"kind":"exploded"}}',
        '{"kind":"ended","cause":{"kind":"stopped"}}',
        '{"kind":"ended","cause":{"kind":"failed","code":"x","message":3}}',
        '{"kind":"ended","cause":"cancelled"}',
        '{"kind":"awaiting","ticket":{"correlation_id":"c"}}',
        '{"kind":"awaiting","ticket":{"correlation_id":"c","run_id":"r","thread_id":"t",'
        '"reason":"x","payload":null,"deadline":true,"accepts":null}}',
        '{"kind":"awaiting","ticket":{"correlation_id":"c","run_id":"r","thread_id":"t",'
        '"reason":"x","payload":null,"deadline":"soon","accepts":null}}',
    ],
)
def test_a_malformed_state_is_a_store_error(text: str) -> None:
    with pytest.raises(CodecError) as caught:
        load_state(text)
    assert isinstance(caught.value, StoreError)
    assert caught.value.outcome_unknown is False


@pytest.mark.parametrize("text", ["{", '{"a": NaN}', '{"a": Infinity}'])
def test_malformed_payload_text_is_a_store_error(text: str) -> None:
    with pytest.raises(CodecError, match="a checkpoint in the store"):
        load_json(text, "a checkpoint")


@pytest.mark.parametrize(
    ("reason", "payload", "expected"),
    [
        ("scheduled_action", {"wake_at": 5}, 5.0),
        ("scheduled_action", {"wake_at": 5.5}, 5.5),
        ("scheduled_action", {"wake_at": True}, None),
        ("scheduled_action", {"wake_at": "soon"}, None),
        ("scheduled_action", {"when": 5}, None),
        ("scheduled_action", [5], None),
        ("user_input", {"wake_at": 5}, None),
    ],
)
def test_wake_at_reads_only_scheduled_tickets(
    reason: str, payload: object, expected: float | None
) -> None:
    assert wake_at(ResumeTicket("c", "r", "t", reason, payload)) == expected


def test_only_state_variants_have_a_stored_kind() -> None:
    assert kind_of_variant(RunState) is None


def test_a_record_takes_each_column_as_its_own_field() -> None:
    """`record_of` reads `RECORD_COLUMNS` in order, each into its own field: a row whose
    every column differs comes back field for field (so reordering either breaks this)."""
    retry = RetryPolicy(attempts=4)
    columns = [name.removeprefix("r.") for name in RECORD_COLUMNS.split(", ")]
    stored = {
        "run_id": "run",
        "thread_id": "thread",
        "parent_run_id": "parent",
        "name": "job",
        "state": dump_state(RunState.Running(3)),
        "generation": 3,
        "result": '{"answer":1}',
        "checkpoint": '{"cursor":2}',
        "input": '{"question":3}',
        "steps": 4,
        "max_steps": 5,
        "forked_from": '{"run_id":"source","seq":6}',
        "created_at": 7.0,
        "updated_at": 8.0,
        "started_at": 9.0,
        "ended_at": 10.0,
        "worker_id": "worker",
        "not_before": 11.0,
        "deadline": 12.0,
        "body_version": "v13",
        "retry": dump_retry(retry),
        "retries": 14,
    }
    assert sorted(stored) == sorted(columns)
    record = record_of([stored[name] for name in columns])
    decoded = {
        "state": RunState.Running(3),
        "result": {"answer": 1},
        "checkpoint": {"cursor": 2},
        "input": {"question": 3},
        "forked_from": {"run_id": "source", "seq": 6},
        "retry": retry,
    }
    for name in columns:
        assert getattr(record, name) == decoded.get(name, stored[name]), name
