"""An agent run's working state: the transcript and what its current step has decided.

It is rebuilt at the start of every attempt from the run's committed checkpoint (or, on
the first attempt, from its input) and written back as the checkpoint::

    {"messages": [...], "steps": n}             # between steps
    {..., "usage": {...}}                       # once the model reported usage
    {..., "finish_reason": "length"}            # a final reply that did not stop normally
    {..., "answers": {<tool call id>: <answer>}}
                                                # while a step's tool calls wait for tickets

A step is pending while the last message is an assistant message with tool calls: its
tool messages are appended together when every call has its result, so the transcript is
always valid for the chat-completions API. ``answers`` holds the resume values already
given to the step's waiting calls (each ticket is answered by its own resume, so the
answers to the earlier ones must be committed while the later ones are asked).

A tool call's arguments are recorded as the text the model sent; a call whose text is not
a JSON object is answered with an error tool message (see `PendingCall.problem`).
"""

from __future__ import annotations

from typing import Any, Literal, final

import attrs

from awaken_trio import InvalidArgument, JsonValue, RunContext, RunError

from ._model import ModelReply, parse_arguments
from ._tools import dumps, thaw

_ROLES = ("system", "user", "assistant", "tool")

PERMISSION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"decision": {"enum": ["allow", "deny"]}, "note": {"type": "string"}},
    "required": ["decision"],
    "additionalProperties": False,
}
"""What a ``tool_permission`` ticket accepts: ``{"decision": "allow" | "deny", "note"?}``."""

CLIENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"result": {}},
    "required": ["result"],
    "additionalProperties": False,
}
"""What a ``client_execution`` ticket accepts: ``{"result": <json>}``."""

Wait = Literal["ask", "client"]

NORMAL_STOPS = frozenset({"stop", "tool_calls"})
"""The finish reasons of a reply that ended as the model meant it to."""


@final
@attrs.frozen
class PendingCall:
    """A tool call of the pending step, as its assistant message records it."""

    id: str
    name: str
    arguments: dict[str, Any] | None  # None: the recorded arguments are not a JSON object
    problem: str | None = None  # why the arguments are unusable, when they are None

    def payload(self) -> dict[str, Any]:
        """The ticket payload that shows this call to whoever answers it."""
        return {"tool_call": {"id": self.id, "name": self.name, "arguments": self.arguments}}


def answer_fits(wait: Wait, value: JsonValue) -> bool:
    """Whether ``value`` answers a call waiting as ``wait`` (the ticket's schema, again)."""
    if not isinstance(value, dict):
        return False
    if wait == "client":
        return set(value) == {"result"}
    if not set(value) <= {"decision", "note"}:
        return False
    note = value.get("note")
    return value.get("decision") in ("allow", "deny") and (note is None or type(note) is str)


