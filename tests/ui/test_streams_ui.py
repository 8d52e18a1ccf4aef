"""A run's streams in the dashboard's API: its channels, each channel as server-sent events
(one chunk each, its offset as the id; ``after`` and ``Last-Event-ID`` say where to start),
204 once a channel has ended before that, and one clear error for every bad request; a
client that falls behind loses its stream without holding anyone back; the run page has a
panel per channel."""

from __future__ import annotations

import json
import re
from collections.abc import MutableMapping
from typing import Any

import pytest
import trio

from awaken_trio import RunContext, Runtime
from awaken_trio._ui import _streams as ui_streams
from awaken_trio._ui._streams import ChunkEvents
from tests.ui.ui_helpers import XSS, api, dashboard, page

CHUNK = re.compile(r"id: (\d+)\nevent: chunk\ndata: (\{.*\})\n\n")


def chunks_in(text: str) -> list[tuple[int, dict[str, Any]]]:
    return [(int(found[1]), json.loads(found[2])) for found in CHUNK.finditer(text)]


async def talks(ctx: RunContext) -> object:
    out = ctx.stream()
    for word in ("one", " two", " three"):
        out.send(word)
    ctx.stream("agent.tokens").send({"token": XSS})
    return None


async def ended(runtime: Runtime, body: Any = talks, run_id: str = "r1") -> None:
    await runtime.execute(body, run_id=run_id)


async def test_a_runs_channels_are_listed_and_an_unknown_run_is_404() -> None:
    async with dashboard() as d:
        await ended(d.runtime)
        answer = await d.http.get(api("r1", "streams"))
        assert answer.status_code == 200
        assert answer.json() == ["agent.tokens", "output"]
        assert (await d.http.get(api("nobody", "streams"))).status_code == 404
        assert (await d.http.post(api("r1", "streams"))).status_code == 405
        assert (await d.http.post(api("r1", "streams", "output"))).status_code == 405
        assert (await d.http.get(api("r1", "streams", "output", "more"))).status_code == 404


async def test_a_channel_is_server_sent_events_one_chunk_each_with_its_offset() -> None:
    async with dashboard() as d:
        await ended(d.runtime)
        answer = await d.http.get(api("r1", "streams", "output"))
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        assert answer.headers["cache-control"] == "no-store"
        got = chunks_in(answer.text)
        assert [offset for offset, _ in got] == [1, 2, 3, 4]
        assert [(c["kind"], c["value"]) for _, c in got] == [
            ("data", "one"),
            ("data", " two"),
            ("data", " three"),
            ("end", None),
        ]
        assert set(got[0][1]) == {"offset", "generation", "kind", "value", "at"}


async def test_after_and_last_event_id_say_where_a_stream_starts() -> None:
    async with dashboard() as d:
        await ended(d.runtime)
        url = api("r1", "streams", "output")
        after = await d.http.get(url, params={"after": "2"})
        assert [o for o, _ in chunks_in(after.text)] == [3, 4]
        # A browser reconnecting sends the last id it got: it wins over the query.
        resumed = await d.http.get(url, params={"after": "0"}, headers={"Last-Event-ID": "3"})
        assert [o for o, _ in chunks_in(resumed.text)] == [4]
        # Past its end: nothing more will come, and a browser does not reconnect after 204.
        done = await d.http.get(url, headers={"Last-Event-ID": "4"})
        assert done.status_code == 204
        assert done.text == ""


@pytest.mark.parametrize(
    ("query", "headers", "status", "error"),
    [
        ({"after": "-1"}, {}, 400, "bad_input"),
        ({"after": "x"}, {}, 400, "bad_input"),
        ({"later": "1"}, {}, 400, "bad_input"),
        ({}, {"Last-Event-ID": "three"}, 400, "invalid_argument"),
    ],
)
async def test_a_bad_start_is_400_naming_it(
    query: dict[str, str], headers: dict[str, str], status: int, error: str
) -> None:
    async with dashboard() as d:
        await ended(d.runtime)
        answer = await d.http.get(api("r1", "streams", "output"), params=query, headers=headers)
        assert answer.status_code == status
        assert answer.json()["error"] == error


async def test_unknown_runs_channels_and_bad_names_are_named() -> None:
    async with dashboard() as d:
        await ended(d.runtime)
        unknown_run = await d.http.get(api("nobody", "streams", "output"))
        assert unknown_run.status_code == 404
        assert unknown_run.json()["error"] == "unknown_run"
        never = await d.http.get(api("r1", "streams", "outptu"))
        assert never.status_code == 404
        assert never.json()["error"] == "unknown_stream"
        assert "outptu" in never.json()["message"]
        bad = await d.http.get(api("r1", "streams", "a b"))
        assert bad.status_code == 400
        assert bad.json()["error"] == "invalid_argument"


