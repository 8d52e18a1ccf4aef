"""`awaken_trio.testing.StoreContract` as a third party uses it: subclassed in a project of
its own, with or without pytest-trio's ``trio_mode``."""

from __future__ import annotations

import math

import pytest

from awaken_trio.testing import DurableStoreContract, StoreContract, StreamStoreContract

THIRD_PARTY_TESTS = """
from collections.abc import AsyncIterator

import pytest

from awaken_trio.store import MemoryStore, Store
from awaken_trio.testing import DurableStoreContract, StoreContract, StreamStoreContract


class TestMyStore(StoreContract):
    @pytest.fixture
    async def store(self) -> AsyncIterator[Store]:
        s = MemoryStore(inline=False)
        yield s
        await s.aclose()
"""


THIRD_PARTY_DURABLE_TESTS = """
from collections.abc import AsyncIterator

import pytest
import trio

from awaken_trio.store import MemoryStore
from awaken_trio.testing import DurableStoreContract


class Clock:
    # A lease clock the suite moves: no test waits for a lease to lapse.
    now = 0.0

    def __call__(self) -> float:
        return self.now


class TestMySharedStore(DurableStoreContract):
    @pytest.fixture
    def clock(self) -> Clock:
        return Clock()

    @pytest.fixture
    def elapse(self, clock: Clock):
        async def elapse(seconds: float) -> None:
            clock.now += seconds
            await trio.lowlevel.checkpoint()

        return elapse

    @pytest.fixture
    async def store(self, clock: Clock) -> AsyncIterator[MemoryStore]:
        s = MemoryStore(inline=False, shared=True, lease_clock=clock)
        yield s
        await s.aclose()
"""


def _contract_size(contract: type = StoreContract) -> int:
    """How many tests one subclass runs: each method once per parameter set."""
    size = 0
    for name in dir(contract):
        if name.startswith("test_"):
            marks = getattr(getattr(contract, name), "pytestmark", [])
            size += math.prod(len(m.args[1]) for m in marks if m.name == "parametrize")
    return size


def _project(pytester: pytest.Pytester, trio_mode: bool, tests: str) -> None:
    pytester.makeini(
        f"""
        [pytest]
        trio_mode = {"true" if trio_mode else "false"}
        addopts = --strict-markers --strict-config
        filterwarnings = error
        """
    )
    pytester.makepyfile(test_my_store=tests)


@pytest.mark.parametrize("trio_mode", [True, False], ids=["trio_mode", "no_trio_mode"])
def test_a_subclass_runs_the_whole_contract(pytester: pytest.Pytester, trio_mode: bool) -> None:
    _project(pytester, trio_mode, THIRD_PARTY_TESTS)
    result = pytester.runpytest()
    assert _contract_size() > 40
    result.assert_outcomes(passed=_contract_size())


def test_a_subclass_without_a_store_fixture_is_told_to_write_one(
    pytester: pytest.Pytester,
) -> None:
    _project(
        pytester,
        False,
        "from awaken_trio.testing import StoreContract\n\n"
        "class TestForgotten(StoreContract):\n    pass\n",
    )
    result = pytester.runpytest()
    result.assert_outcomes(errors=_contract_size())
    result.stdout.fnmatch_lines(["*TestForgotten must override the `store` fixture*"])


@pytest.mark.parametrize("trio_mode", [True, False], ids=["trio_mode", "no_trio_mode"])
def test_a_subclass_runs_the_whole_durable_contract(
    pytester: pytest.Pytester, trio_mode: bool
) -> None:
    _project(pytester, trio_mode, THIRD_PARTY_DURABLE_TESTS)
    result = pytester.runpytest()
    durable = _contract_size(DurableStoreContract)
    assert durable > _contract_size() + 30
    result.assert_outcomes(passed=durable)


THIRD_PARTY_STREAM_TESTS = """
from collections.abc import AsyncIterator

import pytest

from awaken_trio.store import MemoryStore
from awaken_trio.testing import StreamStoreContract


class TestMyStreamingStore(StreamStoreContract):
    @pytest.fixture
    async def store(self) -> AsyncIterator[MemoryStore]:
        s = MemoryStore(inline=False)
        yield s
        await s.aclose()
"""


@pytest.mark.parametrize("trio_mode", [True, False], ids=["trio_mode", "no_trio_mode"])
def test_a_subclass_runs_the_whole_stream_contract(
    pytester: pytest.Pytester, trio_mode: bool
) -> None:
    _project(pytester, trio_mode, THIRD_PARTY_STREAM_TESTS)
    result = pytester.runpytest()
    size = _contract_size(StreamStoreContract)
    assert size > 10
    result.assert_outcomes(passed=size)
