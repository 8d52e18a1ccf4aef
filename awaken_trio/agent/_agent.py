"""The agent loop: a run body that alternates model inference and tool calls.

One step is one ``infer`` (with its retries) plus the tool calls it asked for, run
concurrently inside the attempt, then a boundary that commits the checkpoint. Everything
the loop knows lives in that checkpoint (see `Progress`), so a resumed or recovered
attempt continues from committed truth, and an `Agent` keeps no per-run state: one
instance serves any number of runs, and may be registered by name.

A tool call that waits (``permission="ask"`` or ``"client"``) is asked with
``ctx.await_input(..., progress=checkpoint)``: the step is committed together with its
ticket, without passing a boundary, so a pending pause waits for the next boundary with
no tool call pending, and live messages stay in the inbox (they ride with the ticket to
the next attempt). The resume that answers a ticket is matched to its call through
``ctx.resumed_ticket`` (reason and correlation id), never by the value's shape.

Cancellation needs no special code: every ``await`` is a cancellation point, and every
commit the loop makes is preceded by one, so a reply or a tool result that arrives after
the attempt was cancelled never reaches the committed transcript.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import random
from collections.abc import Callable, Iterable
from typing import Any, Literal, NoReturn, final

import attrs
import trio

from awaken_trio import (
    AwakenError,
    InvalidArgument,
    JsonValue,
    MaxStepsReached,
    ResumeTicket,
    RunContext,
    RunError,
)

from ._model import Model, ModelError, ModelReply
from ._tokens import TokenSink, streaming_tokens
from ._tools import (
    SubAgentTool,
    Tool,
    error_content,
    error_message,
    result_content,
    thaw,
)
from ._transcript import (
    CLIENT_SCHEMA,
    PERMISSION_SCHEMA,
    PendingCall,
    Progress,
    Wait,
    answer_fits,
    user_message,
)

# Retries of an inference (logger "awaken_trio.agent"; the run id in extra).
logger = logging.getLogger("awaken_trio.agent")

Phase = Literal["inference", "tools", "boundary"]
"""Where a step is: waiting for the model, deciding and running its tool calls, or
committing at its boundary."""

_REASONS: dict[Wait, str] = {"ask": "tool_permission", "client": "client_execution"}
"""The ticket reason a waiting call is asked with."""

Backoff = Callable[[int], float]
"""Seconds to wait before retry number ``n`` (1 for the first retry)."""

_BACKOFF_BASE = 0.5
_BACKOFF_CAP = 30.0


@final
class Agent:
    """A run body that runs a model-and-tools loop (pass it to ``runtime.start``,
    ``ctx.run_child``, or register it by name).

    Args:
        model: the `Model` port (`ScriptedModel`, `OpenAIChatModel`, your own).
        tools: `Tool` and `SubAgentTool` values, with distinct names.
        system: a system prompt, put first unless the input's messages start with one.
        max_steps: at most this many steps across all the run's attempts; a run that
            still has tool calls after its last step ends ``Ended(MaxSteps())``.
        retries: how many times one inference is retried after a retryable `ModelError`.
        backoff: seconds to wait before retry ``n`` (default: exponential from 0.5 s,
            capped at 30 s, with jitter from ``rng``); a provider's ``retry_after`` is
            honoured if longer. Each wait is a cancellation point.
        rng: the random source of the default backoff's jitter.

    The run's input is a prompt str or ``{"messages": [...]}``; its result is
    ``{"text": <final text>, "steps": n}`` plus the summed ``"usage"`` when the model
    reported usage, and ``"finish_reason"`` when the final reply says it stopped other
    than normally (anything but ``"stop"`` or ``"tool_calls"``: ``"length"`` when the
    token limit cut it off, ``"content_filter"``, ...). A reply cut off by the token limit
    (``finish_reason="length"``, final or not) is also recorded as an ``agent.truncated``
    event ``{"step": n, "finish_reason": "length"}``.

    A tool call whose arguments are not a JSON object (the reply's `ToolCall` has
    ``raw_arguments``) is answered with the error tool message ``{"error":
    "invalid_arguments", "message": ...}``, without calling the tool or asking for
    permission; the transcript keeps the text the model sent, and the run goes on.

    The run's checkpoint is ``{"messages": [...], "steps": n}`` (the transcript in the
    OpenAI chat shape, and the steps made), with more keys when they apply:
    ``"usage"``, the usage summed so far once the model reported any; ``"answers"``,
    while a step's tool calls wait for tickets: the answers already given to its earlier
    waiting calls, by tool call id (each ticket is answered by a resume of its own); and
    ``"finish_reason"``, that of a final reply that did not stop normally.

    A waiting call's ticket (``tool_permission`` or ``client_execution``) has the
    correlation id ``"<run id>/step-<n>/<tool call id>"`` (a digest stands in for a call
    id that is too long or not printable).
    """

    __slots__ = ("_backoff", "_max_steps", "_model", "_retries", "_specs", "_system", "_tools")

    def __init__(
        self,
        model: Model,
        tools: Iterable[Tool | SubAgentTool] = (),
        *,
        system: str | None = None,
        max_steps: int | None = None,
        retries: int = 2,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if not callable(getattr(model, "infer", None)):
            raise InvalidArgument(f"an Agent needs a model with an async infer(), not {model!r}")
        if system is not None and type(system) is not str:
            raise InvalidArgument(f"an Agent's system prompt must be a str, not {system!r}")
        if max_steps is not None and (type(max_steps) is not int or max_steps < 1):
            raise InvalidArgument(f"an Agent's max_steps must be an int >= 1, not {max_steps!r}")
        if type(retries) is not int or retries < 0:
            raise InvalidArgument(f"an Agent's retries must be an int >= 0, not {retries!r}")
        if backoff is not None and not callable(backoff):
            raise InvalidArgument(f"an Agent's backoff must be callable, not {backoff!r}")
        by_name: dict[str, Tool] = {}
        for item in tools:
            tool = item.as_tool() if isinstance(item, SubAgentTool) else item
            if not isinstance(tool, Tool):
                raise InvalidArgument(f"an Agent's tools are Tool or SubAgentTool, not {item!r}")
            if tool.name in by_name:
                raise InvalidArgument(f"two tools are named {tool.name!r}; names must differ")
            by_name[tool.name] = tool
        self._model = model
        self._tools = by_name
        self._specs = tuple(tool.spec() for tool in by_name.values())
        self._system = system
        self._max_steps = max_steps
        self._retries = retries
        self._backoff = backoff if backoff is not None else _jittered(rng or random.Random())

    def __repr__(self) -> str:
        return (
            f"Agent({self._model!r}, tools={list(self._tools)!r}, max_steps={self._max_steps!r},"
            f" retries={self._retries!r})"
        )

    @property
    def tools(self) -> tuple[Tool, ...]:
        return tuple(self._tools.values())

    @property
    def max_steps(self) -> int | None:
        return self._max_steps

    # ------------------------------------------------------------------ the loop

    async def __call__(self, ctx: RunContext) -> JsonValue:
        progress = Progress.load(ctx, self._system)
        # A resumed attempt takes the messages its pause or ticket carried at a first
        # boundary (after its pending step, if it has one).
        take_carried = ctx.checkpoint is not None
        dirty = self._take_answer(ctx, progress)
        step: _Step | None = None  # the step in progress, until its boundary commits it
        try:
            while True:
                calls = progress.pending_calls()
                if calls is not None:
                    step = _Step(progress.steps, "tools", [call.id for call in calls])
                    await self._finish_step(ctx, progress, calls, step, dirty=dirty)
                    dirty = True
                if dirty or take_carried:
                    if step is not None:
                        step.phase = "boundary"
                    await self._boundary(ctx, progress, commit=dirty)
                    dirty = take_carried = False
                    step = None
                if progress.finished:
                    return progress.result()
                if self._max_steps is not None and progress.steps >= self._max_steps:
                    raise MaxStepsReached(
                        f"run {ctx.run_id!r} made its max_steps={self._max_steps} steps"
                        " without a final answer"
                    )
                step = _Step(progress.steps + 1, "inference", [])
                reply = await self._infer(ctx, progress, step.number)
                if reply.finish_reason == "length":
                    await ctx.emit(
                        "agent.truncated", {"step": step.number, "finish_reason": "length"}
                    )
                progress.add_reply(reply)
                dirty = True
        except BaseException as exc:
            if step is not None and _cancelled(exc):
                await _interrupted(ctx, step)
            raise

    async def _boundary(self, ctx: RunContext, progress: Progress, *, commit: bool) -> None:
        """Commit the progress (if ``commit``), honour a pause, and take live messages as
        user messages, committing again until no more came in."""
        checkpoint: JsonValue = progress.checkpoint() if commit else None
        while True:
            payloads = await ctx.boundary(checkpoint)
            taken = False
            for payload in payloads:
                message = user_message(payload)
                if message is None:
                    await ctx.emit(
                        "agent.message_ignored",
                        {
                            "payload": payload,
                            "why": "a message is a str or {'content': str}",
                        },
                    )
                else:
                    progress.add_user(message)
                    taken = True
            if not taken:
                return
            checkpoint = progress.checkpoint()

    # ------------------------------------------------------------------ inference

    async def _infer(self, ctx: RunContext, progress: Progress, step: int) -> ModelReply:
        # A model that streams sends the reply's text to the run's "agent.tokens" as it
        # reads it (send_token), within this block.
        with streaming_tokens(ctx) as tokens:
            return await self._infer_with_retries(ctx, progress, step, tokens)

    async def _infer_with_retries(
        self, ctx: RunContext, progress: Progress, step: int, tokens: TokenSink
    ) -> ModelReply:
        retry = 0
        while True:
            try:
                reply = await self._model.infer(
                    thaw(progress.messages), [thaw(spec) for spec in self._specs]
                )
            except ModelError as exc:
                if not exc.retryable or retry >= self._retries:
                    raise
                retry += 1
                tokens.retrying(retry, exc.code)
                delay = max(self._backoff(retry), exc.retry_after or 0.0)
                logger.info(
                    "agent: run %r step %d: inference failed (%s), retry %d of %d in %.2f s",
                    ctx.run_id,
                    step,
                    exc.code,
                    retry,
                    self._retries,
                    delay,
                    extra={"run_id": ctx.run_id},
                )
                await ctx.emit(
                    "agent.retry",
                    {
                        "step": step,
                        "retry": retry,
                        "code": exc.code,
                        "message": exc.message,
                        "delay": delay,
                    },
                )
                await trio.sleep(delay)
                continue
            if not isinstance(reply, ModelReply):
                raise ModelError(
                    "invalid_reply", f"the model returned {type(reply).__name__}, not a reply"
                )
            return reply

    # ------------------------------------------------------------------ tool calls

    def _take_answer(self, ctx: RunContext, progress: Progress) -> bool:
        """Record the resume value as the answer of the waiting call whose ticket the
        resume answered; whether anything was recorded.

        The call is found by the resumed ticket's reason and correlation id; any other
        resume (a pause's ``manual_pause`` ticket, say) carries a value that is ignored,
        whatever its shape.
        """
        ticket = ctx.resumed_ticket
        calls = progress.pending_calls()
        if ticket is None or calls is None:
            return False
        for index, call in enumerate(calls):
            wait = self._wait_of(progress, call)
            if wait is not None and _asks(ticket, wait, ctx.run_id, progress.steps, index, call):
                value = ctx.resume_value
                # The ticket's schema was checked by resume(); a value that still does not
                # fit (a store edited by hand) leaves the call waiting: it is asked again.
                if not answer_fits(wait, value):
                    return False
                progress.answer(call, thaw(value))
                return True
        return False

    def _wait_of(self, progress: Progress, call: PendingCall) -> Wait | None:
        """How ``call`` still waits for a ticket, or None if it can run (or fail) now."""
        tool = self._tools.get(call.name)
        if (
            tool is None
            or call.arguments is None
            or tool.permission == "auto"
            or call.id in progress.answers
        ):
            return None
        return tool.permission

    async def _finish_step(
        self,
        ctx: RunContext,
        progress: Progress,
        calls: list[PendingCall],
        step: _Step,
        *,
        dirty: bool,
    ) -> None:
        """Ask the step's first waiting call, if any (the calls are asked one ticket at a
        time, in call order); once every call is decided, run the runnable ones
        concurrently and complete the step."""
        for index, call in enumerate(calls):
            wait = self._wait_of(progress, call)
            if wait is not None:
                await self._ask(ctx, progress, index, call, wait, dirty=dirty)
        progress.complete_step(await self._execute(ctx, progress, calls, step))

    @staticmethod
    async def _ask(
        ctx: RunContext,
        progress: Progress,
        index: int,
        call: PendingCall,
        wait: Wait,
        *,
        dirty: bool,
    ) -> NoReturn:
        """Commit ``Awaiting`` with ``call``'s ticket, and the step with it when it has
        changed since it was last committed (the answer must find the step committed)."""
        await ctx.await_input(
            _REASONS[wait],
            correlation_id=ticket_id(ctx.run_id, progress.steps, index, call),
            payload=call.payload(),
            accepts=PERMISSION_SCHEMA if wait == "ask" else CLIENT_SCHEMA,
            progress=progress.checkpoint() if dirty else None,
        )

    async def _execute(
        self, ctx: RunContext, progress: Progress, calls: list[PendingCall], step: _Step
    ) -> dict[str, str]:
        """Every call's tool message content: decided ones at once, the rest run."""
        results = step.results
        runnable: list[tuple[PendingCall, Tool]] = []
        for call in calls:
            tool = self._tools.get(call.name)
            answer = progress.answers.get(call.id, {})
            if tool is None:
                results[call.id] = error_content(
                    "unknown_tool",
                    f"there is no tool named {call.name!r}; the tools are {list(self._tools)}",
                )
            elif call.arguments is None:
                results[call.id] = error_content(
                    "invalid_arguments",
                    f"the arguments of this call are not a JSON object ({call.problem});"
                    f" to use {call.name!r}, call it again with its arguments as one JSON"
                    " object",
                )
            elif tool.permission == "client":
                results[call.id] = result_content(answer["result"])
            elif tool.permission == "ask" and answer["decision"] == "deny":
                note = answer.get("note")
                results[call.id] = error_content(
                    "permission_denied",
                    "the user denied this tool call" + (f": {note}" if note else ""),
                    **({"note": note} if note is not None else {}),
                )
            else:
                runnable.append((call, tool))
        if runnable:
            async with trio.open_nursery() as nursery:
                for call, tool in runnable:
                    nursery.start_soon(self._run_call, ctx, step.number, call, tool, results)
        return results

    @staticmethod
    async def _run_call(
        ctx: RunContext, step: int, call: PendingCall, tool: Tool, results: dict[str, str]
    ) -> None:
        assert tool.call is not None
        assert call.arguments is not None
        detail: dict[str, Any] = {"step": step, "tool_call_id": call.id, "name": call.name}
        await ctx.emit("agent.tool_started", {**detail, "arguments": call.arguments})
        try:
            value = await tool.call(thaw(call.arguments), ctx)
        except Exception as exc:
            code = RunError.error_code(exc)
            content = error_content(code, error_message(exc))
            finished = {**detail, "ok": False, "error": code}
        else:
            content = result_content(value)
            finished = {**detail, "ok": True}
        await ctx.emit("agent.tool_finished", finished)
        # Only now is the call finished: a result whose event could not be committed
        # (the attempt was cancelled meanwhile) counts as interrupted.
        results[call.id] = content


