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
``stuck_work``, ``refused_but_applied`` (a definite refusal whose effect a later read shows).
Every anomaly carries an ``excerpt``: the minimal records that prove it (the meta record is
implied) plus its ``cause`` (the fault that lost an item, when the history has one), and
``context``: records that help a reader but are not needed.  The end state is judged: work the
final read leaves neither finished nor proven lost or stuck is named in ``missing``.

The verdict also says what the history exercised (``coverage``: claims and close-outs ok, items
finished, kills by named point, pauses, reopens, live holders displaced by time, operator or
reopen, late writes after a takeover, effects then killed, the final read) and what it did not
reach of what a verdict needs (``missing``); ``verdict`` is "anomalies", "inconclusive" or "no
anomaly".  Statuses and operation names come from the contract (:class:`Rules`).

The checker indexes the history by item in one pass and then looks at each item alone, so it
runs in time linear in the history (sorting each item's few grants aside); the coverage passes
find what happened around each grant, pause and kill by bisection over lists sorted by time.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import Any

import msgspec
from ledgercheck.spec import Spec, default_spec

from .history import EffectRow, Final, History, HistoryError, Meta, Nemesis, Record, no_gc, to_dict

CLASSES = ("lost_work", "duplicate_effect", "split_ownership", "stale_write_accepted", "terminal_changed",
           "stuck_work", "refused_but_applied")
OPERATOR = "operator"  # the process the campaign records an operator's recovery under
# What the checker reports as reached (Verdict.coverage); kill_at:<point> is added per named crash point.
SITUATIONS = ("claim_ok", "close_out_ok", "finished", "kill", "pause", "reopen", "holder_displaced",
              "displaced_by_time", "displaced_by_operator", "displaced_by_reopen", "late_write_after_takeover",
              "effect_then_kill", "final_read")
INF = math.inf
_PAST = {"kill": "killed", "pause": "paused", "partition": "cut off by a partition"}


# ------------------------------------------------------------------------------ the contract
@dataclass(frozen=True)
class Rules:
    """What the checker needs of the contract, read from the Spec (no status or operation name is
    written here): statuses by kind, operations by what they do to an item's lease and status, and
    for each status that waits for a time (a retry, a wait) the snapshot fields that say when."""

    terminal: frozenset[str]
    leased: frozenset[str]
    claimable: frozenset[str]  # what a claim takes (the grant that needs no work id: core.claim.empty)
    statuses: frozenset[str]
    # status -> (its due-time fields, the monitor operations that move it on once due): a retry
    # scheduled, a wait with a deadline; the fields an item enters the status with that the monitor's
    # move out of it reads
    parked: Mapping[str, tuple[tuple[str, ...], frozenset[str]]]
    creates: frozenset[str]
    grants: frozenset[str]  # take an item's lease (claim, resume)
    claims: frozenset[str]  # grants that need no work id: ask for any claimable work
    token_writes: frozenset[str]  # need the item's lease (renew, close-out, fail, set_waiting)
    releases: frozenset[str]  # need the lease and give it back
    close_outs: frozenset[str]  # releases that set a terminal status given as an argument
    renews: frozenset[str]
    monitor: frozenset[str]  # monitor operations that may take lapsed leases (expire, recover)
    requeues: frozenset[str]  # may move a terminal item back (requeue, recover)
    operator_requeues: frozenset[str]  # a transition that requeues one item by id (requeue)
    reads: frozenset[str]
    lists: frozenset[str]  # reads answering with a list of items

    @classmethod
    def of(cls, spec: Spec) -> Rules:
        ops = spec.operations
        terminal = frozenset(spec.terminal_statuses)
        leased = frozenset(s for s, st in spec.statuses.items() if st.leased)
        grants = frozenset(n for n, o in ops.items() if o.lease == "acquire")
        claims = frozenset(n for n in grants if not (ops[n].args.get("work_id") and ops[n].args["work_id"].required))
        claimable = frozenset(t.src for t in spec.transitions if set(t.ops) & claims)
        releasing = frozenset(n for n, o in ops.items() if o.requires_lease and o.lease == "release")
        close_outs = frozenset(n for n in releasing if any(a.type == "terminal_status" for a in ops[n].args.values()))
        requeue_ops = frozenset(o for t in spec.transitions if t.requeue for o in t.ops)
        times = {f for f, wf in spec.work_fields.items() if wf.type == "time"}

        def data(op: str, target: str) -> set[str]:
            ev = ops[op].event_for(target) if op in ops else None
            return set(spec.events[ev].data) if ev in spec.events else set()

        parked: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {}
        for s in spec.statuses:
            if s in terminal or s in leased or s in claimable:
                continue
            entering = set().union(*(data(o, s) for t in spec.transitions if t.dst == s for o in t.ops))
            movers = {(o, t.dst) for t in spec.transitions if t.src == s for o in t.ops
                      if o in ops and ops[o].kind == "monitor"}
            leaving = set().union(*(data(o, dst) for o, dst in movers))
            parked[s] = (tuple(sorted(entering & leaving & times)), frozenset(o for o, _ in movers))
        return cls(terminal=terminal, leased=leased, claimable=claimable, statuses=frozenset(spec.statuses),
                   parked=parked, creates=frozenset(n for n, o in ops.items() if o.kind == "create"),
                   grants=grants, claims=claims,
                   token_writes=frozenset(n for n, o in ops.items() if o.requires_lease), releases=releasing,
                   close_outs=close_outs, renews=frozenset(n for n, o in ops.items() if o.lease == "renew"),
                   monitor=frozenset(n for n, o in ops.items() if o.kind == "monitor" and o.lease == "release"),
                   requeues=requeue_ops,
                   operator_requeues=frozenset(o for o in requeue_ops if o in ops and ops[o].kind != "monitor"),
                   reads=frozenset(n for n, o in ops.items() if o.kind == "read"),
                   lists=frozenset(n for n, o in ops.items() if o.kind == "read" and o.returns == "work_list"))


_RULES: dict[int, tuple[Spec, Rules]] = {}


def rules_of(spec: Spec | None = None) -> Rules:
    """The Rules of a contract (the shipped one by default), worked out once per Spec."""
    spec = spec if spec is not None else default_spec()
    hit = _RULES.get(id(spec))
    if hit is None or hit[0] is not spec:
        hit = _RULES[id(spec)] = (spec, Rules.of(spec))
    return hit[1]


# ------------------------------------------------------------------------------------ results
@dataclass(frozen=True)
class Anomaly:
    kind: str  # one of CLASSES
    work_id: str
    explanation: str
    excerpt: tuple[Record, ...]
    context: tuple[Record, ...] = ()
    # records of the excerpt that say why rather than prove: the fault that lost an item (and the
    # grant it hit).  The rest of the excerpt is the proof, minimal on its own.
    cause: tuple[Record, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"class": self.kind, "work_id": self.work_id, "explanation": self.explanation,
                "excerpt": [_line_dict(r) for r in self.excerpt],
                "context": [_line_dict(r) for r in self.context],
                "cause": [_line_dict(r) for r in self.cause]}


@dataclass
class Verdict:
    anomalies: list[Anomaly] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    # how often each situation (SITUATIONS, kill_at:<point>) was reached, from the history alone
    coverage: dict[str, int] = field(default_factory=dict)
    # one line, in plain words, per required situation the history did not reach
    missing: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No anomaly was found (which is a pass only when nothing is missing: see verdict)."""
        return not self.anomalies

    @property
    def verdict(self) -> str:
        """``anomalies``, else ``inconclusive`` when a required situation was not reached, else
        ``no anomaly``."""
        if self.anomalies:
            return "anomalies"
        return "inconclusive" if self.missing else "no anomaly"

    def by_class(self) -> dict[str, list[Anomaly]]:
        out: dict[str, list[Anomaly]] = {}
        for a in self.anomalies:
            out.setdefault(a.kind, []).append(a)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "verdict": self.verdict, "anomalies": [a.to_json() for a in self.anomalies],
                "summary": {k: len(v) for k, v in self.by_class().items()},
                "observations": list(self.observations), "counts": dict(self.counts),
                "coverage": dict(self.coverage), "missing": list(self.missing)}


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
    # when the grant is known to have happened (real time): its ok completion, else the earlier of
    # the read that showed it and its caller's kill (set by done())
    t_done: float = INF

    def done(self) -> Grant:
        """Set t_done from what the grant is known by; returns the grant."""
        if self.op is not None and self.op.ok:
            self.t_done = self.op.t1
        else:
            self.t_done = min(self.seen.t1 if self.seen is not None else INF,
                              self.killed.t if self.killed is not None else INF)
        return self

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
    refused_closes: list[Op] | None = None  # its close-outs refused (found by grants())


_T1 = attrgetter("t1")
_FIRST = itemgetter(0)
_INVOKE_FIELDS = attrgetter("op", "process", "args", "t", "id", "now")
_COMPLETE_FIELDS = attrgetter("outcome", "t", "result")


def _num(v: Any) -> float | None:
    t = type(v)
    return float(v) if t is float or t is int else None


class _Timeline:
    """Operations by invoke time, to find those that overlap a stretch of real time without
    looking at the others (the checker asks once per grant or pause)."""

    def __init__(self, ops: Iterable[Op]) -> None:
        self.ops = sorted(ops, key=attrgetter("t0"))
        self.t0s = [op.t0 for op in self.ops]
        self.longest = max((op.t1 - op.t0 for op in self.ops if op.t1 != INF), default=0.0)
        self.open = [op for op in self.ops if op.t1 == INF]  # never answered: they may overlap anything later

    def overlapping(self, after: float, before: float) -> Iterator[Op]:
        """The operations with t1 > after and t0 < before."""
        lo_t = after - self.longest
        ops = self.ops
        for i in range(bisect_left(self.t0s, lo_t), bisect_left(self.t0s, before)):
            if ops[i].t1 > after:
                yield ops[i]
        for op in self.open:
            if op.t0 < lo_t:
                yield op

    def starting(self, after: float, before: float) -> Iterator[Op]:
        """The operations invoked after `after` and before `before`, in order."""
        ops = self.ops
        for i in range(bisect_right(self.t0s, after), bisect_left(self.t0s, before)):
            yield ops[i]


class _Checker:
    def __init__(self, history: History, rules: Rules) -> None:
        self.h = history
        self.R = rules
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
        # process -> (t, row, fault) of each fault that hit it (kill, pause, partition), in order
        self.hits: dict[str, list[tuple[float, int, str]]] = defaultdict(list)
        self.resumes: dict[str, list[float]] = defaultdict(list)  # process -> t of each resume
        self.reopens: list[tuple[float, int]] = []  # (t, row) of each reopen
        self.kill_points: Counter[str] = Counter()  # named crash point -> kills there
        self.effects_by: dict[str, list[tuple[float, str]]] = defaultdict(list)  # process -> (t, item) of its effects
        self.monitor_ops: list[Op] = []
        self.timed_ops: list[Op] = []  # monitor operations that move parked items on once due
        self.operator_ops: list[Op] = []  # the operator's operations on no one item (recover, expire, ...)
        self.claims_null: list[Op] = []
        self.claims_refused: list[Op] = []  # claims for any work refused (definite: nothing was handed out)
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
        self.cov: Counter[str] = Counter()  # situations reached (Verdict.coverage)
        self.left: Counter[str] = Counter()  # what the end state leaves that the history does not judge
        self.parked_ahead: Counter[str] = Counter()  # status -> items parked at the end until a time still ahead
        self.uncreated = 0  # items of the final read that no operation of the history created
        self._refused_by_owner: dict[Any, list[Op]] | None = None  # owner -> its refused claims for any work
        self._timelines: dict[str, _Timeline] = {}
        self._times: dict[int, list[float]] = {}  # id of a list of (t, row) faults -> its times (see _between)

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
        nemesis, kills, hits = self.nemesis, self.kills, self.hits
        item = self.item
        effect_row = EffectRow
        R = self.R
        effects_by = self.effects_by
        for i in others:
            obj = rows[i]
            if type(obj) is effect_row:
                effects_by[obj.process].append((obj.t, obj.work_id))
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
                process = obj.process
                if fault == "kill":
                    if process:
                        kills[process].append((obj.t, i))
                        hits[process].append((obj.t, i, fault))
                    if type(obj.point) is str and obj.point:
                        self.kill_points[obj.point] += 1
                elif fault == "pause":
                    if process:
                        hits[process].append((obj.t, i, fault))
                elif fault == "resume":
                    if process:
                        self.resumes[process].append(obj.t)
                elif fault == "reopen":
                    self.reopens.append((obj.t, i))
                elif fault in ("partition", "heal"):
                    self.cuts.append((fault, obj.t, obj.process, obj.point))
                    if fault == "partition" and process:
                        hits[process].append((obj.t, i, fault))
        for seq in (*kills.values(), *hits.values(), *self.resumes.values(), self.reopens):
            seq.sort()
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
        roles = {n: (n in R.monitor) | (n in R.requeues) << 1 for n in R.monitor | R.requeues}
        for _fields, movers in R.parked.values():  # 4: moves a parked item on once due (promote_due, expire)
            for n in movers:
                roles[n] = roles.get(n, 0) | 4
        timed_ops = self.timed_ops
        creates, claims, lists = R.creates, R.claims, R.lists
        claims_refused, operator_ops = self.claims_refused, self.operator_ops
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
                        w = r.get("work") if name in creates else r
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
                    if name in claims:
                        claims_null.append(op)
                elif name in lists and type(r) is list:
                    for w in r:
                        if isinstance(w, dict) and "work_id" in w and "status" in w:
                            item(w["work_id"]).snaps.append(new_snap(w, op, t0, t1))
            if name in roles:
                role = roles[name]
                if role & 1:
                    monitor_ops.append(op)
                if role & 2:
                    requeues.append(op)
                if role & 4:
                    timed_ops.append(op)
            if wid is not None:
                if it is None or it.work_id != wid:
                    it = items.get(wid)
                    if it is None:
                        it = items[wid] = _Item(wid)
                it.ops.append(op)
                if name in creates:
                    it.creates.append(op)
            else:
                if name in creates:
                    self.pending_creates[(args.get("source_system"), args.get("source_id"))].append(op)
                elif name in claims:
                    if outcome == "indefinite":
                        self.open_claims[args.get("owner")].append(op)
                    elif outcome == "refused":
                        claims_refused.append(op)
                if process == OPERATOR:
                    operator_ops.append(op)
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
            context: Iterable[Op | Record | None] = (), cause: Iterable[Op | Record | None] = ()) -> None:
        """Report an anomaly: `ops` are its proof, `cause` what explains it (both go into the
        excerpt, `cause` marked as such), `context` what helps a reader."""
        def flat(xs: Iterable[Op | Record | None]) -> list[Record]:
            out: list[Record] = []
            for x in xs:
                if x is None:
                    continue
                out.extend(self.records(x))
            return out

        proof = flat(ops)
        seen = {id(r) for r in proof}
        why = [r for r in flat(cause) if id(r) not in seen]
        excerpt = _ordered([*proof, *why])
        seen.update(id(r) for r in why)
        ctx = [r for r in _ordered(flat(context)) if id(r) not in seen]
        self.anomalies.append(Anomaly(kind, work_id, explanation, tuple(excerpt), tuple(ctx), tuple(_ordered(why))))

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

    def _close_seen(self, it: _Item, op: Op) -> Snap | None:
        """A later snapshot showing the write of an indefinite (or refused) close-out, if any: its
        status, time and result, which no other close-out that may have happened would leave."""
        close_outs = self.R.close_outs
        if op.name not in close_outs or op.now is None:
            return None
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
        status (a close-out answered with the item done, failed, ...): the work was finished, though
        the final read no longer finds the item."""
        moved = [op for op in it.ops if op.name not in self.R.reads and op.maybe]
        if not moved:
            return False
        last, r = moved[-1], moved[-1].result
        return last.ok and type(r) is dict and r.get("work_id") == it.work_id and r.get("status") in self.R.terminal

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
        g = next((g for g in grants if g.token == w.get("lease_token")), None)
        if g is None or g.op is None:
            self.counts["leased_lapsed_at_end" if beyond is None else "leased_beyond_contract_at_end"] += 1
            return False
        after = g.t_done
        mon = None
        if self.monitor_ops:
            mon = next((m for m in self.monitor_ops if m.ok and m.t0 > after and m.now is not None
                        and m.now > lapse + self.eps), None)
            if mon is None:
                self.counts["leased_lapsed_at_end" if beyond is None else "leased_beyond_contract_at_end"] += 1
                return False
        start = mon.t1 if mon is not None else after
        # The final read shows the same lease token, so the item was leased under it all along.
        claim = next((c for c in self.claims_null if c.t0 > start and c.now is not None
                      and c.now > lapse + self.eps and not c.args.get("work_id")), None)
        if claim is None:
            self.counts["leased_lapsed_at_end" if beyond is None else "leased_beyond_contract_at_end"] += 1
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
            s = self._close_seen(it, op)
            if s is None:
                continue
            why = (f"{op.name} by {op.process} (status {op.args.get('status')}) was refused ({_code(op, self.h)}), "
                   f"which says it did not happen, yet a later read shows its status, time and result")
            self.add("refused_but_applied", it.work_id, why,
                     [op, s.op if s.op is not None else self.final_excerpt(it.work_id)])
            return

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


def _code(op: Op, h: History) -> str:
    """The error code of a refused operation, as its completion gives it."""
    if op.comp is None:
        return "no answer"
    err = h.rows[op.comp].error
    code = err.get("code") if isinstance(err, dict) else None
    return str(code) if code else "refused"


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


def _retries(ops: list[Op], claims: frozenset[str]) -> int:
    """Operations a process tried again right after a try that did not come back ok."""
    last: dict[str, Op] = {}
    before = last.get
    n = 0
    for op in ops:
        process = op.process
        prev = before(process)
        if prev is not None and prev.outcome != "ok" and prev.name == op.name and \
                (op.name in claims or prev.work_id == op.work_id):
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


def check(history: History, spec: Spec | None = None) -> Verdict:
    """Every anomaly of the history, with the minimal excerpt proving each, observations, what the
    history reached (coverage) and what it did not (missing).  `spec`: the contract the campaign ran
    under (the shipped one by default), which names the statuses and operations."""
    rules = rules_of(spec)
    try:
        with no_gc():
            return _Checker(history, rules).run()
    except TypeError:
        bad = _unhashable_identifier(history)
        if bad is None:
            raise
        raise HistoryError(history.path, *bad) from None


_IDENTIFIERS = ("work_id", "token", "lease_token", "owner", "status", "step_id", "key")


def _unhashable_identifier(history: History) -> tuple[int | None, str] | None:
    """The first record whose identifier (a work id, token, owner, status, key) is a list or an
    object, which no ledger hands out: ``(line, problem)``.  Only looked for when the checker met
    such a value (the fast path stays as it is)."""
    def find(v: Any, path: str) -> str | None:
        if isinstance(v, Mapping):
            for k, x in v.items():
                if k in _IDENTIFIERS and isinstance(x, list | dict):
                    return f"{path}{k} is {'a list' if isinstance(x, list) else 'an object'}"
                if isinstance(x, list | dict):
                    got = find(x, f"{path}{k}.")
                    if got:
                        return got
        elif isinstance(v, list):
            for x in v:
                got = find(x, path)
                if got:
                    return got
        return None

    for rec in history.records:
        got = find(to_dict(rec), "")
        if got:
            return rec.line, f"{got}; identifiers in a history are strings, numbers or null"
    return None


def excerpt_history(history: History, anomaly: Anomaly) -> History:
    """The meta record plus an anomaly's excerpt, as a history of its own (to re-check it)."""
    return History.of([history.meta, *anomaly.excerpt], path=f"{history.path} (excerpt)")
