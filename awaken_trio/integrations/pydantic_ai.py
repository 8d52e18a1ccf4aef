"""pydantic-ai agents as durable awaken_trio runs (the ``[pydantic-ai]`` extra).

``agent_body(agent, *, deps=None, stream=None)`` turns a pydantic-ai ``Agent`` into a run body::

    from pydantic_ai import Agent
    from awaken_trio.integrations.pydantic_ai import agent_body

    agent = Agent("openai:gpt-5", name="support")
    async with open_runtime("sqlite:///runs.db", bodies={"support": agent_body(agent)}) as rt:
        handle = await rt.submit("support", input="Where is my order?")

How it works:

- **Under Trio.** pydantic-ai's ``Agent`` runs on asyncio, so it runs on an asyncio loop
  on a thread of its own (`open_asyncio_bridge`), one loop for the runtime's agent runs
  at once (a provider's HTTP client belongs to one loop), with cancellation both ways: a
  cancel of the run cancels the agent's asyncio task at once (its model request included)
  and the attempt ends only once that task has finished, so nothing of it is left running
  on any thread; the loop and its thread are gone once no run uses them. The bridge was
  chosen by measuring: see the bridge's module docstring and
  ``benchmarks/bench_pydantic_ai.py`` (about 0.3 ms of CPU per step: four hand-overs
  between the threads).
- **Every model request and tool call is a step.** The integration is a pydantic-ai
  durability engine (a ``BaseDurabilityCapability`` whose operation backend is
  `RunContext.step`), added to each run of the agent: pydantic-ai hands every model
  request, tool call and toolset discovery to the backend as one durable unit with a
  stable name (``<agent>__model.request``, ``<agent>__<toolset>.call_tool:<tool>``), whose
  result is journaled as JSON. A later attempt (after a kill -9, a resume, a retry)
  replays what was committed without calling the model or the tool again, and continues
  from there. Tool calls run one at a time inside a run (as pydantic-ai's journal engines
  do), so each name's calls come in the same order on replay. Before each new model
  request the run passes a boundary: a pause takes effect there, and ``max_steps`` counts
  model requests. Messages sent to the run are not read by the agent: a boundary that
  finds some records them in an event (``pydantic_ai.messages_unread``).
- **Approvals.** A tool that needs approval (pydantic-ai's deferred tools:
  ``requires_approval=True`` or ``ApprovalRequired``) ends the attempt with
  ``await_input("tool_permission", payload={"tool_call": {"id", "name", "arguments"}})``;
  resume with ``{"decision": "allow"}`` or ``{"decision": "deny", "note": str}`` (note
  optional: the model is told the call was denied, with the note). A tool the client runs
  (``CallDeferred``) is a ``client_execution`` ticket with the same payload; resume with
  ``{"result": <json>}``. Several calls are asked one ticket at a time, in call order. Each
  answer is journaled, so a later attempt does not ask again.
- **Input and result.** The input is a prompt string, or ``{"prompt": str,
  "message_history": [...]}`` with messages in pydantic-ai's JSON form
  (``ModelMessagesTypeAdapter``). The result is ``{"output": <the output as JSON>,
  "messages": [...]}``: the run's new messages in that same form (`load_messages` turns
  them back into pydantic-ai's messages, say for the next run's history). An output pydantic cannot
  turn into JSON ends the run ``Failed("invalid_payload", ...)``.
- **Tokens.** With ``agent_body(agent, stream=True)`` (or by default, for a model that
  answers streamed requests only) each model request is a streamed one and the text of
  the reply goes to the run's ``"agent.tokens"`` stream as it arrives (`RunContext.stream`;
  a chunk per piece of text), live, before the request's step is committed. The journal
  does not depend on it: a streamed request is the same step (same name, the same whole
  response as its result) as a plain one, so a run replays whichever way its earlier
  attempts ran. A request replayed from the journal is not streamed again: after a later
  attempt's ``"reset"`` chunk the stream carries that attempt's new requests alone (the
  committed replies are in the run's steps and its result's messages). A request
  cancelled mid-stream leaves the text it had sent, and no step.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import threading
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, Generic, Literal, final

import trio

try:
    import pydantic_core
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolDenied
except ImportError as exc:  # pragma: no cover - the extra is installed wherever tests run
    raise ImportError(
        "awaken_trio.integrations.pydantic_ai needs pydantic-ai; from a checkout:"
        " pip install -e '.[pydantic-ai]'"
    ) from exc
from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    CallableOperationBackend,
    DurabilityEngineSpec,
    DurableOperationId,
    JournalOperationNamer,
    ModelRequestId,
    RoleBasedOperationConfig,
)
from pydantic_ai.messages import (
    AgentStreamEvent,
    ModelMessage,
    ModelMessagesTypeAdapter,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
)
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.tools import AgentDepsT
from pydantic_ai.tools import RunContext as AgentContext

from .. import InvalidArgument, InvalidPayload, JsonValue, RunContext, StreamWriter
from ._asyncio_bridge import Bridge, open_asyncio_bridge

__all__ = ["AgentBody", "agent_body", "load_messages"]

ENGINE_NAME: Final = "awaken_trio"

TOKENS_CHANNEL: Final = "agent.tokens"
"""The stream channel the text of streamed model replies goes to."""

logger = logging.getLogger("awaken_trio.integrations.pydantic_ai")

_DECISION: Final = {
    "oneOf": [
        {
            "type": "object",
            "properties": {"decision": {"const": "allow"}},
            "required": ["decision"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {"decision": {"const": "deny"}, "note": {"type": "string"}},
            "required": ["decision"],
            "additionalProperties": False,
        },
    ]
}
"""The resume value of a ``tool_permission`` ticket (DESIGN §3.2's decision)."""

_CLIENT_RESULT: Final = {
    "type": "object",
    "properties": {"result": {}},
    "required": ["result"],
    "additionalProperties": False,
}
"""The resume value of a ``client_execution`` ticket."""

# Whether the calling asyncio task runs an agent for a run (set in the bridge's tasks).
_IN_RUN: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "awaken_trio_pydantic_ai_in_run", default=False
)


