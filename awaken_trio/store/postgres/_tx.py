"""One write transaction on the PostgreSQL store: `PgTx` implements the store rules'
transaction protocol (``_rules.RunTx``) over one PostgreSQL transaction.

Round trips, for a batch of commits. The transaction is one pipeline, from ``BEGIN`` to
``COMMIT``: statements are queued, and a fetch sends everything queued before it and brings
every result back (a flush, not a Sync, so nothing commits early); only the end syncs.

1. `PgTx.begin` queues ``BEGIN``, the server's clock (``clock_timestamp()``, the lease time
   of the whole transaction) and (`PgTx.prefetch`) the claims, every run row the batch
   names, the live attempts on the threads of the runs it creates, the stored commands of
   the runs it ends or starts an attempt of, the children of those it ends with their
   descendants, and the stream heads of the runs it streams on or ends (``WHERE run_id =
   ANY(%b) FOR UPDATE``): one round trip; the live attempts on the threads of existing runs
   it guards take one more;
2. `PgTx.commit` queues every write (one statement per kind of row, many rows each), one
   statement that numbers (the first seq with its ticket) and writes the events, counts the
   write, keeps the token and leaves its notice in the session, ``COMMIT``, and the notice
   (``NOTIFY``) in a transaction of its own, and syncs: one round trip.

A batch whose every commit creates a run (an awaited ``start``, a ``submit``) or is a step
or the end of a run whose row this store wrote last (``_known``) skips the first round
trip: `PgTx.begin_guessed` takes what its reads would find to be the usual (no run of that
id, its threads free; the known rows as the store wrote them, an ending run with no
stored command or stream chunk), and the server checks that guess (taking the claims' and
threads' locks) in its first statements (`PgTx._check_guess`; with the seal too when
that is all it writes, `PgTx._sealed_with_check`) and in the update of the known rows,
which `PgTx.commit` sends with the rest in one round trip; a wrong guess rolls back and
the batch runs as above (``_guess``'s docstring).

A batch applied while a serving runtime's look is held (``_held``) goes on with the look's
transaction instead (`PgTx.begin_held`): what the look read under its locks (its runs'
rows, claims, threads' live attempts and stored commands) is what this transaction has
read, so a batch of those runs' starts skips the first round trip too, and its ``COMMIT``
is the look's.

The isolation the rules assume (``_rules``'s docstring) comes from locks on what a
transaction reads, so write transactions on different runs run side by side:

* the rows and claims it reads are locked (``FOR UPDATE``); claims are locked before rows,
  in every transaction, so two transactions do not wait for each other in a circle;
* a thread it guards (`PgTx.thread_busy`) is locked (``pg_advisory_xact_lock``) before its
  live attempts are read, so two transactions cannot both find it free;
* recovery takes the expired claims with ``FOR UPDATE SKIP LOCKED``: a claim being renewed,
  released or recovered by another transaction is left to it, and one whose renewal
  committed meanwhile no longer matches.

Events are another matter: followers read them by seq, so a seq must never become visible
after a greater one did. No lock every writer takes gives that (``_order``'s docstring has
the proof): a transaction numbers its events from 1 as it writes them; its commit pipeline
takes (``seal``) its seqs from a sequence in that order, the first with its ticket, and
commits, without waiting for another writer. What a transaction answers
(`Accepted.last_seq`) is renumbered with the seqs it was given (`Numbered`). A deadlock
between two transactions (rare: locks taken in a different order by lazy reads) is
detected by the server and the loser is run again from the start.

Nor does a transaction's notice take a lock every writer holds through its commit. The
notice (a ``NOTIFY`` on the store's channel, which the other runtimes' listeners hear:
``_listen``) is not sent in the transaction it announces: PostgreSQL commits the
transactions that notify one at a time. Before such a transaction commits, the server takes
a lock every notifying transaction of the whole server takes (``PreCommit_Notify`` locks
"database 0", so that notices queue in commit order) and holds it until the commit has
ended, its WAL flush included, so the server cannot flush two of them together
(``bench_pg_commit_order.py``: one commit a WAL flush at any number of connections, against
1.3 to 1.4 at eight with the notice after it). So the seal leaves the notice in the session
(a setting), and the pipeline sends it after the ``COMMIT`` (``notice``) in a transaction
of its own, which the server runs only if the ``COMMIT`` succeeded (a pipeline skips what
follows an error).
That transaction writes no WAL but its commit record, and the server waits for the flush
of no such commit (nor for a standby): the lock is held for microseconds, not through a
flush. A notice is still sent only once the transaction it announces has committed
(`HeardEnd`'s promise). A notice not sent (the transaction's answer was lost, or the
server refused the notice: its queue full) fails nothing: the commit stands, and the
runtimes' looks at the store find it anyway (``worker/_relay.py``).

A read the transaction's cache cannot answer goes to the server: a run row or a claim it
has not read is one it has not written (every write starts from a read), so it needs no
flush; a query over other rows (the live attempts on a thread, a run's children, expired
claims, a run's commands, a record) flushes first, so it sees this transaction's writes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, Final, NamedTuple, final

import psycopg

from ..._core import (
    CommandKind,
    Commit,
    Ended,
    JsonValue,
    NewRun,
    RunRecord,
    RunState,
    safe_repr,
)
from .._codec import dump_json, dump_retry, record_of
from .._rules import ClaimRow
from .._textrows import EVENT_WIDTH, NULL, CommandRow, TextRow, TextRunTx
from . import _streams as streams
from ._conn import StoreConnection
from ._guess import Guess, GuessMissed, guess_json
from ._held import HeldLook
from ._listen import CONTROL, STREAM
from ._order import Numbered
from ._queries import INSERTED, UPDATED, Queries, rows_json
from ._updates import RowUpdates

Conn = StoreConnection

logger = logging.getLogger("awaken_trio.store")

ENDS_MAX_BYTES: Final = 7_000
"""The most bytes of ended runs a notice names (PostgreSQL refuses payloads of 8,000 bytes
and more; the sender and the seq take the rest)."""


class _Insert(NamedTuple):
    """What a run created in this transaction is inserted with besides its row."""

    row: TextRow
    input: str
    result: str
    max_steps: int | None
    forked_from: str | None
    deadline: float | None
    queue_deadline: float | None
    retry: str | None  # the policy's JSON text (`dump_retry`)


@final
class PgTx(TextRunTx[TextRow, _Insert]):
    """The database as one write transaction sees it, and the writes it has queued: the
    store rules' `RunTx` (``_rules``), a `TextRunTx` whose reads and writes go through one
    pipeline."""

    def __init__(
        self,
        conn: Conn,
        queries: Queries,
        *,
        thread_locks: int,
        sender: str,
        offset: float,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__({}, {}, {})
        self.conn = conn
        self.q = queries
        self.token = uuid.uuid4()
        self._thread_locks = thread_locks
        self._sender = sender
        self._offset = offset
        self._clock = clock
        self.now = 0.0
        self.numbered = Numbered((), 0)
        """The seqs this transaction's events were given, once it committed."""
        self.writes = 0
        """The store's count of write transactions before this one, once it committed."""
        self.controls = False
        """Whether the transaction stored a command (its notice says so: `CONTROL`)."""
        self.streamed = False
        """Whether the transaction wrote stream chunks (its notice says so: `STREAM`)."""
        # The children of the runs a batch ends with their descendants, read with `begin`,
        # and kept up to date with the children this transaction creates.
        self._children: dict[str, list[str]] = {}
        # Queued writes past the base's: checkpoints (a run's current one, and the ones
        # kept by seq, numbered when the transaction commits).
        self._checkpoints: dict[str, str] = {}
        self._history: list[tuple[str, int, str]] = []
        # The transaction is one pipeline, from `begin` to `commit` (or `abort`): statements
        # are queued and sent together, and a read's fetch brings back every result queued
        # before it (a flush, one round trip); only the end sends a Sync.
        self._pipeline = contextlib.ExitStack()
        # A transaction written on a guess of its reads (`begin_guessed`): the guess, and
        # whether its clock starts at 0 (its claims' lease ends are then the server's).
        self._guess: Guess | None = None
        self._relative = False
        self._unchecked = False  # (its check not sent yet: `_check_guess`)
        self._fixed: float | None = None
        self._updates = RowUpdates()  # (what an update of a row read here must send)
        # The known rows a guessed transaction writes (``_known``): the id of the
        # transaction that wrote each.
        self._written_by: dict[str, int] | None = None
        self._wrote_rows: list[str] = []  # (the runs written, as their writes are sent)
        self.xid = 0
        """The transaction's id as its rows' ``xmin`` holds it, once it committed."""

    # ------------------------------------------------------------------ lifetime

    def begin(self, batch: Sequence[Commit] = ()) -> float:
        """``BEGIN``, read the server's clock and what ``batch`` touches (`prefetch`), in
        one round trip; the lease time (seconds)."""
        conn = self.conn
        self._begun = True
        self._pipeline.enter_context(conn.pipeline())
        conn.execute("BEGIN")
        clock = conn.execute(self.q.server_now)
        if batch:
            self.prefetch(batch)
        found = clock.fetchone()
        assert found is not None
        (now,) = found
        if self._clock is not None:
            now = self._clock()  # a test's clock in place of the server's
        self.now = float(now) + self._offset
        return self.now

    def begin_held(self, held: HeldLook, batch: Sequence[Commit] = ()) -> float:
        """Go on with the transaction a held look left open (``_held``): what it read under
        its locks is what this transaction has read, and `prefetch` reads the rest of what
        ``batch`` touches (nothing, for a batch of its runs' starts: no round trip before
        `commit`'s). The lease time (seconds): the server's clock as the look read it,
        moved on by the time since, or the store's fixed clock."""
        self._begun = True
        self._pipeline.enter_context(self.conn.pipeline())
        rows, updates = self._rows, self._updates
        for found in held.rows:
            rows[found[0]] = TextRow(*found)
            updates.read(found)
        self._claims.update(held.claims)
        for thread_id, live in held.threads.items():
            self._threads[thread_id] = dict(live)
        for run_id, commands in held.commands.items():
            self._commands[run_id] = list(commands)
        now = held.server_clock() if self._clock is None else self._clock()
        self.now = now + self._offset
        if batch:
            self.prefetch(batch)
        return self.now

    def begin_guessed(self, guess: Guess) -> float:
        """``BEGIN``, queued, not sent: what the transaction's reads would find is taken to
        be ``guess`` (``_guess``'s docstring), and the server's check of it (``guessed``,
        which takes the locks of the claims and threads it names first) is sent with the
        runs and claims the transaction writes, in one statement (``insert_guessed``,
        `flush`); `commit` sends everything in one round trip. The transaction's clock
        (seconds): 0, its lease ends written relative to the server's, or the store's fixed
        clock."""
        conn = self.conn
        self._begun = True
        self._guess = guess
        self._pipeline.enter_context(conn.pipeline())
        conn.execute("BEGIN")
        for run_id in guess.absent:
            self._rows[run_id] = None
        threads = guess.threads
        for thread_id in threads:
            self._threads[thread_id] = {}
        for fence in guess.held:
            # (Its lease holds for as long as this transaction's clock reads: the check
            # compares it with the server's.)
            self._claims[fence.root_run_id] = ClaimRow(fence.owner, fence.epoch, math.inf)
        if guess.known:
            _take_known(self, guess)
        fixed = None if self._clock is None else self._clock()
        self._unchecked = True
        self._fixed = fixed
        self._relative = fixed is None
        self.now = 0.0 if fixed is None else fixed + self._offset
        return self.now

    def _check_guess(self) -> None:
        """Send the check of the guess (`_checked`), with the runs and claims queued so far
        when it creates runs (``insert_guessed``, the module's docstring): the first
        statements after ``BEGIN`` of a guessed transaction, whatever it writes."""
        guess = _checked(self)
        if guess.absent:
            self.conn.execute(self.q.insert_guessed, _guessed(self, guess))

    def _sealed_with_check(self) -> bool:
        """Whether the check of the guess, the runs and claims and the seal go as one
        statement (``seal_guessed``): a guessed transaction not checked yet that wrote,
        but nothing beside runs, claims put and events, and forgets nothing this time."""
        return (
            self._unchecked
            and self.wrote
            and not (
                self._changed
                or self._tickets
                or self._delivered
                or self._consumed
                or self._dropped
                or self._streams.queued
                or any(self._claims[run_id] is None for run_id in self._claims_changed)
                or self.token.int % 64 == 0
                or self.token.int % 1024 == 1
            )
        )

    def _to_server(self) -> None:
        """Before a read goes to the server: a guessed transaction gives its guess up
        (`GuessMissed`), as its reads are what it guessed, and it has no others."""
        if self._guess is not None:
            raise GuessMissed("a rule read what the guess does not hold")

    def commit(self) -> None:
        """Send every queued write, then number (the first with the ticket) and write the
        events, and commit, in one pipeline (the module's docstring)."""
        conn = self.conn
        q = self.q
        counted = None
        if self._sealed_with_check():
            # The check, the runs and claims, and the seal: one statement (``_guess``).
            guessed = _guessed(self, _checked(self))
            counted = conn.execute(q.seal_guessed, guessed | _sealing(self))
        else:
            self.flush()
            if self.wrote:
                if self.token.int % 64 == 0:  # now and then: forget old tokens
                    conn.execute(q.forget_written)
                if self.token.int % 1024 == 1:  # and fold the rows of ended server processes
                    conn.execute(q.forget_writers)
                counted = conn.execute(q.seal, _sealing(self))
        committed = conn.execute("COMMIT")
        if counted is not None:
            # Its notice, in a transaction of its own (the module's docstring says why).
            conn.execute(q.notice, (q.channel,))
        _sync(self._pipeline, committed)
        if counted is not None:
            found = counted.fetchone()
            assert found is not None
            self.numbered = Numbered(tuple(found[1]), int(found[0]))
            self.writes = int(found[2])
            self.xid = int(found[4])

    def abort(self) -> None:
        """Leave the pipeline and roll back, after an error anywhere in the transaction
        (what has gone wrong already is the caller's to raise; nothing here raises)."""
        conn = self.conn
        with contextlib.suppress(psycopg.Error):
            self._pipeline.close()
        if not conn.broken:
            with contextlib.suppress(psycopg.Error):
                conn.execute("ROLLBACK")

    def give_up(self) -> None:
        """Leave the pipeline and roll back a guessed transaction whose guess was wrong
        (``_guess``), keeping the statements prepared on the connection for the
        transaction that runs next."""
        with contextlib.suppress(psycopg.Error):
            self._pipeline.close()
        self.conn.roll_back()

    # ------------------------------------------------------------------ reading

    def prefetch(self, batch: Sequence[Commit]) -> None:
        """Read what ``batch`` touches (`_read`), but for the claim of a run a commit
        creates, which no rule reads: one whose run exists is refused ``EXISTS`` before
        any claim of it is looked at, and a run created takes its claim with an upsert.
        A guessed transaction reads nothing here: what it would read is its guess, and a
        rule that reads past it gives the guess up when it does (`_to_server`)."""
        if self._guess is not None:
            return
        run_ids: set[str] = set()
        claim_ids: set[str] = set()
        new_threads: set[str] = set()
        guarded: set[str] = set()
        commanded: list[str] = []  # runs it ends or starts an attempt of
        parents: list[str] = []
        streaming: list[str] = []
        for commit in batch:
            run_ids.add(commit.run_id)
            if commit.end_descendants is not None and commit.run_id not in self._children:
                parents.append(commit.run_id)
            if commit.fence is not None:
                claim_ids.add(commit.fence.root_run_id)
            if commit.claim is not None and not commit.expect.new:
                claim_ids.add(commit.run_id)
            if commit.thread_guard:
                if commit.new_run is not None:
                    new_threads.add(commit.new_run.thread_id)
                else:
                    guarded.add(commit.run_id)
            if isinstance(commit.state, Ended):
                commanded.append(commit.run_id)
                streaming.append(commit.run_id)  # (its "end" chunks)
            else:
                if commit.take_messages and commit.new_run is None:
                    commanded.append(commit.run_id)  # (`_rules.update` hands them over)
                if commit.chunks:
                    streaming.append(commit.run_id)
        run_ids -= self._rows.keys()
        claim_ids -= self._claims.keys()
        self._read(
            list(run_ids),
            list(claim_ids),
            new_threads,
            guarded,
            [run_id for run_id in commanded if run_id not in self._commands],
            parents,
            self._streams.missing(streaming),
        )

    def _read(
        self,
        run_ids: list[str],
        claim_ids: list[str],
        threads: Collection[str] = (),
        guarded: Collection[str] = (),
        commanded: Collection[str] = (),
        parents: Collection[str] = (),
        streaming: list[str] | None = None,
    ) -> None:
        """Read rows, claims, the live attempts on threads (those named, and those of the
        runs in ``guarded``) with their roots' claims, the commands of ``commanded``, the
        children of ``parents`` and the stream heads of ``streaming``, in as few round trips
        as the dependencies allow."""
        conn = self.conn
        rows = self._rows
        # Threads named up front (new runs') are read in the same round trip, after the
        # rows, as a later read of them would be (locks in one order).
        known = [thread_id for thread_id in threads if thread_id not in self._threads]
        if run_ids or claim_ids or commanded or known or parents or streaming:
            self._to_server()
            # Claims before rows, as in every transaction (the module's docstring); the
            # commands after the rows, which a command's post locks first. All are queued
            # before the first fetch, which brings every result back in one round trip.
            c_claims = conn.execute(self.q.claims, (claim_ids,)) if claim_ids else None
            # (Locked in the order given: sorted, the same in every transaction.)
            c_rows = conn.execute(self.q.rows, (sorted(run_ids),)) if run_ids else None
            c_commands = (
                conn.execute(self.q.stored_commands, (list(commanded),)) if commanded else None
            )
            c_live = self._lock_threads(known) if known else None
            # After the rows, which lock the parents: a child is read as `children` would
            # read it later in the transaction (this transaction's own are added as made).
            c_children = conn.execute(self.q.children_of, (list(parents),)) if parents else None
            # After the rows too: a run's heads are read once its row is locked.
            c_heads = (
                streams.read_heads(conn, self.q.stream_heads, streaming) if streaming else None
            )
            if c_rows is not None:
                for run_id in run_ids:
                    rows[run_id] = None
                for found in c_rows.fetchall():
                    rows[found[0]] = TextRow(*found)
                    self._updates.read(found)
            if c_claims is not None:
                self._take_claims(claim_ids, c_claims.fetchall())
            if c_commands is not None:
                for run_id in commanded:
                    self._commands[run_id] = []
                for cid, rid, *command in c_commands.fetchall():
                    self._commands[rid].append(CommandRow(cid, *command))
            if c_children is not None:
                children = self._children
                for parent in parents:
                    children[parent] = []
                for parent, child in c_children.fetchall():
                    children[parent].append(child)
            if c_live is not None:
                self._take_live(c_live)
            if c_heads is not None:
                assert streaming is not None
                self._streams.take(streaming, c_heads.fetchall())
        wanted: set[str] = set()
        for run_id in guarded:
            row = rows.get(run_id)
            if row is not None:
                wanted.add(row.thread_id)
        wanted -= self._threads.keys()
        if wanted:
            self._read_threads(wanted)

    def _take_claims(self, claim_ids: Iterable[str], found: Iterable[Sequence[Any]]) -> None:
        claims = self._claims
        for run_id in claim_ids:
            claims[run_id] = None
        for run_id, owner, epoch, lease_until in found:
            claims[run_id] = ClaimRow(owner, epoch, lease_until)

    def _read_threads(self, thread_ids: Collection[str]) -> None:
        """Lock the threads and read their live attempts."""
        self._take_live(self._lock_threads(thread_ids))

    def _lock_threads(self, thread_ids: Collection[str]) -> psycopg.Cursor[tuple[Any, ...]]:
        """Queue, in the pipeline the caller holds, the locks of the threads (in one order,
        the same in every transaction) and the read of their live attempts (`_take_live`
        takes it)."""
        self._to_server()
        conn = self.conn
        threads = self._threads
        for thread_id in thread_ids:
            threads[thread_id] = {}
        keys = sorted({thread_key(thread_id) for thread_id in thread_ids})
        self.flush()  # the query reads attempt epochs this transaction may have changed
        # A statement of its own, before the read: the read's snapshot is taken when it
        # starts, so it sees whatever the locks' last holders committed.
        conn.execute(self.q.lock_threads, (self._thread_locks, keys))
        return conn.execute(self.q.live, (list(thread_ids),))

    def _take_live(self, found: psycopg.Cursor[tuple[Any, ...]]) -> None:
        """The live attempts `_lock_threads` read, and their roots' claims."""
        threads = self._threads
        roots: set[str] = set()
        for thread_id, run_id, root, epoch in found.fetchall():
            threads[thread_id][run_id] = (root, epoch)
            roots.add(root)
        missing = [r for r in roots if r not in self._claims]
        if missing:
            self._take_claims(missing, self.conn.execute(self.q.claims, (missing,)).fetchall())

    def prefetch_claims(self, run_ids: Iterable[str]) -> None:
        missing = [r for r in set(run_ids) if r not in self._claims]
        if missing:
            self._to_server()
            self._take_claims(missing, self.conn.execute(self.q.claims, (missing,)).fetchall())

    def _read_row(self, run_id: str) -> None:
        self._read([run_id], [])

    def _read_claim(self, run_id: str) -> None:
        self.prefetch_claims((run_id,))

    def _read_thread(self, thread_id: str) -> None:
        self._read_threads((thread_id,))  # (flushes first)

    def _read_unended(self, thread_id: str) -> list[str]:
        # The thread's lock first, as for its live attempts: two transactions that read
        # the same thread's runs are serialised (the rows themselves are locked as the
        # rules read them).
        guess = self._guess
        if guess is not None and thread_id in guess.quiet:
            return []  # (guessed: none)
        self._to_server()
        if thread_id not in self._threads:
            self._take_live(self._lock_threads((thread_id,)))
        found = self.conn.execute(self.q.unended, (thread_id,)).fetchall()
        return [run_id for (run_id,) in found]

    def _read_commands(self, run_id: str) -> list[CommandRow]:
        self._read([], [], commanded=(run_id,))
        return self._commands.pop(run_id)

    def _read_heads(self, run_ids: list[str]) -> None:
        # (The run's row is locked: every rule that streams or ends a run reads it first.)
        self._read([], [], streaming=run_ids)

    def _load_record(self, run_id: str) -> RunRecord | None:
        self._to_server()
        found = self.conn.execute(self.q.load, (run_id,)).fetchone()
        return None if found is None else record_of(found)

    def children(self, parent: str) -> list[str]:
        known = self._children.get(parent)
        if known is not None:
            return list(known)
        self._to_server()
        self.flush()
        return [r for (r,) in self.conn.execute(self.q.children, (parent,)).fetchall()]

    def expired_claims(self, now: float) -> list[str]:
        self._to_server()
        self.flush()
        found = self.conn.execute(self.q.expired_claims, (now,)).fetchall()
        self._take_claims((), found)  # locked: what the rules read of them stays true
        return [run_id for run_id, *_ in found]

    def last_seq(self) -> int:
        # This transaction's numbering (the module's docstring): 0 is the seq before its
        # first event, which is the store's last when it has written none.
        return self._last_seq

    # ------------------------------------------------------------------ writing

    def create(
        self,
        run_id: str,
        new: NewRun,
        state: RunState,
        generation: int,
        result: JsonValue,
        at: float,
        *,
        not_before: float | None = None,
    ) -> TextRow:
        row = self._created(TextRow.created(run_id, new, state, generation, at, not_before))
        siblings = None if new.parent_run_id is None else self._children.get(new.parent_run_id)
        if siblings is not None:
            siblings.append(run_id)
        forked_from = None if new.forked_from is None else dump_json(new.forked_from)
        self._inserted[run_id] = _Insert(
            row,
            dump_json(new.input),
            dump_json(result),
            new.max_steps,
            forked_from,
            new.deadline,
            new.queue_deadline,
            dump_retry(new.retry),
        )
        if new.checkpoint is not None:
            self._checkpoints[run_id] = dump_json(new.checkpoint)
        return row

    def put_checkpoint(self, row: TextRow, checkpoint: JsonValue, seq: int) -> None:
        text = dump_json(checkpoint)
        self._checkpoints[row.run_id] = text
        self._history.append((row.run_id, seq, text))
        self._change(row)

    def insert_command(
        self, run_id: str, kind: CommandKind, payload: JsonValue, reason: str | None, at: float
    ) -> int:
        self._to_server()
        self.flush()  # a queued delete of the run's commands must not reach this one
        found = self.conn.execute(
            self.q.insert_command, (run_id, kind, dump_json(payload), dump_json(reason), at)
        ).fetchone()
        assert found is not None
        self.wrote = True
        self.controls = True
        return int(found[0])

    def prune(self, ended_before: float, *, dry_run: bool) -> int:
        """Delete the ended trees whose last event is before ``ended_before`` (only count
        them, ``dry_run``): `PruningStore.prune`, outside the rules."""
        q = self.q
        ids = [r for (r,) in self.conn.execute(q.prunable, (ended_before,)).fetchall()]
        if ids and not dry_run:
            self.conn.execute(q.prune, {"ids": ids})
        return len(ids)

    # ------------------------------------------------------------------ flushing

    def flush(self) -> None:
        """Send every queued write (inside the transaction; `commit` ends it): a guessed
        transaction's first with the check of its guess (`_check_guess`)."""
        conn = self.conn
        if self._unchecked:
            self._check_guess()
        if not (
            self._inserted
            or self._changed
            or self._claims_changed
            or self._tickets
            or self._delivered
            or self._consumed
            or self._dropped
            or self._streams.queued
        ):
            return
        q = self.q
        checkpoints, steps, results = self._checkpoints, self._steps, self._results
        if self._inserted:
            inserts = [self._insert_row(run_id, new) for run_id, new in self._inserted.items()]
            conn.execute(q.insert_runs, (rows_json(inserts),))
            self._wrote_rows.extend(self._inserted)
            self._inserted.clear()
        if self._changed:
            updates = []
            for run_id, row in self._changed.items():
                # (None: the update keeps the run's.)
                given = {
                    "result": results.pop(run_id, None),
                    "checkpoint": checkpoints.pop(run_id, None),
                    "steps": steps.pop(run_id, None),
                }
                updates.append(UPDATED.row(row, given))
            written_by = self._written_by
            # (A row no statement updated keeps the `xmin` of the transaction before.)
            if self._updates.send(conn, q, updates, written_by):
                self._wrote_rows.extend(self._changed)
            if written_by is not None and self._guess and self._guess.ending:  # (after its locks)
                conn.execute(q.guessed_quiet, (list(self._guess.ending),))
            self._changed.clear()
        checkpoints.clear()
        steps.clear()
        results.clear()
        # Events and the checkpoints kept by seq wait for `commit`, which numbers them.
        if self._claims_changed:
            put = self._claims_put()
            if self._claims_changed:  # (what is left: the dropped ones)
                conn.execute(q.drop_claims, (list(self._claims_changed),))
                self._claims_changed.clear()
            if put:
                conn.execute(q.put_claims, _columns(put, 4))
        if self._tickets:
            conn.execute(q.drop_tickets, (list(self._tickets),))
            put_tickets = []
            for run_id, ticket in self._tickets.items():
                if ticket is not None:
                    correlation_id, at = ticket
                    put_tickets.append((run_id, correlation_id, None if at is None else float(at)))
            if put_tickets:
                conn.execute(q.put_tickets, _columns(put_tickets, 3))
            self._tickets.clear()
        if self._delivered:
            conn.execute(q.deliver, (self._delivered,))
            self._delivered = []
        if self._consumed:
            conn.execute(q.consume, (self._consumed,))
            self._consumed = []
        if self._dropped:
            conn.execute(q.drop_commands, (self._dropped,))
            self._dropped = []
        if self._streams.queued:
            self.streamed = True
            streams.write_queue(conn, q.insert_chunks, q.drop_chunks, self._streams)

    def _insert_row(self, run_id: str, new: _Insert) -> tuple[Any, ...]:
        """The JSON row ``insert_runs`` inserts a created run from (its result, checkpoint
        and steps as last queued)."""
        given = {
            "input": new.input,
            "result": self._results.pop(run_id, new.result),
            "checkpoint": self._checkpoints.pop(run_id, NULL),
            "steps": self._steps.pop(run_id, 0),
            "max_steps": new.max_steps,
            "forked_from": new.forked_from,
            "deadline": new.deadline,
            "queue_deadline": new.queue_deadline,
            "retry": new.retry,
        }
        return INSERTED.row(new.row, given)

    def _claims_put(self) -> list[tuple[str, str, int, float]]:
        """The claims changed and not dropped, taken out of the queue (the dropped ones
        stay in it)."""
        claims = self._claims
        changed = self._claims_changed
        put = []
        for run_id in list(changed):
            claim = claims[run_id]
            if claim is not None:
                put.append((run_id, claim.owner, claim.epoch, float(claim.lease_until)))
                del changed[run_id]
        return put


