"""The package's pytest plugin (the ``pytest11`` entry point ``awaken_trio``): fixtures for
testing run bodies.

``explore`` is `explore_cancellation`, so a test is three lines::

    async def test_my_body_is_cancellation_safe(explore):
        report = await explore(my_body, commands=("cancel", "stop", "pause"))
        assert report.points
"""

from __future__ import annotations

import pytest

from ._explore import Explore, explore_cancellation


@pytest.fixture
def explore() -> Explore:
    """`awaken_trio.testing.explore_cancellation`: ``await explore(body, ...)``."""
    return explore_cancellation
