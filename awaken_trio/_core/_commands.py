"""Live commands for an active attempt (see `Runtime.deliver`).

Commands are checked when they are built: a command that exists is well-formed, so a bad
reason or a payload that is not JSON is refused where it was written, not where it lands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, final

import attrs

from ._errors import InvalidArgument
from ._json import JsonValue, check_json
from ._validate import check_id

if TYPE_CHECKING:
    from ._storage import CommandKind


def _run_id(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    check_id(value, "a command's run_id")


def _optional_reason(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and type(value) is not str:
        raise InvalidArgument(f"a command's reason must be a str or None, not {value!r}")


def _reason(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not str:
        raise InvalidArgument(f"a command's reason must be a str, not {value!r}")


def _message_payload(value: object) -> JsonValue:
    return check_json(value, "a message payload")


@attrs.frozen
class LiveCommand:
    """A command for the active attempt of a run. One of the variants below."""

    Cancel: ClassVar[type[Cancel]]
    Pause: ClassVar[type[Pause]]
    Wake: ClassVar[type[Wake]]
    Message: ClassVar[type[Message]]

    run_id: str = attrs.field(validator=_run_id)

    def __attrs_pre_init__(self) -> None:
        if type(self) is LiveCommand:
            raise TypeError(
                "LiveCommand is a family; build a variant, e.g. LiveCommand.Cancel(run_id)"
            )


@final
@attrs.frozen
class Cancel(LiveCommand):
    """Cancel the attempt's scope; the run commits ``Ended(Cancelled)``."""

    reason: str | None = attrs.field(default=None, validator=_optional_reason)


@final
@attrs.frozen
class Pause(LiveCommand):
    """At the next ``ctx.boundary()`` commit ``Awaiting`` with a ``manual_pause`` ticket."""


@final
@attrs.frozen
class Wake(LiveCommand):
    """Release a body waiting at ``ctx.boundary(wait=True)`` without ending it."""

    reason: str = attrs.field(default="", validator=_reason)


@final
@attrs.frozen
class Message(LiveCommand):
    """A JSON payload for the attempt's inbox, returned by ``ctx.boundary()`` in send order."""

    payload: JsonValue = attrs.field(default=None, converter=_message_payload)


for _cls in (Cancel, Pause, Wake, Message):
    _cls.__qualname__ = f"LiveCommand.{_cls.__name__}"
    setattr(LiveCommand, _cls.__name__, _cls)


def stored_form(command: LiveCommand) -> tuple[CommandKind, JsonValue, str | None]:
    """How a durable store keeps ``command``: its kind, payload and reason."""
    if isinstance(command, Cancel):
        return "cancel", None, command.reason
    if isinstance(command, Pause):
        return "pause", None, None
    if isinstance(command, Wake):
        return "wake", None, command.reason
    assert isinstance(command, Message)
    return "message", command.payload, None
