"""The waiting profile's operations: parking leased work on an external event and resuming it."""

from __future__ import annotations

from typing import Any

from .base import _LIVE_LEASE_REFUSED, Accept, Expectation, ModelBase, Refuse, Violation, _Bad, _is_map


class WaitingOps(ModelBase):
    PROFILE = "waiting"

    def _op_set_waiting(self, a: dict[str, Any]) -> Expectation:
        dst = self._wait_kinds[a["kind"]]
        it, refuse = self._lease_guard("set_waiting", a, dst)
        if refuse:
            if refuse.clause == "lease.fencing" and it.get("status") in self._wait_kinds.values():
                refuse.clause = "waiting.releases_lease"
            return refuse
        wid, now = it["work_id"], a["now"]
        budget = a.get("timeout") or self.spec.waiting_timeout(a["kind"], it["source_system"])

        def h(res: Any) -> list[Violation]:
            new = dict(it)
            new.update(status=dst, waiting_kind=a["kind"], waiting_ref=a["ref"], waiting_deadline=now + budget)
            self._release(new)
            blame = {"waiting_deadline": "waiting.deadline", "owner": "waiting.releases_lease",
                     "lease_token": "waiting.releases_lease", "lease_expires_at": "waiting.releases_lease",
                     "waiting_kind": "waiting.requires_ref", "waiting_ref": "waiting.requires_ref"}
            self._begin(wid)
            self._append(wid, self.spec.operations["set_waiting"].event_for(dst), it["status"], dst, now, new)
            self._commit(wid, new, blame, "core.transition.allowed")
            return self._check_returned(new, res, blame, "core.transition.allowed")

        return Accept(h, "core.transition.allowed", f"the holder puts {wid} into {dst}", refused_as=_LIVE_LEASE_REFUSED)

    def _op_resume(self, a: dict[str, Any]) -> Expectation:
        wid, now = a["work_id"], a["now"]
        if wid not in self.items:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no work {wid!r}")
        it = self.items[wid]
        targets = self.spec.targets("resume", it["status"])
        if not targets:
            return self._refuse_transition(it, "running", "resume")
        dst = targets[0]

        def h(res: Any) -> list[Violation]:
            if not _is_map(res):
                raise _Bad("waiting.resume", f"expected a snapshot, got {res!r:.80}")
            tok, out = self._fresh_token(wid, res, "waiting.resume")
            lt = self.spec.lease_for(it["source_system"])
            new = dict(it)
            new.update(status=dst, owner=a["owner"], lease_token=tok, lease_version=it["lease_version"] + 1,
                       lease_expires_at=now + lt.ttl, waiting_kind=None, waiting_ref=None, waiting_deadline=None, started_at=now)
            blame = {"lease_version": "lease.version.monotonic", "lease_expires_at": self._lease_blame(it, "waiting.resume"),
                     "started_at": "retry.execution_timeout"}
            self._begin(wid)
            self._add_token(wid, tok)
            self._append(wid, self.spec.operations["resume"].event_for(dst), it["status"], dst, now, new)
            clause = self._answer_blame("resume", "waiting.resume")
            self._commit(wid, new, blame, clause)
            return out + self._compare_work(new, res, blame, clause)

        return Accept(h, "waiting.resume", f"{wid} is waiting and may be resumed")
