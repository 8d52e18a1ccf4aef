"""Stores: where committed run truth lives.

`MemoryStore` is in this package today; SQLite and PostgreSQL stores implement the same
`Store` protocol and pass the same contract tests.
"""

from ._memory import MemoryStore as MemoryStore
from ._protocol import UNSET as UNSET
from ._protocol import Accepted as Accepted
from ._protocol import Commit as Commit
from ._protocol import CommitResult as CommitResult
from ._protocol import EventDraft as EventDraft
from ._protocol import Expect as Expect
from ._protocol import InlineStore as InlineStore
from ._protocol import NewRun as NewRun
from ._protocol import Rejected as Rejected
from ._protocol import Store as Store
