"""Test helpers for code built on awaken_trio. Needs pytest and pytest-trio.

`StoreContract` is the store contract as a pytest test class: subclass it in a test module,
give it a ``store`` fixture that yields a new, empty store, and pytest runs every check of
the contract against that store::

    import pytest
    from collections.abc import AsyncIterator

    from awaken_trio.store import Store
    from awaken_trio.testing import StoreContract


    class TestMyStore(StoreContract):
        @pytest.fixture
        async def store(self) -> AsyncIterator[Store]:
            store = MyStore(...)
            yield store
            await store.aclose()

The class carries the ``trio`` mark, so its tests run under pytest-trio whether or not the
project sets ``trio_mode``.

`DurableStoreContract` adds the rules of a store several runtimes share (claims, leases and
epochs, fences, the thread guard, recovery, stored commands, runnable runs, versions): a
`DurableStore` subclasses it the same way, and may override a ``peer`` fixture that opens the
same committed truth a second time.

`StreamStoreContract` holds a `StreamingStore` (one that keeps runs' streams) to the stream
rules: offsets per channel, the reset and end chunks, channels not kept, fenced chunks,
pages of chunks. Subclass it the same way.

`explore_cancellation` runs a body once per schedule point and command (cancel, stop,
pause), the command delivered just before that point, and checks every run against the
runtime's rules and the caller's own ``check``; the ``explore`` fixture (this package's
pytest plugin) is the same function::

    async def test_my_body_is_cancellation_safe(explore):
        report = await explore(my_body, commands=("cancel", "stop", "pause"))
        assert report.points
"""

import pytest

# The contract's checks live in library modules, not test modules; register them before they
# are imported so a failing check reports its values as plain test assertions do.
pytest.register_assert_rewrite(
    "awaken_trio.testing._checks",
    "awaken_trio.testing._store_runs",
    "awaken_trio.testing._store_writes",
    "awaken_trio.testing._durable_claims",
    "awaken_trio.testing._durable_work",
    "awaken_trio.testing._store_contract",
    "awaken_trio.testing._durable_contract",
    "awaken_trio.testing._stream_contract",
)

from .._core import fixup_module_metadata as _fixup_module_metadata  # noqa: E402
from ._durable_contract import DurableStoreContract as DurableStoreContract  # noqa: E402
from ._explore import CancellationViolation as CancellationViolation  # noqa: E402
from ._explore import ExplorationReport as ExplorationReport  # noqa: E402
from ._explore import Explore as Explore  # noqa: E402
from ._explore import ExploredPoint as ExploredPoint  # noqa: E402
from ._explore import FreshBody as FreshBody  # noqa: E402
from ._explore import explore_cancellation as explore_cancellation  # noqa: E402
from ._explore import fresh as fresh  # noqa: E402
from ._explore_run import Command as Command  # noqa: E402
from ._store_contract import StoreContract as StoreContract  # noqa: E402
from ._stream_contract import StreamStoreContract as StreamStoreContract  # noqa: E402

__all__ = [
    "CancellationViolation",
    "Command",
    "DurableStoreContract",
    "ExplorationReport",
    "Explore",
    "ExploredPoint",
    "FreshBody",
    "StoreContract",
    "StreamStoreContract",
    "explore_cancellation",
    "fresh",
]

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
