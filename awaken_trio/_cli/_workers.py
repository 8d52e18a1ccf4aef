"""``awaken-trio workers list|show|drain``: the runtimes that serve a store (DESIGN
§3.11), and a drain of one of them, wherever it runs."""

from __future__ import annotations

import time
from typing import Final

import click
import trio

from .. import Runtime, UnknownWorker, WorkerRecord
from .._face.failures import CommandFailed, Exit
from .._face.shapes import dumps, format_duration, when, worker_json
from ._common import console, emit, execute, open_cli_runtime, store_url
from ._runs import json_option, store_option
from ._tables import print_table

WORKER_COLUMNS: Final = (
    "worker",
    "host",
    "pid",
    "state",
    "started",
    "last seen",
    "active",
    "bodies",
)

DRAIN_LOOK: Final = 0.2
"""Seconds between looks at a draining worker's state (``workers drain --wait``)."""


def bodies_text(worker: WorkerRecord) -> str:
    return ", ".join(
        name if version is None else f"{name}@{version}" for name, version in worker.bodies.items()
    )


def worker_cells(worker: WorkerRecord, now: float) -> list[str]:
    return [
        worker.worker_id,
        worker.host,
        str(worker.pid),
        worker.state,
        when(worker.started_at),
        f"{format_duration(max(now - worker.last_seen, 0.0))} ago",
        f"{worker.active}/{worker.concurrency}",
        bodies_text(worker),
    ]


@click.group()
def workers() -> None:
    """The runtimes serving a store: list them, show one, drain one.

    Exit codes: 0 done; 1 an unknown worker, or one that no longer serves; 2 bad input;
    3 the store cannot be opened or read.
    """


@workers.command("list")
@store_option
@json_option
@click.option("--all", "ended", is_flag=True, help="Also the workers stopped in the last day.")
def list_workers(store: str | None, as_json: bool, ended: bool) -> None:
    """List the workers, the most recently started first: serving, draining, or lost (not
    seen for 3 leases); with --all, stopped ones too."""

    async def run() -> None:
        async with open_cli_runtime(store_url(store), must_exist=True) as runtime:
            found = await runtime.list_workers(ended=ended)
        if as_json:
            emit(dumps([worker_json(w) for w in found]))
            return
        now = time.time()
        print_table(console(), WORKER_COLUMNS, [worker_cells(w, now) for w in found])

    execute(run, as_json=as_json)


async def _one(runtime: Runtime, worker_id: str) -> WorkerRecord:
    for worker in await runtime.list_workers(ended=True):
        if worker.worker_id == worker_id:
            return worker
    raise _unknown(worker_id)


def _unknown(worker_id: str) -> CommandFailed:
    return CommandFailed(
        Exit.REFUSED,
        "unknown_worker",
        f"worker {worker_id!r} is unknown to this store; `workers list --all` lists the"
        " workers it knows",
    )


@workers.command("show")
@store_option
@json_option
@click.argument("worker_id", metavar="ID")
def show(store: str | None, as_json: bool, worker_id: str) -> None:
    """Show one worker."""

    async def run() -> None:
        async with open_cli_runtime(store_url(store), must_exist=True) as runtime:
            worker = await _one(runtime, worker_id)
        if as_json:
            emit(dumps(worker_json(worker)))
            return
        out = console()
        for label, value in zip(WORKER_COLUMNS, worker_cells(worker, time.time()), strict=True):
            out.print(f"{label:<11}{value}", soft_wrap=True, markup=False, highlight=False)

    execute(run, as_json=as_json)


@workers.command("drain")
@store_option
@json_option
@click.argument("worker_id", metavar="ID")
@click.option("--wait", is_flag=True, help="Wait until the worker has stopped.")
def drain(store: str | None, as_json: bool, worker_id: str, wait: bool) -> None:
    """Ask a worker to claim nothing new, let its runs finish, then stop serving (its
    `awaken-trio worker` exits 0). Prints its state after the request."""

    async def run() -> None:
        async with open_cli_runtime(store_url(store), must_exist=True) as runtime:
            try:
                worker = await runtime.drain_worker(worker_id)
            except UnknownWorker:
                raise _unknown(worker_id) from None
            if worker.state in ("stopped", "lost"):
                raise CommandFailed(
                    Exit.REFUSED,
                    "not_serving",
                    f"worker {worker_id!r} is {worker.state}: it serves nothing to drain",
                )
            while wait and worker.state == "draining":
                await trio.sleep(DRAIN_LOOK)
                worker = await _one(runtime, worker_id)
        emit(dumps(worker_json(worker)) if as_json else f"{worker_id}: {worker.state}")

    execute(run, as_json=as_json)
