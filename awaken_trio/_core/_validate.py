"""Argument checks shared by the public entry points. Each error says what to pass instead."""

from __future__ import annotations

import contextlib
import inspect
import os
import weakref
from functools import partial
from typing import Any

from ._attempt import Body
from ._errors import InvalidArgument, InvalidBody

# Bodies already seen to be async callables; weak, so the cache never keeps one alive.
_ASYNC_BODIES: weakref.WeakSet[Any] = weakref.WeakSet()


def new_run_id() -> str:
    return os.urandom(12).hex()


def check_id(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{what} must be a non-empty str, not {value!r}")
    return value


def check_body(body: object) -> Body:
    """Return ``body`` if it is an async callable (function, partial, async ``__call__``)."""
    with contextlib.suppress(TypeError):  # an unhashable callable is checked every time
        if body in _ASYNC_BODIES:
            return body  # type: ignore[return-value]
    target = body
    while isinstance(target, partial):
        target = target.func
    if inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
        getattr(target, "__call__", None)  # noqa: B004  (an async __call__ counts)
    ):
        with contextlib.suppress(TypeError):
            _ASYNC_BODIES.add(body)
        return body  # type: ignore[return-value]
    raise InvalidBody(
        f"a run body must be an async function taking a RunContext, not {body!r};"
        " define it with 'async def body(ctx): ...'"
    )


def check_max_steps(max_steps: object) -> int | None:
    if max_steps is None:
        return None
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise InvalidArgument(f"max_steps must be a positive int or None, not {max_steps!r}")
    return max_steps


def check_name(name: object) -> str | None:
    if name is not None and not isinstance(name, str):
        raise InvalidArgument(f"name must be a str or None, not {name!r}")
    return name
