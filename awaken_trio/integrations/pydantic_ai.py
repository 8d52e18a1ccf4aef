"""pydantic-ai agents as durable awaken_trio runs (the ``[pydantic-ai]`` extra).

``agent_body(agent, *, deps=None)`` turns a pydantic-ai ``Agent`` into a run body::

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
  ``benchmarks/bench_pydantic_ai.py`` (about 0.3 ms per model request).
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
- **Streams.** Streamed model output is not sent anywhere yet: this release of awaken_trio
  has no run streams for it to go to.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, Generic, Literal, final

try:
    import pydantic_core
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolDenied
except ImportError as exc:  # pragma: no cover - the extra is installed wherever tests run
    raise ImportError(
        "awaken_trio.integrations.pydantic_ai needs pydantic-ai; from a checkout:"
        " pip install -e '.[pydantic-ai]'"
    ) from exc
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    DurabilityEngineSpec,
    DurableOperationId,
    JournalCallableOperationBackend,
    ModelRequestId,
    RoleBasedOperationConfig,
)
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ToolCallPart
from pydantic_ai.tools import AgentDepsT

from .. import InvalidArgument, InvalidPayload, JsonValue, RunContext
from ._asyncio_bridge import Bridge, open_asyncio_bridge

__all__ = ["AgentBody", "agent_body", "load_messages"]

ENGINE_NAME: Final = "awaken_trio"

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
class _StepBackend(JournalCallableOperationBackend[None]):
    """pydantic-ai's operation backend: each durable unit is one `RunContext.step`."""

    def __init__(self, run: _AgentRun, *, agent_name: str, default_model_id: str | None) -> None:
        super().__init__(
            agent_name=agent_name,
            default_model_id=default_model_id,
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
        model_request = isinstance(operation_id, ModelRequestId)
        payload = await run.bridge.call(run.ctx.step, name, run.unit, body, model_request)
        # A step's result is frozen; pydantic builds its values in place, from plain ones.
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


@final
class _AgentRun:
    """What one attempt of an agent body holds while pydantic-ai runs."""

    def __init__(self, ctx: RunContext, bridge: Bridge) -> None:
        self.ctx = ctx
        self.bridge = bridge
        self._runs = 0

    def next_run_id(self) -> str:
        # One awaken run may run the agent several times (after approvals): each gets its own
        # id, the same on every attempt.
        self._runs += 1
        return f"{self.ctx.run_id}:{self._runs}"

    async def unit(self, body: Callable[[], Awaitable[object]], model_request: bool) -> object:
        """A durable unit that was not journaled: run it on the loop. A new model request
        passes a boundary first (a pause takes effect there; ``max_steps`` counts it)."""
        if model_request:
            unread = await self.ctx.boundary()
            if unread:
                await self.ctx.emit("pydantic_ai.messages_unread", {"messages": unread})
        return await self.bridge.run(_awaited, body)


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

    def __init__(self, agent: Agent[AgentDepsT, Any], deps: AgentDepsT) -> None:
        self.agent = agent
        self.deps = deps
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
            run = _AgentRun(ctx, bridge)
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
) -> AgentBody[AgentDepsT]:
    """A durable run body that runs ``agent`` (see the module docstring).

    Register it by a name (``open_runtime(..., bodies={"support": agent_body(agent)})``),
    so a run can be recovered, resumed and forked by any worker that has it. ``deps`` is
    handed to every run of the agent (it is the worker's: never journaled).

    Raises:
        InvalidArgument: ``agent`` is not a pydantic-ai ``Agent``, or has no ``name`` (its
            name is part of every step's name: the journal's key).
    """
    if not isinstance(agent, Agent):
        raise InvalidArgument(f"agent_body() needs a pydantic-ai Agent, not {type(agent).__name__}")
    if not agent.name:
        raise InvalidArgument(
            "agent_body() needs an agent with a name (Agent(..., name='support')): the name is"
            " part of every journaled step's name, so it must stay the same across deploys"
        )
    return AgentBody(agent, deps)


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
