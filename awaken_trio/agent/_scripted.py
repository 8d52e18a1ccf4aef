"""ScriptedModel: a model that plays back a script (tests, examples, offline demos)."""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, final

import trio

from awaken_trio import InvalidArgument

from ._model import ModelError, ModelReply

ScriptedReply = Callable[[list[dict[str, Any]], list[dict[str, Any]]], Awaitable[ModelReply]]
"""``async def reply(messages, tools) -> ModelReply``: a step of the script that computes
its reply, waits for something, or never returns."""


@final
class ScriptedModel:
    """A `Model` that answers each ``infer`` with the next entry of ``replies``.

    Each entry is a `ModelReply` (returned), a `ModelError` (raised), or an async callable
    ``(messages, tools) -> ModelReply`` (awaited: it may block, fail, or hang). ``calls``
    keeps a copy of the ``messages`` each ``infer`` saw, and ``tools`` the tool specs.
    Running out of entries raises ``ModelError("invalid_reply", ...)``. Every ``infer``
    is a checkpoint.
    """

    __slots__ = ("_script", "calls", "tools")

    def __init__(self, replies: Iterable[ModelReply | ModelError | ScriptedReply]) -> None:
        script = list(replies)
        for entry in script:
            if not isinstance(entry, ModelReply | ModelError) and not callable(entry):
                raise InvalidArgument(
                    "a ScriptedModel's replies are ModelReply, ModelError or async callables"
                    f" (messages, tools) -> ModelReply, not {entry!r}"
                )
        self._script: deque[ModelReply | ModelError | ScriptedReply] = deque(script)
        self.calls: list[list[dict[str, Any]]] = []
        self.tools: list[list[dict[str, Any]]] = []

    def __repr__(self) -> str:
        return f"ScriptedModel(<{len(self._script)} replies left, {len(self.calls)} calls>)"

    @property
    def remaining(self) -> int:
        """Entries not played yet."""
        return len(self._script)

    async def infer(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply:
        """Return the script's next reply (raise it, if it is a `ModelError`; call it, if it is a
        callable), keeping a copy of ``messages`` in `calls`.
        """
        await trio.lowlevel.checkpoint()
        self.calls.append(copy.deepcopy(messages))
        self.tools.append(copy.deepcopy(tools))
        if not self._script:
            raise ModelError(
                "invalid_reply",
                f"the scripted model has no reply left for call {len(self.calls)}",
            )
        entry = self._script.popleft()
        if isinstance(entry, ModelError):
            raise entry
        if isinstance(entry, ModelReply):
            return entry
        return await entry(messages, tools)