def _guessed(tx: PgTx, guess: Guess) -> dict[str, object]:
    """The parameters of ``tx``'s check of ``guess`` but its claims (`_checked` sent it)
    and of the runs and claims it queued so far, which are taken out of its queue
    (``insert_guessed``)."""
    inserts = [tx._insert_row(run_id, new) for run_id, new in tx._inserted.items()]
    tx._wrote_rows.extend(tx._inserted)
    tx._inserted.clear()
    put = [
        (run_id, owner, epoch, lease if math.isfinite(lease) else str(lease))
        for run_id, owner, epoch, lease in tx._claims_put()
    ]
    return {
        "thread_space": tx._thread_locks,
        "guess": guess_json(guess, sorted({thread_key(t) for t in guess.threads})),
        "now": tx._fixed,
        "offset": tx._offset,
        "runs": rows_json(inserts),
        "relative": tx._relative,
        "claims": rows_json(put),
    }


def _sync(pipeline: contextlib.ExitStack, committed: psycopg.Cursor[Any]) -> None:
    """End a transaction's pipeline (the one Sync): every result comes back, or the first
    error is raised; but for an error of the notice after a ``COMMIT`` that landed
    (``committed``'s): the commit stands, and the other runtimes find it by their next
    look (logged at WARNING: the server's notice queue full, say)."""
    try:
        pipeline.close()
    except psycopg.Error as exc:
        if committed.statusmessage != "COMMIT":
            raise
        logger.warning(
            "store: a commit's notice to the other runtimes was not sent (they find the"
            " commit at their next look at the store): %s",
            safe_repr(exc),
        )


