"""What a PostgreSQL store URL (or libpq keyword string) says: the connection libpq makes,
and the store's own options (``schema``, ``pool_size``), which libpq never sees."""

from __future__ import annotations

import re
from typing import Final, final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import attrs

from ..._core import InvalidArgument
from ..._redact import redact_conninfo

SCHEMES: Final = ("postgresql://", "postgres://")
DEFAULT_SCHEMA: Final = "awaken"
DEFAULT_POOL_SIZE: Final = 4
MAX_POOL_SIZE: Final = 256
FORMS: Final = (
    "'postgresql://user:password@host:port/database' (or 'postgres://...'), with libpq's"
    " options in the query ('?sslmode=require' ...) and the store's own: '?schema=' (its"
    " PostgreSQL schema, default 'awaken') and '?pool_size=' (connections, default 4); or a"
    " libpq keyword string 'host=... dbname=...'"
)
_OURS: Final = ("schema", "pool_size")
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


@final
@attrs.frozen
class Target:
    """Where a store connects, and its own options."""

    conninfo: str = attrs.field(repr=False)
    """What libpq is given (may hold the password: never shown)."""
    shown: str
    """The same, as it may be shown."""
    schema: str
    pool_size: int


def parse(url: str, *, schema: str | None = None, pool_size: int | None = None) -> Target:
    """Split a store URL or keyword string into libpq's part and the store's options; a
    keyword argument and the URL may not both give one.

    Raises:
        InvalidArgument: malformed, or an option out of range (the message shows the URL
            without its password).
    """
    if not isinstance(url, str) or not url.strip():
        raise InvalidArgument(f"a PostgreSQL store needs a URL or conninfo string; use {FORMS}")
    shown = redact_conninfo(url)
    found: dict[str, str] = {}
    conninfo = url
    if url.startswith(SCHEMES):
        try:
            parts = urlsplit(url)
            query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
        except ValueError:
            raise InvalidArgument(
                f"malformed PostgreSQL store URL {shown!r}: its query is not 'name=value' pairs"
            ) from None
        rest = []
        for name, value in query:
            if name in _OURS:
                if name in found:
                    raise InvalidArgument(
                        f"PostgreSQL store URL {shown!r} gives {name!r} more than once"
                    )
                found[name] = value
            else:
                rest.append((name, value))
        conninfo = urlunsplit(parts._replace(query=urlencode(rest)))
    elif "=" not in url:
        raise InvalidArgument(f"malformed PostgreSQL store URL {shown!r}; use {FORMS}")
    try:
        import psycopg.conninfo
    except ImportError:  # pragma: no cover - the extra is in the test dependencies
        raise InvalidArgument(
            "the PostgreSQL store needs psycopg (from a checkout of awaken_trio:"
            " pip install -e '.[postgres]')"
        ) from None
    try:
        psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        message = str(exc).replace(url, shown).replace(conninfo, redact_conninfo(conninfo))
        raise InvalidArgument(
            f"malformed PostgreSQL store URL {shown!r}: {message}; use {FORMS}"
        ) from None
    if schema is not None and "schema" in found:
        raise InvalidArgument(
            f"the schema is given twice: in the store URL {shown!r} and as schema="
        )
    if pool_size is not None and "pool_size" in found:
        raise InvalidArgument(
            f"the pool size is given twice: in the store URL {shown!r} and as pool_size="
        )
    chosen_schema = schema if schema is not None else found.get("schema", DEFAULT_SCHEMA)
    if not isinstance(chosen_schema, str) or not _SCHEMA_NAME.match(chosen_schema):
        raise InvalidArgument(
            f"PostgreSQL store URL {shown!r}: the schema must be a name of letters, digits and _"
            f" (not starting with a digit, at most 63), not {chosen_schema!r}"
        )
    size: object = pool_size
    if size is None:
        text = found.get("pool_size", str(DEFAULT_POOL_SIZE))
        try:
            size = int(text)
        except ValueError:
            raise InvalidArgument(
                f"PostgreSQL store URL {shown!r}: pool_size must be a whole number, not {text!r}"
            ) from None
    if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= MAX_POOL_SIZE:
        raise InvalidArgument(
            f"PostgreSQL store URL {shown!r}: pool_size must be from 1 to {MAX_POOL_SIZE},"
            f" not {size!r}"
        )
    return Target(
        conninfo=conninfo, shown=redact_conninfo(conninfo), schema=chosen_schema, pool_size=size
    )
