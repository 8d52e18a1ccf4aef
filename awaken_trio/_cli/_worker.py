"""``awaken-trio worker MODULE[:ATTR]``: serve a module's bodies until a signal.

The first SIGINT (Ctrl-C) or SIGTERM stops claiming and leaves the runtime, which releases
this worker's claims (its runs go back to ``Queued`` for another worker) and exits 0. A
second signal while that drains exits at once, claims left to expire after their lease.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from functools import partial
from typing import Final

import click
import trio

from .. import Runtime
from .._face.failures import bad_input
from .._heap import settle_heap
from .._redact import redact
from ._common import (
    SecondsRange,
    WholeRange,
    early,
    execute,
    open_cli_runtime,
    store_url,
)
from ._logging import LogFormat, command_log, install, log_options, set_context
from ._runs import store_option

DEFAULT_ATTR: Final = "bodies"


def load_bodies(target: str) -> dict[str, object]:
    """The bodies ``MODULE[:ATTR]`` names: a mapping of names to bodies, or a callable
    returning one. The working directory is importable, as for ``python -m``."""
    module_name, _, attr = target.partition(":")
    attr = attr or DEFAULT_ATTR
    if not module_name or not all(part.isidentifier() for part in module_name.split(".")):
        raise bad_input(f"{target!r} is not MODULE[:ATTR], e.g. 'myapp.bodies:bodies'")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise bad_input(
            f"cannot import {module_name!r}: {type(exc).__name__}: {exc}", "import_failed"
        ) from None
    try:
        found = getattr(module, attr)
    except AttributeError:
        raise bad_input(
            f"module {module_name!r} has no {attr!r}; name the mapping of bodies as"
            f" {module_name}:ATTR",
            "no_bodies",
        ) from None
    if callable(found) and not isinstance(found, Mapping):
        try:
            found = found()
        except Exception as exc:
            raise bad_input(
                f"{module_name}:{attr}() raised {type(exc).__name__}: {exc}", "no_bodies"
            ) from None
    if not isinstance(found, Mapping) or not found:
        raise bad_input(
            f"{module_name}:{attr} must be a non-empty mapping of names to run bodies (or a"
            f" callable returning one), not {type(found).__name__}",
            "no_bodies",
        )
    return dict(found)


@click.command("worker")
@click.argument("target", metavar="MODULE[:ATTR]")
@store_option
@click.option(
    "--concurrency",
    type=WholeRange(min=1),
    default=8,
    show_default=True,
    help="Most root runs executed at once.",
)
@click.option(
    "--lease",
    type=SecondsRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    metavar="S",
    help="Seconds a claim lasts unless renewed.",
)
@click.option(
    "--poll",
    type=SecondsRange(min=0, min_open=True),
    default=0.05,
    show_default=True,
    metavar="S",
    help="Seconds between looks at the store for work and signals.",
)
@log_options("INFO")
def worker(
    target: str,
    store: str | None,
    concurrency: int,
    lease: float,
    poll: float,
    log_level: str,
    log_format: LogFormat,
) -> None:
    """Serve the bodies of MODULE (ATTR, default 'bodies': a mapping of names to bodies, or
    a callable returning one) until SIGINT or SIGTERM.

    The first signal releases this worker's claims (its runs go back to Queued for another
    worker) and exits 0; a second one while it drains exits at once with 130 (SIGINT) or
    143 (SIGTERM), leaving its claims to expire after their lease.

    It logs to stderr: its start and stop lines, the library's records (INFO by default:
    claims, recoveries, ends, failures with their traceback) and those of the libraries it
    uses, one line each (--log-format json: one JSON object each).
    """
    # Before the module is imported: its records at import are written as every other.
    install(log_level, log_format)
    bodies = early(lambda: load_bodies(target), as_json=False, log=command_log)
    execute(partial(serve, store, bodies, concurrency, lease, poll), as_json=False, log=command_log)


async def serve(
    store: str | None, bodies: dict[str, object], concurrency: int, lease: float, poll: float
) -> None:
    url = store_url(store)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as watcher:
            stopping = trio.Event()
            watcher.start_soon(_watch_signals, signals, stopping)
            async with (
                open_cli_runtime(
                    url, must_exist=False, bodies=bodies, lease=lease, poll=poll
                ) as runtime,
                trio.open_nursery() as serving,
            ):
                set_context(worker_id=runtime.worker_id)
                heap = settle_heap(concurrency)
                command_log.debug(
                    "awaken-trio worker: %d objects alive at start frozen out of garbage"
                    " collection; the young generation is collected every %d allocations",
                    heap.frozen,
                    heap.young_threshold,
                    extra={"worker_id": runtime.worker_id, "event": "heap_frozen"},
                )
                drained = trio.Event()
                await serving.start(_serve_until_drained, runtime, concurrency, drained, stopping)
                command_log.info(
                    "awaken-trio worker: serving %s from %s (concurrency %d, pid %d);"
                    " Ctrl-C or SIGTERM to stop",
                    ", ".join(sorted(bodies)),
                    redact(url),
                    concurrency,
                    os.getpid(),
                    extra={"worker_id": runtime.worker_id, "event": "start"},
                )
                await stopping.wait()
                if not drained.is_set():
                    command_log.info("awaken-trio worker: stopping; releasing claims")
                serving.cancel_scope.cancel()
            command_log.info("awaken-trio worker: stopped, claims released")
            watcher.cancel_scope.cancel()


async def _serve_until_drained(
    runtime: Runtime,
    concurrency: int,
    drained: trio.Event,
    stopping: trio.Event,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve; once drained (`workers drain`), stop as a signal would, exit 0."""
    await runtime.serve(concurrency=concurrency, task_status=task_status)
    command_log.info(
        "awaken-trio worker: drained; stopping",
        extra={"worker_id": runtime.worker_id, "event": "drained"},
    )
    drained.set()
    stopping.set()


async def _watch_signals(signals: AsyncIterator[int], stopping: trio.Event) -> None:
    async for signum in signals:
        if not stopping.is_set():
            stopping.set()
            continue
        # A second signal while draining: exit now. The claims are left to expire after
        # their lease, when another worker recovers the runs.
        command_log.warning("awaken-trio worker: exiting at once; claims left to expire")
        os._exit(128 + signum)
