"""The safety checker's first pass: the history indexed by item (operations paired, faults and effects
by process), and the records an anomaly cites."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from .anomaly_model import (
    _COMPLETE_FIELDS,
    _INVOKE_FIELDS,
    INF,
    OPERATOR,
    Anomaly,
    Op,
    Rules,
    Snap,
    _Item,
    _num,
    _ordered,
    _Timeline,
)
from .history import EffectRow, Final, History, Meta, Nemesis, Record


class _Index:
    """The checker's state and its first pass (chaos/safety/anomalies.py ``_Checker``)."""

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
        """Pair operations and index the history by item, process and fault."""
        invokes, completes, others = self.h.op_rows()
        self._index_others(others)
        self._index_ops(invokes, completes)
        if self.final is not None:
            for wid, w in self.final.items.items():
                self.item(wid).final = w if isinstance(w, dict) else None
        if self.pending_creates:
            self._acknowledge_indefinite_creates()

    def _index_others(self, others: Iterable[int]) -> None:
        """The effects the sink recorded (by item and key, and by process) and the faults."""
        rows = self.h.rows
        applied = deduplicated = 0
        item = self.item
        effect_row = EffectRow
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
                self._index_fault(obj, i)
        for seq in (*self.kills.values(), *self.hits.values(), *self.resumes.values(), self.reopens):
            seq.sort()
        if applied:
            self.counts["effects_applied"] = applied
        if deduplicated:
            self.counts["effects_deduplicated"] = deduplicated

    def _index_fault(self, obj: Nemesis, i: int) -> None:
        """One fault of the nemesis: by process (kills, pauses, partitions hit a process), by point."""
        fault = obj.fault
        self.nemesis[fault] += 1
        if obj.t > self.last_fault_t:
            self.last_fault_t = obj.t
        process = obj.process
        hits = self.hits
        if fault == "kill":
            if process:
                self.kills[process].append((obj.t, i))
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

    def _op_roles(self) -> dict[str, int]:
        """Operation name -> its roles as bits: 1 monitor, 2 may requeue terminal items, 4 moves a
        parked item on once due (promote_due, expire)."""
        R = self.R
        roles = {n: (n in R.monitor) | (n in R.requeues) << 1 for n in R.monitor | R.requeues}
        for _fields, movers in R.parked.values():
            for n in movers:
                roles[n] = roles.get(n, 0) | 4
        return roles

    def _index_ops(self, invokes: Iterable[int], completes: Mapping[Any, int]) -> None:
        """Each invoke paired with its completion into an Op, filed under its item (by work id,
        or the item its answer names) and under the roles it plays."""
        rows = self.h.rows
        item = self.item
        R = self.R
        ops = self.ops
        append = ops.append
        items = self.items
        n_ok = n_refused = 0
        max_now, max_op = -INF, None
        claims_null = self.claims_null
        monitor_ops = self.monitor_ops
        requeues = self.requeues
        roles = self._op_roles()
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
