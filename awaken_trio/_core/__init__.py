"""The kernel's API: everything the rest of awaken_trio may use from ``_core``.

``_core`` is self-contained, as trio's own ``_core`` is: it imports nothing else from the
package, and ``store/``, ``worker/``, ``agent/``, ``testing/``, the command line, the clients
and the dashboard are built on the names below and nothing else. A module outside ``_core``
that imports a private ``_core._module`` fails ``tests/test_layering.py``.

The names fall into four groups:

- values and errors users see (states, events, records, tickets, the error tree, frozen
  JSON), re-exported publicly from ``awaken_trio``;
- the store protocol (``Store``, ``Commit``, fences, claims, commands), re-exported publicly
  from ``awaken_trio.store``;
- the seams a store, the worker and the composition (``awaken_trio._open``) build on: the
  `ServingHost` protocol durable serving is typed against and the `Claims` port its claim
  book fills, the supervisor and its commit mailbox, the scheduler of ``ctx.sleep``, JSON
  checks; they stay private to the package;
- helpers (``safe_repr``, ``fixup_module_metadata``, and ``Backoff``, the waits of every
  loop that backs off: a store's retries, the serving loop's).
"""

from ._actor import run_attempt as run_attempt
from ._attempt import DEADLINE as DEADLINE
from ._attempt import NOT_RESUMED as NOT_RESUMED
from ._attempt import Attempt as Attempt
from ._attempt import Body as Body
from ._attempt import EndRequest as EndRequest
from ._attempt import OwnershipVerifier as OwnershipVerifier
from ._attempt import lost as lost
from ._backoff import Backoff as Backoff
from ._claims import ClaimedAttempt as ClaimedAttempt
from ._claims import ClaimPolicy as ClaimPolicy
from ._claims import NoClaims as NoClaims
from ._commands import LiveCommand as LiveCommand
from ._commands import stored_form as stored_form
from ._commits import CommitMailbox as CommitMailbox
from ._commits import CommitStatistics as CommitStatistics
from ._context import RunContext as RunContext
from ._context import attempt_in as attempt_in
from ._context import current_context as current_context
from ._errors import AwakenError as AwakenError
from ._errors import ContextMisuse as ContextMisuse
from ._errors import InvalidArgument as InvalidArgument
from ._errors import InvalidBody as InvalidBody
from ._errors import InvalidPayload as InvalidPayload
from ._errors import MaxStepsReached as MaxStepsReached
from ._errors import NotActive as NotActive
from ._errors import NotAwaiting as NotAwaiting
from ._errors import NotInRun as NotInRun
from ._errors import RunAlreadyEnded as RunAlreadyEnded
from ._errors import RunError as RunError
from ._errors import RunExists as RunExists
from ._errors import RuntimeClosed as RuntimeClosed
from ._errors import StoreError as StoreError
from ._errors import StreamGap as StreamGap
from ._errors import ThreadBusy as ThreadBusy
from ._errors import TicketExpired as TicketExpired
from ._errors import TicketMismatch as TicketMismatch
from ._errors import UnknownRun as UnknownRun
from ._errors import UnknownWorker as UnknownWorker
from ._events import EventStream as EventStream
from ._handle import RunHandle as RunHandle
from ._host import AttemptHost as AttemptHost
from ._host import ClaimSettings as ClaimSettings
from ._host import HeardEnd as HeardEnd
from ._host import Serve as Serve
from ._host import ServedRun as ServedRun
from ._host import ServingHost as ServingHost
from ._host import Started as Started
from ._host import Watched as Watched
from ._json import DEFAULT_MAX_PAYLOAD_BYTES as DEFAULT_MAX_PAYLOAD_BYTES
from ._json import FrozenDict as FrozenDict
from ._json import FrozenList as FrozenList
from ._json import JsonValue as JsonValue
from ._json import check_json as check_json
from ._json import check_payload as check_payload
from ._json import freeze_detail as freeze_detail
from ._json import scalar_dict as scalar_dict
from ._observe import AttemptObserver as AttemptObserver
from ._observe import Attribute as Attribute
from ._operator import RuntimeStatistics as RuntimeStatistics
from ._policy import RetryPolicy as RetryPolicy
from ._policy import TimeLimit as TimeLimit
from ._registry import AttemptRegistry as AttemptRegistry
from ._registry import GateWaiter as GateWaiter
from ._registry import ThreadGate as ThreadGate
from ._runtime import Runtime as Runtime
from ._runtime import raise_block_exit as raise_block_exit
from ._runtime import request_end_here as request_end_here
from ._runtime import run_mailbox as run_mailbox
from ._runtime import start_kernel_services as start_kernel_services
from ._state import CANCELLED_CAUSE as CANCELLED_CAUSE
from ._state import CAUSE_KINDS as CAUSE_KINDS
from ._state import CHUNK_KINDS as CHUNK_KINDS
from ._state import Awaiting as Awaiting
from ._state import Cancelled as Cancelled
from ._state import CauseKind as CauseKind
from ._state import ChunkKind as ChunkKind
from ._state import EndCause as EndCause
from ._state import Ended as Ended
from ._state import EventKind as EventKind
from ._state import Failed as Failed
from ._state import Indeterminate as Indeterminate
from ._state import MaxSteps as MaxSteps
from ._state import NaturalEnd as NaturalEnd
from ._state import Queued as Queued
from ._state import ResumeTicket as ResumeTicket
from ._state import RunCounts as RunCounts
from ._state import RunEvent as RunEvent
from ._state import Running as Running
from ._state import RunRecord as RunRecord
from ._state import RunState as RunState
from ._state import Stopped as Stopped
from ._state import StreamChunk as StreamChunk
from ._state import cause_kind as cause_kind
from ._state import ended as ended
from ._state import wake_at as wake_at
from ._storage import DURABLE_METHODS as DURABLE_METHODS
from ._storage import IF_BUSY as IF_BUSY
from ._storage import LOST_AFTER_LEASES as LOST_AFTER_LEASES
from ._storage import STATE_KINDS as STATE_KINDS
from ._storage import STORE_METHODS as STORE_METHODS
from ._storage import UNSET as UNSET
from ._storage import WORKER_STATES as WORKER_STATES
from ._storage import WORKERS_KEPT as WORKERS_KEPT
from ._storage import Accepted as Accepted
from ._storage import CheckpointAt as CheckpointAt
from ._storage import Claim as Claim
from ._storage import CommandKind as CommandKind
from ._storage import Commit as Commit
from ._storage import CommitResult as CommitResult
from ._storage import ControlLook as ControlLook
from ._storage import CountingStore as CountingStore
from ._storage import DeadlineStore as DeadlineStore
from ._storage import DescendantsEnd as DescendantsEnd
from ._storage import DurableStore as DurableStore
from ._storage import EventDraft as EventDraft
from ._storage import Expect as Expect
from ._storage import Fence as Fence
from ._storage import ForkingStore as ForkingStore
from ._storage import IfBusy as IfBusy
from ._storage import InlineStore as InlineStore
from ._storage import ListingStore as ListingStore
from ._storage import LookingStore as LookingStore
from ._storage import NewRun as NewRun
from ._storage import Overdue as Overdue
from ._storage import OverdueLook as OverdueLook
from ._storage import PruningStore as PruningStore
from ._storage import Recovered as Recovered
from ._storage import Rejected as Rejected
from ._storage import RejectReason as RejectReason
from ._storage import RunFilter as RunFilter
from ._storage import SettlingStore as SettlingStore
from ._storage import StateKind as StateKind
from ._storage import StepStore as StepStore
from ._storage import Store as Store
from ._storage import StoredCommand as StoredCommand
from ._storage import StreamDraft as StreamDraft
from ._storage import StreamingStore as StreamingStore
from ._storage import StreamPage as StreamPage
from ._storage import WorkerInfo as WorkerInfo
from ._storage import WorkerRecord as WorkerRecord
from ._storage import WorkerState as WorkerState
from ._storage import WorkerStore as WorkerStore
from ._storage import read_store as read_store
from ._stored import StoredCommandLoads as StoredCommandLoads
from ._streams import StreamReader as StreamReader
from ._streams import StreamWriter as StreamWriter
from ._streams import check_channel as check_channel
from ._streams import check_read as check_read
from ._supervisor import Clock as Clock
from ._supervisor import Supervisor as Supervisor
from ._supervisor import VerifierFactory as VerifierFactory
from ._util import NoPublicConstructor as NoPublicConstructor
from ._util import fixup_module_metadata as fixup_module_metadata
from ._util import safe_repr as safe_repr
from ._validate import check_body as check_body
from ._validate import new_run_id as new_run_id
from ._versions import BodyVersions as BodyVersions
from ._versions import VersionedBody as VersionedBody
