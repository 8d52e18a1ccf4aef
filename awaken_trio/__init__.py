"""awaken_trio: Trio-native Runs with live cancel, pause, resume and one committed end.

Each Run is executed by an actor in a nursery; each attempt has a fresh
``trio.CancelScope`` that is its cancellation token; child runs live inside their
parent's attempt scope; one supervisor commits every state. Start with `open_runtime`.

Layering: ``awaken_trio._core`` is the kernel and depends on nothing else in the package;
``awaken_trio.worker`` (durable serving) is built on the kernel's API; ``awaken_trio._open``
composes the kernel, a store and the worker into `open_runtime`;
``awaken_trio.store`` holds the store protocol, the memory store and the URL-selected
backends; ``awaken_trio.testing`` helps test stores and runs; ``awaken_trio.agent`` runs
model-and-tool loops as run bodies, built on this public API only. Everything public is
re-exported here or in those public subpackages.
"""

from ._core import AwakenError as AwakenError
from ._core import CommitStatistics as CommitStatistics
from ._core import ContextMisuse as ContextMisuse
from ._core import EndCause as EndCause
from ._core import EventKind as EventKind
from ._core import EventStream as EventStream
from ._core import FrozenDict as FrozenDict
from ._core import FrozenList as FrozenList
from ._core import InvalidArgument as InvalidArgument
from ._core import InvalidBody as InvalidBody
from ._core import InvalidPayload as InvalidPayload
from ._core import JsonValue as JsonValue
from ._core import LiveCommand as LiveCommand
from ._core import MaxStepsReached as MaxStepsReached
from ._core import NotActive as NotActive
from ._core import NotAwaiting as NotAwaiting
from ._core import NotInRun as NotInRun
from ._core import OwnershipVerifier as OwnershipVerifier
from ._core import ResumeTicket as ResumeTicket
from ._core import RetryPolicy as RetryPolicy
from ._core import RunAlreadyEnded as RunAlreadyEnded
from ._core import RunContext as RunContext
from ._core import RunCounts as RunCounts
from ._core import RunError as RunError
from ._core import RunEvent as RunEvent
from ._core import RunExists as RunExists
from ._core import RunHandle as RunHandle
from ._core import RunRecord as RunRecord
from ._core import RunState as RunState
from ._core import Runtime as Runtime
from ._core import RuntimeClosed as RuntimeClosed
from ._core import RuntimeStatistics as RuntimeStatistics
from ._core import StoreError as StoreError
from ._core import StreamChunk as StreamChunk
from ._core import StreamGap as StreamGap
from ._core import StreamReader as StreamReader
from ._core import StreamWriter as StreamWriter
from ._core import ThreadBusy as ThreadBusy
from ._core import TicketExpired as TicketExpired
from ._core import TicketMismatch as TicketMismatch
from ._core import UnknownRun as UnknownRun
from ._core import UnknownWorker as UnknownWorker
from ._core import VersionedBody as VersionedBody
from ._core import WorkerRecord as WorkerRecord
from ._core import current_context as current_context
from ._core import fixup_module_metadata as _fixup_module_metadata
from ._open import open_runtime as open_runtime

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
    "NotInRun",
    "OwnershipVerifier",
    "ResumeTicket",
    "RetryPolicy",
    "RunAlreadyEnded",
    "RunContext",
    "RunCounts",
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
    "StreamChunk",
    "StreamGap",
    "StreamReader",
    "StreamWriter",
    "ThreadBusy",
    "TicketExpired",
    "TicketMismatch",
    "UnknownRun",
    "UnknownWorker",
    "VersionedBody",
    "WorkerRecord",
    "current_context",
    "open_runtime",
]

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
