"""The calls an operator makes of a runtime: how many runs are in each state and ended with
each cause, the bodies it serves with their versions, and the workers serving the store
(DESIGN §3.11). `Runtime` inherits them; each reads the runtime's kernel or makes one call
to its `Control`."""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import attrs

from ._commits import CommitStatistics
from ._state import RunCounts
from ._storage import WorkerRecord
from ._validate import check_id

if TYPE_CHECKING:
    from ._control import Control
    from ._kernel import Kernel


@final
@attrs.frozen
class RuntimeStatistics:
    """A snapshot of the runtime's process-local bookkeeping."""

    active_attempts: int
    queued_runs: int
    busy_threads: int
    awaiting_bodies: int
    supervisor: CommitStatistics


class OperatorCalls:
    """`Runtime`'s operator calls (see the module docstring)."""

    if TYPE_CHECKING:
        _control: Control
        _kernel: Kernel

        def _in_own_run(self) -> None: ...

    async def count_runs(self) -> RunCounts:
        """How many runs the store holds in each state, and how many of the ended ones
        ended with each cause (read from indexes on SQLite and PostgreSQL).

        Raises:
            InvalidArgument: the store cannot count its runs (it has no ``count_runs``;
                see `awaken_trio.store.CountingStore`).
        """
        self._in_own_run()
        return await self._control.count_runs()

    def statistics(self) -> RuntimeStatistics:
        """Counts of what this runtime holds right now (attempts, queued runs, busy threads, the
        supervisor's mailbox); sync, for monitoring.
        """
        kernel = self._kernel
        return RuntimeStatistics(
            active_attempts=len(kernel.registry),
            queued_runs=len(kernel.queued),
            busy_threads=len(kernel.gate),
            awaiting_bodies=len(kernel.awaiting_bodies),
            supervisor=kernel.mailbox.statistics(),
        )

    def body_versions(self) -> dict[str, str | None]:
        """The names bodies are registered under here, each with its version (None for
        an unversioned body): what a worker serves."""
        kernel = self._kernel
        return {name: kernel.versions_of(name).version for name in kernel.named}

    @property
    def worker_id(self) -> str | None:
        """The id this runtime claims runs under on a durable store, and its worker row's
        while it serves (`WorkerRecord.worker_id`, `RunRecord.worker_id`); None on a store
        without claims."""
        settings = self._kernel.claims.settings
        return None if settings is None else settings.owner

    async def list_workers(self, *, ended: bool = False) -> list[WorkerRecord]:
        """The runtimes that serve this store (DESIGN §3.11), the most recently started
        first: serving, draining or lost (not seen for 3 of its leases, by the store's
        clock); with ``ended``, those stopped in the last day too."""
        self._in_own_run()
        return await self._control.list_workers(ended=ended)

    async def drain_worker(self, worker_id: str) -> WorkerRecord:
        """Ask a worker, in any process, to claim nothing new (within a few ``poll``
        intervals), let its active runs finish, then stop serving (its ``serve()``
        returns). Its record after the request: ``draining``; a worker already stopped or
        lost is left as it is (its record says so).

        Raises:
            UnknownWorker: the store holds no worker with that id.
        """
        self._in_own_run()
        check_id(worker_id, "worker_id")
        return await self._control.drain_worker(worker_id)
