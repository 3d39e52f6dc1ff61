"""Per-item linearizability of a safety history, with the contract's model as the interpreter.

A work ledger splits into independent parts, one per work item (P-compositionality): every
operation of the history is projected onto the items it touches, and for each item a search
(Wing & Gong, with Lowe's memoization of (model state, set of operations linearized), as
Porcupine does) looks for one sequential order of its operations that

* respects real time (an operation that completed before another was invoked comes first),
* and in which the contract's model (conformance/model, which reads spec/rules.py) gives the
  answers the ledger gave: an ``ok`` answer must be one the model accepts; a ``refused`` one did
  not happen, and when its code speaks of the item's state it must be one the model allows there;
  an ``indefinite`` one (or one never completed) may have happened at any time after its invoke,
  or never.

What the model cannot know from a history is never held against the ledger:

* an indefinite operation that may have changed the item leaves its state *unknown* from there on
  (the answer that would say how is missing) until an ``ok`` answer shows the whole item again (a
  snapshot), which the search then takes as the item's state; nothing is judged while unknown;
* no snapshot shows the item's receipts, so such an operation also leaves them unknown (every
  receipt of the item, and those the model looks at for it): an operation whose judgment reads an
  unknown receipt is not judged, and the receipts an answer shows are the model's again;
* a claim with no ``work_id`` that did not answer, or a monitor run that did not answer, may have
  moved any item: it is a candidate of every item's search;
* a monitor run (expire, recover, promote_due) is part of an item's search only where its answer
  names the item, and a claim only where it handed the item out (a claim that found nothing, or a
  monitor run that moved nothing here, is not judged per item);
* the final read is a read after everything, except for items the final recovery moved;
* an ``ok`` that the model refuses, a read no order explains, a refusal "stale lease" while the
  lease is live in every order: these are the violations.

The search is bounded (``BUDGET`` model states per item): an item that needs more is reported as
``unchecked`` with the reason, never as passing.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ledgercheck.conformance.model import Accept, Model, Outcome, Refuse
from ledgercheck.spec import Spec, default_spec
from ledgercheck.transport.clock import wall_tolerance

from .history import History

BUDGET = 200_000  # model states a single item's search may visit before it is reported unchecked
MAX_EXCERPT_SEARCH = 60  # ops of a failing item's first failing prefix the minimisation tries to drop
# refusal codes that state something about the item (it is absent, the move is forbidden, the
# token is not the live lease): a refusal with one of them must be one the model allows at that
# point; any other refusal (a busy store, ...) only says the operation did not happen
STATE_CODES = frozenset({"not_found", "invalid_transition", "stale_lease"})
INF = float("inf")

# model attributes that hold per-item state (saved and restored at the search's branch points)
_STATE_ATTRS = ("items", "events", "order", "identity", "policies", "tokens", "token_refs", "blame",
                "blame_default", "changed_by", "receipts", "receipt_order", "unresolved", "inbox", "outbox",
                "outbox_order", "logs", "lanes", "runs", "spawned", "roots", "fixed_reason", "open_fields",
                "_verified", "_events_before")


@dataclass(slots=True)
class LinOp:
    id: int
    process: str
    op: str
    args: dict[str, Any]
    t0: float
    t1: float  # completion time; INF when it may take effect at any later time
    outcome: str  # ok | refused | indefinite (also: never completed)
    result: Any = None
    error: Any = None
    read: Any = None  # for a projected read (list, final): the item's snapshot
    kind: str = "op"  # op | read (a listing's snapshot) | adopt (a multi-item write's snapshot) | final
    optional: bool = False
    # a create whose answer's item fields are judged by a read beside it (project): its own step
    # judges what makes the item, not the fields its answer shows
    fields_read: bool = False
    # an operation this one cannot precede (the create whose answer this read is)
    after: LinOp | None = None

    @property
    def definite(self) -> bool:
        return not self.optional


@dataclass
class ItemResult:
    result: str
    order: list[int] = field(default_factory=list)
    excerpt: list[int] = field(default_factory=list)
    at: int | None = None
    expected: str = ""
    reason: str = ""
    states: int = 0
    ops: int = 0
    branches: int = 0  # branch points the search passed (each a copy of the model; linearizable items)
    # the contract clauses the model names at ``at`` (a violation; empty when its word names none:
    # an operation on an item not created yet, an answer the model cannot read)
    clauses: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"result": self.result}
        if self.result == "linearizable":
            out["order"] = self.order
        elif self.result == "violation":
            out.update(excerpt=self.excerpt, at=self.at, expected=self.expected, clauses=self.clauses)
        else:
            out["reason"] = self.reason
        return out


@dataclass
class Linearizability:
    items: dict[str, ItemResult]
    cross: list[dict[str, Any]] = field(default_factory=list)
    # what the history reached of the behaviours the cross-item rules judge, and what it drove
    # without reaching (crossitem.cross_coverage)
    cross_coverage: dict[str, int] = field(default_factory=dict)
    cross_missing: list[str] = field(default_factory=list)

    @property
    def violations(self) -> list[str]:
        return [w for w, r in self.items.items() if r.result == "violation"]

    @property
    def unchecked(self) -> list[str]:
        return [w for w, r in self.items.items() if r.result == "unchecked"]

    def stats(self) -> dict[str, int]:
        rs = list(self.items.values())
        return {"items": len(rs), "linearizable": sum(r.result == "linearizable" for r in rs),
                "violations": sum(r.result == "violation" for r in rs),
                "unchecked": sum(r.result == "unchecked" for r in rs),
                "states_explored": sum(r.states for r in rs),
                "max_states_item": max((r.states for r in rs), default=0),
                "branch_points": sum(r.branches for r in rs)}

    def to_json(self) -> dict[str, Any]:
        return {"items": {w: r.to_json() for w, r in self.items.items()}, "cross": self.cross, "stats": self.stats(),
                "cross_coverage": self.cross_coverage, "cross_missing": self.cross_missing}


# ------------------------------------------------------------------------------- projection
_NOT_MAPS = frozenset({list, str, int, float, bool, type(None)})


def _is_map(x: Any) -> bool:
    """isinstance(x, Mapping), without the ABC's check for the types answers are made of."""
    t = type(x)
    return t is dict or (t not in _NOT_MAPS and isinstance(x, Mapping))


