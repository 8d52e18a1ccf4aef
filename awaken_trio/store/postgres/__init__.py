"""The PostgreSQL store: runs shared by worker processes on many machines (the
``postgres`` extra). Imported on the first ``postgresql://`` URL."""

from ._store import PostgresStore as PostgresStore

__all__ = ["PostgresStore"]
