"""Event seqs on the PostgreSQL store without a lock every writer takes (schema version 8):
how a write transaction numbers its events, how a reader knows which seqs are final, and
why a follower sees every committed event exactly once and in seq order.

Followers read events by seq (`Store.events_after` with a cursor; ``_core/_follow.py``
moves a cursor through them): a store must never show a seq after a greater one (DESIGN
§3.1). Numbering events at commit under one row lock gave that for free, at the price of
one lock held by every writer through its ``COMMIT``'s WAL flush, so the server could not
flush several writers' WAL at once (group commit) and writers serialised. Here no row is
shared; the order comes from three things instead.

1. **Seqs from a sequence, taken last.** A write transaction takes its events' seqs from
   the sequence ``event_seqs`` (``nextval``, one per event, in the events' order) in its
   last statement before ``COMMIT``, after every lock it takes. Two transactions that write
   the same run hold its row lock one after the other, so the later one's seqs are taken
   after the earlier one committed: one run's events are numbered in the order of their
   commits.
2. **A ticket per transaction.** Just before it takes its first seq (``next_seq``), the
   writer reads the sequence's ``last_value`` L' and takes a shared transaction-level
   advisory lock keyed by it (the store's ticket key space, `ticket_space`, and L' modulo
   2^32); its other seqs it takes with ``nextval`` alone, in the same statement, after the
   first (a SELECT's volatile expressions are evaluated in its ORDER BY's order). Every
   seq it takes is greater than L' (a sequence never goes back), and the lock is released
   only after its commit has become visible (or its rollback final): PostgreSQL releases a
   transaction's locks after it leaves the running set. (A ticket for each seq would say
   no more: the first is the least, and all are let go together. One a seq cost a lock
   and a function call an event, 4.5 us of the server's time, measured.)
3. **A watermark.** A reader of every run's events computes W = min(L, T) in
   ``visible_seq``: first L, the sequence's ``last_value``, then T, the least ticket held
   (from ``pg_locks``; each key is widened back to 64 bits around L, which no ticket is
   2^31 away from). It reads events only up to W, in a statement that starts after W was
   computed (``events_after`` is a volatile function: each of its statements takes a
   fresh snapshot).

**Claim: every seq s <= W that is ever committed is visible to the read.** Let transaction
X hold s <= W. s <= L, so X took s before L was read, and its ticket k < s was taken before
that (before X's first seq, which is s or precedes it). If X were still running when
``pg_locks`` was read (after L), k would be held then, so T <= k < s <= W <= T: impossible
(T counts granted tickets only, and X's was granted before it took s; a ticket still
waiting belongs to a writer whose seq, taken later, will be greater than L). So X had
ended before T was read, its commit visible or its rollback final, and the read's
snapshot, taken after that, shows exactly the seqs of X that committed.

**Claim: no seq <= W becomes visible later.** Any transaction taking a seq after L was
read takes one greater than L >= W; any taking one before is covered by the first claim.

So the events a read returns are every committed event in (cursor, W], in seq order, and
none with a seq <= W can appear afterwards: a follower whose cursor moves to the last seq
it read sees each committed event exactly once, in order. W only ever grows: L does, and a
ticket below it is held only by a writer sealing now.

**A read of one run needs no watermark.** Every transaction that writes a run's events
writes its row, and locks the row before it takes its seqs (a row is read, locked, before
it is written; a new row is another transaction's only once committed). So of two
transactions writing one run, the later takes its seqs only after the earlier committed:
one run's seqs become visible in seq order, and a read of one run (``events_of_run``)
shows every event of it committed, with none held back.

**Writers do not wait for each other.** A writer answers once its ``COMMIT`` is durable,
with the seqs it took (`Accepted.last_seq`), though a writer that took a smaller seq at
the same moment may not have committed yet: the answer is safe to read its own run from
at once, and to read every run from only once it is final. ``await_seq`` (`settle`) waits
for that: it returns at once when W >= the seq, else waits on the least ticket's lock
(exclusive: granted when every holder of that ticket has ended; let go at once, so the
wait holds no lock another transaction could wait for) and looks again. A ticket not yet
granted is left out of T: its writer has not taken its seq, which will be greater than L.
A ticket below the seq was taken by a writer that took a seq at the same moment (the
ticket and the seq are taken microseconds apart), so the wait is that writer's commit, no
more. A runtime settles a seq only where it follows every run's events from one it took
from an answer (``_core/_follow.py``); a writer never waits, so the server flushes the WAL
of writers sealing at the same moment together (group commit).

**Transactions written on a guess** (``_guess``: a start or a submit in one round trip)
keep all of this unchanged: their seal is the same last statement before ``COMMIT``, after
every lock they take (when it is one statement with their check and writes, its events'
seqs are taken once those are done: ``_queries.seal_guessed``). One whose guess was wrong
fails before it takes a seq (its check raises before the first event's seq is taken, or
every later statement of the pipeline is skipped), so it takes neither a seq nor a ticket;
were it to fail after, its rollback would release its ticket and its seqs would never
become visible, which the first claim allows (it speaks of seqs that are committed).

The count of write transactions (`PostgresStore.version`, the relay's skipped reads) is
kept the same way: each server process adds to a row of its own in ``writes`` (no two
running transactions share one), and a reader sums them in one snapshot, which only grows.
Rows of ended server processes are folded into row 0 now and then, in one transaction, so
the sum never moves backwards.
"""

