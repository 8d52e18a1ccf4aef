"""A worker process for ``bench_postgres.py --only cancel --breakdown``: the test worker
(``tests/multiprocess/worker_process.py``) with the moments a cancel from another process
passes through on PostgreSQL written down, so the benchmark can say where its time goes.

    python benchmarks/_cancel_owner.py <store-url> [worker_process.py's arguments]

It serves the body ``traced_reporter``: it prints ``running <run_id>`` when it runs; when
its cancellation reaches it, it prints one ``trace <point> <time>`` line for each moment
noted since the last cancel, then ``cancelled <run_id> <time>``. The points (``time.time()``,
the clock the canceller reads too):

- ``waiting``: a `Listener.wait` began (the listener thread reads notices from then on);
- ``read``: the listener thread read a notice of a commit that controls a run (its
  payload's head ends with ``control``); ``notice:<head>``: another notice (its head's
  first characters: the sender's);
- ``returned``: that wait returned, in the listener thread;
- ``resumed``: the relay's Trio task ran again and took the ends heard (``_stop_heard``);
- ``look``/``looked``: a relay's look at the store began / ended (``look_ended`` when the
  look itself found an end committed elsewhere).

Nothing is printed while the cancel travels: each point is a list append.

    python benchmarks/_cancel_owner.py --floor <store-url>

is the floor beside it: a Trio program whose worker thread waits on a ``LISTEN``ing psycopg
connection (channel `FLOOR_CHANNEL`), as the store's listener does, and prints ``heard
<payload> <time>`` once the Trio task the notice wakes runs again: what any durable signal
from another process costs to reach a Trio task through this server, with no store. It
exits once the process that started it is gone.
"""

from __future__ import annotations

import os
import runpy
import sys
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from awaken_trio import JsonValue, RunContext  # noqa: E402
from awaken_trio.store.postgres import _listen  # noqa: E402
from awaken_trio.worker import _relay  # noqa: E402
from tests.multiprocess import mp_bodies  # noqa: E402

WORKER = ROOT / "tests" / "multiprocess" / "worker_process.py"

POINTS: list[tuple[str, float]] = []
FLOOR_CHANNEL = "cancel_floor"


def _note(point: str) -> None:
    POINTS.append((point, time.time()))


def _trace_notifies() -> None:
    notifies = psycopg.Connection.notifies

    def traced(self: Any, **kwargs: Any) -> Generator[psycopg.Notify]:
        for notice in notifies(self, **kwargs):
            head = notice.payload.partition("\n")[0]
            _note("read" if head.endswith(_listen.CONTROL) else f"notice:{head[:6]}")
            yield notice

    psycopg.Connection.notifies = traced  # type: ignore[method-assign]


def _trace_listener() -> None:
    wait = _listen.Listener.wait

    def traced(self: _listen.Listener, *args: Any, **kwargs: Any) -> bool:
        _note("waiting")
        try:
            return wait(self, *args, **kwargs)
        finally:
            _note("returned")

    _listen.Listener.wait = traced  # type: ignore[method-assign]


def _trace_relay() -> None:
    relay = _relay.StoreRelay
    stop_heard, look, relayed = relay._stop_heard, relay._look, relay._relay

    def traced_stop(self: _relay.StoreRelay) -> None:
        _note("resumed")
        stop_heard(self)

    async def traced_look(self: _relay.StoreRelay) -> bool:
        _note("look")
        try:
            return await look(self)
        finally:
            _note("looked")

    def traced_relay(self: _relay.StoreRelay, found: Any, watched: Any) -> bool:
        if found.ended:
            _note("look_ended")
        return relayed(self, found, watched)

    relay._stop_heard = traced_stop  # type: ignore[method-assign]
    relay._look = traced_look  # type: ignore[method-assign]
    relay._relay = traced_relay  # type: ignore[method-assign,assignment]


async def traced_reporter(ctx: RunContext) -> JsonValue:
    """As ``mp_bodies.reporter``, printing the points noted since the last cancel first."""
    print(f"running {ctx.run_id}", flush=True)
    try:
        await trio.sleep_forever()
    finally:
        observed = time.time()
        points, POINTS[:] = list(POINTS), []
        for point, at in points:
            print(f"trace {point} {at!r}")
        print(f"cancelled {ctx.run_id} {observed!r}", flush=True)


async def floor(url: str) -> None:
    """Print ``heard <payload> <time>`` for each notice on `FLOOR_CHANNEL`, from the Trio
    task a worker thread's wait wakes (``ready`` first, once listening)."""
    conn = psycopg.connect(url, autocommit=True)
    conn.execute(f"LISTEN {FLOOR_CHANNEL}")
    print("ready floor", flush=True)

    def wait() -> str | None:
        for notice in conn.notifies(timeout=0.5, stop_after=1):
            return notice.payload
        return None

    parent = os.getppid()
    while os.getppid() == parent:  # (it exits once the process that started it is gone)
        payload = await trio.to_thread.run_sync(wait)
        if payload is not None:
            print(f"heard {payload} {time.time()!r}", flush=True)


def main() -> None:
    if sys.argv[1] == "--floor":
        trio.run(floor, sys.argv[2])
        return
    _trace_notifies()
    _trace_listener()
    _trace_relay()
    # The worker registers the bodies of this module (the same module object it imports).
    mp_bodies.BODIES["traced_reporter"] = traced_reporter
    sys.argv[0] = str(WORKER)
    runpy.run_path(str(WORKER), run_name="__main__")


if __name__ == "__main__":
    main()
