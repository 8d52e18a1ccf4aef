"""The store contract as a test class every store runs (see `StoreContract`).

Every check talks to the store through the `Store` protocol only (``apply``, ``load``,
``events_after``; the fixture closes it with ``aclose``), so the same checks hold the memory
store and a durable or third-party store to the same rules.
"""

from __future__ import annotations

import pytest

from ..store import Store
from ._store_busy import BodyVersionChecks, BusyThreadChecks
from ._store_listing import ListingChecks, TimesChecks
from ._store_runs import CarriedChecks, CreationChecks, FenceChecks, TicketChecks
from ._store_writes import EventChecks, PayloadChecks, ReadChecks


@pytest.mark.trio
class StoreContract(
    CreationChecks,
    FenceChecks,
    TicketChecks,
    CarriedChecks,
    EventChecks,
    PayloadChecks,
    ReadChecks,
    BusyThreadChecks,
    BodyVersionChecks,
    TimesChecks,
    ListingChecks,
):
    """The rules every `Store` enforces, as tests. Subclass it and override ``store``.

    The subclass's ``store`` fixture gives each test a new, empty store and closes it
    afterwards (a sync fixture, an async one or an async generator all work)::

        class TestMyStore(StoreContract):
            @pytest.fixture
            async def store(self) -> AsyncIterator[Store]:
                store = MyStore(...)
                yield store
                await store.aclose()

    The class is marked ``trio``, so pytest-trio runs its tests with or without
    ``trio_mode``. Every check goes through ``apply``, ``load`` and ``events_after``.

    What a store must do, inside the one transaction that applies a batch (commits in
    order, each accepted or rejected on its own; a rejected commit changes nothing, and a
    later commit of the batch sees what an earlier one did):

    * Creation: ``Expect(new=True)`` with a `NewRun` creates the run with ``steps=0`` and
      the commit's state and generation; it is rejected ``EXISTS`` if the id is taken. A
      commit for a run the store does not hold, or ``Expect(new=True)`` without a
      `NewRun`, is rejected ``UNKNOWN`` with no state.
    * Terminal fence: once a run is ``Ended`` every later commit for it, a creation
      included, is rejected ``ENDED`` with the ended state.
    * Expectation fence: a commit is rejected ``STALE`` (with the committed state) when
      the committed generation, the kind of state, or the live ticket's correlation id is
      not the one its `Expect` names; a correlation id with no live ticket is stale too.
    * Ticket slot: the ticket lives inside the ``Awaiting`` state, so every later commit
      replaces or deletes it and an answer to an old ticket is stale.
    * Carried messages: an ``Awaiting`` commit keeps its ``carried_messages`` for the next
      attempt; a ``Queued`` commit keeps them, and keeps its ``resume_value`` for the
      queued attempt.
    * ``take_messages``: the commit (an attempt start) hands the carried messages over in
      ``Accepted.taken_messages`` (then spent: a second take finds none), and the resume
      the run holds in ``Accepted.resume_value`` and ``Accepted.resume_ticket``.
    * Resume: a ``Queued`` or ``Running`` commit with a ``resume_value`` or
      ``resume_ticket`` (an answered ticket: a queued resume, or the attempt it starts)
      replaces the run's resume; other commits keep it while the run is queued or
      running, so every attempt that starts before the run next awaits is handed the
      same answer; an ``Awaiting`` or ``Ended`` commit deletes it.
    * Discarded messages event: a terminal commit throws away the carried messages and its
      own ``discarded_messages`` and writes one ``messages_discarded`` event whose detail
      is ``{"messages": [carried..., discarded...]}``, right before its own event; with
      nothing to throw away it writes none.
    * Events: a commit's `EventDraft` events come first, then the discard event, then its
      own ``committed`` event with its ``detail``; each carries the run's thread, the
      committed generation and state, and the commit's ``at``.
    * ``announce=False``: the state commit happens but the commit's own ``committed``
      event is not written; only the drafted events are (none when there are none).
    * One store-wide ``seq``, strictly increasing across all runs: a new store numbers its
      events 1, 2, 3, ... (no gaps while nothing fails). ``events_after(seq, run_id,
      limit)`` returns the events after ``seq``, oldest first, at most ``limit``, of one
      run when ``run_id`` is given.
    * Checkpoint: `UNSET` keeps the committed one (None before any), any other value,
      None included, replaces it. The result is stored only by an ``Ended`` commit.
    * ``steps``: None keeps the committed count, a number (0 included) replaces it.
    * ``max_steps``: taken from the `NewRun` and kept on the record by every commit.
    * Rejected reasons are `RejectReason` members (not bare strings that happen to
      compare equal).
    * Frozen payloads out: every payload the store hands back (record input, result and
      checkpoint, event details, ticket payloads, taken messages, resume values) is
      frozen (`awaken_trio.FrozenDict` / `awaken_trio.FrozenList`), so changing it raises
      ``TypeError`` and never changes what a later ``load`` returns.
    """

    @pytest.fixture
    def store(self) -> Store:
        """The store under test: a new, empty one for each test. Subclasses override it."""
        raise NotImplementedError(
            f"{type(self).__name__} must override the `store` fixture to give each test"
            " a new, empty store (see awaken_trio.testing.StoreContract)"
        )
