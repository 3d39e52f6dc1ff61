"""The recovery profile's operation: the crash-recovery scan and the receipts it marks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ledgercheck.spec import rules

from .base import Accept, Expectation, ModelBase, Violation, _Bad


class RecoveryOps(ModelBase):
    PROFILE = "recovery"

    def _journal(self, wid: str) -> list[tuple[str, str]]:
        """(state, step_class) of an item's receipts, in journal order."""
        return [(r["state"], r["step_class"]) for r in (self.receipts[k] for k in self.receipt_order) if r["work_id"] == wid]

    def _decision(self, wid: str) -> rules.Decision:
        return rules.recovery_decision(self.spec, self.items[wid], self._journal(wid), self.policies.get(wid))

    def recovery_plan(self, now: float) -> tuple[dict[str, rules.Decision], set[str]]:
        """Victims of a recovery scan at ``now``: id -> decision, and boundary items."""
        sure: dict[str, rules.Decision] = {}
        maybe: set[str] = set()
        for wid, it in self.items.items():
            lapse = rules.lease_lapse(self.spec, it)
            if lapse is not None and self._ambiguous(now, lapse):
                maybe.add(wid)
                continue
            last = (self.events.get(wid) or [{}])[-1].get("type")
            if rules.stale_for_recovery(self.spec, it, now, last):
                sure[wid] = self._decision(wid)
        return sure, maybe

    def _op_recover(self, a: dict[str, Any]) -> Expectation:
        now = a["now"]
        sure, maybe = self.recovery_plan(now)
        spec = self.spec

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, list) or not all(isinstance(v, Mapping) for v in res):
                raise _Bad("recovery.scan", f"recover must return a list of victims, got {res!r:.80}")
            out: list[Violation] = []
            got = {v.get("work_id"): v for v in res}
            for wid in got:
                if wid in sure or wid in maybe:
                    continue
                it = self.items.get(wid)
                if it is not None and it["status"] in self._wait_kinds.values():
                    out.append(Violation("recovery.waiting_untouched", f"recovery took waiting work {wid!r}"))
                else:
                    out.append(Violation("recovery.scan", f"recovery took {wid!r}, which is not stale ({it['status'] if it else 'unknown'})"))
            for wid, d in sure.items():
                if wid not in got:
                    out.append(Violation("recovery.scan", f"stale {wid!r} was not reported ({d.why})"))
            for wid, v in got.items():
                if wid not in self.items or (wid not in sure and wid not in maybe):
                    continue
                it = self.items[wid]
                d = sure[wid] if wid in sure else self._decision(wid)
                decision = d.name
                if v.get("decision") != decision:
                    clause = "recovery.attempts_exhausted" if d.by_attempts else "recovery.matrix"
                    out.append(Violation(clause, f"{wid}: decision {v.get('decision')!r}, the matrix says {decision!r} "
                                                 f"({d.why if wid in sure else 'boundary'})"))
                self._begin(wid)
                cur = dict(it)
                for step in rules.recovery_steps(spec, cur["status"], decision):
                    if step.step == "mark":
                        assert step.receipt_state is not None
                        self._mark_receipts(wid, decision, step.receipt_state)
                        continue
                    new = {**cur, **step.changes(spec, now, decision)}
                    self._append(wid, step.event, step.src, step.dst, now, new)
                    cur = new
                self._commit(wid, cur, {"quarantined": "recovery.quarantine.visible", "status": "recovery.matrix"}, "recovery.scan")
            return out

        return Accept(h, "recovery.scan", "the scan always answers")

    def _mark_receipts(self, wid: str, decision: str, rstate: str) -> None:
        """The item's receipts after a scan's decision marks them ``rstate``: pending ones take
        it; those the contract lets stay as they were are unresolved."""
        spec = self.spec
        for k in self.receipt_order:
            r = self.receipts[k]
            if r["work_id"] == wid and r["state"] == "pending":
                r["state"] = rstate
                r["marked_by_recovery"] = True
                if spec.receipt_decision("pending", r["step_class"]) != decision:
                    # a receipt that alone would not have called for this decision
                    # (a pure step beside a reconciled one) may also stay pending
                    r["may_be"] = "pending"
                    self.unresolved.add(wid)
            elif (r["work_id"] == wid and r["state"] not in ("completed", rstate)
                  and (r["state"], rstate) in spec.receipt_transitions):
                # an earlier scan's marking (unknown): the contract lets this scan
                # move it on to the decision's state or leave it
                r["may_be"] = rstate
                self.unresolved.add(wid)

    def check_receipts(self, work_id: str, actual: Any) -> list[Violation]:
        """After recovery the journal's receipts must carry the decision's marking."""
        want = {k: r for k, r in self.receipts.items() if r["work_id"] == work_id}
        if not isinstance(actual, list):
            return self.keep([Violation("recovery.receipt_marking", f"{work_id}: journal listing is not a list")])
        out = []
        for r in actual:
            if not isinstance(r, Mapping) or r.get("key") not in want:
                continue
            exp = want[r["key"]]
            if exp.get("may_be") and r.get("state") in (exp["may_be"], exp["state"]):
                self._settled_receipt(exp)
                exp["state"] = r.get("state")
            elif r.get("state") != exp["state"]:
                out.append(Violation("recovery.receipt_marking", f"receipt {r['key'][:12]} is {r.get('state')!r}, expected {exp['state']!r}"))
        return self.keep(out)
