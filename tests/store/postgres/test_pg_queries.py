"""The PostgreSQL store's statements, named in ``queries.sql``: every one composes for a
schema, and the JSON rows many-row writes send put each value where the statement reads
it (`COLUMNS`, one tuple for both). No server: the contract suites run them for real."""

from __future__ import annotations

import re

import attrs
import pytest

from awaken_trio.store._textrows import EVENT_COLUMNS, TextRow
from awaken_trio.store.postgres import _queries
from awaken_trio.store.postgres._queries import (
    COLUMNS,
    EVENTS,
    INSERTED,
    UPDATED,
    Column,
    Layout,
    Queries,
    parse,
)


def test_every_statement_in_the_file_composes_for_a_schema() -> None:
    queries = Queries.of("team a")
    names = {f.name for f in attrs.fields(Queries)} - {"schema", "channel", "space", "list_runs"}
    for name in names:
        text = getattr(queries, name)
        assert isinstance(text, bytes), name
        assert text, name
        assert b"{" not in text, (name, text)  # every name in braces was filled in
    assert b'"team a".runs' in queries.rows
    assert queries.listen == b'LISTEN "awaken_trio.team a"'
    assert queries.channel == "awaken_trio.team a"
    assert "{where}" in queries.list_runs


def test_the_file_and_the_queries_name_the_same_statements() -> None:
    fields = {f.name for f in attrs.fields(Queries)} - {"schema", "channel", "space"}
    assert set(_queries._TEXTS) == fields


def test_a_statement_is_sent_without_its_comments_or_semicolon() -> None:
    found = parse("-- one --\n-- why it is so\nSELECT 1\n  FROM t;\n\n-- two --\nSELECT 2;\n")
    assert found == {"one": "SELECT 1\n  FROM t", "two": "SELECT 2"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-- one --\nSELECT 1;\n-- one --\nSELECT 2;\n", "'one' is named twice"),
        ("-- one --\n-- only a comment\n", "'one' is empty"),
    ],
)
def test_a_queries_file_that_names_a_statement_twice_or_leaves_one_empty_is_refused(
    text: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        parse(text)


def _row() -> TextRow:
    values = {f.name: f"<{f.name}>" for f in attrs.fields(TextRow)}
    return TextRow(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize("layout", [INSERTED, UPDATED], ids=["insert", "update"])
def test_a_rows_values_sit_where_the_statement_reads_them(layout: Layout) -> None:
    row = _row()
    given = {name: f"<given {name}>" for name in layout.given}
    encoded = layout.row(row, given)
    values = layout.values.split(", ")
    assert len(encoded) == len(layout.columns) == len(layout.names.split(", "))
    for place, column in enumerate(layout.columns):
        expected = given[column.name] if column.field is None else getattr(row, column.field)
        assert encoded[place] == expected, column
        assert re.search(rf"j->>{place}\b", values[place]), (column, values[place])
        assert layout.names.split(", ")[place] == column.name


def test_an_insert_sets_every_column_and_an_update_those_that_change() -> None:
    assert [c.name for c in INSERTED.columns] == [c.name for c in COLUMNS]
    assert {c.name for c in UPDATED.columns} == {
        "run_id",
        "kind",
        "state",
        "generation",
        "carried",
        "carried_pause",
        "resume_value",
        "resume_ticket",
        "epoch",
        "attempt_epoch",
        "recoveries",
        "updated_at",
        "started_at",
        "ended_at",
        "worker_id",
        "cause",
        "body_version",
        "retries",
        "queued_order",
        "not_before",
        "result",
        "checkpoint",
        "steps",
    }
    assert "run_id =" not in UPDATED.sets  # the key finds the row
    assert "checkpoint = COALESCE(v.checkpoint, r.checkpoint)" in UPDATED.sets


def test_the_rows_read_are_the_text_rows_fields_in_order() -> None:
    names = _queries.ROW_COLUMNS.split(", ")
    assert len(names) == len(attrs.fields(TextRow))
    assert names[attrs.fields(TextRow).index(attrs.fields(TextRow).state_text)] == "state"


def test_the_events_are_sealed_in_the_order_they_are_queued() -> None:
    assert EVENTS.names.split(", ") == list(EVENT_COLUMNS)
    # (Numbered from the sequence, in the events' order, the first with the transaction's
    # ticket: `_order`.)
    assert EVENTS.values.startswith(
        "CASE WHEN n = 1 THEN {s}.next_seq(%(space)s) ELSE nextval('{s}.event_seqs') END"
    )


def test_a_layout_lists_the_columns_read_from_the_row_first() -> None:
    with pytest.raises(ValueError, match="read from the row first"):
        Layout([Column("input"), Column("kind", field="kind")])


def test_an_update_of_some_columns_sets_those_alone_read_from_their_places() -> None:
    queries = Queries.of("team a")
    names = [c.name for c in UPDATED.columns]
    places = [0, names.index("kind"), names.index("queued_order"), names.index("steps")]
    text = queries.update_runs_of(places).decode()
    assert 'UPDATE "team a".runs AS r SET' in text
    sets = text.split(" SET ", 1)[1].split("\nFROM v", 1)[0]
    assert sets == (
        "kind = v.kind, queued_order = v.queued_order, steps = COALESCE(v.steps, r.steps)"
    )
    # Renumbered: the JSON rows hold those values alone, in that order.
    assert "j->>0 AS run_id, j->>1 AS kind" in text
    assert "CASE WHEN (j->>2)::boolean THEN nextval('\"team a\".queue_places') END" in text
    assert "(j->>3)::bigint AS steps" in text
    assert queries.update_runs_of(places) is queries.update_runs_of(list(places))  # composed once
    assert queries.update_runs_of(range(len(names))) == queries.update_runs  # all of them
