"""The model port: what an agent asks of a model, and the values a model answers with."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any, Protocol, final, runtime_checkable

import attrs

from awaken_trio import FrozenDict, InvalidArgument, InvalidPayload, RunError


class ModelError(RunError):
    """A model call failed. A run that gives up on it ends ``Failed(code, message)``.

    The bundled adapters use ``rate_limited``, ``context_overflow``, ``unauthorized``,
    ``provider_error``, ``timeout`` and ``invalid_reply``; any snake_case code is allowed.

    ``retryable`` says whether the same request may succeed later (rate limits, provider
    outages, timeouts); the agent retries those with backoff. ``retry_after`` is the wait
    the provider asked for, in seconds, if it said (a 429's ``Retry-After``).
    """

    def __init__(
        self,
        code: str,
        message: str = "",
        *,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(code, message)
        if type(retryable) is not bool:
            raise InvalidArgument(f"ModelError retryable must be a bool, not {retryable!r}")
        if retry_after is not None and (
            type(retry_after) not in (int, float) or not math.isfinite(retry_after)
        ):
            raise InvalidArgument(
                f"ModelError retry_after must be finite seconds or None, not {retry_after!r}"
            )
        self.retryable = retryable
        self.retry_after = None if retry_after is None else max(0.0, float(retry_after))

    def __repr__(self) -> str:
        return (
            f"ModelError({self.code!r}, {self.message!r}, retryable={self.retryable!r}"
            f"{'' if self.retry_after is None else f', retry_after={self.retry_after!r}'})"
        )


def _non_empty_str(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not str or not value:
        raise InvalidArgument(f"{attribute.name} must be a non-empty str, not {value!r}")


def _arguments(value: object) -> FrozenDict:
    if not isinstance(value, dict):
        raise InvalidArgument(
            f"tool call arguments must be a dict (a JSON object), not {type(value).__name__}"
        )
    try:
        return FrozenDict(value)
    except InvalidPayload as exc:
        raise InvalidArgument(f"tool call arguments must be JSON: {exc}") from None


_MAX_PROBLEM = 300  # how much of a parser's complaint an error message repeats


def _no_constant(name: str) -> object:
    raise ValueError(f"JSON has no {name}")


def parse_arguments(text: str) -> FrozenDict:
    """A tool call's arguments as the chat-completions wire carries them (JSON text), as
    a frozen JSON object; a blank text is no arguments (``{}``). Raises `InvalidArgument`
    saying why the text is not a JSON object."""
    if not text.strip():
        return FrozenDict()
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise InvalidArgument(f"not JSON: {str(exc)[:_MAX_PROBLEM]}") from None
    if not isinstance(value, dict):
        raise InvalidArgument(f"JSON, but {type(value).__name__} rather than an object")
    try:
        return FrozenDict(value)
    except InvalidPayload as exc:
        raise InvalidArgument(str(exc)[:_MAX_PROBLEM]) from None


def _raw_arguments(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and type(value) is not str:
        raise InvalidArgument(f"a tool call's raw_arguments must be a str or None, not {value!r}")


@final
@attrs.frozen
class ToolCall:
    """A call the model asks for: its ``id`` (unique within the reply), the tool's
    ``name`` and its ``arguments`` (a JSON object, kept frozen).

    ``raw_arguments`` is for a model that sent arguments text that is not a JSON object
    (cut off, malformed, an array): the text exactly as sent, with ``arguments`` left
    empty. The transcript records the call with that text, and the agent answers it with
    an ``invalid_arguments`` error tool message instead of calling the tool, so the model
    is told and may try again.
    """

    id: str = attrs.field(validator=_non_empty_str)
    name: str = attrs.field(validator=_non_empty_str)
    arguments: FrozenDict = attrs.field(factory=FrozenDict, converter=_arguments)
    raw_arguments: str | None = attrs.field(default=None, kw_only=True, validator=_raw_arguments)

    def __attrs_post_init__(self) -> None:
        if self.raw_arguments is None:
            return
        if self.arguments:
            raise InvalidArgument(
                f"tool call {self.id!r} has both arguments and raw_arguments; give one"
            )
        try:
            parse_arguments(self.raw_arguments)
        except InvalidArgument:
            return
        raise InvalidArgument(
            f"tool call {self.id!r}: raw_arguments {self.raw_arguments[:_MAX_PROBLEM]!r} reads"
            " as a JSON object; pass it as arguments (raw_arguments is for text that does not)"
        )


def _tool_calls(value: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    if isinstance(value, str | bytes | dict):
        raise InvalidArgument("tool_calls must be a sequence of ToolCall")
    calls = tuple(value)
    for call in calls:
        if not isinstance(call, ToolCall):
            raise InvalidArgument(f"tool_calls must hold ToolCall values, not {call!r}")
    ids = [call.id for call in calls]
    if len(set(ids)) != len(ids):
        raise InvalidArgument(f"the tool calls of one reply need distinct ids, not {ids!r}")
    return calls


def _text(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and type(value) is not str:
        raise InvalidArgument(f"a reply's text must be a str or None, not {value!r}")


def _usage(value: object) -> FrozenDict | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidArgument(f"a reply's usage must be a dict or None, not {value!r}")
    try:
        return FrozenDict(value)
    except InvalidPayload as exc:
        raise InvalidArgument(f"a reply's usage must be JSON: {exc}") from None


def _finish_reason(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and type(value) is not str:
        raise InvalidArgument(f"a reply's finish_reason must be a str or None, not {value!r}")


@final
@attrs.frozen
class ModelReply:
    """One model answer: ``text`` (the assistant's words, if any), the ``tool_calls`` it
    asks for (none means this is the run's final answer), the token ``usage`` the
    provider reported (a JSON object such as ``{"prompt_tokens": 9, ...}``), if any, and
    ``finish_reason``, why the model stopped, if the provider said (chat-completions
    values: ``"stop"``, ``"tool_calls"``, ``"length"`` for a reply cut off by the token
    limit, ``"content_filter"``)."""

    text: str | None = attrs.field(default=None, validator=_text)
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_tool_calls)
    usage: FrozenDict | None = attrs.field(default=None, converter=_usage)
    finish_reason: str | None = attrs.field(default=None, kw_only=True, validator=_finish_reason)


@runtime_checkable
class Model(Protocol):
    """The model port.

    ``messages`` is the transcript in the OpenAI chat-completions shape and ``tools`` the
    OpenAI function specs (``{"type": "function", "function": {"name", "description",
    "parameters"}}``); both are fresh copies the model may keep or change. A failure
    raises `ModelError`; ``infer`` is a cancellation point like any ``await``.
    """

    async def infer(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply:
        """The model's reply to ``messages`` (the transcript) with ``tools`` on offer."""
        ...
