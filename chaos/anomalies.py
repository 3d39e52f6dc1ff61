"""The safety checker: anomalies in a recorded history, each with the few records that prove it.

:func:`check` is pure and offline: it reads a :class:`~ledgercheck.chaos.history.History` and
returns a :class:`Verdict`.  It never trusts what an implementation declares beyond what the
declaration permits (duplicates under at-least-once, operator reclaim under reclaim=operator),
and it never raises an alarm from an operation that may not have happened:

* an ``ok`` completion happened; a ``refused`` one did not; an ``indefinite`` one (or an invoke
  with no completion: the process was killed) may or may not have happened.  An indefinite
  operation counts as happened only when a later observation shows it (its lease token in a
  later snapshot, its close-out's status, result and time in a later snapshot).
* order between processes is real time: an operation whose completion ``t`` is before another's
  invoke ``t`` happened before it.  Ownership intervals are ledger time: a grant owns an item
  from its start until ``lease_expires_at + grace`` (extended by renewals), or until a release.

Anomaly classes (docs/safety.md shows each with a real excerpt): ``lost_work``,
``duplicate_effect``, ``split_ownership``, ``stale_write_accepted``, ``terminal_changed``,
``stuck_work``.  Every anomaly carries an ``excerpt``: the minimal records that prove it (the
meta record is implied), and ``context``: records that help a reader but are not needed.

The checker indexes the history by item in one pass and then looks at each item alone, so it
runs in time linear in the history (sorting each item's few grants aside).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import msgspec

from .history import EffectRow, Final, History, Meta, Nemesis, Record, no_gc, to_dict

CLASSES = ("lost_work", "duplicate_effect", "split_ownership", "stale_write_accepted", "terminal_changed",
           "stuck_work")
TERMINAL = frozenset({"done", "failed", "timeout", "cancelled"})
LEASED = frozenset({"running"})
CLAIMABLE = frozenset({"queued"})  # a claim takes work in these statuses (core.claim.empty)
READS = frozenset({"get", "list", "events"})  # operations that move nothing
# Not terminal, but not lost either: claimable now or later, or parked on a wait with a deadline.
COMES_BACK = frozenset({"queued", "retry_scheduled", "waiting_user", "waiting_external"})
GRANTS = frozenset({"claim", "resume"})
RELEASES = frozenset({"close_out", "fail", "set_waiting"})  # a holder giving its lease back (by token)
TOKEN_WRITES = frozenset({"close_out", "renew", "fail", "set_waiting"})
MONITOR = frozenset({"expire", "recover"})  # may take lapsed leases
REQUEUES = frozenset({"requeue", "recover"})  # may move a terminal item back to queued
OPERATOR = "operator"
# what the index keeps aside: 1 a monitor op, 2 an op that may requeue terminal items
_ROLES = {name: (name in MONITOR) | (name in REQUEUES) << 1 for name in MONITOR | REQUEUES}
INF = math.inf


# ------------------------------------------------------------------------------------ results
@dataclass(frozen=True)
class Anomaly:
    kind: str  # one of CLASSES
    work_id: str
    explanation: str
    excerpt: tuple[Record, ...]
    context: tuple[Record, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"class": self.kind, "work_id": self.work_id, "explanation": self.explanation,
                "excerpt": [_line_dict(r) for r in self.excerpt],
                "context": [_line_dict(r) for r in self.context]}


@dataclass
class Verdict:
    anomalies: list[Anomaly] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.anomalies

    def by_class(self) -> dict[str, list[Anomaly]]:
        out: dict[str, list[Anomaly]] = {}
        for a in self.anomalies:
            out.setdefault(a.kind, []).append(a)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "anomalies": [a.to_json() for a in self.anomalies],
                "summary": {k: len(v) for k, v in self.by_class().items()},
                "observations": list(self.observations), "counts": dict(self.counts)}


def _line_dict(rec: Record) -> dict[str, Any]:
    d = to_dict(rec)
    if rec.line:
        d["line"] = rec.line
    return d


# ---------------------------------------------------------------------------------- the index
class Op(msgspec.Struct, gc=False, eq=False):
    """One operation: its invoke and (if any) its completion, by their rows in the history.  A
    msgspec struct: the index makes one per operation, and builds it in C (no Python call);
    eq=False keeps identity comparison and hashing, gc=False because an operation refers only to
    JSON values (no cycle can go through it)."""

    inv: int  # the row of the invoke
    comp: int | None  # the row of the completion
    name: str
    process: str
    args: dict[str, Any]
    t0: float
    t1: float  # INF for an operation that never completed: it may have taken effect at any later time
    now: float | None  # the ledger time it was asked at, if known
    outcome: str  # ok | refused | indefinite (also for one that never completed)
    result: Any
    work_id: str | None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    @property
    def maybe(self) -> bool:
        """Did or may have taken effect."""
        return self.outcome != "refused"

    @property
    def token(self) -> Any:
        a = self.args
        return a.get("token", a.get("lease_token"))


class Grant(msgspec.Struct, gc=False, eq=False):
    """One acquisition of an item's lease (claim or resume) that happened.  A msgspec struct, as
    Op: built in C; compared by identity."""

    op: Op | None  # None: seen only in a snapshot, no operation of the history is known to have made it
    owner: Any
    token: Any
    version: int | None
    start: float | None  # ledger time of the acquire
    expires: float | None
    seen: Op | None = None  # for an indefinite grant: the operation whose result showed it
    seen_final: bool = False
    killed: Nemesis | None = None  # its caller was killed then: an in-flight grant was done by that time
    renewals: list[tuple[float, float, Op]] = msgspec.field(default_factory=list)  # (completed t, expires, op)
    releases: list[Op] = msgspec.field(default_factory=list)

    @property
    def t_done(self) -> float:
        """When the grant is known to have happened (real time)."""
        if self.op is not None and self.op.ok:
            return self.op.t1
        return min(self.seen.t1 if self.seen is not None else INF, self.killed.t if self.killed is not None else INF)

    def proof(self) -> tuple[Op | Record, ...]:
        ops: list[Op | Record] = [] if self.op is None else [self.op]
        if self.seen is not None and (self.op is None or not self.op.ok):
            ops.append(self.seen)
        if self.killed is not None and (self.op is None or not self.op.ok) and \
                (self.seen is None or self.seen.t1 > self.killed.t):
            ops.append(self.killed)
        return tuple(ops)


class Snap(msgspec.Struct, gc=False, eq=False):
    """An item's snapshot as an operation (or the final read) returned it.  A struct: the index
    makes one for nearly every operation, and builds it in C, untracked by the collector."""

    work: Mapping[str, Any]
    op: Op | None  # None: the final read
    t0: float
    t1: float


class _Item(msgspec.Struct, gc=False, eq=False):
    """What the history shows of one item (a struct: built in C)."""

    work_id: str
    final: dict[str, Any] | None = None  # the final read's snapshot
    ops: list[Op] = msgspec.field(default_factory=list)
    snaps: list[Snap] = msgspec.field(default_factory=list)
    creates: list[Op] = msgspec.field(default_factory=list)
    effects: dict[str, list[int]] = msgspec.field(default_factory=dict)  # key -> the rows of its applied effects


_T1 = attrgetter("t1")
_INVOKE_FIELDS = attrgetter("op", "process", "args", "t", "id", "now")
_COMPLETE_FIELDS = attrgetter("outcome", "t", "result")


def _num(v: Any) -> float | None:
    t = type(v)
    return float(v) if t is float or t is int else None


class _Checker:
    def __init__(self, history: History) -> None:
        self.h = history
        self.meta: Meta = history.meta
        self.final: Final | None = history.final
        self.grace = self.meta.grace
        self.ttl = self.meta.ttl
        self.wall = (self.meta.adapter or {}).get("clock") == "wall"
        self.eps = 1e-3 if self.wall else 1e-9
        self.items: dict[str, _Item] = {}
        self.ops: list[Op] = []
        self.nemesis: Counter[str] = Counter()
        self.cuts: list[tuple[str, float, Any, Any]] = []  # partition/heal records: (fault, t, process, host)
        self.last_fault_t = -INF  # the real time of the last fault the nemesis injected
        self._last_global: float | None = None  # see _index_monitor_moves
        self._monitor_moved: dict[str, Op] = {}  # item -> the last monitor/requeue that named it as moved
        self.kills: dict[str, list[tuple[float, int]]] = defaultdict(list)  # process -> (t, row) of each kill
        self.monitor_ops: list[Op] = []
        self.claims_null: list[Op] = []
        self.requeues: list[Op] = []  # monitor/operator ops that may requeue terminal items (global)
        self.pending_creates: dict[tuple[Any, Any], list[Op]] = defaultdict(list)
        self.open_claims: dict[Any, list[Op]] = defaultdict(list)  # owner -> indefinite claims with no work_id
        self.max_now = -INF
        self.max_now_op: Op | None = None
        self.anomalies: list[Anomaly] = []
        self.split_pairs: set[tuple[int, int]] = set()  # (first, second) grants reported as split
        self.actions: tuple[dict[str, tuple[int, dict[str, Any]]], list[tuple[int, dict[str, Any]]]] | None = None
        self.observations: list[str] = []
        self.counts: Counter[str] = Counter()

    def item(self, work_id: str) -> _Item:
        it = self.items.get(work_id)
        if it is None:
            it = self.items[work_id] = _Item(work_id)
        return it

    def records(self, x: Op | Record) -> tuple[Record, ...]:
        """The records of an operation (its invoke and completion), or the record itself."""
        if not isinstance(x, Op):
            return (x,)
        rec = self.h.record
        return (rec(x.inv),) if x.comp is None else (rec(x.inv), rec(x.comp))

    # -- pass 1: pair operations, index by item
    def index(self) -> None:
        h = self.h
        rows = h.rows
        invokes, completes, others = h.op_rows()
        applied = deduplicated = 0
        nemesis, kills = self.nemesis, self.kills
        item = self.item
        effect_row = EffectRow
        for i in others:
            obj = rows[i]
            if type(obj) is effect_row:
                if obj.applied:
                    effects = item(obj.work_id).effects
                    key = obj.key
                    if key in effects:
                        effects[key].append(i)
                    else:
                        effects[key] = [i]
                    applied += 1
                else:
                    deduplicated += 1
            else:
                fault = obj.fault
                nemesis[fault] += 1
                if obj.t > self.last_fault_t:
                    self.last_fault_t = obj.t
                if fault == "kill" and obj.process:
                    kills[obj.process].append((obj.t, i))
                elif fault in ("partition", "heal"):
                    self.cuts.append((fault, obj.t, obj.process, obj.point))
        if applied:
            self.counts["effects_applied"] = applied
        if deduplicated:
            self.counts["effects_deduplicated"] = deduplicated
        ops = self.ops
        append = ops.append
        items = self.items
        n_ok = n_refused = 0
        max_now, max_op = -INF, None
        claims_null = self.claims_null
        monitor_ops = self.monitor_ops
        requeues = self.requeues
        roles = _ROLES
        completion = completes.get
        fields = _INVOKE_FIELDS
        cfields = _COMPLETE_FIELDS
        nums = (int, float)
        new_op = Op
        new_snap = Snap
        for ii in invokes:
            obj = rows[ii]
            name, process, args, t0, oid, now = fields(obj)
            if type(now) is not float:  # the ledger time of the invoke, else of its arguments
                if now is None:
                    now = args.get("now")
                if type(now) is not float and now is not None:
                    now = float(now) if isinstance(now, nums) else None
            wid = args.get("work_id")
            work = None  # the snapshot of the item the operation returned, if any
            ci = completion(oid)
            if ci is None:
                outcome, t1, r = "indefinite", INF, None
            else:
                outcome, t1, r = cfields(rows[ci])
                if outcome == "ok":
                    n_ok += 1
                    if type(r) is dict:
                        w = r.get("work") if name == "create" else r
                        if type(w) is dict and "status" in w and "work_id" in w:
                            work = w
                            if wid is None:
                                wid = w["work_id"]
                elif outcome == "refused":
                    n_refused += 1
            if type(wid) is not str and wid is not None:
                wid = str(wid)
            op = new_op(ii, ci, name, process, args, t0, t1, now, outcome, r, wid)
            append(op)
            if now is not None and now > max_now and outcome != "refused":
                max_now, max_op = now, op
            it = None
            if work is not None:
                w_id = work["work_id"]
                it = items.get(w_id)
                if it is None:
                    it = items[w_id] = _Item(w_id)
                it.snaps.append(new_snap(work, op, t0, t1))
            elif outcome == "ok":
                if r is None:
                    if name == "claim":
                        claims_null.append(op)
                elif name == "list" and type(r) is list:
                    for w in r:
                        if isinstance(w, dict) and "work_id" in w and "status" in w:
                            item(w["work_id"]).snaps.append(new_snap(w, op, t0, t1))
            if name in roles:
                role = roles[name]
                if role & 1:
                    monitor_ops.append(op)
                if role & 2:
                    requeues.append(op)
            if wid is not None:
                if it is None or it.work_id != wid:
                    it = items.get(wid)
                    if it is None:
                        it = items[wid] = _Item(wid)
                it.ops.append(op)
                if name == "create":
                    it.creates.append(op)
            elif name == "create":
                self.pending_creates[(args.get("source_system"), args.get("source_id"))].append(op)
            elif name == "claim" and outcome == "indefinite":
                self.open_claims[args.get("owner")].append(op)
        outcomes = {"ok": n_ok, "refused": n_refused, "indefinite": len(ops) - n_ok - n_refused}
        self.max_now, self.max_now_op = max_now, max_op
        for k, v in outcomes.items():
            if v:
                self.counts[f"op_{k}"] = v
        if self.final is not None:
            for wid, w in self.final.items.items():
                self.item(wid).final = w if isinstance(w, dict) else None
        if self.pending_creates:
            self._acknowledge_indefinite_creates()

    def _acknowledge_indefinite_creates(self) -> None:
        """An indefinite create (no work_id known) is acknowledged once its unit shows up anywhere."""
        source_ids: dict[tuple[Any, Any], str] = {}
        wanted = set(self.pending_creates)

        def look(works: Iterable[Any]) -> None:
            for w in works:
                if isinstance(w, dict):
                    src = (w.get("source_system"), w.get("source_id"))
                    if src in wanted and src not in source_ids:
                        source_ids[src] = str(w.get("work_id"))

        if self.final is not None:  # the final read holds nearly every item: look there first
            look(self.final.items.values())
        if len(source_ids) < len(wanted):  # items the final read does not have (lost?) seen earlier
            final = self.final.items if self.final is not None else {}
            look(s.work for wid, it in self.items.items() if final.get(wid) is None for s in it.snaps)
        for src, ops in self.pending_creates.items():
            wid = source_ids.get(src)
            if wid is None:
                continue
            it = self.item(wid)
            for op in ops:
                op.work_id = wid
                it.creates.append(op)
                it.ops.append(op)
            it.ops.sort(key=lambda o: o.t0)


    @property
    def final_now(self) -> float:
        rec = self.final.recovery if self.final is not None else {}
        now = _num(rec.get("now")) if isinstance(rec, dict) else None
        return now if now is not None else self.max_now

    def final_snap(self, work_id: str) -> Mapping[str, Any] | None:
        if self.final is None:
            return None
        w = self.final.items.get(work_id)
        return w if isinstance(w, dict) else None

    def final_excerpt(self, work_id: str, action: Mapping[str, Any] | None = None) -> Final:
        """The final record cut down to one item (and the recovery action naming it)."""
        assert self.final is not None
        items = {work_id: self.final.items[work_id]} if work_id in self.final.items else {}
        rec = {k: v for k, v in self.final.recovery.items() if k != "actions"}
        if action is not None:
            rec["actions"] = [action]
        return Final(t=self.final.t, items=items, recovery=rec, line=self.final.line)

    def add(self, kind: str, work_id: str, explanation: str, ops: Iterable[Op | Record | None],
            context: Iterable[Op | Record | None] = ()) -> None:
        def flat(xs: Iterable[Op | Record | None]) -> list[Record]:
            out: list[Record] = []
            for x in xs:
                if x is None:
                    continue
                out.extend(self.records(x))
            return out

        excerpt = _ordered(flat(ops))
        seen = {id(r) for r in excerpt}
        ctx = [r for r in _ordered(flat(context)) if id(r) not in seen]
        self.anomalies.append(Anomaly(kind, work_id, explanation, tuple(excerpt), tuple(ctx)))

    # -- grants, renewals, releases of one item
    def grants(self, it: _Item) -> list[Grant]:
        grants: list[Grant] = []
        known: set[Any] = set()
        writes: list[Op] = []  # the operations that write with a lease token
        for op in it.ops:
            name = op.name
            if name in TOKEN_WRITES:
                writes.append(op)
            elif name in GRANTS and op.outcome == "ok" and isinstance(op.result, dict):
                w = op.result
                tok = w.get("lease_token")
                if tok is None:
                    continue
                start = _num(w.get("started_at"))
                if start is None:
                    start = op.now if not self.wall or op.now is None else op.now + (op.t1 - op.t0)
                owner = w.get("owner") or op.args.get("owner") or op.process  # some ledgers do not say
                grants.append(Grant(op, owner, tok, w.get("lease_version"), start,
                                    _num(w.get("lease_expires_at"))))
                known.add(tok)
        # Tokens that show up in snapshots but no ok grant handed out: an indefinite grant took effect.
        for s in it.snaps:
            tok = s.work.get("lease_token")
            if tok is not None and tok not in known and s.work.get("status") in LEASED:
                self._seen_grant(it, grants, s.work, s)
                known.add(tok)
        fw = it.final
        if fw is not None:
            tok = fw.get("lease_token")
            if tok is not None and tok not in known and fw.get("status") in LEASED:
                self._seen_grant(it, grants, fw, None)
                known.add(tok)
        if len(grants) > 1:
            grants.sort(key=lambda g: (g.version if isinstance(g.version, int) else INF,
                                       g.start if g.start is not None else INF,
                                       g.op.t0 if g.op is not None else INF))
        if not known:
            return grants  # no token to write with: no renewal or release to attach
        only = grants[0] if len(grants) == 1 else None
        for op in writes:
            a = op.args
            tok = a.get("token", a.get("lease_token"))
            if tok is None or tok not in known:
                continue
            # holder() of a single grant with the token is that grant, whenever the write was made
            g = only if only is not None else self.holder(grants, tok, op.t0, op.process)
            if g is None:
                continue
            if op.name == "renew":
                if op.outcome == "ok" and isinstance(op.result, dict):
                    exp = _num(op.result.get("lease_expires_at"))
                    if exp is not None:
                        g.renewals.append((op.t1, exp, op))
            elif op.name in RELEASES and op.outcome != "refused":
                g.releases.append(op)
        return grants

    def _seen_grant(self, it: _Item, grants: list[Grant], w: Mapping[str, Any], s: Snap | None) -> None:
        """Add the grant a snapshot shows (s; None: the final read's) that no ok grant handed out."""
        seen_t = s.t1 if s is not None else INF
        src = self._grant_op(it, w.get("owner"), seen_t)
        exp = _num(w.get("lease_expires_at"))
        start = _num(w.get("started_at"))
        if start is None and src is not None:
            start = src.now
        killed = None
        if src is not None and src.comp is None:
            killed = next((self.h.record(i) for t, i in self.kills.get(src.process, ()) if t > src.t0), None)
        owner = w.get("owner") or (src.args.get("owner") or src.process if src is not None else None)
        grants.append(Grant(src, owner, w.get("lease_token"), w.get("lease_version"), start, exp,
                            seen=s.op if s is not None else None, seen_final=s is None, killed=killed))

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

    def _grant_op(self, it: _Item, owner: Any, before: float) -> Op | None:
        """The indefinite claim or resume by `owner` that may have made a grant seen at `before`."""
        best: Op | None = None
        cands = [op for op in it.ops if op.name in GRANTS and not op.ok and op.maybe]
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
        return any(op.process == OPERATOR and op.maybe and op.t1 > after_t and op.t0 < before_t for op in ops)

    def _monitor_lapsed(self, m: Op, after_t: float, before_t: float, live_until: float) -> bool:
        """A monitor op that may have run between two grants at a ledger time the first had lapsed by."""
        return (m.maybe and m.t1 > after_t and m.t0 < before_t and m.now is not None
                and m.now > live_until - self.eps and m.name in MONITOR)

    # -- stale writes accepted
    def stale(self, it: _Item, grants: list[Grant]) -> None:
        for op in it.ops:
            if op.name not in TOKEN_WRITES or not op.maybe or op.token is None:
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
        if op.name != "close_out" or not op.ok or op.args.get("status") not in TERMINAL or not b.t_done < op.t1:
            return False
        for r in (*it.ops, *self.requeues):
            if r.name in REQUEUES and r.maybe and r.t1 > op.t0 and r.t0 < b.t_done:
                return False
        return True

    def _close_seen(self, it: _Item, op: Op) -> Snap | None:
        """A later snapshot showing the write of an indefinite close-out or fail, if any."""
        if op.name != "close_out" or op.now is None:
            return None
        want = (op.args.get("status"), op.now, op.args.get("result"))
        for other in it.ops:  # another close-out that would leave the same trace makes it ambiguous
            if other is not op and other.name == "close_out" and other.maybe and \
                    (other.args.get("status"), other.now, other.args.get("result")) == want:
                return None
        snaps = [s for s in it.snaps if s.t0 > op.t0]
        fw = it.final
        if fw is not None:
            snaps.append(Snap(fw, None, INF, INF))
        for s in snaps:
            w = s.work
            if (w.get("status"), _num(w.get("finished_at")), w.get("result")) == want:
                return s
        return None

    # -- terminal records changed
    def terminal(self, it: _Item) -> None:
        for s in it.snaps:
            if s.work.get("status") in TERMINAL:
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
                if st in TERMINAL:
                    first = s
                continue
            if s.t0 <= first.t1:
                continue  # concurrent with the terminal read: not ordered after it
            if st == first.work.get("status"):
                continue
            if self._requeued_between(it, first, s):
                first = s if st in TERMINAL else None
                continue
            was = first.work.get("status")
            why = (f"{it.work_id} was {was} and later {st}, with no operator requeue (or recovery) "
                   f"between the two reads")
            later: Op | Record | None = s.op if s.op is not None else self.final_excerpt(it.work_id)
            self.add("terminal_changed", it.work_id, why, [first.op, later])
            return

    def _requeued_between(self, it: _Item, a: Snap, b: Snap) -> bool:
        for op in it.ops:
            if op.name in REQUEUES and op.maybe and op.t1 > a.t0 and op.t0 < b.t1:
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
        return any(op.name == "requeue" and op.maybe and op.t1 > t1 and op.t0 < t2 for op in it.ops)

    # -- lost and stuck work
    def lost(self, it: _Item, grants: list[Grant], reclaimed: Counter[str]) -> None:
        if self.final is None:
            return
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
        w = it.final
        if w is not None and w.get("status") in CLAIMABLE:
            self._stranded(it)
            return
        if w is not None and w.get("status") not in LEASED:
            return  # terminal, parked on a wait, or a status this checker does not know
        ack = next((op for op in it.creates if op.ok), None)
        proof: list[Op | Record | None] = [ack]
        if ack is None and it.creates:  # an indefinite create, seen later
            ack = it.creates[0]
            seen = next((s for s in it.snaps if s.op is not None and s.op is not ack), None)
            proof = [ack, seen.op if seen is not None else None]
        last = [op for op in it.ops if op is not ack][-2:]
        fin = self.final_excerpt(it.work_id)
        if w is None:
            if it.creates:
                why = f"{it.work_id} was created (acknowledged) but is missing from the final read"
                self.add("lost_work", it.work_id, why, [*proof, fin], last)
            return
        st = w.get("status")
        exp = _num(w.get("lease_expires_at"))
        if exp is None or not (self.final_now > exp + self.grace + self.eps):
            return  # a holder may still be at work: nothing proves it will not come back
        path = str(self.final.recovery.get("path") or "")
        if self.meta.reclaim == "lease" and path != "operator":
            self._stuck(it, grants, w, exp, last)
            return
        if self.meta.reclaim == "never" or path in ("operator", "never"):
            why = (f"{it.work_id} is still {st} under a lease that lapsed at {fmt_num(exp + self.grace)} after the "
                   f"{path or 'declared ' + self.meta.reclaim} recovery path ran: it is neither finished nor claimable")
            clock = None if _num(self.final.recovery.get("now")) is not None else self.max_now_op
            self.add("lost_work", it.work_id, why, [clock, fin], [*proof, *last])

    def _stranded(self, it: _Item) -> None:
        """The final read shows the item claimable, yet it is handed to nobody: after the last thing
        that could move it (its own operations, any monitor or requeue, any fault), a read listed it
        claimable, and then claims found nothing to take for longer than a lease's lapse (so no
        late write from before, and no lease the ledger keeps to itself, explains it)."""
        if self._last_global is None:
            self._index_monitor_moves()
        moves = max((op.t1 for op in it.ops if op.name not in READS), default=-INF)
        mover = self._monitor_moved.get(it.work_id)
        horizon = max(self.last_fault_t, self._last_global, moves, -INF if mover is None else mover.t1)
        if horizon == INF:
            return  # an operation on it never completed: it may still take effect
        seen = next((s for s in it.snaps if s.op is not None and s.t0 > horizon
                     and s.work.get("status") in CLAIMABLE), None)
        if seen is None:
            return
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
                         [*[op for op in it.ops if op.name not in READS][-2:], mover])
                return

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

    def _stuck(self, it: _Item, grants: list[Grant], w: Mapping[str, Any], exp: float, last: list[Op]) -> None:
        """Declared reclaim=lease, the item is still leased under a lapsed lease at the end: proven stuck
        when, after the lapse, the ledger's monitor ran (if it has one) and then a claim found nothing."""
        lapse = exp + self.grace
        g = next((g for g in grants if g.token == w.get("lease_token")), None)
        if g is None or g.op is None:
            self.counts["leased_lapsed_at_end"] += 1
            return
        after = g.t_done
        mon = None
        if self.monitor_ops:
            mon = next((m for m in self.monitor_ops if m.ok and m.t0 > after and m.now is not None
                        and m.now > lapse + self.eps), None)
            if mon is None:
                self.counts["leased_lapsed_at_end"] += 1
                return
        start = mon.t1 if mon is not None else after
        # The final read shows the same lease token, so the item was leased under it all along.
        claim = next((c for c in self.claims_null if c.t0 > start and c.now is not None
                      and c.now > lapse + self.eps and not c.args.get("work_id")), None)
        if claim is None:
            self.counts["leased_lapsed_at_end"] += 1
            return
        monitor = f"the monitor's {mon.name} at {fmt_num(mon.now)} and " if mon is not None else ""
        why = (f"{it.work_id}'s lease (owner {g.owner}, lease_version {g.version}) lapsed at {fmt_num(lapse)}; "
               f"{monitor}a claim at {fmt_num(claim.now)} found nothing to take, and at the end it is still "
               f"{w.get('status')} under that lease: it does not come back without an operator action "
               f"(expire/recover, then requeue)")
        self.add("stuck_work", it.work_id, why, [*g.proof(), claim, self.final_excerpt(it.work_id)], [mon, *last])

    # -- everything
    def run(self) -> Verdict:
        self.index()
        permitted: Counter[int] = Counter()
        reclaimed: Counter[str] = Counter()
        for it in self.items.values():
            grants = self.grants(it)
            if len(grants) > 1:  # both need a second grant
                self.split(it, grants)
                self.stale(it, grants)
            self.terminal(it)
            if it.effects:
                self.duplicates(it, permitted)
            self.lost(it, grants, reclaimed)
        self.anomalies.sort(key=lambda a: (CLASSES.index(a.kind), _first_t(a), a.work_id))
        self.observe(permitted, reclaimed)
        return Verdict(self.anomalies, self.observations, dict(sorted(self.counts.items())))

    def observe(self, permitted: Counter[int], reclaimed: Counter[str]) -> None:
        n = self.counts
        n["operations"] = len(self.ops)
        n["items"] = sum(1 for it in self.items.values() if it.creates)
        for fault, k in self.nemesis.items():
            n[f"nemesis_{fault}"] = k
        n["retries"] = _retries(self.ops)
        if self.final is not None:
            st = Counter(w.get("status") for w in self.final.items.values() if isinstance(w, dict))
            n["items_done"] = st.get("done", 0)
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
        if n.get("leased_lapsed_at_end"):
            k = n["leased_lapsed_at_end"]
            self.observations.append(f"{k} item{'s' if k != 1 else ''} still leased under a lapsed lease at the end; "
                                     f"nothing in the history proves they would not come back")
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
            if op.name in TOKEN_WRITES and any(a <= op.t0 < b for a, b in windows.get(op.process, ())):
                outcome[op.outcome] += 1
        total = sum(outcome.values())
        self.counts["late_writes"] = total
        for k, v in outcome.items():
            self.counts[f"late_writes_{k}"] = v
        if total:
            parts = ", ".join(f"{outcome[k]} {k}" for k in ("ok", "refused", "indefinite") if outcome[k])
            self.observations.append(f"{_plural(total, 'write')} sent by cut-off workers during a partition: {parts}")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def fmt_num(x: float) -> str:
    """A time or duration for a sentence: up to millisecond precision, no trailing zeros."""
    return f"{x:.3f}".rstrip("0").rstrip(".")


