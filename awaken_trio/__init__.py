"""awaken_trio: Trio-native Runs with live cancel, pause, resume and one committed end.

Each Run is executed by an actor in a nursery; each attempt has a fresh
``trio.CancelScope`` that is its cancellation token; child runs live inside their
parent's attempt scope; one supervisor commits every state. Start with `open_runtime`.
"""

from ._attempt import OwnershipVerifier as OwnershipVerifier
from ._commands import LiveCommand as LiveCommand
from ._commits import CommitStatistics as CommitStatistics
from ._context import RunContext as RunContext
from ._errors import AwakenError as AwakenError
from ._errors import InvalidArgument as InvalidArgument
from ._errors import InvalidBody as InvalidBody
from ._errors import InvalidPayload as InvalidPayload
from ._errors import NotActive as NotActive
from ._errors import NotAwaiting as NotAwaiting
from ._errors import RunAlreadyEnded as RunAlreadyEnded
from ._errors import RunExists as RunExists
from ._errors import RuntimeClosed as RuntimeClosed
from ._errors import StoreError as StoreError
from ._errors import TicketExpired as TicketExpired
from ._errors import TicketMismatch as TicketMismatch
from ._errors import UnknownRun as UnknownRun
from ._events import EventStream as EventStream
from ._handle import RunHandle as RunHandle
from ._json import JsonValue as JsonValue
from ._runtime import Runtime as Runtime
from ._runtime import RuntimeStatistics as RuntimeStatistics
from ._runtime import open_runtime as open_runtime
from ._state import EndCause as EndCause
from ._state import ResumeTicket as ResumeTicket
from ._state import RunEvent as RunEvent
from ._state import RunRecord as RunRecord
from ._state import RunState as RunState

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
