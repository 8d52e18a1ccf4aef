"""Mistakes a new user makes get one clear sentence saying what to do: a path as the store,
a body written for asyncio, a runtime used outside the trio.run that opened it, and an
exception with no message."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import httpx
import pytest
import trio

from awaken_trio import (
    EndCause,
    InvalidArgument,
    LiveCommand,
    RunContext,
    RunError,
    RunState,
    Runtime,
    RuntimeClosed,
    open_runtime,
)
from awaken_trio.store import open_store
from awaken_trio.store.sqlite._store import SQLiteStore
from tests.run_helpers import reach, settle

NATURAL_END = RunState.Ended(EndCause.NaturalEnd())

# ---------------------------------------------------------------------------- paths


async def _returns_input(ctx: RunContext) -> object:
    return ctx.input


@pytest.mark.parametrize("relative", [False, True])
async def test_a_path_names_an_sqlite_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, relative: bool
) -> None:
    monkeypatch.chdir(tmp_path)
    path = Path("data") / "runs.db" if relative else tmp_path / "data" / "runs.db"
    with trio.fail_after(20):
        async with open_runtime(path) as runtime:
            assert await runtime.execute(_returns_input, run_id="r1", input=[1]) == NATURAL_END
    assert (tmp_path / "data" / "runs.db").is_file()
    with trio.fail_after(20):
        async with SQLiteStore(tmp_path / "data" / "runs.db") as store:
            record = await store.load("r1")
    assert record is not None
    assert record.result == [1]


class _OwnPath(os.PathLike[str]):
    def __init__(self, path: str) -> None:
        self._path = path

    def __fspath__(self) -> str:
        return self._path


def test_open_store_takes_any_path_like(tmp_path: Path) -> None:
    for path in (tmp_path / "a.db", _OwnPath(str(tmp_path / "b.db"))):
        store = open_store(path)
        assert isinstance(store, SQLiteStore)
        assert repr(store) == f"SQLiteStore({os.fspath(path)!r}, synchronous='full')"


async def test_a_bare_file_name_as_a_store_url_says_how_to_name_a_file() -> None:
    with pytest.raises(InvalidArgument, match=r"sqlite:///runs\.db.*Path\('runs\.db'\)"):
        async with open_runtime("runs.db"):
            pass  # pragma: no cover


# ---------------------------------------------------------------------------- asyncio


async def _asyncio_sleep(ctx: RunContext) -> None:
    await asyncio.sleep(1)


async def _asyncio_event(ctx: RunContext) -> None:
    await asyncio.Event().wait()


async def _asyncio_loop(ctx: RunContext) -> None:
    asyncio.get_running_loop()


async def _asyncio_future(ctx: RunContext) -> None:
    await asyncio.Future()


@pytest.mark.parametrize("body", [_asyncio_sleep, _asyncio_event, _asyncio_loop, _asyncio_future])
async def test_a_body_that_uses_asyncio_fails_saying_to_use_trio_or_anyio(
    runtime: Runtime, body: object
) -> None:
    state = await runtime.execute(body)  # type: ignore[arg-type]
    assert isinstance(state, RunState.Ended)
    cause = state.cause
    assert isinstance(cause, EndCause.Failed)
    assert "awaken_trio runs bodies under Trio" in cause.message
    assert "use trio or anyio" in cause.message


async def test_an_unrelated_runtime_error_gets_no_asyncio_hint(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> None:
        raise RuntimeError("no running event loop for the dishwasher")

    state = await runtime.execute(body)
    assert state == RunState.Ended(
        EndCause.Failed("runtime_error", "no running event loop for the dishwasher")
    )


# ---------------------------------------------------------------------------- another trio.run


def _kept_runtime() -> tuple[Runtime, str]:
    kept: list[Runtime] = []

    async def main() -> None:
        async with open_runtime() as runtime:
            kept.append(runtime)
            await runtime.execute(_returns_input, run_id="done")

    trio.run(main)
    return kept[0], "done"


def _calls(runtime: Runtime, run_id: str) -> dict[str, object]:
    async def body(ctx: RunContext) -> None:
        return None

    return {
        "start": lambda: runtime.start(body),
        "execute": lambda: runtime.execute(body),
        "submit": lambda: runtime.submit("job"),
        "state": lambda: runtime.state(run_id),
        "record": lambda: runtime.record(run_id),
        "cancel_run": lambda: runtime.cancel_run(run_id),
        "stop_run": lambda: runtime.stop_run(run_id, "why"),
        "resume": lambda: runtime.resume(run_id),
        "send": lambda: runtime.send(LiveCommand.Wake(run_id)),
        "deliver_to_current_attempt": lambda: runtime.deliver_to_current_attempt(
            LiveCommand.Wake(run_id)
        ),
    }


@pytest.mark.parametrize("call", sorted(_calls(_kept_runtime()[0], "x")))
def test_a_runtime_used_after_its_trio_run_ended_says_so(call: str) -> None:
    runtime, run_id = _kept_runtime()
    invoke = _calls(runtime, run_id)[call]

    async def use() -> None:
        await invoke()  # type: ignore[operator]

    with pytest.raises(RuntimeClosed, match=r"belongs to another trio\.run"):
        trio.run(use)


def test_a_runtime_used_after_its_trio_run_ended_refuses_deliver_and_events() -> None:
    runtime, run_id = _kept_runtime()

    async def use() -> None:
        with pytest.raises(RuntimeClosed, match=r"belongs to another trio\.run"):
            runtime.deliver(LiveCommand.Wake(run_id))
        with pytest.raises(RuntimeClosed, match=r"belongs to another trio\.run"):
            runtime.events(run_id)

    trio.run(use)


async def test_a_runtime_used_from_another_trio_run_is_refused_and_left_intact(
    runtime: Runtime,
) -> None:
    entered = trio.Event()

    async def parked(ctx: RunContext) -> None:
        entered.set()
        await trio.sleep_forever()

    handle = await runtime.start(parked, run_id="p")
    await reach(entered)
    refusals: list[str] = []

    async def from_elsewhere() -> None:
        for name, call in _calls(runtime, "p").items():
            try:
                with trio.fail_after(5):  # a call that waits on the other run never returns
                    await call()  # type: ignore[operator]
            except RuntimeClosed as exc:
                refusals.append(name if "belongs to another trio.run" in str(exc) else str(exc))
            except Exception as exc:
                refusals.append(f"{name}: {exc!r}")

    thread = threading.Thread(target=trio.run, args=(from_elsewhere,))
    thread.start()
    with trio.fail_after(20):
        await trio.to_thread.run_sync(thread.join)
    assert refusals == list(_calls(runtime, "p"))
    assert await runtime.state("p") == RunState.Running(1)
    runtime.deliver(LiveCommand.Cancel("p"))
    assert await settle(handle) == RunState.Ended(EndCause.Cancelled())


# ---------------------------------------------------------------------------- empty messages


@pytest.mark.parametrize(
    ("error", "code", "message"),
    [
        (TimeoutError(), "timeout_error", "TimeoutError (no message)"),
        (httpx.ConnectError(""), "connect_error", "ConnectError (no message)"),
        (KeyError(""), "key_error", "''"),  # str() is not empty: kept
        (RunError("gave_up"), "gave_up", "RunError gave_up (no message)"),
    ],
)
async def test_an_exception_with_no_message_ends_failed_with_one_that_names_it(
    runtime: Runtime, error: Exception, code: str, message: str
) -> None:
    async def body(ctx: RunContext) -> None:
        raise error

    assert await runtime.execute(body) == RunState.Ended(EndCause.Failed(code, message))


async def test_an_empty_exception_raised_from_another_names_its_cause(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> None:
        try:
            raise OSError(111, "Connection refused")
        except OSError as exc:
            raise TimeoutError() from exc

    state = await runtime.execute(body)
    assert state == RunState.Ended(
        EndCause.Failed(
            "timeout_error",
            "TimeoutError (no message),"
            " from ConnectionRefusedError: [Errno 111] Connection refused",
        )
    )
