"""The recovery scan of the reference ledger (a mixin of ``Ledger``).

Stale in-flight work is found (a leased record past expiry + grace, or a record already marked
timeout for a lapsed lease and not yet classified), its effect journal is read, and the Spec's
scanner decides: a pending receipt by its step class, otherwise completed receipts mean resume
and none mean retry; a requeueing decision for work whose attempts are used up becomes
quarantine.  Each decision is acted on in the same transaction: the lease is released (timeout
event), open receipts are marked with the decision's receipt state, and the record is requeued
or flagged quarantined.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

from ledgercheck.spec import Spec

from .rows import SELECT_WORK, Rec, decode, load
from .schema import recover_filter


class RecoveryOps:
    # provided by Ledger
    spec: Spec
    _tx: Any
    leased: frozenset[str]
    targets: dict[str, dict[str, list[str]]]
    pointer: Any
    _check: Callable[[str, Mapping[str, Any]], None]
    _write: Callable[..., dict[str, Any]]
    _requeue_changes: Callable[[str, str | None], dict[str, Any]]
    write_pointer: Callable[[], None]

    def _stale(self, cur: sqlite3.Cursor, now: float) -> list[Rec]:
        """Records a recovery scan at ``now`` must classify, in creation order."""
        found: list[Rec] = []
        for r in cur.execute(SELECT_WORK + " INDEXED BY work_lease WHERE lease_token IS NOT NULL").fetchall():
            rec = load(r)
            s = rec.snap
            if s["status"] in self.leased and now > s["lease_expires_at"] + self.spec.lease_for(s["source_system"]).grace:
                found.append(rec)
        marked = self.spec.operations["expire"].event_for("timeout")
        for r in cur.execute(SELECT_WORK + f" WHERE {recover_filter(self.spec)}").fetchall():
            rec = load(r)
            # only the monitor's own timeout (its event is the record's last), not a holder's
            # close-out that happens to give the same reason
            last = cur.execute("SELECT type FROM work_event WHERE work_id = ? ORDER BY seq DESC LIMIT 1",
                               (rec.snap["work_id"],)).fetchone()
            if last is not None and last[0] == marked:
                found.append(rec)
        recover = self.targets.get("recover", {})
        return sorted((rec for rec in found if recover.get(rec.snap["status"])), key=lambda rec: rec.seq)

    def _decide(self, cur: sqlite3.Cursor, rec: Rec) -> tuple[str, str]:
        """The scanner's decision for a stale record, and why."""
        s = rec.snap
        recs = cur.execute("SELECT state, step_class FROM effect WHERE work_id = ? ORDER BY seq", (s["work_id"],)).fetchall()
        open_ = [(state, cls) for state, cls in recs if state != "completed"]
        decision = self.spec.scanner_decision(open_, any(state == "completed" for state, _ in recs))
        why = "journal: " + (", ".join(f"{st} {cls}" for st, cls in open_) or ("completed receipts" if recs else "empty"))
        policy = self.spec.retry_policy_for(s["source_system"], decode(rec.rp) if rec.rp else None)
        if self.spec.decisions[decision].get("requeue") and s["attempt"] >= policy.max_attempts:
            decision, why = "quarantine", f"attempts exhausted ({s['attempt']}/{policy.max_attempts})"
        return decision, why

    def recover(self, *, now: float) -> list[dict[str, Any]]:
        """Classify stale in-flight work by the recovery matrix and act on each decision."""
        self._check("recover", {"now": now})
        now = float(now)
        op = self.spec.operations["recover"]
        hb = self.spec.timeout_reasons["heartbeat"]
        recover = self.targets["recover"] if "recover" in self.targets else {}
        victims = []
        with self._tx as cur:
            for rec in self._stale(cur, now):
                decision, why = self._decide(cur, rec)
                dec = self.spec.decisions[decision]
                src = rec.snap["status"]
                if src in self.leased:
                    mid = recover[src][0]
                    self._write(cur, rec, {"status": mid, "status_reason": hb, "finished_at": now, "owner": None,
                                           "lease_token": None, "lease_expires_at": None},
                                now, op.event_for(mid), src, mid)
                    src = mid
                if dec.get("receipt_state"):
                    cur.execute("UPDATE effect SET state = ?, updated_at = ? WHERE work_id = ? AND state = 'pending'",
                                (dec["receipt_state"], now, rec.snap["work_id"]))
                if dec.get("requeue") and recover.get(src):
                    dst = recover[src][0]
                    self._write(cur, rec, self._requeue_changes(dst, f"recovered: {decision}"), now, op.event_for(dst), src, dst)
                elif decision == "quarantine":
                    self._write(cur, rec, {"quarantined": True}, now, op.intent_event, None, None)
                victims.append({"work_id": rec.snap["work_id"], "decision": decision, "reason": why})
        if victims and self.pointer is not None:
            self.write_pointer()
        return victims