from __future__ import annotations

import hashlib
from typing import Final, NamedTuple, final

import psycopg
from psycopg import sql

_MASK: Final = "4294967295"  # 2^32 - 1
_V8: Final = (
    # Seqs from a sequence: the last one handed out is the counters row's.
    "CREATE SEQUENCE {s}.event_seqs MINVALUE 0 START 0",
    "SELECT setval('{s}.event_seqs', last_seq, true) FROM {s}.counters",
    # Write transactions counted by server process (row 0: those of ended processes).
    "CREATE TABLE {s}.writes (pid integer PRIMARY KEY, n bigint NOT NULL)",
    "INSERT INTO {s}.writes (pid, n) SELECT 0, writes FROM {s}.counters",
    "DROP TABLE {s}.counters",
    # What a commit whose answer was lost answered: its events' seqs, in order.
    "ALTER TABLE {s}.written ADD COLUMN seqs bigint[] NOT NULL DEFAULT '{{}}'",
    # The watermark (the module's docstring): the sequence's last value, then the least
    # ticket held, each ticket widened to 64 bits around the last value.
    f"""CREATE FUNCTION {{s}}.visible_seq(space integer) RETURNS bigint
    LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
      last bigint;
      least_ticket bigint;
    BEGIN
      SELECT last_value INTO last FROM {{s}}.event_seqs;
      SELECT min(last + ((l.objid::bigint - (last & {_MASK}) + 6442450944) % 4294967296)
                 - 2147483648)
        INTO least_ticket
        FROM pg_locks l
        WHERE l.locktype = 'advisory' AND l.classid::bigint = (space::bigint & {_MASK})
          AND l.objsubid = 2 AND l.mode = 'ShareLock' AND l.granted
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database());
      RETURN least(last, coalesce(least_ticket, last));
    END $$""",
    # The events after a cursor up to the watermark, read with a snapshot taken after it.
    """CREATE FUNCTION {s}.events_after(space integer, after bigint, run text, lim integer)
    RETURNS SETOF {s}.events LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
      w bigint := {s}.visible_seq(space);
    BEGIN
      IF run IS NULL THEN
        RETURN QUERY SELECT * FROM {s}.events e
          WHERE e.seq > after AND e.seq <= w ORDER BY e.seq LIMIT lim;
      ELSE
        RETURN QUERY SELECT * FROM {s}.events e
          WHERE e.run_id = run AND e.seq > after AND e.seq <= w ORDER BY e.seq LIMIT lim;
      END IF;
    END $$""",
    # A writer's next seq, its ticket taken just before (the module's docstring).
    f"""CREATE FUNCTION {{s}}.next_seq(space integer) RETURNS bigint
    LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
      last bigint;
    BEGIN
      SELECT last_value INTO last FROM {{s}}.event_seqs;
      PERFORM pg_advisory_xact_lock_shared(space, ((last & {_MASK}) - 4294967296 *
        ((last & {_MASK}) >= 2147483648)::integer)::integer);
      RETURN nextval('{{s}}.event_seqs');
    END $$""",
    # A writer's wait until ``target`` is at or below the watermark: on the least ticket's
    # lock (exclusive, session-level, let go at once), so it holds nothing while it waits.
    f"""CREATE FUNCTION {{s}}.await_seq(space integer, target bigint) RETURNS bigint
    LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
      w bigint;
      k integer;
    BEGIN
      LOOP
        w := {{s}}.visible_seq(space);
        EXIT WHEN w >= target;
        k := ((w & {_MASK}) - 4294967296 * ((w & {_MASK}) >= 2147483648)::integer)::integer;
        PERFORM pg_advisory_lock(space, k);
        PERFORM pg_advisory_unlock(space, k);
      END LOOP;
      RETURN w;
    END $$""",
)


def to_v8(conn: psycopg.Connection[tuple[object, ...]], schema: sql.Identifier) -> None:
    """Version 8: event seqs from a sequence under a watermark, the writes count by
    server process (the module's docstring). The seqs already handed out stay; the next
    is one past the last."""
    for statement in _V8:
        conn.execute(sql.SQL(statement).format(s=schema))


def ticket_space(schema: str) -> int:
    """The first key of a schema's ticket locks (a stable 32-bit hash of its name, apart
    from its threads' locks)."""
    digest = hashlib.blake2b(f"awaken_trio.tickets:{schema}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


@final
class Numbered(NamedTuple):
    """The seqs a committed transaction's events were given: ``seqs[i - 1]`` is event
    number ``i``'s; ``base`` stands for number 0 (the seq before its first event, or the
    last handed out when it wrote none)."""

    seqs: tuple[int, ...]
    base: int

    def seq(self, number: int) -> int:
        return self.base if number == 0 else self.seqs[number - 1]