@final
@attrs.define
class _Step:
    """The step in progress, for the ``agent.interrupted`` event if it is cancelled."""

    number: int
    phase: Phase
    calls: list[str]
    results: dict[str, str] = attrs.Factory(dict)  # finished calls' tool messages

    def unfinished(self) -> list[str]:
        return [call_id for call_id in self.calls if call_id not in self.results]


_MAX_TICKET_ID = 512  # the longest id the runtime accepts
_MAX_CALL_ID = 128


def ticket_id(run_id: str, step: int, index: int, call: PendingCall) -> str:
    """The correlation id of the ticket that asks ``call``, the ``index``-th call of step
    ``step``: it names the run, the step and the tool call id, so each ticket of a run
    has its own, and a resumed attempt finds the call its resume answered."""
    if len(call.id) <= _MAX_CALL_ID and call.id.isprintable():
        name = call.id
    else:
        digest = hashlib.sha256(call.id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        name = f"call-{index}-{digest}"
    tail = f"/step-{step}/{name}"
    return run_id[: _MAX_TICKET_ID - len(tail)] + tail


def _asks(
    ticket: ResumeTicket, wait: Wait, run_id: str, step: int, index: int, call: PendingCall
) -> bool:
    """Whether ``ticket`` is the one that asked ``call``."""
    return ticket.reason == _REASONS[wait] and ticket.correlation_id == ticket_id(
        run_id, step, index, call
    )


def _cancelled(exc: BaseException) -> bool:
    """Whether ``exc`` is only cancellation (possibly grouped by a nursery)."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1] is None
    return isinstance(exc, trio.Cancelled)


async def _interrupted(ctx: RunContext, step: _Step) -> None:
    """Record that a step was cancelled, from the attempt's own (shielded) cleanup, so
    the event comes before the attempt's terminal commit."""
    detail = {"step": step.number, "phase": step.phase, "tool_call_ids": step.unfinished()}
    # AwakenError: the run has moved on (its end is already committed): nothing to add.
    with trio.CancelScope(shield=True), contextlib.suppress(AwakenError):
        await ctx.emit("agent.interrupted", detail)


def _jittered(rng: random.Random) -> Backoff:
    def backoff(retry: int) -> float:
        ceiling = min(_BACKOFF_CAP, _BACKOFF_BASE * 2.0 ** (retry - 1))
        return ceiling / 2 + rng.uniform(0, ceiling / 2)

    return backoff
