"""The safety checker's ownership rules: grants and who held an item when (split_ownership), writes
with a lapsed or displaced lease (stale_write_accepted), terminal items changed (terminal_changed),
effects applied twice (duplicate_effect)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any

from .anomaly_model import (
    _T1,
    INF,
    OPERATOR,
    Grant,
    Op,
    Snap,
    _after,
    _code,
    _Item,
    _num,
    _with_final,
    fmt_num,
)
from .history import Final, Record


class _Ownership:
    """Part of the checker (chaos/safety/anomalies.py ``_Checker``); reads what ``_Index`` built."""

    # -- grants, renewals, releases of one item
    def grants(self, it: _Item) -> list[Grant]:
        grants: list[Grant] = []
        known: set[Any] = set()
        writes: list[Op] = []  # the operations that write with a lease token
        R = self.R
        token_writes, close_outs, granting = R.token_writes, R.close_outs, R.grants
        closed = claimed = 0
        for op in it.ops:
            name = op.name
            if name in token_writes:
                writes.append(op)
                if name in close_outs:
                    if op.outcome == "ok":
                        closed += 1
                    elif op.outcome == "refused":
                        if it.refused_closes is None:
                            it.refused_closes = [op]
                        else:
                            it.refused_closes.append(op)
            elif name in granting and op.outcome == "ok" and isinstance(op.result, dict):
                w = op.result
                claimed += 1
                tok = w.get("lease_token")
                if tok is None:
                    continue
                start = _num(w.get("started_at"))
                if start is None:
                    start = op.now if not self.wall or op.now is None else op.now + (op.t1 - op.t0)
                owner = w.get("owner") or op.args.get("owner") or op.process  # some ledgers do not say
                grants.append(Grant(op, owner, tok, w.get("lease_version"), start,
                                    _num(w.get("lease_expires_at")), t_done=op.t1))
                known.add(tok)
        if closed:
            self.cov["close_out_ok"] += closed
        if claimed:
            self.cov["claim_ok"] += claimed
        # Tokens that show up in snapshots but no ok grant handed out: an indefinite grant took effect.
        for s in it.snaps:
            tok = s.work.get("lease_token")
            if tok is not None and tok not in known and s.work.get("status") in self.R.leased:
                self._seen_grant(it, grants, s.work, s)
                known.add(tok)
        fw = it.final
        if fw is not None:
            tok = fw.get("lease_token")
            if tok is not None and tok not in known and fw.get("status") in self.R.leased:
                self._seen_grant(it, grants, fw, None)
                known.add(tok)
        if len(grants) > 1:
            grants.sort(key=lambda g: (g.version if isinstance(g.version, int) else INF,
                                       g.start if g.start is not None else INF,
                                       g.op.t0 if g.op is not None else INF))
        if not known:
            return grants  # no token to write with: no renewal or release to attach
        only = grants[0] if len(grants) == 1 else None
        renews, releases = R.renews, R.releases
        for op in writes:
            a = op.args
            tok = a.get("token", a.get("lease_token"))
            if tok is None or tok not in known:
                continue
            # holder() of a single grant with the token is that grant, whenever the write was made
            g = only if only is not None else self.holder(grants, tok, op.t0, op.process)
            if g is None:
                continue
            if op.name in renews:
                if op.outcome == "ok" and isinstance(op.result, dict):
                    exp = _num(op.result.get("lease_expires_at"))
                    if exp is not None:
                        g.renewals.append((op.t1, exp, op))
            elif op.name in releases and op.outcome != "refused":
                g.releases.append(op)
        return grants

    def _seen_grant(self, it: _Item, grants: list[Grant], w: Mapping[str, Any], s: Snap | None) -> None:
        """Add the grant a snapshot shows (s; None: the final read's) that no ok grant handed out."""
        seen_t = s.t1 if s is not None else INF
        src = self._grant_op(it, w.get("owner"), seen_t)
        if src is None:
            src = self._refused_grant(it, grants, w, s)
        exp = _num(w.get("lease_expires_at"))
        start = _num(w.get("started_at"))
        if start is None and src is not None:
            start = src.now
        killed = None
        if src is not None and src.comp is None:
            killed = next((self.h.record(i) for t, i in self.kills.get(src.process, ()) if t > src.t0), None)
        owner = w.get("owner") or (src.args.get("owner") or src.process if src is not None else None)
        grants.append(Grant(src, owner, w.get("lease_token"), w.get("lease_version"), start, exp,
                            seen=s.op if s is not None else None, seen_final=s is None, killed=killed).done())

    @staticmethod
    def holder(grants: list[Grant], token: Any, t: float, process: str | None = None) -> Grant | None:
        """The grant a write with `token` by `process` invoked at real time `t` speaks for: the
        latest grant with that token known done before `t`, made to the same process if any (a
        ledger may hand one token out twice, or use the item's id as its token), else the first."""
        best = mine = first = None
        for g in grants:
            if g.token != token:
                continue
            first = first or g
            if g.t_done < t:
                best = g
                if g.op is not None and g.op.process == process:
                    mine = g
        return mine or best or first

    def _refused_grant(self, it: _Item, grants: list[Grant], w: Mapping[str, Any], s: Snap | None) -> Op | None:
        """A grant a read shows (s; None: the final read) that no operation which may have happened
        handed out, made by a refused claim or resume of the owner the read names: that refusal took
        effect (refused_but_applied).  Only a refusal after the owner's last grant of the item that
        may have happened, and not the lease_version of a grant handed out ok (a ledger may hand a
        lease on under a new token), is taken for it."""
        owner = w.get("owner")
        if owner is None:
            return None
        before = s.t0 if s is not None else INF
        version = w.get("lease_version")
        if version is not None and any(g.version == version for g in grants if g.op is not None and g.op.ok):
            return None
        after = max((op.t0 for op in it.ops if op.name in self.R.grants and op.maybe
                     and op.args.get("owner", op.process) == owner and op.t0 < before), default=-INF)
        if self._refused_by_owner is None:
            self._refused_by_owner = defaultdict(list)
            for op in self.claims_refused:
                self._refused_by_owner[op.args.get("owner", op.process)].append(op)
        ref: Op | None = None
        for op in (*(op for op in it.ops if op.name in self.R.grants and op.outcome == "refused"),
                   *self._refused_by_owner.get(owner, ())):
            if op.args.get("owner", op.process) == owner and after < op.t0 < before and (ref is None or op.t0 > ref.t0):
                ref = op
        if ref is None:
            return None
        shown = s.op if s is not None else self.final_excerpt(it.work_id)
        why = (f"{ref.name} by {ref.process} was refused ({_code(ref, self.h)}), which says it did not happen, yet a "
               f"later read shows {it.work_id} {w.get('status')} under a lease of {owner} (lease_version {version}) "
               f"that no operation which may have happened handed out")
        self.add("refused_but_applied", it.work_id, why, [ref, shown])
        return ref

    def _grant_op(self, it: _Item, owner: Any, before: float) -> Op | None:
        """The indefinite claim or resume by `owner` that may have made a grant seen at `before`."""
        best: Op | None = None
        cands = [op for op in it.ops if op.name in self.R.grants and not op.ok and op.maybe]
        cands += self.open_claims.get(owner, [])
        for op in cands:
            if (owner is None or op.args.get("owner") == owner) and op.t0 < before and (best is None or op.t0 > best.t0):
                best = op
        return best

    def lease_end(self, g: Grant, before_t: float) -> tuple[float | None, Op | None]:
        """The ledger time until which g surely holds its lease, counting renewals completed
        before real time `before_t`; and the renewal that set it (None: the grant itself)."""
        end, by = g.expires, None
        for t, exp, op in g.renewals:
            if t < before_t and (end is None or exp > end):
                end, by = exp, op
        return (None if end is None else end + self.grace), by

    # -- split ownership
    def split(self, it: _Item, grants: list[Grant]) -> None:
        for a, b in zip(grants, grants[1:], strict=False):
            if a.owner == b.owner or b.start is None or a.start is None:
                continue
            b_t0 = b.op.t0 if b.op is not None else -INF
            b_t1 = b.t_done
            live_until, renewal = self.lease_end(a, b_t0)
            if a.op is None or b.op is None:
                continue
            a_t0 = a.op.t0
            if any(r.t0 < b_t1 for r in a.releases):
                continue
            if live_until is None:
                # No lease expiry: the grant holds until released, or until its holder is killed or an
                # operator takes the work back (how lease-less queues hand out a dead worker's work).
                if self._holder_gone(it, a, a_t0, b_t1):
                    continue
                live = "held with no lease expiry"
            else:
                if not (b.start + self.eps < live_until):
                    continue
                if any(self._monitor_lapsed(m, a_t0, b_t1, live_until) for m in self.monitor_ops):
                    continue
                live = f"live until {fmt_num(live_until)} (expiry + {fmt_num(self.grace)}s grace)"
            why = (f"{it.work_id} was granted to {a.owner} (lease_version {a.version}) and then to {b.owner} "
                   f"(lease_version {b.version}) at ledger time {fmt_num(b.start)}, while {a.owner}'s lease was "
                   f"{live} and {a.owner} had released nothing")
            self.add("split_ownership", it.work_id, why, [*a.proof(), renewal, *b.proof()])
            self.split_pairs.add((id(a), id(b)))
            if a.seen_final or b.seen_final:
                self.anomalies[-1] = _with_final(self.anomalies[-1], self.final_excerpt(it.work_id))

    def _holder_gone(self, it: _Item, a: Grant, after_t: float, before_t: float) -> bool:
        """For a grant with no lease expiry: was its holder killed, or did an operator act on the
        item (or on every item), between the grant and the next one?"""
        assert a.op is not None
        if any(after_t < t < before_t for t, _i in self.kills.get(a.op.process, ())):
            return True
        ops = [*it.ops, *self.monitor_ops]
        return any(op.process == OPERATOR and op.maybe and op.t1 > after_t and op.t0 < before_t
                   and op.name not in self.R.reads for op in ops)

    def _monitor_lapsed(self, m: Op, after_t: float, before_t: float, live_until: float) -> bool:
        """A monitor op that may have run between two grants at a ledger time the first had lapsed by."""
        return (m.maybe and m.t1 > after_t and m.t0 < before_t and m.now is not None
                and m.now > live_until - self.eps and m.name in self.R.monitor)

    # -- stale writes accepted
    def stale(self, it: _Item, grants: list[Grant]) -> None:
        token_writes = self.R.token_writes
        for op in it.ops:
            if op.name not in token_writes or not op.maybe or op.token is None:
                continue
            a = self.holder(grants, op.token, op.t0, op.process)
            if a is None or a.op is None or a.op.process != op.process:
                continue  # not this process's grant: nothing says whose write this is
            seen = None
            if not op.ok:
                seen = self._close_seen(it, op)
                if seen is None:
                    continue
            later = [b for b in grants if b is not a and _after(b, a)
                     and (b.t_done < op.t0 or self._closed_across(it, op, b))
                     and (b.token != a.token or (b.op is not None and b.op.process != op.process))]
            if not later:
                continue
            b = later[0]
            if (id(a), id(b)) in self.split_pairs:
                continue  # a still owned the item when b was granted: the split says it all
            why = (f"{op.name} by {a.owner} with the token of lease_version {a.version} was accepted after "
                   f"{it.work_id} had been granted to {b.owner} (lease_version {b.version})")
            if seen is not None:
                why += "; the completion was indefinite, but a later read shows its write"
            elif not b.t_done < op.t0:
                why += (" (sent before that grant, it completed after it: applied first, it would have let the "
                        "grant hand out a finished item)")
            extra: list[Op | Record | None] = []
            if isinstance(seen, Snap):
                extra.append(seen.op if seen.op is not None else self.final_excerpt(it.work_id))
            if (a.seen_final or b.seen_final) and not any(isinstance(x, Final) for x in extra):
                extra.append(self.final_excerpt(it.work_id))  # the read that shows an indefinite grant
            self.add("stale_write_accepted", it.work_id, why, [*a.proof(), *b.proof(), op, *extra])
            return  # one per item: the first stale write shows the hole

    def _closed_across(self, it: _Item, op: Op, b: Grant) -> bool:
        """A close-out to a terminal status that was in flight while grant b was made (a late write
        held up by a partition) and came back ok.  Either order is a violation: applied before b,
        the grant handed out a finished item; applied after, it was a stale write.  Unless a
        requeue (or recovery) ran in between, which may make a finished item claimable again."""
        if op.name not in self.R.close_outs or not op.ok or op.args.get("status") not in self.R.terminal or not b.t_done < op.t1:
            return False
        for r in (*it.ops, *self.requeues):
            if r.name in self.R.requeues and r.maybe and r.t1 > op.t0 and r.t0 < b.t_done:
                return False
        return True

    def _close_seen(self, it: _Item, op: Op, loose: bool = False) -> Snap | None:
        """A later snapshot showing the write of an indefinite (or refused) close-out, if any: its
        status, time and result, which no other close-out that may have happened would leave.
        ``loose`` (a refused close-out): a ledger that stamps its own clock's time (a wall-clock
        ledger whose reply was lost, then refused the repeat) shows the status and a result no
        other close-out that may have happened carries (chaos/safety/replies.py)."""
        close_outs = self.R.close_outs
        if op.name not in close_outs or op.now is None:
            return None
        if loose:
            return self._close_seen(it, op) or self._close_seen_untimed(it, op)
        now, t0 = op.now, op.t0
        want = (op.args.get("status"), now, op.args.get("result"))
        found = None
        for s in it.snaps:
            if s.t0 > t0:
                w = s.work
                if w.get("finished_at") == now and (w.get("status"), now, w.get("result")) == want:
                    found = s
                    break
        if found is None:
            fw = it.final
            if fw is None or (fw.get("status"), _num(fw.get("finished_at")), fw.get("result")) != want:
                return None
            found = Snap(fw, None, INF, INF)
        for other in it.ops:  # another close-out that would leave the same trace makes it ambiguous
            if other is not op and other.name in close_outs and other.maybe and \
                    (other.args.get("status"), other.now, other.args.get("result")) == want:
                return None
        return found

    def _close_seen_untimed(self, it: _Item, op: Op) -> Snap | None:
        """The final read showing a close-out's status and (non-null) result, which no other
        close-out of the item that may have happened would leave: a refused one took effect."""
        result, fw = op.args.get("result"), it.final
        if result is None or fw is None or (fw.get("status"), fw.get("result")) != (op.args.get("status"), result):
            return None
        close_outs = self.R.close_outs
        for other in it.ops:
            if other is not op and other.name in close_outs and other.maybe and \
                    (other.args.get("status"), other.args.get("result")) == (op.args.get("status"), result):
                return None
        return Snap(fw, None, INF, INF)

    # -- terminal records changed
    def terminal(self, it: _Item) -> None:
        terminal = self.R.terminal
        for s in it.snaps:
            if s.work.get("status") in terminal:
                break
        else:
            return  # nothing read terminal before the final read: nothing to change
        snaps = sorted(it.snaps, key=_T1)
        fw = it.final
        if fw is not None:
            snaps.append(Snap(fw, None, INF, INF))
        first: Snap | None = None
        for s in snaps:
            st = s.work.get("status")
            if first is None:
                if st in terminal:
                    first = s
                continue
            if s.t0 <= first.t1:
                continue  # concurrent with the terminal read: not ordered after it
            if st == first.work.get("status"):
                continue
            if self._requeued_between(it, first, s):
                first = s if st in terminal else None
                continue
            was = first.work.get("status")
            why = (f"{it.work_id} was {was} and later {st}, with no operator requeue (or recovery) "
                   f"between the two reads")
            later: Op | Record | None = s.op if s.op is not None else self.final_excerpt(it.work_id)
            self.add("terminal_changed", it.work_id, why, [first.op, later])
            return

    def _requeued_between(self, it: _Item, a: Snap, b: Snap) -> bool:
        for op in it.ops:
            if op.name in self.R.requeues and op.maybe and op.t1 > a.t0 and op.t0 < b.t1:
                return True
        for op in self.requeues:
            if op.work_id is None and op.maybe and op.t1 > a.t0 and op.t0 < b.t1:
                if not op.ok or any(isinstance(m, dict) and m.get("work_id") == it.work_id
                                    for m in (op.result or [])):
                    return True
        if b.op is None and self._action_for(it.work_id) is not None:
            return True
        return False

    def _action_for(self, work_id: str) -> Mapping[str, Any] | None:
        """The last recovery action naming the item (the one that brought it back), if any."""
        if self.final is None:
            return None
        if self.actions is None:  # index the actions once: an operator recovery may name every item
            named: dict[str, tuple[int, dict[str, Any]]] = {}
            odd: list[tuple[int, dict[str, Any]]] = []  # work_ids not a list of strings: asked as written
            for i, a in enumerate(self.final.recovery.get("actions") or []):
                if not isinstance(a, dict):
                    continue
                ids = a.get("work_ids") or []
                if type(ids) is list and all(type(w) is str for w in ids):
                    for w in ids:
                        named[w] = (i, a)
                else:
                    odd.append((i, a))
            self.actions = (named, odd)
        named, odd = self.actions
        found = named.get(work_id) if type(work_id) is str else None
        for i, a in odd:
            if work_id in (a.get("work_ids") or []) and (found is None or i > found[0]):
                found = (i, a)
        return found[1] if found is not None else None

    # -- duplicate effects
    def duplicates(self, it: _Item, permitted: Counter[int]) -> None:
        delivery = self.meta.delivery
        rows = self.h.rows
        for key, effs in it.effects.items():
            if len(effs) < 2:
                continue
            if delivery == "at-least-once" or self._rerun_by_operator(it, rows[effs[0]].t, rows[effs[1]].t):
                permitted[len(effs)] += 1
                continue
            why = (f"the effect {key[:16]} of {it.work_id} was applied {len(effs)} times; "
                   f"declared delivery {delivery} allows once")
            recs = [self.h.record(e) for e in effs]
            self.add("duplicate_effect", it.work_id, why, recs[:2], recs[2:])

    def _rerun_by_operator(self, it: _Item, t1: float, t2: float) -> bool:
        """Did an operator requeue run between two effects (at real times t1, t2)?"""
        return any(op.name in self.R.operator_requeues and op.maybe and op.t1 > t1 and op.t0 < t2 for op in it.ops)
