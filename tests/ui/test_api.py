"""The dashboard's JSON API (DESIGN §3.6): every route, every answer code, the shapes of
the command line's ``--json``, filters and pages."""

from __future__ import annotations

import re

import httpx
import pytest
import trio

from awaken_trio import EndCause, LiveCommand, RunRecord, RunState, StoreError
from awaken_trio._face.shapes import event_json, record_json, row_json, worker_json
from awaken_trio.store import state_to_json
from tests.ui.ui_helpers import XSS, api, asks, dashboard, page, settle, steps, waits
from tests.wrapped_stores import WrappedStore

pytestmark = pytest.mark.usefixtures("autojump_clock")


async def test_runs_are_listed_newest_first_as_the_command_line_prints_them() -> None:
    async with dashboard() as d:
        for n in range(3):
            await d.runtime.submit("steps", run_id=f"r{n}", thread_id="shared")
        answer = await d.http.get("/api/runs")
        assert answer.status_code == 200
        expected = [row_json(r) for r in await d.runtime.list_runs()]
        assert answer.json() == expected
        assert [row["run_id"] for row in answer.json()] == ["r2", "r1", "r0"]


async def test_the_list_filters_by_state_name_and_thread() -> None:
    async with dashboard() as d:
        await d.runtime.submit("steps", run_id="a", thread_id="t1")
        await d.runtime.submit("waits", run_id="b", thread_id="t2")
        await d.runtime.submit("asks", run_id="c", thread_id="t2")
        await d.runtime.cancel_run("c")

        async def ids(**params: str) -> list[str]:
            answer = await d.http.get("/api/runs", params=params)
            assert answer.status_code == 200, answer.text
            return [row["run_id"] for row in answer.json()]

        assert await ids(state="ended") == ["c"]
        assert await ids(state="queued") == ["b", "a"]
        assert await ids(name="waits") == ["b"]
        assert await ids(thread="t2") == ["c", "b"]
        assert await ids(thread="t2", state="queued") == ["b"]


async def test_the_list_filters_by_end_cause_and_the_counts_add_up() -> None:
    async with dashboard() as d:
        await d.runtime.submit("steps", run_id="a")
        await d.runtime.submit("waits", run_id="b")
        await d.runtime.submit("asks", run_id="c")
        await d.runtime.cancel_run("a")
        await d.runtime.stop_run("b", "enough")
        answer = await d.http.get("/api/runs", params={"state": "cancelled"})
        assert [row["run_id"] for row in answer.json()] == ["a"]
        answer = await d.http.get("/api/runs", params={"state": "stopped"})
        assert [row["run_id"] for row in answer.json()] == ["b"]
        assert (await d.http.get("/api/runs", params={"state": "failed"})).json() == []
        counts = await d.http.get("/api/counts")
        assert counts.status_code == 200
        assert counts.json() == {
            "queued": 1,
            "running": 0,
            "awaiting": 0,
            "ended": 2,
            "natural_end": 0,
            "max_steps": 0,
            "cancelled": 1,
            "stopped": 1,
            "failed": 0,
            "indeterminate": 0,
            "total": 3,
        }
        assert (await d.http.get("/api/counts", params={"x": "1"})).status_code == 400


async def test_the_workers_are_a_json_array() -> None:
    async with dashboard() as d:
        answer = await d.http.get("/api/workers")
        assert answer.status_code == 200
        assert answer.json() == [worker_json(w) for w in await d.runtime.list_workers()]
        assert (await d.http.get("/api/workers", params={"all": "1"})).status_code == 200
        assert (await d.http.get("/api/workers", params={"x": "1"})).status_code == 400


async def test_pages_follow_one_another_by_before_and_the_link_header() -> None:
    async with dashboard() as d:
        for n in range(5):
            await d.runtime.submit("steps", run_id=f"r{n}")
        first = await d.http.get("/api/runs", params={"limit": "2"})
        assert [row["run_id"] for row in first.json()] == ["r4", "r3"]
        assert first.headers["link"] == '</api/runs?limit=2&before=r3>; rel="next"'
        second = await d.http.get("/api/runs", params={"limit": "2", "before": "r3"})
        assert [row["run_id"] for row in second.json()] == ["r2", "r1"]
        last = await d.http.get("/api/runs", params={"limit": "2", "before": "r1"})
        assert [row["run_id"] for row in last.json()] == ["r0"]
        assert "link" not in last.headers


