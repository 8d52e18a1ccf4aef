"""How often a serving loop looks again while nothing happens: at the poll interval after
anything changed, then, look after idle look, twice as long each time, up to a ceiling.

A pass of the serving loop runs at once when something changes (a commit here, a change
another runtime made, seen by the relay's poll), so backing off its timer slows no signal:
the timer is there only for what changes nothing in the store, a lease that lapses or a
scheduled resume that falls due, and those may wait a little longer on an idle worker.
"""

from __future__ import annotations

from typing import Final

from .._core import Backoff

IDLE_CEILING: Final = 1.0
"""Seconds: the longest an idle serving loop waits before it looks again (at most a third
of the lease, so a dead owner's run is found well within a lease of its expiry)."""


def serve_backoff(poll: float, lease: float | None) -> Backoff:
    """The idle looks of a serving loop polling every ``poll`` seconds under claims of
    ``lease`` seconds (None: a store without claims): the wait after ``n`` idle looks in a
    row is ``Backoff.wait(n)``, from ``poll`` up to the ceiling (never below ``poll``)."""
    ceiling = IDLE_CEILING if lease is None else min(IDLE_CEILING, lease / 3)
    return Backoff(poll, max(poll, ceiling))
