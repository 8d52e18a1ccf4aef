"""Run ids the runtime makes up: unique without coordination, ordered by creation time, and
different in a forked child."""

from __future__ import annotations

import os
import time

import pytest

from awaken_trio import EndCause, RunContext, RunState, open_runtime
from awaken_trio._core import new_run_id


async def body(ctx: RunContext) -> int:
    return 1


def test_a_run_id_is_28_hex_digits() -> None:
    run_id = new_run_id()
    assert len(run_id) == 28
    int(run_id, 16)  # raises unless every character is a hex digit


def test_run_ids_made_at_once_are_all_different() -> None:
    ids = [new_run_id() for _ in range(100_000)]
    assert len(set(ids)) == len(ids)


def test_a_later_run_id_sorts_after_an_earlier_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # The timestamp leads, so ids made a millisecond apart sort by time, as text and as
    # numbers, whatever their random bits.
    now = [1_700_000_000_000_000_000]
    monkeypatch.setattr(time, "time_ns", lambda: now[0])
    earlier = [new_run_id() for _ in range(50)]
    now[0] += 1_000_000
    later = [new_run_id() for _ in range(50)]
    assert max(earlier) < min(later)
    assert {run_id[:12] for run_id in earlier} == {f"{1_700_000_000_000:012x}"}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is not available here")
def test_a_forked_child_makes_other_ids_than_its_parent() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe and exits
        try:
            os.write(write, new_run_id()[12:].encode())
        finally:
            os._exit(0)
    os.close(write)
    child_random_bits = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert len(child_random_bits) == 16
    # Without the reseed at fork, the child's first draw would be the parent's next one.
    assert child_random_bits != new_run_id()[12:]


async def test_a_run_started_without_an_id_gets_one_of_these() -> None:
    async with open_runtime() as runtime:
        first = await runtime.start(body)
        second = await runtime.start(body)
        assert await first.wait() == await second.wait() == RunState.Ended(EndCause.NaturalEnd())
    assert first.run_id != second.run_id
    assert len(first.run_id) == 28
    assert first.run_id[:12] <= second.run_id[:12]