@pytest.mark.parametrize(
    ("params", "error", "names"),
    [
        ({"state": "sleeping"}, "invalid_argument", "sleeping"),
        ({"limit": "0"}, "bad_input", "limit"),
        ({"limit": "many"}, "bad_input", "limit"),
        ({"limit": "501"}, "bad_input", "limit"),
        ({"thread_id": "t"}, "bad_input", "thread_id"),
        ({"before": "nobody"}, "unknown_run", "nobody"),
    ],
)
async def test_a_bad_filter_is_400_naming_it(
    params: dict[str, str], error: str, names: str
) -> None:
    async with dashboard() as d:
        answer = await d.http.get("/api/runs", params=params)
        assert answer.status_code == 400
        body = answer.json()
        assert body["error"] == error
        assert names in body["message"]
        assert body["state"] is None


async def test_a_run_is_its_record_and_an_unknown_run_is_404() -> None:
    async with dashboard() as d:
        run_id = 'odd/id <b>"'
        await d.runtime.submit("steps", run_id=run_id, input={"x": XSS})
        answer = await d.http.get(api(run_id))
        assert answer.status_code == 200
        assert answer.json() == record_json(await d.runtime.record(run_id))
        missing = await d.http.get(api("nobody"))
        assert missing.status_code == 404
        assert missing.json()["error"] == "unknown_run"
        assert missing.json()["state"] is None
        assert (await d.http.get(api("nobody", "events"))).status_code == 404
        assert (await d.http.get(api(run_id, "nothing"))).status_code == 404


async def test_a_runs_events_are_its_committed_events_oldest_first_after_a_seq() -> None:
    async with dashboard() as d:
        handle = await d.runtime.start(steps, run_id="e", name="steps")
        await settle(d.runtime, "e", "running")
        await d.runtime.cancel_run(handle.run_id)
        events = [event_json(e) async for e in d.runtime.events("e", follow=False)]
        answer = await d.http.get(api("e", "events"))
        assert answer.status_code == 200
        assert answer.json() == events
        after = await d.http.get(api("e", "events"), params={"after": str(events[0]["seq"])})
        assert after.json() == events[1:]
        page = await d.http.get(api("e", "events"), params={"limit": "1"})
        assert page.json() == events[:1]
        assert f"after={events[0]['seq']}" in page.headers["link"]
        bad = await d.http.get(api("e", "events"), params={"after": "-1"})
        assert bad.status_code == 400


async def test_cancel_answers_the_committed_state_then_the_refusal_with_it() -> None:
    async with dashboard() as d:
        await d.runtime.start(steps, run_id="c", name="steps")
        answer = await d.http.post(api("c", "cancel"), json={"reason": "operator"})
        assert answer.status_code == 200
        assert answer.json() == {"kind": "ended", "cause": {"kind": "cancelled"}}
        assert await d.runtime.state("c") == RunState.Ended(EndCause.Cancelled())
        events = [e async for e in d.runtime.events("c", follow=False)]
        assert events[-1].detail["reason"] == "operator"
        again = await d.http.post(api("c", "cancel"), json={})
        assert again.status_code == 409
        assert again.json()["error"] == "run_already_ended"
        assert again.json()["state"] == {"kind": "ended", "cause": {"kind": "cancelled"}}
        assert "c" in again.json()["message"]


async def test_stop_needs_a_reason_and_commits_stopped_with_it() -> None:
    async with dashboard() as d:
        await d.runtime.submit("steps", run_id="s")
        for body in ({}, {"reason": ""}, {"reason": 3}):
            refused = await d.http.post(api("s", "stop"), json=body)
            assert refused.status_code == 400, body
        assert await d.runtime.state("s") == RunState.Queued()
        answer = await d.http.post(api("s", "stop"), json={"reason": "budget"})
        assert answer.status_code == 200
        assert answer.json() == {"kind": "ended", "cause": {"kind": "stopped", "reason": "budget"}}


async def test_pause_then_resume_goes_through_the_runs_ticket() -> None:
    async with dashboard() as d:
        await d.runtime.start(steps, run_id="p", name="steps")
        answer = await d.http.post(api("p", "pause"), json={})
        assert answer.status_code == 200
        assert answer.json()["kind"] == "running"
        await settle(d.runtime, "p", "awaiting")
        state = await d.runtime.state("p")
        assert isinstance(state, RunState.Awaiting)
        assert state.ticket.reason == "manual_pause"
        paused = await d.http.post(api("p", "pause"))
        assert paused.status_code == 409
        assert paused.json()["error"] == "not_active"
        assert paused.json()["state"]["kind"] == "awaiting"
        resumed = await d.http.post(api("p", "resume"), json={})
        assert resumed.status_code == 200
        assert resumed.json()["kind"] == "running"


