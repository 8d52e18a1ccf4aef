"""Passwords out of anything shown: store URLs, connection strings, error text, log lines.

One module for every place that shows text which may hold a secret: a store's errors and
reprs (`awaken_trio.store`), the command line's output and the ``worker`` and ``ui`` logs
(`awaken_trio._cli`), the dashboard's answers, a model's base URL (`awaken_trio.agent`).
Each function hides too much rather than too little: a password is replaced by ``***``
wherever it could end.

It imports nothing of the package, so the kernel's neighbours (the stores) and the faces
can all use it.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["MASK", "redact", "redact_conninfo", "redact_secret", "redact_url"]

MASK: Final = "***"
"""What a password is replaced by."""

# ``scheme://user:password@host`` in free text: the password, up to the ``@`` that ends the
# user info.
_URL_PASSWORD: Final = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@'\"]*):[^\s@'\"]*@")
# ``password=...`` in free text (a query string, a connection string).
_PASSWORD_OPTION: Final = re.compile(r"(?P<head>\bpassword=)[^\s&'\"]*", re.IGNORECASE)
# Query parameters of a URL that carry a secret (libpq's ``password``, tokens).
_SECRET_PARAMETER: Final = re.compile(
    r"(?i)([?&](?:password|passwd|pwd|pass|secret|token|api_key|apikey|access_token)=)[^&#]*"
)
_URL_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
# ``password = value`` in a libpq keyword string, the value quoted or not.
_KEYWORD_PASSWORD: Final = re.compile(r"(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)")


def redact(text: str) -> str:
    """``text`` (a message, a log line, an error) with every URL password
    (``user:secret@``) and ``password=`` value replaced by ``***``."""
    # Each pattern holds a literal the text must hold for it to match (``://``, ``=``):
    # most text, a worker's every log line among it, holds neither and skips the search.
    if "://" in text:
        text = _URL_PASSWORD.sub(rf"\g<head>:{MASK}@", text)
    if "=" in text:
        text = _PASSWORD_OPTION.sub(rf"\g<head>{MASK}", text)
    return text


def redact_url(url: str) -> str:
    """``url`` as it may be shown: the password of its ``user:password@`` part (and of a
    secret query parameter: ``password=``, ``token=`` ...) replaced by ``***``."""
    scheme, sep, rest = url.partition("://")
    if sep:
        # The user part ends at the last '@' before the query: a password may hold an
        # unescaped '/' or '@', and hiding too much is better than showing any of it.
        head = re.split(r"[?#]", rest, maxsplit=1)[0]
        at = head.rfind("@")
        if at > 0 and not head.startswith("/"):
            user, colon, _ = head[:at].partition(":")
            if colon:
                rest = f"{user}:{MASK}{rest[at:]}"
    return _SECRET_PARAMETER.sub(rf"\1{MASK}", scheme + sep + rest)


def redact_conninfo(conninfo: str) -> str:
    """A connection string as it may be shown: a URL's password (`redact_url`), or a
    libpq keyword string's ``password=`` value, replaced by ``***``."""
    if _URL_SCHEME.match(conninfo):
        return redact_url(conninfo)
    return _KEYWORD_PASSWORD.sub(rf"\1{MASK}", conninfo)


def redact_secret(text: str, secret: str | None) -> str:
    """``text`` with a known ``secret`` (a password a driver may have put in its error
    text) replaced by ``***`` wherever it occurs, and then `redact`-ed."""
    if secret:
        text = text.replace(secret, MASK)
    return redact(text)