def written(tx: PgTx) -> list[TextRow]:
    """The rows the committed transaction ``tx`` wrote, as it left them (``_known``)."""
    if not tx.xid:  # (it wrote no event: not sealed, so no id was read)
        return []
    rows = tx._rows
    return [row for run_id in tx._wrote_rows if (row := rows.get(run_id)) is not None]


def _checked(tx: PgTx) -> Guess:
    """Send the check of the claims ``tx``'s guess is made under (``guessed_held``, sorted
    by run: the order every transaction locks claims in), the first statement of a
    guessed transaction after ``BEGIN``; its guess. Given up instead (`GuessMissed`,
    nothing sent yet) if a known row was not written: its update is its check, and the
    rules' answer for it (a refusal) would rest on the guess alone."""
    guess = tx._guess
    assert guess is not None
    known = tx._written_by
    if known is not None and not known.keys() <= tx._changed.keys():
        raise GuessMissed("a rule refused a commit on a row the guess holds")
    tx._unchecked = False
    if guess.held:
        fences = sorted(guess.held, key=lambda fence: fence.root_run_id)
        tx.conn.execute(
            tx.q.guessed_held,
            (
                [fence.root_run_id for fence in fences],
                [fence.owner for fence in fences],
                [fence.epoch for fence in fences],
                tx._fixed,
                tx._offset,
                len(fences),
            ),
        )
    return guess