async def test_a_resume_value_the_ticket_does_not_accept_is_refused_and_the_ticket_stays() -> None:
    async with dashboard() as d:
        await d.runtime.start(asks, run_id="q", name="asks")
        await settle(d.runtime, "q", "awaiting")
        wrong = await d.http.post(api("q", "resume"), json={"value": 3})
        assert wrong.status_code == 409
        assert wrong.json()["error"] == "invalid_payload"
        assert wrong.json()["state"]["kind"] == "awaiting"
        state = await d.runtime.state("q")
        assert isinstance(state, RunState.Awaiting)
        mismatch = await d.http.post(
            api("q", "resume"), json={"value": "x", "correlation_id": "not-it"}
        )
        assert mismatch.status_code == 409
        assert mismatch.json()["error"] == "ticket_mismatch"
        right = await d.http.post(
            api("q", "resume"),
            json={"value": "yes", "correlation_id": state.ticket.correlation_id},
        )
        assert right.status_code == 200
        await settle(d.runtime, "q", "ended")
        assert (await d.runtime.record("q")).result == {"answer": "yes"}
        late = await d.http.post(api("q", "resume"), json={"value": "again"})
        assert late.status_code == 409
        assert late.json()["error"] == "not_awaiting"


async def test_message_and_wake_reach_the_running_body() -> None:
    async with dashboard() as d:
        await d.runtime.start(waits, run_id="w", name="waits")
        await d.runtime.start(steps, run_id="m", name="steps")
        await settle(d.runtime, "m", "running")
        woken = await d.http.post(api("w", "wake"), json={"reason": "now"})
        assert woken.status_code == 200
        await settle(d.runtime, "w", "ended")
        assert (await d.runtime.record("w")).result == {"woken": True}
        assert (await d.http.post(api("m", "message"), json={})).status_code == 400
        sent = await d.http.post(api("m", "message"), json={"payload": "finish"})
        assert sent.status_code == 200
        await settle(d.runtime, "m", "ended")
        assert (await d.runtime.record("m")).result == {"seen": ["finish"]}


@pytest.mark.parametrize("control", ["cancel", "stop", "pause", "wake", "message", "resume"])
async def test_every_control_on_an_unknown_run_is_404(control: str) -> None:
    async with dashboard() as d:
        body = {"stop": {"reason": "r"}, "message": {"payload": 1}}.get(control, {})
        answer = await d.http.post(api("nobody", control), json=body)
        assert answer.status_code == 404
        assert answer.json() == {
            "error": "unknown_run",
            "message": answer.json()["message"],
            "state": None,
        }
        assert "nobody" in answer.json()["message"]


@pytest.mark.parametrize(
    ("content", "names"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"reason": "r", "force": true}', "'force'"),
        (b"\xff\xfe", "UTF-8"),
        (b'{"reason": NaN}', "not valid JSON"),
    ],
)
async def test_a_bad_body_is_400_naming_the_problem_and_changes_nothing(
    content: bytes, names: str
) -> None:
    async with dashboard() as d:
        await d.runtime.submit("steps", run_id="b")
        answer = await d.http.post(
            api("b", "cancel"), content=content, headers={"Content-Type": "application/json"}
        )
        assert answer.status_code == 400
        assert names in answer.json()["message"]
        assert await d.runtime.state("b") == RunState.Queued()


async def test_controls_are_post_only_and_an_unknown_control_is_404() -> None:
    async with dashboard() as d:
        await d.runtime.submit("steps", run_id="g")
        for control in ("cancel", "stop", "pause", "wake", "message", "resume"):
            answer = await d.http.get(api("g", control))
            assert answer.status_code == 405, control
            assert answer.headers["allow"] == "POST"
        unknown = await d.http.post(api("g", "explode"), json={})
        assert unknown.status_code == 404
        assert "allow" not in unknown.headers
        assert (await d.http.get(api("g", "explode"))).status_code == 404
        on_record = await d.http.post(api("g"), json={})
        assert on_record.status_code == 405
        assert on_record.headers["allow"] == "GET, HEAD"
        assert (await d.http.delete(api("g"))).status_code == 405
        head = await d.http.head(api("g", "cancel"))  # never a control: no body, no POST
        assert (head.status_code, head.headers["allow"]) == (405, "POST")
        assert await d.runtime.state("g") == RunState.Queued()


