"""The PostgreSQL store's statements, by name: ``queries.sql`` read once, at import, and
composed for a store's schema (`Queries.of`); and the columns many-row writes send, one
tuple (`COLUMNS`) that both the statements and the rows' encoder (`Layout`) are made from.

A write sends its runs as one JSON array of arrays (``insert_runs``, ``update_runs``), its
events and kept checkpoints likewise (``seal``): a statement reads a row's values by their
place (``j->>3``). Those places are never written by hand: `Layout` gives a column's place
to the statement's text and puts the value there in the row it encodes.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, final

import attrs
from psycopg import sql

from .._codec import RECORD_COLUMNS
from .._textrows import EVENT_COLUMNS, TextRow
from .._workers import WORKER_COLUMNS
from ._order import ticket_space

# ============================================================================ columns


@final
@attrs.frozen
class Column:
    """A column a many-row write sets, as one value of each JSON row it sends."""

    name: str
    type: str = "text"
    """What the JSON value's text is cast to (text needs no cast)."""
    field: str | None = None
    """The `TextRow` attribute the value is read from; None: the write gives it."""
    updated: bool = True
    """Whether an update sends it (else only an insert: what never changes)."""
    kept: bool = False
    """An update that sends null keeps the run's value (a checkpoint, steps or result the
    commit did not give)."""
    key: bool = False
    """The run's key: sent by an update to find the row, never set."""
    value: str = "{}"
    """How the statement makes the column's value of the JSON one ({} in it)."""

    def select(self, place: int) -> str:
        """The SQL of the value at ``place`` of the JSON row ``j``."""
        found = f"j->>{place}" if self.type == "text" else f"(j->>{place})::{self.type}"
        return self.value.replace("{}", found)


COLUMNS: Final = (
    Column("run_id", field="run_id", key=True),
    Column("thread_id", field="thread_id", updated=False),
    Column("parent_run_id", field="parent_run_id", updated=False),
    Column("root_run_id", field="root_run_id", updated=False),
    Column("name", field="name", updated=False),
    Column("kind", field="kind"),
    Column("state", field="state_text"),
    Column("generation", "bigint", field="generation"),
    Column("carried", field="carried"),
    Column("carried_pause", "boolean", field="carried_pause"),
    Column("resume_value", field="resume_value"),
    Column("resume_ticket", field="resume_ticket"),
    Column("epoch", "bigint", field="epoch"),
    Column("attempt_epoch", "bigint", field="attempt_epoch"),
    Column("recoveries", "bigint", field="recoveries"),
    Column("created_at", "float8", field="created_at", updated=False),
    Column("updated_at", "float8", field="updated_at"),
    Column("started_at", "float8", field="started_at"),
    Column("ended_at", "float8", field="ended_at"),
    Column("worker_id", field="worker_id"),
    Column("cause", field="cause"),
    Column("body_version", field="body_version"),
    Column("retries", "bigint", field="retries"),
    # A named root run written Queued takes a place after every other, from the sequence.
    Column(
        "queued_order",
        "boolean",
        field="in_queue",
        value="CASE WHEN {} THEN nextval('{s}.queue_places') END",
    ),
    Column("not_before", "float8", field="not_before"),
    Column("input", updated=False),
    Column("result", kept=True),
    Column("checkpoint", kept=True),
    Column("steps", "bigint", kept=True),
    Column("max_steps", "bigint", updated=False),
    Column("forked_from", updated=False),
    Column("deadline", "float8", updated=False),
    Column("queue_deadline", "float8", updated=False),
    Column("retry", updated=False),
)
"""The columns of ``runs`` a write sends: an insert every one, an update those `updated`
(each layout in this order, the ones read from the row first)."""


