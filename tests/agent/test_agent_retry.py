"""Model failures: retries with backoff, exhaustion, fatal errors, stable codes."""

from __future__ import annotations

import logging
import random

import pytest
import trio
import trio.testing

from awaken_trio import EndCause, RunState, Runtime
from awaken_trio.agent import Agent, ModelError, ModelReply, ScriptedModel
from tests.agent.agent_helpers import Messages, agent_events, text
from tests.run_helpers import settle


def failed(state: RunState) -> tuple[str, str]:
    """The (code, message) of a Failed end."""
    assert isinstance(state, RunState.Ended), state
    assert isinstance(state.cause, EndCause.Failed), state.cause
    return state.cause.code, state.cause.message


async def test_retryable_errors_are_retried_with_backoff_then_the_reply_is_taken(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel(
        [
            ModelError("rate_limited", "slow down", retryable=True),
            ModelError("provider_error", "502 from upstream", retryable=True),
            text("finally"),
        ]
    )
    agent = Agent(model, retries=2, backoff=lambda retry: 10.0 * retry)
    start = trio.current_time()
    handle = await runtime.start(agent, input="hi")
    assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
    assert trio.current_time() - start == pytest.approx(30.0)  # 10 s, then 20 s
    assert (await runtime.record(handle.run_id)).result == {"text": "finally", "steps": 1}
    retries = [e.detail for e in await agent_events(runtime, handle.run_id)]
    assert retries == [
        {"step": 1, "retry": 1, "code": "rate_limited", "message": "slow down", "delay": 10.0},
        {
            "step": 1,
            "retry": 2,
            "code": "provider_error",
            "message": "502 from upstream",
            "delay": 20.0,
        },
    ]
    assert len(model.calls) == 3
    assert model.calls[0] == model.calls[2]  # a retry asks the same question


async def test_when_retries_run_out_the_run_fails_with_the_last_error(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel(
        [ModelError("timeout", f"attempt {i}", retryable=True) for i in range(1, 5)]
    )
    handle = await runtime.start(Agent(model, retries=2, backoff=lambda retry: 1.0), input="hi")
    assert failed(await settle(handle)) == ("timeout", "attempt 3")
    assert len(model.calls) == 3
    assert len(await agent_events(runtime, handle.run_id)) == 2


async def test_a_non_retryable_error_fails_the_run_at_once(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel([ModelError("unauthorized", "bad key"), text("never")])
    handle = await runtime.start(Agent(model, retries=5), input="hi")
    assert failed(await settle(handle)) == ("unauthorized", "bad key")
    assert len(model.calls) == 1
    assert await agent_events(runtime, handle.run_id) == []


async def test_retries_zero_fails_on_the_first_retryable_error(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel([ModelError("rate_limited", "429", retryable=True), text("never")])
    handle = await runtime.start(Agent(model, retries=0), input="hi")
    assert failed(await settle(handle))[0] == "rate_limited"
    assert len(model.calls) == 1


async def test_a_providers_retry_after_is_honoured_when_longer_than_the_backoff(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel(
        [ModelError("rate_limited", "429", retryable=True, retry_after=45.0), text("ok")]
    )
    start = trio.current_time()
    handle = await runtime.start(Agent(model, backoff=lambda retry: 1.0), input="hi")
    assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
    assert trio.current_time() - start == pytest.approx(45.0)
    assert [e.detail["delay"] for e in await agent_events(runtime, handle.run_id)] == [45.0]


async def test_the_default_backoff_is_exponential_with_jitter_from_the_given_rng(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def delays(seed: int) -> list[float]:
        model = ScriptedModel(
            [ModelError("rate_limited", "429", retryable=True) for _ in range(4)] + [text("ok")]
        )
        agent = Agent(model, retries=4, rng=random.Random(seed))
        handle = await runtime.start(agent, input="hi")
        assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
        return [e.detail["delay"] for e in await agent_events(runtime, handle.run_id)]

    first = await delays(7)
    for retry, delay in enumerate(first, start=1):
        ceiling = 0.5 * 2 ** (retry - 1)
        assert ceiling / 2 <= delay <= ceiling
    assert await delays(7) == first  # the jitter comes from the injected rng only
    assert await delays(8) != first


async def test_a_model_that_returns_something_else_fails_invalid_reply(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def wrong(messages: Messages, tools: Messages) -> ModelReply:
        return "just a string"  # type: ignore[return-value]

    handle = await runtime.start(Agent(ScriptedModel([wrong])), input="hi")
    assert failed(await settle(handle))[0] == "invalid_reply"


async def test_a_model_that_runs_out_of_script_fails_invalid_reply(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    handle = await runtime.start(Agent(ScriptedModel([])), input="hi")
    assert failed(await settle(handle))[0] == "invalid_reply"


async def test_an_adapter_bug_is_not_retried_and_fails_with_its_class_name(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def broken(messages: Messages, tools: Messages) -> ModelReply:
        raise ConnectionResetError("peer went away")

    model = ScriptedModel([broken, text("never")])
    handle = await runtime.start(Agent(model, retries=3), input="hi")
    assert failed(await settle(handle)) == ("connection_reset_error", "peer went away")
    assert len(model.calls) == 1


async def test_each_retry_is_logged_at_info_with_its_run_id_and_no_message_text(
    runtime: Runtime, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="awaken_trio")
    model = ScriptedModel(
        [
            ModelError("rate_limited", "slow down", retryable=True),
            ModelError("provider_error", "502 from upstream", retryable=True),
            text("finally"),
        ]
    )
    handle = await runtime.start(
        Agent(model, retries=2, backoff=lambda retry: 1.0), input="hi", run_id="ag"
    )
    assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
    records = [r for r in caplog.records if r.name == "awaken_trio.agent"]
    assert [(r.levelno, r.__dict__["run_id"]) for r in records] == [
        (logging.INFO, "ag"),
        (logging.INFO, "ag"),
    ]
    assert "rate_limited" in records[0].getMessage()
    assert "retry 1 of 2" in records[0].getMessage()
    assert "slow down" not in records[0].getMessage()  # the code only: a provider's text stays out
    assert "provider_error" in records[1].getMessage()
    assert "retry 2 of 2" in records[1].getMessage()
