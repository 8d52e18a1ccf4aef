"""``awaken-trio ui``: the dashboard (DESIGN §3.6) on a store, until Ctrl-C or SIGTERM.

The runtime (no bodies, not serving: the control path of ``awaken-trio runs``) and the
server share one nursery. A host other than a loopback address needs a token; the token is
never printed.
"""

from __future__ import annotations

import os
import re
import signal
import socket
from functools import partial
from typing import Final

import click
import trio

from .._face.failures import bad_input
from .._redact import redact
from ._common import (
    WholeRange,
    early,
    execute,
    open_cli_runtime,
    store_url,
)
from ._logging import LogFormat, command_log, install, log_options
from ._runs import store_option

TOKEN_ENV: Final = "AWAKEN_TRIO_UI_TOKEN"
DEFAULT_PORT: Final = 8765
_TOKEN: Final = re.compile(r"[A-Za-z0-9._~-]{16,256}")
# As the other extras' advice: awaken_trio is installed from its checkout.
EXTRA_HINT: Final = "pip install -e '.[ui]' in the checkout (the awaken-trio[ui] extra)"


def check_extra() -> None:
    """Refuse (exit 2) when the ``ui`` extra is not installed."""
    try:
        import hypercorn.trio  # noqa: F401
        import starlette.applications  # noqa: F401
    except ImportError as exc:
        raise bad_input(
            f"the dashboard needs the ui extra ({exc.name or 'starlette, hypercorn'} is not"
            f" installed): {EXTRA_HINT}",
            "missing_extra",
        ) from None


def check_binding(host: str, port: int, token: str | None) -> None:
    """A token, if given, is long and plain enough to send in a header and a cookie; a
    host that is not loopback needs one; the address can be listened on."""
    from .._ui import is_loopback

    if token is not None and not _TOKEN.fullmatch(token):
        raise bad_input(
            f"--token (or {TOKEN_ENV}) must be 16 to 256 letters, digits or '-._~'; make one"
            ' with: python -c "import secrets; print(secrets.token_urlsafe())"',
            "invalid_argument",
        )
    if token is None and not is_loopback(host):
        raise bad_input(
            f"--host {host} would serve the dashboard beyond this machine, where anyone who"
            f" reaches it could cancel runs: pass --token (or set {TOKEN_ENV}), or bind to"
            " 127.0.0.1",
            "token_required",
        )
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        raise bad_input(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}); choose another --port"
            " or --host",
            "cannot_listen",
        ) from None


@click.command("ui")
@store_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=WholeRange(min=0, max=65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="Port to listen on (0: a free one, printed).",
)
@click.option(
    "--token",
    envvar=TOKEN_ENV,
    show_envvar=True,
    metavar="TOKEN",
    help="Required of every request (Authorization: Bearer TOKEN; a browser opens"
    " /?token=TOKEN once). Needed for any host but loopback.",
)
@log_options("WARNING")
def ui(
    store: str | None,
    host: str,
    port: int,
    token: str | None,
    log_level: str,
    log_format: LogFormat,
) -> None:
    """Serve the web dashboard over a store: runs live, one run's record, children,
    events and transcript, and its controls, until Ctrl-C.

    It logs to stderr: its start and stop lines, and the records of the library and of
    the libraries it uses (WARNING by default), one line each (--log-format json: one
    JSON object each).
    """
    install(log_level, log_format)
    early(check_extra, as_json=False, log=command_log)
    token = token or None
    early(lambda: check_binding(host, port, token), as_json=False, log=command_log)
    execute(partial(serve, store, host, port, token), as_json=False, log=command_log)


async def serve(store: str | None, host: str, port: int, token: str | None) -> None:
    """Serve until the first SIGINT or SIGTERM (open requests then get a moment to
    finish); a second one stops at once. Either way the runtime closes and it exits 0."""
    from .._ui import serve_dashboard

    url = store_url(store)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with (
            open_cli_runtime(url, must_exist=True) as runtime,
            trio.open_nursery() as nursery,
        ):
            shutdown = trio.Event()

            async def on_signals() -> None:
                async for _ in signals:
                    if shutdown.is_set():
                        nursery.cancel_scope.cancel()
                        return
                    command_log.info("awaken-trio ui: stopping")
                    shutdown.set()

            async def dashboard(*, task_status: trio.TaskStatus[str]) -> None:
                await serve_dashboard(
                    runtime,
                    host=host,
                    port=port,
                    token=token,
                    shutdown=shutdown,
                    task_status=task_status,
                )
                nursery.cancel_scope.cancel()  # stopped: so is the signal watcher

            nursery.start_soon(on_signals)
            address = await nursery.start(dashboard)
            access = " (requests need the token)" if token else ""
            command_log.info(
                "awaken-trio ui: %s/ over %s%s, pid %d; Ctrl-C to stop",
                address,
                redact(url),
                access,
                os.getpid(),
            )
        command_log.info("awaken-trio ui: stopped")
