"""The attempt observer: how tracing (or anything else) hears of attempts, with no
dependency of the kernel on it.

With no observer (the default) the kernel pays one ``is None`` test where an attempt starts,
ends or is asked to end; an observer's span lives on the attempt it describes, so a child's
span finds its parent's through ``attempt.parent``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ._attempt import Attempt
    from ._json import JsonValue
    from ._state import RunState

Attribute = str | int
"""The value of an attribute an observer is told (no value: the attribute is left out)."""


class AttemptSpan(Protocol):
    """What an observer keeps for one attempt that has started, until it has ended."""

    def event(self, name: str, attributes: Mapping[str, Attribute | None]) -> None:
        """Something happened to the attempt (``awaken.*``): a cancel request, a pause."""

    def ended(self, state: RunState | None, detail: Mapping[str, JsonValue]) -> None:
        """The attempt's end was committed as ``state`` (None: it committed no end of its
        own: lost, released, or the store refused it), ``detail`` being what its terminal
        event records (for a cancel or stop: ``source`` and ``reason``)."""


class AttemptObserver(Protocol):
    """Told of every attempt that starts (committed ``Running``) in a runtime."""

    def started(self, attempt: Attempt) -> AttemptSpan: ...
