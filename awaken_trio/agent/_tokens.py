"""An agent's tokens: the text of the reply a model is reading, sent as it arrives to the
run's ``"agent.tokens"`` stream (DESIGN §3.9), so a page can show it before the step is
committed. The transcript never depends on it: it is the committed replies.

The `Agent` opens a `TokenSink` around each inference (a context variable of the task that
calls the model); a model that streams calls `send_token` with each piece of text it reads
(`OpenAIChatModel(stream=True)` does). Outside an agent's inference it does nothing.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final, final

from awaken_trio import InvalidArgument, InvalidPayload, RunContext, StreamWriter

TOKENS_CHANNEL: Final = "agent.tokens"
"""The stream channel an agent's tokens go to."""

logger = logging.getLogger("awaken_trio.agent")

_sink: contextvars.ContextVar[TokenSink | None] = contextvars.ContextVar(
    "awaken_trio_agent_tokens", default=None
)


@final
class TokenSink:
    """Where the tokens of one inference (and its retries) go: the run's ``"agent.tokens"``
    writer, opened on the first token. A retry that follows tokens is marked in the stream
    (a ``{"retry": n, "code": code}`` chunk), so a reader drops the partial text before it."""

    __slots__ = ("_ctx", "_off", "_since_retry", "_writer")

    def __init__(self, ctx: RunContext) -> None:
        self._ctx = ctx
        self._writer: StreamWriter | None = None
        self._since_retry = 0
        self._off = False

    def send(self, text: str) -> None:
        if self._off or not text:
            return
        writer = self._writer
        if writer is None:
            try:
                writer = self._writer = self._ctx.stream(TOKENS_CHANNEL)
            except InvalidArgument as exc:  # a store that keeps no streams
                self._off = True
                logger.warning(
                    "agent: run %r: its tokens are not streamed: %s",
                    self._ctx.run_id,
                    exc,
                    extra={"run_id": self._ctx.run_id},
                )
                return
        try:
            writer.send(text)
        except InvalidPayload as exc:  # a piece larger than any payload: not shown live
            logger.warning(
                "agent: run %r: a token was not streamed: %s",
                self._ctx.run_id,
                exc,
                extra={"run_id": self._ctx.run_id},
            )
            return
        self._since_retry += 1

    def retrying(self, retry: int, code: str) -> None:
        """The inference failed and is tried again: mark it if it had sent tokens."""
        if self._since_retry and self._writer is not None:
            self._writer.send({"retry": retry, "code": code})
        self._since_retry = 0


@contextmanager
def streaming_tokens(ctx: RunContext) -> Iterator[TokenSink]:
    """Send the tokens models report (`send_token`) in this block to ``ctx``'s run."""
    sink = TokenSink(ctx)
    token = _sink.set(sink)
    try:
        yield sink
    finally:
        _sink.reset(token)


def send_token(text: str) -> None:
    """Send ``text``, a piece of the reply a model is reading, to the run's
    ``"agent.tokens"`` stream, when an `Agent` is running the inference that reads it;
    outside one, do nothing. For `Model` implementations that stream (the run's
    transcript does not depend on it: it is the reply the model returns).

    Sync, and never waits for the store (`StreamWriter.send`).
    """
    if type(text) is not str:
        raise InvalidArgument(f"send_token() takes the text of a reply (a str), not {text!r}")
    sink = _sink.get()
    if sink is not None:
        sink.send(text)
