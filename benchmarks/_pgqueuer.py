"""pgqueuer's consumers as the benchmarks drain its jobs (``bench_postgres.py``'s drain and
``bench_instructions.py --drain``). Light on purpose: a process that counts pgqueuer's
work imports this alone, not the runtime, whose objects would make its garbage
collections walk more."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

ENQUEUED_AT_ONCE = 500
"""The jobs a statement enqueues."""


async def enqueue_jobs(queries: Any, n: int) -> None:
    """Enqueue ``n`` jobs named "job" through pgqueuer's ``queries``, `ENQUEUED_AT_ONCE` a
    statement."""
    for i in range(0, n, ENQUEUED_AT_ONCE):
        size = min(ENQUEUED_AT_ONCE, n - i)
        await queries.enqueue(["job"] * size, [b"x"] * size, [0] * size)


async def pgqueuer_consumers(
    url: str, consumers: int, n: int, at_last: Callable[[], T]
) -> tuple[list[Any], list[Any], asyncio.Future[T]]:
    """``consumers`` pgqueuer queue managers, on a connection each (returned too, to
    close), whose handler of the jobs named "job" counts them done, and a future set to
    what ``at_last()`` returns when the ``n``-th is (in its handler). Not yet running:
    ``run`` each."""
    psycopg: Any = importlib.import_module("psycopg")
    pgqueuer: Any = importlib.import_module("pgqueuer")
    done = 0
    finished: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    connections = [
        await psycopg.AsyncConnection.connect(url, autocommit=True) for _ in range(consumers)
    ]
    managers = []
    for connection in connections:
        manager = pgqueuer.QueueManager(pgqueuer.Queries(pgqueuer.PsycopgDriver(connection)))

        @manager.entrypoint("job")  # type: ignore[untyped-decorator]
        async def job(_: object) -> None:
            nonlocal done
            done += 1
            if done == n:
                finished.set_result(at_last())

        managers.append(manager)
    return managers, connections, finished
