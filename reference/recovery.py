"""The recovery scan of the reference ledger (a mixin of ``Ledger``).

Which records are stale, what the scan decides for each and what it writes all come from the
contract through ``ledgercheck.spec.rules``: the scan only finds candidates with SQL, reads their
journals and acts in one transaction.  Acting on a decision: a leased record is released along
recover's edge (the ``release`` effects, timeout event), the pending receipts are marked with the
decision's receipt state, and the record is requeued or flagged quarantined (the ``requeue`` and
``quarantine`` effects).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

from ledgercheck.spec import Spec, rules

from .rows import SELECT_WORK, Rec, decode, load
from .schema import recover_filter

_LEASED = SELECT_WORK + " INDEXED BY work_lease WHERE lease_token IS NOT NULL"
_LAST_EVENT = "SELECT type FROM work_event WHERE work_id = ? ORDER BY seq DESC LIMIT 1"


class RecoveryOps:
    # provided by Ledger
    spec: Spec
    _tx: Any
    leased: frozenset[str]
    targets: dict[str, dict[str, list[str]]]
    pointer: Any
    _check: Callable[[str, Mapping[str, Any]], None]
    _write: Callable[..., dict[str, Any]]
    write_pointer: Callable[[], None]

    def _stale(self, cur: sqlite3.Cursor, now: float) -> list[Rec]:
        """Records a recovery scan at ``now`` must classify, in creation order."""
        spec = self.spec
        found = [rec for rec in map(load, cur.execute(_LEASED).fetchall()) if rules.stale_for_recovery(spec, rec.snap, now)]
        for rec in map(load, cur.execute(SELECT_WORK + f" WHERE {recover_filter(spec)}").fetchall()):
            last = cur.execute(_LAST_EVENT, (rec.snap["work_id"],)).fetchone()
            if rules.stale_for_recovery(spec, rec.snap, now, last[0] if last else None):
                found.append(rec)
        return sorted(found, key=lambda rec: rec.seq)

    def _receipts(self, cur: sqlite3.Cursor, rec: Rec) -> list[tuple[str, str]]:
        """(state, step_class) of the record's receipts, in journal order."""
        return cur.execute("SELECT state, step_class FROM effect WHERE work_id = ? ORDER BY seq", (rec.snap["work_id"],)).fetchall()

    @staticmethod
    def _own_policy(rec: Rec) -> Mapping[str, Any] | None:
        """The retry policy the record was created with, if any."""
        return decode(rec.rp) if rec.rp else None

    def _decide(self, cur: sqlite3.Cursor, rec: Rec) -> tuple[str, str]:
        """The scanner's decision for a stale record, and why."""
        d = rules.recovery_decision(self.spec, rec.snap, self._receipts(cur, rec), self._own_policy(rec))
        return d.name, d.why

    def _mark_receipts(self, cur: sqlite3.Cursor, rec: Rec, state: str, now: float) -> None:
        cur.execute("UPDATE effect SET state = ?, updated_at = ? WHERE work_id = ? AND state = 'pending'",
                    (state, now, rec.snap["work_id"]))

    def _act(self, cur: sqlite3.Cursor, rec: Rec, decision: str, now: float) -> None:
        """Write what ``decision`` means for a stale record (inside the scan's transaction), in
        the steps of ``rules.recovery_steps``."""
        for step in rules.recovery_steps(self.spec, rec.snap["status"], decision):
            if step.step == "mark":
                assert step.receipt_state is not None
                self._mark_receipts(cur, rec, step.receipt_state, now)
            else:
                self._write(cur, rec, step.changes(self.spec, now, decision), now, step.event, step.src, step.dst)

    def recover(self, *, now: float) -> list[dict[str, Any]]:
        """Classify stale in-flight work by the recovery matrix and act on each decision."""
        self._check("recover", {"now": now})
        now = float(now)
        victims = []
        with self._tx as cur:
            for rec in self._stale(cur, now):
                decision, why = self._decide(cur, rec)
                self._act(cur, rec, decision, now)
                victims.append({"work_id": rec.snap["work_id"], "decision": decision, "reason": why})
        if victims and self.pointer is not None:
            self.write_pointer()
        return victims