@final
class _StepNamer(JournalOperationNamer):
    """pydantic-ai's journal names, but a streamed model request is journaled under the name
    of a plain one (``<agent>__model.request``): its result is the same whole response, so a
    run replays its committed requests whether its earlier attempts streamed them or not."""

    def operation_name(self, operation_id: DurableOperationId) -> str:
        if isinstance(operation_id, ModelRequestId) and operation_id.streaming:
            operation_id = dataclasses.replace(operation_id, streaming=False)
        return super().operation_name(operation_id)


@final
class _StepBackend(CallableOperationBackend[None]):
    """pydantic-ai's operation backend: each durable unit is one `RunContext.step`."""

    def __init__(self, run: _AgentRun, *, agent_name: str, default_model_id: str | None) -> None:
        super().__init__(
            namer=_StepNamer(agent_name, default_model_id=default_model_id or "default"),
            config=RoleBasedOperationConfig(model=None, event=None, capability=None, tool=None),
        )
        self._run = run

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: None,
    ) -> object:
        run = self._run
        request: _Request = "other"
        if isinstance(operation_id, ModelRequestId):
            request = "streamed" if operation_id.streaming else "plain"
        ran: list[object] = []
        payload = await run.bridge.call(run.ctx.step, name, run.unit, body, request, ran)
        if ran:
            # The unit ran in this attempt: what it returned is what was committed.
            return ran[0]
        # Replayed: a step's result is frozen, and pydantic builds its values in place.
        return _thaw(payload)


