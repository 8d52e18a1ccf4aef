"""A write transaction in one round trip: the commits that create runs (an awaited
``start``, a ``submit``), and the ends of runs whose rows this store wrote last, are
written on a guess of what their reads would find, and the server checks the guess in the
same transaction (schema versions 15, 16 and 17).

A write transaction of `PgTx` takes two round trips: its reads (the rows it touches, the
live attempts on the threads it guards, ...), then its writes, the numbering of its events
and ``COMMIT`` (``_tx``'s docstring). The rules (``store/_rules.py``) need the reads before
they can say what to write. For a batch whose every commit creates a run, what the reads
find is almost always the same: no run of that id; on each thread the batch guards, no live
attempt (and, for the busy-thread policies ``"reject"`` and ``"supersede"``, no unended
run); and the claim a child is started under (its tree's) held as it says. `guess_of` says
when a batch is such a batch; `Guess` is what its reads are expected to find.

A guessed transaction is one pipeline and one round trip, of four statements (one more
when it is made under claims, and one more when the rules queued more than runs, claims
and events):

1. ``BEGIN``;
2. (no statement) the rules, run against the guessed view (`PgTx.begin_guessed`) exactly
   as they run against the rows read: no rule is written twice. A rule that asks for
   anything the guess does not hold (a row, a claim, a thread it did not guess) makes the
   transaction give the guess up before anything but ``BEGIN`` is sent (`GuessMissed`);
3. ``guessed_held``, when the batch is made under claims (a child's tree's): locks them,
   in the order of the two-trip transaction's ``claims``, and raises `GUESS_MISSED`
   unless each is held as its fence says, its lease not run out (a read that locks reads
   the claim's latest version once the lock is taken);
4. ``insert_guessed``: the rest of the check of the guess and the writes of the runs and
   claims the rules decided, in one statement. The check is ``guessed`` (schema version
   16), a server-side function that takes the locks of the threads the batch guards or
   reads (after the claims, as the two-trip transaction's ``lock_threads``, and their
   keys; the function can check claims too, which this version leaves to the statement
   before), reads what the transaction's reads
   would have read and raises `GUESS_MISSED` when it is not what was guessed. Each of its
   reads is a statement of a volatile function, so it takes a snapshot of its own after
   the locks, as the two-trip reads do (the snapshot of the statement around it, taken
   before the locks, reads none of what the check guards: an insert's key check and an
   upsert's conflict see every committed row whatever the snapshot). The runs' insert
   and the claims' upsert are made from the one row the check returns, so nothing is
   written unless it passed; the runs go first, then the claims, as in the two-trip
   transaction. The function only checks: what is written is the rows the rules made,
   sent as parameters;
5. any other write the rules queued, the numbering of the events (the seal) and
   ``COMMIT``, as in the two-trip transaction (``_tx``), then the one Sync. When the rules
   queued nothing but runs, claims and events (a start, a submit), statements 4 and 5's
   seal are one (``seal_guessed``, composed of the two in
   ``_queries``): the seal's events are numbered only once the check has passed and every
   run and claim is written (a condition on both inserts' counts, evaluated before the
   first event's row, whose seq is taken after it), so the order of the two statements
   holds within the one.

Why the check is enough. The rules read, for a batch `guess_of` accepts: each new run's row
(guessed absent), the live attempts on the threads it guards (guessed none, so the thread is
free), for ``"reject"`` / ``"supersede"`` the unended runs on the thread (guessed none: no
run to refuse for or to supersede), and for a commit under a fence its root's claim (guessed
as the fence says, its lease not run out). The check reads exactly those, under the
same locks, so a guess it lets pass is what the reads would have found; from then to
``COMMIT`` the claims' row locks and the thread locks keep them as read (every transaction
that changes a thread's live attempts or starts a run on it takes the lock first, as in the
two-trip path), and a run created meanwhile by another transaction under the same id stops
this one's insert (its primary key). So the writes are the ones the rules would have made
after reading.

The clock. The rules measure leases by ``now``, the server's clock read once for the
transaction; a guessed transaction sends its writes before it could read it. So it runs
the rules on a clock that starts at 0 (`PgTx.begin_guessed`): the only claims they read
are the ones it writes, whose lease ends it makes from that clock, and the guessed ones,
whose leases it holds unbounded (the check compares them with the server's clock
instead, as the rules would have); no live attempt is read. Its claims' lease ends are
written relative to the server's clock, read once by the statement that puts them
(``insert_guessed``). A store on a fixed clock (``lease_clock``) runs them on that.

Steps and ends (``_known``). A step of a run's attempt (its progress, a journaled step's
event, messages received) reads the run's row and the claim it is made under; its end
reads those, the run's stored commands and its stream heads. A store that wrote the row
last (it started the attempt, or committed its last step) knows it, with the id of the
transaction that wrote it; an ending run has almost always no stored command and no
stream chunk. `guess_of` takes such a commit (`_known_commit`: under a claim, reading
nothing else) as reading exactly that, and a batch of them, with or without creations, is
written in one round trip:

- the claims the commits are made under are locked and checked first, by
  ``guessed_held``, as a child's tree's claim is;
- the rows' update (``update_guessed``) is the check of the rows: it updates a row only
  where its ``xmin`` is still the id of the transaction the store knows it from (why
  that is enough: ``_known``), and raises `GUESS_MISSED` (through ``missed``, schema
  version 17) unless every row was updated. It locks the rows, after the claims, sorted;
- then ``guessed_quiet`` raises it if any run the batch ends has a stored command or a
  stream chunk: a statement after the rows' locks, which every writer of either takes
  first, so its snapshot holds every one there is;
- the other writes, the seal and ``COMMIT``, as in the two-trip transaction.

No write of the transaction is visible unless all three checks passed: a check that fails
aborts it, and ``COMMIT`` rolls it back. A known row the rules did not write (they refused
its commit: ``STALE``) would go unchecked, its update being its check; so the guess is
given up before anything is sent, and the batch read first.

Event order (``_order``). The guessed transaction seals its events as the two-trip one
does: its seqs and its ticket taken in its last statement before ``COMMIT``, after every
lock it takes (the claims and thread locks of the check, the new rows' keys and the claims
put: in ``insert_guessed``, a statement before, or, in ``seal_guessed``, before the first
seq of the same statement). A transaction whose guess failed takes no seq and no ticket:
its check raises before the first seq of the statement it shares with the seal, or the
statements after the failing one (the seal among them) are skipped; and a seq taken by a
transaction that then rolled back is never visible, which the watermark's proof allows
for. So followers see every committed event once and in order, as before.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final, final

import attrs
import psycopg
from psycopg import sql

from ..._core import Commit, Ended, Fence, Queued, Running
from ._known import KnownRow, KnownRows

GUESS_MISSED: Final = "AWG01"
"""The SQLSTATE the check (``guessed``) raises when the reads of a guessed transaction are not what
was guessed."""


@final
class GuessMissed(Exception):
    """A guessed transaction's reads were not what was guessed (on the server), or a rule
    asked for what the guess does not hold (before anything was sent): the transaction is
    rolled back and its commits run again as a two-trip transaction."""


@final
@attrs.frozen
class Guess:
    """What a batch's reads are guessed to find: no run of the ids in ``absent``; no live
    attempt on the threads in ``free``; no unended run on the threads in ``quiet``; and
    each claim ``held`` names (a child's tree's) held as it says, its lease not run out;
    each run of ``known`` as this store last wrote it, and those ``ending`` with no stored
    command and no stream chunk."""

    absent: tuple[str, ...]
    free: tuple[str, ...]
    quiet: tuple[str, ...]
    held: tuple[Fence, ...] = ()
    known: tuple[KnownRow, ...] = ()
    """The rows of the existing runs the batch writes, each guessed as this store last
    wrote it (``_known``)."""
    ending: tuple[str, ...] = ()
    """The runs of ``known`` the batch ends, each guessed to have no stored command and no
    stream chunk."""

    @property
    def threads(self) -> tuple[str, ...]:
        """The threads whose locks the transaction takes (whose live attempts it reads)."""
        return tuple(sorted({*self.free, *self.quiet}))


def guess_of(batch: Sequence[Commit], known: KnownRows | None = None) -> Guess | None:
    """The guess for ``batch`` when every commit in it either creates a run ``Running`` or
    ``Queued`` that the rules write from its absence, its thread's runs and the claim it is
    made under (a child's: its tree's) alone, or is its attempt's step or end on a run
    whose row is ``known`` (`_known_commit`); else None (the batch runs as a two-trip
    transaction). Not guessed: any other commit on an existing run, a creation with
    stream chunks (their heads are read)
    or ending its run (its commands are read), superseding on a thread from a child (its
    ancestors are read), two commits of one run, or a claim the batch names at two epochs
    or creates (one of them cannot hold)."""
    absent: list[str] = []
    free: set[str] = set()
    quiet: set[str] = set()
    held: dict[str, Fence] = {}
    updated: dict[str, KnownRow] = {}
    ending: list[str] = []
    for commit in batch:
        new = commit.new_run
        fence = commit.fence
        if fence is not None and held.setdefault(fence.root_run_id, fence) != fence:
            return None
        if new is None and known is not None:
            row = _known_commit(commit, known)
            if row is None or commit.run_id in updated:
                return None
            updated[commit.run_id] = row
            if isinstance(commit.state, Ended):
                ending.append(commit.run_id)
            continue
        if (
            new is None
            or not commit.expect.new
            or commit.chunks
            or commit.end_descendants is not None
            or type(commit.state) not in _GUESSED_STATES
            or (new.if_busy == "supersede" and new.parent_run_id is not None)
        ):
            return None
        absent.append(commit.run_id)
        if commit.thread_guard:
            free.add(new.thread_id)
        if new.if_busy != "queue":
            quiet.add(new.thread_id)
    if not held.keys().isdisjoint(absent) or not updated.keys().isdisjoint(absent):
        return None
    return Guess(
        tuple(absent),
        tuple(sorted(free)),
        tuple(sorted(quiet)),
        tuple(held.values()),
        tuple(updated.values()),
        tuple(ending),
    )


def _known_commit(commit: Commit, known: KnownRows) -> KnownRow | None:
    """The row ``commit`` is guessed to write, as this store last wrote it: a commit of an
    attempt on a run the store knows (``_known``), under its claim (checked as a child's
    tree's is), that reads nothing but the run's row and that claim (a step: ``Running``,
    its checkpoint, events, commands consumed or messages delivered), or those and the
    run's stored commands and stream heads (an end: ``Ended``, consuming and delivering
    nothing; guessed: none of either); else None."""
    state = commit.state
    if (
        commit.fence is None
        or commit.expect.new
        or commit.claim is not None
        or commit.thread_guard
        or commit.take_messages
        or commit.chunks
        or commit.end_descendants is not None
    ):
        return None
    if isinstance(state, Ended):
        if commit.consumed or commit.delivered:
            return None
    elif not isinstance(state, Running):
        return None
    return known.get(commit.run_id)


_GUESSED_STATES: Final = frozenset({Running, Queued})


def missed(exc: psycopg.Error) -> bool:
    """Whether ``exc``, raised by a guessed transaction, says its guess was wrong: the
    check failed, or a run it creates was created by another transaction first."""
    return exc.sqlstate in (GUESS_MISSED, psycopg.errors.UniqueViolation.sqlstate)


_V15: Final = (
    # The check of a guessed transaction (the module's docstring): locks the claims the
    # batch is made under (``claims``: before any other lock) and the threads
    # (``lock_threads``: the keys' order, one lock as each key comes), then raises
    # GUESS_MISSED unless each claim of ``roots`` is held by its ``owners`` at its
    # ``epochs`` with its lease not run out at ``now`` (the store's fixed clock, else the
    # server's) plus ``offset``, no run of the ids in ``absent`` exists, no run on the
    # threads in ``free`` has an attempt marked live, and no run on the threads in
    # ``quiet`` is unended. Each read by key, as the two-trip transaction's reads are
    # (``claims``, ``rows``, ``live``, ``unended``), and each with a snapshot of its own,
    # taken after the locks (a volatile function's statements each take one).
    f"""CREATE FUNCTION {{s}}.as_guessed(
      space integer, keys integer[], absent text[], free text[], quiet text[],
      roots text[], owners text[], epochs bigint[], now float8, lease_offset float8)
    RETURNS void LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
      PERFORM 1 FROM {{s}}.claims WHERE run_id = ANY(roots) FOR UPDATE;
      PERFORM pg_advisory_xact_lock(space, k) FROM unnest(keys) AS k;
      IF (SELECT count(*) FROM unnest(roots, owners, epochs) AS f(r, o, e)
          JOIN {{s}}.claims c ON c.run_id = f.r
          WHERE c.owner = f.o AND c.epoch = f.e
            AND c.lease_until >= coalesce(now, extract(epoch FROM clock_timestamp()))
                                 + lease_offset) <> cardinality(roots) THEN
        RAISE EXCEPTION 'a claim the transaction is made under does not hold'
          USING ERRCODE = '{GUESS_MISSED}';
      END IF;
      IF EXISTS (SELECT 1 FROM unnest(absent) AS k(id) CROSS JOIN LATERAL
                   (SELECT 1 FROM {{s}}.runs WHERE run_id = k.id OFFSET 0) r) THEN
        RAISE EXCEPTION 'a run the transaction creates exists'
          USING ERRCODE = '{GUESS_MISSED}';
      END IF;
      IF EXISTS (SELECT 1 FROM unnest(free || quiet) AS k(id) CROSS JOIN LATERAL
                   (SELECT 1 FROM {{s}}.runs
                    WHERE attempt_epoch IS NOT NULL AND thread_id = k.id OFFSET 0) r) THEN
        RAISE EXCEPTION 'a thread the transaction guards has a live attempt'
          USING ERRCODE = '{GUESS_MISSED}';
      END IF;
      IF EXISTS (SELECT 1 FROM unnest(quiet) AS k(id) CROSS JOIN LATERAL
                   (SELECT 1 FROM {{s}}.runs
                    WHERE kind <> 'ended' AND thread_id = k.id OFFSET 0) r) THEN
        RAISE EXCEPTION 'a thread the transaction reads has an unended run'
          USING ERRCODE = '{GUESS_MISSED}';
      END IF;
    END $$""",
)


def to_v15(conn: psycopg.Connection[tuple[object, ...]], schema: sql.Identifier) -> None:
    """Version 15: the check of a guessed transaction (``as_guessed``). No table changes."""
    for statement in _V15:
        conn.execute(sql.SQL(statement).format(s=schema))


_V16: Final = (
    # The check of a guessed transaction, as ``as_guessed`` (version 15) checks it, for the
    # statement that also writes its runs and claims (``insert_guessed``): it returns true
    # (the row those writes are made from) or raises GUESS_MISSED. What was guessed is one
    # JSON object (``guess_json``: far cheaper for the client to send than seven arrays):
    # the threads' lock keys in ``keys``, in order; the ids in ``absent``; the threads in
    # ``free`` and ``quiet``; the claims in ``held``, as [root, owner, epoch]. A read with
    # nothing to read (no claim guessed held, no thread read for unended runs) is skipped,
    # and each read keeps one plan for the server process (remade when the tables'
    # statistics change): a volatile function's statements are otherwise planned again at
    # every call for their parameters, which cost three times the reads themselves. The
    # plans do not depend on the parameters: each read goes by key, one index probe per
    # key, as in version 15.
    f"""CREATE FUNCTION {{s}}.guessed(space integer, guess jsonb, now float8, lease_offset float8)
    RETURNS boolean LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan AS $$
    BEGIN
      IF jsonb_array_length(guess->'held') > 0 THEN
        PERFORM 1 FROM {{s}}.claims
          WHERE run_id IN (SELECT h->>0 FROM jsonb_array_elements(guess->'held') AS h)
          FOR UPDATE;
      END IF;
      IF jsonb_array_length(guess->'keys') > 0 THEN
        PERFORM pg_advisory_xact_lock(space, k::integer)
          FROM jsonb_array_elements_text(guess->'keys') AS k;
      END IF;
      IF jsonb_array_length(guess->'held') > 0 AND (
          SELECT count(*) FROM jsonb_array_elements(guess->'held') AS h
          JOIN {{s}}.claims c ON c.run_id = h->>0
          WHERE c.owner = h->>1 AND c.epoch = (h->>2)::bigint
            AND c.lease_until >= coalesce(now, extract(epoch FROM clock_timestamp()))
                                 + lease_offset) <> jsonb_array_length(guess->'held') THEN
        RAISE EXCEPTION 'a claim the transaction is made under does not hold'
          USING ERRCODE = '{GUESS_MISSED}';
      END IF;
      IF EXISTS (SELECT 1 FROM jsonb_array_elements_text(guess->'absent') AS k(id)
                 CROSS JOIN LATERAL
                   (SELECT 1 FROM {{s}}.runs WHERE run_id = k.id OFFSET 0) r) THEN
        RAISE EXCEPTION 'a run the transaction creates exists'
          USING ERRCODE = '{GUESS_MISSED}';
      END IF;
      IF jsonb_array_length(guess->'free') + jsonb_array_length(guess->'quiet') > 0
         AND EXISTS (
          SELECT 1 FROM jsonb_array_elements_text((guess->'free') || (guess->'quiet')) AS k(id)
          CROSS JOIN LATERAL
            (SELECT 1 FROM {{s}}.runs
             WHERE attempt_epoch IS NOT NULL AND thread_id = k.id OFFSET 0) r) THEN
        RAISE EXCEPTION 'a thread the transaction guards has a live attempt'
          USING ERRCODE = '{GUESS_MISSED}';
      END IF;
      IF jsonb_array_length(guess->'quiet') > 0 AND EXISTS (
          SELECT 1 FROM jsonb_array_elements_text(guess->'quiet') AS k(id) CROSS JOIN LATERAL
            (SELECT 1 FROM {{s}}.runs WHERE kind <> 'ended' AND thread_id = k.id OFFSET 0) r) THEN
        RAISE EXCEPTION 'a thread the transaction reads has an unended run'
          USING ERRCODE = '{GUESS_MISSED}';
      END IF;
      RETURN true;
    END $$""",
)


def guess_json(guess: Guess, keys: Sequence[int]) -> str:
    """``guess`` as the JSON object the check (``guessed``) reads, with its threads' lock
    keys (sorted: the order the locks are taken in). Its claims are not in it: the
    statement before checks them (``guessed_held``), and the function skips a check with
    nothing to read."""
    return json.dumps(
        {
            "keys": list(keys),
            "absent": guess.absent,
            "free": guess.free,
            "quiet": guess.quiet,
            "held": [],  # (checked before, by ``guessed_held``)
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def to_v16(conn: psycopg.Connection[tuple[object, ...]], schema: sql.Identifier) -> None:
    """Version 16: the check of a guessed transaction as one part of the statement that
    writes its runs and claims (``guessed``). No table changes; ``as_guessed`` stays, for
    a runtime of the version before that still has the store open."""
    for statement in _V16:
        conn.execute(sql.SQL(statement).format(s=schema))


_V17: Final = (
    # A guessed transaction's statements that check what they write (``update_guessed``:
    # every run updated was as this store last wrote it; ``guessed_quiet``: the runs it
    # ends have no stored command and no stream chunk) raise GUESS_MISSED through this,
    # called only when the check failed: a statement cannot raise on its own.
    f"""CREATE FUNCTION {{s}}.missed(what text) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
      RAISE EXCEPTION '%', what USING ERRCODE = '{GUESS_MISSED}';
    END $$""",
)


def to_v17(conn: psycopg.Connection[tuple[object, ...]], schema: sql.Identifier) -> None:
    """Version 17: the raise of the checks of ends written on the rows this store last
    wrote (``missed``). No table changes."""
    for statement in _V17:
        conn.execute(sql.SQL(statement).format(s=schema))
