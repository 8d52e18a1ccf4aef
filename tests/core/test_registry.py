"""AttemptRegistry (generation-aware) and ThreadGate (one holder per thread, FIFO)."""

from __future__ import annotations

import trio
import trio.testing

from awaken_trio import RunContext
from awaken_trio._core import (
    Attempt,
    AttemptRegistry,
    GateWaiter,
    ThreadGate,
)


async def _body(ctx: RunContext) -> None:
    await trio.lowlevel.checkpoint()


def _attempt(run_id: str, generation: int = 1, thread_id: str | None = None) -> Attempt:
    return Attempt(
        run_id=run_id,
        thread_id=thread_id or run_id,
        generation=generation,
        parent=None,
        body=_body,
        input=None,
        checkpoint=None,
        resume_value=None,
    )


# ---------------------------------------------------------------- AttemptRegistry


def test_register_and_lookup_by_run_and_thread() -> None:
    registry = AttemptRegistry()
    a = _attempt("r1", thread_id="t1")
    b = _attempt("r2", thread_id="t2")
    registry.register(a)
    registry.register(b)
    assert len(registry) == 2
    assert registry.get("r1") is a
    assert registry.get("r2") is b
    assert registry.on_thread("t1") is a
    assert registry.on_thread("t2") is b
    assert registry.get("missing") is None
    assert registry.on_thread("missing") is None
    assert set(map(id, registry.all())) == {id(a), id(b)}


def test_deregister_removes_both_entries_and_len_shrinks_to_zero() -> None:
    registry = AttemptRegistry()
    a = _attempt("r1", thread_id="t1")
    b = _attempt("r2", thread_id="t2")
    registry.register(a)
    registry.register(b)
    assert registry.deregister(a) is True
    assert len(registry) == 1
    assert registry.get("r1") is None
    assert registry.on_thread("t1") is None
    assert registry.deregister(b) is True
    assert len(registry) == 0
    assert registry.all() == []
    assert registry.on_thread("t2") is None


def test_deregister_twice_removes_only_once() -> None:
    registry = AttemptRegistry()
    a = _attempt("r1")
    registry.register(a)
    assert registry.deregister(a) is True
    assert registry.deregister(a) is False
    assert len(registry) == 0


def test_deregister_of_unregistered_attempt_returns_false() -> None:
    registry = AttemptRegistry()
    other = _attempt("r2")
    registry.register(other)
    assert registry.deregister(_attempt("r1")) is False
    assert registry.get("r2") is other
    assert len(registry) == 1


def test_replacement_overwrites_and_stale_deregister_keeps_it() -> None:
    registry = AttemptRegistry()
    old = _attempt("r1", generation=1, thread_id="t1")
    new = _attempt("r1", generation=2, thread_id="t1")
    registry.register(old)
    registry.register(new)
    assert len(registry) == 1
    assert registry.get("r1") is new
    assert registry.on_thread("t1") is new

    # The old attempt exits late: it must not remove its replacement.
    assert registry.deregister(old) is False
    assert registry.get("r1") is new
    assert registry.on_thread("t1") is new
    assert len(registry) == 1

    assert registry.deregister(new) is True
    assert registry.get("r1") is None
    assert registry.on_thread("t1") is None
    assert len(registry) == 0


def test_deregister_leaves_another_runs_thread_entry_alone() -> None:
    registry = AttemptRegistry()
    first = _attempt("r1", thread_id="shared")
    second = _attempt("r2", thread_id="shared")
    registry.register(first)
    registry.register(second)  # now the thread's current attempt
    assert registry.on_thread("shared") is second

    assert registry.deregister(first) is True
    assert registry.get("r1") is None
    assert registry.on_thread("shared") is second
    assert registry.get("r2") is second
    assert len(registry) == 1

    assert registry.deregister(second) is True
    assert registry.on_thread("shared") is None
    assert len(registry) == 0


# ---------------------------------------------------------------- ThreadGate


def test_first_acquire_creates_one_entry() -> None:
    gate = ThreadGate()
    holder = object()
    assert len(gate) == 0
    assert gate.try_acquire("t", holder) is True
    assert len(gate) == 1
    assert gate.holder("t") is holder
    assert gate.holder("other") is None


def test_busy_thread_refuses_acquire_and_waiters_share_the_entry() -> None:
    gate = ThreadGate()
    h1, h2, h3 = object(), object(), object()
    assert gate.try_acquire("t", h1)
    assert gate.try_acquire("t", h2) is False
    w2 = gate.enqueue("t", h2)
    w3 = gate.enqueue("t", h3)
    assert isinstance(w2, GateWaiter)
    assert len(gate) == 1
    assert gate.holder("t") is h1
    assert not w2.granted
    assert not w3.granted


