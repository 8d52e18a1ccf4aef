"""awaken_trio: Trio-native Runs with live cancel, pause, resume and one committed end.

Each Run is executed by an actor in a nursery; each attempt has a fresh
``trio.CancelScope`` that is its cancellation token; child runs live inside their
parent's attempt scope; one supervisor commits every state. Start with `open_runtime`.
"""

from ._core._attempt import OwnershipVerifier as OwnershipVerifier
from ._core._commands import LiveCommand as LiveCommand
from ._core._commits import CommitStatistics as CommitStatistics
from ._core._context import RunContext as RunContext
from ._core._errors import AwakenError as AwakenError
from ._core._errors import InvalidArgument as InvalidArgument
from ._core._errors import InvalidBody as InvalidBody
from ._core._errors import InvalidPayload as InvalidPayload
from ._core._errors import NotActive as NotActive
from ._core._errors import NotAwaiting as NotAwaiting
from ._core._errors import RunAlreadyEnded as RunAlreadyEnded
from ._core._errors import RunExists as RunExists
from ._core._errors import RuntimeClosed as RuntimeClosed
from ._core._errors import StoreError as StoreError
from ._core._errors import TicketExpired as TicketExpired
from ._core._errors import TicketMismatch as TicketMismatch
from ._core._errors import UnknownRun as UnknownRun
from ._core._events import EventStream as EventStream
from ._core._handle import RunHandle as RunHandle
from ._core._json import JsonValue as JsonValue
from ._core._runtime import Runtime as Runtime
from ._core._runtime import RuntimeStatistics as RuntimeStatistics
from ._core._runtime import open_runtime as open_runtime
from ._core._state import EndCause as EndCause
from ._core._state import ResumeTicket as ResumeTicket
from ._core._state import RunEvent as RunEvent
from ._core._state import RunRecord as RunRecord
from ._core._state import RunState as RunState

__version__ = "0.1.0"

__all__ = [
    "AwakenError",
    "CommitStatistics",
    "EndCause",
    "EventStream",
    "InvalidArgument",
    "InvalidBody",
    "InvalidPayload",
    "JsonValue",
    "LiveCommand",
    "NotActive",
    "NotAwaiting",
    "OwnershipVerifier",
    "ResumeTicket",
    "RunAlreadyEnded",
    "RunContext",
    "RunEvent",
    "RunExists",
    "RunHandle",
    "RunRecord",
    "RunState",
    "Runtime",
    "RuntimeClosed",
    "RuntimeStatistics",
    "StoreError",
    "TicketExpired",
    "TicketMismatch",
    "UnknownRun",
    "open_runtime",
]


def _fixup_module_metadata() -> None:
    # Tracebacks, reprs and docs show `awaken_trio.RunState`, not the private module.
    for name in __all__:
        obj = globals()[name]
        if getattr(obj, "__module__", "").startswith("awaken_trio._"):
            obj.__module__ = __name__


_fixup_module_metadata()
del _fixup_module_metadata
