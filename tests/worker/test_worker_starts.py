"""The serving loop's starts of the runs a look found (`_serve._Starts`): every start posted
is answered before the loop goes on, whether its answer came at once (a store that needs
no I/O) or later (through the mailbox), and a failed one is reported."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import cast

import attrs
import pytest
import trio
import trio.testing

from awaken_trio import RunState, StoreError
from awaken_trio._core import RunRecord, ServedRun, ServingHost, Started
from awaken_trio.worker._serve import _Starts


@attrs.frozen
class _Served:
    run_id: str

    def counts_toward_concurrency(self) -> bool:
        return True


@attrs.frozen
class _Record:
    run_id: str
    name: str = "job"
    generation: int = 0
    state: RunState = attrs.field(factory=RunState.Queued)


class _Host:
    """Answers a start of a run whose id starts with ``now`` at once; the others when the
    test says."""

    claims = None

    def __init__(self) -> None:
        self.later: list[tuple[str, Callable[[Started], None]]] = []

    def post_stored(self, record: RunRecord, done: Callable[[Started], None]) -> None:
        if record.run_id.startswith("now"):
            done(_Served(record.run_id))
        else:
            self.later.append((record.run_id, done))


def _record(run_id: str) -> RunRecord:
    return cast("RunRecord", _Record(run_id))


async def test_starts_answered_at_once_and_later_are_all_waited_for(
    autojump_clock: trio.testing.MockClock,
) -> None:
    host = _Host()
    active: dict[str, ServedRun] = {}
    starts = _Starts(cast("ServingHost", host), active)
    starts.post(_record("now-1"))
    starts.post(_record("later-1"))
    starts.post(_record("now-2"))
    returned = trio.Event()

    async def wait() -> None:
        await starts.answered()
        returned.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.sleep(1.0)
        assert not returned.is_set()  # one start has no answer yet
        ((run_id, done),) = host.later
        done(_Served(run_id))
    assert returned.is_set()
    assert sorted(active) == ["later-1", "now-1", "now-2"]
    assert not starts.failed


async def test_a_failed_start_is_reported_and_logged_with_its_run_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="awaken_trio.worker")
    host = _Host()
    active: dict[str, ServedRun] = {}
    starts = _Starts(cast("ServingHost", host), active)
    starts.post(_record("later-1"))
    starts.post(_record("later-2"))
    (first, done_first), (_, done_second) = host.later
    done_first(StoreError("the disk is full", outcome_unknown=False))
    done_second(None)  # not this runtime's to start after all
    await starts.answered()
    assert starts.failed
    assert active == {}
    (logged,) = [r for r in caplog.records if r.name == "awaken_trio.worker"]
    assert getattr(logged, "run_id", None) == first
    assert "could not be started" in logged.getMessage()


async def test_a_start_refused_at_once_is_not_waited_for() -> None:
    class Closing(_Host):
        def post_stored(self, record: RunRecord, done: Callable[[Started], None]) -> None:
            raise trio.BusyResourceError("closing")  # any refusal raised before the hand-over

    starts = _Starts(cast("ServingHost", Closing()), {})
    with pytest.raises(trio.BusyResourceError):
        starts.post(_record("r"))
    with trio.fail_after(1):
        await starts.answered()
