"""``awaken-trio ui`` as a real process: it serves the API and a live stream fed by
commits of other processes, Ctrl-C ends it cleanly, and it refuses to start where it would
be unsafe or cannot work."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

from awaken_trio import open_runtime
from awaken_trio._cli import main
from tests.ui.server_helpers import (
    COMMAND,
    HERE,
    TIMEOUT,
    environment,
    event_stream,
    started,
    ui_server,
)
from tests.ui.ui_helpers import TOKEN

RUN_EVENT = r"event: run_event\r?\ndata: (\{.*\})\r?\n"


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/runs.db"


async def submit(store: str, run_id: str) -> None:
    async with open_runtime(store) as runtime:
        await runtime.submit("steps", run_id=run_id)


async def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(TIMEOUT):
        return await trio.run_process(
            [*COMMAND, *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env if env is not None else environment(),
            cwd=HERE,
            stdin=subprocess.DEVNULL,
        )


async def test_it_serves_a_live_stream_of_other_processes_commits_and_ctrl_c_ends_it(
    store: str,
) -> None:
    await submit(store, "r1")
    async with ui_server(store) as server, httpx.AsyncClient(base_url=server.url) as http:
        rows = (await http.get("/api/runs")).json()
        assert [row["run_id"] for row in rows] == ["r1"]
        async with event_stream(server.url) as stream:
            await stream.read_until("event: hello")
            head = stream.text.lower()
            assert "content-type: text/event-stream" in head
            assert "content-security-policy: default-src 'none'" in head
            assert "unsafe-inline" not in head
            # Another process (this one) ends the run in the store.
            async with open_runtime(store) as runtime:
                await runtime.cancel_run("r1", reason="from elsewhere")
            found = await stream.read_until(RUN_EVENT)
            event = json.loads(found.group(1))
            assert event["run_id"] == "r1"
            assert event["state"] == {"kind": "ended", "cause": {"kind": "cancelled"}}
            assert event["detail"]["reason"] == "from elsewhere"
            # Ctrl-C with the stream still open: the stream ends, the process exits 0.
            server.process.process.send_signal(signal.SIGINT)
            await stream.read_to_end()
        assert await server.process.wait() == 0
        text = await server.process.read_to_end()
        assert "awaken-trio ui: stopped" in text
        assert "Traceback" not in text


async def test_a_run_streams_only_its_own_events(store: str) -> None:
    await submit(store, "mine")
    await submit(store, "other")
    async with ui_server(store) as server, httpx.AsyncClient(base_url=server.url) as http:
        assert (await http.get("/api/stream", params={"run_id": "nobody"})).status_code == 404
        async with event_stream(server.url, "?run_id=mine") as stream:
            await stream.read_until("event: hello")
            async with open_runtime(store) as runtime:
                await runtime.stop_run("other", "not shown")
                await runtime.stop_run("mine", "shown")
            found = await stream.read_until(RUN_EVENT)
            assert json.loads(found.group(1))["run_id"] == "mine"
            assert '"other"' not in stream.text
        server.process.process.send_signal(signal.SIGTERM)
        assert await server.process.wait() == 0


async def test_with_a_token_from_the_environment_every_request_needs_it(store: str) -> None:
    await submit(store, "r1")
    env = environment(AWAKEN_TRIO_UI_TOKEN=TOKEN)
    async with ui_server(store, env=env) as server, httpx.AsyncClient(base_url=server.url) as http:
        assert (await http.get("/api/runs")).status_code == 401
        assert (await http.post("/api/runs/r1/cancel", json={})).status_code == 401
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert (await http.get("/api/runs", headers=bearer)).status_code == 200
        server.process.process.send_signal(signal.SIGINT)
        assert await server.process.wait() == 0
        assert TOKEN not in await server.process.read_to_end()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.1"])
async def test_another_address_without_a_token_refuses_to_start(store: str, host: str) -> None:
    await submit(store, "r1")
    done = await run("ui", "--store", store, "--host", host, "--port", "0")
    assert done.returncode == 2
    err = done.stderr.decode()
    assert "--token" in err
    assert "AWAKEN_TRIO_UI_TOKEN" in err
    assert "Traceback" not in err
    assert err.count("\n") == 1


async def test_a_weak_token_is_refused_without_being_printed(store: str) -> None:
    await submit(store, "r1")
    done = await run("ui", "--store", store, "--port", "0", "--token", "hunter2")
    assert done.returncode == 2
    assert "16" in done.stderr.decode()
    assert "hunter2" not in done.stderr.decode() + done.stdout.decode()


async def test_a_port_in_use_or_a_missing_store_is_one_clear_line(
    store: str, tmp_path: Path
) -> None:
    await submit(store, "r1")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = await run("ui", "--store", store, "--port", str(port))
    assert done.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr.decode()
    missing = await run("ui", "--store", f"sqlite:///{tmp_path}/none.db", "--port", "0")
    assert missing.returncode == 3
    assert "there is no store" in missing.stderr.decode()
    assert not (tmp_path / "none.db").exists()


async def test_without_the_ui_extra_it_says_what_to_install(tmp_path: Path) -> None:
    # In a process of its own: the command installs its log handler on the root logger.
    absent = "import sys; sys.modules['starlette.applications'] = None"  # an absent package
    run = "from awaken_trio._cli import main; main(sys.argv[1:])"
    done = await trio.run_process(
        [sys.executable, "-c", f"{absent}; {run}", "ui", "--store", f"sqlite:///{tmp_path}/x.db"],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=environment(),
    )
    assert done.returncode == 2
    err = done.stderr.decode()
    assert "pip install -e '.[ui]'" in err
    assert "Traceback" not in err


async def test_a_second_signal_while_stopping_stops_at_once(store: str) -> None:
    await submit(store, "r1")
    async with ui_server(store) as server:
        async with event_stream(server.url) as stream:
            await stream.read_until("event: hello")
            server.process.process.send_signal(signal.SIGINT)
            await server.process.read_until("stopping")
            server.process.process.send_signal(signal.SIGINT)
            assert await server.process.wait() == 0
        assert "Traceback" not in await server.process.read_to_end()


async def test_the_same_started_helper_kills_what_it_started(store: str) -> None:
    await submit(store, "r1")
    async with started("ui", "--store", store, "--port", "0") as process:
        await process.read_until("Ctrl-C to stop")
        pid = process.process.pid
    assert process.process.returncode is not None
    assert pid > 0


def test_the_command_list_names_ui(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    listed = capsys.readouterr().out
    assert re.search(r"^\s+ui\s+Serve the web dashboard", listed, re.M)
    with pytest.raises(SystemExit):
        main(["ui", "--help"])
    help_text = capsys.readouterr().out
    for option in ("--store", "--host", "--port", "--token", "AWAKEN_TRIO_UI_TOKEN"):
        assert option in help_text
