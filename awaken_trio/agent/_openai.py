"""OpenAIChatModel: the `Model` port over an OpenAI-compatible chat-completions endpoint.

It streams (server-sent events, ``stream: true`` with usage in the last chunk), assembles
tool calls from their deltas, and maps every provider failure to a `ModelError` with a
stable code. httpx runs on Trio (through its Trio network backend), so a hung stream is
cancelled like any other ``await``, and the connection is closed on the way out.

httpx is an optional dependency, the ``[openai]`` extra: from a checkout of this project,
``pip install -e '.[openai]'``.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import ssl
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, final
from urllib.parse import urlsplit

from awaken_trio import FrozenDict, InvalidArgument, InvalidPayload, JsonValue
from awaken_trio._redact import redact_url

from ._model import ModelError, ModelReply, ToolCall, parse_arguments
from ._tokens import send_token
from ._tools import thaw

if TYPE_CHECKING:
    import httpx

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_MAX_ERROR_BODY = 64 * 1024
_MAX_MESSAGE = 500
_CONTEXT_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})
# The request keys this adapter owns: it streams, and it sends the agent's transcript and
# tools; extra_body may add any other key.
_OWN_KEYS = frozenset({"model", "messages", "stream", "stream_options", "tools"})
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an HTTP token
_CONTEXT_TEXT = re.compile(
    r"context[ _-]?(length|window)|maximum context|too many tokens|prompt is too long",
    re.IGNORECASE,
)


def _httpx() -> Any:
    try:
        import httpx
    except ImportError as exc:
        raise ImportError(
            "OpenAIChatModel needs httpx, which is not installed; install the [openai]"
            " extra (from a checkout of awaken_trio: pip install -e '.[openai]')"
        ) from exc
    return httpx


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One TLS context for the clients this module opens (building one costs far more
    than the client itself)."""
    context: ssl.SSLContext = _httpx().create_ssl_context()
    return context


