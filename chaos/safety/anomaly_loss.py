"""The safety checker's end-state rules: items lost (lost_work) or left stuck (stuck_work), and
definite refusals whose effect a later read shows (refused_but_applied)."""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Mapping
from operator import attrgetter
from typing import Any

from .anomaly_model import _PAST, _T1, INF, OPERATOR, Grant, Op, _code, _Item, _num, fmt_num
from .history import Nemesis, Record


class _Loss:
    """Part of the checker (chaos/safety/anomalies.py ``_Checker``); reads what ``_Index`` built."""

    # -- lost and stuck work: the end state
    def lost(self, it: _Item, grants: list[Grant], reclaimed: Counter[str]) -> None:
        """Judge the item as the final read left it.  Terminal: finished.  Missing: lost, if it was
        created.  Anything else is work left after the quiet period: lost or stuck when the history
        proves it does not come back, accounted for when the contract lets it wait (a retry or a
        wait due after the final read), else named in what the history did not reach."""
        if self.final is None:
            return
        R = self.R
        w = it.final
        if w is not None and not it.creates:
            self.uncreated += 1
        st = w.get("status") if w is not None else None
        if st in R.terminal:
            self.cov["finished"] += 1
        action = self._action_for(it.work_id)
        if action is not None:
            act = str(action.get("op"))
            if self.meta.reclaim == "lease":
                why = (f"{it.work_id} came back only through the operator's {act}, though the declared "
                       f"reclaim is lease (automatic once a lease lapses)")
                self.add("stuck_work", it.work_id, why, [self.final_excerpt(it.work_id, action)],
                         [grants[-1].op if grants else None, *it.ops[-2:]])
                return
            reclaimed[act] += 1
        if w is not None:
            if st in R.terminal:
                return
            if st in R.claimable:
                if not self._stranded(it):
                    self.left["claimable"] += 1
                return
            if st in R.parked:
                self._parked(it, w, st)
                return
            if st not in R.leased:
                self.left[f"status:{st}"] += 1  # a status the contract does not name
                return
        ack = next((op for op in it.creates if op.ok), None)
        proof: list[Op | Record | None] = [ack]
        if ack is None and it.creates:  # an indefinite or refused create, seen later
            ack = it.creates[0]
            seen = next((s for s in it.snaps if s.op is not None and s.op is not ack), None)
            proof = [ack, seen.op if seen is not None else None]
        last = [op for op in it.ops if op is not ack][-2:]
        fin = self.final_excerpt(it.work_id)
        if w is None and self._finished_unkept(it):
            # a ledger that keeps no record of finished work (the job is deleted when it completes):
            # the history shows it finished, so no work is lost; the missing record is the contract's
            # clauses' to judge (core.list.complete)
            self.cov["finished"] += 1
            self.counts["finished_not_kept"] += 1
            return
        if w is None:
            if it.creates:
                why = f"{it.work_id} was created (acknowledged) but is missing from the final read"
                cause = self._cause(it, grants)
                if cause:
                    why += f" ({self._cause_words(cause)})"
                self.add("lost_work", it.work_id, why, [*proof, fin], last, cause)
            return
        exp = _num(w.get("lease_expires_at"))
        if exp is None:
            self._held(it, grants, w, st)
            return
        if not (self.final_now > exp + self.grace + self.eps):
            path = str(self.final.recovery.get("path") or "")
            if self.meta.reclaim == "lease" and path != "operator" and self._beyond_contract(it, grants, w, last):
                return
            self.left["leased_live"] += 1  # a holder may still be at work, or its lease not lapsed yet
            return
        path = str(self.final.recovery.get("path") or "")
        if self.meta.reclaim == "lease" and path != "operator":
            if not self._stuck(it, grants, w, exp, last):
                self.left["leased_lapsed"] += 1
            return
        if self.meta.reclaim == "never" or path in ("operator", "never"):
            why = (f"{it.work_id} is still {st} under a lease that lapsed at {fmt_num(exp + self.grace)} after the "
                   f"{path or 'declared ' + self.meta.reclaim} recovery path ran: it is neither finished nor claimable")
            cause = self._cause(it, grants)
            if cause:
                why += f" ({self._cause_words(cause)})"
            clock = None if _num(self.final.recovery.get("now")) is not None else self.max_now_op
            self.add("lost_work", it.work_id, why, [clock, fin], [*proof, *last], cause)
            return
        self.left["leased_lapsed"] += 1

    def _finished_unkept(self, it: _Item) -> bool:
        """The last operation that may have changed the item was an acknowledged move to a final
        status (a close-out answered with the item done, failed, ...), or a close-out to a final
        status that did not answer (its holder killed while it ran: it may have taken effect): the
        work was, or may have been, finished, though the final read no longer finds the item (a
        ledger that deletes a job when it completes).  Work lost before its holder asked to finish
        it is still lost."""
        moved = [op for op in it.ops if op.name not in self.R.reads and op.maybe]
        if not moved:
            return False
        last, r = moved[-1], moved[-1].result
        if not last.ok:
            return last.name in self.R.close_outs and last.args.get("status") in self.R.terminal
        return type(r) is dict and r.get("work_id") == it.work_id and r.get("status") in self.R.terminal

    def _cause(self, it: _Item, grants: list[Grant]) -> list[Op | Record]:
        """The fault that explains why an item was lost, when the history has one: the first kill,
        pause or partition of the process holding its last grant that may have happened, after that
        grant and before the holder gave it back (with the grant, which ties the fault to the item);
        else the first reopen after the item was last read."""
        h = self.h
        g = next((g for g in reversed(grants) if g.op is not None and g.op.maybe), None)
        if g is not None:
            assert g.op is not None
            p, t0 = g.op.process, g.op.t0
            for t, row, _fault in self.hits.get(p, ()):
                if t <= t0:
                    continue
                if any(r.ok and r.t1 < t for r in g.releases):
                    break
                return [g.op, h.record(row)]
        last_read = max((s.t1 for s in it.snaps if s.op is not None), default=-INF)
        k = bisect_right(self.reopens, (last_read, INF))
        if k < len(self.reopens):
            return [h.record(self.reopens[k][1])]
        return []

    @staticmethod
    def _cause_words(cause: list[Op | Record]) -> str:
        fault = cause[-1]
        assert isinstance(fault, Nemesis)
        if len(cause) == 1:
            return f"the ledger was reopened at t={fault.t:.4f}, after it was last read"
        grant = cause[0]
        assert isinstance(grant, Op)
        return f"{fault.process}, which held it from its {grant.name}, was {_PAST.get(fault.fault, fault.fault)} at t={fault.t:.4f}"

    def _held(self, it: _Item, grants: list[Grant], w: Mapping[str, Any], st: Any) -> None:
        """Leased at the end with no lease expiry (a queue: held until released).  Lost when its
        holder was killed and, under the operator path, the operator's recovery ran after that (under
        never, nothing is to run), yet it is still held: nothing else brings it back."""
        tok = w.get("lease_token")
        g = next((g for g in reversed(grants) if g.op is not None and g.token == tok and g.op.maybe), None)
        if g is None:
            self.left["held"] += 1
            return
        assert g.op is not None
        p, t0 = g.op.process, g.op.t0
        kill = next(((t, row) for t, row in self.kills.get(p, ()) if t > t0), None)
        if kill is None:
            self.left["held"] += 1  # its holder was not killed: stopped with the work in hand
            return
        path = str(self.final.recovery.get("path") or "") if self.final is not None else ""
        never = self.meta.reclaim == "never" or path == "never"
        recovering = self.R.monitor | self.R.requeues
        ran = [op for op in (*self.operator_ops, *(op for op in it.ops if op.process == OPERATOR))
               if op.maybe and op.t0 > kill[0] and op.name in recovering]
        if never:  # nothing is to bring it back: the kill left it held for good
            why = (f"{it.work_id} is still {st}, held with no lease expiry by {p}, which was killed at "
                   f"t={kill[0]:.4f}; under reclaim never nothing brings it back: it is neither finished nor claimable")
            self.add("lost_work", it.work_id, why, [*g.proof(), self.h.record(kill[1]), self.final_excerpt(it.work_id)],
                     it.ops[-2:])
            return
        if not ran or path != "operator":
            self.left["held_dead"] += 1
            return
        op = min(ran, key=attrgetter("t0"))
        why = (f"{it.work_id} is still {st}, held with no lease expiry by {p}, which was killed at "
               f"t={kill[0]:.4f}; the operator's {op.name} ran after that and it is still held: it is neither "
               f"finished nor claimable")
        self.add("lost_work", it.work_id, why, [*g.proof(), self.h.record(kill[1]), op, self.final_excerpt(it.work_id)],
                 it.ops[-2:])

    def _parked(self, it: _Item, w: Mapping[str, Any], st: str) -> None:
        """Left in a status that waits for a time (a retry scheduled, a wait with a deadline): fine
        while that time is ahead of the final read; stuck when it had come and the monitor operation
        that moves the item on then (promote_due, expire) ran after it and left it where it was."""
        fields, movers = self.R.parked[st]
        dues = [(d, f) for f in fields if (d := _num(w.get(f))) is not None]
        if not dues:
            self.left[f"parked_no_due:{st}:{'/'.join(fields)}"] += 1
            return
        due, fname = max(dues)
        if due > self.final_now + self.eps:
            self.parked_ahead[st] += 1
            return
        moved = max((op.t1 for op in it.ops if op.name not in self.R.reads), default=-INF)
        # a wall-clock ledger reads its own clock: a grace's margin for the difference
        margin = max(self.eps, self.grace) if self.wall else self.eps
        mon = next((m for m in self.timed_ops if m.name in movers and m.ok and m.t0 > moved and m.now is not None
                    and m.now > due + margin), None)
        if mon is None:
            self.left[f"parked_due:{st}:{'/'.join(sorted(movers)) or 'none'}"] += 1
            return
        why = (f"{it.work_id} is still {st} at the end, due at {fmt_num(due)} ({fname}); the monitor's {mon.name} at "
               f"{fmt_num(mon.now)}, after it was due, left it there: it does not come back by itself")
        self.add("stuck_work", it.work_id, why, [mon, self.final_excerpt(it.work_id)],
                 [op for op in it.ops if op.name not in self.R.reads][-2:])

    def _stranded(self, it: _Item) -> bool:
        """The final read shows the item claimable, yet it is handed to nobody: after the last thing
        that could move it (its own operations, any monitor or requeue, any fault), a read listed it
        claimable, and then claims found nothing to take for longer than a lease's lapse (so no
        late write from before, and no lease the ledger keeps to itself, explains it)."""
        if self._last_global is None:
            self._index_monitor_moves()
        moves = max((op.t1 for op in it.ops if op.name not in self.R.reads), default=-INF)
        mover = self._monitor_moved.get(it.work_id)
        horizon = max(self.last_fault_t, self._last_global, moves, -INF if mover is None else mover.t1)
        if horizon == INF:
            return False  # an operation on it never completed: it may still take effect
        seen = next((s for s in it.snaps if s.op is not None and s.t0 > horizon
                     and s.work.get("status") in self.R.claimable), None)
        if seen is None:
            return False
        lapse = self.ttl + self.grace
        first = None
        for c in self.claims_null:
            if c.t0 <= seen.t1 or c.now is None or c.args.get("work_id"):
                continue
            if first is None:
                first = c
            elif c.now > first.now + lapse + self.eps:
                why = (f"{it.work_id} was listed as {seen.work.get('status')} after the last operation, monitor run "
                       f"and fault that could move it, and is still {it.final.get('status') if it.final else '?'} "
                       f"at the end, yet claims from {fmt_num(first.now)} to {fmt_num(c.now)} (longer than the "
                       f"lease's ttl + grace, {fmt_num(lapse)}s) found nothing to take: it is never handed out")
                self.add("lost_work", it.work_id, why, [seen.op, first, c, self.final_excerpt(it.work_id)],
                         [*[op for op in it.ops if op.name not in self.R.reads][-2:], mover])
                return True
        return False

    def _index_monitor_moves(self) -> None:
        """When monitors and global requeues last moved each item.  One that answered with the
        items it moved (a list of snapshots) moved those; one that was refused moved nothing; any
        other answer (or none) may have moved anything."""
        last, moved = -INF, self._monitor_moved
        for op in (*self.monitor_ops, *self.requeues):
            if op.work_id is not None or op.outcome == "refused":
                continue  # an item's own requeue is among its operations
            r = op.result
            if op.ok and type(r) is list and all(type(w) is dict and "work_id" in w for w in r):
                for w in r:
                    wid = str(w["work_id"])
                    if wid not in moved or op.t1 > moved[wid].t1:
                        moved[wid] = op
            elif op.t1 > last:
                last = op.t1
        self._last_global = last

    def _beyond_contract(self, it: _Item, grants: list[Grant], w: Mapping[str, Any], last: list[Op]) -> bool:
        """Declared reclaim=lease, the item is still leased at the end under a lease the ledger made
        longer than the contract's ttl + grace (measured on the ledger's own stamps, its start and
        expiry), so it has not lapsed by the ledger's reckoning: stuck when, past the contract's
        window (start + ttl + grace), the ledger's monitor ran (if it has one) and then a claim found
        nothing.  A ledger whose leases are the contract's never gets here."""
        g = next((g for g in grants if g.token == w.get("lease_token")), None)
        if g is None or g.op is None or g.start is None or g.expires is None:
            return False
        if g.expires - g.start <= self.ttl + self.grace + self.eps:
            return False
        return self._stuck(it, grants, w, g.start + self.ttl, last, beyond=g.expires)

    def _stuck(self, it: _Item, grants: list[Grant], w: Mapping[str, Any], exp: float, last: list[Op],
               beyond: float | None = None) -> bool:
        """Declared reclaim=lease, the item is still leased under a lapsed lease at the end: proven stuck
        when, after the lapse, the ledger's monitor ran (if it has one) and then a claim found nothing."""
        lapse = exp + self.grace
        unproven = "leased_lapsed_at_end" if beyond is None else "leased_beyond_contract_at_end"
        g = next((g for g in grants if g.token == w.get("lease_token")), None)
        if g is None or g.op is None:
            self.counts[unproven] += 1
            return False
        after = g.t_done
        mon = None
        if self.monitor_ops:
            mon = next((m for m in self.monitor_ops if m.ok and m.t0 > after and m.now is not None
                        and m.now > lapse + self.eps), None)
            if mon is None:
                self.counts[unproven] += 1
                return False
        start = mon.t1 if mon is not None else after
        # The final read shows the same lease token, so the item was leased under it all along.
        claim = next((c for c in self.claims_null if c.t0 > start and c.now is not None
                      and c.now > lapse + self.eps and not c.args.get("work_id")), None)
        if claim is None:
            self.counts[unproven] += 1
            return False
        monitor = f"the monitor's {mon.name} at {fmt_num(mon.now)} and " if mon is not None else ""
        if beyond is not None:
            why = (f"{it.work_id} is held under a lease (owner {g.owner}) the ledger set to run until "
                   f"{fmt_num(beyond)}, longer than the contract's ttl + grace; past the contract's window "
                   f"({fmt_num(lapse)}) {monitor}a claim at {fmt_num(claim.now)} found nothing to take, and at the "
                   f"end it is still {w.get('status')} under that lease: it does not come back within the "
                   f"contract's lease")
            self.add("stuck_work", it.work_id, why, [*g.proof(), claim, self.final_excerpt(it.work_id)], [mon, *last])
            return True
        why = (f"{it.work_id}'s lease (owner {g.owner}, lease_version {g.version}) lapsed at {fmt_num(lapse)}; "
               f"{monitor}a claim at {fmt_num(claim.now)} found nothing to take, and at the end it is still "
               f"{w.get('status')} under that lease: it does not come back without an operator action "
               f"(expire/recover, then requeue)")
        self.add("stuck_work", it.work_id, why, [*g.proof(), claim, self.final_excerpt(it.work_id)], [mon, *last])
        return True

    # -- refusals that took effect
    def refused_applied(self, it: _Item) -> None:
        """A definite refusal says the operation did not happen.  A create refused for an item a
        later read shows (and no create that may have happened made), a close-out refused whose
        status, time and result a later read shows (and no other close-out would leave): the
        refusal took effect.  (A refused grant whose lease a read shows: see _refused_grant.)  The
        item made by a refused create counts as created for every other check."""
        creates = it.creates
        if creates and creates[0].outcome == "refused" and all(op.outcome == "refused" for op in creates):
            first = creates[0]
            seen = min((s for s in it.snaps if s.op is not None and s.op not in creates and s.t1 > first.t0),
                       key=_T1, default=None)
            shown: Op | Record | None = seen.op if seen is not None else (
                self.final_excerpt(it.work_id) if it.final is not None else None)
            if shown is not None:
                a = first.args
                why = (f"{first.name} of {a.get('source_system')}/{a.get('source_id')} was refused ({_code(first, self.h)}), "
                       f"which says it did not happen, yet a later read shows it as {it.work_id}, and no create that "
                       f"may have happened made it")
                self.add("refused_but_applied", it.work_id, why, [first, shown])
        for op in it.refused_closes or ():
            s = self._close_seen(it, op, loose=True)
            if s is None:
                continue
            shown = "status, time and result" if s.work.get("finished_at") == op.now else "status and result"
            why = (f"{op.name} by {op.process} (status {op.args.get('status')}) was refused ({_code(op, self.h)}), "
                   f"which says it did not happen, yet a later read shows its {shown}")
            self.add("refused_but_applied", it.work_id, why,
                     [op, s.op if s.op is not None else self.final_excerpt(it.work_id)])
            return
