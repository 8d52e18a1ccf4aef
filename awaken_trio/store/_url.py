"""Opening a store from a URL. Backends are imported on first use of their scheme, so an
application that never names ``sqlite://`` or ``postgresql://`` never imports them."""

from __future__ import annotations

from .._core._errors import InvalidArgument
from .._core._storage import Store
from ._memory import MemoryStore


def open_store(url: str) -> Store:
    """The store a URL names: ``memory://`` today.

    Raises:
        InvalidArgument: the URL names no store this version knows.
    """
    if not isinstance(url, str):
        raise InvalidArgument(f"a store URL must be a str, not {url!r}")
    if url in ("memory://", "memory:"):
        return MemoryStore()
    raise InvalidArgument(
        f"unsupported store URL {url!r}; this version supports 'memory://' or a Store instance"
    )
