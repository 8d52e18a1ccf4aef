"""The PostgreSQL store's listener: one dedicated connection that ``LISTEN``s on the store's
channel, so a runtime learns at once that another one committed (a new queued run, a
command for a run it owns, events its followers wait for).

A notice is only a hint: the stored rows are the truth, and the runtime still looks at the
store now and then without one (``worker/_relay.py``). What the listener guarantees:

* it never trusts a quiet connection: every `PING_EVERY` seconds it ``NOTIFY``s itself, and
  a ping not heard back within `PING_WAIT` seconds means the connection is dead (a
  half-open TCP connection looks exactly like a quiet one);
* a connection that broke is made again, with backoff (logged at INFO on
  ``awaken_trio.store``), and the wait then answers True: what was sent meanwhile was not
  heard, so the runtime must look again at everything it owns.

`Listener.wait` blocks, so it runs in a worker thread; one thread at a time uses the
connection (a lock), and a wait whose Trio caller was cancelled returns within `SLICE`
seconds (`threading.Event`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Final, final

import psycopg

from ..._core import Backoff, Ended, HeardEnd, safe_repr
from ..._redact import redact_secret
from .._codec import CodecError, state_from_json
from ._queries import Queries

logger = logging.getLogger("awaken_trio.store")

PING_EVERY: Final = 5.0
PING_WAIT: Final = 2.0
SLICE: Final = 0.25
"""Seconds: how often a blocked wait looks whether its caller went away."""
OWN_PAUSE: Final = 0.005
"""Seconds the listener rests after hearing its own runtime's commit, before it reads the
next notices. Every commit notifies every listener, this runtime's own too; woken once a
commit, the listening thread took about 0.17 ms of a 1.4 ms awaited ``start`` on two
cores (its wake and the GIL, at the moment the commit's answer comes back). After the
rest it reads every notice that came meanwhile at once. Another runtime's notice heard
then (a cancel for a run here) waits at most this long more, and only while this runtime
is committing."""

APPLICATION_NAME: Final = "awaken_trio listener"
"""The listener connection's ``application_name`` (``pg_stat_activity`` shows it)."""
RECONNECT: Final = Backoff(0.0625, 2.0)
"""The waits before the listener connects again, after failures in a row."""
HEARD_AT_MOST: Final = 1_000
"""The most announced ends kept for the relay (`Listener.take_heard`)."""
CONTROL: Final = " control"
"""Ends the NOTIFY payload (the sender) of a transaction that controls a run another
runtime may be running (it stored a command, or ended a run whose attempt is live), so an
owner resting between looks at the store comes back for it at once."""
STREAM: Final = " stream"
"""Follows the sender in the NOTIFY payload (before `CONTROL`) of a transaction that wrote
stream chunks, so readers of streams in other runtimes are woken at once (`on_stream`),
whatever the relay is waiting for."""


@final
class Listener:
    def __init__(self, conninfo: str, queries: Queries, sender: str, shown: str) -> None:
        self._conninfo = conninfo
        self._queries = queries
        self._channel = queries.channel
        self._sender = sender
        self._shown = shown
        self._ping = f"ping:{uuid.uuid4().hex}"
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._failures = 0
        self._pinged_at: float | None = None
        self._heard_at = time.monotonic()
        self._closed = False
        # A change heard by a wait whose caller had gone away: the next wait answers it.
        self._pending = False
        # Ends announced by other runtimes' commits, until the relay takes them.
        self._heard_lock = threading.Lock()
        self._heard: list[HeardEnd] = []
        self.reconnects = 0
        """How many times a connection was made again after one broke."""
        self.on_stream: Callable[[], None] | None = None
        """Called (in the listening thread) for every notice of another runtime's commit
        that wrote stream chunks."""

    def _connect(self) -> bool:
        try:
            conn = psycopg.connect(
                self._conninfo,
                autocommit=True,
                connect_timeout=5,
                application_name=APPLICATION_NAME,
            )
            conn.execute(self._queries.listen)
        except psycopg.Error as exc:
            pause = RECONNECT.wait(self._failures)
            if self._failures == 0:
                logger.info(
                    "store listener: cannot connect to %s, trying again: %s",
                    self._shown,
                    _scrub(exc, self._conninfo),
                )
            self._failures += 1
            time.sleep(pause)
            return False
        if self._failures or self.reconnects or self._conn is not None:
            logger.info("store listener: connected again to %s", self._shown)
        self._failures = 0
        self._conn = conn
        self._pinged_at = None
        self._heard_at = time.monotonic()
        return True

    def _drop(self, why: str) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            logger.info(
                "store listener: connection to %s lost (%s); connecting again", self._shown, why
            )
            self.reconnects += 1
            conn.close()

    def wait(self, timeout: float, abandoned: threading.Event, *, control: bool = False) -> bool:
        """Until another store committed (True), or ``timeout`` seconds passed (False).
        True as well after the connection was made again (anything may have been missed),
        and as soon as ``abandoned`` is set (the caller went away). With ``control``, only
        a commit marked `CONTROL` ends the wait; another one is kept for the next wait,
        which answers it at once."""
        deadline = time.monotonic() + timeout
        with self._lock:
            if self._pending and not control:
                self._pending = False
                return True
            first = self._conn is None
            while not (abandoned.is_set() or self._closed):
                conn = self._conn
                if conn is None or conn.closed:
                    if not self._connect():
                        if time.monotonic() >= deadline:
                            return False
                        continue
                    if not first:
                        self._pending = abandoned.is_set()
                        return True
                    first = False
                    continue
                now = time.monotonic()
                try:
                    if self._pinged_at is None and now - self._heard_at >= PING_EVERY:
                        conn.execute(self._queries.ping, (self._channel, self._ping))
                        self._pinged_at = now
                    elif self._pinged_at is not None and now - self._pinged_at > PING_WAIT:
                        self._drop("a ping was not heard back")
                        continue
                    left = deadline - now
                    if left <= 0:
                        return False
                    # One packet's notices at a time, each of them read (a notice left
                    # in a packet when the generator is closed is lost).
                    own = woke = False
                    for notice in conn.notifies(timeout=min(left, SLICE), stop_after=1):
                        self._heard_at = time.monotonic()
                        payload = notice.payload
                        if payload == self._ping:
                            self._pinged_at = None
                            continue
                        head, _, ends = payload.partition("\n")
                        if head.startswith(self._sender):
                            own = True  # our own commit
                            continue
                        if STREAM in head:
                            self._heard_stream()
                        if ends:
                            self._hear(ends)
                        if control and not head.endswith(CONTROL):
                            self._pending = True
                        else:
                            woke = True
                    if woke:
                        if abandoned.is_set():
                            self._pending = True
                        return True
                    if own:
                        # Let this runtime's next commits' notices gather in the socket:
                        # they are read together after the rest, not with a wake each.
                        abandoned.wait(min(OWN_PAUSE, max(deadline - time.monotonic(), 0.0)))
                except psycopg.Error as exc:
                    self._drop(_scrub(exc, self._conninfo))
            return True

    def _hear(self, text: str) -> None:
        """Keep the ends a notice announced (``<seq>\\n<JSON array>``: see
        ``_tx._announced``) for `take_heard`."""
        try:
            seq, _, rows = text.partition("\n")
            after_seq = int(seq)
            heard = []
            for run_id, epoch, state in json.loads(rows):
                end = state_from_json(state)
                if isinstance(end, Ended) and type(run_id) is str and type(epoch) is int:
                    heard.append(HeardEnd(run_id, end, epoch, after_seq))
        except (ValueError, TypeError, CodecError) as exc:
            # Not one of ours (anyone may NOTIFY on the channel): the store is read anyway.
            logger.debug("store listener: ignoring a notice it cannot read: %s", safe_repr(exc))
            return
        with self._heard_lock:
            self._heard.extend(heard)
            # Nobody took them for a while: the oldest go (the store's reads find them).
            del self._heard[:-HEARD_AT_MOST]

    def _heard_stream(self) -> None:
        on_stream = self.on_stream
        if on_stream is not None:
            try:
                on_stream()
            except Exception as exc:  # a hint only: readers look again anyway
                logger.debug("store listener: a stream notice was not passed on: %r", exc)

    def take_heard(self) -> list[HeardEnd]:
        """The ends heard of since the last call, oldest first (non-blocking)."""
        with self._heard_lock:
            heard, self._heard = self._heard, []
        return heard

    def close(self) -> None:
        self._closed = True
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()


def _scrub(exc: BaseException, conninfo: str) -> str:
    """An error's text without the connection's password, wherever libpq put it."""
    try:
        password = psycopg.conninfo.conninfo_to_dict(conninfo).get("password")
    except psycopg.Error:
        password = None
    return redact_secret(safe_repr(exc), None if password is None else str(password))


scrub = _scrub
