"""Deterministic Trio scheduling for one thread, leaving every other thread's run random.

Trio orders each batch of runnable tasks with one module-level ``random.Random``
(``trio._core._run._r``), shared by every ``trio.run`` in the process. An exploration runs
its bodies in a ``trio.run`` of its own on a worker thread while the caller's run goes on in
its thread, so seeding that generator would race the caller's scheduler. Instead, while an
exploration is under way, the generator is a `PerThreadRandom`: a thread that asked for
determinism draws from its own seeded generator, any other thread from Trio's original one.
Trio's deterministic mode (the one its Hypothesis plugin turns on) is switched on for the
same time, so a batch is first sorted by spawn order and only then shuffled: two runs that
made the same tasks runnable in a different order (deadlines that tie are expired in an
order Trio does not fix) still step them in the same order.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from trio._core import _run as _trio_run


class PerThreadRandom(random.Random):
    """Draws from the calling thread's own generator if it has one, else from ``fallback``."""

    def __init__(self, fallback: random.Random) -> None:
        self._fallback = fallback
        self._local = threading.local()
        super().__init__()

    def _current(self) -> random.Random:
        own: random.Random | None = getattr(self._local, "generator", None)
        return self._fallback if own is None else own

    def random(self) -> float:
        return self._current().random()

    def getrandbits(self, k: int, /) -> int:
        return self._current().getrandbits(k)

    def seed(self, *args: Any, **kwargs: Any) -> None:
        # Called by random.Random.__init__ before the fallback exists; afterwards a seed
        # (Hypothesis seeds Trio's generator per example) goes to whoever draws next.
        if getattr(self, "_fallback", None) is not None:
            self._current().seed(*args, **kwargs)

    def getstate(self) -> Any:
        return self._current().getstate()

    def setstate(self, state: Any) -> None:
        self._current().setstate(state)

    @contextmanager
    def seeded(self, seed: int) -> Iterator[None]:
        """This thread draws from a generator seeded with ``seed`` for the block."""
        self._local.generator = random.Random(seed)
        try:
            yield
        finally:
            self._local.generator = None


_lock = threading.Lock()
_users = 0
_saved: tuple[random.Random, bool] | None = None


@contextmanager
def deterministic_scheduling() -> Iterator[PerThreadRandom]:
    """Install the per-thread generator (and Trio's deterministic mode) for the block; the
    last block to leave puts Trio's own generator and mode back."""
    global _users, _saved
    with _lock:
        if _users == 0:
            original = _trio_run._r
            _saved = (original, _trio_run._ALLOW_DETERMINISTIC_SCHEDULING)
            _trio_run._r = PerThreadRandom(original)
            _trio_run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
        _users += 1
        installed = _trio_run._r
    assert isinstance(installed, PerThreadRandom)
    try:
        yield installed
    finally:
        with _lock:
            _users -= 1
            if _users == 0 and _saved is not None:
                _trio_run._r, mode = _saved
                _trio_run._ALLOW_DETERMINISTIC_SCHEDULING = mode  # type: ignore[misc]
                _saved = None
