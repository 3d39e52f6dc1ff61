"""The idempotency profile's operations: the effect journal's receipts."""

from __future__ import annotations

import copy
from typing import Any

from .base import Accept, Expectation, ModelBase, Refuse, Violation, _Bad, _is_map, same_json

# what the model keeps of a receipt (and compares with the implementation's)
RECEIPT_FIELDS = ("key", "work_id", "step_id", "tool", "step_class", "input_hash", "state", "result")


class IdempotencyOps(ModelBase):
    PROFILE = "idempotency"

    def _work_lease_check(self, wid: str, token: Any, now: float, clause: str) -> Refuse | None:
        if token is None:
            return None
        lp = self._lease_problem(self.items[wid], token, now)
        if lp is not None:
            return Refuse(frozenset({"stale_lease"}), clause, f"{wid}: {lp}")
        return None

    def _op_effect_begin(self, a: dict[str, Any]) -> Expectation:
        wid, now = a["work_id"], a["now"]
        if wid not in self.items:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no work {wid!r}")
        key = self.spec.effect_key(work_id=wid, step_id=a["step_id"], tool=a["tool"])
        ih = self.spec.input_hash(a["input"])
        existing = self.receipts.get(key)
        fenced = self._work_lease_check(wid, a.get("token"), now, "idem.fenced")
        if existing is not None and existing["input_hash"] != ih:
            codes = {"idempotency_conflict"} | ({"stale_lease"} if fenced else set())
            return Refuse(frozenset(codes), "idem.conflict", f"key {key[:12]} was begun with another input")
        if fenced:
            return fenced

        def h(res: Any) -> list[Violation]:
            if not _is_map(res) or not _is_map(res.get("receipt")):
                raise _Bad("idem.begin", f"expected {{receipt, created}}, got {res!r:.80}")
            out = []
            if existing is not None:
                if res.get("created") is not False:
                    out.append(Violation("idem.begin", f"beginning key {key[:12]} again must report created=false"))
                return out + self._compare_receipt(existing, res["receipt"], "idem.begin")
            if res.get("created") is not True:
                out.append(Violation("idem.begin", f"beginning key {key[:12]} the first time must report created=true"))
            rec = dict(zip(RECEIPT_FIELDS, (key, wid, a["step_id"], a["tool"], a["step_class"], ih, "pending", None), strict=True))
            self.receipts[key] = rec
            self.receipt_order.append(key)
            return out + self._compare_receipt(rec, res["receipt"], "idem.begin")

        return Accept(h, "idem.begin", "beginning an effect is always accepted")

    def adopt_receipt(self, key: str, receipt: Any) -> None:
        """Take an implementation's receipt under ``key`` as the model's (``None``: it has none),
        as :meth:`adopt` does for an item after an indefinite error."""
        old = self.receipts.pop(key, None)
        if receipt is None:
            if key in self.receipt_order:
                self.receipt_order.remove(key)
        else:
            if key not in self.receipt_order:
                self.receipt_order.append(key)
            self.receipts[key] = {f: copy.deepcopy(receipt.get(f)) for f in RECEIPT_FIELDS} | {"key": key}
        for wid in {r["work_id"] for r in (old, self.receipts.get(key)) if r is not None}:
            if not any(r.get("may_be") for r in self.receipts.values() if r["work_id"] == wid):
                self.unresolved.discard(wid)

    def _settled_receipt(self, rec: dict[str, Any]) -> None:
        """A later operation set the receipt's state: recovery's marking no longer speaks for it."""
        rec.pop("marked_by_recovery", None)
        if rec.pop("may_be", None) and not any(r.get("may_be") for r in self.receipts.values()
                                                            if r["work_id"] == rec["work_id"]):
            self.unresolved.discard(rec["work_id"])

    def _compare_receipt(self, exp: dict[str, Any], got: Any, clause: str) -> list[Violation]:
        if not _is_map(got):
            return [Violation(clause, f"expected a receipt, got {got!r:.80}")]
        out = []
        for f in ("key", "input_hash"):
            if got.get(f) != exp[f]:
                out.append(Violation("idem.key.derivation", f"receipt {f} is {got.get(f)!r}, the contract's derivation gives {exp[f]!r}"))
        if exp.get("may_be") and got.get("state") in (exp["may_be"], exp["state"]):
            exp["state"] = got["state"]  # the implementation chose; from now on it is known
            del exp["may_be"]
            if not any(r.get("may_be") for r in self.receipts.values() if r["work_id"] == exp["work_id"]):
                self.unresolved.discard(exp["work_id"])
        for f in ("work_id", "step_id", "tool", "step_class", "state", "result"):
            if not same_json(got.get(f), exp[f]):
                c = clause
                if f == "result" and exp["state"] == "completed":
                    # the stored result is idem.record's; once a second record was tried, a
                    # changed result is that record overwriting the first
                    c = "idem.duplicate_returns_stored" if clause == "idem.duplicate_returns_stored" or exp.get("recorded_again") else "idem.record"
                if f == "state" and exp.get("marked_by_recovery"):
                    c = "recovery.receipt_marking"
                out.append(Violation(c, f"receipt {exp['key'][:12]} has {f} {got.get(f)!r}, expected {exp[f]!r}"))
        return out

    def _op_effect_lookup(self, a: dict[str, Any]) -> Expectation:
        rec = self.receipts.get(a["key"])

        def h(res: Any) -> list[Violation]:
            if rec is None:
                return [] if res is None else [Violation("idem.lookup_miss", f"lookup of unknown key {a['key'][:12]} returned {res!r:.60}")]
            if res is None:
                return [Violation("idem.retention" if rec["state"] == "completed" else "idem.begin", f"receipt {a['key'][:12]} ({rec['state']}) is gone")]
            return self._compare_receipt(rec, res, "idem.record")

        return Accept(h, "idem.lookup_miss", "lookups always answer")

    def _op_effect_record(self, a: dict[str, Any]) -> Expectation:
        key, now = a["key"], a["now"]
        rec = self.receipts.get(key)
        if rec is None:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no receipt {key[:12]}")
        fenced = self._work_lease_check(rec["work_id"], a.get("token"), now, "idem.fenced")
        if a["input_hash"] != rec["input_hash"]:
            # both refusals apply when the token is not live either; the contract orders neither
            codes = {"idempotency_conflict"} | ({"stale_lease"} if fenced else set())
            return Refuse(frozenset(codes), "idem.conflict", f"receipt {key[:12]} was begun with another input")
        if rec["state"] == "completed":
            def dup(res: Any) -> list[Violation]:
                rec["recorded_again"] = True
                return self._compare_receipt(rec, res, "idem.duplicate_returns_stored")
            return Accept(dup, "idem.duplicate_returns_stored", "recording again returns the stored result",
                          also_refuse=frozenset({"stale_lease"}) if fenced else frozenset())
        if fenced:
            return fenced
        if (rec["state"], "completed") not in self.spec.receipt_transitions:
            return Refuse(frozenset({"invalid_transition"}), "idem.receipt_states", f"receipt {key[:12]} is {rec['state']}")

        def h(res: Any) -> list[Violation]:
            rec.update(state="completed", result=copy.deepcopy(a["result"]))
            self._settled_receipt(rec)
            return self._compare_receipt(rec, res, "idem.record")

        return Accept(h, "idem.record", f"receipt {key[:12]} is {rec['state']} and can be completed")

    def _op_effect_mark(self, a: dict[str, Any]) -> Expectation:
        key = a["key"]
        rec = self.receipts.get(key)
        if rec is None:
            codes = {"not_found"} | ({"invalid_argument"} if a["state"] == "completed" else set())
            return Refuse(frozenset(codes), "core.not_found", f"no receipt {key[:12]}")
        if (rec["state"], a["state"]) not in self.spec.receipt_transitions:
            # an implementation that completes only through effect_record may say so instead
            codes = {"invalid_transition"} | ({"invalid_argument"} if a["state"] == "completed" else set())
            return Refuse(frozenset(codes), "idem.receipt_states", f"receipt {key[:12]} cannot go {rec['state']} -> {a['state']}")

        def h(res: Any) -> list[Violation]:
            rec["state"] = a["state"]
            self._settled_receipt(rec)
            return self._compare_receipt(rec, res, "idem.receipt_states")

        # completing by mark (no result) is a transition the table allows; an implementation
        # may also insist on effect_record, which carries the result
        also = frozenset({"invalid_argument", "invalid_transition"}) if a["state"] == "completed" else frozenset()
        return Accept(h, "idem.receipt_states", f"{rec['state']} -> {a['state']} is a receipt transition", also_refuse=also)

    def _op_effect_list(self, a: dict[str, Any]) -> Expectation:
        wid = a["work_id"]
        if wid not in self.items:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no work {wid!r}")
        want = [self.receipts[k] for k in self.receipt_order if self.receipts[k]["work_id"] == wid]

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, list):
                raise _Bad("idem.begin", f"effect_list must return a list, got {res!r:.80}")
            got = {r.get("key"): r for r in res if _is_map(r)}
            out = []
            if set(got) != {r["key"] for r in want} or len(got) != len(res):
                out.append(Violation("idem.begin", f"{wid}: journal holds {sorted(k[:12] for k in got if isinstance(k, str))}, expected {sorted(r['key'][:12] for r in want)}"))
            for r in want:
                if r["key"] in got:
                    out += self._compare_receipt(r, got[r["key"]], "idem.record")
            return out

        return Accept(h, "idem.begin", "the journal can always be listed")
