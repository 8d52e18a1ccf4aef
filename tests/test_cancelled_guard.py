"""The suite's guard against a stray `trio.Cancelled` passing a test (tests/cancelled_guard.py)."""

from __future__ import annotations

import pytest

GUARDED_CONFTEST = "from tests.cancelled_guard import pytest_runtest_call as pytest_runtest_call\n"

STRAYS = """
import trio

async def test_bare_cancelled():
    raise trio.Cancelled._create(source="explicit")

async def test_group_of_cancelled():
    raise BaseExceptionGroup("x", [trio.Cancelled._create(source="explicit")])

async def test_nested_group_of_cancelled():
    inner = BaseExceptionGroup("in", [trio.Cancelled._create(source="explicit")])
    raise BaseExceptionGroup("out", [inner])

async def test_cancelled_by_its_own_scope_is_fine():
    with trio.move_on_after(0):
        await trio.sleep_forever()

async def test_a_plain_pass():
    await trio.sleep(0)

async def test_a_real_failure_is_still_itself():
    raise LookupError("mine")
"""


@pytest.mark.parametrize("guard", [True, False])
def test_a_stray_cancelled_fails_the_test_only_with_the_guard(
    pytester: pytest.Pytester, guard: bool
) -> None:
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    if guard:
        pytester.makeconftest(GUARDED_CONFTEST)
    pytester.makepyfile(test_strays=STRAYS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    if guard:
        result.assert_outcomes(passed=2, failed=4)
        result.stdout.fnmatch_lines(["*a stray Cancelled* escaped the test*"])
        result.stdout.fnmatch_lines(["*LookupError: mine*"])
    else:  # what the guard is for: pytest-trio alone passes all three strays
        result.assert_outcomes(passed=5, failed=1)
