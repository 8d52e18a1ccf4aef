"""Claims and stored commands on the SQLite store: renewing and releasing leases,
recovering the runs of a lost owner, and storing commands for a run's attempt.

These run on the store's thread, each inside one write transaction (`Transaction`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from .._core import (
    CommandKind,
    JsonValue,
    Recovered,
    Rejected,
    RejectReason,
)
from ._codec import ENDED, QUEUED, RUNNING, dump_json
from ._rules import LAPSED, OWNER_LOST, ClaimRow, lost_detail, owner_lost
from ._sqlite_ending import end_descendants, end_row
from ._sqlite_rows import load_record
from ._sqlite_tx import Transaction


def renew(
    tx: Transaction, owner: str, held: Mapping[str, int], now: float, lease: float
) -> list[str]:
    """``now`` is the store's clock, read inside the transaction."""
    tx.read_claims(held)
    lease_until = now + lease
    lost: list[str] = []
    for run_id, epoch in held.items():
        claim = tx.claim(run_id)
        if claim is None or claim.owner != owner or claim.epoch != epoch or claim.lease_until < now:
            lost.append(run_id)
        else:
            tx.set_claim(run_id, ClaimRow(owner, epoch, lease_until))
    return lost


def release(tx: Transaction, owner: str, run_id: str) -> None:
    claim = tx.claim(run_id)
    if claim is not None and claim.owner == owner:
        row = tx.row(run_id)
        if row is not None and row.kind == RUNNING:
            # Given up by an attempt that never committed its end: its owner is lost, so
            # the claim stays, lapsed, where recovery finds the run.
            tx.set_claim(run_id, ClaimRow(owner, claim.epoch, LAPSED))
        else:
            tx.set_claim(run_id, None)


def recover(
    tx: Transaction,
    owner: str,
    names: Collection[str],
    now: float,
    at: float,
    lease: float,
    max_recoveries: int,
    limit: int,
) -> list[Recovered]:
    """Deal with at most ``limit`` runs whose claim expired before ``now`` (the store's
    clock, read inside the transaction; see `DurableStore.recover`), writing events dated
    ``at``. A recoverable run left for a runtime that has its body does not count toward
    ``limit``, so runs this runtime cannot take never hide the ones it can."""
    lease_until = now + lease
    expired = tx.conn.execute(
        "SELECT run_id FROM claims WHERE lease_until < ? ORDER BY lease_until, run_id", (now,)
    ).fetchall()
    recovered: list[Recovered] = []
    dealt = 0
    for (run_id,) in expired:
        if dealt >= limit:
            break
        root = tx.row(run_id)
        if root is None:
            tx.set_claim(run_id, None)
            dealt += 1
            continue
        running = root.kind == RUNNING
        losses = root.recoveries + 1
        recoverable = running and root.name is not None and losses <= max_recoveries
        if recoverable and root.name not in names:
            continue  # left for a runtime that has the body
        dealt += 1
        end_descendants(tx, run_id, at, owner_lost(OWNER_LOST), lost_detail(OWNER_LOST))
        if not running:
            tx.set_claim(run_id, None)  # a stale claim: nothing to recover
            continue
        root.recoveries = losses
        if root.name is None or losses > max_recoveries:
            why = OWNER_LOST if root.name is None else f"owner lost {losses} times"
            tx.set_claim(run_id, None)
            end_row(tx, root, owner_lost(why), lost_detail(why), at)
            continue
        root.epoch = epoch = root.epoch + 1
        tx.update_run(root)
        tx.set_claim(run_id, ClaimRow(owner, epoch, lease_until))
        tx.flush()  # the record is read from the file
        record = load_record(tx.conn, run_id)
        assert record is not None
        recovered.append(Recovered(record, epoch))
    return recovered


def post_command(
    tx: Transaction,
    run_id: str,
    kind: CommandKind,
    payload: JsonValue,
    reason: str | None,
    at: float,
) -> int | Rejected:
    row = tx.row(run_id)
    if row is None:
        return Rejected(RejectReason.UNKNOWN, None)
    if row.kind not in (RUNNING, QUEUED):  # a queued run's command waits for its attempt
        why = RejectReason.ENDED if row.kind == ENDED else RejectReason.STALE
        return Rejected(why, row.state)
    return tx.insert_command(run_id, kind, dump_json(payload), dump_json(reason), at)
