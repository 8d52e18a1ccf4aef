"""`AsyncClient` inside a real asyncio web app: a small Starlette app, served by uvicorn on
127.0.0.1, whose handlers submit, cancel and wait for runs a worker process executes,
driven by HTTP requests. A handler waiting on a run never stops the others."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from awaken_trio import RunAlreadyEnded, RunState, UnknownRun
from awaken_trio.client import AsyncClient
from tests.client.client_helpers import POLL, TICK, WAIT, until_async


def describe(state: RunState) -> dict[str, Any]:
    if isinstance(state, RunState.Ended):
        return {"state": "ended", "cause": type(state.cause).__name__}
    return {"state": type(state).__name__.lower()}


def make_app(url: str) -> Starlette:
    def client_of(request: Request) -> AsyncClient:
        client: AsyncClient = request.app.state.client
        return client

    async def submit(request: Request) -> Response:
        body = await request.json()
        run_id = await client_of(request).submit(body["name"], input=body.get("input"))
        return JSONResponse({"run_id": run_id}, status_code=201)

    async def show(request: Request) -> Response:
        state = await client_of(request).state(request.path_params["run_id"])
        return JSONResponse(describe(state))

    async def cancel(request: Request) -> Response:
        state = await client_of(request).cancel_run(request.path_params["run_id"])
        return JSONResponse(describe(state))

    async def wait(request: Request) -> Response:
        timeout = float(request.query_params["timeout"])
        try:
            state = await client_of(request).wait(request.path_params["run_id"], timeout=timeout)
        except TimeoutError as exc:
            return JSONResponse({"error": "timeout", "message": str(exc)}, status_code=504)
        return JSONResponse(describe(state))

    async def unknown(request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": "unknown_run"}, status_code=404)

    async def ended(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RunAlreadyEnded)
        return JSONResponse({"error": "already_ended", **describe(exc.state)}, status_code=409)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with AsyncClient(url, poll=POLL) as client:
            app.state.client = client
            yield

    return Starlette(
        routes=[
            Route("/runs", submit, methods=["POST"]),
            Route("/runs/{run_id}", show),
            Route("/runs/{run_id}/cancel", cancel, methods=["POST"]),
            Route("/runs/{run_id}/wait", wait),
        ],
        exception_handlers={UnknownRun: unknown, RunAlreadyEnded: ended},
        lifespan=lifespan,
    )


@contextlib.asynccontextmanager
async def serving(app: Starlette) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1 (a free port) until the block ends."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(app, lifespan="on", log_level="warning", ws="none", http="h11")
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            async with asyncio.timeout(WAIT):
                while not server.started:
                    assert not task.done(), "the server stopped before it started"
                    await asyncio.sleep(TICK)
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            await task


async def until_state(http: httpx.AsyncClient, run_id: str, wanted: str) -> None:
    async with asyncio.timeout(WAIT):
        while True:
            if (await http.get(f"/runs/{run_id}")).json()["state"] == wanted:
                return
            await asyncio.sleep(TICK)


def test_handlers_submit_cancel_and_wait_for_runs_a_worker_executes(served_url: str) -> None:
    app = make_app(served_url)

    async def main() -> None:
        async with serving(app) as base, httpx.AsyncClient(base_url=base) as http:
            made = await http.post(
                "/runs", json={"name": "stepper", "input": {"steps": 2, "delay": 0.01}}
            )
            assert made.status_code == 201
            stepper = made.json()["run_id"]
            done = await http.get(f"/runs/{stepper}/wait", params={"timeout": WAIT})
            assert done.json() == {"state": "ended", "cause": "NaturalEnd"}

            parker = (await http.post("/runs", json={"name": "parker"})).json()["run_id"]
            await until_state(http, parker, "running")
            late = await http.get(f"/runs/{parker}/wait", params={"timeout": 0.05})
            assert late.status_code == 504
            assert parker in late.json()["message"]
            # A handler waits on the run while another cancels it: the wait answers with
            # the cancel's end, so the first never held up the event loop.
            waiting = asyncio.create_task(
                http.get(f"/runs/{parker}/wait", params={"timeout": WAIT})
            )
            client: AsyncClient = app.state.client
            await until_async(lambda: client._thread.calls_in_flight == 1, "the wait to start")
            cancelled = await http.post(f"/runs/{parker}/cancel")
            assert cancelled.json() == {"state": "ended", "cause": "Cancelled"}
            assert (await waiting).json() == {"state": "ended", "cause": "Cancelled"}

            again = await http.post(f"/runs/{parker}/cancel")
            assert (again.status_code, again.json()["cause"]) == (409, "Cancelled")
            assert (await http.get("/runs/nope")).status_code == 404

    asyncio.run(main())


def test_concurrent_requests_each_get_their_own_answer(served_url: str) -> None:
    app = make_app(served_url)
    requests = 8

    async def one(http: httpx.AsyncClient, i: int) -> dict[str, Any]:
        made = await http.post(
            "/runs", json={"name": "stepper", "input": {"steps": 1 + i % 3, "delay": 0.01}}
        )
        run_id = made.json()["run_id"]
        answer: dict[str, Any] = (
            await http.get(f"/runs/{run_id}/wait", params={"timeout": WAIT})
        ).json()
        return answer

    async def main() -> None:
        async with serving(app) as base, httpx.AsyncClient(base_url=base) as http:
            answers = await asyncio.gather(*(one(http, i) for i in range(requests)))
        assert answers == [{"state": "ended", "cause": "NaturalEnd"}] * requests

    asyncio.run(main())
