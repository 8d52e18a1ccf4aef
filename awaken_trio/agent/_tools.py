"""Tools: what a model may call, how a call's result or error becomes a tool message, and
delegation to a sub-agent run as a tool."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, Literal, final

import attrs

from awaken_trio import (
    EndCause,
    FrozenDict,
    FrozenList,
    InvalidArgument,
    InvalidPayload,
    JsonValue,
    RunContext,
    RunError,
    RunState,
)

ToolFunction = Callable[[dict[str, Any], RunContext], Awaitable[JsonValue]]
"""``async def call(arguments: dict, ctx: RunContext) -> JsonValue``."""

Permission = Literal["auto", "ask", "client"]
_PERMISSIONS = ("auto", "ask", "client")
# What OpenAI-compatible providers accept as a function name.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAX_MESSAGE = 2000
_NO_PARAMETERS = FrozenDict({"type": "object", "properties": {}})


def _tool_name(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not str or not _TOOL_NAME.fullmatch(value):
        raise InvalidArgument(
            f"a tool name must be 1 to 64 letters, digits, '_' or '-', not {value!r}"
        )


def _description(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not str:
        raise InvalidArgument(f"a tool description must be a str, not {value!r}")


def _parameters(value: object) -> FrozenDict | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidArgument(f"tool parameters must be a JSON Schema object, not {value!r}")
    try:
        return FrozenDict(value)
    except InvalidPayload as exc:
        raise InvalidArgument(f"tool parameters must be JSON: {exc}") from None


def _permission(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in _PERMISSIONS:
        raise InvalidArgument(f"a tool's permission must be one of {_PERMISSIONS}, not {value!r}")


@final
@attrs.frozen
class Tool:
    """A tool the model may call.

    ``call`` is ``async def call(arguments: dict, ctx: RunContext) -> JsonValue``; it runs
    inside the run's attempt (so it is cancelled with it) and gets a mutable copy of the
    arguments. What it returns is the tool message (a str as is, anything else as JSON
    text); what it raises is an error tool message ``{"error": <code>, "message": ...}``
    for the model, never the run's failure. A tool may start child runs and emit events
    through ``ctx``; the step boundaries and tickets are the agent's own, so a tool never
    calls ``ctx.boundary`` or ``ctx.await_input`` (use ``permission`` instead).

    ``permission``: ``"auto"`` runs the call; ``"ask"`` first commits ``Awaiting`` with a
    ``tool_permission`` ticket; ``"client"`` never runs ``call`` (it may be None): the run
    commits a ``client_execution`` ticket and the resume value's ``result`` is the result.
    """

    name: str = attrs.field(validator=_tool_name)
    call: ToolFunction | None
    description: str = attrs.field(default="", kw_only=True, validator=_description)
    parameters: FrozenDict | None = attrs.field(default=None, kw_only=True, converter=_parameters)
    permission: Permission = attrs.field(default="auto", kw_only=True, validator=_permission)

    def __attrs_post_init__(self) -> None:
        if self.call is None:
            if self.permission != "client":
                raise InvalidArgument(
                    f"tool {self.name!r} needs a call (only a permission='client' tool,"
                    " which the client executes, may have none)"
                )
        elif not callable(self.call):
            raise InvalidArgument(
                f"tool {self.name!r}: call must be an async callable, not {self.call!r}"
            )

    def spec(self) -> dict[str, Any]:
        """The OpenAI function spec a model is shown (a fresh dict)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": thaw(self.parameters or _NO_PARAMETERS),
            },
        }


_PROMPT_PARAMETERS = FrozenDict(
    {
        "type": "object",
        "properties": {"prompt": {"type": "string", "description": "The task for the agent."}},
        "required": ["prompt"],
    }
)


