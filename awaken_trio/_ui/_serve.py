"""Serving the dashboard: the event hub and hypercorn's Trio server in one nursery, over a
runtime the caller opened (``awaken-trio ui`` opens it on ``--store``)."""

from __future__ import annotations

import logging
from typing import Final, cast

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from hypercorn.typing import ASGIFramework

from .. import Runtime
from ._app import dashboard_app
from ._hub import EventHub

logger: Final = logging.getLogger("awaken_trio.ui")

GRACE: Final = 2.0
"""Seconds open requests have to finish once the dashboard is asked to stop (the live
streams end at once: the hub closes them first)."""


def bind_address(host: str, port: int) -> str:
    """``host:port`` as hypercorn binds it (an IPv6 address in brackets)."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


async def serve_dashboard(
    runtime: Runtime,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    shutdown: trio.Event | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the dashboard over ``runtime`` on ``host:port`` (port 0: a free one) until
    ``shutdown`` is set (then open requests get `GRACE` seconds) or the task is cancelled.

    Reports started with the URL it listens on, once it accepts connections. The caller
    decides who may bind where (``awaken-trio ui`` refuses a non-loopback host without a
    token); ``token`` is then required of every request.
    """
    config = Config()
    config.bind = [bind_address(host, port)]
    config.accesslog = None
    config.errorlog = logger  # hypercorn's own messages go to our logger; no handler added
    config.graceful_timeout = GRACE
    stop = shutdown if shutdown is not None else trio.Event()
    async with trio.open_nursery() as nursery:
        hub = EventHub(runtime)
        await nursery.start(hub.run)
        app = dashboard_app(runtime, hub, token=token)

        async def stopping() -> None:
            await stop.wait()
            # Live streams never finish by themselves: end them before the server waits
            # for its open requests.
            hub.close()

        async def server(*, task_status: trio.TaskStatus[list[str]]) -> None:
            await serve(
                cast("ASGIFramework", app),
                config,
                shutdown_trigger=stopping,
                mode="asgi",
                task_status=task_status,
            )
            nursery.cancel_scope.cancel()  # stopped: the hub's following ends with it

        urls: list[str] = await nursery.start(server)
        task_status.started(urls[0])
