"""`open_runtime`: the composition of the kernel, a store and the worker.

The kernel (``_core``) knows neither stores nor serving: this module, above the three,
chooses the store a URL or a path names, builds the supervisor with the claim policy the
store calls for (the worker's `ClaimBook` on a durable store, the kernel's `NoClaims`
otherwise), gives the runtime the worker's serving loop, and starts the background
services: the kernel's scheduled resumes on every store, and on a durable store the claim
keeper and the relay of what other runtimes do.
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import trio

from ._core import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    DURABLE_METHODS,
    STORE_METHODS,
    AttemptObserver,
    Body,
    ClaimPolicy,
    ClaimSettings,
    Clock,
    DurableStore,
    InvalidArgument,
    NoClaims,
    Runtime,
    Store,
    Supervisor,
    VerifierFactory,
    VersionedBody,
    raise_block_exit,
    run_mailbox,
    safe_repr,
    start_kernel_services,
)
from .worker._claims import ClaimBook, ClaimKeeper
from .worker._relay import StoreRelay
from .worker._serve import serve


def _resolve_store(store: str | os.PathLike[str] | Store) -> tuple[Store, bool]:
    if isinstance(store, str | os.PathLike):
        from .store import open_store  # backends load on first use of their scheme

        return open_store(store), True
    for method in STORE_METHODS:
        if not callable(getattr(store, method, None)):
            raise InvalidArgument(f"{safe_repr(store)} is not a Store: it has no {method}() method")
    return store, False


@asynccontextmanager
async def open_runtime(
    store: str | os.PathLike[str] | Store = "memory://",
    *,
    clock: Clock = time.time,
    bodies: Mapping[str, Body | VersionedBody] | None = None,
    lease: float = 30.0,
    poll: float = 0.05,
    max_recoveries: int = 3,
    ownership_verifier: VerifierFactory | None = None,
    max_batch: int = 1024,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    tracer_provider: object | None = None,
) -> AsyncIterator[Runtime]:
    """Open a runtime: a supervisor, a store and a nursery for the run actors.

    Leaving the block ends every active or queued run of a non-durable store with
    ``Ended(Stopped("runtime shutdown"))`` (each commit shielded) and returns once they are
    committed; on a durable store it releases this runtime's claims instead: a named run
    goes back to ``Queued`` for another runtime (its descendants handed back with it), a run
    with no name ends ``Stopped``. An exception from the block comes out unwrapped;
    KeyboardInterrupt and SystemExit, from the block, from a body or from anything the
    runtime calls (the clock, the store), shut down the same way and are re-raised.

    Args:
        store: ``"memory://"`` (the default), ``"sqlite:///path.db"``, the path of an
            SQLite file (``pathlib.Path("runs.db")``), or a `Store`.
        clock: wall clock for ticket deadlines, leases and event times (``time.time``
            scale); every runtime sharing a store must agree on it.
        bodies: run bodies by name (also `Runtime.register`): what lets runs be
            submitted, served and recovered.
        lease: seconds a claim on a run lasts unless renewed (every third of it); a
            runtime that misses it loses its runs to another. Durable stores only.
        poll: seconds between looks at the store for what other runtimes did (commands
            sent, runs ended elsewhere, threads freed); a signal takes effect within a few.
        max_recoveries: how many times a run is re-executed after losing its owner.
        ownership_verifier: ``f(run_id, thread_id, generation) -> OwnershipVerifier | None``
            called for every attempt; `Runtime.deliver_to_current_attempt` asks it.
        max_batch: most commits the supervisor hands the store in one transaction.
        max_payload_bytes: the largest payload (input, progress, result, ticket payload,
            resume value, message, event detail) a run may hand over, as the length of its
            compact JSON text; a larger one is refused with `InvalidPayload` by the call
            that hands it over (a result that large ends the run
            ``Failed("invalid_result")``). 4 MiB by default.
        tracer_provider: an OpenTelemetry ``TracerProvider`` (the ``[otel]`` extra): a
            span ``awaken_trio.attempt`` per attempt (DESIGN §3.6). None: no tracing.
    """
    if ownership_verifier is not None and not callable(ownership_verifier):
        raise InvalidArgument(
            "ownership_verifier must be a callable (run_id, thread_id, generation) ->"
            f" OwnershipVerifier | None, not {safe_repr(ownership_verifier)}"
        )
    if not callable(clock):
        raise InvalidArgument(
            f"clock must be a callable returning wall-clock seconds, not {safe_repr(clock)}"
        )
    if type(max_batch) is not int or max_batch < 1:
        raise InvalidArgument(f"max_batch must be a positive int, not {safe_repr(max_batch)}")
    if type(max_payload_bytes) is not int or max_payload_bytes < 1:
        raise InvalidArgument(
            "max_payload_bytes must be a positive int (bytes of JSON text),"
            f" not {safe_repr(max_payload_bytes)}"
        )
    for option, value in (("lease", lease), ("poll", poll)):
        if type(value) not in (int, float) or not 0 < value < math.inf:
            raise InvalidArgument(f"{option} must be a positive number of seconds, not {value!r}")
    if type(max_recoveries) is not int or max_recoveries < 0:
        raise InvalidArgument(
            f"max_recoveries must be an int >= 0, not {safe_repr(max_recoveries)}"
        )
    if bodies is not None and not isinstance(bodies, Mapping):
        raise InvalidArgument(f"bodies must map names to run bodies, not {safe_repr(bodies)}")
    store_obj, owned = _resolve_store(store)
    book: ClaimBook | None = None
    if store_obj.durable:
        if not isinstance(store_obj, DurableStore):
            missing = [m for m in DURABLE_METHODS if not callable(getattr(store_obj, m, None))]
            raise InvalidArgument(
                f"{safe_repr(store_obj)} says it is durable but has no {', '.join(missing)}"
            )
        settings = ClaimSettings(_new_owner(), float(lease), float(poll), max_recoveries)
        book = ClaimBook(settings, store_obj)
    claims: ClaimPolicy = NoClaims() if book is None else book
    observer = None if tracer_provider is None else _observer_for(tracer_provider)
    supervisor = Supervisor(
        store_obj,
        clock,
        claims,
        max_batch=max_batch,
        max_payload_bytes=max_payload_bytes,
        verifier_factory=ownership_verifier,
        observer=observer,
    )
    runtime = Runtime._create(supervisor, serve)
    for name, body in (bodies or {}).items():
        if isinstance(body, VersionedBody):
            runtime.register(name, body.body, version=body.version, compatible=body.compatible)
        else:
            runtime.register(name, body)
    caller_error: BaseException | None = None
    internal_error: BaseException | None = None
    try:
        # A store named by a URL opens here, so a file that cannot be used is refused by
        # open_runtime itself (nothing written); inside the try, so a cancel landing just
        # after it opened still closes it.
        opener = getattr(store_obj, "open", None) if owned else None
        if opener is not None:
            await opener()
        async with trio.open_nursery() as system:
            await system.start(run_mailbox, supervisor.mailbox)
            await system.start(supervisor.host_actors, system.cancel_scope)
            services = await system.start(_host_services, supervisor, runtime, book)
            try:
                yield runtime
            except BaseException as exc:  # re-raised below, outside the nursery, unwrapped
                caller_error = exc
            finally:
                with trio.CancelScope(shield=True):
                    # The services (claim renewals, control from other runtimes) keep
                    # running while the attempts drain, whatever cancelled the block, then
                    # stop.
                    supervisor.begin_shutdown()
                    await supervisor.actors_done.wait()
                    services.cancel(reason="runtime closed")
    except BaseExceptionGroup as group:
        # The system tasks never raise; what reaches here is a cancel of the caller's that
        # the nursery's exit met, or an interrupt.
        internal_error = group
    finally:
        if owned:
            with trio.CancelScope(shield=True):
                await store_obj.aclose()
    raise_block_exit(supervisor.interrupt, caller_error, internal_error)


async def _host_services(
    supervisor: Supervisor,
    runtime: Runtime,
    book: ClaimBook | None,
    *,
    task_status: trio.TaskStatus[trio.CancelScope],
) -> None:
    """Run the runtime's services until the scope handed back is cancelled. Shielded: a
    cancel of the caller's block must not stop claim renewals while attempts drain."""
    with trio.CancelScope(shield=True) as scope:
        async with trio.open_nursery() as services:
            await start_kernel_services(services, runtime)
            if book is not None:
                # A durable store: claim renewals, and the relay of what other runtimes do.
                serving = supervisor.serving
                await services.start(ClaimKeeper(serving, book).run)
                await services.start(StoreRelay(serving, book.store, book.settings).run)
            task_status.started(scope)
            await trio.sleep_forever()


def _new_owner() -> str:
    # Unique across machines, processes and runtimes in one process.
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(6).hex()}"


def _observer_for(provider: object) -> AttemptObserver:
    """The tracing observer, imported only when a provider is given (the ``[otel]`` extra)."""
    try:
        from ._otel import observer_for
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("opentelemetry"):
            raise
        raise InvalidArgument(
            "tracer_provider needs the OpenTelemetry API (the [otel] extra):"
            " pip install -e '.[otel]' in the checkout"
        ) from None
    return observer_for(provider)
