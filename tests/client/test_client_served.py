"""`Client` against an SQLite store a worker process serves: the runs it submits execute
there, and it controls them from here, from many threads at once."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from awaken_trio import EndCause, LiveCommand, RunState, TicketMismatch
from awaken_trio.client import Client
from tests.client.client_helpers import POLL, WAIT, until

NATURAL = RunState.Ended(EndCause.NaturalEnd())
CANCELLED = RunState.Ended(EndCause.Cancelled())


def running(client: Client, run_id: str) -> bool:
    return isinstance(client.state(run_id), RunState.Running)


def test_many_threads_submit_steer_and_wait_for_runs_a_worker_executes(served_url: str) -> None:
    steppers, parkers = 6, 6
    start = threading.Barrier(steppers + parkers)
    results: dict[str, tuple[RunState, object]] = {}
    failures: list[BaseException] = []

    def stepper(i: int, client: Client) -> None:
        start.wait()
        run_id = client.submit("stepper", input={"steps": 3, "delay": 0.01})
        state = client.wait(run_id, timeout=WAIT)
        results[f"stepper-{i}"] = (state, client.record(run_id).result)

    def parker(i: int, client: Client) -> None:
        start.wait()
        run_id = client.submit("parker", run_id=f"parker-{i}")
        until(lambda: running(client, run_id), f"{run_id} to run in the worker")
        if i % 3 == 0:
            client.send(LiveCommand.Message(run_id, "finish"))
            state = client.wait(run_id, timeout=WAIT)
        elif i % 3 == 1:
            state = client.cancel_run(run_id)
            assert client.wait(run_id, timeout=0) == state
        else:
            state = client.stop_run(run_id, "over budget")
        results[run_id] = (state, client.record(run_id).result)

    def guarded(target: Callable[[int, Client], None], i: int, client: Client) -> None:
        try:
            target(i, client)
        except BaseException as exc:
            failures.append(exc)

    with Client(served_url, poll=POLL) as client:
        threads = [
            threading.Thread(target=guarded, args=(stepper, i, client)) for i in range(steppers)
        ] + [threading.Thread(target=guarded, args=(parker, i, client)) for i in range(parkers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []
    assert len(results) == steppers + parkers
    for i in range(steppers):
        assert results[f"stepper-{i}"] == (NATURAL, {"steps": 3, "generation": 1})
    for i in range(parkers):
        state, result = results[f"parker-{i}"]
        if i % 3 == 0:
            assert (state, result) == (NATURAL, {"messages": ["finish"], "generation": 1})
        elif i % 3 == 1:
            assert (state, result) == (CANCELLED, None)
        else:
            assert (state, result) == (RunState.Ended(EndCause.Stopped("over budget")), None)


def test_wait_returns_the_awaiting_state_and_resume_answers_its_ticket(served_url: str) -> None:
    with Client(served_url, poll=POLL) as client:
        run_id = client.submit("napper", input={"seconds": 3600})
        awaiting = client.wait(run_id, timeout=WAIT)
        assert isinstance(awaiting, RunState.Awaiting)
        ticket = awaiting.ticket
        assert ticket.reason == "scheduled_action"
        assert client.wait(run_id, timeout=0) == awaiting  # at once: it awaits now
        with pytest.raises(TicketMismatch):
            client.resume(run_id, correlation_id="not-the-ticket")
        assert client.state(run_id) == awaiting  # refused: nothing was committed
        after = client.resume(run_id, correlation_id=ticket.correlation_id)
        # Read right after the resume: Queued, or already the worker's next commit.
        assert not isinstance(after, RunState.Awaiting)
        assert client.wait(run_id, timeout=WAIT) == NATURAL
        assert client.record(run_id).result == {"woke_in": 2}
