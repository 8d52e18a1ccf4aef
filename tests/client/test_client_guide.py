"""The client guide's example runs as written, against a runtime that serves its store."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio

from awaken_trio import JsonValue, RunContext, open_runtime
from tests.client.client_helpers import POLL, ROOT, WAIT

GUIDE = ROOT / "docs" / "guides" / "client.md"


def client_example() -> str:
    blocks: list[str] = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)
    [example] = [block for block in blocks if "with Client(" in block]
    return example


async def summarise(ctx: RunContext) -> JsonValue:
    await trio.lowlevel.checkpoint()
    return {"summary": f"doc {ctx.input['doc']}"}


@contextmanager
def serving(url: str) -> Iterator[None]:
    """A runtime serving ``url`` with the example's body, on a Trio thread of the test's
    own, until the block ends."""
    started = threading.Event()
    handles: list[tuple[trio.lowlevel.TrioToken, trio.CancelScope]] = []
    failures: list[BaseException] = []

    async def serve() -> None:
        async with (
            open_runtime(url, bodies={"summarise": summarise}, poll=POLL) as runtime,
            trio.open_nursery() as nursery,
        ):
            await nursery.start(runtime.serve)
            handles.append((trio.lowlevel.current_trio_token(), nursery.cancel_scope))
            started.set()

    def main() -> None:
        try:
            trio.run(serve)
        except BaseException as exc:
            failures.append(exc)
        finally:
            started.set()

    thread = threading.Thread(target=main)
    thread.start()
    try:
        assert started.wait(WAIT), "the serving runtime did not start"
        assert failures == []
        yield
    finally:
        if handles:
            token, scope = handles[0]
            token.run_sync_soon(scope.cancel)
        thread.join()
    assert failures == []


def test_the_client_guides_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the example's sqlite:///runs.db
    with serving("sqlite:///runs.db"):
        exec(compile(client_example(), str(GUIDE), "exec"), {"__name__": "readme_client"})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "{'summary': 'doc 7'}"
    assert printed[1] in (
        "RunState.Ended(cause=EndCause.Cancelled())",
        "RunState.Ended(cause=EndCause.NaturalEnd())",
    )
    assert printed[2] == "RunState.Ended(cause=EndCause.NaturalEnd()) {'summary': 'doc 9'}"