@final
class _Durability(BaseDurabilityCapability[AgentDepsT], Generic[AgentDepsT]):
    """The durability engine of one attempt's agent runs (see the module docstring)."""

    engine_spec = DurabilityEngineSpec(
        engine_name=ENGINE_NAME,
        durable_unit_noun="step",
        durable_container_noun="run",
        codec=JSON_CODEC,
        # Function tools run inside their step; an MCP server is entered around the run.
        toolset_lifecycles={
            "function": "enter-never",
            "mcp": "enter-always",
            "dynamic": "enter-never",
        },
        # Steps of one name are told apart by their order: tool calls run one at a time.
        sequential_tools_in_durable_context=True,
        tool_config_key=ENGINE_NAME,
    )

    def __init__(self, run: _AgentRun, name: str) -> None:
        super().__init__(name=name)
        self._run = run

    @property
    def in_durable_context(self) -> bool:
        return _IN_RUN.get()

    @property
    def has_wrap_run_event_stream(self) -> bool:
        # Asking for the run's events is what makes pydantic-ai stream its model requests.
        return (self._run.stream and self.in_durable_context) or super().has_wrap_run_event_stream

    def _model_stream_event_handler(self) -> EventStreamHandler[AgentDepsT]:
        # Inside a streamed model request's unit, on the loop: its text goes to the run.
        return self._run.tokens.consume

    def get_durable_operation_backend(self) -> _StepBackend:
        return _StepBackend(self._run, agent_name=self.name, default_model_id=self.default_model_id)

    def get_default_run_id(self) -> str | None:
        return self._run.next_run_id()

    def get_default_conversation_id(self, run_id: str) -> str | None:
        return self._run.ctx.thread_id

    async def get_run_start_time(self, run_id: str) -> datetime | None:
        run = self._run
        started = await run.bridge.call(run.ctx.step, "pydantic_ai.run_start_time", _now)
        return datetime.fromisoformat(str(started))


async def _now() -> str:
    from pydantic_ai._utils import now_utc

    return now_utc().isoformat()


_Request = Literal["plain", "streamed", "other"]
"""What a durable unit is: a model request (streamed or not), or anything else."""


@final
class _Tokens:
    """The text of one attempt's streamed model replies, sent as it arrives from the loop's
    thread to the run's ``"agent.tokens"`` stream, in order.

    The writer is opened in the attempt's Trio task that starts a streamed request
    (`open`); the loop's thread hands text over (`put`), and the Trio thread sends it, one
    chunk a piece, in one callback for whatever arrived since the last one. Text that
    arrives once the attempt's writer is closed is dropped: the attempt has ended.
    """

    def __init__(self, ctx: RunContext, token: trio.lowlevel.TrioToken) -> None:
        self._ctx = ctx
        self._token = token
        self._writer: StreamWriter | None = None
        self._off = False
        self._lock = threading.Lock()
        self._pending: list[str] = []

    def open(self) -> None:
        """Open the writer (Trio thread, in a task of the attempt)."""
        if self._writer is not None or self._off:
            return
        try:
            self._writer = self._ctx.stream(TOKENS_CHANNEL)
        except InvalidArgument as exc:  # a store that keeps no streams
            self._off = True
            logger.warning(
                "pydantic-ai agent: run %r: its tokens are not streamed: %s",
                self._ctx.run_id,
                exc,
                extra={"run_id": self._ctx.run_id},
            )

    async def consume(
        self, agent_ctx: AgentContext[Any], events: AsyncIterable[AgentStreamEvent]
    ) -> None:
        """pydantic-ai's handler of a streamed request's events (loop thread): text parts
        and their deltas go to the stream."""
        if self._writer is None:
            return  # (pydantic-ai reads the rest of the stream itself)
        async for event in events:
            if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                self._put(event.part.content)
            elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                self._put(event.delta.content_delta)

    def _put(self, text: str) -> None:
        if not text:
            return
        with self._lock:
            self._pending.append(text)
            first = len(self._pending) == 1
        if first:
            # (The Trio run is alive: the attempt waits for the request's task to finish.)
            self._token.run_sync_soon(self._send)

    def _send(self) -> None:
        """Send what the loop handed over (Trio thread; never raises: a Trio callback)."""
        with self._lock:
            pending, self._pending = self._pending, []
        writer = self._writer
        if writer is None or writer.closed:
            return
        for text in pending:
            try:
                writer.send(text)
            except InvalidPayload as exc:  # a piece larger than any payload: not shown live
                logger.warning(
                    "pydantic-ai agent: run %r: a token was not streamed: %s",
                    self._ctx.run_id,
                    exc,
                    extra={"run_id": self._ctx.run_id},
                )


