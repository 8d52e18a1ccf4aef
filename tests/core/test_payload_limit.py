"""max_payload_bytes: each payload's compact JSON text is bounded, and a larger payload is
refused at the call that hands it over, with an error naming its size and the limit."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from awaken_trio import (
    EndCause,
    FrozenDict,
    FrozenList,
    InvalidArgument,
    InvalidPayload,
    LiveCommand,
    RunContext,
    RunState,
    Runtime,
    UnknownRun,
    open_runtime,
)
from awaken_trio._core import (
    check_json,
    check_payload,
)
from awaken_trio.store import MemoryStore
from tests.run_helpers import history, reach, settle, start_parked

LIMIT = 1000


def text_size(value: object) -> int:
    """The store's encoding: compact, ASCII only."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=False))


def of_size(size: int) -> dict[str, str]:
    """A JSON object whose compact text is exactly ``size`` characters."""
    value = {"a": "x" * (size - len('{"a":""}'))}
    assert text_size(value) == size
    return value


# ---------------------------------------------------------------------------- the check


@pytest.mark.parametrize(
    "value",
    [
        "x" * (LIMIT - 2),
        of_size(LIMIT),
        ["é" * ((LIMIT - 2) // 6)],  # escaped as \u00e9: six characters each
        ["😀" * ((LIMIT - 4) // 12)],  # a surrogate pair: twelve
        [1.5e-300] * ((LIMIT - 1) // 9),
        [2**200] * ((LIMIT - 1) // 62),
        {"k": [None, True, False, {"n": -(2**63)}]},
    ],
)
def test_a_payload_within_the_limit_is_accepted(value: object) -> None:
    assert text_size(value) <= LIMIT
    assert check_payload(value, "input of run 'r1'", LIMIT) == value


@pytest.mark.parametrize(
    "value",
    [
        "x" * (LIMIT - 1),
        of_size(LIMIT + 1),
        ["é" * ((LIMIT - 2) // 6 + 1)],
        ["😀" * ((LIMIT - 4) // 12 + 1)],
        [1.5e-300] * ((LIMIT - 1) // 9 + 1),
        [[[2**200] * 8] * 8],
        {"k": "\x00" * 200},
    ],
)
def test_a_payload_over_the_limit_is_refused_naming_its_size_and_the_limit(
    value: object,
) -> None:
    size = text_size(value)
    assert size > LIMIT
    with pytest.raises(InvalidPayload) as info:
        check_payload(value, "input of run 'r1'", LIMIT)
    message = str(info.value)
    assert message.startswith("input of run 'r1' is ")
    assert f"{size} bytes" in message
    assert f"max_payload_bytes={LIMIT}" in message


def test_a_huge_payload_is_refused_without_encoding_it() -> None:
    # 50 MB of text against the 4 MiB default: the size is bounded from below without
    # building the 50 MB encoding (the message says "at least").
    value = {"doc": "x" * 50_000_000, "more": ["y" * 1000] * 10}
    with pytest.raises(InvalidPayload, match=r"is at least 50010\d+ bytes") as info:
        check_payload(value, "input of run 'r1'", 4 * 2**20)
    assert "max_payload_bytes=4194304" in str(info.value)


def test_a_long_list_is_refused_before_it_is_copied() -> None:
    value = list(range(10_000))
    with pytest.raises(InvalidPayload, match=r"at least \d+ bytes"):
        check_payload({"items": [value]}, "input of run 'r1'", LIMIT)


@pytest.mark.parametrize(
    "frozen",
    [FrozenDict({"a": "x" * LIMIT}), FrozenList(["x" * LIMIT]), check_json(of_size(LIMIT + 1), "")],
)
def test_a_frozen_payload_over_the_limit_is_refused(frozen: object) -> None:
    with pytest.raises(InvalidPayload, match=rf"max_payload_bytes={LIMIT}"):
        check_payload(frozen, "input of run 'r1'", LIMIT)
    with pytest.raises(InvalidPayload, match=rf"max_payload_bytes={LIMIT}"):
        check_payload({"nested": frozen}, "input of run 'r1'", LIMIT)


def test_a_frozen_payload_within_the_limit_is_handed_back_as_it_is() -> None:
    frozen = check_json(of_size(LIMIT), "")
    assert check_payload(frozen, "input of run 'r1'", LIMIT) is frozen
    assert check_payload(frozen, "input of run 'r1'", LIMIT) is frozen  # measured once


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**300), max_value=2**300)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=8), children, max_size=6)
    ),
    max_leaves=40,
)


@given(json_values, st.integers(min_value=-3, max_value=3))
def test_the_limit_is_exact_for_every_json_value(value: Any, offset: int) -> None:
    size = text_size(value)
    limit = max(1, size + offset)
    if size <= limit:
        assert check_payload(value, "a payload", limit) == value
        assert check_payload(check_json(value, "x"), "a payload", limit) == value
    else:
        with pytest.raises(InvalidPayload, match=r"is (at least )?\d+ bytes"):
            check_payload(value, "a payload", limit)
        with pytest.raises(InvalidPayload, match=r"is (at least )?\d+ bytes"):
            check_payload(check_json(value, "x"), "a payload", limit)


# ---------------------------------------------------------------------------- the option


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "4096", None])
async def test_max_payload_bytes_must_be_a_positive_int(value: object) -> None:
    with pytest.raises(InvalidArgument, match=r"max_payload_bytes must be a positive int"):
        async with open_runtime(max_payload_bytes=value):  # type: ignore[arg-type]
            pass  # pragma: no cover


async def test_the_default_limit_is_four_mebibytes() -> None:
    async def body(ctx: RunContext) -> object:
        return None

    async with open_runtime() as runtime:
        state = await runtime.execute(body, input="x" * (4 * 2**20 - 2))
        assert state == RunState.Ended(EndCause.NaturalEnd())
        with pytest.raises(InvalidPayload, match=r"4194305 bytes.*max_payload_bytes=4194304"):
            await runtime.start(body, input="x" * (4 * 2**20 - 1), run_id="big")
        with pytest.raises(UnknownRun):
            await runtime.state("big")


# ---------------------------------------------------------------------------- every payload

BIG = of_size(LIMIT + 1)
FITS = of_size(LIMIT)


@pytest.fixture
async def small(store: MemoryStore) -> Any:
    async with open_runtime(store, max_payload_bytes=LIMIT) as rt:
        yield rt


async def test_input_over_the_limit_is_refused_by_start_execute_and_submit(small: Runtime) -> None:
    async def body(ctx: RunContext) -> object:
        return None

    small.register("job", body)
    for call in (small.start, small.execute):
        with pytest.raises(InvalidPayload, match=r"input of run 'r1' is (at least )?1001 bytes"):
            await call(body, input=BIG, run_id="r1")
    with pytest.raises(InvalidPayload, match=r"input of run 'r1' is (at least )?1001 bytes"):
        await small.submit("job", input=BIG, run_id="r1")
    with pytest.raises(UnknownRun):
        await small.state("r1")
    assert await small.execute(body, input=FITS) == RunState.Ended(EndCause.NaturalEnd())


async def body_refusal(small: Runtime, act: Callable[[RunContext], Awaitable[object]]) -> str:
    """Run a body that hands over one payload; the refusal it caught, as text."""
    caught: list[str] = []

    async def body(ctx: RunContext) -> object:
        try:
            await act(ctx)
        except InvalidPayload as exc:
            caught.append(str(exc))
        return "went on"

    handle = await small.start(body, run_id="r1")
    assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
    assert (await small.record("r1")).result == "went on"
    assert len(caught) == 1
    return caught[0]


async def _child(ctx: RunContext) -> object:
    return None


@pytest.mark.parametrize(
    ("act", "what"),
    [
        (lambda ctx: ctx.boundary(BIG), "progress of run 'r1'"),
        (lambda ctx: ctx.await_input("q", payload=BIG), "ticket payload of run 'r1'"),
        (lambda ctx: ctx.await_input("q", progress=BIG), "progress of run 'r1'"),
        (lambda ctx: ctx.emit("app.note", BIG), "detail of 'app.note'"),
        (lambda ctx: ctx.start_child(_child, input=BIG, run_id="c1"), "input of run 'c1'"),
    ],
)
async def test_payloads_a_body_hands_over_are_refused_at_the_call(
    small: Runtime, act: Callable[[RunContext], Awaitable[object]], what: str
) -> None:
    message = await body_refusal(small, act)
    assert re.match(rf"{re.escape(what)} is (at least )?1001 bytes", message)
    assert f"max_payload_bytes={LIMIT}" in message
    events = await history(small, "r1")
    assert [e.kind for e in events] == ["committed", "committed"]  # Running, Ended


async def test_a_result_over_the_limit_ends_the_run_failed_invalid_result(small: Runtime) -> None:
    async def body(ctx: RunContext) -> object:
        return BIG

    state = await small.execute(body, run_id="r1")
    assert isinstance(state, RunState.Ended)
    cause = state.cause
    assert isinstance(cause, EndCause.Failed)
    assert cause.code == "invalid_result"
    assert re.match(r"result of run 'r1' is (at least )?1001 bytes", cause.message)
    assert (await small.record("r1")).result is None


async def test_a_resume_value_over_the_limit_is_refused_and_the_ticket_stays(
    small: Runtime,
) -> None:
    async def body(ctx: RunContext) -> object:
        if ctx.resume_value is None:
            await ctx.await_input("q")
        return "answered"

    awaiting = await small.execute(body, run_id="r1")
    assert isinstance(awaiting, RunState.Awaiting)
    with pytest.raises(
        InvalidPayload, match=r"resume value for run 'r1' is (at least )?1001 bytes"
    ):
        await small.resume("r1", BIG)
    assert await small.state("r1") == awaiting
    handle = await small.resume("r1", FITS)
    assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())


async def test_a_message_over_the_limit_is_refused_by_deliver_and_send(small: Runtime) -> None:
    handle = await start_parked(small, run_id="r1")
    command = LiveCommand.Message("r1", BIG)
    with pytest.raises(
        InvalidPayload, match=r"message payload for run 'r1' is (at least )?1001 bytes"
    ):
        small.deliver(command)
    with pytest.raises(
        InvalidPayload, match=r"message payload for run 'r1' is (at least )?1001 bytes"
    ):
        await small.send(command)
    with pytest.raises(
        InvalidPayload, match=r"message payload for run 'r1' is (at least )?1001 bytes"
    ):
        await small.deliver_to_current_attempt(command)
    small.deliver(LiveCommand.Cancel("r1"))
    assert await settle(handle) == RunState.Ended(EndCause.Cancelled())
    events = await history(small, "r1")
    assert "messages_discarded" not in [e.kind for e in events]


async def test_a_message_within_the_limit_arrives(small: Runtime) -> None:
    got = trio.Event()
    seen: list[object] = []

    async def body(ctx: RunContext) -> object:
        seen.extend(await ctx.boundary(wait=True))
        got.set()
        return None

    handle = await small.start(body)
    small.deliver(LiveCommand.Message(handle.run_id, FITS))
    await reach(got)
    assert seen == [FITS]
    await settle(handle)


async def test_a_late_result_over_the_limit_is_recorded_as_a_short_description(
    small: Runtime,
) -> None:
    entered = trio.Event()
    release = trio.Event()

    async def body(ctx: RunContext) -> object:
        with trio.CancelScope(shield=True):
            entered.set()
            await release.wait()
        return BIG

    handle = await small.start(body, run_id="r1")
    await reach(entered)
    small.deliver(LiveCommand.Cancel("r1"))
    release.set()
    assert await settle(handle) == RunState.Ended(EndCause.Cancelled())
    late = [e for e in await history(small, "r1") if e.kind == "late_result_discarded"]
    assert len(late) == 1
    described = late[0].detail["result"]
    assert isinstance(described, str)
    assert described.startswith("{'a': 'xxx")
    assert text_size(late[0].detail) <= LIMIT
