"""awaken_trio: Trio-native Runs with live cancel, pause, resume and one committed end.

Each Run is executed by an actor in a nursery; each attempt has a fresh
``trio.CancelScope`` that is its cancellation token; child runs live inside their
parent's attempt scope; one supervisor commits every state. Start with `open_runtime`.

Layering: ``awaken_trio._core`` is the kernel and depends on nothing else in the package;
``awaken_trio.store`` holds the store protocol, the memory store and the URL-selected
backends; ``awaken_trio.testing`` helps test stores and runs; ``awaken_trio.agent`` runs
model-and-tool loops as run bodies, built on this public API only. Everything public is
re-exported here or in those public subpackages.
"""

from ._core._attempt import OwnershipVerifier as OwnershipVerifier
from ._core._commands import LiveCommand as LiveCommand
from ._core._commits import CommitStatistics as CommitStatistics
from ._core._context import RunContext as RunContext
from ._core._errors import AwakenError as AwakenError
from ._core._errors import ContextMisuse as ContextMisuse
from ._core._errors import InvalidArgument as InvalidArgument
from ._core._errors import InvalidBody as InvalidBody
from ._core._errors import InvalidPayload as InvalidPayload
from ._core._errors import MaxStepsReached as MaxStepsReached
from ._core._errors import NotActive as NotActive
from ._core._errors import NotAwaiting as NotAwaiting
from ._core._errors import RunAlreadyEnded as RunAlreadyEnded
from ._core._errors import RunError as RunError
from ._core._errors import RunExists as RunExists
from ._core._errors import RuntimeClosed as RuntimeClosed
from ._core._errors import StoreError as StoreError
from ._core._errors import TicketExpired as TicketExpired
from ._core._errors import TicketMismatch as TicketMismatch
from ._core._errors import UnknownRun as UnknownRun
from ._core._events import EventStream as EventStream
from ._core._handle import RunHandle as RunHandle
from ._core._json import FrozenDict as FrozenDict
from ._core._json import FrozenList as FrozenList
from ._core._json import JsonValue as JsonValue
from ._core._runtime import Runtime as Runtime
from ._core._runtime import RuntimeStatistics as RuntimeStatistics
from ._core._runtime import open_runtime as open_runtime
from ._core._state import EndCause as EndCause
from ._core._state import EventKind as EventKind
from ._core._state import ResumeTicket as ResumeTicket
from ._core._state import RunEvent as RunEvent
from ._core._state import RunRecord as RunRecord
from ._core._state import RunState as RunState
from ._core._util import fixup_module_metadata as _fixup_module_metadata

__version__ = "0.1.0"

__all__ = [
    "AwakenError",
    "CommitStatistics",
    "ContextMisuse",
    "EndCause",
    "EventKind",
    "EventStream",
    "FrozenDict",
    "FrozenList",
    "InvalidArgument",
    "InvalidBody",
    "InvalidPayload",
    "JsonValue",
    "LiveCommand",
    "MaxStepsReached",
    "NotActive",
    "NotAwaiting",
    "OwnershipVerifier",
    "ResumeTicket",
    "RunAlreadyEnded",
    "RunContext",
    "RunError",
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

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
