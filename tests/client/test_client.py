"""`Client`, called from plain threads: its lifetime, its answers and the runtime's errors,
on stores no worker serves (runs stay where the client puts them)."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest
import trio

from awaken_trio import (
    EndCause,
    EventKind,
    InvalidArgument,
    LiveCommand,
    NotActive,
    RetryPolicy,
    RunAlreadyEnded,
    RunExists,
    RunState,
    RuntimeClosed,
    StoreError,
    ThreadBusy,
    UnknownRun,
)
from awaken_trio.client import Client, ClientMisuse
from tests.client.client_helpers import POLL, sqlite_url, until

QUEUED = RunState.Queued()
CANCELLED = RunState.Ended(EndCause.Cancelled())


def test_submit_cancel_wait_and_events_answer_from_the_committed_store() -> None:
    with Client() as client:
        run_id = client.submit("job", input={"n": 1}, thread_id="t1")
        assert client.state(run_id) == QUEUED
        record = client.record(run_id)
        assert (record.name, record.input, record.thread_id) == ("job", {"n": 1}, "t1")
        with pytest.raises(TimeoutError, match=run_id):
            client.wait(run_id, timeout=0)  # nothing serves it: it stays Queued
        assert client.cancel_run(run_id) == CANCELLED
        assert client.wait(run_id) == CANCELLED  # at once: it has ended
        assert client.wait(run_id, timeout=0) == CANCELLED
        events = client.events(run_id)
        assert [(e.kind, e.state) for e in events] == [
            (EventKind.COMMITTED, QUEUED),
            (EventKind.COMMITTED, CANCELLED),
        ]
        assert client.events(run_id, after=events[0].seq) == events[1:]
        assert client.events(run_id, after=events[-1].seq) == []
        other = client.submit("job")
        assert [e.run_id for e in client.events(after=events[-1].seq)] == [other]
        assert [e.run_id for e in client.events()] == [run_id, run_id, other]


def test_submit_is_idempotent_by_run_id_and_stop_run_records_its_reason() -> None:
    with Client() as client:
        assert client.submit("job", run_id="r1", input=[1]) == "r1"
        assert client.submit("job", run_id="r1", input=[1]) == "r1"
        with pytest.raises(RunExists):
            client.submit("job", run_id="r1", input=[2])
        stopped = RunState.Ended(EndCause.Stopped("over budget"))
        assert client.stop_run("r1", "over budget") == stopped
        assert client.state("r1") == stopped


def test_the_errors_are_the_runtimes_own_raised_in_the_calling_thread() -> None:
    with Client() as client:
        with pytest.raises(UnknownRun) as unknown:
            client.state("nope")
        assert unknown.value.run_id == "nope"
        with pytest.raises(UnknownRun):
            client.wait("nope", timeout=5)
        with pytest.raises(UnknownRun):
            client.events("nope")
        run_id = client.submit("job")
        with pytest.raises(NotActive):  # queued: no attempt to command
            client.send(LiveCommand.Pause(run_id))
        client.cancel_run(run_id)
        with pytest.raises(RunAlreadyEnded) as ended:
            client.stop_run(run_id, "late")
        assert ended.value.state == CANCELLED
        with pytest.raises(InvalidArgument, match="run_id"):
            client.state("")
        # Refused in the calling thread, before anything is handed over.
        for bad in (-1, float("nan"), True, "5"):
            with pytest.raises(InvalidArgument, match="timeout"):
                client.wait(run_id, timeout=bad)  # type: ignore[arg-type]
        for after in (-1, 1.5, True):
            with pytest.raises(InvalidArgument, match="after"):
                client.events(after=after)  # type: ignore[arg-type]
        assert client.state(run_id) == CANCELLED  # the client is still fine


def test_cancel_run_passes_a_reason_only_when_given() -> None:
    import inspect

    from awaken_trio import Runtime

    with Client() as client:
        plain = client.submit("job")
        assert client.cancel_run(plain) == CANCELLED
        assert client.events(plain)[-1].detail["reason"] is None
        reasoned = client.submit("job")
        if "reason" in inspect.signature(Runtime.cancel_run).parameters:
            assert client.cancel_run(reasoned, reason="operator") == CANCELLED
            assert client.events(reasoned)[-1].detail["reason"] == "operator"
        else:
            with pytest.raises(InvalidArgument, match="reason"):
                client.cancel_run(reasoned, reason="operator")
            assert client.state(reasoned) == QUEUED


def test_many_threads_call_one_client_at_once() -> None:
    threads = 24
    start = threading.Barrier(threads)
    results: dict[int, list[object]] = {}
    failures: list[BaseException] = []

    def work(i: int, client: Client) -> None:
        try:
            start.wait()
            run_id = client.submit("job", run_id=f"run-{i}", input={"i": i})
            seen: list[object] = [client.state(run_id)]
            if i % 2:
                seen.append(client.cancel_run(run_id))
            else:
                seen.append(client.stop_run(run_id, f"stop {i}"))
            seen.append(client.wait(run_id, timeout=30))
            seen.append([e.state for e in client.events(run_id)])
            results[i] = seen
        except BaseException as exc:
            failures.append(exc)

    with Client() as client:
        workers = [threading.Thread(target=work, args=(i, client)) for i in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert failures == []
        for i, seen in results.items():
            end = CANCELLED if i % 2 else RunState.Ended(EndCause.Stopped(f"stop {i}"))
            assert seen == [QUEUED, end, end, [QUEUED, end]]
        assert len(results) == threads
        assert len(client.events()) == 2 * threads


def test_a_closed_client_raises_runtime_closed() -> None:
    client = Client()
    with pytest.raises(ClientMisuse, match="not open"):
        client.submit("job")
    with client:
        run_id = client.submit("job")
    for call in (
        lambda: client.submit("job"),
        lambda: client.state(run_id),
        lambda: client.wait(run_id),
        lambda: client.events(),
        lambda: client.cancel_run(run_id),
    ):
        with pytest.raises(RuntimeClosed, match="closed"):
            call()
    client.close()  # again: nothing happens
    with pytest.raises(ClientMisuse, match="opens once"):
        client.__enter__()


def test_an_error_opening_the_store_is_raised_from_enter(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not an SQLite database, nor anything else" * 100)
    before = junk.read_bytes()
    client = Client(sqlite_url(junk))
    with pytest.raises(StoreError), client:
        pass
    assert junk.read_bytes() == before
    with pytest.raises(RuntimeClosed):
        client.state("r")
    with pytest.raises(InvalidArgument, match="store URL"), Client("nosuch://x"):
        pass
    with pytest.raises(InvalidArgument, match="poll"), Client(poll=-1):
        pass


def test_a_call_from_the_clients_own_trio_thread_is_refused() -> None:
    with Client() as client:
        run_id = client.submit("job")
        token = client._thread.token
        assert token is not None
        with pytest.raises(ClientMisuse, match="own Trio thread"):
            trio.from_thread.run_sync(lambda: client.state(run_id), trio_token=token)
        with pytest.raises(ClientMisuse, match="own Trio thread"):
            trio.from_thread.run_sync(client.close, trio_token=token)
        assert client.state(run_id) == QUEUED  # refused, and the client still works


def test_closing_ends_the_waits_in_flight_and_leaves_their_runs_as_they_were(
    tmp_path: Path,
) -> None:
    url = sqlite_url(tmp_path / "runs.db")
    outcomes: list[BaseException | object] = []
    with Client(url, poll=POLL) as client:
        run_id = client.submit("job")

        def waiting() -> None:
            try:
                outcomes.append(client.wait(run_id))
            except BaseException as exc:
                outcomes.append(exc)

        waiter = threading.Thread(target=waiting)
        waiter.start()
        until(lambda: client._thread.calls_in_flight == 1, "the wait to be handed over")
    waiter.join()
    assert len(outcomes) == 1
    assert isinstance(outcomes[0], RuntimeClosed)
    with Client(url) as again:
        assert again.state(run_id) == QUEUED
        assert len(again.events(run_id)) == 1


def test_an_interrupted_call_stops_its_trio_side_and_leaves_the_run_alone() -> None:
    assert threading.current_thread() is threading.main_thread()  # where Ctrl-C lands
    main = threading.get_ident()
    with Client() as client:
        run_id = client.submit("job")

        def interrupt() -> None:
            until(lambda: client._thread.calls_in_flight == 1, "the wait to be handed over")
            signal.pthread_kill(main, signal.SIGINT)  # Ctrl-C, delivered to this thread

        interrupter = threading.Thread(target=interrupt)
        interrupter.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                client.wait(run_id)  # nothing serves the run: only the interrupt ends this
        finally:
            interrupter.join()
        until(lambda: client._thread.calls_in_flight == 0, "the wait to stop in the Trio thread")
        assert [e.state for e in client.events(run_id)] == [QUEUED]
        assert client.cancel_run(run_id) == CANCELLED  # the client still works


def test_a_trio_thread_that_dies_fails_its_calls_and_its_close() -> None:
    outcomes: list[BaseException | object] = []

    def boom() -> None:
        raise ZeroDivisionError("the Trio thread fails")

    client = Client()
    with client:
        run_id = client.submit("job")

        def waiting() -> None:
            try:
                outcomes.append(client.wait(run_id))
            except BaseException as exc:
                outcomes.append(exc)

        waiter = threading.Thread(target=waiting)
        waiter.start()
        until(lambda: client._thread.calls_in_flight == 1, "the wait to be handed over")
        token = client._thread.token
        assert token is not None
        token.run_sync_soon(boom)  # a crash of the Trio run itself
        waiter.join()
        assert len(outcomes) == 1
        assert isinstance(outcomes[0], RuntimeClosed)
        until(lambda: client._thread.calls_in_flight == 0, "the thread to settle")
        with pytest.raises(RuntimeClosed):
            client.state(run_id)
        with pytest.raises(trio.TrioInternalError):
            client.close()
    client.close()  # told once: closing again does nothing


def test_events_reads_every_page_of_a_long_history() -> None:
    with Client() as client:
        # More events than one store read returns, so the client must read on.
        run_ids = [client.submit("job", run_id=f"run-{i}") for i in range(1_100)]
        events = client.events()
        assert [e.run_id for e in events] == run_ids
        assert [e.seq for e in client.events(after=events[99].seq)] == [e.seq for e in events[100:]]


def test_fork_commits_a_queued_fork_and_answers_with_its_id() -> None:
    with Client() as client:
        source = client.submit("job", input={"n": 2}, run_id="src")
        [submitted] = client.events(source)
        fork = client.fork(source, at=submitted.seq, new_run_id="f")
        assert fork == "f"
        record = client.record(fork)
        assert (record.state, record.name, record.input) == (QUEUED, "job", {"n": 2})
        assert record.forked_from == {"run_id": "src", "seq": submitted.seq}
        assert client.events(source) == [submitted]  # the source is untouched
        assert client.fork(source) != fork  # a fresh id by default
        with pytest.raises(UnknownRun):
            client.fork("nobody")
        with pytest.raises(InvalidArgument, match="not the seq"):
            client.fork(source, at=10**6)
        with pytest.raises(RunExists):
            client.fork(source, new_run_id="f")


def test_submit_takes_the_busy_thread_policies() -> None:
    with Client() as client:
        client.submit("job", run_id="m1", thread_id="chat")
        with pytest.raises(ThreadBusy) as caught:
            client.submit("job", run_id="m2", thread_id="chat", if_busy="reject")
        assert (caught.value.run_id, caught.value.state) == ("m1", QUEUED)
        with pytest.raises(UnknownRun):
            client.record("m2")
        assert client.submit("job", run_id="m3", thread_id="chat", if_busy="supersede") == "m3"
        assert client.state("m1") == RunState.Ended(EndCause.Stopped("superseded"))
        assert client.events("m1")[-1].detail == {"superseded_by": "m3"}
        with pytest.raises(InvalidArgument, match="if_busy"):
            client.submit("job", if_busy="later")  # type: ignore[arg-type]


def test_submit_takes_the_runs_time_limits_and_a_delayed_start() -> None:
    with Client() as client:
        before = time.time()
        run_id = client.submit(
            "job", run_id="lim", timeout=3600, queue_timeout=60, not_before=before + 120
        )
        record = client.record(run_id)
        assert record.deadline is not None
        assert before + 3600 <= record.deadline <= time.time() + 3600
        assert record.not_before == before + 120
        assert client.state(run_id) == QUEUED
        # Past already: committed, and ended at once.
        past = client.submit("job", deadline=before - 1)
        assert client.state(past) == RunState.Ended(EndCause.Stopped("deadline"))
        # Nothing served it within its queue timeout: the client's runtime ends it.
        late = client.submit("job", queue_timeout=0.05)
        assert client.wait(late, timeout=30) == RunState.Ended(EndCause.Stopped("queue_timeout"))
        with pytest.raises(InvalidArgument, match="not both"):
            client.submit("job", run_id="both", timeout=1, deadline=before + 5)
        with pytest.raises(UnknownRun):
            client.record("both")


def test_submit_takes_a_retry_policy_stored_with_the_run() -> None:
    with Client() as client:
        policy = RetryPolicy(attempts=4, backoff=0.5, codes=("timeout",))
        run_id = client.submit("job", run_id="rt", retry=policy)
        record = client.record(run_id)
        assert (record.retry, record.retries) == (policy, 0)
        with pytest.raises(InvalidArgument, match="retry= takes a RetryPolicy"):
            client.submit("job", run_id="rt-bad", retry=3)  # type: ignore[arg-type]
        with pytest.raises(UnknownRun):
            client.record("rt-bad")
