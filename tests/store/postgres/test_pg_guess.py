"""Commits that create runs in one round trip on the PostgreSQL store (``_guess``): the
round trips counted on the wire, the answers when the guess is wrong (the same as the
two-trip transaction's, checked with guessing turned off too), and writers racing
between the guess and its check. Real time, bounded by ``trio.fail_after``."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack

import attrs
import psycopg
import pytest
import trio

from awaken_trio import EndCause, RunContext, RunState, StoreError, open_runtime
from awaken_trio.store import (
    Accepted,
    Claim,
    Commit,
    CommitResult,
    Expect,
    Fence,
    IfBusy,
    Rejected,
    RejectReason,
)
from awaken_trio.store.postgres import _guess
from awaken_trio.store.postgres import _store as store_module
from awaken_trio.store.postgres._store import PostgresStore
from awaken_trio.store.postgres._tx import PgTx, thread_key, thread_locks
from tests.commits import new_commit
from tests.pg_server import Wire, lock_waiters

LIVE = 3600.0


def _new(
    run_id: str,
    *,
    thread: str | None = None,
    running: bool = False,
    if_busy: IfBusy = "queue",
    parent: str | None = None,
    fence: Fence | None = None,
) -> Commit:
    """A start (``running``: Running with its claim, or under ``fence``, its tree's, as a
    child's is; guarding its thread) or a submit (Queued) of ``run_id``."""
    return new_commit(
        run_id,
        thread_id=thread,
        state=RunState.Running(1) if running else None,
        name="job" if parent is None else None,
        parent=parent,
        root=parent,
        if_busy=if_busy,
        claim=Claim("me", LIVE) if running and fence is None else None,
        fence=fence,
        thread_guard=running,
        take_messages=running,
    )


def _handed_back(run_id: str) -> Commit:
    """A commit on the existing root ``run_id``, its first attempt's, made under its claim
    at epoch 1: back to ``Queued`` (a commit the guess never covers: it reads first)."""
    return Commit(
        run_id=run_id,
        state=RunState.Queued(),
        generation=1,
        expect=Expect(generation=1),
        at=2.0,
        fence=Fence(run_id, "me", 1),
    )


async def _exchanges(relay: Wire, store: PostgresStore, batch: list[Commit]) -> int:
    before = relay.count()
    await store.apply(batch)
    return relay.count() - before


async def test_a_start_and_a_submit_are_one_round_trip(wire: tuple[Wire, str]) -> None:
    relay, url = wire
    with trio.fail_after(60):
        # One connection: every call takes the same one, already open and configured.
        async with PostgresStore(url, pool_size=1) as store:
            for i in range(3):  # (warm: the writers' connections, prepared statements)
                await store.apply([_new(f"warm-{i}", running=True)])
                await store.apply([_new(f"warm-q{i}")])
            assert await _exchanges(relay, store, [_new("started", running=True)]) == 1
            assert await _exchanges(relay, store, [_new("submitted")]) == 1
            # A batch of both, as a runtime's group commit sends them: one still.
            batch = [_new("s2", running=True), _new("q2"), _new("r2", if_busy="reject")]
            assert await _exchanges(relay, store, batch) == 1
            # A child started under its tree's claim: one.
            child = _new("kid", parent="started", fence=Fence("started", "me", 1), running=True)
            assert await _exchanges(relay, store, [child]) == 1
            # A commit on an existing run reads first: two (the count is not a constant).
            end = _handed_back("started")
            assert await _exchanges(relay, store, [end]) == 2
            # A wrong guess: the guessed trip, its rollback, then the two-trip transaction.
            assert await _exchanges(relay, store, [_new("submitted")]) == 4


# ---------------------------------------------------------------------------- wrong guesses


@pytest.fixture(params=["guessed", "guessed, sealed apart", "two trips"])
async def store(
    request: pytest.FixtureRequest, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[PostgresStore]:
    """The store, with guessing on (the check, the writes and the seal in one statement,
    and, as when a transaction writes more, the seal a statement of its own), and turned
    off (every commit reads first): each test below asserts the same answers of all."""
    if request.param == "two trips":
        monkeypatch.setattr(store_module, "guess_of", lambda *batch: None)
    if request.param == "guessed, sealed apart":
        monkeypatch.setattr(PgTx, "_sealed_with_check", lambda self: False)
    async with PostgresStore(pg_url) as opened:
        yield opened


async def _one(store: PostgresStore, commit: Commit) -> CommitResult:
    (result,) = await store.apply([commit])
    return result


async def test_an_existing_run_id_is_refused_exists(store: PostgresStore) -> None:
    with trio.fail_after(30):
        assert isinstance(await _one(store, _new("a")), Accepted)
        again = await _one(store, _new("a", running=True))
        assert again == Rejected(RejectReason.EXISTS, RunState.Queued())
        # A batch with one existing and one new run: only the existing one is refused.
        results = await store.apply([_new("b"), _new("a")])
        assert isinstance(results[0], Accepted)
        assert results[1] == Rejected(RejectReason.EXISTS, RunState.Queued())
        record = await store.load("b")
        assert record is not None
        assert record.state == RunState.Queued()


async def test_a_start_on_a_busy_thread_is_refused_thread_busy(store: PostgresStore) -> None:
    with trio.fail_after(30):
        first = await _one(store, _new("a", thread="t", running=True))
        assert isinstance(first, Accepted)
        assert first.epoch == 1
        second = await _one(store, _new("b", thread="t", running=True))
        assert second == Rejected(RejectReason.THREAD_BUSY, None)
        assert await store.load("b") is None
        # Queued on the busy thread is not guarded: accepted.
        assert isinstance(await _one(store, _new("c", thread="t")), Accepted)


async def test_reject_and_supersede_on_a_busy_thread(store: PostgresStore) -> None:
    with trio.fail_after(30):
        assert isinstance(await _one(store, _new("a", thread="t")), Accepted)
        refused = await _one(store, _new("b", thread="t", if_busy="reject"))
        assert refused == Rejected(RejectReason.BUSY, RunState.Queued(), holder="a")
        taking = await _one(store, _new("c", thread="t", if_busy="supersede", running=True))
        assert isinstance(taking, Accepted)
        assert taking.superseded == ("a",)
        ended = await store.load("a")
        assert ended is not None
        assert isinstance(ended.state, RunState.Ended)
        # Supersede on a free thread (its only run ended) supersedes nothing.
        free = await _one(store, _new("d", thread="u", if_busy="supersede"))
        assert isinstance(free, Accepted)
        assert free.superseded == ()


async def test_an_ended_live_attempt_on_the_thread_is_read_not_guessed(
    store: PostgresStore,
) -> None:
    """A run whose end left its attempt marked live (ended by another runtime) makes the
    guess wrong, though the thread is free to the rules once its claim is dropped."""
    with trio.fail_after(30):
        assert isinstance(await _one(store, _new("a", thread="t", running=True)), Accepted)
        cancel = Commit(
            run_id="a",
            state=RunState.Ended(EndCause.Cancelled()),
            generation=1,
            expect=Expect(generation=1),
            at=2.0,
        )
        assert isinstance(await _one(store, cancel), Accepted)
        # The attempt is still live (its claim holds): busy.
        assert await _one(store, _new("b", thread="t", running=True)) == Rejected(
            RejectReason.THREAD_BUSY, None
        )
        await store.release("me", "a")
        assert isinstance(await _one(store, _new("c", thread="t", running=True)), Accepted)


async def test_a_child_under_its_trees_claim(store: PostgresStore, pg_url: str) -> None:
    """A child started under its tree's claim is guessed to find the claim as its fence
    says; a claim at another epoch, of another owner or whose lease ran out fences it, as
    read first."""
    with trio.fail_after(30):
        assert isinstance(await _one(store, _new("root", running=True)), Accepted)
        child = _new("kid", thread="k", parent="root", fence=Fence("root", "me", 1), running=True)
        started = await _one(store, child)
        assert isinstance(started, Accepted)
        stale = _new("kid2", thread="k2", parent="root", fence=Fence("root", "me", 7))
        assert await _one(store, stale) == Rejected(RejectReason.FENCED, None)
        other = _new("kid3", thread="k3", parent="root", fence=Fence("root", "you", 1))
        assert await _one(store, other) == Rejected(RejectReason.FENCED, None)
        late = _new("kid4", thread="k4", parent="root", fence=Fence("root", "me", 1))
        assert await _one_at(pg_url, late, 2 * LIVE) == Rejected(RejectReason.FENCED, None)
        # Its thread is now busy with the child's attempt: a second child there is refused.
        again = _new("kid5", thread="k", parent="root", fence=Fence("root", "me", 1), running=True)
        assert await _one(store, again) == Rejected(RejectReason.THREAD_BUSY, None)
        assert await store.load("kid2") is None


def test_what_is_not_guessed() -> None:
    """A supersede from a child (its ancestors are read), one claim at two epochs, and a
    claim the batch creates go the two-trip way."""
    supersede = _new("s", parent="root", if_busy="supersede", fence=Fence("root", "me", 1))
    assert _guess.guess_of([supersede]) is None
    one = _new("a", parent="root", fence=Fence("root", "me", 1))
    two = _new("b", parent="root", fence=Fence("root", "me", 2))
    assert _guess.guess_of([one, two]) is None
    assert _guess.guess_of([_new("root", running=True), one]) is None
    guess = _guess.guess_of([one, _new("c", parent="root", fence=Fence("root", "me", 1))])
    assert guess is not None
    assert guess.held == (Fence("root", "me", 1),)


def test_the_check_and_the_seal_are_composed_from_the_two_statements() -> None:
    """``seal_guessed`` is the check's statement then the seal's, the events numbered
    after both inserts; texts it cannot compose fail at import, not at a commit."""
    from awaken_trio.store.postgres import _queries

    composed = _queries._TEXTS["seal_guessed"]
    assert composed.startswith(_queries._TEXTS["insert_guessed"].split("\nSELECT (SELECT ok")[0])
    assert composed.index("inserted AS (") < composed.index("e AS (")
    assert (
        "WHERE (SELECT count(*) FROM inserted) + (SELECT count(*) FROM claimed) >= 0"
        in (composed[composed.index("e AS (") :])
    )
    with pytest.raises(ImportError, match="cannot be sent as one statement"):
        _queries.seal_guessed("WITH g AS (SELECT 1)\nSELECT 1", _queries._TEXTS["seal"])


# ---------------------------------------------------------------------------- races


@pytest.fixture
async def stores(pg_url: str) -> AsyncIterator[list[PostgresStore]]:
    async with AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(PostgresStore(pg_url, pool_size=1)) for _ in range(4)
        ]


async def _apply_all(stores: list[PostgresStore], commits: list[Commit]) -> list[CommitResult]:
    results: list[CommitResult] = [Rejected(RejectReason.UNKNOWN, None)] * len(commits)

    async def one(i: int) -> None:
        (results[i],) = await stores[i].apply([commits[i]])

    async with trio.open_nursery() as nursery:
        for i in range(len(commits)):
            nursery.start_soon(one, i)
    return results


def _hold_thread(pg_url: str, thread_id: str) -> psycopg.Connection[tuple[object, ...]]:
    """A connection whose open transaction holds ``thread_id``'s lock, as a writer on that
    thread holds it until it commits."""
    conn = psycopg.connect(pg_url)
    conn.execute(
        "SELECT pg_advisory_xact_lock(%s, %s)", (thread_locks("awaken"), thread_key(thread_id))
    )
    return conn


async def test_writers_let_in_between_the_guess_and_its_check(
    pg_url: str, stores: list[PostgresStore]
) -> None:
    """Every writer's guess is sent while another transaction holds the thread's lock;
    once it lets go, one start takes the thread and every other one finds it busy."""
    with trio.fail_after(60):
        holder = await trio.to_thread.run_sync(_hold_thread, pg_url, "t")
        commits = [_new(f"r{i}", thread="t", running=True) for i in range(len(stores))]
        results: list[CommitResult] = []

        async def race() -> None:
            results.extend(await _apply_all(stores, commits))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(race)
            while await trio.to_thread.run_sync(lock_waiters, pg_url) < len(stores):  # noqa: ASYNC110 - a server's state
                await trio.sleep(0.01)
            await trio.to_thread.run_sync(holder.commit)
        holder.close()
        accepted = [r for r in results if isinstance(r, Accepted)]
        assert len(accepted) == 1
        assert [r for r in results if not isinstance(r, Accepted)] == [
            Rejected(RejectReason.THREAD_BUSY, None)
        ] * (len(stores) - 1)


async def test_writers_racing_to_create_one_run_id(stores: list[PostgresStore]) -> None:
    """One creates it; every other finds it there (its insert waits on the key, fails,
    and the run is read): no error, as the two-trip transaction answers."""
    with trio.fail_after(60):
        for round_ in range(5):
            run_id = f"same-{round_}"
            results = await _apply_all(stores, [_new(run_id)] * len(stores))
            assert sum(isinstance(r, Accepted) for r in results) == 1
            assert [r for r in results if not isinstance(r, Accepted)] == [
                Rejected(RejectReason.EXISTS, RunState.Queued())
            ] * (len(stores) - 1)


async def test_the_check_comes_before_every_write(pg_url: str, stores: list[PostgresStore]) -> None:
    """A guessed start waiting on its thread's lock (taken by the check) has written
    nothing yet (its transaction has no id, which the first write would give it) and taken
    no seq (it holds no ticket, which is taken just before each seq)."""
    with trio.fail_after(60):

        def waiting_ids() -> list[tuple[object, ...]]:
            with psycopg.connect(pg_url, autocommit=True) as conn:
                found = conn.execute(
                    "SELECT a.backend_xid, (SELECT count(*) FROM pg_locks l WHERE l.pid = a.pid"
                    "   AND l.locktype = 'advisory' AND l.mode = 'ShareLock' AND l.granted)"
                    " FROM pg_stat_activity a"
                    " WHERE a.wait_event_type = 'Lock' AND a.datname = current_database()"
                ).fetchall()
                return [tuple(row) for row in found]

        holder = await trio.to_thread.run_sync(_hold_thread, pg_url, "t")
        results: list[CommitResult] = []

        async def start() -> None:
            results.extend(await stores[0].apply([_new("r", thread="t", running=True)]))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(start)
            while not (waiting := await trio.to_thread.run_sync(waiting_ids)):  # noqa: ASYNC110 - a server's state
                await trio.sleep(0.01)
            assert waiting == [(None, 0)]
            await trio.to_thread.run_sync(holder.commit)
        holder.close()
        assert [type(r) for r in results] == [Accepted]


@pytest.mark.parametrize("apart", [False, True], ids=["sealed with the check", "sealed apart"])
@pytest.mark.parametrize("table", ["claims", "events"])
async def test_a_store_error_mid_pipeline_writes_nothing(
    pg_url: str, table: str, apart: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server refuses a guessed start's claim (in the statement with the check) or its
    events (in the same statement, or in the seal after it when that is one of its own):
    the start is refused with a store error, nothing of it is written, and the next start
    on the same connection lands."""
    if apart:
        monkeypatch.setattr(PgTx, "_sealed_with_check", lambda self: False)
    with trio.fail_after(30):
        async with PostgresStore(pg_url, pool_size=1) as store:
            await store.apply([_new("warm", running=True)])

            def refuse() -> None:
                with psycopg.connect(pg_url, autocommit=True) as conn:
                    conn.execute(
                        "CREATE FUNCTION awaken.refuse() RETURNS trigger LANGUAGE plpgsql AS $$"
                        " BEGIN IF NEW.run_id = 'bad' THEN RAISE EXCEPTION 'refused here';"
                        " END IF; RETURN NEW; END $$"
                    )
                    conn.execute(
                        f"CREATE TRIGGER refuse BEFORE INSERT ON awaken.{table}"
                        " FOR EACH ROW EXECUTE FUNCTION awaken.refuse()"
                    )

            await trio.to_thread.run_sync(refuse)
            before = await store.events_after(0)
            with pytest.raises(StoreError, match="refused here") as raised:
                await store.apply([_new("bad", running=True)])
            assert raised.value.outcome_unknown is False
            assert await store.load("bad") is None
            assert await store.events_after(0) == before

            def claims() -> list[tuple[object, ...]]:
                with psycopg.connect(pg_url, autocommit=True) as conn:
                    return conn.execute("SELECT run_id FROM awaken.claims ORDER BY 1").fetchall()

            assert await trio.to_thread.run_sync(claims) == [("warm",)]
            [result] = await store.apply([_new("good", running=True)])
            assert isinstance(result, Accepted)
            assert [e.run_id for e in await store.events_after(0)][len(before) :] == ["good"]


async def test_a_store_of_the_version_before_opens_and_guesses(pg_url: str) -> None:
    """A store of the version before the check's statement (schema version 15, with a run
    in it) opens, keeps its run, and starts runs in one guessed transaction: one on the
    existing run's id is refused ``EXISTS``."""
    from awaken_trio.store.postgres._schema import LATEST

    with trio.fail_after(30):
        async with PostgresStore(pg_url) as first:
            assert isinstance(await _one(first, _new("old", running=True)), Accepted)

        def back_to_v15() -> None:  # (versions 16 and 17 only added the checks' functions)
            with psycopg.connect(pg_url, autocommit=True) as conn:
                conn.execute("DROP FUNCTION awaken.guessed")
                conn.execute("DROP FUNCTION awaken.missed")
                conn.execute("UPDATE awaken.meta SET value = '15' WHERE key = 'version'")

        await trio.to_thread.run_sync(back_to_v15)
        async with PostgresStore(pg_url) as store:
            record = await store.load("old")
            assert record is not None
            assert record.state == RunState.Running(1)
            assert await _one(store, _new("old")) == Rejected(RejectReason.EXISTS, record.state)
            assert isinstance(await _one(store, _new("new", running=True)), Accepted)

    def version() -> object:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            found = conn.execute("SELECT value FROM awaken.meta WHERE key = 'version'").fetchone()
            assert found is not None
            return found[0]

    assert await trio.to_thread.run_sync(version) == str(LATEST)


# ---------------------------------------------------------------------------- the clock


async def test_a_guessed_claims_lease_is_measured_by_the_servers_clock(pg_url: str) -> None:
    with trio.fail_after(30):
        async with PostgresStore(pg_url, lease_offset=lambda: 1000.0) as store:
            await store.apply([_new("a", running=True)])

        def read() -> tuple[float, float]:
            with psycopg.connect(pg_url) as conn:
                found = conn.execute(
                    "SELECT lease_until, extract(epoch FROM clock_timestamp())::float8"
                    " FROM awaken.claims WHERE run_id = 'a'"
                ).fetchone()
                assert found is not None
                return float(found[0]), float(found[1])

        lease_until, server_now = await trio.to_thread.run_sync(read)
        assert server_now + 1000.0 + LIVE - 30 < lease_until <= server_now + 1000.0 + LIVE
        # A fixed clock: the lease ends where it says.
        async with PostgresStore(pg_url, lease_clock=lambda: 50.0) as fixed:
            await fixed.apply([_new("b", running=True)])
            record = await fixed.load("b")
            assert record is not None
        with psycopg.connect(pg_url) as conn:
            found = conn.execute("SELECT lease_until FROM awaken.claims WHERE run_id = 'b'")
            assert found.fetchone() == (50.0 + LIVE,)
        # A lease without end (not a JSON number) is written as one.
        async with PostgresStore(pg_url) as store:
            endless = attrs.evolve(_new("c", running=True), claim=Claim("me", math.inf))
            assert isinstance(await _one(store, endless), Accepted)
        with psycopg.connect(pg_url) as conn:
            found = conn.execute("SELECT lease_until FROM awaken.claims WHERE run_id = 'c'")
            assert found.fetchone() == (math.inf,)


# ---------------------------------------------------------------------------- the runtime


async def _parked(ctx: RunContext) -> object:
    await trio.sleep_forever()
    return None  # pragma: no cover


async def test_an_awaited_start_and_submit_are_written_on_a_guess(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    guessed: list[tuple[str, ...]] = []
    read_first: list[str] = []
    begin, begin_guessed = PgTx.begin, PgTx.begin_guessed

    def spy_begin(self: PgTx, batch: tuple[Commit, ...] = ()) -> float:
        read_first.extend(commit.run_id for commit in batch)
        return begin(self, batch)

    def spy_guessed(self: PgTx, guess: _guess.Guess) -> float:
        guessed.append(guess.absent)
        return begin_guessed(self, guess)

    monkeypatch.setattr(PgTx, "begin", spy_begin)
    monkeypatch.setattr(PgTx, "begin_guessed", spy_guessed)
    with trio.fail_after(30):
        async with open_runtime(pg_url) as runtime:
            handle = await runtime.start(_parked, run_id="started")
            submitted = await runtime.submit("elsewhere", run_id="queued")
            assert handle.run_id in {run_id for batch in guessed for run_id in batch}
            assert submitted.run_id in {run_id for batch in guessed for run_id in batch}
            assert "started" not in read_first
            assert "queued" not in read_first
            await runtime.cancel_run("started")


async def test_a_guess_that_does_not_fit_the_batch_gives_way(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guessed where it should not be (every run taken to be new, no thread read): a rule
    that reads what the guess does not hold gives the guess up before anything is sent,
    and a run that exists fails the server's check; both batches land as read first."""

    def everything(batch: Sequence[Commit], known: object) -> _guess.Guess:
        return _guess.Guess(tuple(commit.run_id for commit in batch), (), ())

    with trio.fail_after(30):
        async with PostgresStore(pg_url) as store:
            assert isinstance(await _one(store, _new("root", running=True)), Accepted)
            monkeypatch.setattr(store_module, "guess_of", everything)
            # A child under the root's claim: its fence reads the claim (not guessed).
            child = _new("kid", thread="k", parent="root", fence=Fence("root", "me", 1))
            assert isinstance(await _one(store, child), Accepted)
            stale = _new("kid2", thread="k", parent="root", fence=Fence("root", "me", 7))
            assert await _one(store, stale) == Rejected(RejectReason.FENCED, None)
            # A commit on the existing root: the check finds the run.
            queued = _handed_back("root")
            assert isinstance(await _one(store, queued), Accepted)
            record = await store.load("root")
            assert record is not None
            assert record.state == RunState.Queued()
        # The rules compare a claim it read with the transaction's clock: a lease that has
        # run out (the server's clock moved past it) fences the child, as read first.
        assert isinstance(await _one_at(pg_url, _new("r2", running=True), 0.0), Accepted)
        late = _new("kid3", thread="k3", parent="r2", fence=Fence("r2", "me", 1))
        assert await _one_at(pg_url, late, 2 * LIVE) == Rejected(RejectReason.FENCED, None)


async def _one_at(url: str, commit: Commit, offset: float) -> CommitResult:
    """``commit`` applied by a store whose clock is ``offset`` seconds past the server's."""
    async with PostgresStore(url, lease_offset=lambda: offset) as store:
        return await _one(store, commit)