async def test_two_cancels_at_once_both_answer_the_one_committed_end() -> None:
    """Whichever commits, each answer is the run's one terminal state (a 200 with it, or a
    409 carrying it), and the run has one terminal event."""
    async with dashboard() as d:
        await d.runtime.start(steps, run_id="race", name="steps")
        answers = []

        async def cancel() -> None:
            answers.append(await d.http.post(api("race", "cancel"), json={}))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel)
            nursery.start_soon(cancel)
        ended = {"kind": "ended", "cause": {"kind": "cancelled"}}
        assert 200 in [a.status_code for a in answers]
        for answer in answers:
            assert answer.status_code in (200, 409)
            assert (answer.json() if answer.status_code == 200 else answer.json()["state"]) == ended
        events = [e async for e in d.runtime.events("race", follow=False)]
        assert [e.state for e in events if isinstance(e.state, RunState.Ended)] == [
            RunState.Ended(EndCause.Cancelled())
        ]


async def test_a_send_to_a_run_that_ended_meanwhile_is_refused_with_its_end() -> None:
    async with dashboard() as d:
        await d.runtime.start(steps, run_id="gone", name="steps")
        await settle(d.runtime, "gone", "running")
        d.runtime.deliver(LiveCommand.Cancel("gone"))
        await settle(d.runtime, "gone", "ended")
        answer = await d.http.post(api("gone", "message"), json={"payload": "x"})
        assert answer.status_code == 409
        assert answer.json()["state"] == state_to_json(await d.runtime.state("gone"))


class _OnePiece(httpx.AsyncByteStream):
    """A request body handed over by an iterator object, not by an async generator (what
    httpx makes of ``content=``): the app answers before it has read a body past its
    bound, and an async generator left unfinished is finalized whenever the garbage
    collector reaches it, with a ResourceWarning from trio that fails whichever test is
    running then."""

    def __init__(self, content: bytes) -> None:
        self._content: bytes | None = content

    def __aiter__(self) -> _OnePiece:
        return self

    async def __anext__(self) -> bytes:
        content, self._content = self._content, None
        if content is None:
            raise StopAsyncIteration
        return content


async def test_a_body_larger_than_any_payload_is_400_and_changes_nothing() -> None:
    async with dashboard() as d:
        await d.runtime.submit("steps", run_id="big")
        content = b"{" + b" " * (9 * 2**20) + b"}"  # a valid object, past the bound
        request = d.http.build_request("POST", api("big", "cancel"), content=content)
        request.stream = _OnePiece(content)
        answer = await d.http.send(request)
        assert answer.status_code == 400
        assert f"larger than {8 * 2**20} bytes" in answer.json()["message"]
        assert await d.runtime.state("big") == RunState.Queued()


class FailingStore(WrappedStore):
    """A memory store whose reads of one run fail, as a store that cannot be read does."""

    async def load(self, run_id: str) -> RunRecord | None:
        if run_id == "unreadable":
            raise StoreError("cannot read postgresql://app:s3cret@db/runs: connection refused")
        return await super().load(run_id)


async def test_a_store_that_cannot_be_read_is_503_with_one_clear_line_and_no_password() -> None:
    async with dashboard(store=FailingStore()) as d:
        for method in ("GET", "POST"):
            path = api("unreadable") if method == "GET" else api("unreadable", "pause")
            answer = await d.http.request(method, path)
            assert answer.status_code == 503
            body = answer.json()
            assert body["error"] == "store_error"
            assert "connection refused" in body["message"]
            assert "s3cret" not in answer.text
        page_answer = await d.http.get(page("unreadable"))
        assert page_answer.status_code == 503
        assert "s3cret" not in page_answer.text
        await d.runtime.submit("steps", run_id="readable")
        assert (await d.http.get(api("readable"))).status_code == 200  # the rest still serves


async def test_a_refusal_speaks_the_dashboards_words_not_the_python_apis() -> None:
    async with dashboard() as d:
        await d.runtime.submit("steps", run_id="q")
        await d.runtime.submit("steps", run_id="e")
        await d.runtime.cancel_run("e")
        said = []
        for run_id, control, says in [
            ("e", "pause", "has already ended (cancelled)"),
            ("q", "resume", "not awaiting input (it is queued)"),
            ("e", "cancel", "has already ended"),
        ]:
            answer = await d.http.post(api(run_id, control), json={})
            assert answer.status_code == 409, answer.text
            message = answer.json()["message"]
            assert says in message
            said.append(message)
        unknown = await d.http.post(api("nobody", "pause"), json={})
        said.append(unknown.json()["message"])
        for message in said:
            assert not re.search(r"runtime|cancel_run|RunState|\w+\(\)|`runs ", message), message
