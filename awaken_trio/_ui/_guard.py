"""The dashboard's security (DESIGN §3.6), in front of every route, as ASGI middleware.

- With a token, every request carries it: ``Authorization: Bearer <token>`` (scripts), or
  the page's cookie. A page opened once as ``/?token=<token>`` is served with that cookie
  set (HttpOnly, so no script reads it; SameSite=Strict, so no other site's page sends
  it), and its script then drops the token from the address bar. Anything else is 401.
- Without a token the dashboard is bound to a loopback address; a request whose ``Host``
  is not a loopback name is refused (403), so a page on another site cannot reach it by
  pointing its own name at 127.0.0.1 (DNS rebinding).
- A request of any method but GET that a browser marks as coming from another site
  (``Origin`` other than the dashboard's own, or ``Sec-Fetch-Site`` other than
  ``same-origin``) is refused (403), token or not: a control is a POST, and no other
  method may get past this guard on the strength of not being one (HEAD included: a page
  on any site can send one with ``fetch``). A GET changes nothing, and a link followed
  from another site is one.
- Every answer forbids inline script and framing (``Content-Security-Policy``), sniffing
  and referrers, so neither a payload nor the token leaks or runs.
"""

from __future__ import annotations

import hmac
import ipaddress
from http.cookies import SimpleCookie
from typing import Final
from urllib.parse import parse_qsl

import attrs
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._face.shapes import dumps

COOKIE: Final = "awaken_trio_ui"
SECURITY_HEADERS: Final = (
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self';"
        " connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
)
_SAME_SITE: Final = frozenset({"same-origin", "none"})


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) is this
    machine's loopback."""
    name = host.strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_name(host_header: str) -> str:
    """The name in a ``Host`` header, without its port."""
    if host_header.startswith("["):
        return host_header.split("]", 1)[0] + "]"
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


@attrs.frozen
class Refusal:
    """An answer the guard gives instead of the app's: the status and the error object's
    ``error`` and ``message``."""

    status: int
    error: str
    message: str


@attrs.frozen
class Admission:
    """A request let through, and the cookie to set on its answer (a page opened with
    ``?token=``), if any."""

    set_cookie: str | None = None


class Guard:
    """ASGI middleware applying the rules of the module's docstring to ``app``."""

    def __init__(self, app: ASGIApp, *, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # (lifespan)
            await self.app(scope, receive, send)
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS:
                    headers[name] = value
                if set_cookie is not None:
                    headers.append("Set-Cookie", set_cookie)
            await send(message)

        set_cookie: str | None = None
        headers = Headers(scope=scope)
        verdict = self._refusal(scope, headers) or self._authorize(scope, headers)
        if isinstance(verdict, Refusal):
            await _refuse(secured, verdict)
            return
        set_cookie = verdict.set_cookie
        await self.app(scope, receive, secured)

    def _refusal(self, scope: Scope, headers: Headers) -> Refusal | None:
        """The refusal of the host or origin rules, if any (the token is checked after)."""
        if self.token is None and not is_loopback(_host_name(headers.get("host", ""))):
            return Refusal(
                403,
                "forbidden_host",
                "this dashboard has no token, so it answers only requests to a loopback"
                " name (127.0.0.1, localhost); start it with --token to serve other names",
            )
        if scope["method"] != "GET":
            site = headers.get("sec-fetch-site")
            origin = headers.get("origin")
            own = f"{scope.get('scheme', 'http')}://{headers.get('host', '')}"
            if (site is not None and site not in _SAME_SITE) or (
                origin is not None and origin != own
            ):
                return Refusal(
                    403,
                    "cross_origin",
                    "a control must come from the dashboard's own page (this request came"
                    " from another origin)",
                )
        return None

    def _authorize(self, scope: Scope, headers: Headers) -> Admission | Refusal:
        """Whether the request carries the token (any request, when there is none)."""
        if self.token is None:
            return Admission()
        authorization = headers.get("authorization", "")
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() == "bearer" and self._matches(given.strip()):
            return Admission()
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # a malformed Cookie header is no credential
            cookie = SimpleCookie()
        if COOKIE in cookie and self._matches(cookie[COOKIE].value):
            return Admission()
        if scope["method"] == "GET":
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            if "token" in query and self._matches(query["token"]):
                secure = "; Secure" if scope.get("scheme") == "https" else ""
                cookie_text = f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/{secure}"
                return Admission(cookie_text)
        return Refusal(
            401,
            "unauthorized",
            "this dashboard needs its token: send 'Authorization: Bearer <token>', or open"
            " the page once as /?token=<token>",
        )

    def _matches(self, given: str) -> bool:
        assert self.token is not None
        return hmac.compare_digest(given.encode(), self.token.encode())


async def _refuse(send: Send, refusal: Refusal) -> None:
    body = dumps({"error": refusal.error, "message": refusal.message, "state": None}).encode()
    status = refusal.status
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="awaken-trio"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