@final
class _AgentRun:
    """What one attempt of an agent body holds while pydantic-ai runs."""

    def __init__(self, ctx: RunContext, bridge: Bridge, *, stream: bool) -> None:
        self.ctx = ctx
        self.bridge = bridge
        self.stream = stream
        self.tokens = _Tokens(ctx, trio.lowlevel.current_trio_token())
        self._runs = 0

    def next_run_id(self) -> str:
        # One awaken run may run the agent several times (after approvals): each gets its own
        # id, the same on every attempt.
        self._runs += 1
        return f"{self.ctx.run_id}:{self._runs}"

    async def unit(
        self, body: Callable[[], Awaitable[object]], request: _Request, ran: list[object]
    ) -> object:
        """A durable unit that was not journaled: run it on the loop (its result is also
        put in ``ran``). A new model request passes a boundary first (a pause takes effect
        there; ``max_steps`` counts it); a streamed one sends its text to the run's
        ``"agent.tokens"`` stream as it arrives."""
        if request != "other":
            unread = await self.ctx.boundary()
            if unread:
                await self.ctx.emit("pydantic_ai.messages_unread", {"messages": unread})
            if request == "streamed":
                self.tokens.open()
        result = await self.bridge.run(_awaited, body)
        ran.append(result)
        return result


