"""Stores: where committed run truth lives.

`Store` is the protocol the runtime writes through; `DurableStore` is what a store shared by
several runtimes implements besides (claims taken with `Claim` and checked by `Fence`,
`Recovered` runs, `StoredCommand` values of a `CommandKind`). `MemoryStore` keeps everything
in this process; `open_store` turns a URL into a store, importing a backend only when its
scheme is first used; `state_to_json`, `cause_to_json` and `ticket_to_json` give the JSON
shapes the stores keep (and the command line prints). A store may also offer listing
(`ListingStore`), forking (`ForkingStore`: the checkpoint as of any event), retention
(`PruningStore`), reading a run's journaled steps by their kind (`StepStore`) and
finding the runs past their time limits (`DeadlineStore`, `Overdue`, `OverdueLook`) and
holding the runs a look found for their starts (`LookingStore`); a store whose writers do
not wait for each other says so (`SettlingStore`). The runtime uses
them where a store has them. `awaken_trio.testing` has the contract suites every store
passes.
"""

from .._core import UNSET as UNSET
from .._core import Accepted as Accepted
from .._core import BodyVersions as BodyVersions
from .._core import CauseKind as CauseKind
from .._core import CheckpointAt as CheckpointAt
from .._core import Claim as Claim
from .._core import CommandKind as CommandKind
from .._core import Commit as Commit
from .._core import CommitResult as CommitResult
from .._core import ControlLook as ControlLook
from .._core import CountingStore as CountingStore
from .._core import DeadlineStore as DeadlineStore
from .._core import DescendantsEnd as DescendantsEnd
from .._core import DurableStore as DurableStore
from .._core import EventDraft as EventDraft
from .._core import Expect as Expect
from .._core import Fence as Fence
from .._core import ForkingStore as ForkingStore
from .._core import IfBusy as IfBusy
from .._core import InlineStore as InlineStore
from .._core import ListingStore as ListingStore
from .._core import LookingStore as LookingStore
from .._core import NewRun as NewRun
from .._core import Overdue as Overdue
from .._core import OverdueLook as OverdueLook
from .._core import PruningStore as PruningStore
from .._core import Recovered as Recovered
from .._core import Rejected as Rejected
from .._core import RejectReason as RejectReason
from .._core import RunFilter as RunFilter
from .._core import SettlingStore as SettlingStore
from .._core import StateKind as StateKind
from .._core import StepStore as StepStore
from .._core import Store as Store
from .._core import StoredCommand as StoredCommand
from .._core import StreamDraft as StreamDraft
from .._core import StreamingStore as StreamingStore
from .._core import StreamPage as StreamPage
from .._core import WorkerInfo as WorkerInfo
from .._core import WorkerState as WorkerState
from .._core import WorkerStore as WorkerStore
from .._core import fixup_module_metadata as _fixup_module_metadata
from ._codec import cause_to_json as cause_to_json
from ._codec import state_to_json as state_to_json
from ._codec import ticket_to_json as ticket_to_json
from ._url import open_store as open_store
from .memory import MemoryStore as MemoryStore

__all__ = [
    "UNSET",
    "Accepted",
    "BodyVersions",
    "CauseKind",
    "CheckpointAt",
    "Claim",
    "CommandKind",
    "Commit",
    "CommitResult",
    "ControlLook",
    "CountingStore",
    "DeadlineStore",
    "DescendantsEnd",
    "DurableStore",
    "EventDraft",
    "Expect",
    "Fence",
    "ForkingStore",
    "IfBusy",
    "InlineStore",
    "ListingStore",
    "LookingStore",
    "MemoryStore",
    "NewRun",
    "Overdue",
    "OverdueLook",
    "PruningStore",
    "Recovered",
    "RejectReason",
    "Rejected",
    "RunFilter",
    "SettlingStore",
    "StateKind",
    "StepStore",
    "Store",
    "StoredCommand",
    "StreamDraft",
    "StreamPage",
    "StreamingStore",
    "WorkerInfo",
    "WorkerState",
    "WorkerStore",
    "cause_to_json",
    "open_store",
    "state_to_json",
    "ticket_to_json",
]

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
