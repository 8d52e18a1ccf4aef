"""Opening a store from a URL. Backends are imported on first use of their scheme, so an
application that never names ``sqlite://`` or ``postgresql://`` never imports them."""

from __future__ import annotations

import os
from typing import Literal
from urllib.parse import parse_qsl, unquote

from .._core import InvalidArgument, Store, safe_repr
from .._redact import redact_url
from .memory import MemoryStore

_SQLITE = "sqlite:///"
_SQLITE_FORMS = (
    "'sqlite:///relative/path.db' or 'sqlite:////absolute/path.db',"
    " optionally with '?synchronous=normal' or '?synchronous=full'"
)


def _shown(url: str) -> str:
    return repr(redact_url(url))


def open_store(url: str | os.PathLike[str]) -> Store:
    """The store a URL (or the path of an SQLite file) names, not opened yet.

    * ``memory://``: a `MemoryStore` of this process.
    * ``sqlite:///relative/path.db`` (relative to the working directory) or
      ``sqlite:////absolute/path.db``, with ``?synchronous=normal`` to trade durability for
      speed (``full``, the default, has every commit on disk when it returns): an SQLite
      store. It opens, creating the file and its parent directory if need be, on
      ``await store.open()`` or its first use, and is closed with ``await store.aclose()``.
    * a `pathlib.Path` (any ``os.PathLike``): the SQLite store of that file.
    * ``postgresql://user:password@host:port/database`` (or ``postgres://``), libpq's
      options (``?sslmode=require`` ...) passed through, ``?schema=`` (default ``awaken``)
      and ``?pool_size=`` (default 4) the store's own: a PostgreSQL store (the
      ``postgres`` extra: from a checkout, ``pip install -e '.[postgres]'``), opened
      likewise.

    Raises:
        InvalidArgument: the URL names no store this version knows, or is malformed.
    """
    if isinstance(url, os.PathLike):
        from .sqlite import SQLiteStore

        return SQLiteStore(url)
    if not isinstance(url, str):
        raise InvalidArgument(f"a store URL must be a str, not {redact_url(safe_repr(url))}")
    if url in ("memory://", "memory:"):
        return MemoryStore()
    if url.startswith("sqlite:"):
        path, synchronous = _sqlite_url(url)
        from .sqlite import SQLiteStore  # the first sqlite:// URL imports the backend

        return SQLiteStore(path, synchronous=synchronous)
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from .postgres import PostgresStore  # the first postgresql:// URL imports it
        except ImportError as exc:
            raise InvalidArgument(
                f"the PostgreSQL store {_shown(url)} needs psycopg 3 and psycopg_pool"
                f" ({exc.name or exc} is missing; from a checkout of awaken_trio:"
                " pip install -e '.[postgres]')"
            ) from None
        return PostgresStore(url)
    hint = ""
    if "://" not in url and url:
        # A bare file name: say how to name a file.
        hint = f" (for an SQLite file, pass 'sqlite:///{url}' or pathlib.Path({url!r}))"
    raise InvalidArgument(
        f"unsupported store URL {_shown(url)}{hint}; this version supports 'memory://',"
        f" {_SQLITE_FORMS}, the path of an SQLite file,"
        " 'postgresql://user:password@host:port/database', or a Store instance"
    )


def _sqlite_url(url: str) -> tuple[str, Literal["full", "normal"]]:
    """The file path and ``synchronous`` setting of a ``sqlite:`` URL."""
    if not url.startswith(_SQLITE):
        raise InvalidArgument(
            f"malformed SQLite store URL {_shown(url)}: an SQLite URL names a file on this machine"
            f" and has no host; use {_SQLITE_FORMS}"
        )
    rest = url[len(_SQLITE) :]
    if "#" in rest:
        raise InvalidArgument(f"malformed SQLite store URL {_shown(url)}: it has a fragment ('#')")
    raw_path, _, query = rest.partition("?")
    try:
        path = unquote(raw_path, errors="strict")
    except UnicodeDecodeError:
        raise InvalidArgument(
            f"malformed SQLite store URL {_shown(url)}: its path is not percent-encoded UTF-8"
        ) from None
    if not path or path == "/" or path.endswith("/"):
        raise InvalidArgument(
            f"malformed SQLite store URL {_shown(url)}: it names no file; use {_SQLITE_FORMS}"
        )
    synchronous: Literal["full", "normal"] = "full"
    if query:
        try:
            options = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
        except ValueError:
            raise InvalidArgument(
                f"malformed SQLite store URL {_shown(url)}: its query is not 'name=value' pairs"
            ) from None
        for name, value in options:
            if name != "synchronous":
                raise InvalidArgument(
                    f"SQLite store URL {_shown(url)} has the unknown option {name!r};"
                    " the only option is 'synchronous' ('full' or 'normal')"
                )
            if value.lower() == "full":
                synchronous = "full"
            elif value.lower() == "normal":
                synchronous = "normal"
            else:
                raise InvalidArgument(
                    f"SQLite store URL {_shown(url)}: synchronous must be 'full' or 'normal',"
                    f" not {value!r}"
                )
        if len(options) > 1:
            raise InvalidArgument(
                f"SQLite store URL {_shown(url)} gives 'synchronous' more than once"
            )
    return path, synchronous