def _take_known(tx: PgTx, guess: Guess) -> None:
    """What ``tx``, written on ``guess``, reads of the existing runs it writes: their rows
    as this store last wrote them (``_known``), and, of those it ends, no stored command
    or stream chunk (`flush` sends the checks: ``update_guessed``, ``guessed_quiet``)."""
    written_by = tx._written_by = {}
    for row in guess.known:
        run_id = row.fields[0]
        tx._rows[run_id] = TextRow(*row.fields)
        tx._updates.read(row.fields)
        written_by[run_id] = row.written_by
    for run_id in guess.ending:
        tx._commands[run_id] = []
    tx._streams.take(guess.ending, ())


def _sealing(tx: PgTx) -> dict[str, object]:
    """The parameters of ``tx``'s ``seal`` statement: its events and kept checkpoints,
    each as one JSON array of rows."""
    events = tx._events
    width = EVENT_WIDTH
    # A run's checkpoint kept twice at one number (two commits of a batch with no
    # event between them): the last is the one kept.
    history = {(run_id, number): text for run_id, number, text in tx._history}
    # Runs it ended while their attempt is still marked live: an end committed by a
    # runtime that is not the attempt's (the attempt clears the mark with its own end).
    live = [row for row in tx._ended if row.attempt_epoch is not None]
    return {
        "space": tx.q.space,
        "events": rows_json(
            [
                # (seq, run, thread, generation, kind, state, detail, at)
                (
                    events[i],
                    events[i + 1],
                    events[i + 2],
                    events[i + 3],
                    str(events[i + 4]),
                    events[i + 5],
                    events[i + 6],
                    float(events[i + 7]),
                )
                for i in range(0, len(events), width)
            ]
        ),
        "history": rows_json(
            [(run_id, number, text) for (run_id, number), text in history.items()]
        ),
        "token": tx.token,
        # A transaction that stored a command or ended a live attempt controls a run.
        "sender": (
            f"{tx._sender}{STREAM if tx.streamed else ''}{CONTROL if tx.controls or live else ''}"
        ),
        "ends": _announced(live),
    }


