"""What the safety checker reports as reached (coverage) and observed: holders displaced by time,
operator or reopen, refused takeovers, effects then kills, what the end state leaves, late writes
during partitions."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Mapping
from operator import attrgetter
from typing import Any

from .anomaly_model import (
    _FIRST,
    CLASSES,
    INF,
    OPERATOR,
    SITUATIONS,
    Grant,
    Op,
    Verdict,
    _first_t,
    _Item,
    _plural,
    _retries,
    _Timeline,
)


class _Coverage:
    """Part of the checker (chaos/safety/anomalies.py ``_Checker``); reads what ``_Index`` built."""

    # -- coverage: what the history exercised
    def displaced(self, it: _Item, grants: list[Grant]) -> None:
        """Live holders displaced: a grant of the item to another process while the holder of the
        grant before it was alive (not killed since) and had not given it back; classified by what
        made it possible (an operator's action on the item between the two, its lease lapsed by
        ledger time, a reopen between the two), and the holder's late writes with its old token
        after the other grant (sent after it, or in flight across it)."""
        for i, (a, b) in enumerate(zip(grants, grants[1:], strict=False)):
            if a.op is None or b.op is None:
                continue
            pa = a.op.process
            if pa == b.op.process:
                continue
            b_t, a_t = b.t_done, a.op.t0
            if b_t == INF or self._between(self.kills.get(pa), a_t, b_t) is not None:
                continue
            if any(r.t0 < b_t for r in a.releases):
                continue
            self.cov["holder_displaced"] += 1
            how = self._displaced_by(it, a, b, a_t, b_t)
            if how:
                self.cov[f"displaced_by_{how}"] += 1
            again = INF
            for c in grants[i + 2:]:
                if c.op is not None and c.op.process == pa:
                    again = c.t_done
                    break
            tok = a.token
            late = 0
            for op in it.ops:
                # sent after the other grant, or in flight across it (held up by a partition, say):
                # either way the ledger had to judge a write of a superseded lease
                if op.process == pa and a_t < op.t0 < again and op.t1 > b_t:
                    args = op.args
                    if args.get("token", args.get("lease_token")) == tok and op.name not in self.R.reads \
                            and op.name not in self.R.grants:
                        late += 1
            if late:
                self.cov["late_write_after_takeover"] += late

    def _displaced_by(self, it: _Item, a: Grant, b: Grant, a_t: float, b_t: float) -> str | None:
        reads = self.R.reads
        if any(op.process == OPERATOR and op.name not in reads and op.t1 > a_t and op.t0 < b_t
               and self._may_move(op, it.work_id) for op in it.ops) or \
                (self.operator_ops and any(op.name not in reads and self._may_move(op, it.work_id)
                                           for op in self.timeline("operator").overlapping(a_t, b_t))):
            return "operator"
        assert b.op is not None
        live_until, _ = self.lease_end(a, b.op.t0)
        if live_until is not None and b.start is not None and (
                b.start + self.eps >= live_until
                or any(self._monitor_lapsed(m, a_t, b_t, live_until) for m in self.timeline("monitor").overlapping(a_t, b_t))):
            return "time"
        if self._between(self.reopens, a_t, b_t) is not None:
            return "reopen"
        return None

    def timeline(self, which: str) -> _Timeline:
        """The monitor's (any process's expire and recover), the operator's (its operations on no
        one item) or the recoveries' (both, ok) operations, by invoke time."""
        tl = self._timelines.get(which)
        if tl is None:
            if which == "monitor":
                ops = self.monitor_ops
            elif which == "operator":
                ops = self.operator_ops
            else:
                recovering = self.R.monitor | self.R.requeues
                ops = [m for m in self.monitor_ops if m.ok]  # any process's expire or recover
                ops += [o for o in self.operator_ops if o.ok and o.name in recovering and o.name not in self.R.monitor]
            tl = self._timelines[which] = _Timeline(ops)
        return tl

    @staticmethod
    def _may_move(op: Op, work_id: str) -> bool:
        """May this operation (on the item, or on no one item) have moved the item?  One that
        answered with the items it moved moved only those; a refused one nothing."""
        if not op.maybe:
            return False
        if op.work_id is not None:
            return op.work_id == work_id
        r = op.result
        if op.ok and type(r) is list and all(type(w) is dict and "work_id" in w for w in r):
            return any(str(w["work_id"]) == work_id for w in r)
        return True

    def _between(self, seq: list[tuple[float, int]] | None, after: float, before: float) -> tuple[float, int] | None:
        """The first (t, row) of a sorted list of faults with after < t < before."""
        if not seq:
            return None
        times = self._times.get(id(seq))
        if times is None:
            times = self._times[id(seq)] = [t for t, _row in seq]
        k = bisect_right(times, after)
        return seq[k] if k < len(seq) and seq[k][0] < before else None

    def refused_takeovers(self, item_grants: Mapping[str, list[Grant]]) -> None:
        """Takeovers the ledger refused: a holder paused while it held an item, its lease lapsed
        by ledger time (or, with no lease expiry, an operator's recovery ran), the ledger's own
        recovery ran past that (its monitor or the operator, when the history has either), and then
        another worker asked for any work and got none, while the holder was still paused; and
        nobody was granted the item meanwhile."""
        pauses = [(t, p) for p, hits in self.hits.items() for t, _row, fault in hits if fault == "pause"]
        if not pauses:
            return
        empty = sorted((*self.claims_null, *self.claims_refused), key=attrgetter("t0"))
        starts = [c.t0 for c in empty]
        recoveries = self.timeline("recoveries")
        recovering = self.R.monitor | self.R.requeues
        paused = {p for _t, p in pauses}
        by: dict[str, list[tuple[float, Grant, _Item]]] = defaultdict(list)  # process -> (done at, grant, item)
        for wid, gs in item_grants.items():
            it = self.items[wid]
            for g in gs:
                if g.op is not None and g.op.process in paused:
                    by[g.op.process].append((g.t_done, g, it))
        held = {p: sorted(gs, key=_FIRST) for p, gs in by.items()}
        held_t = {p: [t for t, _g, _it in gs] for p, gs in held.items()}
        for t_p, p in pauses:
            end = INF
            resumes = self.resumes.get(p, ())
            k = bisect_right(resumes, t_p)
            if k < len(resumes):
                end = resumes[k]
            kill = self._between(self.kills.get(p), t_p, INF)
            if kill is not None:
                end = min(end, kill[0])
            k = bisect_left(held_t.get(p, ()), t_p)  # the latest grant p had by the pause
            if not k:
                continue
            _t, g, it = held[p][k - 1]
            grants = item_grants[it.work_id]
            if any(r.t0 < t_p for r in g.releases) or any(b is not g and g.t_done < b.t_done < t_p for b in grants):
                continue  # given back, or taken over, before the pause: not held then
            if any(b.op is not None and b.op.process != p and t_p < b.t_done <= end for b in grants):
                continue  # displaced: counted as such
            live_until, _ = self.lease_end(g, t_p)
            after = t_p
            if live_until is None:  # no lease expiry: only an operator's recovery can take it back
                op = next((m for m in (*recoveries.starting(t_p, end), *it.ops) if m.process == OPERATOR and m.ok
                           and m.name in recovering and t_p < m.t0 and m.t1 < end), None)
                if op is None:
                    continue
                after = op.t1
            elif recoveries.ops:
                m = next((m for m in recoveries.starting(t_p, end) if m.t1 < end and m.now is not None
                          and m.now > live_until + self.eps), None)
                if m is None:
                    continue
                after = m.t1
            for i in range(bisect_right(starts, after), len(empty)):
                c = empty[i]
                if c.t0 >= end:
                    break
                if c.process != p and (live_until is None or (c.now is not None and c.now > live_until + self.eps)):
                    self.cov["takeover_refused"] += 1
                    break

    def effects_then_kill(self) -> None:
        """Kills that hit a worker after it submitted an item's effect and before it closed the
        item out: its last effect before the kill (since its previous kill), and no release of that
        item by it answered between the two."""
        releases = self.R.releases
        for p, kills in self.kills.items():
            effs = self.effects_by.get(p)
            if not effs:
                continue
            before = -INF
            for t_k, _row in kills:
                k = bisect_left(effs, (t_k,))  # the first effect at or after the kill
                if k and effs[k - 1][0] > before:
                    t_e, wid = effs[k - 1]
                    it = self.items.get(wid)
                    if it is None or not any(op.process == p and op.name in releases and op.comp is not None
                                             and t_e < op.t0 and op.t1 < t_k for op in it.ops):
                        self.cov["effect_then_kill"] += 1
                before = t_k

    def coverage(self) -> tuple[dict[str, int], list[str]]:
        """What the history reached, and one line per required situation it did not."""
        cov = {k: self.cov.get(k, 0) for k in SITUATIONS}  # (takeover_refused is not one: see below)
        for fault in ("kill", "pause", "reopen"):
            cov[fault] = self.nemesis.get(fault, 0)
        cov["final_read"] = int(self.final is not None)
        for point, k in sorted(self.kill_points.items()):
            cov[f"kill_at:{point}"] = k
        missing: list[str] = []
        if self.final is None:
            missing.append("the history has no final record: it ends before the final read (an interrupted "
                           "campaign, or one process's part of a history)")
        if not self.ops:
            missing.append("the history holds no operation")
        else:
            if not cov["claim_ok"]:
                missing.append("no claim ever completed ok (no item was ever handed out)")
            if not cov["close_out_ok"]:
                missing.append("no close-out ever completed ok")
        if self.final is not None and not cov["finished"]:
            missing.append("no item was finished (terminal) at the final read")
        if self.uncreated:
            missing.append(f"{_plural(self.uncreated, 'item')} of the final read {'was' if self.uncreated == 1 else 'were'} "
                           f"created by no operation of the history (its records are incomplete: a fragment?)")
        if not cov["late_write_after_takeover"]:
            if cov["holder_displaced"]:
                missing.append(f"no displaced holder wrote with its old token after the takeover "
                               f"({_plural(cov['holder_displaced'], 'live holder')} displaced)")
            elif self.cov["takeover_refused"]:
                k = self.counts["takeovers_refused"] = self.cov["takeover_refused"]
                self.observations.append(
                    f"{_plural(k, 'takeover')} tried and refused by the ledger: a holder was paused past its lease, "
                    f"the ledger's recovery ran, and another worker asking for work got none; no live holder was "
                    f"displaced, so no late write after a takeover could be tried")
            else:
                missing.append("no live holder was displaced (by time, operator or reopen)")
        missing.extend(self._left_lines())
        return cov, missing

    def _left_lines(self) -> list[str]:
        """What the end state leaves that the history does not judge, one line each."""
        out: list[str] = []
        for key, n in sorted(self.left.items()):
            kind, _, rest = key.partition(":")
            items = _plural(n, "item")
            was = "was" if n == 1 else "were"
            if kind == "claimable":
                out.append(f"{items} {was} still claimable at the final read and handed to nobody; the history "
                           f"does not show that claims would never take {'it' if n == 1 else 'them'} (no claim found "
                           f"nothing to take for longer than a lease's ttl + grace after a read listed {'it' if n == 1 else 'them'})")
            elif kind == "leased_live":
                out.append(f"{items} {was} still leased under a live lease at the final read: the run ended before "
                           f"{'its holder' if n == 1 else 'their holders'} finished or the lease lapsed")
            elif kind == "leased_lapsed":
                out.append(f"{items} {was} still leased under a lapsed lease at the final read, and no claim after "
                           f"the lapse (and after the ledger's monitor ran) found nothing to take: the history does "
                           f"not show whether {'it comes' if n == 1 else 'they come'} back")
            elif kind == "held":
                out.append(f"{items} {was} still held (no lease expiry) by a worker that was not killed: the run ended "
                           f"before {'it was' if n == 1 else 'they were'} finished")
            elif kind == "held_dead":
                out.append(f"{items} {was} held (no lease expiry) by killed workers at the end, and no operator "
                           f"recovery ran after the kill: the history does not show whether "
                           f"{'it comes' if n == 1 else 'they come'} back")
            elif kind == "parked_due":
                status, _, movers = rest.partition(":")
                out.append(f"{items} {was} still {status} past {'its' if n == 1 else 'their'} due time at the final "
                           f"read, and no {movers.replace('/', ' or ')} ran after it was due: the history does not "
                           f"show whether {'it comes' if n == 1 else 'they come'} back")
            elif kind == "parked_no_due":
                status, _, fields = rest.partition(":")
                out.append(f"{items} {was} left {status} with no due time ({fields.replace('/', ', ')}): nothing "
                           f"shows when, or whether, {'it comes' if n == 1 else 'they come'} back")
            else:
                out.append(f"{items} ended in status {rest!r}, which the contract does not name: the checker cannot "
                           f"judge {'it' if n == 1 else 'them'}")
        return out

    # -- everything
    def run(self) -> Verdict:
        self.index()
        permitted: Counter[int] = Counter()
        reclaimed: Counter[str] = Counter()
        item_grants: dict[str, list[Grant]] = {}
        for it in self.items.values():
            grants = self.grants(it)
            if len(grants) > 1:  # these need a second grant
                self.split(it, grants)
                self.stale(it, grants)
                self.displaced(it, grants)
            if grants:
                item_grants[it.work_id] = grants
            self.terminal(it)
            if it.effects:
                self.duplicates(it, permitted)
            if it.refused_closes or (it.creates and it.creates[0].outcome == "refused"):
                self.refused_applied(it)
            self.lost(it, grants, reclaimed)
        if not self.cov["late_write_after_takeover"] and not self.cov["holder_displaced"]:
            self.refused_takeovers(item_grants)  # only then does it matter (see coverage())
        self.effects_then_kill()
        self.anomalies.sort(key=lambda a: (CLASSES.index(a.kind), _first_t(a), a.work_id))
        self.observe(permitted, reclaimed)
        coverage, missing = self.coverage()
        return Verdict(self.anomalies, self.observations, dict(sorted(self.counts.items())), coverage, missing)

    def observe(self, permitted: Counter[int], reclaimed: Counter[str]) -> None:
        n = self.counts
        n["operations"] = len(self.ops)
        n["items"] = sum(1 for it in self.items.values() if it.creates)
        for fault, k in self.nemesis.items():
            n[f"nemesis_{fault}"] = k
        n["retries"] = _retries(self.ops, self.R.claims)
        if self.final is not None:
            st = Counter(w.get("status") for w in self.final.items.values() if isinstance(w, dict))
            n["items_done"] = st.get(self.R.success, 0)
            for s, k in st.items():
                n[f"final_{s}"] = k
        faults = ", ".join(f"{k} {f}{'s' if k != 1 else ''}" for f, k in sorted(self.nemesis.items()))
        after = f" after {faults}" if faults else ""
        if permitted:
            items = sum(permitted.values())
            most = max(permitted)
            times = "twice" if most == 2 else f"up to {most} times"
            why = ("permitted by at-least-once" if self.meta.delivery == "at-least-once"
                   else "each after an operator requeue, which runs the work again")
            self.observations.append(f"effects ran {times} for {items} item{'s' if items != 1 else ''}{after}; {why}")
            n["duplicates_permitted"] = items
        for act, k in sorted(reclaimed.items()):
            self.observations.append(f"{k} item{'s' if k != 1 else ''} came back through the operator's {act}; "
                                     f"permitted by reclaim={self.meta.reclaim}")
        for st, k in sorted(self.parked_ahead.items()):
            self.observations.append(f"{_plural(k, 'item')} left {st} at the end, due after the final read: the "
                                     f"contract lets {'it' if k == 1 else 'them'} wait until then")
        self._late_writes()
        indef = n.get("op_indefinite", 0)
        if indef:
            self.observations.append(f"{indef} operation{'s' if indef != 1 else ''} had an indefinite outcome; "
                                     f"each was treated as possibly done unless a later read showed it")
        self.observations.append(f"{n['operations']} operations on {_plural(n['items'], 'item')}{after}; "
                                 f"{_plural(n.get('items_done', 0), 'item')} done at the end")


    def _late_writes(self) -> None:
        """What the writes of cut-off workers did: those sent while the worker's host was partitioned
        (between a ``partition`` naming the worker and the ``heal`` of its host), by outcome."""
        if not self.cuts:
            return
        windows: dict[Any, list[tuple[float, float]]] = defaultdict(list)
        open_cuts: dict[Any, list[tuple[Any, float]]] = defaultdict(list)  # host -> (process, cut at)
        for fault, t, process, host in sorted(self.cuts, key=lambda c: c[1]):
            if fault == "partition":
                open_cuts[host].append((process, t))
            else:
                for process, t0 in open_cuts.pop(host, []):
                    windows[process].append((t0, t))
        for cut in open_cuts.values():  # never healed in the history
            for process, t0 in cut:
                windows[process].append((t0, INF))
        outcome: Counter[str] = Counter()
        for op in self.ops:
            if op.name in self.R.token_writes and any(a <= op.t0 < b for a, b in windows.get(op.process, ())):
                outcome[op.outcome] += 1
        total = sum(outcome.values())
        self.counts["late_writes"] = total
        for k, v in outcome.items():
            self.counts[f"late_writes_{k}"] = v
        if total:
            parts = ", ".join(f"{outcome[k]} {k}" for k in ("ok", "refused", "indefinite") if outcome[k])
            self.observations.append(f"{_plural(total, 'write')} sent by cut-off workers during a partition: {parts}")
