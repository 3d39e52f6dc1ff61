"""The retry profile's operations: a failed attempt (scheduled retry or final failure) and the promotion monitor."""

from __future__ import annotations

from typing import Any

from .base import (
    _LIVE_LEASE_REFUSED,
    ANY,
    Accept,
    Expectation,
    ModelBase,
    Refuse,
    Violation,
    _Bad,
    _is_map,
    _is_num,
    _moves,
)


class RetryOps(ModelBase):
    PROFILE = "retry"

    def _op_fail(self, a: dict[str, Any]) -> Expectation:
        wid, now = a["work_id"], a["now"]
        if wid not in self.items:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no work {wid!r}")
        it = self.items[wid]
        targets = self.spec.targets("fail", it["status"])
        lp = self._lease_problem(it, a["token"], now)
        if not targets:
            return self._refuse_transition(it, "failed", "fail", lp)
        if lp is not None:
            return Refuse(frozenset({"stale_lease"}), "lease.fencing", f"{wid}: {lp}")
        policy = self.spec.retry_policy_for(it["source_system"], self.policies.get(wid))
        retryable = self.spec.error_classes[a["error_class"]]
        op = self.spec.operations["fail"]
        retry_to = next((t for t in targets if not self.spec.terminal(t)), None)
        fail_to = next((t for t in targets if self.spec.terminal(t)), None)
        overridden = bool(self.policies.get(wid))
        if retryable and it["attempt"] < policy.max_attempts and retry_to:
            dst, status_clause = retry_to, "retry.schedule"
        else:
            dst = fail_to
            status_clause = "retry.non_retryable" if not retryable else "retry.exhausted"
        lo, hi = self.spec.backoff_range(policy, it["attempt"])

        def h(res: Any) -> list[Violation]:
            if not _is_map(res):
                raise _Bad(status_clause, f"expected a snapshot, got {res!r:.80}")
            out = []
            new = dict(it)
            new.update(status=dst, error_class=a["error_class"])
            self._release(new)
            blame = {"status": status_clause}
            if dst == retry_to:
                nra = res.get("next_retry_at")
                bounds_clause = "retry.policy_override" if overridden else "retry.bounds"
                if not _is_num(nra):
                    out.append(Violation(bounds_clause, f"{wid}: retry_scheduled needs next_retry_at, got {nra!r}"))
                    nra = now + hi
                elif nra > now + policy.max_backoff + self.tol:
                    out.append(Violation("retry.cap", f"{wid}: retry after attempt {it['attempt']} is due in {nra - now:g}s, above max_backoff {policy.max_backoff:g}s"))
                elif not (now + lo - self.tol <= nra <= now + hi + self.tol):
                    out.append(Violation(bounds_clause, f"{wid}: retry after attempt {it['attempt']} is due in {nra - now:g}s, outside [{lo:g}, {hi:g}]s ({policy.jitter} jitter)"))
                new["next_retry_at"] = nra
                blame["next_retry_at"] = bounds_clause
            else:
                new.update(finished_at=now, result=None)
            self._begin(wid)
            if dst != retry_to:
                self._open(wid, "result", ANY)  # the contract does not say what a failed record's result holds
            self._append(wid, op.event_for(dst), it["status"], dst, now, new)
            self._commit(wid, new, blame, status_clause)
            return out + self._compare_work(new, res, blame, status_clause)

        return Accept(h, status_clause, f"{wid} fails with {a['error_class']} at attempt {it['attempt']} -> {dst}",
                      refused_as=_LIVE_LEASE_REFUSED)

    def _op_promote_due(self, a: dict[str, Any]) -> Expectation:
        now = a["now"]
        sure, maybe = set(), set()
        for wid, it in self.items.items():
            if self.spec.targets("promote_due", it["status"]) and it["next_retry_at"] is not None:
                if self._ambiguous(now, it["next_retry_at"]):
                    maybe.add(wid)
                elif now >= it["next_retry_at"]:
                    sure.add(wid)
        op = self.spec.operations["promote_due"]

        def h(res: Any) -> list[Violation]:
            out = []
            moves = _moves(res, "retry.promote")
            got = {m["work_id"] for m in moves}
            early = got - sure - maybe
            late = sure - got
            if early:
                out.append(Violation("retry.promote", f"promoted {sorted(early)} before next_retry_at (now {now})"))
            if late:
                out.append(Violation("retry.promote", f"did not promote {sorted(late)}, due at or before {now}"))
            by_id = {m["work_id"]: m for m in moves}
            for wid in got & (sure | maybe):
                it = self.items[wid]
                dst = self.spec.targets("promote_due", it["status"])[0]
                m = by_id[wid]
                if m.get("from_status") != it["status"] or m.get("to_status") != dst:
                    out.append(Violation("retry.promote", f"{wid}: move reported as {m.get('from_status')} -> {m.get('to_status')}, "
                                                          f"it moved {it['status']} -> {dst}"))
                new = dict(it)
                new.update(status=dst, next_retry_at=None)
                self._begin(wid)
                self._open(wid, "next_retry_at", it["next_retry_at"])  # the contract does not say it is cleared
                self._append(wid, op.event_for(dst), it["status"], dst, now, new)
                self._commit(wid, new, {}, "retry.promote")
            return out

        return Accept(h, "retry.promote", "the monitor always answers")
