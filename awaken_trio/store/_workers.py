"""What every store shares of the worker rows (DESIGN §3.11): when a row reads ``lost``,
and a `WorkerRecord` of a row's columns. A row's times are the store's clock, as leases
are, so a worker whose own clock is off is still judged by the store's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._core import LOST_AFTER_LEASES, WorkerRecord, WorkerState
from ._codec import dump_json, load_json

WORKER_COLUMNS = (
    "worker_id, host, pid, state, started_at, last_seen, bodies, concurrency, active, lease"
)
"""The columns `worker_of` reads, in its order (SQLite and PostgreSQL name them alike)."""


def read_state(stored: str, last_seen: float, lease: float, now: float) -> WorkerState:
    """A row's state as a reader sees it at ``now``: ``lost`` once a worker that has not
    stopped was last seen more than `LOST_AFTER_LEASES` of its leases ago."""
    if stored != "stopped" and now - last_seen > LOST_AFTER_LEASES * lease:
        return "lost"
    assert stored in ("serving", "draining", "stopped")
    return stored  # type: ignore[return-value]


def worker_of(found: tuple[Any, ...], now: float) -> WorkerRecord:
    """A `WorkerRecord` of a row read with `WORKER_COLUMNS` (``bodies`` as JSON text)."""
    worker_id, host, pid, stored, started_at, last_seen, bodies, concurrency, active, lease = found
    return WorkerRecord(
        worker_id=worker_id,
        host=host,
        pid=int(pid),
        state=read_state(stored, last_seen, lease, now),
        started_at=started_at,
        last_seen=last_seen,
        bodies=load_json(bodies, "a worker's bodies"),
        concurrency=int(concurrency),
        active=int(active),
    )


def bodies_text(bodies: Mapping[str, str | None]) -> str:
    return dump_json(dict(bodies))