def _thaw(value: JsonValue) -> JsonValue:
    """A plain (mutable) copy of a frozen JSON value."""
    if isinstance(value, dict):
        return {key: _thaw(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_thaw(item) for item in value]
    return value


async def _awaited(body: Callable[[], Awaitable[object]]) -> object:
    return await body()


@final
class AgentBody(Generic[AgentDepsT]):
    """A run body that runs a pydantic-ai agent (made by `agent_body`)."""

    def __init__(self, agent: Agent[AgentDepsT, Any], deps: AgentDepsT, *, stream: bool) -> None:
        self.agent = agent
        self.deps = deps
        self.stream = stream
        self.__name__ = f"agent_body({agent.name})"

    def __repr__(self) -> str:
        return f"<agent_body of pydantic-ai agent {self.agent.name!r}>"

    async def __call__(self, ctx: RunContext) -> JsonValue:
        prompt, history = _read_input(ctx)
        agent = self.agent
        name = agent.name
        assert name is not None  # checked by agent_body
        async with open_asyncio_bridge(ctx.run_id) as bridge:
            bridge.set_in_tasks(_IN_RUN, True)
            run = _AgentRun(ctx, bridge, stream=self.stream)
            durability: _Durability[AgentDepsT] = _Durability(run, name)
            messages: list[ModelMessage] = list(history)
            answers: DeferredToolResults | None = None
            output_type = _with_deferred(agent.output_type)
            while True:
                result = await bridge.run(
                    agent.run,
                    prompt if answers is None else None,
                    output_type=output_type,
                    message_history=messages or None,
                    deferred_tool_results=answers,
                    deps=self.deps,
                    capabilities=[durability],
                )
                messages = result.all_messages()
                output = result.output
                if not isinstance(output, DeferredToolRequests):
                    break
                answers = await _answers(ctx, output)
        return {
            "output": _output_json(output, name),
            "messages": ModelMessagesTypeAdapter.dump_python(messages[len(history) :], mode="json"),
        }


def load_messages(value: JsonValue) -> list[ModelMessage]:
    """pydantic-ai messages from their JSON form, such as a run's ``result["messages"]``
    (frozen, as every payload the runtime hands out: pydantic cannot validate a read-only
    list in place, so this copies it first).

    Raises:
        pydantic.ValidationError: ``value`` is not a list of messages in that form.
    """
    return ModelMessagesTypeAdapter.validate_python(_thaw(value))


def agent_body(
    agent: Agent[AgentDepsT, Any],
    *,
    deps: AgentDepsT = None,  # type: ignore[assignment]  # (as pydantic-ai's own run())
    stream: bool | None = None,
) -> AgentBody[AgentDepsT]:
    """A durable run body that runs ``agent`` (see the module docstring).

    Register it by a name (``open_runtime(..., bodies={"support": agent_body(agent)})``),
    so a run can be recovered, resumed and forked by any worker that has it. ``deps`` is
    handed to every run of the agent (it is the worker's: never journaled). With
    ``stream=True`` the model's requests are streamed ones (the model must stream:
    ``FunctionModel`` needs a ``stream_function``) and the text of each reply goes to the
    run's ``"agent.tokens"`` stream as it arrives; the journal is the same either way.
    ``None`` (the default) streams when the agent's model answers streamed requests only
    (a ``FunctionModel`` with a ``stream_function`` and no ``function``), else not.

    Raises:
        InvalidArgument: ``agent`` is not a pydantic-ai ``Agent``, or has no ``name`` (its
            name is part of every step's name: the journal's key); ``stream`` is not a bool
            or None.
    """
    if not isinstance(agent, Agent):
        raise InvalidArgument(f"agent_body() needs a pydantic-ai Agent, not {type(agent).__name__}")
    if not agent.name:
        raise InvalidArgument(
            "agent_body() needs an agent with a name (Agent(..., name='support')): the name is"
            " part of every journaled step's name, so it must stay the same across deploys"
        )
    if stream is None:
        model = agent.model
        stream = isinstance(model, FunctionModel) and model.function is None
    elif type(stream) is not bool:
        raise InvalidArgument(f"agent_body(): stream must be a bool or None, not {stream!r}")
    return AgentBody(agent, deps, stream=stream)


# ---------------------------------------------------------------------------- input, output


def _read_input(ctx: RunContext) -> tuple[str | None, list[ModelMessage]]:
    value = ctx.input
    if isinstance(value, str):
        return value, []
    if isinstance(value, Mapping) and set(value) <= {"prompt", "message_history"}:
        prompt = value.get("prompt")
        if prompt is not None and not isinstance(prompt, str):
            raise InvalidPayload(
                f"the input of run {ctx.run_id!r}: 'prompt' must be a str, not"
                f" {type(prompt).__name__}"
            )
        try:
            history = load_messages(value.get("message_history") or [])
        except ValueError as exc:
            raise InvalidPayload(
                f"the input of run {ctx.run_id!r}: 'message_history' is not a list of"
                f" pydantic-ai messages in their JSON form (ModelMessagesTypeAdapter): {exc}"
            ) from None
        return prompt, history
    raise InvalidPayload(
        f"the input of run {ctx.run_id!r} must be a prompt string or"
        ' {"prompt": str, "message_history": [...]}, not '
        f"{type(value).__name__}"
    )


def _with_deferred(output_type: Any) -> Any:
    """The agent's output type, plus `DeferredToolRequests` so a call that waits for an
    approval or the client ends the agent's run instead of failing it."""
    if isinstance(output_type, Sequence) and not isinstance(output_type, str):
        types = list(output_type)
    else:
        types = [output_type]
    return types if DeferredToolRequests in types else [*types, DeferredToolRequests]


def _output_json(output: object, name: str) -> JsonValue:
    try:
        return pydantic_core.to_jsonable_python(output)
    except pydantic_core.PydanticSerializationError as exc:
        raise InvalidPayload(
            f"the output of agent {name!r} is a {type(output).__name__}, which pydantic cannot"
            f" turn into JSON ({exc}); give the agent an output type pydantic can serialise"
            " (a str, a pydantic model, a dataclass, a TypedDict of JSON values)"
        ) from None


# ---------------------------------------------------------------------------- deferred calls


async def _answers(ctx: RunContext, requests: DeferredToolRequests) -> DeferredToolResults:
    """The answers to every call the agent's run deferred, one ticket at a time in call
    order; each answer journaled, so a later attempt asks nothing twice."""
    answers = DeferredToolResults()
    for call in requests.approvals:
        decision = await _answer(ctx, call, "tool_permission", _DECISION)
        if decision["decision"] == "allow":
            answers.approvals[call.tool_call_id] = True
        else:
            note = decision.get("note")
            answers.approvals[call.tool_call_id] = ToolDenied(note) if note else ToolDenied()
    for call in requests.calls:
        answer = await _answer(ctx, call, "client_execution", _CLIENT_RESULT)
        answers.calls[call.tool_call_id] = answer["result"]
    return answers


async def _answer(
    ctx: RunContext,
    call: ToolCallPart,
    reason: Literal["tool_permission", "client_execution"],
    accepts: JsonValue,
) -> Any:
    correlation_id = f"{ctx.run_id}/{reason}/{call.tool_call_id}"

    async def ask() -> JsonValue:
        ticket = ctx.resumed_ticket
        if ticket is not None and ticket.correlation_id == correlation_id:
            return ctx.resume_value  # this attempt was started by the answer
        payload = {
            "tool_call": {
                "id": call.tool_call_id,
                "name": call.tool_name,
                "arguments": call.args_as_dict(),
            }
        }
        await ctx.await_input(
            reason, correlation_id=correlation_id, payload=payload, accepts=accepts
        )

    return await ctx.step(f"{reason}:{call.tool_call_id}", ask)