@attrs.define
class Progress:
    """The mutable working copy of one agent run's state (see the module docstring)."""

    messages: list[dict[str, Any]]
    steps: int = 0
    usage: dict[str, Any] | None = None
    answers: dict[str, dict[str, Any]] = attrs.Factory(dict)
    # Why the final reply stopped, when that was not a normal stop (None otherwise, and
    # whenever the last message is not a final reply).
    finish_reason: str | None = None

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(cls, ctx: RunContext, system: str | None) -> Progress:
        """The state to continue from: the committed checkpoint, else the run's input."""
        checkpoint = ctx.checkpoint
        if checkpoint is not None:
            return cls._from_checkpoint(ctx.run_id, checkpoint)
        messages = _input_messages(ctx.run_id, ctx.input)
        if system is not None and (not messages or messages[0]["role"] != "system"):
            messages.insert(0, {"role": "system", "content": system})
        return cls(messages)

    @classmethod
    def _from_checkpoint(cls, run_id: str, checkpoint: JsonValue) -> Progress:
        if (
            not isinstance(checkpoint, dict)
            or not isinstance(checkpoint.get("messages"), list)
            or type(checkpoint.get("steps")) is not int
        ):
            raise RunError(
                "invalid_checkpoint",
                f"run {run_id!r} has a checkpoint that is not an agent's"
                ' ({"messages": [...], "steps": n}); was it started with another body?',
            )
        usage = checkpoint.get("usage")
        answers = checkpoint.get("answers")
        finish_reason = checkpoint.get("finish_reason")
        return cls(
            messages=thaw(checkpoint["messages"]),
            steps=checkpoint["steps"],
            usage=None if usage is None else thaw(usage),
            answers={} if answers is None else thaw(answers),
            finish_reason=finish_reason if type(finish_reason) is str else None,
        )

    def checkpoint(self) -> dict[str, Any]:
        """The progress to commit (the boundary freezes a copy of it)."""
        out: dict[str, Any] = {"messages": self.messages, "steps": self.steps}
        if self.usage is not None:
            out["usage"] = self.usage
        if self.answers:
            out["answers"] = self.answers
        if self.finish_reason is not None:
            out["finish_reason"] = self.finish_reason
        return out

    # ------------------------------------------------------------------ reading

    def pending_calls(self) -> list[PendingCall] | None:
        """The tool calls of the step in progress, or None between steps."""
        if not self.messages:
            return None
        last = self.messages[-1]
        calls = last.get("tool_calls")
        if last.get("role") != "assistant" or not calls:
            return None
        out = []
        for raw in calls:
            function = raw.get("function") or {}
            text = function.get("arguments")
            arguments: dict[str, Any] | None = None
            problem: str | None = None
            if text is None or type(text) is str:
                try:
                    arguments = thaw(parse_arguments(text or ""))
                except InvalidArgument as exc:
                    problem = str(exc)
            else:
                problem = f"recorded as {type(text).__name__}, not JSON text"
            out.append(
                PendingCall(
                    id=str(raw.get("id")),
                    name=str(function.get("name")),
                    arguments=arguments,
                    problem=problem,
                )
            )
        return out

    @property
    def finished(self) -> bool:
        """The model gave its final answer and nothing came in since."""
        if self.steps == 0 or not self.messages:
            return False
        last = self.messages[-1]
        return last.get("role") == "assistant" and not last.get("tool_calls")

    def result(self) -> dict[str, Any]:
        text = self.messages[-1].get("content")
        out: dict[str, Any] = {"text": text if type(text) is str else "", "steps": self.steps}
        if self.usage is not None:
            out["usage"] = self.usage
        if self.finish_reason is not None:
            out["finish_reason"] = self.finish_reason
        return out

    # ------------------------------------------------------------------ changing

    def add_reply(self, reply: ModelReply) -> None:
        """Append the model's reply as the next step's assistant message."""
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": (
                            dumps(call.arguments)
                            if call.raw_arguments is None
                            else call.raw_arguments
                        ),
                    },
                }
                for call in reply.tool_calls
            ]
        self.messages.append(message)
        self.steps += 1
        abnormal = reply.finish_reason not in NORMAL_STOPS
        self.finish_reason = reply.finish_reason if abnormal and not reply.tool_calls else None
        if reply.usage is not None:
            self.usage = _summed(self.usage or {}, thaw(reply.usage))

    def answer(self, call: PendingCall, value: dict[str, Any]) -> None:
        self.answers[call.id] = value

    def add_user(self, message: dict[str, Any]) -> None:
        """A user message, taken at a boundary: there is no pending step then (a user
        message cannot sit between tool calls and their results)."""
        assert self.pending_calls() is None, "user messages are taken between steps"
        self.messages.append(message)
        self.finish_reason = None  # the last message is no longer the final reply

    def complete_step(self, results: dict[str, str]) -> None:
        """Append the pending step's tool messages, in call order."""
        calls = self.pending_calls()
        assert calls is not None
        for call in calls:
            self.messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": results[call.id]}
            )
        self.answers = {}


def user_message(payload: JsonValue) -> dict[str, Any] | None:
    """A live message payload (a str, or ``{"content": str}``) as a user message."""
    if type(payload) is str:
        return {"role": "user", "content": payload}
    if isinstance(payload, dict) and type(payload.get("content")) is str:
        message: dict[str, Any] = {"role": "user", "content": payload["content"]}
        if type(payload.get("name")) is str:
            message["name"] = payload["name"]
        return message
    return None


def _input_messages(run_id: str, value: JsonValue) -> list[dict[str, Any]]:
    if type(value) is str:
        return [{"role": "user", "content": value}]
    if isinstance(value, dict) and isinstance(value.get("messages"), list):
        messages: list[dict[str, Any]] = thaw(value["messages"])
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or message.get("role") not in _ROLES:
                raise RunError(
                    "invalid_input",
                    f"message {i} of run {run_id!r}'s input is not a chat message with a"
                    f" role in {_ROLES}: {message!r}",
                )
        return messages
    raise RunError(
        "invalid_input",
        f"an agent run's input is a prompt str or {{'messages': [...]}}, not {value!r}"
        f" (run {run_id!r})",
    )


def _summed(total: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """Usage added up: numbers summed (nested objects too), anything else the latest."""
    out = dict(total)
    for key, value in more.items():
        old = out.get(key)
        if isinstance(value, dict):
            out[key] = _summed(old if isinstance(old, dict) else {}, value)
        elif _number(value) and _number(old):
            out[key] = old + value
        else:
            out[key] = value
    return out


def _number(value: object) -> bool:
    return type(value) in (int, float)
