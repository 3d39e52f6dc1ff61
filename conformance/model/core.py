"""The core profile's operations: create, get, list, claim, close-out, requeue and the expiry monitor."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ledgercheck.spec import rules

from .base import (
    _LIVE_LEASE_REFUSED,
    Accept,
    Expectation,
    ModelBase,
    Refuse,
    Violation,
    _Bad,
    _is_map,
    _moves,
)


class CoreOps(ModelBase):
    PROFILE = "core"

    def _new_item(self, wid: str, a: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "work_id": wid,
            "source_system": a["source_system"],
            "source_id": a["source_id"],
            "source_run_id": a.get("source_run_id") or None,  # an empty run id is none (core.scheduler.run_identity)
            "status": self.spec.initial_status,
            "status_reason": None,
            "priority": a.get("priority") if a.get("priority") is not None else self.spec.priority_default,
            "attempt": 0,
            "owner": None,
            "lease_token": None,
            "lease_version": 0,
            "lease_expires_at": None,
            "waiting_kind": None,
            "waiting_ref": None,
            "waiting_deadline": None,
            "next_retry_at": None,
            "error_class": None,
            "cancel_requested": False,
            "quarantined": False,
            "result": None,
            "created_at": a["now"],
            "started_at": None,
            "finished_at": None,
        }

    def _op_create(self, a: dict[str, Any]) -> Expectation:
        key = (a["source_system"], a["source_id"], a.get("source_run_id") or None)
        existing = self.identity.get(key)
        if existing is not None:
            def same(res: Any) -> list[Violation]:
                out = []
                if not _is_map(res) or not _is_map(res.get("work")):
                    raise _Bad("core.create.unique_unit", f"expected {{work, created}}, got {res!r:.80}")
                if res.get("created") is not False:
                    # with an empty run id: the unit without one (the run identity clause says so)
                    clause = "core.scheduler.run_identity" if a.get("source_run_id") == "" else "core.create.unique_unit"
                    out.append(Violation(clause, f"a second create for {key} must report created=false"))
                if res["work"].get("work_id") != existing:
                    out.append(Violation("core.create.unique_unit", f"a second create for {key} returned {res['work'].get('work_id')!r}, not the existing {existing!r}"))
                else:
                    out += self._compare_work(self.items[existing], res["work"], {}, "core.create.unique_unit")
                self._begin(existing)
                return out
            return Accept(same, "core.create.unique_unit", "the unit already has a record; create must return it")

        # another run of the same schedule: merging them breaks the scheduler's run identity;
        # for any other source the triple is the unit all the same (core.create.unique_unit)
        sibling = key[0] in self.spec.run_id_required_for and any(k[:2] == key[:2] for k in self.identity)

        def new(res: Any) -> list[Violation]:
            out = []
            if not _is_map(res) or not _is_map(res.get("work")):
                raise _Bad("core.create.initial", f"expected {{work, created}}, got {res!r:.80}")
            w = res["work"]
            wid = w.get("work_id")
            blame = "core.scheduler.run_identity" if sibling else "core.create.unique_unit"
            if (wid in self.items or res.get("created") is not True) and any(rules.identity_folded(k, key) for k in self.identity):
                # taken for a unit whose ids differ only by case, whitespace or normalization form
                blame = rules.judging_clause(self.spec, "create.identity_folded", blame)
            if not isinstance(wid, str) or not wid:
                raise _Bad("core.create.initial", f"work_id must be a non-empty string, got {wid!r}")
            if wid in self.items:
                raise _Bad(blame, f"new unit {key} got the id {wid!r} of an existing record")
            if res.get("created") is not True:
                out.append(Violation(blame, f"create for the new unit {key} must report created=true"))
            item = self._new_item(wid, a)
            self._begin(wid)
            self._events_before[wid] = 0
            self.order[wid] = len(self.order)
            self.identity[key] = wid
            self.policies[wid] = a.get("retry_policy")
            self._new_tokens(wid)
            self.events[wid] = []
            self._append(wid, "work_created", None, item["status"], a["now"], item)
            self._commit(wid, item, {}, self._answer_blame("create", "core.create.initial"))
            # a field the caller gave is recorded by the rule of that argument (its own clause in the
            # contract, as source_run_id's run identity); the rest, defaults, by the initial record's
            given = {f: arg.blame for f, arg in self.spec.operations["create"].args.items()
                     if arg.blame and f in self.spec.work_fields and a.get(f) is not None}
            out += self._compare_work(item, w, given, self._answer_blame("create", "core.create.initial"))
            return out

        return Accept(new, "core.create.initial", "a new unit of work must be recorded")

    def _op_get(self, a: dict[str, Any]) -> Expectation:
        wid = a["work_id"]
        if wid not in self.items:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no work {wid!r}")
        return Accept(lambda res: self.check_work(res, wid) if _is_map(res) else [Violation("core.list.complete", f"get returned {res!r:.60}")],
                      "core.not_found", "the record exists")

    def _op_list(self, a: dict[str, Any]) -> Expectation:
        want = [w for w, it in self.items.items()
                if (a.get("status") is None or it["status"] == a["status"])
                and (a.get("quarantined") is None or it["quarantined"] == a["quarantined"])]

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, list) or not all(map(_is_map, res)):
                raise _Bad("core.list.complete", f"list must return a list of snapshots, got {res!r:.80}")
            got = [x.get("work_id") for x in res]
            out = []
            if sorted(map(str, got)) != sorted(want) or len(got) != len(set(got)):
                missing = set(want) - set(got)
                extra = set(got) - set(want)
                clause = next((self._stray(x, "core.list.complete") for x in res if x.get("work_id") in extra), "core.list.complete")
                out.append(Violation(clause, f"list({_fmt_filter(a)}) missing {sorted(missing)} extra {sorted(map(str, extra))}"))
            for x in res:
                if x.get("work_id") in self.items:
                    out += self.check_work(x)
            return out

        return Accept(h, "core.list.complete", "listing always works")

    def _op_claim(self, a: dict[str, Any]) -> Expectation:
        now = a["now"]
        if a.get("work_id") is not None:
            wid = a["work_id"]
            if wid not in self.items:
                return Refuse(frozenset({"not_found"}), "core.not_found", f"no work {wid!r}")
            it = self.items[wid]
            if not self.spec.targets("claim", it["status"]):
                blame_dst = next(iter(t.dst for t in self.spec.edges_of("claim")), None)
                if it["status"] == "running" or self.spec.statuses[it["status"]].leased:
                    return Refuse(frozenset({"invalid_transition", "stale_lease"}), "lease.single_holder", f"{wid} is already leased")
                return self._refuse_transition(it, blame_dst, "claim")
            candidates = [wid]
        else:
            candidates = [w for w, it in self.items.items() if self.spec.targets("claim", it["status"])]

        def h(res: Any) -> list[Violation]:
            if res is None:
                if candidates:
                    return [Violation("core.transition.allowed", f"claim returned nothing while {sorted(candidates)} could be claimed")]
                return []
            if not _is_map(res):
                raise _Bad("core.transition.allowed", f"claim must return a snapshot or null, got {res!r:.80}")
            wid = res.get("work_id")
            if not candidates:
                clause = "core.claim.empty"
                if wid in self.items and self.spec.statuses[self.items[wid]["status"]].leased:
                    clause = "lease.single_holder"
                elif wid not in self.items:
                    clause = self._stray(res, clause)
                return [Violation(clause, f"claim returned {wid!r} although nothing could be claimed")]
            if wid not in candidates:
                if wid in self.items:
                    it = self.items[wid]
                    clause = "lease.single_holder" if self.spec.statuses[it["status"]].leased else self._forbidden_blame(it["status"], "running", "claim")
                    return [Violation(clause, f"claim took {wid!r}, which is {it['status']}")]
                return [Violation(self._stray(res, "core.transition.allowed"), f"claim returned unknown work {wid!r}")]
            it = self.items[wid]
            dst = self.spec.targets("claim", it["status"])[0]
            tok, out = self._fresh_token(wid, res, "lease.acquire")
            new = dict(it)
            lt = self.spec.lease_for(it["source_system"])
            new.update(status=dst, owner=a["owner"], lease_token=tok, lease_version=it["lease_version"] + 1,
                       lease_expires_at=now + lt.ttl, attempt=it["attempt"] + 1, started_at=now)
            blame = {"owner": "lease.acquire", "lease_token": "lease.acquire", "lease_version": "lease.version.monotonic",
                     "lease_expires_at": self._lease_blame(it, "lease.acquire"),
                     # attempts count toward retry limits, stints toward the execution budget
                     "attempt": "retry.exhausted", "started_at": "retry.execution_timeout"}
            self._begin(wid)
            self._add_token(wid, tok)
            self._append(wid, self.spec.operations["claim"].event_for(dst), it["status"], dst, now, new)
            self._commit(wid, new, blame, "core.transition.allowed")
            return out + self._compare_work(new, res, blame, "core.transition.allowed")

        return Accept(h, "core.transition.allowed", "claim always answers (null when nothing is claimable)")

    def _op_close_out(self, a: dict[str, Any]) -> Expectation:
        dst = a["status"]
        wid0 = a["work_id"]
        if wid0 in self.items:
            it0 = self.items[wid0]
            edge = self.spec.edge(it0["status"], dst)
            if edge is not None and "close_out" in edge.ops and not rules.guard_holds(self.spec, it0, dst):
                codes = {"invalid_transition"} | ({"stale_lease"} if self._lease_problem(it0, a.get("token"), a["now"]) else set())
                # without the cancel profile no request can be recorded: the guarded move is one
                # the table does not allow (core.transition.forbidden)
                clause = "cancel.intent_first" if self.claimed("cancel.intent_first") else "core.transition.forbidden"
                return Refuse(frozenset(codes), clause, f"{wid0}: close-out as {dst} needs {edge.guard} first")
        it, refuse = self._lease_guard("close_out", a, dst)
        if refuse:
            return refuse
        wid, now = it["work_id"], a["now"]

        def h(res: Any) -> list[Violation]:
            new = rules.apply_effects(self.spec, "close_out", it, now=now,
                                      args={"result": copy.deepcopy(a.get("result")), "reason": a.get("reason")}, dst=dst)
            default = "core.close_out.explicit" if dst == "done" else "core.transition.allowed"
            blame = {"owner": "lease.fencing", "lease_token": "lease.fencing", "lease_expires_at": "lease.fencing"}
            self._begin(wid)
            self._open_effects(wid, "close_out", it)
            self._append(wid, self.spec.operations["close_out"].event_for(dst), it["status"], dst, now, new)
            self._commit(wid, new, blame, default)
            return self._check_returned(new, res, blame, default)

        return Accept(h, "core.transition.allowed", f"the holder closes {wid} out as {dst}", refused_as=_LIVE_LEASE_REFUSED)

    def _op_requeue(self, a: dict[str, Any]) -> Expectation:
        wid, now = a["work_id"], a["now"]
        if wid not in self.items:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no work {wid!r}")
        it = self.items[wid]
        targets = self.spec.targets("requeue", it["status"])
        if not targets:
            return Refuse(frozenset({"invalid_transition"}), "core.requeue.terminal", f"{wid} is {it['status']}, not terminal")
        dst = targets[0]

        def h(res: Any) -> list[Violation]:
            new = rules.apply_effects(self.spec, "requeue", it, now=now, args={"reason": a.get("reason")}, dst=dst)
            self._begin(wid)
            self._open_effects(wid, "requeue", it)
            self._append(wid, self.spec.operations["requeue"].event_for(dst), it["status"], dst, now, new)
            blame = {"quarantined": "recovery.quarantine.visible"}
            clause = self._answer_blame("requeue", "core.requeue.terminal")
            self._commit(wid, new, blame, clause)
            return self._check_returned(new, res, blame, clause)

        return Accept(h, "core.requeue.terminal", f"{wid} is terminal and may be requeued")

    def _expiries(self, now: float) -> tuple[dict[str, tuple[str, set[str]]], set[str]]:
        """Items the monitor must mark timeout (id -> (from status, acceptable reasons)) and
        items at a boundary where either answer is right."""
        sure: dict[str, tuple[str, set[str]]] = {}
        maybe: set[str] = set()
        reasons = self.spec.timeout_reasons
        exec_t = self.spec.phase_timeout("execution") if self.spec.phases.get("execution", {}).get("action") == "timeout" else None
        for wid, it in self.items.items():
            st = self.spec.statuses[it["status"]]
            if not self.spec.targets("expire", it["status"]):
                continue
            why: set[str] = set()
            edge_reasons: set[str] = set()
            if st.leased and it["lease_expires_at"] is not None:
                limit = it["lease_expires_at"] + self.spec.lease_for(it["source_system"]).grace
                if self._ambiguous(now, limit):
                    maybe.add(wid)
                elif now > limit:
                    why.add(reasons["heartbeat"])
                if exec_t is not None and it["started_at"] is not None:
                    elimit = it["started_at"] + exec_t
                    if self._ambiguous(now, elimit):
                        maybe.add(wid)
                        edge_reasons.add(reasons["execution"])
                    elif now > elimit:
                        why.add(reasons["execution"])
            if st.waiting_kind and it["waiting_deadline"] is not None:
                if self._ambiguous(now, it["waiting_deadline"]):
                    maybe.add(wid)
                elif now > it["waiting_deadline"]:
                    why.add(reasons["waiting"])
            if why:
                sure[wid] = (it["status"], why | edge_reasons)
        return sure, maybe - set(sure)

    def _op_expire(self, a: dict[str, Any]) -> Expectation:
        now = a["now"]
        sure, maybe = self._expiries(now)

        def h(res: Any) -> list[Violation]:
            out: list[Violation] = []
            moves = _moves(res, "core.running.renew_or_leave")
            got = {m["work_id"]: m for m in moves}
            for wid in got:
                if wid not in sure and wid not in maybe:
                    it = self.items.get(wid)
                    if it is None:
                        out.append(Violation("core.running.renew_or_leave", f"expire reported unknown work {wid!r}"))
                    elif it["status"] in self._wait_kinds.values():
                        out.append(Violation("waiting.timeout", f"{wid} was marked timeout before its waiting deadline {it['waiting_deadline']} (now {now})"))
                    elif self.spec.statuses[it["status"]].leased:
                        out.append(self._early_expiry(it, got[wid].get("reason"), now))
                    else:
                        to = next((t.dst for t in self.spec.edges_of("expire")), None)
                        out.append(Violation(self._forbidden_blame(it["status"], to, "expire"), f"expire moved {wid}, which is {it['status']}"))
            for wid, (src, why) in sure.items():
                if wid not in got:
                    it = self.items[wid]
                    if self.spec.timeout_reasons["waiting"] in why:
                        clause = "waiting.timeout"
                    elif self.spec.timeout_reasons["heartbeat"] in why:
                        clause = "core.running.renew_or_leave"
                    else:
                        clause = "retry.execution_timeout"
                    out.append(Violation(clause, f"{wid} ({src}) should have been marked timeout at {now} ({'/'.join(sorted(why))})"))
            for wid, m in got.items():
                if wid not in self.items or (wid not in sure and wid not in maybe):
                    continue
                it = self.items[wid]
                ok_reasons = sure[wid][1] if wid in sure else set(self.spec.timeout_reasons.values())
                # a move's reason is optional (protocol reference: `move`); the clause is judged
                # on the record's status_reason (fixed_reason below), a reason given must agree
                if m.get("reason") is not None and m.get("reason") not in ok_reasons:
                    out.append(Violation("core.expire.timeout_reason", f"{wid}: timeout reason {m.get('reason')!r}, expected {'/'.join(sorted(ok_reasons))}"))
                dst = self.spec.targets("expire", it["status"])[0]
                if m.get("from_status") != it["status"] or m.get("to_status") != dst:
                    out.append(Violation("core.running.renew_or_leave", f"{wid}: move reported as {m.get('from_status')} -> {m.get('to_status')}"))
                reason = m.get("reason") if m.get("reason") in ok_reasons else sorted(ok_reasons)[0]
                new = rules.apply_effects(self.spec, "expire", it, now=now, args={"reason": reason}, dst=dst)
                self._begin(wid)
                self._open_effects(wid, "expire", it)
                self._append(wid, self.spec.operations["expire"].event_for(dst), it["status"], dst, now, new)
                clause = "waiting.timeout" if it["status"] in self._wait_kinds.values() else "lease.expiry.release"
                # a lease the timeout should have released: that clause's, whichever phase ran out
                released = {f: "lease.expiry.release" for f in ("owner", "lease_token", "lease_expires_at")
                            if it[f] is not None}
                self._commit(wid, new, released, clause)
                self.fixed_reason[wid] = frozenset(ok_reasons)
            return out

        return Accept(h, "core.running.renew_or_leave", "the monitor always answers")

    def _early_expiry(self, it: Mapping[str, Any], reason: Any, now: float) -> Violation:
        """Leased work marked timeout although neither its lease nor its stint ran out: blame the
        phase the monitor named, or else the timer that was closest to running out."""
        wid = it["work_id"]
        reasons = self.spec.timeout_reasons
        exec_t = self.spec.phase_timeout("execution") if self.spec.phases.get("execution", {}).get("action") == "timeout" else None
        stint = None if exec_t is None or it["started_at"] is None else it["started_at"] + exec_t
        msg_exec = f"{wid} was marked timeout at {now}, but its stint since {it['started_at']} is not longer than the execution budget {exec_t}"
        msg_lease = f"{wid} was marked timeout at {now}, but its lease runs to {it['lease_expires_at']} + grace"
        if stint is not None and reason == reasons["execution"]:
            return Violation("retry.execution_timeout", msg_exec)
        if reason == reasons["heartbeat"] or stint is None:
            return Violation("lease.expiry.grace", msg_lease)
        lapse = it["lease_expires_at"] + self.spec.lease_for(it["source_system"]).grace if it["lease_expires_at"] is not None else None
        if lapse is None or stint - now < lapse - now:
            return Violation("retry.execution_timeout", msg_exec)
        return Violation("lease.expiry.grace", msg_lease)


def _fmt_filter(a: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in a.items() if v is not None)