def _columns(rows: list[tuple[Any, ...]], width: int) -> tuple[list[Any], ...]:
    """Rows as one list per column, the arrays a many-row ``unnest`` statement takes."""
    return tuple([row[i] for row in rows] for i in range(width))


def thread_locks(schema: str) -> int:
    """The first key of the advisory locks on a schema's threads (a stable 32-bit hash of
    its name, so two stores in one database lock their threads apart)."""
    return _hash32(f"awaken_trio.threads:{schema}")


def thread_key(thread_id: str) -> int:
    """The second key of the advisory lock on ``thread_id``. Two threads that share one
    (one in four billion) are only serialised together, never wrongly found free."""
    return _hash32(thread_id)


def _hash32(text: str) -> int:
    digest = hashlib.blake2b(text.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


def _announced(live: list[TextRow]) -> str:
    """The ended runs ``live`` for the NOTIFY (``Listener._hear`` reads it): a JSON array of
    ``[run_id, epoch, state]``, or '' when there are none, or when they would not fit in a
    notification (the owner then finds them by reading the store, as it would anyway)."""
    if not live:
        return ""
    rows = ",".join(f"[{json.dumps(r.run_id)},{r.attempt_epoch},{r.state_text}]" for r in live)
    text = f"[{rows}]"
    return text if len(text.encode()) <= ENDS_MAX_BYTES else ""