@final
class OpenAIChatModel:
    """A `Model` that calls ``POST {base_url}/chat/completions`` with streaming.

    Args:
        model: the provider's model name.
        base_url: the API root; defaults to ``$OPENAI_BASE_URL``, else OpenAI's.
        api_key: sent as a bearer token; defaults to ``$OPENAI_API_KEY`` (none is sent
            if neither is set, as local servers expect).
        http_client: an ``httpx.AsyncClient`` to use (and keep open): pooling, proxies,
            its own timeouts. Without one, each call opens and closes its own client.
        timeout: seconds for the client this model opens (per read, so a stream that
            stalls this long fails ``timeout``); a given ``http_client`` keeps its own.
        temperature: sent as ``temperature`` (a finite number).
        max_tokens: sent as ``max_tokens`` (an int >= 1); a reply it cuts off comes
            back with ``finish_reason="length"``.
        tool_choice: sent as ``tool_choice`` (``"auto"``, ``"none"``, ``"required"``
            or ``{"type": "function", "function": {"name": ...}}``) with a request that
            has tools; a request without tools (an agent with none) sends none, as the
            API refuses a tool choice without tools.
        response_format: sent as ``response_format`` (a JSON object such as
            ``{"type": "json_object"}``).
        extra_headers: more HTTP headers for every request (``OpenAI-Organization``,
            a gateway's key, ...); one named like a header this model sends
            (``Authorization``, ``Accept``) replaces it.
        extra_body: more keys for the request body, sent as they are (``seed``,
            ``top_p``, ``max_completion_tokens``, a provider's own options); it cannot
            set the keys this model owns (``model``, ``messages``, ``stream``,
            ``stream_options``, ``tools``) or repeat a parameter given above.
        stream: also send the reply's text, piece by piece as the server sends it, to
            the run's ``"agent.tokens"`` stream (`send_token`) when an `Agent` runs the
            inference, so a page shows it before the step is committed. The reply, the
            transcript and the step's commits are the same either way; the request is
            streamed (server-sent ``data:`` lines) in both. A cancel while the reply
            streams in closes the response at once.

    Every parameter is checked and copied here, so a bad one is refused when the model is
    built and a dict changed afterwards changes nothing; each request gets fresh copies.

    Failures: 429 ``rate_limited`` (retryable, with the provider's ``Retry-After``; not
    retryable when the quota is spent), 401/403 ``unauthorized``, 400 about the context
    length ``context_overflow``, 408 and timeouts ``timeout`` (retryable), 5xx and
    connection failures ``provider_error`` (retryable), other statuses ``provider_error``,
    a reply that cannot be read ``invalid_reply``. A tool call whose arguments are not a
    JSON object is no failure: it comes back as ``ToolCall(..., raw_arguments=<the text>)``
    (the agent tells the model). The reply's ``finish_reason`` is the provider's.
    """

    __slots__ = (
        "_client",
        "_headers",
        "_httpx",
        "_params",
        "_stream",
        "_timeout",
        "base_url",
        "model",
    )

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.AsyncClient | None = None,
        timeout: float = 60.0,
        temperature: float | None = None,
        max_tokens: int | None = None,
        tool_choice: str | Mapping[str, JsonValue] | None = None,
        response_format: Mapping[str, JsonValue] | None = None,
        extra_headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, JsonValue] | None = None,
        stream: bool = False,
    ) -> None:
        if type(model) is not str or not model:
            raise InvalidArgument(f"OpenAIChatModel needs a model name, not {model!r}")
        self._httpx = _httpx()
        if http_client is not None and not isinstance(http_client, self._httpx.AsyncClient):
            raise InvalidArgument(
                f"http_client must be an httpx.AsyncClient, not {type(http_client).__name__}"
            )
        self.model = model
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip(
            "/"
        )
        api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        if type(stream) is not bool:
            raise InvalidArgument(f"OpenAIChatModel stream must be a bool, not {stream!r}")
        self._stream = stream
        self._client = http_client
        self._timeout = timeout
        self._params = _params(
            temperature=temperature,
            max_tokens=max_tokens,
            tool_choice=tool_choice,
            response_format=response_format,
            extra_body=extra_body,
        )
        headers = {"Accept": "text/event-stream"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._headers = _merged_headers(headers, extra_headers)

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.model!r}, base_url={redact_url(self.base_url)!r})"

    async def infer(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply:
        """Send one chat-completions request (streamed) and return its reply; provider errors raise
        `ModelError` with the codes of `Model.infer`.
        """
        body = self._body(messages, tools)
        headers = dict(self._headers)
        httpx = self._httpx
        try:
            if self._client is not None:
                return await self._post(self._client, body, headers)
            timeout = httpx.Timeout(self._timeout, connect=min(self._timeout, 10.0))
            async with httpx.AsyncClient(timeout=timeout, verify=_ssl_context()) as client:
                return await self._post(client, body, headers)
        except httpx.HTTPError as exc:
            raise transport_error(exc, self.base_url) from exc
        except httpx.InvalidURL as exc:
            raise ModelError(
                "provider_error", f"bad base_url {redact_url(self.base_url)!r}: {exc}"
            ) from exc

    def _body(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        """The request body: the adapter's own keys, then the caller's parameters."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = tools
        for key, value in self._params.items():
            if key != "tool_choice" or tools:
                body[key] = thaw(value)
        return body

    async def _post(
        self, client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str]
    ) -> ModelReply:
        url = f"{self.base_url}/chat/completions"
        async with client.stream("POST", url, json=body, headers=headers) as response:
            if response.status_code != 200:
                raw = await response.aread()
                raise status_error(response.status_code, raw[:_MAX_ERROR_BODY], response.headers)
            content_type = response.headers.get("content-type", "")
            if content_type.startswith("application/json"):
                # A server that ignores ``stream`` answers with one completion object.
                return _completion(await response.aread())
            assembler = _Assembler(send_token if self._stream else None)
            failure: ModelError | None = None
            # The stream is always read to its end (or until the read itself fails):
            # httpx's line iterator sits on nested generators that closing the outer one
            # would leave unfinished, so once the reply is decided the rest is skipped.
            async for line in response.aiter_lines():
                if failure is None and not assembler.done:
                    try:
                        assembler.feed(line)
                    except ModelError as exc:
                        failure = exc
            if failure is not None:
                raise failure
            return assembler.reply()


# --------------------------------------------------------------------------- parameters


def _params(
    *,
    temperature: object,
    max_tokens: object,
    tool_choice: object,
    response_format: object,
    extra_body: object,
) -> FrozenDict:
    """The request parameters, checked, as one frozen object of body keys."""
    params: dict[str, JsonValue] = {}
    if temperature is not None:
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, int | float)
            or not math.isfinite(temperature)
        ):
            raise InvalidArgument(
                f"OpenAIChatModel temperature must be a finite number, not {temperature!r}"
            )
        params["temperature"] = temperature
    if max_tokens is not None:
        if type(max_tokens) is not int or max_tokens < 1:
            raise InvalidArgument(
                f"OpenAIChatModel max_tokens must be an int >= 1, not {max_tokens!r}"
            )
        params["max_tokens"] = max_tokens
    if tool_choice is not None:
        if type(tool_choice) is str:
            if not tool_choice:
                raise InvalidArgument(
                    "OpenAIChatModel tool_choice must be a non-empty str or a JSON object"
                )
            params["tool_choice"] = tool_choice
        else:
            params["tool_choice"] = _json_object("tool_choice", tool_choice)
    if response_format is not None:
        params["response_format"] = _json_object("response_format", response_format)
    if extra_body is not None:
        for key, value in _json_object("extra_body", extra_body).items():
            if key in _OWN_KEYS:
                raise InvalidArgument(
                    f"OpenAIChatModel extra_body cannot set {key!r}: the model sets"
                    f" {sorted(_OWN_KEYS)} itself"
                )
            if key in params:
                raise InvalidArgument(
                    f"OpenAIChatModel got {key!r} twice, as a parameter and in extra_body;"
                    " give it once"
                )
            params[key] = value
    return FrozenDict(params)


def _json_object(name: str, value: object) -> FrozenDict:
    if not isinstance(value, Mapping):
        raise InvalidArgument(
            f"OpenAIChatModel {name} must be a JSON object (a dict), not {type(value).__name__}"
        )
    try:
        return FrozenDict(dict(value))
    except InvalidPayload as exc:
        raise InvalidArgument(f"OpenAIChatModel {name} must be JSON: {exc}") from None


def _merged_headers(own: dict[str, str], extra: object) -> dict[str, str]:
    """``own`` with the ``extra`` headers added, each replacing an own header of the same
    name (names are case-insensitive). Values are never repeated in an error: headers
    carry keys."""
    if extra is None:
        return own
    if not isinstance(extra, Mapping):
        raise InvalidArgument(
            f"OpenAIChatModel extra_headers must be a dict of str, not {type(extra).__name__}"
        )
    merged = dict(own)
    for name, value in extra.items():
        if type(name) is not str or not _HEADER_NAME.fullmatch(name):
            raise InvalidArgument(
                f"OpenAIChatModel extra_headers has {name!r}, which is not an HTTP header name"
            )
        if type(value) is not str or any(c in value for c in "\r\n\0"):
            raise InvalidArgument(
                f"OpenAIChatModel extra_headers[{name!r}] must be a str on one line"
                " (no CR, LF or NUL)"
            )
        for known in [key for key in merged if key.lower() == name.lower()]:
            del merged[known]
        merged[name] = value
    return merged


# --------------------------------------------------------------------------- streaming


class _Assembler:
    """Builds one reply from the chunks of a chat-completions event stream; ``on_text``,
    if given, is handed each piece of the reply's text as it is read."""

    def __init__(self, on_text: Callable[[str], None] | None = None) -> None:
        self._on_text = on_text
        self._data: list[str] = []
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._usage: dict[str, Any] | None = None
        self._finish_reason: str | None = None
        self._finished = False
        self._done = False

    @property
    def done(self) -> bool:
        """Whether ``[DONE]`` has been read."""
        return self._done

    def feed(self, line: str) -> None:
        """Take one line of the stream."""
        if line == "":
            if self._data:
                data, self._data = "\n".join(self._data), []
                self._event(data)
            return
        if line.startswith(":"):
            return  # a comment (keep-alive)
        field, _, value = line.partition(":")
        if field == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
            if self._data == ["[DONE]"]:
                self._data = []
                self._done = True

    def _event(self, data: str) -> None:
        if data.strip() == "[DONE]":
            self._done = True
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            raise ModelError(
                "invalid_reply", f"a stream chunk is not JSON: {data[:_MAX_MESSAGE]!r}"
            ) from None
        if not isinstance(chunk, dict):
            raise ModelError("invalid_reply", f"a stream chunk is not an object: {data[:200]!r}")
        if "error" in chunk:
            raise _body_error(None, chunk)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise ModelError("invalid_reply", "a stream chunk's choices are not a list")
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            finish_reason = choice.get("finish_reason")
            if finish_reason:
                self._finished = True
                if isinstance(finish_reason, str):
                    self._finish_reason = finish_reason
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise ModelError("invalid_reply", "a stream chunk's delta is not an object")
            content = delta.get("content")
            if isinstance(content, str):
                self._text.append(content)
                if self._on_text is not None:
                    self._on_text(content)
            elif content is not None:
                raise ModelError("invalid_reply", "a delta's content is not a str")
            for part in delta.get("tool_calls") or ():
                self._tool_delta(part)

    def _tool_delta(self, part: object) -> None:
        if not isinstance(part, dict):
            raise ModelError("invalid_reply", "a tool call delta is not an object")
        index = part.get("index", len(self._calls))
        if type(index) is not int:
            raise ModelError("invalid_reply", f"a tool call delta has index {index!r}")
        call = self._calls.setdefault(index, {"id": None, "name": "", "arguments": []})
        if isinstance(part.get("id"), str) and part["id"]:
            call["id"] = part["id"]
        function = part.get("function") or {}
        if not isinstance(function, dict):
            raise ModelError("invalid_reply", "a tool call delta's function is not an object")
        name = function.get("name")
        if isinstance(name, str):
            # Providers send the name once; a few repeat it whole in later deltas.
            call["name"] = name if name.startswith(call["name"]) else call["name"] + name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call["arguments"].append(arguments)

    def reply(self) -> ModelReply:
        if self._data and not self._done:  # a last event the stream did not terminate
            data, self._data = "\n".join(self._data), []
            self._event(data)
        if not self._done and not self._finished:
            raise ModelError(
                "provider_error",
                "the stream ended before the reply was complete",
                retryable=True,
            )
        calls = []
        for index in sorted(self._calls):
            call = self._calls[index]
            calls.append(_tool_call(call["id"], call["name"], "".join(call["arguments"])))
        text = "".join(self._text) if self._text else None
        return _reply(text, calls, self._usage, self._finish_reason)


def _tool_call(call_id: object, name: object, arguments: object) -> ToolCall:
    if type(call_id) is not str or not call_id or type(name) is not str or not name:
        raise ModelError(
            "invalid_reply", f"a tool call has no id or name (id {call_id!r}, name {name!r})"
        )
    if type(arguments) is not str:
        raise ModelError(
            "invalid_reply", f"the arguments of tool call {call_id!r} ({name}) are not text"
        )
    try:
        parsed = parse_arguments(arguments)
    except InvalidArgument:
        # The model is told (an error tool message) and the transcript keeps its text.
        return ToolCall(call_id, name, raw_arguments=arguments)
    return ToolCall(call_id, name, parsed)


def _reply(
    text: str | None,
    calls: list[ToolCall],
    usage: dict[str, Any] | None,
    finish_reason: str | None,
) -> ModelReply:
    try:
        return ModelReply(text=text, tool_calls=calls, usage=usage, finish_reason=finish_reason)
    except InvalidArgument as exc:
        raise ModelError("invalid_reply", str(exc)) from None


def _completion(raw: bytes) -> ModelReply:
    """A non-streamed chat.completion object as a reply."""
    try:
        body = json.loads(raw)
        if isinstance(body, dict) and "error" in body:
            raise _body_error(None, body)
        choice = body["choices"][0]
        message = choice["message"]
        finish_reason = choice.get("finish_reason")
        text = message.get("content")
        calls = [
            _tool_call(c.get("id"), c["function"].get("name"), c["function"].get("arguments", ""))
            for c in message.get("tool_calls") or ()
        ]
    except ModelError:
        raise
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise ModelError(
            "invalid_reply", f"the completion cannot be read: {raw[:_MAX_MESSAGE]!r}"
        ) from None
    usage = body.get("usage")
    return _reply(
        text if isinstance(text, str) else None,
        calls,
        usage if isinstance(usage, dict) else None,
        finish_reason if isinstance(finish_reason, str) else None,
    )


# --------------------------------------------------------------------------- errors


def transport_error(exc: httpx.HTTPError, base_url: str) -> ModelError:
    """A request that got no HTTP answer, as a retryable `ModelError` naming the server's
    host (never base_url's credentials) and what to check; httpx often gives no message
    (``ConnectError("")``), so the exception's class always says what happened."""
    httpx = _httpx()
    host = _host(base_url)
    text = str(exc).strip()
    what = f"{type(exc).__name__}: {text}" if text else f"{type(exc).__name__} (no message)"
    if isinstance(exc, httpx.TimeoutException):
        return ModelError(
            "timeout",
            f"{host} did not answer in time ({what}); check base_url and the network,"
            " or allow a longer timeout",
            retryable=True,
        )
    if isinstance(exc, httpx.ConnectError):
        return ModelError(
            "provider_error",
            f"could not connect to {host} ({what}); check base_url and the network",
            retryable=True,
        )
    if isinstance(exc, httpx.NetworkError):
        return ModelError(
            "provider_error",
            f"the connection to {host} failed ({what}); check base_url and the network",
            retryable=True,
        )
    return ModelError("provider_error", f"{host}: {what}", retryable=True)


def _host(base_url: str) -> str:
    """``host:port`` of ``base_url``, with no credentials."""
    try:
        parts = urlsplit(base_url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return "the server (base_url is malformed)"
    if not host:
        return "the server (base_url names no host)"
    if ":" in host:
        host = f"[{host}]"  # IPv6
    return host if port is None else f"{host}:{port}"


def status_error(status: int, raw: bytes, headers: httpx.Headers) -> ModelError:
    """The `ModelError` for an HTTP error status and its body."""
    try:
        body = json.loads(raw)
    except ValueError:
        body = raw.decode("utf-8", "replace")[:_MAX_MESSAGE]
    return _body_error(status, body, headers)


def _body_error(
    status: int | None, body: object, headers: httpx.Headers | None = None
) -> ModelError:
    code, kind, message = _error_fields(body)
    where = f"HTTP {status}" if status is not None else "the stream reported an error"
    text = f"{where}: {message}" if message else where
    if len(text) > _MAX_MESSAGE:
        text = text[:_MAX_MESSAGE] + "..."
    if status == 429:
        quota = code == "insufficient_quota" or kind == "insufficient_quota"
        return ModelError(
            "rate_limited", text, retryable=not quota, retry_after=_retry_after(headers)
        )
    if status in (401, 403):
        return ModelError("unauthorized", text)
    if code in _CONTEXT_CODES or (
        status in (None, 400, 413) and _CONTEXT_TEXT.search(message or "")
    ):
        return ModelError("context_overflow", text)
    if status == 408:
        return ModelError("timeout", text, retryable=True)
    if status is None or status >= 500 or status == 409:
        return ModelError("provider_error", text, retryable=True)
    return ModelError("provider_error", text)


def _error_fields(body: object) -> tuple[str | None, str | None, str]:
    """(code, type, message) of an error body, in the shapes providers use."""
    if isinstance(body, str):
        return None, None, body
    if not isinstance(body, dict):
        return None, None, ""
    error = body.get("error", body)
    if isinstance(error, str):
        return None, None, error
    if not isinstance(error, dict):
        return None, None, ""
    code = error.get("code")
    kind = error.get("type")
    message = error.get("message")
    return (
        code if isinstance(code, str) else None,
        kind if isinstance(kind, str) else None,
        message if isinstance(message, str) else "",
    )


def _retry_after(headers: httpx.Headers | None) -> float | None:
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                seconds = float(value) * scale
            except ValueError:
                continue
            if 0 <= seconds < 3600:
                return seconds
    return None