async def test_chunks_no_longer_kept_are_a_409_gap_naming_the_oldest() -> None:
    async def scratch(ctx: RunContext) -> object:
        out = ctx.stream("scratch", keep=False)
        out.send("gone")
        out.send("gone too")
        return None

    async with dashboard() as d:
        await ended(d.runtime, scratch)
        gap = await d.http.get(api("r1", "streams", "scratch"))
        assert gap.status_code == 409
        assert gap.json()["error"] == "stream_gap"
        assert "after=2" in gap.json()["message"]
        rest = await d.http.get(api("r1", "streams", "scratch"), params={"after": "2"})
        assert [(o, c["kind"]) for o, c in chunks_in(rest.text)] == [(3, "end")]


async def test_a_run_page_has_a_panel_per_channel() -> None:
    async with dashboard() as d:
        await ended(d.runtime)
        html = (await d.http.get(page("r1"))).text
        assert 'id="streams"' in html
        assert 'data-channel="output"' in html
        assert 'data-channel="agent.tokens"' in html
        assert XSS not in html  # chunks are never rendered by the server
        quiet = await d.runtime.execute(_silent, run_id="quiet")
        assert quiet is not None
        html = (await d.http.get(page("quiet"))).text
        assert 'id="no-streams"' in html


async def _silent(ctx: RunContext) -> object:
    return None


# --------------------------------------------------------------------------- the response


class _Client:
    """An ASGI client that takes what the response sends, and can stall (stop taking it,
    as a client whose connection is full)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.finished = False
        self.stalled = trio.Event()
        self.stall_after: int | None = None
        self.resume = trio.Event()
        self.gone = trio.Event()
        self.done = trio.Event()
        self.got_one = trio.Event()

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] != "http.response.body":
            return
        if self.stall_after is not None and len(self.bodies) >= self.stall_after:
            self.stalled.set()
            await self.resume.wait()
        self.bodies.append(message.get("body", b""))
        if self.offsets():
            self.got_one.set()
        if not message.get("more_body", False):
            self.finished = True
            self.done.set()

    async def receive(self) -> MutableMapping[str, Any]:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    def offsets(self) -> list[int]:
        return [o for o, _ in chunks_in(b"".join(self.bodies).decode())]


async def test_a_client_that_falls_behind_loses_its_stream_and_holds_no_one_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ui_streams, "BUFFER", 5)
    release = trio.Event()

    async def many(ctx: RunContext) -> object:
        out = ctx.stream()
        for i in range(50):
            out.send(i)
        await out.flush()
        await release.wait()
        return None

    async with dashboard() as d:
        handle = await d.runtime.start(many, run_id="r1")
        slow, fast = _Client(), _Client()
        slow.stall_after = 1
        closed = trio.Event()
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for client in (slow, fast):
                    response = ChunkEvents(d.runtime, "r1", "output", 0, closed)
                    nursery.start_soon(response, {"type": "http"}, client.receive, client.send)
                await slow.stalled.wait()
                release.set()
                await handle.wait()
                # The fast client reads the whole stream, while the slow one is stuck.
                await fast.done.wait()
                assert fast.offsets() == list(range(1, 52))
                slow.resume.set()
        # The slow client got what was buffered for it, then its stream ended: its
        # browser reconnects from the last offset it got, and reads on from there.
        assert slow.finished
        assert slow.offsets() == list(range(1, len(slow.offsets()) + 1))
        assert len(slow.offsets()) <= 1 + 5 + 1
        rest = await d.http.get(
            api("r1", "streams", "output"), headers={"Last-Event-ID": str(slow.offsets()[-1])}
        )
        assert chunks_in(rest.text)[-1][1]["kind"] == "end"


async def test_a_stream_ends_when_the_dashboard_closes_or_the_client_goes() -> None:
    async def forever(ctx: RunContext) -> object:
        ctx.stream().send("hi")
        await trio.sleep_forever()

    async with dashboard() as d:
        await d.runtime.start(forever, run_id="r1")
        closing, leaving = _Client(), _Client()
        closed = trio.Event()
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    ChunkEvents(d.runtime, "r1", "output", 0, closed),
                    {"type": "http"},
                    closing.receive,
                    closing.send,
                )
                nursery.start_soon(
                    ChunkEvents(d.runtime, "r1", "output", 0, trio.Event()),
                    {"type": "http"},
                    leaving.receive,
                    leaving.send,
                )
                await closing.got_one.wait()
                await leaving.got_one.wait()
                closed.set()  # the hub closes at shutdown
                leaving.gone.set()  # the browser closed the page
        assert closing.finished
        assert closing.offsets() == [1]
        assert not leaving.finished  # nobody to tell
        await d.runtime.cancel_run("r1")
