"""The memory store: every run in this process, pure Trio (no threads), so autojump-clock
tests run against it."""

from ._store import MemoryStore as MemoryStore

__all__ = ["MemoryStore"]