def _after(b: Grant, a: Grant) -> bool:
    """Was grant b made after grant a?  By lease_version when the ledger counts them, else by
    ledger time, else by when they were asked for."""
    if isinstance(a.version, int) and isinstance(b.version, int) and a.version != b.version:
        return b.version > a.version
    if a.start is not None and b.start is not None and a.start != b.start:
        return b.start > a.start
    return a.op is not None and b.op is not None and b.op.t0 > a.op.t0


def _retries(ops: list[Op]) -> int:
    """Operations a process tried again right after a try that did not come back ok."""
    last: dict[str, Op] = {}
    before = last.get
    n = 0
    for op in ops:
        process = op.process
        prev = before(process)
        if prev is not None and prev.outcome != "ok" and prev.name == op.name and \
                (op.name == "claim" or prev.work_id == op.work_id):
            n += 1
        last[process] = op
    return n


_RANK = {"meta": 0, "invoke": 1, "effect": 1, "nemesis": 1, "complete": 2, "final": 9}


def _ordered(recs: list[Record]) -> list[Record]:
    return sorted(recs, key=lambda r: (r.type == "final", r.line or 0, getattr(r, "t", 0.0), _RANK[r.type]))


def _first_t(a: Anomaly) -> float:
    return min((getattr(r, "t", INF) for r in a.excerpt), default=INF)


def _with_final(a: Anomaly, fin: Final) -> Anomaly:
    return Anomaly(a.kind, a.work_id, a.explanation, (*a.excerpt, fin), a.context)


def check(history: History) -> Verdict:
    """Every anomaly of the history, with the minimal excerpt proving each, and observations."""
    with no_gc():
        return _Checker(history).run()


def excerpt_history(history: History, anomaly: Anomaly) -> History:
    """The meta record plus an anomaly's excerpt, as a history of its own (to re-check it)."""
    return History.of([history.meta, *anomaly.excerpt], path=f"{history.path} (excerpt)")
