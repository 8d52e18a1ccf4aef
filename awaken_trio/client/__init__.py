"""Control runs from hosts that are not Trio: threads, asyncio, any anyio backend.

`Client` (blocking, for any number of threads at once) and `AsyncClient` (asyncio, or any
anyio backend) each own one runtime on a Trio thread of their own: it has no bodies and
serves nothing, so the runs it submits are executed by a runtime that serves the same
store with their bodies (``runtime.serve()``, in this process or another). Each call is
handed to that thread and its answer (or the runtime's own error) handed back::

    from awaken_trio.client import AsyncClient, Client

    with Client("sqlite:///runs.db") as client:           # any thread may call it
        run_id = client.submit("summarise", input={"doc": 7})
        client.cancel_run(run_id)                          # -> RunState.Ended(Cancelled())

    async with AsyncClient("sqlite:///runs.db") as client:  # asyncio (any anyio backend)
        run_id = await client.submit("summarise", input={"doc": 7})
        state = await client.wait(run_id, timeout=30)

Both read a run's stream as it is written (``client.read_stream(run_id)``: a
`ChunkIterator` for threads, an `AsyncChunkIterator` for asyncio). Cancelling an
`AsyncClient` call abandons it and changes no run (see `AsyncClient`).
Using a closed client raises `awaken_trio.RuntimeClosed`.
"""

from .._core import fixup_module_metadata as _fixup_module_metadata
from ._async import AsyncClient as AsyncClient
from ._portal import ClientMisuse as ClientMisuse
from ._streams import AsyncChunkIterator as AsyncChunkIterator
from ._streams import ChunkIterator as ChunkIterator
from ._sync import Client as Client

__all__ = ["AsyncChunkIterator", "AsyncClient", "ChunkIterator", "Client", "ClientMisuse"]

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