@final
class Layout:
    """The JSON rows of one many-row statement: each column's place in a row, the SQL that
    reads them (`names`, `values`, `values_as`, `sets`) and the encoder (`row`)."""

    def __init__(self, columns: Sequence[Column]) -> None:
        self.columns = tuple(columns)
        read = [c.field for c in self.columns if c.field is not None]
        if self.columns[: len(read)] != tuple(c for c in self.columns if c.field is not None):
            raise ValueError("a layout lists the columns read from the row first")
        self._fields = _getter(read)
        self.given = tuple(c.name for c in self.columns[len(read) :])
        """The columns a write gives (`row`'s ``given``), in their places' order."""

    @property
    def names(self) -> str:
        return ", ".join(c.name for c in self.columns)

    @property
    def values(self) -> str:
        return ", ".join(c.select(i) for i, c in enumerate(self.columns))

    @property
    def values_as(self) -> str:
        return ", ".join(f"{c.select(i)} AS {c.name}" for i, c in enumerate(self.columns))

    @property
    def sets(self) -> str:
        """An update's ``SET`` list, from a CTE ``v`` of `values_as` over rows ``r``."""
        return ", ".join(
            f"{c.name} = COALESCE(v.{c.name}, r.{c.name})" if c.kept else f"{c.name} = v.{c.name}"
            for c in self.columns
            if not c.key
        )

    def row(self, row: TextRow, given: Mapping[str, Any]) -> tuple[Any, ...]:
        """The JSON row of ``row``: its columns, then the ``given`` ones by name."""
        return (*self._fields(row), *[given[name] for name in self.given])

    def read(self, row: TextRow) -> tuple[Any, ...]:
        """The values of the columns read from ``row`` (a `row` without the given ones)."""
        return self._fields(row)


def _getter(fields: Sequence[str]) -> Callable[[Any], tuple[Any, ...]]:
    """A function of a row that gives the values of ``fields``, as a tuple."""
    if len(fields) > 1:
        return operator.attrgetter(*fields)
    return lambda row: tuple(getattr(row, name) for name in fields)


INSERTED: Final = Layout(COLUMNS)
UPDATED: Final = Layout([c for c in COLUMNS if c.updated])
_EVENT_TYPES: Final = {"seq": "bigint", "generation": "bigint", "at": "float8"}
_SEQ: Final = "CASE WHEN n = 1 THEN {s}.next_seq(%(space)s) ELSE nextval('{s}.event_seqs') END"
"""A seal's event's seq (``n``: its number in the transaction, from 1): the first takes the
transaction's one ticket (``next_seq``), which is below every seq it takes after."""
EVENTS: Final = Layout(
    [
        Column(
            name,
            _EVENT_TYPES.get(name, "text"),
            value=_SEQ if name == "seq" else "{}",
        )
        for name in EVENT_COLUMNS
    ]
)
"""An event as `TextRunTx.event` queues it: its seq from the sequence, in the order of the
transaction's numbers, the first with the transaction's ticket (``_order``'s docstring)."""
_NUMBERED: Final = "CASE WHEN {} = 0 THEN c.base ELSE c.seqs[({})::integer] END"
HISTORY: Final = Layout(
    [
        Column("run_id"),
        Column("seq", "bigint", value=_NUMBERED),
        Column("checkpoint"),
    ]
)
"""A checkpoint kept as of an event: the seq its transaction's number was given (0, the
seq before the transaction's first)."""

ROW_COLUMNS: Final = ", ".join(
    next(c.name for c in COLUMNS if c.field == f.name) for f in attrs.fields(TextRow)
)
"""The columns of a `TextRow`, in its fields' order (``TextRow(*found)``)."""


_ROW_NAMES: Final = ROW_COLUMNS.split(", ")
_RECORD_NAMES: Final = [name.removeprefix("r.") for name in RECORD_COLUMNS.split(", ")]
_HELD_EXTRAS: Final = [name for name in _RECORD_NAMES if name not in _ROW_NAMES]
HELD_RECORD: Final[Callable[[Sequence[Any]], tuple[Any, ...]]] = operator.itemgetter(
    *[
        _ROW_NAMES.index(name) if name in _ROW_NAMES else len(_ROW_NAMES) + _HELD_EXTRAS.index(name)
        for name in _RECORD_NAMES
    ]
)
"""The record columns (`RECORD_COLUMNS`, in order) of a look's row: the run's row
(``held_row_columns``) then the record's columns the row does not hold
(``held_record_columns``). The server sends each column once: the row and the record share
14 of their columns, and reading them twice cost a worker 4.1 to 4.6 µs a run, against
2.1 to 2.9 (1,024 rows read and made Python values by psycopg)."""


