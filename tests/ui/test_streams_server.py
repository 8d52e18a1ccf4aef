"""``awaken-trio ui`` as a real process serves a run's stream live, chunk by chunk, as a
worker process writes it, and ends it after the run's end."""

from __future__ import annotations

import json
import re
from pathlib import Path

import trio

from awaken_trio import RunState, open_runtime
from tests.ui.server_helpers import TIMEOUT, ui_server, worker

CHUNK = r"id: (\d+)\r?\nevent: chunk\r?\ndata: (\{.*\})\r?\n"


async def test_a_worker_processs_stream_is_served_live_to_its_end(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/runs.db"
    async with open_runtime(store) as runtime:
        await runtime.submit("talks", run_id="r1")
    async with ui_server(store) as server, worker(store):
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(
                f"GET /api/runs/r1/streams/output HTTP/1.1\r\nHost: {host}:{port}\r\n"
                "Accept: text/event-stream\r\nConnection: close\r\n\r\n".encode()
            )
            seen = b""
            with trio.fail_after(TIMEOUT):
                # The first attempt's words come as they are written, the run still going.
                while len(re.findall(CHUNK, seen.decode())) < 3:
                    seen += await stream.receive_some()
            assert "text/event-stream" in seen.decode().lower()
            words = [json.loads(m[1])["value"] for m in re.findall(CHUNK, seen.decode())]
            assert words == ["first ", "attempt ", "tokens"]
            async with open_runtime(store) as runtime:
                with trio.fail_after(TIMEOUT):
                    async for event in runtime.events("r1"):
                        if isinstance(event.state, RunState.Awaiting):
                            break
                await runtime.resume("r1", "go on")
            with trio.fail_after(TIMEOUT):
                while chunk := await stream.receive_some():
                    seen += chunk
        found = [json.loads(m[1]) for m in re.findall(CHUNK, seen.decode())]
        assert [(c["offset"], c["kind"], c["value"]) for c in found] == [
            (1, "data", "first "),
            (2, "data", "attempt "),
            (3, "data", "tokens"),
            (4, "reset", None),
            (5, "data", "second "),
            (6, "data", "attempt"),
            (7, "end", None),
        ]