def _snap_id(x: Any) -> str | None:
    if _is_map(x):
        w = x.get("work_id")
        if type(w) is str and "status" in x:
            return w
    return None


def _snapshot_of(op: str, result: Any) -> Mapping[str, Any] | None:
    """The item snapshot an ok answer carries, if any (create answers {work, created})."""
    if _is_map(result):
        if _snap_id(result):
            return result
        if _snap_id(result.get("work")):
            return result["work"]  # type: ignore[no-any-return]
    return None


def _identity(x: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    return (x.get("source_system"), x.get("source_id"), x.get("source_run_id") or None)


def project(history: History, spec: Spec) -> tuple[dict[str, list[LinOp]], list[LinOp]]:
    """Each item's operations (sorted by invoke), and the unattributed ones that may have touched
    any item (indefinite claims without ``work_id``, indefinite monitor runs)."""
    rows = history.rows
    ops_rows = history.op_rows()
    per: dict[str, list[LinOp]] = {}
    floating: list[LinOp] = []
    creates: list[LinOp] = []
    by_key: list[LinOp] = []  # operations naming a receipt (or message) key, not an item
    keys: dict[Any, str] = {}  # such a key -> the item it belongs to, from the answers
    ident: dict[tuple[Any, Any, Any], str] = {}
    for i in ops_rows.invokes:
        inv = rows[i]
        c = ops_rows.completes.get(inv.id)  # type: ignore[union-attr]
        comp = rows[c] if c is not None else None
        outcome = comp.outcome if comp is not None else "indefinite"  # type: ignore[union-attr]
        t1 = comp.t if comp is not None and outcome != "indefinite" else INF  # type: ignore[union-attr]
        args = dict(inv.args)  # type: ignore[union-attr]
        if "now" not in args and inv.now is not None:  # type: ignore[union-attr]
            args["now"] = inv.now  # type: ignore[union-attr]
        op = LinOp(inv.id, inv.process, inv.op, args, inv.t, t1, outcome,  # type: ignore[union-attr]
                   comp.result if comp is not None else None, comp.error if comp is not None else None)  # type: ignore[union-attr]
        op.optional = outcome == "indefinite"
        name = op.op
        if name not in spec.operations:
            continue
        snap = _snapshot_of(name, op.result) if outcome == "ok" else None
        if snap is not None:
            ident.setdefault(_identity(snap), snap["work_id"])
        wid = args.get("work_id")
        if outcome == "ok" and _is_map(op.result):
            for rec in (op.result, op.result.get("receipt")):
                if _is_map(rec) and type(rec.get("work_id")) is str and type(rec.get("key")) is str:
                    keys.setdefault(rec["key"], rec["work_id"])
        if name == "create":
            creates.append(op)
            continue
        if type(wid) is str and not (outcome == "ok" and type(op.result) is list and any(_snap_id(m) for m in op.result)):
            per.setdefault(wid, []).append(op)
            continue
        if isinstance(args.get("key"), str) and snap is None:
            by_key.append(op)
            continue
        if outcome == "ok":
            if snap is not None:
                per.setdefault(snap["work_id"], []).append(op)
            elif isinstance(op.result, list):
                named = {m.get("work_id") for m in op.result if isinstance(m, Mapping)}
                snaps = [m for m in op.result if _snap_id(m)]
                if snaps and len(snaps) == len(op.result):  # a listing: a read of each item it shows
                    kind = "read" if spec.operations[name].kind == "read" else "adopt"
                    for s in snaps:
                        per.setdefault(s["work_id"], []).append(
                            LinOp(op.id, op.process, op.op, op.args, op.t0, op.t1, "ok", op.result, None, s, kind))
                elif spec.operations[name].profile is not None:
                    for w in named:
                        if isinstance(w, str):
                            sub = [m for m in op.result if isinstance(m, Mapping) and m.get("work_id") == w]
                            per.setdefault(w, []).append(
                                LinOp(op.id, op.process, op.op, op.args, op.t0, op.t1, "ok", sub, None))
            # a claim that found nothing, a monitor run that moved nothing: not judged per item
        elif outcome == "indefinite":
            floating.append(op)
        # a refused operation naming no item changed nothing anywhere
    for op in by_key:
        w = keys.get(op.args["key"])
        if w is not None:
            per.setdefault(w, []).append(op)
        elif op.outcome == "indefinite":
            floating.append(op)
    for op in creates:
        key = _identity(op.args)
        snap = _snapshot_of("create", op.result) if op.outcome == "ok" else None
        wid = snap["work_id"] if snap is not None else ident.get(key)
        if wid is None and history.final is not None:
            wid = next((w for w, s in history.final.items.items() if isinstance(s, Mapping) and _identity(s) == key), None)
        if wid is None:
            continue
        if snap is not None and snap.get("work_id") == wid and op.result.get("created") is True:
            # The contract promises the state new work starts in (core.create.initial), and answers a
            # create of a unit it already holds with the item as it is: a ledger may answer a new
            # one the same way, by reading the item after writing it, and a claim that took it in
            # between shows.  The create is judged on what makes the item (its id and identity),
            # and what its answer shows as a read of the item between the create and the answer:
            # a state the item never had (a torn answer, a wrong initial state no other operation
            # explains) is still a violation.
            op.fields_read = True
            per.setdefault(wid, []).append(op)
            per[wid].append(LinOp(op.id, op.process, op.op, op.args, op.t0, op.t1, "ok", op.result, None, snap, "read",
                                  after=op))
            continue
        per.setdefault(wid, []).append(op)
    fin = history.final
    if fin is not None:
        moved = {w for a in (fin.recovery or {}).get("actions") or [] if isinstance(a, Mapping)
                 for w in a.get("work_ids") or []}
        for w, s in fin.items.items():
            if w in moved or w not in per:
                continue
            per[w].append(LinOp(-1, "final", "final", {}, fin.t, fin.t, "ok", s, None, s, "final"))
    for ops in per.values():
        ops.sort(key=lambda o: o.t0)
    return per, floating


# ------------------------------------------------------------------------------- the search
class _Fail(Exception):
    pass


_ATOMS = (str, int, float, bool, type(None))


def _jcopy(x: Any) -> Any:
    """A deep copy of an answer read from a history (JSON: dicts, lists and scalars), several
    times faster than copy.deepcopy; anything else is left to deepcopy."""
    t = type(x)
    if t is dict:
        return {k: v if type(v) in _ATOMS else _jcopy(v) for k, v in x.items()}
    if t is list:
        return [v if type(v) in _ATOMS else _jcopy(v) for v in x]
    if t in _ATOMS:
        return x
    return copy.deepcopy(x)


def _scopy(x: Any, memo: dict[int, Any]) -> Any:
    """A deep copy of the model's state, as copy.deepcopy makes it (an object reached twice is
    copied once, ``memo``), several times faster for the containers the state is made of (dicts,
    lists, sets and tuples); anything else is left to deepcopy, with the same memo."""
    t = type(x)
    if t in _ATOMS:
        return x
    c = memo.get(id(x))
    if c is not None:
        return c
    if t is dict:
        c = memo[id(x)] = {}
        for k, v in x.items():
            c[k] = v if type(v) in _ATOMS else _scopy(v, memo)
    elif t is list:
        c = memo[id(x)] = []
        c.extend(v if type(v) in _ATOMS else _scopy(v, memo) for v in x)
    elif t is set:
        c = memo[id(x)] = {v if type(v) in _ATOMS else _scopy(v, memo) for v in x}
    elif t is tuple:
        c = tuple(v if type(v) in _ATOMS else _scopy(v, memo) for v in x)
        c = memo[id(x)] = x if all(a is b for a, b in zip(c, x, strict=True)) else c
    else:
        c = copy.deepcopy(x, memo)
    return c


class _Budget(Exception):
    pass


_MODELS: dict[tuple[int, tuple[str, ...] | None, float], tuple[Spec, Model, dict[str, Any], frozenset[str]]] = {}
_LACKS = "snapshot lacks field"  # the model's word for a field an answer does not carry (base.py)


def _clauses(found: list[Any]) -> list[str]:
    """The clause ids of the model's findings, once each, in their order."""
    return list(dict.fromkeys(v.clause for v in found if getattr(v, "clause", "")))


def _judged(found: list[Any]) -> list[Any]:
    """The model's findings this checker judges: a field an answer does not carry at all is not
    (the history format asks for no whole snapshots, and whether a ledger answers every field is
    the conformance suite's question); every field it carries is."""
    return [v for v in found if _LACKS not in v.message]


State = tuple[bool, frozenset[str]]  # (the item's fields unknown, keys of receipts unknown)
KNOWN: State = (False, frozenset())


class _SeenDict(dict):  # type: ignore[type-arg]
    """The model's receipts, noting which keys the model looks at (``whole``: all of them)."""

    seen: set[str]
    whole: bool

    def get(self, k: Any, d: Any = None) -> Any:
        self.seen.add(k)
        return super().get(k, d)

    def __getitem__(self, k: Any) -> Any:
        self.seen.add(k)
        return super().__getitem__(k)

    def __contains__(self, k: Any) -> bool:
        self.seen.add(k)
        return super().__contains__(k)

    def __iter__(self) -> Any:
        self.whole = True
        return super().__iter__()

    def keys(self) -> Any:
        self.whole = True
        return super().keys()

    def values(self) -> Any:
        self.whole = True
        return super().values()

    def items(self) -> Any:
        self.whole = True
        return super().items()


class _SeenList(list):  # type: ignore[type-arg]
    """The model's journal order: walking it looks at every receipt."""

    owner: _SeenDict

    def __iter__(self) -> Any:
        self.owner.whole = True
        return super().__iter__()


class _Watch:
    """Which receipts the model reads while it judges one operation: the receipts (and the
    journal's order) are lent to it in containers that note every key looked at."""

    def __init__(self, m: Model) -> None:
        self.m = m
        d = _SeenDict(m.receipts)
        d.seen, d.whole = set(), False
        order = _SeenList(m.receipt_order)
        order.owner = d
        self.d, self.order = d, order
        m.receipts, m.receipt_order = d, order
        self.seen: frozenset[str] = frozenset()
        self.whole = False

    def close(self) -> bool:
        m, d = self.m, self.d
        if m.receipts is d:
            m.receipts = dict.copy(d)
        if m.receipt_order is self.order:
            m.receipt_order = list.copy(self.order)
        self.seen = frozenset(k for k in d.seen if isinstance(k, str))
        self.whole = d.whole
        return True

    def reads(self, stale: frozenset[str]) -> bool:
        """Whether it read a receipt that is not known."""
        return bool(stale) and (self.whole or not self.seen.isdisjoint(stale))


class _Search:
    """The search for one item."""

    def __init__(self, spec: Spec, wid: str, ops: list[LinOp], slack: bool, budget: int,
                 profiles: tuple[str, ...] | None = None, tolerance: float = 0.0) -> None:
        self.spec = spec
        self.profiles = profiles
        self.tolerance = tolerance
        held = _MODELS.get((id(spec), profiles, tolerance))
        if held is None or held[0] is not spec:
            m = Model(spec, profiles, tolerance=tolerance) if tolerance else Model(spec, profiles)
            # operations that make an item from another one (answering a create_result, not a create)
            makers = frozenset(n for n, o in spec.operations.items() if o.returns == "create_result" and o.kind != "create")
            held = _MODELS[(id(spec), profiles, tolerance)] = (spec, m, {a: getattr(m, a) for a in _STATE_ATTRS}, makers)
        self._model, self._empty, self.makers = held[1], held[2], held[3]
        self.wid = wid
        self.ops = ops
        self.slack = slack
        self.budget = budget
        self.states = 0
        self.best: list[int] = []  # longest order found (indices into ops)
        self.memo: set[tuple[frozenset[int], str]] = set()
        self.pre: dict[int, int] = {}  # i may not come before pre[i] (run)
        self.branches = 0
        self.forked = False  # a branch point was passed: states may come again, the memo is kept from here
        self.why: list[str] = []  # the clauses the model named at the last step found inconsistent

    # -- model state
    def fresh(self) -> Model:
        """The model with nothing in it (one model per contract, emptied: building one compiles
        the contract's comparisons, which costs more than a small item's whole search)."""
        m = self._model
        for a, v in self._empty.items():
            setattr(m, a, type(v)())
        m.slack = 0.0
        return m

    @staticmethod
    def save(m: Model) -> dict[str, Any]:
        return _scopy({a: getattr(m, a) for a in _STATE_ATTRS}, {})

    @staticmethod
    def restore(m: Model, st: Mapping[str, Any]) -> None:
        for a, v in _scopy(dict(st), {}).items():
            setattr(m, a, v)

    def key(self, m: Model, st: State) -> str:
        unknown, stale = st
        if unknown:  # the item's fields will be taken from an answer; its journal may still be known
            return repr(("?", m.receipts, sorted(stale)))
        return repr((m.items.get(self.wid), m.receipts, sorted(stale), m.tokens.get(self.wid), m.policies.get(self.wid),
                     m.open_fields.get(self.wid)))

    # -- one step
    def step(self, m: Model, op: LinOp, st: State) -> tuple[bool, State, str]:
        """Apply ``op`` to the model: (consistent, the state of knowledge afterwards, the model's
        word when not; the clauses it names in ``self.why``)."""
        self.why = []
        unknown, stale = st
        snap = op.read if op.kind in ("read", "final", "adopt") else (_snapshot_of(op.op, op.result) if op.outcome == "ok" else None)
        if op.kind == "adopt":  # an answer of a write on several items: the item as it left it
            if snap is not None:
                self.adopt(m, snap)
            return True, (False, stale), ""
        if op.kind in ("read", "final"):
            if snap is None:
                return True, st, ""
            if unknown:
                self.adopt(m, snap)
                return True, (False, stale), ""
            if self.wid not in m.items:
                return False, st, "the item does not exist yet"
            bad = _judged(m.check_work(dict(snap), self.wid))
            self.why = _clauses(bad)
            return (not bad), st, "; ".join(v.message for v in bad)
        if unknown:  # nothing is judged; what the operation may have written becomes unknown too
            return True, self.unjudged(m, op, snap, stale, self.may_touch(m, op), True), ""
        if op.op != "create" and snap is not None and snap.get("work_id") == self.wid and \
                (self.wid not in m.items or op.op in self.makers):
            # made by another item's operation (a spawn), or that operation replayed (answering the
            # child it made before): judging it needs the other item, which this search does not
            # hold; the item as its answer shows it
            self.adopt(m, snap)
            return True, (False, stale), ""
        if op.op != "create" and self.wid not in m.items:
            # the item is created by an operation not yet linearized: nothing before it can act on it
            return (op.outcome != "ok"), st, "the item does not exist yet"
        m.slack = (op.t1 - op.t0) if self.slack and op.t1 != INF else (1.0 if self.slack else 0.0)
        # which receipts the model reads matters only when some are unknown, or for what an
        # indefinite operation may have written: otherwise it is not watched (asked again, were
        # it ever needed, from may_touch)
        watch = _Watch(m) if stale or op.outcome == "indefinite" else None
        try:
            exp = m.expect(op.op, op.args)
        except (KeyError, TypeError, ValueError) as exc:
            seen = watch.seen if watch is not None and watch.close() else self.may_touch(m, op)
            return True, (True, stale | set(m.receipts) | seen), f"the model cannot judge {op.op}: {exc}"
        if watch is not None:
            watch.close()
            if watch.reads(stale):
                return True, self.unjudged(m, op, snap, stale, watch.seen), ""
        if op.outcome == "indefinite":
            if isinstance(exp, Refuse):
                return True, st, ""
            # it may have taken effect: the item and its journal (every receipt, and those it
            # names) are unknown until answers show them again
            assert watch is not None
            return True, (True, stale | set(m.receipts) | watch.seen), ""
        if op.outcome == "refused":
            code = op.error.get("code") if isinstance(op.error, Mapping) else None
            if isinstance(exp, Refuse):
                return True, st, ""
            if code in STATE_CODES and code not in exp.also_refuse:
                blamed = exp.refused_as.get(code) or exp.clause
                if not m.claimed(blamed):  # a rule of a profile the ledger does not claim: it did not happen
                    return True, st, ""
                self.why = [blamed]
                return False, st, f"{op.op} must succeed here ({exp.why}), it was refused {code}"
            return True, st, ""
        # ok
        if snap is not None and snap.get("work_id") == self.wid and self._take_open(m, snap):
            exp = m.expect(op.op, op.args)  # judged again on the fields the answer settled
        if isinstance(exp, Refuse):
            if not m.claimed(exp.clause):
                # refused by a rule of a profile the ledger does not claim (a core-only ledger
                # accepting a close-out past a lease's expiry): what it did instead is no violation of
                # its claim, and the item is what the answer shows (unknown without one)
                return True, self.unjudged(m, op, snap, stale, self.may_touch(m, op)), ""
            self.why = [exp.clause]
            return False, st, f"{op.op} must be refused here with {'/'.join(sorted(exp.codes))} ({exp.why})"
        assert isinstance(exp, Accept)
        saved, watch = (self.save(m), _Watch(m)) if stale else (None, None)  # judging the answer may read a receipt not known
        try:
            bad = m.settle(op.op, exp, Outcome(True, _jcopy(op.result)))
        except Exception as exc:  # noqa: BLE001 - the model could not read the answer: say so
            if watch is not None and saved is not None and watch.close() and watch.reads(stale):
                self.restore(m, saved)
                return True, self.unjudged(m, op, snap, stale, watch.seen), ""
            return False, st, f"{op.op}: the answer cannot be read by the model ({exc})"
        if watch is not None and saved is not None and watch.close() and watch.reads(stale):
            self.restore(m, saved)
            return True, self.unjudged(m, op, snap, stale, watch.seen), ""
        bad = _judged(bad)
        if op.fields_read:  # the item's fields: judged by the read beside it
            bad = [v for v in bad if not v.message.startswith(f"{self.wid}: ")]
        if bad:
            self.why = _clauses(bad)
            return False, st, "; ".join(v.message for v in bad)
        return True, st, ""

    def unjudged(self, m: Model, op: LinOp, snap: Mapping[str, Any] | None, stale: frozenset[str], touched: frozenset[str],
                 unknown: bool = False) -> State:
        """An operation whose answer depends on a receipt the search does not know (an
        indefinite operation may have changed it): not judged.  A refusal changed nothing; an
        answer shows what it shows (receipts, the item); otherwise the item is unknown too,
        unless the operation only reads.  ``touched``: the receipts the model looked at for it."""
        if op.outcome == "refused":
            return unknown, stale
        writes = self.spec.operations[op.op].kind != "read"
        if writes:  # it may have written any receipt of the item, and those it names
            stale = stale | set(m.receipts) | touched
        if op.outcome == "ok":
            stale = self.take_receipts(m, op, stale)
            if snap is not None and snap.get("work_id") == self.wid:
                self.adopt(m, snap)
                return False, stale
        return unknown or writes, stale

    def may_touch(self, m: Model, op: LinOp) -> frozenset[str]:
        """The receipts the model would look at for ``op`` (those it names; a receipt it may
        create), asked even where the item itself is unknown."""
        watch = _Watch(m)
        try:
            m.expect(op.op, op.args)
        except Exception:  # noqa: BLE001,S110 - the model could not even start: what it looked at is all we learn
            pass
        finally:
            watch.close()
        return watch.seen

    def take_receipts(self, m: Model, op: LinOp, stale: frozenset[str]) -> frozenset[str]:
        """The receipts of the item an ok answer shows become the model's (and known again)."""
        res = op.result
        shown: list[tuple[str, Any]] = []
        for r in (res if isinstance(res, list) else [res, res.get("receipt") if isinstance(res, Mapping) else None]):
            if (isinstance(r, Mapping) and isinstance(r.get("key"), str) and r.get("work_id") == self.wid
                    and "state" in r):
                shown.append((r["key"], r))
        key = op.args.get("key")
        if res is None and isinstance(key, str) and key in stale and self.spec.operations[op.op].kind == "read":
            shown.append((key, None))  # a lookup that found no receipt under the key
        for k, r in shown:
            m.adopt_receipt(k, r)
        return stale - {k for k, _ in shown} if shown else stale

    def _take_open(self, m: Model, snap: Mapping[str, Any]) -> bool:
        """Fields the contract left open after the item's last change (a promotion may keep
        next_retry_at, ...) take the value the ledger shows now when it is one the contract
        allows, as the harness's read-back after each operation does; an answer that carries the
        item is that read-back."""
        opened = m.open_fields.get(self.wid)
        it = m.items.get(self.wid)
        if not opened or it is None:
            return False
        fields = self.spec.work_fields
        changed = False
        for name in list(opened):
            if name in snap and name in fields and m._allowed_other(self.wid, name, fields[name].compare, snap[name]):
                changed = changed or name not in it or it[name] != snap[name] or type(it[name]) is not type(snap[name])
                it[name] = copy.deepcopy(snap[name])
        return changed

    def adopt(self, m: Model, snap: Mapping[str, Any]) -> None:
        if self.wid not in m.items:
            m.items[self.wid] = {}
            m.tokens.setdefault(self.wid, [])
        m.adopt(self.wid, snap, m.events.get(self.wid, []))

    # -- Wing & Gong with memoization
    def run(self, ops_idx: list[int]) -> list[int] | None:
        """An order of the operations ``ops_idx`` (every definite one, optional ones at will)."""
        m = self.fresh()
        self.best = []
        self.memo = set()
        self.forked = False
        ops = self.ops
        definite = [i for i in ops_idx if ops[i].definite]
        self.need = len(definite)
        at = {id(ops[i]): i for i in ops_idx}
        # i may not come before pre[i] (when both are searched): a branch point the order of
        # knowledge already settles is no branch point (no copy, and no memo from there on)
        self.pre = {i: at[id(ops[i].after)] for i in ops_idx if ops[i].after is not None and id(ops[i].after) in at}
        return self._dfs(m, frozenset(), ops_idx, [], KNOWN, 0)

    def _dfs(self, m: Model, done: frozenset[int], pool: list[int], order: list[int], unknown: State, ndef: int) -> list[int] | None:
        ops, pre = self.ops, self.pre
        while True:
            if ndef == self.need:
                return order
            if self.forked:  # before the first branch point no state can come twice (``done`` only grows)
                k = (done, self.key(m, unknown))
                if k in self.memo:
                    return None
                self.memo.add(k)
            self.states += 1
            if self.states > self.budget:
                raise _Budget
            rest = [i for i in pool if i not in done]
            horizon = min((ops[i].t1 for i in rest if ops[i].definite), default=INF)
            cands = [i for i in rest if ops[i].t0 <= horizon and (i not in pre or pre[i] in done)]
            defs = [i for i in cands if ops[i].definite]
            if len(order) > len(self.best):
                self.best = list(order)
            if len(cands) == 1 and len(defs) == 1:  # one way on: no copy
                i = cands[0]
                ok, unknown, _ = self.step(m, ops[i], unknown)
                if not ok:
                    return None
                done = done | {i}
                order = [*order, i]
                ndef += 1
                continue
            saved = self.save(m)
            self.forked = True
            self.branches += 1
            for i in defs + [c for c in cands if not ops[c].definite]:
                ok, unk, _ = self.step(m, ops[i], unknown)
                if ok:
                    got = self._dfs(m, done | {i}, pool, [*order, i], unk, ndef + (1 if ops[i].definite else 0))
                    if got is not None:
                        return got
                self.restore(m, saved)
            return None


def check_item(spec: Spec, wid: str, ops: list[LinOp], *, wall: bool = False, budget: int = BUDGET,
               profiles: tuple[str, ...] | None = None, tolerance: float = 0.0) -> ItemResult:
    """One item's search; ``profiles``: the contract profiles whose clauses are judged (None: all);
    ``tolerance``: how far a ledger's own time stamps may lie outside a call's window (wall clock)."""
    s = _Search(spec, wid, ops, wall, budget, profiles, tolerance)
    idx = list(range(len(ops)))
    try:
        got = s.run(idx)
    except _Budget:
        return ItemResult("unchecked", reason=f"the search passed its budget of {budget} model states "
                          f"({len(ops)} operations, {sum(o.optional for o in ops)} indefinite)", states=s.states, ops=len(ops))
    except RecursionError:
        return ItemResult("unchecked", reason=f"{len(ops)} operations branch deeper than the search can follow",
                          states=s.states, ops=len(ops))
    if got is not None:
        return ItemResult("linearizable", order=[ops[i].id for i in got], states=s.states, ops=len(ops),
                          branches=s.branches)
    return _explain_failure(s, budget)


def _explain_failure(s: _Search, budget: int) -> ItemResult:
    """The first real-time prefix no order explains, cut down to a minimal excerpt, and what the
    model expected at the operation where every order fails."""
    ops = s.ops
    total_states = s.states
    ends = sorted({o.t1 for o in ops if o.definite})
    prefix: list[int] = list(range(len(ops)))
    at = None
    for end in ends:
        # every definite op completed by `end`, every op invoked before it as optional
        idx = [i for i, o in enumerate(ops) if (o.definite and o.t1 <= end) or (o.t0 <= end and not o.definite)]
        pending = [i for i, o in enumerate(ops) if o.definite and o.t1 > end and o.t0 <= end]
        sub = _Search(s.spec, s.wid, [_as_optional(ops[i]) if i in pending else ops[i] for i in range(len(ops))], s.slack, budget, s.profiles, s.tolerance)
        try:
            got = sub.run(idx + pending)
        except (_Budget, RecursionError):
            got = []
        total_states += sub.states
        if got is None:
            prefix = idx + pending
            at = next(i for i, o in enumerate(ops) if o.definite and o.t1 == end)
            s = _Search(s.spec, s.wid, sub.ops, s.slack, budget, s.profiles, s.tolerance)
            ops = s.ops
            break
    if at is None:
        at = max((i for i, o in enumerate(ops) if o.definite), key=lambda i: ops[i].t1, default=0)
    word0 = _word(s, prefix, at, budget)
    if not word0[0]:
        # the model has no word for the operation the failing prefix ends with (several answers
        # at that instant: a create and the read of its answer; or a refusal that changes nothing,
        # after an answer only that prefix makes definite): the first answer of the prefix, in
        # order of completion, the model has a word for
        same = [i for i in prefix if ops[i].definite and ops[i].t1 == ops[at].t1 and i != at]
        rest = sorted((i for i in prefix if ops[i].definite and i != at and i not in same), key=lambda i: ops[i].t1)
        for j in same + rest:
            w = _word(s, prefix, j, budget)
            if w[0]:
                at, word0 = j, w
                break
    # greedy minimisation: drop every operation whose removal keeps the same failure (no order,
    # and the model saying the same at the same operation)
    keep = sorted(prefix, key=lambda i: ops[i].t0)
    tries = 0
    for i in list(keep):
        if i == at or ops[i].op == "create" or tries >= MAX_EXCERPT_SEARCH:
            continue
        tries += 1
        trial = [j for j in keep if j != i]
        sub = _Search(s.spec, s.wid, ops, s.slack, budget, s.profiles, s.tolerance)
        try:
            got = sub.run(trial)
        except (_Budget, RecursionError):
            got = []
        total_states += sub.states
        if got is None and _word(s, trial, at, budget) == word0:
            keep = trial
    word = word0[0] or "no order of the excerpt explains this answer"
    return ItemResult("violation", excerpt=[ops[j].id for j in keep], at=ops[at].id, expected=word,
                      states=total_states, ops=len(ops), clauses=list(word0[1]))


def _word(s: _Search, idx: list[int], at: int, budget: int) -> tuple[str, tuple[str, ...]]:
    """What the model says at ``at`` after the longest order of ``idx`` without it, and the
    clauses it names."""
    ops = s.ops
    sub = _Search(s.spec, s.wid, ops, s.slack, budget, s.profiles, s.tolerance)
    before = [j for j in idx if j != at]
    try:
        order = sub.run(before)
    except (_Budget, RecursionError):
        order = None
    if order is None:
        order = sub.best
    m = sub.fresh()
    unknown = KNOWN
    for j in order:
        _, unknown, _ = sub.step(m, ops[j], unknown)
    word = sub.step(m, ops[at], unknown)[2]
    return word, tuple(sub.why)


def _as_optional(o: LinOp) -> LinOp:
    return LinOp(o.id, o.process, o.op, o.args, o.t0, INF, "indefinite", None, None, None, o.kind, True)


def check_linearizable(history: History, spec: Spec | None = None, *, budget: int = BUDGET,
                       items: Iterable[str] | None = None) -> Linearizability:
    """Every item's result (``items``: only those)."""
    spec = spec or default_spec()
    per, floating = project(history, spec)
    wall = (history.meta.adapter or {}).get("clock", "injected") != "injected"
    want = set(items) if items is not None else None
    out: dict[str, ItemResult] = {}
    spec, why = contract_as_run(history, spec)
    profiles = claimed_profiles(history, spec)
    # a wall-clock ledger stamps instants of its own, at its own resolution (BullMQ: whole
    # milliseconds, so a stamp may fall just before the call was sent; DBOS on SQLite: whole
    # seconds): its stamps are held to the call's window widened by the tolerance the conformance
    # harness allows the same ledger (from the resolution its handshake declares, kept in the meta)
    meta = history.meta.adapter or {}
    tol = wall_tolerance({"capabilities": {"time_resolution": meta.get("time_resolution")}}) if wall else 0.0
    if why:
        return Linearizability({w: ItemResult("unchecked", reason=why, ops=len(per[w])) for w in sorted(per)
                                if want is None or w in want})
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))
    try:
        for wid in sorted(per):
            if want is not None and wid not in want:
                continue
            ops = per[wid]
            if floating:
                ops = sorted(ops + [f for f in floating if f.t0 <= max(o.t0 for o in ops)], key=lambda o: o.t0)
            out[wid] = check_item(spec, wid, ops, wall=wall, budget=budget, profiles=profiles, tolerance=tol)
    finally:
        sys.setrecursionlimit(limit)
    return Linearizability(out)


