"""Stores: where committed run truth lives.

`MemoryStore` is in this package today; SQLite and PostgreSQL stores implement the same
`Store` protocol and pass the same contract tests.
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
from .._core._storage import Store as Store
from ._memory import MemoryStore as MemoryStore
from ._url import open_store as open_store
