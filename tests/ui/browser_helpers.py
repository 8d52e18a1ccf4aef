"""Debian's chromium, headless, driven by Playwright's own driver (``executable_path``, a
fresh profile per test). Playwright's sync API runs on a thread of its own
(`trio.to_thread.run_sync`); it calls back into Trio with `trio.from_thread.run`."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page

CHROMIUM: Final = shutil.which("chromium") or "/usr/bin/chromium"
ARGS: Final = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
WAIT_MS: Final = 60_000
"""How long a page may take to show what a test waits for (a loaded machine is slow)."""


def need_browser() -> None:
    """Skip, saying why, when chromium or Playwright is missing; under CI=true fail
    instead (CI installs both)."""
    reason = None
    if not Path(CHROMIUM).exists():
        reason = f"chromium is not installed at {CHROMIUM} (apt-get install chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            reason = "playwright is not installed (pip install -e '.[test]')"
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the browser tests need a browser under CI: {reason}")
        pytest.skip(reason)


@contextmanager
def browser_page(profile: Path, executable: str = CHROMIUM) -> Iterator[Page]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=executable,
            headless=True,
            args=list(ARGS),
            viewport={"width": 1280, "height": 800},
        )
        try:
            page = context.new_page()
            page.set_default_timeout(WAIT_MS)
            yield page
        finally:
            context.close()
