"""Claims and stored commands on the SQLite store: renewing and releasing leases,
recovering the runs of a lost owner, and storing commands for a run's attempt.

These run on the store's thread, each inside one write transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Mapping
from typing import Final

from .._core._json import JsonValue
from .._core._storage import CommandKind, Recovered, Rejected, RejectReason
from ._codec import ENDED, RUNNING, dump_json, load_state
from ._sqlite_rows import (
    claim_of,
    drop_claim,
    end_descendants,
    end_row,
    load_record,
    lost_detail,
    owner_lost,
    put_claim,
    read_row,
)

_OWNER_LOST: Final = "owner lost"


def renew(
    conn: sqlite3.Connection, owner: str, held: Mapping[str, int], now: float, lease_until: float
) -> list[str]:
    lost: list[str] = []
    for run_id, epoch in held.items():
        claim = claim_of(conn, run_id)
        if claim is None or claim[0] != owner or claim[1] != epoch or claim[2] < now:
            lost.append(run_id)
        else:
            conn.execute(
                "UPDATE claims SET lease_until = ? WHERE run_id = ?", (lease_until, run_id)
            )
    return lost


def release(conn: sqlite3.Connection, owner: str, run_id: str) -> None:
    conn.execute("DELETE FROM claims WHERE run_id = ? AND owner = ?", (run_id, owner))


def recover(
    conn: sqlite3.Connection,
    owner: str,
    names: Collection[str],
    now: float,
    lease_until: float,
    max_recoveries: int,
    limit: int,
) -> list[Recovered]:
    """Deal with at most ``limit`` runs whose claim expired before ``now`` (see
    `DurableStore.recover`). A recoverable run left for a runtime that has its body does
    not count toward ``limit``, so runs this runtime cannot take never hide the ones it
    can."""
    expired = conn.execute(
        "SELECT run_id FROM claims WHERE lease_until < ? ORDER BY lease_until, run_id", (now,)
    ).fetchall()
    recovered: list[Recovered] = []
    dealt = 0
    for (run_id,) in expired:
        if dealt >= limit:
            break
        root = read_row(conn, run_id)
        if root is None:
            drop_claim(conn, run_id)
            dealt += 1
            continue
        running = root.kind == RUNNING
        losses = root.recoveries + 1
        recoverable = running and root.name is not None and losses <= max_recoveries
        if recoverable and root.name not in names:
            continue  # left for a runtime that has the body
        dealt += 1
        end_descendants(conn, run_id, now, owner_lost(_OWNER_LOST), lost_detail(_OWNER_LOST))
        if not running:
            drop_claim(conn, run_id)  # a stale claim: nothing to recover
            continue
        conn.execute("UPDATE runs SET recoveries = ? WHERE run_id = ?", (losses, run_id))
        if root.name is None or losses > max_recoveries:
            why = _OWNER_LOST if root.name is None else f"owner lost {losses} times"
            drop_claim(conn, run_id)
            end_row(conn, root, owner_lost(why), lost_detail(why), now)
            continue
        epoch = root.epoch + 1
        conn.execute("UPDATE runs SET epoch = ? WHERE run_id = ?", (epoch, run_id))
        put_claim(conn, run_id, owner, epoch, lease_until)
        record = load_record(conn, run_id)
        assert record is not None
        recovered.append(Recovered(record, epoch))
    return recovered


def post_command(
    conn: sqlite3.Connection,
    run_id: str,
    kind: CommandKind,
    payload: JsonValue,
    reason: str | None,
    at: float,
) -> int | Rejected:
    found = conn.execute("SELECT kind, state FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    if found is None:
        return Rejected(RejectReason.UNKNOWN, None)
    if found[0] != RUNNING:
        why = RejectReason.ENDED if found[0] == ENDED else RejectReason.STALE
        return Rejected(why, load_state(found[1]))
    cursor = conn.execute(
        "INSERT INTO inbox (run_id, kind, payload, reason, at) VALUES (?, ?, ?, ?, ?)",
        (run_id, kind, dump_json(payload), dump_json(reason), at),
    )
    command_id = cursor.lastrowid
    assert command_id is not None
    return command_id
