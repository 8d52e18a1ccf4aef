"""The SQLite store: the embedded default, one file shared by every process on a machine.
Imported on the first ``sqlite://`` URL."""

from ._store import SQLiteStore as SQLiteStore

__all__ = ["SQLiteStore"]
