"""A worker process for the multi-process tests: it opens a runtime on a store URL with the
test bodies registered, serves, and prints ``ready`` once it is claiming.

    python worker_process.py <store-url> [--lease S] [--poll S] [--concurrency N]
                             [--max-recoveries N] [--name NAME] [--clock-offset S]
                             [--gate] [--agents]

``--clock-offset`` sets the runtime's ``clock=`` that many seconds off the machine's wall
clock (a host whose clock is wrong). ``--gate`` makes it print ``ready`` with its runtime
open and serve only once a line comes on its stdin (a benchmark starts several workers on
one backlog at one moment). ``--agents`` serves the pydantic-ai agents of ``mp_agents.py``
too.

Once its runtime is open it freezes its startup heap out of garbage collection, as
``awaken-trio worker`` does. Every line it prints is flushed, so a test reads them as they
come. It exits by itself (releasing its claims) when the process that started it is gone,
so a test process that dies leaves no worker behind.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import contextlib

from awaken_trio import open_runtime
from awaken_trio._core import Body
from awaken_trio._heap import settle_heap
from tests.multiprocess.mp_bodies import BODIES


async def main(args: argparse.Namespace) -> None:
    async with (
        open_runtime(
            args.store,
            clock=lambda: time.time() + args.clock_offset,
            bodies=_bodies(args.agents),
            lease=args.lease,
            poll=args.poll,
            max_recoveries=args.max_recoveries,
        ) as runtime,
        trio.open_nursery() as nursery,
    ):
        settle_heap(args.concurrency)  # as ``awaken-trio worker`` does once it has started
        if args.gate:
            print(f"ready {args.name}", flush=True)
            if not await trio.wrap_file(sys.stdin).readline():
                return  # the starting process is gone before opening the gate
        await nursery.start(
            lambda task_status: runtime.serve(concurrency=args.concurrency, task_status=task_status)
        )
        if not args.gate:
            print(f"ready {args.name}", flush=True)
        nursery.start_soon(_stop_on_sigterm, nursery.cancel_scope)
        parent = os.getppid()
        while True:  # a pipe would do too, but a killed test may leave its pipes open
            await trio.sleep(0.5)
            if os.getppid() != parent:
                nursery.cancel_scope.cancel()
                return
    # The runtime has closed: its claims are released (a deploy's SIGTERM ends here).
    print(f"released {args.name}", flush=True)


def _bodies(agents: bool) -> dict[str, Body]:
    """The test bodies, and with ``--agents`` the pydantic-ai ones too (imported here, before
    serving: pydantic-ai takes a second or more to import, which would block a run)."""
    if not agents:
        return BODIES
    from tests.multiprocess.mp_agents import AGENT_BODIES

    return {**BODIES, **AGENT_BODIES}


async def _stop_on_sigterm(scope: trio.CancelScope) -> None:
    """SIGTERM, as a deploy sends it: stop serving and leave the runtime, which releases
    this worker's claims (its runs go back to Queued for another worker)."""
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async for _ in signals:
            scope.cancel()
            return


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("--lease", type=float, default=1.0)
    parser.add_argument("--poll", type=float, default=0.02)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-recoveries", type=int, default=3)
    parser.add_argument("--name", default="worker")
    parser.add_argument("--clock-offset", type=float, default=0.0)
    parser.add_argument("--gate", action="store_true")
    parser.add_argument("--agents", action="store_true")
    with contextlib.suppress(KeyboardInterrupt):
        trio.run(main, parser.parse_args())
