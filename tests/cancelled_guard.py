"""A guard for async tests: pytest-trio passes a test that a stray `trio.Cancelled` (or a
group of nothing else) leaves, and that is exactly how a crashed runtime would reach the
caller of `open_runtime`. Here such a test fails, naming what escaped.

The project's conftest imports the hook; `test_cancelled_guard.py` shows it working.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Generator
from typing import Any

import pytest
import trio


def only_cancelled(exc: BaseException) -> bool:
    """Whether ``exc`` is a Cancelled, or a group whose every leaf is one."""
    if isinstance(exc, BaseExceptionGroup):
        return all(only_cancelled(inner) for inner in exc.exceptions)
    return isinstance(exc, trio.Cancelled)


def guarded(test: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(test)
    async def guard(*args: Any, **kwargs: Any) -> Any:
        try:
            return await test(*args, **kwargs)
        except BaseException as exc:
            if only_cancelled(exc):
                raise AssertionError(
                    f"a stray {exc!r} escaped the test: something it called crashed or was"
                    " cancelled from outside, and pytest-trio would have passed it"
                ) from exc
            raise

    return guard


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    # First in line, so pytest-trio wraps the guarded function, not the bare one.
    function = getattr(item, "obj", None)
    hypothesis = getattr(function, "hypothesis", None)
    if hypothesis is not None and inspect.iscoroutinefunction(hypothesis.inner_test):
        hypothesis.inner_test = guarded(hypothesis.inner_test)
    elif inspect.iscoroutinefunction(function):
        item.obj = guarded(function)  # type: ignore[attr-defined]
    yield
