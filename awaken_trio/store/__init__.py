"""Stores: where committed run truth lives.

`Store` is the protocol the runtime writes through; `MemoryStore` keeps everything in this
process; `open_store` turns a URL into a store, importing a backend only when its scheme is
first used. `awaken_trio.testing` has the contract suite every store passes.
"""

from .._core._storage import UNSET as UNSET
from .._core._storage import Accepted as Accepted
from .._core._storage import Commit as Commit
from .._core._storage import CommitResult as CommitResult
from .._core._storage import EventDraft as EventDraft
from .._core._storage import Expect as Expect
from .._core._storage import InlineStore as InlineStore
from .._core._storage import NewRun as NewRun
from .._core._storage import Rejected as Rejected
from .._core._storage import RejectReason as RejectReason
from .._core._storage import Store as Store
from .._core._util import fixup_module_metadata as _fixup_module_metadata
from ._memory import MemoryStore as MemoryStore
from ._url import open_store as open_store

__all__ = [
    "UNSET",
    "Accepted",
    "Commit",
    "CommitResult",
    "EventDraft",
    "Expect",
    "InlineStore",
    "MemoryStore",
    "NewRun",
    "RejectReason",
    "Rejected",
    "Store",
    "open_store",
]

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
