"""The `explore` fixture: the package's pytest plugin, registered through the ``pytest11``
entry point, so a project's test of its own body is three lines."""

from __future__ import annotations

import pytest

USER_TESTS = """
import trio

from awaken_trio.testing import CancellationViolation


async def careful(ctx):
    await trio.sleep(1)
    await ctx.boundary({"step": 1})
    return "done"


async def swallowing(ctx):
    try:
        await trio.sleep(1)
    except trio.Cancelled:
        return "done anyway"
    return "done"


async def test_mine(explore):
    report = await explore(careful, commands=("cancel", "stop", "pause"))
    assert report.points


async def test_a_bug_fails_the_test(explore):
    await explore(swallowing)
"""


def test_the_explore_fixture_comes_from_the_entry_point(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        """
        [pytest]
        trio_mode = true
        addopts = --strict-markers --strict-config
        filterwarnings = error
        """
    )
    pytester.makepyfile(test_my_bodies=USER_TESTS)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*CancellationViolation: cancel delivered before schedule point *",
            "*caught the trio.Cancelled*",
        ]
    )
