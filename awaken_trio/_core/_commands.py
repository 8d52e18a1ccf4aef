"""Live commands for an active attempt (see `Runtime.deliver`)."""

from __future__ import annotations

from typing import ClassVar, final

import attrs

from ._json import JsonValue


@attrs.frozen
class LiveCommand:
    """A command for the active attempt of a run. One of the variants below."""

    Cancel: ClassVar[type[Cancel]]
    Pause: ClassVar[type[Pause]]
    Wake: ClassVar[type[Wake]]
    Message: ClassVar[type[Message]]

    run_id: str

    def __attrs_pre_init__(self) -> None:
        if type(self) is LiveCommand:
            raise TypeError(
                "LiveCommand is a family; build a variant, e.g. LiveCommand.Cancel(run_id)"
            )


@final
@attrs.frozen
class Cancel(LiveCommand):
    """Cancel the attempt's scope; the run commits ``Ended(Cancelled)``."""

    reason: str | None = None


@final
@attrs.frozen
class Pause(LiveCommand):
    """At the next ``ctx.boundary()`` commit ``Awaiting`` with a ``manual_pause`` ticket."""


@final
@attrs.frozen
class Wake(LiveCommand):
    """Release a body waiting at ``ctx.boundary(wait=True)`` without ending it."""

    reason: str = ""


@final
@attrs.frozen
class Message(LiveCommand):
    """A JSON payload for the attempt's inbox, returned by ``ctx.boundary()`` in send order."""

    payload: JsonValue = None


for _cls in (Cancel, Pause, Wake, Message):
    _cls.__qualname__ = f"LiveCommand.{_cls.__name__}"
    setattr(LiveCommand, _cls.__name__, _cls)