def test_release_hands_over_in_fifo_order_and_last_release_empties_the_map() -> None:
    gate = ThreadGate()
    h1, h2, h3 = object(), object(), object()
    gate.try_acquire("t", h1)
    w2 = gate.enqueue("t", h2)
    w3 = gate.enqueue("t", h3)

    gate.free("t", h1)
    assert w2.granted
    assert not w3.granted
    assert gate.holder("t") is h2
    assert len(gate) == 1

    gate.free("t", h2)
    assert w3.granted
    assert gate.holder("t") is h3
    assert len(gate) == 1

    gate.free("t", h3)
    assert len(gate) == 0
    assert gate.holder("t") is None
    # The thread is free again for anyone.
    assert gate.try_acquire("t", h1) is True


def test_release_by_a_non_holder_changes_nothing() -> None:
    gate = ThreadGate()
    h1, h2, stranger = object(), object(), object()
    gate.try_acquire("t", h1)
    w2 = gate.enqueue("t", h2)
    gate.free("t", stranger)
    gate.free("t", h2)  # a waiter is not the holder
    gate.free("unknown-thread", h1)
    assert gate.holder("t") is h1
    assert not w2.granted
    assert len(gate) == 1


def test_withdraw_of_a_waiting_waiter_removes_it_from_the_queue() -> None:
    gate = ThreadGate()
    h1, h2, h3 = object(), object(), object()
    gate.try_acquire("t", h1)
    w2 = gate.enqueue("t", h2)
    w3 = gate.enqueue("t", h3)

    gate.withdraw(w2)
    assert gate.holder("t") is h1  # withdrawing a waiter never frees the thread
    assert len(gate) == 1

    gate.free("t", h1)
    assert not w2.granted
    assert w3.granted
    assert gate.holder("t") is h3

    gate.free("t", h3)
    assert len(gate) == 0


def test_withdraw_of_the_only_waiter_then_release_empties_the_map() -> None:
    gate = ThreadGate()
    h1, h2 = object(), object()
    gate.try_acquire("t", h1)
    w2 = gate.enqueue("t", h2)
    gate.withdraw(w2)
    gate.free("t", h1)
    assert not w2.granted
    assert len(gate) == 0


def test_withdraw_of_a_granted_waiter_passes_the_thread_on() -> None:
    gate = ThreadGate()
    h1, h2, h3 = object(), object(), object()
    gate.try_acquire("t", h1)
    w2 = gate.enqueue("t", h2)
    w3 = gate.enqueue("t", h3)
    gate.free("t", h1)
    assert w2.granted

    gate.withdraw(w2)
    assert w3.granted
    assert gate.holder("t") is h3
    assert len(gate) == 1

    gate.withdraw(w3)  # granted, and nobody waits: the entry goes away
    assert len(gate) == 0
    assert gate.holder("t") is None


def test_withdraw_twice_and_after_the_gate_is_gone_is_harmless() -> None:
    gate = ThreadGate()
    h1, h2 = object(), object()
    gate.try_acquire("t", h1)
    w2 = gate.enqueue("t", h2)
    gate.withdraw(w2)
    gate.withdraw(w2)
    gate.free("t", h1)
    gate.withdraw(w2)
    assert len(gate) == 0


def test_threads_are_independent() -> None:
    gate = ThreadGate()
    a, b, c = object(), object(), object()
    assert gate.try_acquire("t1", a)
    assert gate.try_acquire("t2", b)
    wc = gate.enqueue("t1", c)
    assert len(gate) == 2
    gate.free("t2", b)
    assert not wc.granted
    assert len(gate) == 1
    gate.free("t1", a)
    assert wc.granted
    gate.free("t1", c)
    assert len(gate) == 0


def test_attempts_as_gate_holders() -> None:
    gate = ThreadGate()
    first = _attempt("r1", thread_id="t")
    second = _attempt("r2", thread_id="t")
    assert gate.try_acquire("t", first)
    waiter = gate.enqueue("t", second)
    assert waiter.holder is second
    assert waiter.thread_id == "t"
    gate.free("t", first)
    assert gate.holder("t") is second
    gate.withdraw(waiter)
    assert len(gate) == 0


async def test_waiter_wait_blocks_until_granted_in_fifo_order() -> None:
    gate = ThreadGate()
    h1, h2, h3 = object(), object(), object()
    gate.try_acquire("t", h1)
    w2 = gate.enqueue("t", h2)
    w3 = gate.enqueue("t", h3)
    order: list[str] = []

    async def wait_for(name: str, waiter: GateWaiter) -> None:
        await waiter.wait()
        order.append(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_for, "w3", w3)
        nursery.start_soon(wait_for, "w2", w2)
        await trio.testing.wait_all_tasks_blocked()
        assert order == []

        gate.free("t", h1)
        await trio.testing.wait_all_tasks_blocked()
        assert order == ["w2"]

        gate.free("t", h2)
        await trio.testing.wait_all_tasks_blocked()
        assert order == ["w2", "w3"]

    gate.free("t", h3)
    assert len(gate) == 0


async def test_granted_waiter_wait_returns_immediately() -> None:
    gate = ThreadGate()
    h1, h2 = object(), object()
    gate.try_acquire("t", h1)
    w2 = gate.enqueue("t", h2)
    gate.free("t", h1)
    with trio.fail_after(1):
        await w2.wait()
    assert w2.granted
