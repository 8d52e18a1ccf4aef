"""Argument checks shared by the public entry points. Each error says what to pass instead."""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import random
import time
import weakref
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from ._errors import InvalidArgument, InvalidBody
from ._storage import IF_BUSY, IfBusy
from ._util import safe_repr

if TYPE_CHECKING:
    from ._attempt import Body

# Bodies already seen to be async callables; weak, so the cache never keeps one alive.
_ASYNC_BODIES: weakref.WeakSet[Any] = weakref.WeakSet()
_MAX_ID_LENGTH = 512


def _nothing() -> None:
    return None


# The body checked last, held weakly: most starts pass the same body as the one before.
_last_body: Callable[[], object] = _nothing


def _remember(body: object) -> None:
    global _last_body
    try:
        _last_body = weakref.ref(body)
    except TypeError:  # not weak-referenceable: no shortcut for it
        _last_body = _nothing


# Run ids are a millisecond timestamp then 64 random bits, in fixed-width hex (28
# characters). The random bits make them unique across processes and machines without
# coordination; the timestamp orders them by creation, so a durable store's indexes over
# run ids (and over thread ids, which default to them) grow at one end instead of touching
# a random page per new run, which slows every commit more as the file grows. They are not
# secrets, so a generator seeded from the OS (and reseeded in a forked child, which would
# otherwise repeat its parent's ids) is enough, and much cheaper than a system call per run.
_ids = random.Random(os.urandom(32))
os.register_at_fork(after_in_child=lambda: _ids.seed(os.urandom(32)))


def new_run_id() -> str:
    return f"{time.time_ns() // 1_000_000 << 64 | _ids.getrandbits(64):028x}"


def check_id(value: object, what: str) -> str:
    """A run, thread or correlation id: a non-empty str every store can keep as text."""
    if type(value) is not str or not value:
        raise InvalidArgument(f"{what} must be a non-empty str, not {value!r}")
    if len(value) > _MAX_ID_LENGTH or "\x00" in value or not _encodable(value):
        raise InvalidArgument(
            f"{what} must be at most {_MAX_ID_LENGTH} characters of text without NUL or"
            f" unpaired surrogates, not {value[:80]!r}"
        )
    return value


def _encodable(value: str) -> bool:
    if value.isascii():
        return True
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def check_body(body: object) -> Body:
    """Return ``body`` if calling it with a context gives a coroutine: an async function,
    a bound async method, a partial of one, or an instance whose ``__call__`` is async."""
    if body is not None and _last_body() is body:  # (a dead reference reads as None)
        return body  # type: ignore[return-value]  # the same body as last time: the common case
    with contextlib.suppress(TypeError):  # an unhashable callable is checked every time
        if body in _ASYNC_BODIES:
            _remember(body)
            return body  # type: ignore[return-value]
    target = body
    while isinstance(target, partial):
        target = target.func
    if isinstance(target, type):
        raise InvalidBody(
            f"a run body must be an async callable, not the class {target.__qualname__}"
            " (calling a class builds an instance); pass an instance whose __call__ is async"
        )
    if is_async_callable(target):
        with contextlib.suppress(TypeError):
            _ASYNC_BODIES.add(body)
        _remember(body)
        return body  # type: ignore[return-value]
    raise InvalidBody(
        f"a run body must be an async function taking a RunContext, not {safe_repr(body)};"
        " define it with 'async def body(ctx): ...'"
    )


def is_async_callable(fn: object) -> bool:
    """Whether calling ``fn`` gives a coroutine: an async function, a bound async method, a
    partial of one, or an instance whose ``__call__`` is async (a class is not: calling it
    builds an instance)."""
    while isinstance(fn, partial):
        fn = fn.func
    if isinstance(fn, type):
        return False
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(type(fn), "__call__", None)  # noqa: B004  (an async __call__ counts)
    )


def check_max_steps(max_steps: object) -> int | None:
    if max_steps is None:
        return None
    if type(max_steps) is not int or max_steps < 1:
        raise InvalidArgument(f"max_steps must be a positive int or None, not {max_steps!r}")
    return max_steps


def check_name(name: object) -> str | None:
    if name is not None:
        check_id(name, "name")
    return name  # type: ignore[return-value]


def check_deadline(deadline: object, what: str) -> float | None:
    if deadline is None:
        return None
    if type(deadline) not in (int, float) or not math.isfinite(deadline):  # type: ignore[arg-type]
        raise InvalidArgument(
            f"{what}: deadline must be finite wall-clock seconds or None, not {deadline!r}"
        )
    return float(deadline)  # type: ignore[arg-type]


def check_if_busy(value: object) -> IfBusy:
    """A busy-thread policy (``if_busy=``): one of `IF_BUSY`."""
    if type(value) is not str or value not in IF_BUSY:
        raise InvalidArgument(
            f"if_busy must be one of {', '.join(repr(v) for v in IF_BUSY)}, not"
            f" {safe_repr(value)}: 'queue' waits for the thread, 'reject' raises ThreadBusy,"
            " 'supersede' stops the thread's other runs"
        )
    return value