def rows_json(rows: Sequence[Sequence[Any]]) -> str:
    """Rows as one JSON array of arrays, the parameter of a many-row statement. (Text that
    cannot be encoded fails here as it would as a parameter of its own; the clock's floats
    are finite, and a float's shortest repr reads back as the same float8.)"""
    return json.dumps(rows, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


# ============================================================================ statements

_FRAGMENTS: Final[Mapping[str, str]] = {
    "row_columns": ROW_COLUMNS,
    "held_row_columns": ", ".join(f"r.{name}" for name in _ROW_NAMES),
    "held_record_columns": ", ".join(f"r.{name}" for name in _HELD_EXTRAS),
    "record_columns": RECORD_COLUMNS,
    "worker_columns": WORKER_COLUMNS,
    # As many NULLs as a record has columns: a row of another shape in a union of records.
    "record_nulls": ", ".join(["NULL"] * (RECORD_COLUMNS.count(",") + 1)),
    "event_columns": ", ".join(EVENT_COLUMNS),
    "insert_names": INSERTED.names,
    "insert_values": INSERTED.values,
    "update_values": UPDATED.values_as,
    "update_sets": UPDATED.sets,
    "event_names": EVENTS.names,
    "event_values": EVENTS.values,
    "history_names": HISTORY.names,
    "history_values": HISTORY.values,
    # Left for the composition (`Queries.of`, and `list_runs`'s filters when it is called).
    "s": "{s}",
    "channel": "{channel}",
    "where": "{where}",
}

_NAMED: Final = re.compile(r"^-- ([a-z_]+) --$", re.MULTILINE)


def parse(text: str, fragments: Mapping[str, str] | None = _FRAGMENTS) -> dict[str, str]:
    """The statements of a queries file by name: each from its ``-- name --`` line to the
    next, without its comment lines, blank lines or final semicolon, with its
    ``fragments`` put in (None: left as they are)."""
    parts = _NAMED.split(text)
    found: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in found:
            raise ValueError(f"the statement {name!r} is named twice")
        lines = [line for line in body.splitlines() if line.strip() and not line.startswith("--")]
        statement = "\n".join(lines).strip().removesuffix(";")
        if not statement:
            raise ValueError(f"the statement {name!r} is empty")
        found[name] = statement if fragments is None else statement.format_map(fragments)
    return found


def seal_guessed(guessed: str, seal: str) -> str:
    """``insert_guessed`` and ``seal`` as one statement, for a guessed transaction that
    writes nothing but its runs, claims and events (``_guess``'s docstring): the check's
    and the writes' CTEs, then the seal's, whose events are numbered (their seqs and
    ticket taken) only once every run and claim is written. The events' rows pass a
    condition on the counts of both inserts, an uncorrelated subquery evaluated once
    before the first row, and their seqs are taken after it, in the projection (a
    SELECT's volatile expressions are evaluated after its ORDER BY, above the filter):
    so the seqs come after every lock the transaction takes, as in the two statements."""
    main = "\nSELECT (SELECT ok FROM g), (SELECT count(*) FROM inserted)"
    numbered = "AS t(j, n) ORDER BY n\n  RETURNING seq)"
    if guessed.count(main) != 1 or seal.count(numbered) != 1 or not seal.startswith("WITH "):
        raise ImportError("insert_guessed and seal cannot be sent as one statement")
    after = (
        "AS t(j, n)\n  WHERE (SELECT count(*) FROM inserted) + (SELECT count(*) FROM claimed)"
        " >= 0\n  ORDER BY n\n  RETURNING seq)"
    )
    ctes = guessed[: guessed.index(main)]
    return f"{ctes},\n{seal.removeprefix('WITH ').replace(numbered, after)}"


_FILE: Final = (
    importlib.resources.files(__name__.rpartition(".")[0])
    .joinpath("queries.sql")
    .read_text(encoding="utf-8")
)
_RAW: Final = parse(_FILE, None)
_TEXTS: Final = {name: text.format_map(_FRAGMENTS) for name, text in _RAW.items()}
_TEXTS["seal_guessed"] = seal_guessed(_TEXTS["insert_guessed"], _TEXTS["seal"])
UPDATED_READ: Final = len(UPDATED.columns) - len(UPDATED.given)
"""The places of an `UPDATED` row read from the run's row (the given ones come after)."""
IN_QUEUE: Final = next(i for i, c in enumerate(UPDATED.columns) if c.name == "queued_order")
"""The place of an `UPDATED` row that takes the run a place in the queue when true."""


@final
@attrs.frozen
class Queries:
    """The statements of one store's schema, composed once (`of`): bytes, not a
    `sql.Composed` turned into bytes on every execute (the pool's connections speak
    UTF-8, ``CLIENT_ENCODING``). ``queries.sql`` says what each is for."""

    schema: sql.Identifier
    channel: str
    """The channel the store's commits NOTIFY (its listener's)."""
    space: int
    """The first key of the store's ticket locks (`_order.ticket_space`)."""
    server_now: bytes
    configure: bytes
    lock_threads: bytes
    rows: bytes
    claims: bytes
    live: bytes
    unended: bytes
    stored_commands: bytes
    children: bytes
    children_of: bytes
    stream_heads: bytes
    expired_claims: bytes
    insert_runs: bytes
    update_runs: bytes
    update_guessed: bytes
    guessed_held: bytes
    guessed_quiet: bytes
    insert_guessed: bytes
    drop_claims: bytes
    put_claims: bytes
    drop_tickets: bytes
    put_tickets: bytes
    deliver: bytes
    consume: bytes
    drop_commands: bytes
    insert_command: bytes
    insert_chunks: bytes
    drop_chunks: bytes
    seal: bytes
    seal_guessed: bytes
    notice: bytes
    settle_seq: bytes
    forget_writers: bytes
    forget_written: bytes
    terminate: bytes
    still_running: bytes
    was_written: bytes
    load: bytes
    events: bytes
    events_of_run: bytes
    step_events: bytes
    queued: bytes
    due: bytes
    past_deadline: bytes
    look_async: bytes
    look_held: bytes
    look_held_done: bytes
    claims_skip_locked: bytes
    claims_present: bytes
    try_lock_threads: bytes
    reserved_by_others: bytes
    reserve: bytes
    forget_reserved: bytes
    list_runs: str
    """A template: its ``{where}`` is the filters a call asks for (`_reads.list_runs`)."""
    count_runs: bytes
    states: bytes
    commands: bytes
    last_event: bytes
    event_exists: bytes
    history_from: bytes
    checkpoint: bytes
    writes: bytes
    look_commands: bytes
    look_ended: bytes
    run_kind: bytes
    chunk_page: bytes
    chunk_first_after: bytes
    chunk_last: bytes
    stream_channels: bytes
    any_expired: bytes
    prunable: bytes
    prune: bytes
    listen: bytes
    ping: bytes
    register_worker: bytes
    worker_seen: bytes
    worker_state: bytes
    list_workers: bytes
    list_live_workers: bytes
    drain_worker: bytes
    end_worker: bytes
    forget_workers: bytes

    @classmethod
    def of(cls, schema: str) -> Queries:
        channel = f"awaken_trio.{schema}"
        s = sql.Identifier(schema)
        c = sql.Identifier(channel)

        def composed(text: str) -> bytes:
            return sql.SQL(text).format(s=s, channel=c).as_bytes(None)

        statements: dict[str, Any] = {
            name: composed(text) for name, text in _TEXTS.items() if name != "list_runs"
        }
        statements["list_runs"] = _TEXTS["list_runs"]
        return cls(schema=s, channel=channel, space=ticket_space(schema), **statements)

    def update_runs_of(self, places: Sequence[int]) -> bytes:
        """``update_runs`` setting only the columns at ``places`` of an `UPDATED` row
        (sorted, the key's 0 first), whose JSON rows hold those values alone, in that
        order. Composed once a schema and places (a write has few shapes: a start's, an
        end's, both)."""
        if len(places) == len(UPDATED.columns):
            return self.update_runs
        return _update_runs(self.schema.as_string(None), tuple(places), "update_runs")

    def update_guessed_of(self, places: Sequence[int]) -> bytes:
        """``update_guessed`` as `update_runs_of` makes ``update_runs``: its JSON rows
        hold the values at ``places``, then the id of the transaction that wrote the row."""
        if len(places) == len(UPDATED.columns):
            return self.update_guessed
        return _update_runs(self.schema.as_string(None), tuple(places), "update_guessed")


@functools.lru_cache(maxsize=256)  # (far more than the shapes that exist)
def _update_runs(schema: str, places: tuple[int, ...], name: str) -> bytes:
    """`Queries.update_runs_of` (``name``: or `Queries.update_guessed_of`) for ``schema``,
    the schema's identifier as SQL (quoted)."""
    layout = Layout([UPDATED.columns[place] for place in places])
    text = _RAW[name].format_map(
        {**_FRAGMENTS, "update_values": layout.values_as, "update_sets": layout.sets}
    )
    return sql.SQL(text).format(s=sql.SQL(schema)).as_bytes(None)


def _check_names() -> None:
    """Every statement the file names is a field of `Queries`, and every field is named."""
    fields = {f.name for f in attrs.fields(Queries)} - {"schema", "channel", "space"}
    if fields != _TEXTS.keys():
        missing, extra = sorted(fields - _TEXTS.keys()), sorted(_TEXTS.keys() - fields)
        raise ImportError(f"queries.sql does not match Queries: missing {missing}, extra {extra}")


_check_names()
