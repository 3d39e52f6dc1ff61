"""The cancel profile's operation: cancel (the intent on running work, at once elsewhere)."""

from __future__ import annotations

from typing import Any

from ledgercheck.spec import rules

from .base import Accept, Expectation, ModelBase, Refuse, Violation


class CancelOps(ModelBase):
    PROFILE = "cancel"

    def _op_cancel(self, a: dict[str, Any]) -> Expectation:
        wid, now = a["work_id"], a["now"]
        if wid not in self.items:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no work {wid!r}")
        it = self.items[wid]
        op = self.spec.operations["cancel"]
        if it["status"] in op.intent_from:
            def intent(res: Any) -> list[Violation]:
                new = dict(it)
                self._begin(wid)
                if not it["cancel_requested"]:
                    new = rules.apply_effects(self.spec, "cancel", it, "intent", now=now)
                    self._append(wid, op.intent_event, None, None, now, new)
                self._commit(wid, new, {"status": "cancel.intent_first", "cancel_requested": "cancel.intent_first"}, "cancel.intent_first")
                return self._check_returned(new, res, {}, "cancel.intent_first")
            return Accept(intent, "cancel.intent_first", f"cancelling running work {wid} records the intent")
        targets = self.spec.targets("cancel", it["status"])
        if not targets:
            return self._refuse_transition(it, "cancelled", "cancel")
        dst = targets[0]
        clause = "waiting.cancel" if it["status"] in self._wait_kinds.values() else "cancel.immediate"

        def h(res: Any) -> list[Violation]:
            new = rules.apply_effects(self.spec, "cancel", it, now=now, args={"reason": a.get("reason")}, dst=dst)
            self._begin(wid)
            self._open_effects(wid, "cancel", it)
            self._append(wid, op.event_for(dst), it["status"], dst, now, new)
            self._commit(wid, new, {}, clause)
            return self._check_returned(new, res, {}, clause)

        return Accept(h, clause, f"{wid} is {it['status']} and is cancelled at once")
