"""``awaken-trio runs stream ID``: a run's stream printed as it is written until the run
ends (text chunks as they are, a reset noted on stderr), one chunk object per line with
``--json``, from ``--after``; a refusal exits 1, bad input 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from awaken_trio import RunContext, open_runtime
from tests.cli.cli_helpers import TIMEOUT, Result, cli, environment

CHUNK_KEYS = {"offset", "generation", "kind", "value", "at"}


async def talks(ctx: RunContext) -> object:
    out = ctx.stream()
    words = ("Hello", ", ", "world", "\n", "line two") if ctx.generation == 1 else ("again",)
    for word in words:
        out.send(word)
    ctx.stream("data").send({"n": ctx.generation})
    if ctx.generation == 1:
        await ctx.await_input("user_input")
    return None


@pytest.fixture
async def store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/runs.db"
    async with open_runtime(url) as runtime:
        await (await runtime.start(talks, run_id="r1")).wait()
        await (await runtime.resume("r1", "go")).wait()
    return url


async def test_text_chunks_print_as_they_are_and_a_reset_is_noted_on_stderr(store: str) -> None:
    done = await cli("runs", "stream", "r1", "--store", store)
    assert done.code == 0
    # The reset ends the open line: the new attempt's text starts on a line of its own.
    assert done.stdout == "Hello, world\nline two\nagain\n"
    assert done.stderr == "[attempt 2 starts the output over from offset 7]\n"
    data = await cli("runs", "stream", "r1", "--channel", "data", "--store", store)
    assert data.stdout == '{"n": 1}\n{"n": 2}\n'


async def test_json_prints_one_chunk_object_per_line_from_after(store: str) -> None:
    done = await cli("runs", "stream", "r1", "--after", "5", "--json", "--store", store)
    assert done.code == 0
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert all(set(line) == CHUNK_KEYS for line in lines)
    assert [(c["offset"], c["generation"], c["kind"], c["value"]) for c in lines] == [
        (6, 2, "reset", None),
        (7, 2, "data", "again"),
        (8, 2, "end", None),
    ]


async def test_it_follows_a_running_run_until_its_end(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    go = trio.Event()

    async def slow(ctx: RunContext) -> object:
        out = ctx.stream()
        out.send("before")
        await out.flush()
        await go.wait()
        out.send("after")
        return None

    async with open_runtime(url) as runtime:
        handle = await runtime.start(slow, run_id="r1")
        async with trio.open_nursery() as nursery:
            result: list[Result] = []

            async def follow() -> None:
                result.append(await cli("runs", "stream", "r1", "--json", "--store", url))

            nursery.start_soon(follow)
            # The command is following (it printed nothing of the end yet): let it end.
            await trio.sleep(1.0)
            assert result == []
            go.set()
            await handle.wait()
        (done,) = result
        assert [json.loads(line)["value"] for line in done.stdout.splitlines()] == [
            "before",
            "after",
            None,
        ]


@pytest.mark.parametrize(
    ("args", "code", "error"),
    [
        (("nobody",), 1, "unknown_run"),
        (("r1", "--channel", "never"), 2, "invalid_argument"),
        (("r1", "--channel", "no spaces allowed"), 2, "invalid_argument"),
    ],
)
async def test_refusals_exit_1_and_bad_input_2_with_one_clear_error(
    store: str, args: tuple[str, ...], code: int, error: str
) -> None:
    plain = await cli("runs", "stream", *args, "--store", store)
    assert plain.code == code
    assert plain.stdout == ""
    assert plain.stderr.startswith(f"awaken-trio: {error}: ")
    assert "Traceback" not in plain.stderr
    as_json = await cli("runs", "stream", *args, "--json", "--store", store)
    assert as_json.code == code
    assert json.loads(as_json.stdout)["error"] == error


async def test_a_negative_after_is_a_usage_error(store: str) -> None:
    done = await cli("runs", "stream", "r1", "--after", "-1", "--store", store)
    assert done.code == 2
    assert "--after" in done.stderr


async def test_a_gap_exits_1_naming_the_oldest_offset(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"

    async def scratch(ctx: RunContext) -> object:
        ctx.stream(keep=False).send("gone")
        return None

    async with open_runtime(url) as runtime:
        await runtime.execute(scratch, run_id="r1")
    done = await cli("runs", "stream", "r1", "--store", url, env=environment())
    assert done.code == 1
    assert done.stderr.startswith("awaken-trio: stream_gap: ")
    assert "after=1" in done.stderr
    with trio.fail_after(TIMEOUT):
        rest = await cli("runs", "stream", "r1", "--after", "1", "--json", "--store", url)
    assert [json.loads(line)["kind"] for line in rest.stdout.splitlines()] == ["end"]