@final
@attrs.frozen
class SubAgentTool:
    """Delegation: a tool that runs ``agent`` (any run body, usually an `Agent`) as a
    child run with the call's ``arguments["prompt"]`` as its input.

    The child's final text is the tool result. A child that ends any other way gives the
    model ``{"error": "child_<cause>", "message": ...}`` (``child_failed``,
    ``child_cancelled``, ``child_stopped``, ``child_max_steps``, ``child_indeterminate``;
    ``child_awaiting`` for a child that stopped to wait for input, which a sub-agent
    cannot get). The child lives inside the parent's attempt: cancelling the parent
    cancels it; its own end never fails the parent. The child run's id is reported in an
    ``agent.delegated`` event.
    """

    name: str = attrs.field(validator=_tool_name)
    agent: Callable[[RunContext], Awaitable[Any]]
    description: str = attrs.field(default="", kw_only=True, validator=_description)

    def as_tool(self) -> Tool:
        """This delegation as a plain `Tool` whose call runs the agent as a child run."""
        return Tool(
            self.name, self._delegate, description=self.description, parameters=_PROMPT_PARAMETERS
        )

    async def _delegate(self, arguments: dict[str, Any], ctx: RunContext) -> JsonValue:
        prompt = arguments.get("prompt")
        if type(prompt) is not str:
            raise RunError(
                "invalid_arguments",
                f"tool {self.name!r} needs a str 'prompt' argument, not {prompt!r}",
            )
        handle = await ctx.start_child(self.agent, input=prompt)
        await ctx.emit("agent.delegated", {"tool": self.name, "child_run_id": handle.run_id})
        state = await handle.wait()
        match state:
            case RunState.Ended(EndCause.NaturalEnd()):
                result = (await handle.record()).result
                if isinstance(result, dict) and type(result.get("text")) is str:
                    text: JsonValue = result["text"]
                    return text
                return result
            case RunState.Ended(EndCause.Failed(code, message)):
                raise RunError("child_failed", f"{code}: {message}" if message else code)
            case RunState.Ended(EndCause.Cancelled()):
                raise RunError("child_cancelled", f"sub-agent run {handle.run_id!r} was cancelled")
            case RunState.Ended(EndCause.Stopped(reason)):
                raise RunError("child_stopped", reason)
            case RunState.Ended(EndCause.MaxSteps()):
                raise RunError(
                    "child_max_steps", f"sub-agent run {handle.run_id!r} reached its max_steps"
                )
            case RunState.Ended(EndCause.Indeterminate(reason)):
                raise RunError("child_indeterminate", reason)
            case RunState.Awaiting(ticket):
                raise RunError(
                    "child_awaiting",
                    f"sub-agent run {handle.run_id!r} stopped to wait for {ticket.reason};"
                    " a sub-agent cannot be given input, so it is ended with this step",
                )
        raise RunError("child_ended", f"sub-agent run {handle.run_id!r} ended as {state!r}")


# --------------------------------------------------------------------------- tool messages


def error_message(exc: BaseException) -> str:
    try:
        text = exc.message if isinstance(exc, RunError) else str(exc)
    except Exception:
        text = f"<{type(exc).__name__}>"
    if len(text) > _MAX_MESSAGE:
        text = text[:_MAX_MESSAGE] + "..."
    return text


def error_content(code: str, message: str, **extra: JsonValue) -> str:
    """An error tool message's content: ``{"error": code, "message": ...}`` as JSON text."""
    return dumps({"error": code, "message": message, **extra})


def result_content(value: object) -> str:
    """A tool result as a tool message's content: a str as is, JSON otherwise."""
    if type(value) is str:
        return value
    try:
        FrozenList([value])  # checks it is a JSON value (no tuples, NaN, ...)
    except InvalidPayload as exc:
        return error_content("invalid_result", f"the tool returned a non-JSON value: {exc}")
    return dumps(value)


def dumps(value: JsonValue) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def thaw(value: JsonValue) -> Any:
    """A mutable deep copy of a (possibly frozen) JSON value."""
    if isinstance(value, dict):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, list):
        return [thaw(item) for item in value]
    return value
