-- Every statement the PostgreSQL store runs, by name (the schema's migrations aside, in
-- ``_schema.py``). ``_queries.py`` reads this file once, at import: each statement starts
-- with a ``-- name --`` line and the comment lines that say why it is written so; the
-- comments are not sent. ``{s}`` is the store's schema and ``{channel}`` its notification
-- channel (identifiers, quoted when a store is made); the other names in braces are made
-- from one tuple of columns (``_queries.COLUMNS``) that the rows' encoder reads too, so a
-- statement and the JSON rows it is given cannot disagree on a column's place.
-- Parameters are psycopg's: %s, %b (binary: arrays) and %(name)s.


-- server_now --
-- The server's clock, in seconds: leases are measured by it.
SELECT extract(epoch FROM clock_timestamp());

-- configure --
-- Every pooled connection, once: no JIT compilation. The store's statements are short (by
-- key, or a batch's rows), but the planner's cost of one can pass the JIT thresholds when
-- it misjudges a table's size, and compiling then took a second (measured: 1.1 s of JIT
-- for a 40 ms look for work, with PostgreSQL's default ``jit = on``).
SET jit = off;


-- ============================================================================ a write's reads

-- lock_threads --
-- One statement for every lock, taken in the keys' order (the array's: unnest yields it in
-- order, and each row's lock is taken as the row is produced).
SELECT pg_advisory_xact_lock(%s, k) FROM unnest(%b::int[]) AS k;

-- rows --
-- Reads by key probe the index once per key, in the keys' order: a LATERAL subquery that
-- locks (or has an OFFSET) is not merged into a join, so the planner cannot choose to scan
-- the whole table instead. It would whenever its statistics say the table is small, as
-- they do in a young store that grows fast; with ``= ANY(...)`` such a scan read every run
-- for a batch of a few dozen (2 ms at 3,000 runs, measured).
SELECT r.* FROM unnest(%b::text[]) AS k(id) CROSS JOIN LATERAL
  (SELECT {row_columns} FROM {s}.runs WHERE run_id = k.id FOR UPDATE) r;

-- claims --
-- Claims by run, locked.
SELECT run_id, owner, epoch, lease_until FROM {s}.claims WHERE run_id = ANY(%b) FOR UPDATE;

-- live --
-- The live attempts on threads, by key (as `rows`).
SELECT o.* FROM unnest(%b::text[]) AS k(id) CROSS JOIN LATERAL
  (SELECT thread_id, run_id, root_run_id, attempt_epoch FROM {s}.runs
   WHERE attempt_epoch IS NOT NULL AND thread_id = k.id OFFSET 0) o;

-- unended --
-- The runs on a thread that have not ended, oldest first (read after the thread's lock is
-- taken: a start that rejects or supersedes on a busy thread; schema version 10's partial
-- index holds these rows alone).
SELECT run_id FROM {s}.runs WHERE thread_id = %s AND kind <> 'ended' ORDER BY created;

-- stored_commands --
-- The stored commands of the runs a batch starts an attempt of, or ends.
SELECT id, run_id, kind, payload, delivered, reason, at FROM {s}.inbox
WHERE run_id = ANY(%b) ORDER BY id;

-- children --
-- A run's children, oldest first.
SELECT run_id FROM {s}.runs WHERE parent_run_id = %s ORDER BY created;

-- children_of --
-- The children of many runs, oldest first.
SELECT parent_run_id, run_id FROM {s}.runs WHERE parent_run_id = ANY(%b) ORDER BY created;

-- stream_heads --
-- The last chunk of each channel of the runs a batch streams on or ends: read after their
-- rows are locked, so no other writer numbers their chunks meanwhile.
SELECT DISTINCT ON (run_id, channel) run_id, channel, last_offset, generation, keep
FROM {s}.stream_chunks WHERE run_id = ANY(%b) ORDER BY run_id, channel, last_offset DESC;

-- expired_claims --
-- The claims recovery takes: a claim being renewed, released or recovered by another
-- transaction is left to it.
SELECT run_id, owner, epoch, lease_until FROM {s}.claims WHERE lease_until < %s
ORDER BY lease_until, run_id FOR UPDATE SKIP LOCKED;


-- ============================================================================ a write's writes

