"""The durable store contract: the rules a store shared by several runtimes enforces (claims
with leases and epochs, fences, the thread guard, recovery, stored commands, runnable runs,
versions), as a test class (see `DurableStoreContract`).

Every check talks to the store through the `DurableStore` protocol only.
"""

from __future__ import annotations

import pytest
import trio

from ..store import DurableStore
from ._checks import Elapse
from ._durable_claims import ClaimChecks, RecoveryChecks, ThreadGuardChecks
from ._durable_work import CommandChecks, ElsewhereChecks, RunnableChecks
from ._store_busy import SupersedeClaimChecks
from ._store_contract import StoreContract
from ._store_listing import WorkerOfRunChecks
from ._workers_contract import WorkerChecks


@pytest.mark.trio
class DurableStoreContract(
    ClaimChecks,
    ThreadGuardChecks,
    RecoveryChecks,
    RunnableChecks,
    CommandChecks,
    ElsewhereChecks,
    SupersedeClaimChecks,
    WorkerOfRunChecks,
    WorkerChecks,
    StoreContract,
):
    """The rules every `DurableStore` enforces, on top of `StoreContract`'s. Subclass it
    and override ``store`` (a new, empty durable store per test), and ``peer`` if the store
    can be opened twice::

        class TestMyDurableStore(DurableStoreContract):
            @pytest.fixture
            async def store(self, tmp_path) -> AsyncIterator[DurableStore]:
                async with MyStore(tmp_path / "runs") as store:
                    yield store

            @pytest.fixture
            async def peer(self, tmp_path, store) -> AsyncIterator[DurableStore]:
                async with MyStore(tmp_path / "runs") as peer:  # the same truth
                    yield peer

    What a durable store must do, inside the transaction of each call:

    * Lease times are the store's: it reads its own clock inside each transaction, and
      the runtime passes only lease durations (`Claim.lease`, ``renew``, ``recover``);
      a commit's ``at`` dates its events and decides nothing about leases.
    * Claims: a commit with a `Claim` takes the run's next epoch (``Accepted.epoch``);
      epochs strictly increase per run, across releases; a claim is refused ``FENCED``
      while another owner's claim on the run is live, and granted once it expired or was
      released.
    * Fences: a commit with a `Fence` lands only while the root run's claim is that
      owner's, at that epoch, with its lease unexpired; else ``FENCED``, nothing changed.
      A child run lives on its root's claim.
    * ``renew`` extends the owner's claims that are still current and reports the rest
      (superseded, other owner, expired, released, unknown) as lost; ``release`` drops
      only the owner's claim, and leaves a run still ``Running`` for ``recover``; a commit
      with ``release`` drops the claim.
    * Thread guard: a commit with ``thread_guard`` is refused ``THREAD_BUSY`` while
      another run's attempt on the thread is live (its attempt epoch is its root's current
      claim, with the lease unexpired); a run never blocks itself.
    * ``recover``: see `DurableStore.recover`, branch by branch; the runs lost longest ago
      (earliest lease expiry) are dealt with first, and a run left for a runtime that has
      its body does not count toward ``limit``.
    * ``runnable``: queued named root runs with no live claim and a free thread, oldest
      first, then due scheduled ones, soonest first, at most ``limit``.
    * Stored commands: ``post_command`` only for a ``Running`` or ``Queued`` run, ids
      increasing; ``commands`` by run and cursor; an attempt's start (``take_messages``)
      on an existing run hands them all over in ``Accepted.commands``, as ``commands``
      reads them, or leaves it None; ``consumed`` deletes them with the commit; a terminal
      end discards the stored messages (after carried and the commit's own) and drops the
      other commands.
    * ``end_descendants``: the run's unended tree is ended ``Cancelled`` (source parent),
      deepest first, before the run's own commit.
    * ``states`` reads committed states; ``version`` moves when another runtime writes.
    """

    @pytest.fixture
    def elapse(self) -> Elapse:
        """Let that many seconds pass on the store's lease clock. The default waits with
        `trio.sleep`: right for a store on Trio's clock under pytest-trio's
        ``autojump_clock`` (no real waiting), and for a store on real time (then each
        lapse the suite needs waits about two seconds). A store whose clock a test can set
        overrides this to advance it."""
        return trio.sleep

    @pytest.fixture
    def peer(self, store: DurableStore) -> DurableStore:
        """A second handle on the same committed truth as ``store``, as another runtime
        sees it: another connection to the same file or database. An in-process store
        shared by its runtimes is its own peer (the default)."""
        return store

    # ------------------------------------------------------------ identity

    async def test_a_durable_store_says_so(self, store: DurableStore) -> None:
        assert store.durable is True
        assert isinstance(store, DurableStore)
