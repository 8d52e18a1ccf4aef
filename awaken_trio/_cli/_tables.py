"""The command line's tables: runs and events as rows of text cells, drawn by rich on a
terminal and as tab-separated lines elsewhere."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Final

from rich.console import Console
from rich.table import Table

from .. import RunEvent, RunRecord
from .._face.shapes import (
    describe_detail,
    describe_state,
    duration_of,
    end_of,
    state_word,
    when,
)

EVENTS_SHOWN: Final = 20
"""How many of a run's last events ``runs show`` prints."""


# ---------------------------------------------------------------------------- tables

ROW_COLUMNS: Final = (
    "run",
    "name",
    "thread",
    "parent",
    "state",
    "end",
    "gen",
    "created",
    "duration",
)


def row_cells(record: RunRecord, now: float | None = None) -> list[str]:
    return [
        record.run_id,
        record.name or "",
        record.thread_id,
        record.parent_run_id or "",
        state_word(record.state),
        end_of(record.state),
        str(record.generation),
        when(record.created_at),
        duration_of(record, time.time() if now is None else now),
    ]


EVENT_COLUMNS: Final = ("seq", "run", "gen", "kind", "state", "detail")


def event_cells(event: RunEvent) -> list[str]:
    return [
        str(event.seq),
        event.run_id,
        str(event.generation),
        event.kind,
        describe_state(event.state),
        describe_detail(event.detail),
    ]


def table(columns: Sequence[str], rows: Sequence[Sequence[str]], title: str | None = None) -> Table:
    """A rich table of text cells (drawn only on a terminal)."""
    out = Table(title=title, title_justify="left", expand=False)
    for column in columns:
        out.add_column(column, overflow="fold")
    for row in rows:
        out.add_row(*row)
    return out


def print_table(
    console: Console,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    title: str | None = None,
) -> None:
    """A table: drawn by rich on a terminal; elsewhere plain lines, tab-separated after a
    header line, so scripts can cut them (no escape codes, no box characters)."""
    if console.is_terminal:
        console.print(table(columns, rows, title))
        return
    # Written as they are: rich's console would expand the tabs to spaces.
    file = console.file
    if title:
        file.write(f"{title}\n")
    for line in (columns, *rows):
        file.write("\t".join(line) + "\n")
    file.flush()