def claimed_profiles(history: History, spec: Spec) -> tuple[str, ...] | None:
    """The contract profiles the history's ledger claimed (its handshake, in the meta record), whose
    clauses the search judges, as the conformance suite holds a ledger to what it claims: what it
    does in a profile it does not claim is no violation of its claim (the conformance suite reports
    it apart).  None (every profile) when the history does not say.  Whatever is claimed, the six
    anomaly classes are judged by the class checker on every history."""
    got = (history.meta.adapter or {}).get("profiles")
    if not isinstance(got, list) or not got:
        return None
    return tuple(p for p in spec.profiles if p in got)


def contract_as_run(history: History, spec: Spec) -> tuple[Spec, str]:
    """The contract the history's ledger ran under, and why not when it cannot be known.

    The meta record holds the lease timings the campaign's work ran with (``ttl``, ``grace``,
    taken from its contract; a wall-clock adapter's campaign scales every contract timing by one
    factor, as certify does).  Timings equal to the contract's: the contract.  Scaled by one
    factor: the contract scaled so.  Otherwise: the contract with every lease (each source's too) set
    to the history's ttl and grace, as the class checker reads them (the other timings as they are).  If even that does not give the
    history's timings, nothing is judged (the reason names --spec)."""
    from ledgercheck.transport.clock import build_spec, plain, scaled_spec

    from .campaign import SOURCE

    ttl, grace = history.meta.ttl, history.meta.grace
    lt = spec.lease_for(SOURCE)

    def same(sp: Spec) -> bool:
        got = sp.lease_for(SOURCE)
        return abs(got.ttl - ttl) <= 1e-9 * max(1.0, ttl) and abs(got.grace - grace) <= 1e-9 * max(1.0, grace)

    if not ttl or same(spec):
        return spec, ""
    scale = ttl / lt.ttl if lt.ttl else 0.0
    if scale > 0 and abs(grace - lt.grace * scale) <= 1e-9 * max(1.0, grace):
        scaled = scaled_spec(spec, scale)
        if same(scaled):
            return scaled, ""
    doc = plain(spec.document)
    for node in (doc["lease"], *doc["lease"].get("by_source", {}).values()):
        if "ttl" in node or node is doc["lease"]:
            node["ttl"], node["grace"] = ttl, grace
    try:
        retimed = build_spec(doc, dict(spec.files))
    except Exception:  # noqa: BLE001 - a contract that takes no such timings: say so below
        retimed = spec
    if same(retimed):
        return retimed, ""
    return spec, (f"the history ran with lease ttl {ttl:g}s and grace {grace:g}s, the contract has {lt.ttl:g}s and "
                  f"{lt.grace:g}s: pass the contract the campaign ran under with --spec")


def item_ops(history: History, wid: str, spec: Spec | None = None) -> list[LinOp]:
    """The operations the search considers for one item (``history check --explain``)."""
    per, floating = project(history, spec or default_spec())
    ops = per.get(wid, [])
    if floating and ops:
        ops = sorted(ops + [f for f in floating if f.t0 <= max(o.t0 for o in ops)], key=lambda o: o.t0)
    return ops
