"""The lease profile's operations: renewing a lease and reading the active view."""

from __future__ import annotations

from typing import Any

from .base import Accept, Expectation, ModelBase, Refuse, Violation, _Bad


class LeaseOps(ModelBase):
    PROFILE = "lease"

    def _op_renew(self, a: dict[str, Any]) -> Expectation:
        wid, now = a["work_id"], a["now"]
        if wid not in self.items:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no work {wid!r}")
        it = self.items[wid]
        op = self.spec.operations["renew"]
        lp = self._lease_problem(it, a["token"], now)
        if it["status"] not in op.statuses:
            clause = "core.terminal.immutable" if self.spec.terminal(it["status"]) else "lease.renew.conditions"
            return Refuse(frozenset({"stale_lease", "invalid_transition"}), clause, f"{wid} is {it['status']} and holds no lease")
        if lp is not None:
            clause = "lease.renew.grace" if lp.startswith("lease lapsed") else "lease.renew.conditions"
            return Refuse(frozenset({"stale_lease"}), clause, f"{wid}: {lp}")
        lt = self.spec.lease_for(it["source_system"])
        in_grace = now > it["lease_expires_at"] + self.tol
        # a renewal refused within grace is lease.renew.grace's; the expiry it sets (now + ttl)
        # is lease.renew.extends's, or lease.per_source's where the source overrides the ttl
        ttl_clause = self._lease_blame(it, "lease.renew.extends")
        clause = "lease.renew.grace" if in_grace else ttl_clause

        def h(res: Any) -> list[Violation]:
            new = dict(it)
            new["lease_expires_at"] = now + lt.ttl
            self._begin(wid)
            self._append(wid, op.event_for(), None, None, now, new)
            clause = self._answer_blame("renew", "lease.renew.extends")
            self._commit(wid, new, {"lease_expires_at": ttl_clause}, clause)
            return self._check_returned(new, res, {"lease_expires_at": ttl_clause}, clause)

        return Accept(h, clause, f"the holder renews {wid}{' within grace' if in_grace else ''}")

    def _op_active(self, a: dict[str, Any]) -> Expectation:
        now = a["now"]
        sure, maybe = set(), set()
        for wid, it in self.items.items():
            if self.spec.statuses[it["status"]].leased and it["lease_expires_at"] is not None:
                limit = it["lease_expires_at"] + self.spec.lease_for(it["source_system"]).grace
                if self._ambiguous(now, limit):
                    maybe.add(wid)
                elif now <= limit:
                    sure.add(wid)

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, list) or not all(isinstance(x, str) for x in res):
                raise _Bad("lease.active_pointer", f"active must return a list of work ids, got {res!r:.80}")
            got = set(res)
            if not (sure <= got <= sure | maybe):
                return [Violation("lease.active_pointer", f"active view {sorted(got)} but the live leases are {sorted(sure)}")]
            return []

        return Accept(h, "lease.active_pointer", "reading the active view always works")
