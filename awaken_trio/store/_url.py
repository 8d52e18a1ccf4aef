"""Opening a store from a URL. Backends are imported on first use of their scheme, so an
application that never names ``sqlite://`` or ``postgresql://`` never imports them."""

from __future__ import annotations

from typing import Literal
from urllib.parse import parse_qsl, unquote

from .._core._errors import InvalidArgument
from .._core._storage import Store
from ._memory import MemoryStore

_SQLITE = "sqlite:///"
_SQLITE_FORMS = (
    "'sqlite:///relative/path.db' or 'sqlite:////absolute/path.db',"
    " optionally with '?synchronous=normal' or '?synchronous=full'"
)


def open_store(url: str) -> Store:
    """The store a URL names, not opened yet.

    * ``memory://``: a `MemoryStore` of this process.
    * ``sqlite:///relative/path.db`` (relative to the working directory) or
      ``sqlite:////absolute/path.db``, with ``?synchronous=normal`` to trade durability for
      speed (``full``, the default, has every commit on disk when it returns): an SQLite
      store. It opens, creating the file and its parent directory if need be, on
      ``await store.open()`` or its first use, and is closed with ``await store.aclose()``.

    Raises:
        InvalidArgument: the URL names no store this version knows, or is malformed.
    """
    if not isinstance(url, str):
        raise InvalidArgument(f"a store URL must be a str, not {url!r}")
    if url in ("memory://", "memory:"):
        return MemoryStore()
    if url.startswith("sqlite:"):
        path, synchronous = _sqlite_url(url)
        from ._sqlite import SQLiteStore  # the first sqlite:// URL imports the backend

        return SQLiteStore(path, synchronous=synchronous)
    raise InvalidArgument(
        f"unsupported store URL {url!r}; this version supports 'memory://', {_SQLITE_FORMS},"
        " or a Store instance"
    )


def _sqlite_url(url: str) -> tuple[str, Literal["full", "normal"]]:
    """The file path and ``synchronous`` setting of a ``sqlite:`` URL."""
    if not url.startswith(_SQLITE):
        raise InvalidArgument(
            f"malformed SQLite store URL {url!r}: an SQLite URL names a file on this machine"
            f" and has no host; use {_SQLITE_FORMS}"
        )
    rest = url[len(_SQLITE) :]
    if "#" in rest:
        raise InvalidArgument(f"malformed SQLite store URL {url!r}: it has a fragment ('#')")
    raw_path, _, query = rest.partition("?")
    try:
        path = unquote(raw_path, errors="strict")
    except UnicodeDecodeError:
        raise InvalidArgument(
            f"malformed SQLite store URL {url!r}: its path is not percent-encoded UTF-8"
        ) from None
    if not path or path == "/" or path.endswith("/"):
        raise InvalidArgument(
            f"malformed SQLite store URL {url!r}: it names no file; use {_SQLITE_FORMS}"
        )
    synchronous: Literal["full", "normal"] = "full"
    if query:
        try:
            options = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
        except ValueError:
            raise InvalidArgument(
                f"malformed SQLite store URL {url!r}: its query is not 'name=value' pairs"
            ) from None
        for name, value in options:
            if name != "synchronous":
                raise InvalidArgument(
                    f"SQLite store URL {url!r} has the unknown option {name!r};"
                    " the only option is 'synchronous' ('full' or 'normal')"
                )
            if value.lower() == "full":
                synchronous = "full"
            elif value.lower() == "normal":
                synchronous = "normal"
            else:
                raise InvalidArgument(
                    f"SQLite store URL {url!r}: synchronous must be 'full' or 'normal',"
                    f" not {value!r}"
                )
        if len(options) > 1:
            raise InvalidArgument(f"SQLite store URL {url!r} gives 'synchronous' more than once")
    return path, synchronous