-- insert_runs --
-- Many rows in one statement: the rows are one JSON array of arrays (one parameter, as
-- cheap to send for a hundred rows as for one), in order: queue places and creation order
-- follow it (a SELECT's volatile expressions are evaluated after its ORDER BY). As jsonb,
-- parsed once: ``->>`` on ``json`` parses the element's text again for every field it
-- takes (0.67 against 0.05 ms for 64 rows of an update, measured).
INSERT INTO {s}.runs ({insert_names})
SELECT {insert_values}
FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS t(j, n) ORDER BY n;

-- update_runs --
-- As `insert_runs`; a given checkpoint, steps or result that is null keeps the run's.
-- The limit is the rows' count, so it keeps them all. It is there for the planner: it
-- takes a parameter's limit for a tenth of the 100 rows it expects of the function, so it
-- probes the primary key once a row rather than scan every run, even when it believes the
-- table small, as it does in a store that grew since the statement was planned.
WITH v AS (
  SELECT {update_values}
  FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS t(j, n) ORDER BY n
  LIMIT %s)
UPDATE {s}.runs AS r SET {update_sets}
FROM v WHERE r.run_id = v.run_id;

-- update_guessed --
-- As `update_runs`, for the runs a transaction ends on a guess that each row is as this
-- store last wrote it (``_known``): each JSON row ends with the id of the transaction that
-- wrote it, a row whose ``xmin`` is no longer that id is not updated, and unless every
-- row was, ``missed`` (schema version 17) raises GUESS_MISSED, so the transaction writes
-- nothing. The update locks each row, in the rows' order (sorted by run): a writer that
-- holds one is waited for, and the row is read again once it commits (its ``xmin`` then
-- that writer's). The claims the transaction is made under were locked before, by the
-- statement with the check of its guess (``insert_guessed``), as every transaction locks
-- claims before rows.
WITH v AS (
  SELECT {update_values}, (j->>-1)::xid AS written_by
  FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS t(j, n) ORDER BY n
  LIMIT %s),
u AS (
  UPDATE {s}.runs AS r SET {update_sets}
  FROM v WHERE r.run_id = v.run_id AND r.xmin = v.written_by
  RETURNING 1)
SELECT {s}.missed('a run the transaction ends was written since this store last wrote it')
WHERE (SELECT count(*) FROM u) <> %s;

-- guessed_held --
-- The check of the claims a transaction written on a guess (``_guess``) is made under (a
-- child's tree's; a step's or an end's of a run this store wrote last, ``_known``), its
-- first statement: each claim is locked, in the runs' order (a read that locks reads the
-- claim's latest version once the lock is taken, whatever the statement's snapshot), then
-- ``missed`` raises GUESS_MISSED unless every one is held by its owner at its epoch with
-- its lease not run out at the clock given (the server's when null) plus the offset.
SELECT {s}.missed('a claim the transaction is made under does not hold')
FROM (
  SELECT count(*) AS held
  FROM unnest(%b::text[], %b::text[], %b::bigint[]) AS h(run_id, owner, epoch)
  CROSS JOIN LATERAL
    (SELECT owner, epoch, lease_until FROM {s}.claims WHERE run_id = h.run_id FOR UPDATE) c
  WHERE c.owner = h.owner AND c.epoch = h.epoch
    AND c.lease_until >= coalesce(%s::float8, extract(epoch FROM clock_timestamp())::float8)
                         + %s::float8) AS x
WHERE x.held <> %s;

-- guessed_quiet --
-- The rest of the check of the runs a transaction ends on a guess (``_known``): none has
-- a stored command or a stream chunk. Sent after `update_guessed`, which locked their
-- rows: a command is stored, and a chunk written, only by a transaction that has locked
-- its run's row, so this statement's snapshot, taken after the locks, holds every one.
SELECT {s}.missed('a run the transaction ends has stored commands or stream chunks')
FROM unnest(%b::text[]) AS k(id)
WHERE EXISTS (SELECT 1 FROM {s}.inbox WHERE run_id = k.id)
   OR EXISTS (SELECT 1 FROM {s}.stream_chunks WHERE run_id = k.id);

-- insert_guessed --
-- The writes of a transaction written on a guess of its reads (``_guess``) with the check
-- of that guess but its claims (`guessed_held`, the statement before), in one statement:
-- ``guessed`` (schema version 16) locks the transaction's threads, then raises
-- ``GUESS_MISSED`` unless no run of the ids in ``absent`` exists, no attempt is live on
-- the threads of ``free`` and ``quiet``, and no run is unended on the threads of ``quiet``
-- (it can check claims too, given them in ``held``: this version gives it none; the guess
-- is one JSON object, ``_guess.guess_json``); it returns the one row the writes are made from,
-- so neither writes before the check has passed. Then the runs, as `insert_runs`, and the
-- claims, as `put_claims` but one JSON array of [run, owner, epoch, lease end] rows (their
-- lease ends relative to the server's clock, read once here, when ``relative``: the
-- transaction's clock started at 0; an infinite one is a string, "inf"). The
-- runs are written before the claims, as `PgTx.flush` writes them: the main query reads
-- the runs' insert, and an insert no query reads runs after the main query.
-- When the runs and claims are all the transaction writes besides its events, this
-- statement and `seal` are sent as one (``_queries.seal_guessed``: this statement's CTEs,
-- then the seal's, whose events are numbered once the runs and claims are written).
WITH g AS MATERIALIZED (
  SELECT {s}.guessed(%(thread_space)s::integer, %(guess)s::jsonb, %(now)s::float8,
    %(offset)s::float8) AS ok),
inserted AS (
  INSERT INTO {s}.runs ({insert_names})
  SELECT {insert_values}
  FROM g, jsonb_array_elements(%(runs)s::jsonb) WITH ORDINALITY AS t(j, n) ORDER BY n
  RETURNING 1),
claimed AS (
  INSERT INTO {s}.claims (run_id, owner, epoch, lease_until)
  SELECT j->>0, j->>1, (j->>2)::bigint, (j->>3)::float8 + CASE WHEN %(relative)s::boolean
    THEN (SELECT extract(epoch FROM clock_timestamp())::float8) + %(offset)s::float8
    ELSE 0 END
  FROM g, jsonb_array_elements(%(claims)s::jsonb) AS t(j)
  ON CONFLICT (run_id) DO UPDATE SET
    owner = EXCLUDED.owner, epoch = EXCLUDED.epoch, lease_until = EXCLUDED.lease_until
  RETURNING 1)
SELECT (SELECT ok FROM g), (SELECT count(*) FROM inserted);

-- drop_claims --
DELETE FROM {s}.claims WHERE run_id = ANY(%b);

-- put_claims --
-- Each run once: ON CONFLICT may not touch a row twice in one statement.
INSERT INTO {s}.claims (run_id, owner, epoch, lease_until)
SELECT * FROM unnest(%b::text[], %b::text[], %b::bigint[], %b::float8[])
ON CONFLICT (run_id) DO UPDATE SET
  owner = EXCLUDED.owner, epoch = EXCLUDED.epoch, lease_until = EXCLUDED.lease_until;

-- drop_tickets --
DELETE FROM {s}.tickets WHERE run_id = ANY(%b);

-- put_tickets --
-- In the order given: a ticket's place among those due at one moment is its put's.
INSERT INTO {s}.tickets (run_id, correlation_id, wake_at)
SELECT r, c, w FROM unnest(%b::text[], %b::text[], %b::float8[])
WITH ORDINALITY AS t(r, c, w, n) ORDER BY n;

-- deliver --
UPDATE {s}.inbox SET delivered = true WHERE id = ANY(%b);

-- consume --
DELETE FROM {s}.inbox WHERE id = ANY(%b);

-- drop_commands --
DELETE FROM {s}.inbox WHERE run_id = ANY(%b);

-- insert_command --
INSERT INTO {s}.inbox (run_id, kind, payload, reason, at)
VALUES (%s, %s, %s, %s, %s) RETURNING id;

-- insert_chunks --
-- A commit's chunks of one channel are one row (their values one JSON array).
INSERT INTO {s}.stream_chunks (run_id, channel, first_offset, last_offset, generation, kind,
  keep, at, chunks)
SELECT * FROM unnest(%b::text[], %b::text[], %b::bigint[], %b::bigint[], %b::bigint[],
  %b::text[], %b::boolean[], %b::float8[], %b::text[]);

-- drop_chunks --
-- A channel not kept, once its run ended: every chunk before its end.
DELETE FROM {s}.stream_chunks c
USING unnest(%b::text[], %b::text[], %b::bigint[]) AS d(run_id, channel, before)
WHERE c.run_id = d.run_id AND c.channel = d.channel AND c.last_offset < d.before;

-- seal --
-- The end of a write transaction, in one statement: count the write in this server
-- process's row, number the events from the sequence in their order, the first with the
-- transaction's ticket (``_queries.EVENTS``: a SELECT's volatile expressions are evaluated
-- after its ORDER BY), keep the checkpoints by the seqs of their events (0: the seq before
-- the transaction's first, or the last handed out when it wrote none), keep the token
-- with the seqs, and leave its notice in the session (``notice`` sends it after COMMIT:
-- ``_tx``'s docstring says why), which it answers too; its answer ends with the
-- transaction's id as a row's ``xmin`` holds it (``_known``). No row is shared with
-- another writer.
WITH w AS (
  INSERT INTO {s}.writes (pid, n) VALUES (pg_backend_pid(), 1)
  ON CONFLICT (pid) DO UPDATE SET n = {s}.writes.n + 1),
b AS (SELECT coalesce(sum(n), 0) AS writes FROM {s}.writes),
e AS (
  INSERT INTO {s}.events ({event_names})
  SELECT {event_values} FROM jsonb_array_elements(%(events)s::jsonb) WITH ORDINALITY
    AS t(j, n) ORDER BY n
  RETURNING seq),
c AS (
  SELECT coalesce(array_agg(seq ORDER BY seq), ARRAY[]::bigint[]) AS seqs,
    coalesce(min(seq) - 1, (SELECT last_value FROM {s}.event_seqs)) AS base FROM e),
h AS (
  INSERT INTO {s}.checkpoints ({history_names})
  SELECT {history_values} FROM c, jsonb_array_elements(%(history)s::jsonb) AS t(j)
  ON CONFLICT (run_id, seq) DO UPDATE SET checkpoint = EXCLUDED.checkpoint),
k AS (
  INSERT INTO {s}.written (token, seq_base, writes, seqs)
  SELECT %(token)s, c.base, b.writes + 1, c.seqs FROM b, c)
SELECT c.base, c.seqs, b.writes, set_config('awaken_trio.notice', %(sender)s
  || CASE WHEN %(ends)s = '' THEN '' ELSE E'\n' || c.base::text || E'\n' || %(ends)s END, false),
  pg_current_xact_id()::xid::text::bigint
FROM b, c;

-- notice --
-- After a write transaction's COMMIT, in its pipeline: the notice its seal left in the
-- session, a NOTIFY on the store's channel, in a transaction of its own. That transaction
-- writes no WAL but its commit record, so the server does not wait for its flush (nor for
-- a standby): the lock every notifying commit takes is held for microseconds, not through
-- a flush (``_tx``'s docstring).
SELECT pg_notify(%s, current_setting('awaken_trio.notice'));

-- settle_seq --
-- Wait until every seq up to a given one is final: at or below the watermark
-- (`PostgresStore.settle`, ``_order``'s docstring).
SELECT {s}.await_seq(%s, %s);

-- forget_writers --
-- Now and then: the rows of server processes that ended, folded into row 0 (the sum
-- stays as it was).
WITH gone AS (
  DELETE FROM {s}.writes w WHERE w.pid <> 0
    AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = w.pid)
  RETURNING n)
UPDATE {s}.writes SET n = n + (SELECT coalesce(sum(n), 0) FROM gone) WHERE pid = 0;

-- forget_written --
-- Now and then: the tokens of write transactions older than any lost answer.
DELETE FROM {s}.written WHERE at < now() - interval '1 day';


-- ============================================================================ a lost commit

-- terminate --
-- End the server process that ran a commit whose answer was lost.
SELECT pg_terminate_backend(%s);

-- still_running --
SELECT 1 FROM pg_stat_activity WHERE pid = %s;

-- was_written --
-- Whether a write transaction committed, by its token: its events' seqs and base, and
-- the writes count with it.
SELECT seqs, seq_base, writes FROM {s}.written WHERE token = %s;


-- ============================================================================ reads

-- load --
-- A run's record.
SELECT {record_columns} FROM {s}.runs r WHERE r.run_id = %s;

-- events --
-- Every run's events after a cursor, up to the watermark (``_order``'s docstring).
SELECT {event_columns} FROM {s}.events_after(%s, %s, NULL, %s);

-- events_of_run --
-- One run's events after a cursor: every one committed, with no watermark (one run's
-- commits are numbered in the order they commit: ``_order``'s docstring).
SELECT {event_columns} FROM {s}.events WHERE run_id = %s AND seq > %s ORDER BY seq LIMIT %s;

-- step_events --
-- A run's journaled steps (ctx.step): the literal kind lets the planner read them from the
-- partial index events_steps, which holds step events alone.
SELECT {event_columns} FROM {s}.events WHERE run_id = %s AND kind = 'step' ORDER BY seq;

-- queued --
-- Queued named root runs nobody holds a live claim on, that no other runtime's look
-- reserved a moment ago, whose thread no other run's live attempt occupies, oldest run
-- first (the order they were created). A run another transaction has locked (most often
-- another worker looking or claiming it now) is skipped, so workers looking at once are
-- handed different runs. (OFFSET 0 and the scalar subqueries: asked of each candidate,
-- through the index of live attempts by thread and the claims' and the reservations' keys,
-- not made into a join that reads every run, claim or reservation to find them: measured,
-- a join made a look over a backlog of 5,000 runs cost ten times as much. A claim is read
-- by its key alone and its lease compared outside, so the index of leases is no choice.)
-- A run whose not_before (a delayed start, a retry's wait) is later than now (the
-- runtime's clock) is passed over, read from the same walk of the queue. Each run comes as
-- the row a write transaction reads (``rows``), then the columns of its record the row does
-- not hold (``HELD_RECORD``): a look that holds its runs for their starts (``_held``) hands
-- its transaction the rows it locked.
SELECT {held_row_columns}, {held_record_columns} FROM {s}.runs r
WHERE r.queued_order IS NOT NULL AND r.name = ANY(%(names)b)
  AND (r.not_before IS NULL OR r.not_before <= %(now)s)
  AND coalesce((SELECT c.lease_until FROM {s}.claims c WHERE c.run_id = r.run_id),
    '-infinity') < %(lease_now)s
  AND NOT EXISTS (SELECT 1 FROM {s}.reserved v WHERE v.run_id = r.run_id
    AND v.generation = r.generation AND v.until >= %(lease_now)s AND v.by <> %(by)s OFFSET 0)
  AND NOT EXISTS (SELECT 1 FROM {s}.runs o
    WHERE o.thread_id = r.thread_id AND o.attempt_epoch IS NOT NULL AND o.run_id <> r.run_id
    AND (SELECT c.lease_until FROM {s}.claims c WHERE c.run_id = o.root_run_id
      AND c.epoch = o.attempt_epoch) >= %(lease_now)s OFFSET 0)
ORDER BY r.created LIMIT %(limit)s FOR UPDATE OF r SKIP LOCKED;

-- due --
-- Awaiting named root runs whose scheduled resume is due, oldest due first (as `queued`:
-- the row, then the rest of the record).
SELECT {held_row_columns}, {held_record_columns} FROM {s}.tickets t
JOIN {s}.runs r ON r.run_id = t.run_id
WHERE t.wake_at IS NOT NULL AND t.wake_at <= %(now)s
  AND r.parent_run_id IS NULL AND r.name = ANY(%(names)b)
  AND NOT EXISTS (SELECT 1 FROM {s}.reserved v WHERE v.run_id = r.run_id
    AND v.generation = r.generation AND v.until >= %(lease_now)s AND v.by <> %(by)s OFFSET 0)
ORDER BY t.wake_at, t.put_order LIMIT %(limit)s FOR UPDATE OF r SKIP LOCKED;

-- look_async --
-- A look's reservations are hints (a lost one costs a race the rules settle): its commit
-- does not wait for the WAL flush. And its statements are planned for the tables as they
-- are at each look, not with the plan a connection keeps of a statement after its first
-- runs: one made while the claims were none walked every claim for each candidate once
-- they were many (a look by the second of two workers holding 1,024 runs each cost twice
-- what it does planned anew; planning it costs 0.2 ms, once a look).
SELECT set_config('synchronous_commit', 'off', true),
  set_config('plan_cache_mode', 'force_custom_plan', true);

-- look_held --
-- A look that holds its runs (``_held``) commits with the starts written in its
-- transaction, so with the WAL flush; its own statements are planned as `look_async`'s.
-- And the server ends its session should it stay idle in the transaction past the
-- milliseconds given (its process stopped or stuck): its locks go with it. The plan mode
-- it replaces comes back, for `look_held_done` to put back.
SELECT current_setting('plan_cache_mode'),
  set_config('plan_cache_mode', 'force_custom_plan', true),
  set_config('idle_in_transaction_session_timeout', %s, true);

-- look_held_done --
-- The statements after a held look's, the starts' writes among them, are planned as every
-- other transaction's: the plan mode `look_held` replaced is put back. (Read from
-- ``pg_settings``, the mode cost the server a quarter of a millisecond a look: the view
-- makes a row of every setting the server has.)
SELECT set_config('plan_cache_mode', %s, true);

-- claims_skip_locked --
-- The claims of the runs a held look locked (stale ones: a queued run holds no live
-- claim), each locked unless another transaction has (it is renewing, releasing or
-- recovering it): those are not returned, and `claims_present` tells them from none.
-- (Claims are locked before rows in every other transaction; this one skips rather than
-- waits, so it waits for no transaction that waits for it.)
SELECT run_id, owner, epoch, lease_until FROM {s}.claims WHERE run_id = ANY(%b)
FOR UPDATE SKIP LOCKED;

-- claims_present --
SELECT run_id FROM {s}.claims WHERE run_id = ANY(%b);

-- try_lock_threads --
-- The threads of a held look's runs, each lock taken if no other transaction holds it
-- (``lock_threads`` waits; this never does): the keys whose lock was not taken.
SELECT k FROM unnest(%b::int[]) AS k WHERE NOT pg_try_advisory_xact_lock(%s, k);

-- reserved_by_others --
-- Of the runs a look locked, those another look reserved: read in a statement of its own,
-- after the locks, so it sees a reservation committed after the look's first statement
-- began (its rows were unlocked when that look committed, and this look then took them).
SELECT v.run_id FROM {s}.reserved v JOIN {s}.runs r ON r.run_id = v.run_id
WHERE v.run_id = ANY(%(ids)b) AND v.generation = r.generation
  AND v.until >= %(lease_now)s AND v.by <> %(by)s;

-- reserve --
-- The runs a look hands out, taken out of other runtimes' looks until a moment passes
-- (their rows are locked by the look, so no other look read them meanwhile).
-- A reservation holds for the run's generation as it was handed out: once the run is
-- claimed and runs (its generation moves on), a look later finds it free again.
INSERT INTO {s}.reserved (run_id, by, until, generation)
SELECT r.run_id, %(by)s, %(until)s, r.generation FROM {s}.runs r WHERE r.run_id = ANY(%(ids)b)
ON CONFLICT (run_id) DO UPDATE SET
  by = EXCLUDED.by, until = EXCLUDED.until, generation = EXCLUDED.generation;

-- forget_reserved --
-- Now and then: reservations that have passed.
DELETE FROM {s}.reserved WHERE until < %s;

-- past_deadline --
-- Root runs past a time limit that no attempt runs (DeadlineStore.overdue), in one
-- statement: queued or awaiting ones past their deadline, then queued ones that never
-- started past their queue deadline, each read from the partial index that holds its
-- candidates alone (the conditions repeat the indexes' own so the planner can use them), up
-- to now, at most a batch; then one row with the earliest limit still to come.
(SELECT 'deadline' AS limit_kind, NULL::float8 AS next_at, {record_columns} FROM {s}.runs r
 WHERE r.deadline IS NOT NULL AND r.parent_run_id IS NULL
   AND r.kind IN ('queued', 'awaiting') AND r.deadline <= %(now)s
 ORDER BY r.deadline LIMIT %(limit)s)
UNION ALL
(SELECT 'queue_timeout', NULL, {record_columns} FROM {s}.runs r
 WHERE r.queue_deadline IS NOT NULL AND r.parent_run_id IS NULL AND r.kind = 'queued'
   AND r.generation = 0 AND r.queue_deadline <= %(now)s
 ORDER BY r.queue_deadline LIMIT %(limit)s)
UNION ALL
SELECT 'next', LEAST(
  (SELECT min(r.deadline) FROM {s}.runs r WHERE r.deadline IS NOT NULL
     AND r.parent_run_id IS NULL AND r.kind IN ('queued', 'awaiting')
     AND r.deadline > %(now)s),
  (SELECT min(r.queue_deadline) FROM {s}.runs r WHERE r.queue_deadline IS NOT NULL
     AND r.parent_run_id IS NULL AND r.kind = 'queued' AND r.generation = 0
     AND r.queue_deadline > %(now)s)), {record_nulls};

-- list_runs --
-- Runs newest first; {where} is the filters a call asks for, joined in when it is made
-- (`_reads.list_runs`).
SELECT {record_columns} FROM {s}.runs r {where} ORDER BY r.created DESC LIMIT %(limit)s;

-- count_runs --
-- Unended runs by kind, ended ones by cause: each half reads its partial index alone
-- (runs_unended, runs_by_cause); the ended count is the sum of the causes'.
SELECT kind, count(*) FROM {s}.runs WHERE kind <> 'ended' GROUP BY kind
UNION ALL
SELECT cause, count(*) FROM {s}.runs WHERE cause IS NOT NULL GROUP BY cause;

-- states --
-- By key, one index probe per key (as `rows`: why there).
SELECT x.* FROM unnest(%b::text[]) AS k(id) CROSS JOIN LATERAL
  (SELECT run_id, state FROM {s}.runs WHERE run_id = k.id OFFSET 0) x;

-- commands --
SELECT id, run_id, kind, payload, reason, at FROM {s}.inbox
WHERE id > %s AND run_id = ANY(%b) ORDER BY id;

-- last_event --
SELECT max(seq) FROM {s}.events WHERE run_id = %s;

-- event_exists --
SELECT 1 FROM {s}.events WHERE run_id = %s AND seq = %s;

-- history_from --
SELECT history_from FROM {s}.runs WHERE run_id = %s;

-- checkpoint --
SELECT checkpoint FROM {s}.checkpoints WHERE run_id = %s AND seq <= %s
ORDER BY seq DESC LIMIT 1;

-- writes --
-- The count of write transactions: every server process's row, in one snapshot.
SELECT coalesce(sum(n), 0) FROM {s}.writes;

-- look_commands --
-- A look's reads, skipped by the server when no write landed since the last (the count
-- the store last knew) unless asked to read anyway.
SELECT id, run_id, kind, payload, reason, at FROM {s}.inbox
WHERE (%(anyway)s OR (SELECT coalesce(sum(n), 0) FROM {s}.writes) <> %(known)s)
  AND id > %(after)s AND run_id = ANY(%(ids)b) ORDER BY id;

-- look_ended --
SELECT x.* FROM unnest(%(running)b::text[]) AS k(id) CROSS JOIN LATERAL
  (SELECT run_id, state FROM {s}.runs WHERE run_id = k.id AND kind = 'ended' OFFSET 0) x
WHERE %(anyway)s OR (SELECT coalesce(sum(n), 0) FROM {s}.writes) <> %(known)s;

-- run_kind --
SELECT kind FROM {s}.runs WHERE run_id = %s;

-- chunk_page --
-- The rows holding a channel's chunks after an offset, up to the offset plus a page.
SELECT first_offset, generation, kind, at, chunks FROM {s}.stream_chunks
WHERE run_id = %s AND channel = %s AND last_offset > %s AND first_offset <= %s
ORDER BY last_offset;

-- chunk_first_after --
-- The first row after an offset, when none starts within the page (the chunks between
-- were deleted).
SELECT first_offset, generation, kind, at, chunks FROM {s}.stream_chunks
WHERE run_id = %s AND channel = %s AND last_offset > %s ORDER BY last_offset LIMIT 1;

-- chunk_last --
SELECT max(last_offset) FROM {s}.stream_chunks WHERE run_id = %s AND channel = %s;

-- stream_channels --
-- A run's channels, in the order of their first kept chunk.
SELECT channel FROM {s}.stream_chunks WHERE run_id = %s GROUP BY channel
ORDER BY min(at), channel;

-- any_expired --
-- Most recovery passes find nothing: a read says so without a write transaction.
SELECT EXISTS (SELECT 1 FROM {s}.claims WHERE lease_until < %s);


-- ============================================================================ retention

-- prunable --
-- The runs of ended trees whose root's last event is older than the cutoff.
SELECT m.run_id FROM {s}.runs m WHERE m.root_run_id IN (
  SELECT r.run_id FROM {s}.runs r
  WHERE r.parent_run_id IS NULL AND r.kind = 'ended'
    AND (SELECT e.at FROM {s}.events e WHERE e.run_id = r.run_id
         ORDER BY e.seq DESC LIMIT 1) <= %s
    AND NOT EXISTS (SELECT 1 FROM {s}.runs o WHERE o.root_run_id = r.run_id
         AND o.kind <> 'ended'));

-- prune --
-- Delete the runs and everything of theirs.
WITH e AS (DELETE FROM {s}.events WHERE run_id = ANY(%(ids)b)),
t AS (DELETE FROM {s}.tickets WHERE run_id = ANY(%(ids)b)),
i AS (DELETE FROM {s}.inbox WHERE run_id = ANY(%(ids)b)),
c AS (DELETE FROM {s}.claims WHERE run_id = ANY(%(ids)b)),
h AS (DELETE FROM {s}.checkpoints WHERE run_id = ANY(%(ids)b)),
k AS (DELETE FROM {s}.stream_chunks WHERE run_id = ANY(%(ids)b)),
v AS (DELETE FROM {s}.reserved WHERE run_id = ANY(%(ids)b))
DELETE FROM {s}.runs WHERE run_id = ANY(%(ids)b);


-- ============================================================================ the listener

-- listen --
LISTEN {channel};

-- ping --
-- The listener's own notice: heard back, its connection is alive.
SELECT pg_notify(%s, %s);

-- register_worker --
-- A serving runtime's row (DESIGN §3.11), replaced when one registers again with its id.
-- One row by key: no lock beyond it.
INSERT INTO {s}.workers (worker_id, host, pid, state, started_at, last_seen, bodies,
  concurrency, active, lease)
VALUES (%(worker_id)s, %(host)s, %(pid)s, 'serving', %(now)s, %(now)s, %(bodies)s,
  %(concurrency)s, 0, %(lease)s)
ON CONFLICT (worker_id) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid,
  state = 'serving', started_at = EXCLUDED.started_at, last_seen = EXCLUDED.last_seen,
  bodies = EXCLUDED.bodies, concurrency = EXCLUDED.concurrency, active = 0,
  lease = EXCLUDED.lease;

-- worker_seen --
-- The worker was seen now (with a renewal, in its transaction; or alone, holding no
-- claim); its stored state. By key.
UPDATE {s}.workers SET last_seen = %(now)s, active = %(active)s
WHERE worker_id = %(worker_id)s RETURNING state;

-- worker_state --
SELECT state FROM {s}.workers WHERE worker_id = %s;

-- list_workers --
-- Every worker, the most recently started first.
SELECT {worker_columns} FROM {s}.workers ORDER BY started_at DESC, worker_id;

-- list_live_workers --
-- The workers that have not stopped, through the partial index workers_live, however
-- many stopped ones are kept.
SELECT {worker_columns} FROM {s}.workers WHERE state <> 'stopped'
ORDER BY started_at DESC, worker_id;

-- drain_worker --
-- Ask a serving worker to drain; the row after (a worker in any other state is left).
UPDATE {s}.workers SET state = CASE WHEN state = 'serving' THEN 'draining' ELSE state END
WHERE worker_id = %s RETURNING {worker_columns};

-- end_worker --
UPDATE {s}.workers SET state = 'stopped', last_seen = %(now)s, active = 0
WHERE worker_id = %(worker_id)s;

-- forget_workers --
-- Ended workers kept long enough (stopped, or not seen since): through workers_by_seen.
DELETE FROM {s}.workers WHERE last_seen < %s;
