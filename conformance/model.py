"""The abstract model of the contract: a pure, in-memory state machine built from a Spec.

The model is a *checker*.  For an operation it first says what the contract expects
(:meth:`Model.expect`): a refusal with one of a set of error codes, or success.  After the
implementation answered, :meth:`Model.settle` compares the answer with the contract, returns
the violations (each naming the clause it breaks) and advances the model.  Where the contract
leaves a choice to the implementation (which queued item a claim takes, the jittered retry
instant, the opaque lease token, which messages a drain hands out), the model checks that the
implementation's choice is allowed and then adopts it.

It never imports an implementation and performs no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ledgercheck.spec import Spec, rules
from ledgercheck.spec.args import arg_problem, is_num
from ledgercheck.spec.rules import fold
from ledgercheck.transport.protocol import Outcome

TOLERANCE = 1e-6


@dataclass(frozen=True)
class Violation:
    clause: str
    message: str
    op: str = ""

    def __str__(self) -> str:
        return f"[{self.clause}] {self.op + ': ' if self.op else ''}{self.message}"


class UnknownClause(KeyError):
    """A clause id the harness names that the contract does not define."""

    def __init__(self, clause: str, spec: Spec) -> None:
        super().__init__(clause)
        self.clause = clause
        self.contract = f"{spec.name} {spec.version}"

    def __str__(self) -> str:
        return f"clause id {self.clause!r} is not in the contract ({self.contract}): a harness bug"


@dataclass
class Refuse:
    codes: frozenset[str]
    clause: str
    why: str


@dataclass
class Accept:
    handler: Callable[[Any], list[Violation]]
    clause: str  # blamed when the implementation refuses
    why: str
    also_refuse: frozenset[str] = frozenset()  # refusals that are acceptable too (nothing changes)
    refused_as: Mapping[str, str] = field(default_factory=dict)  # error code -> clause blamed for that refusal


Expectation = Refuse | Accept


# The holder's write carries the live lease (now <= lease_expires_at + grace): refusing it as
# stale misjudges which lease is live, the judgement lease.fencing is about.
_LIVE_LEASE_REFUSED: Mapping[str, str] = {"stale_lease": "lease.fencing"}


class _Any:
    def __repr__(self) -> str:
        return "ANY"

    def __copy__(self) -> _Any:
        return self

    def __deepcopy__(self, memo: Any) -> _Any:
        return self  # Model.fork() keeps the one sentinel


ANY = _Any()  # in Model.open_fields: any value is allowed


class Indefinite(Exception):
    """Raised by settle() for an indefinite error: the caller must resync the touched items."""


_is_num = is_num


# The clause that owns each snapshot field, blamed when a field disagrees in a snapshot an
# operation returned without changing that field (the divergence came from earlier).
FIELD_OWNER = {
    "attempt": "retry.exhausted", "started_at": "retry.execution_timeout", "owner": "lease.acquire",
    "lease_token": "lease.acquire", "lease_version": "lease.version.monotonic", "lease_expires_at": "lease.acquire",
    "waiting_kind": "waiting.requires_ref", "waiting_ref": "waiting.requires_ref", "waiting_deadline": "waiting.deadline",
    "next_retry_at": "retry.bounds", "error_class": "retry.schedule", "cancel_requested": "cancel.intent_first",
    "quarantined": "recovery.quarantine.visible",
}


class Model:
    """The contract as a state machine.  ``profiles`` limits which clauses may be reported."""

    def __init__(self, spec: Spec, profiles: Iterable[str] | None = None, tolerance: float = TOLERANCE) -> None:
        self.spec = spec
        self.profiles = set(profiles) if profiles is not None else set(spec.profiles)
        self.tol = tolerance
        self._clause_profile = {c.id: c.profile for c in spec.clauses}
        self.items: dict[str, dict[str, Any]] = {}
        self.events: dict[str, list[dict[str, Any]]] = {}
        self.order: dict[str, int] = {}  # creation sequence
        self.identity: dict[tuple[Any, ...], str] = {}
        self.policies: dict[str, dict[str, Any] | None] = {}
        self.tokens: dict[str, list[str]] = {}  # every token ever issued per item, oldest first
        self.blame: dict[str, dict[str, str]] = {}  # per item: field -> clause for the last change
        self.blame_default: dict[str, str] = {}
        self.receipts: dict[str, dict[str, Any]] = {}
        self.receipt_order: list[str] = []
        # items whose receipts recovery marked where the contract also lets them stay pending
        self.unresolved: set[str] = set()
        self.inbox: dict[str, list[dict[str, Any]]] = {}
        self.outbox: dict[str, dict[str, Any]] = {}
        self.outbox_order: list[str] = []
        self.logs: dict[str, list[dict[str, Any]]] = {}
        self.touched: set[str] = set()
        self._events_before: dict[str, int] = {}
        self._wait_kinds = dict(spec.waiting_statuses)  # kind -> status
        self._pending_point = next(p for p, c in spec.crash_points.items() if c.journal == "pending")
        self._compared = [(n, f.compare) for n, f in spec.work_fields.items() if f.compare != "none"]
        # status_reason is not compared in general (close-out, cancel and requeue store the
        # caller's free text); the contract fixes it only for work the monitor marked timeout
        # (core.expire.timeout_reason): item -> the reasons its record may store, until the
        # item changes again
        self.fixed_reason: dict[str, frozenset[str]] = {}
        # fields whose value after an item's last operation the contract leaves open: item ->
        # field -> the other values an implementation may store (ANY: whatever it likes).  The
        # model predicts one value; another allowed one is taken over (snapshot and event data)
        self.open_fields: dict[str, dict[str, tuple[Any, ...]]] = {}

    # ------------------------------------------------------------------ public interface
    def fork(self) -> Model:
        return copy.deepcopy(self)

    def claimed(self, clause: str) -> bool:
        """Whether ``clause`` belongs to a profile under test.  An id the contract does not
        have is a bug in the harness (a misspelt id would otherwise drop its violation
        silently), so it raises :class:`UnknownClause`."""
        try:
            return self._clause_profile[clause] in self.profiles
        except KeyError:
            raise UnknownClause(clause, self.spec) from None

    def keep(self, violations: Iterable[Violation]) -> list[Violation]:
        return [v for v in violations if self.claimed(v.clause)]

    def expect(self, op: str, args: Mapping[str, Any]) -> Expectation:
        handler = getattr(self, f"_op_{op}", None)
        if handler is None:
            raise KeyError(f"the model has no operation {op!r}")
        bad = self._bad_args(op, args)
        if bad is not None:
            clause, msg = bad
            codes = {"invalid_argument"}
            wid = args.get("work_id")
            if isinstance(wid, str) and op not in ("create", "outbox_enqueue") and wid not in self.items:
                codes.add("not_found")
            if self._nonterminal_close_out(op, args):
                # a close-out to a status that exists but is not terminal is both an argument
                # out of its range and a pair the table forbids (contract.md: "An operation that
                # would make a forbidden move fails with invalid_transition"): either code is right
                codes.add("invalid_transition")
            return Refuse(frozenset(codes), clause, msg)
        return handler(dict(args))

    def settle(self, op: str, exp: Expectation, outcome: Outcome) -> list[Violation]:
        self.touched = set()
        if not outcome.ok and not outcome.definite:
            raise Indefinite(f"{op}: {outcome.code}: {outcome.message}")
        if isinstance(exp, Refuse):
            if outcome.ok:
                return self.keep([Violation(exp.clause, f"should be refused with {'/'.join(sorted(exp.codes))} ({exp.why}) but succeeded", op)])
            if outcome.code not in exp.codes:
                return self.keep([Violation(exp.clause, f"refused with {outcome.code!r} but the contract says {'/'.join(sorted(exp.codes))} ({exp.why})", op)])
            return []
        if not outcome.ok:
            if outcome.code in exp.also_refuse:
                return []
            if outcome.code == "unsupported":
                # the harness never gets here: it judges unsupported answers itself as "not offered"
                # (Harness._unsupported, docs/results.md); a direct user of the model sees a refusal
                return self.keep([Violation(exp.clause, f"operation not supported by the implementation ({outcome.message})", op)])
            clause = exp.refused_as.get(outcome.code, exp.clause)
            return self.keep([Violation(clause, f"refused with {outcome.code!r} ({outcome.message}) but should succeed: {exp.why}", op)])
        try:
            found = exp.handler(outcome.value)
        except _Bad as bad:
            found = [Violation(bad.clause, bad.message)]
        return self.keep([Violation(v.clause, v.message, op) for v in found])

    def run(self, op: str, args: Mapping[str, Any], outcome: Outcome) -> list[Violation]:
        return self.settle(op, self.expect(op, args), outcome)

    # ------------------------------------------------------------------ comparisons
    def check_work(self, actual: Any, work_id: str | None = None, blame: str | None = None) -> list[Violation]:
        """Compare an implementation's snapshot with the model's (``blame`` overrides the clause)."""
        if not isinstance(actual, Mapping):
            return self.keep([Violation("core.status.enum", f"snapshot is not an object: {actual!r:.80}")])
        wid = work_id or actual.get("work_id")
        if wid not in self.items:
            return self.keep([Violation("core.list.complete", f"unknown work id {wid!r} in a snapshot")])
        if blame is not None:
            return self.keep(self._compare_work(self.items[wid], actual, {}, blame))
        return self.keep(self._compare_work(self.items[wid], actual, self.blame.get(wid, {}), self.blame_default.get(wid, "core.transition.allowed")))

    def check_events(self, work_id: str, actual: Any) -> list[Violation]:
        return self.keep(self._compare_events(work_id, actual))

    def check_fold(self, actual_work: Mapping[str, Any], actual_events: list[Mapping[str, Any]]) -> list[Violation]:
        """The implementation's own snapshot must equal the fold of its own events."""
        folded = fold(self.spec, actual_events)
        out = []
        for name, f in self.spec.work_fields.items():
            if not f.fold or f.compare == "none":
                continue
            if not self._same(f.compare, folded.get(name), actual_work.get(name)):
                out.append(Violation("eventlog.fold", f"{actual_work.get('work_id')}: fold(events).{name} = {folded.get(name)!r} but the snapshot has {actual_work.get(name)!r}"))
        return self.keep(out)

    # ------------------------------------------------------------------ helpers
    def _same(self, kind: str, a: Any, b: Any) -> bool:
        if a is b or (a == b and type(a) is type(b)):
            return True
        if kind == "none":
            return True
        if kind == "presence":
            return (a is None) == (b is None)
        if kind == "time":
            if a is None or b is None:
                return a is None and b is None
            return _is_num(a) and _is_num(b) and abs(a - b) <= self.tol
        if _is_num(a) and _is_num(b):
            return a == b
        return a == b and {type(a), type(b)} <= {int, float}

    def _compare_work(self, expect: Mapping[str, Any], actual: Mapping[str, Any], blame: Mapping[str, str], default: str) -> list[Violation]:
        out: list[Violation] = []
        status = actual.get("status")
        if status not in self.spec.statuses:
            out.append(Violation("core.status.enum", f"{expect['work_id']}: status {status!r} is not a contract status"))
            return out
        for name, kind in self._compared:
            if name not in actual:
                out.append(Violation(blame.get(name, default), f"{expect['work_id']}: snapshot lacks field {name!r}"))
                continue
            a, b = expect.get(name), actual[name]
            if (a is b or (a == b and type(a) is type(b))) or self._same(kind, a, b):
                continue
            if self._allowed_other(expect["work_id"], name, kind, b):
                if isinstance(expect, dict):
                    expect[name] = copy.deepcopy(b)  # the implementation's choice, from now on
                continue
            clause = blame.get(name) or (FIELD_OWNER.get(name, default) if default != "core.create.initial" else default)
            out.append(Violation(clause, f"{expect['work_id']}: {name} is {b!r}, the contract says {a!r}"))
        fixed = self.fixed_reason.get(expect["work_id"])
        if fixed is not None and expect.get("status") == status and actual.get("status_reason") in fixed \
                and isinstance(expect, dict):
            expect["status_reason"] = actual.get("status_reason")  # the phase the record names, from now on
        if fixed is not None and expect.get("status") == status and actual.get("status_reason") not in fixed:
            out.append(Violation("core.expire.timeout_reason", f"{expect['work_id']}: marked {status} by the monitor, status_reason is "
                                 f"{actual.get('status_reason')!r}, the phase that ran out is {'/'.join(sorted(fixed))}"))
        return out

    def _compare_events(self, wid: str, actual: Any) -> list[Violation]:
        out: list[Violation] = []
        exp = self.events.get(wid, [])
        if not isinstance(actual, list):
            return [Violation("trail.append_only", f"{wid}: events are not a list")]
        before = self._events_before.get(wid, len(exp))
        n = min(len(exp), len(actual))
        for i in range(n):
            e, a = exp[i], actual[i]
            if not isinstance(a, Mapping):
                out.append(Violation("trail.append_only", f"{wid}: event {i} is not an object"))
                continue
            old = i < before
            seq = self.spec.first_seq + i
            if a.get("seq") != seq:
                out.append(Violation("trail.append_only", f"{wid}: event {i} has seq {a.get('seq')!r}, expected {seq}"))
            if a.get("work_id") != wid:
                clause = "trail.append_only" if old else "trail.one_per_transition"
                out.append(Violation(clause, f"{wid}: event {seq} in its trail names the item {a.get('work_id')!r}"))
            if a.get("type") != e["type"]:
                clause = "trail.append_only" if old else "trail.types"
                out.append(Violation(clause, f"{wid}: event {seq} is {a.get('type')!r}, the contract says {e['type']!r}"))
                continue
            if a.get("from_status") != e["from_status"] or a.get("to_status") != e["to_status"]:
                clause = "trail.append_only" if old else "trail.one_per_transition"
                out.append(Violation(clause, f"{wid}: {e['type']} event {seq} records {a.get('from_status')!r} -> {a.get('to_status')!r}, expected {e['from_status']!r} -> {e['to_status']!r}"))
            data = a.get("data")
            if not isinstance(data, Mapping):
                out.append(Violation("eventlog.event_data", f"{wid}: event {seq} has no data object"))
                continue
            for fname in self.spec.events[e["type"]].data:
                kind = self.spec.work_fields[fname].compare
                if fname not in data:
                    out.append(Violation("eventlog.event_data", f"{wid}: {e['type']} event {seq} lacks data.{fname}"))
                elif not self._same(kind if kind != "none" else "exact", e["data"].get(fname), data.get(fname)):
                    if not old and self._allowed_other(wid, fname, kind if kind != "none" else "exact", data.get(fname)):
                        e["data"][fname] = copy.deepcopy(data.get(fname))
                        continue
                    clause = "trail.append_only" if old else "eventlog.event_data"
                    out.append(Violation(clause, f"{wid}: {e['type']} event {seq} has data.{fname} = {data.get(fname)!r}, expected {e['data'].get(fname)!r}"))
        if len(actual) != len(exp):
            extra = actual[len(exp):] if len(actual) > len(exp) else []
            missing = exp[len(actual):] if len(exp) > len(actual) else []
            if len(actual) < before:
                out.append(Violation("trail.append_only", f"{wid}: {before - len(actual)} earlier event(s) disappeared"))
            elif missing:
                names = ", ".join(m["type"] for m in missing)
                out.append(Violation("trail.one_per_transition", f"{wid}: missing event(s): {names}"))
            else:
                names = ", ".join(str(x.get("type")) if isinstance(x, Mapping) else "?" for x in extra)
                out.append(Violation("trail.one_per_transition", f"{wid}: unexpected extra event(s): {names}"))
        return out

    def _lease_problem(self, it: Mapping[str, Any], token: Any, now: float) -> str | None:
        if not self.spec.statuses[it["status"]].leased or it["lease_token"] is None:
            return "no live lease"
        if token != it["lease_token"]:
            if token in self.tokens.get(it["work_id"], []):
                return "token of an earlier lease"
            return "token is not the item's lease"
        lt = self.spec.lease_for(it["source_system"])
        if now > it["lease_expires_at"] + lt.grace + self.tol:
            return "lease lapsed (past expiry + grace)"
        return None

    def _ambiguous(self, a: float, b: float) -> bool:
        """True when a and b are too close to call under this model's tolerance (never at 0)."""
        return self.tol > 0 and abs(a - b) <= self.tol

    def _forbidden_blame(self, src: str, dst: str | None, op: str) -> str:
        if dst is not None and (src, dst) in self.spec.forbidden_examples:
            return "core.transition.corruption"
        if self.spec.terminal(src) and op != "requeue":
            return "core.terminal.immutable"
        if op == "requeue":
            return "core.requeue.terminal"
        return "core.transition.forbidden"

    def _refuse_transition(self, it: Mapping[str, Any], dst: str | None, op: str, lease_problem: str | None = None) -> Refuse:
        codes = {"invalid_transition"}
        if lease_problem is not None or op in ("renew",):
            codes.add("stale_lease")
        if dst is None:
            for cand in self.spec.statuses:
                if (it["status"], cand) in self.spec.forbidden_examples:
                    for t in self.spec.transitions:
                        if op in t.ops and t.dst == cand:
                            dst = cand
        return Refuse(frozenset(codes), self._forbidden_blame(it["status"], dst, op),
                      f"{it['work_id']} is {it['status']}; {op} cannot move it{' to ' + dst if dst else ''}")

    def _append(self, wid: str, etype: str, src: str | None, dst: str | None, now: float, item: Mapping[str, Any]) -> None:
        data = {f: copy.deepcopy(item.get(f)) for f in self.spec.events[etype].data}
        self.events.setdefault(wid, []).append({"type": etype, "from_status": src, "to_status": dst, "at": now, "data": data})

    def _begin(self, *wids: str) -> None:
        for w in wids:
            self._events_before[w] = len(self.events.get(w, []))
            self.touched.add(w)
            self.open_fields.pop(w, None)

    def _open(self, wid: str, name: str, *alternatives: Any) -> None:
        """After this operation, ``name`` may also hold one of ``alternatives`` (the contract
        does not say which); call after ``_begin``."""
        self.open_fields.setdefault(wid, {})[name] = alternatives

    def _allowed_other(self, wid: str, name: str, kind: str, got: Any) -> bool:
        alts = self.open_fields.get(wid, {}).get(name)
        if alts is None:
            return False
        return any(x is ANY or self._same(kind, x, got) for x in alts)

    def _commit(self, wid: str, new: dict[str, Any], blame: Mapping[str, str], default: str) -> None:
        self.fixed_reason.pop(wid, None)
        self.items[wid] = new
        self.blame[wid] = dict(blame)
        self.blame_default[wid] = default

    def _check_returned(self, new: Mapping[str, Any], res: Any, blame: Mapping[str, str], default: str) -> list[Violation]:
        if not isinstance(res, Mapping):
            raise _Bad(default, f"expected a work snapshot, got {res!r:.80}")
        return self._compare_work(new, res, blame, default)

    def _lease_blame(self, it: Mapping[str, Any], base: str) -> str:
        return "lease.per_source" if it["source_system"] in self.spec.lease_by_source else base

    def _fresh_token(self, wid: str, res: Mapping[str, Any], clause: str) -> tuple[str, list[Violation]]:
        tok = res.get("lease_token")
        out = []
        if not isinstance(tok, str) or not tok:
            out.append(Violation(clause, f"{wid}: acquiring a lease must give a non-empty token, got {tok!r}"))
        elif tok in self.tokens.get(wid, []):
            out.append(Violation(clause, f"{wid}: lease token {tok!r} was issued before; a new lease needs a fresh token"))
        return tok, out

    # ------------------------------------------------------------------ argument checks
    def _bad_args(self, op: str, args: Mapping[str, Any]) -> tuple[str, str] | None:
        bad = arg_problem(self.spec, op, args)
        if bad is None:
            return None
        name, problem = bad
        return self._arg_blame(op, name, args), f"{name} {problem}" if problem.startswith("is ") else f"{name}: {problem}"

    def _nonterminal_close_out(self, op: str, args: Mapping[str, Any]) -> bool:
        st = args.get("status")
        if op != "close_out" or not isinstance(st, str) or st not in self.spec.statuses or self.spec.terminal(st):
            return False
        bad = arg_problem(self.spec, op, args)
        return bad is not None and bad[0] == "status"

    def _arg_blame(self, op: str, name: str, args: Mapping[str, Any]) -> str:
        table = {
            ("create", "source_system"): "core.create.source_system",
            ("create", "priority"): "core.create.source_system",
            ("create", "source_run_id"): "core.scheduler.run_identity",
            ("create", "retry_policy"): "retry.policy_override",
            ("set_waiting", "kind"): "waiting.requires_ref",
            ("set_waiting", "ref"): "waiting.requires_ref",
            ("fail", "error_class"): "retry.unknown_class",
        }
        if (op, name) == ("close_out", "status"):
            st = args.get("status")
            return "core.waiting_closeout.exclusive" if st in self._wait_kinds.values() else "core.close_out.explicit"
        return table.get((op, name), "core.invalid_argument")

    # ------------------------------------------------------------------ core operations
    def _new_item(self, wid: str, a: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "work_id": wid,
            "source_system": a["source_system"],
            "source_id": a["source_id"],
            "source_run_id": a.get("source_run_id"),
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
                if not isinstance(res, Mapping) or not isinstance(res.get("work"), Mapping):
                    raise _Bad("core.create.unique_unit", f"expected {{work, created}}, got {res!r:.80}")
                if res.get("created") is not False:
                    out.append(Violation("core.create.unique_unit", f"a second create for {key} must report created=false"))
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
            if not isinstance(res, Mapping) or not isinstance(res.get("work"), Mapping):
                raise _Bad("core.create.initial", f"expected {{work, created}}, got {res!r:.80}")
            w = res["work"]
            wid = w.get("work_id")
            blame = "core.scheduler.run_identity" if sibling else "core.create.unique_unit"
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
            self.tokens[wid] = []
            self.events[wid] = []
            self._append(wid, "work_created", None, item["status"], a["now"], item)
            self._commit(wid, item, {}, "core.create.initial")
            out += self._compare_work(item, w, {}, "core.create.initial")
            return out

        return Accept(new, "core.create.initial", "a new unit of work must be recorded")

    def _op_get(self, a: dict[str, Any]) -> Expectation:
        wid = a["work_id"]
        if wid not in self.items:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no work {wid!r}")
        return Accept(lambda res: self.check_work(res, wid) if isinstance(res, Mapping) else [Violation("core.list.complete", f"get returned {res!r:.60}")],
                      "core.not_found", "the record exists")

    def _op_list(self, a: dict[str, Any]) -> Expectation:
        want = [w for w, it in self.items.items()
                if (a.get("status") is None or it["status"] == a["status"])
                and (a.get("quarantined") is None or it["quarantined"] == a["quarantined"])]

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, list) or not all(isinstance(x, Mapping) for x in res):
                raise _Bad("core.list.complete", f"list must return a list of snapshots, got {res!r:.80}")
            got = [x.get("work_id") for x in res]
            out = []
            if sorted(map(str, got)) != sorted(want) or len(got) != len(set(got)):
                missing = set(want) - set(got)
                extra = set(got) - set(want)
                out.append(Violation("core.list.complete", f"list({_fmt_filter(a)}) missing {sorted(missing)} extra {sorted(map(str, extra))}"))
            for x in res:
                if x.get("work_id") in self.items:
                    out += self.check_work(x)
            return out

        return Accept(h, "core.list.complete", "listing always works")

    def _op_events(self, a: dict[str, Any]) -> Expectation:
        wid = a["work_id"]
        if wid not in self.items:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no work {wid!r}")
        return Accept(lambda res: self._compare_events(wid, res), "core.not_found", "the record exists")

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
            if not isinstance(res, Mapping):
                raise _Bad("core.transition.allowed", f"claim must return a snapshot or null, got {res!r:.80}")
            wid = res.get("work_id")
            if not candidates:
                clause = "core.claim.empty"
                if wid in self.items and self.spec.statuses[self.items[wid]["status"]].leased:
                    clause = "lease.single_holder"
                return [Violation(clause, f"claim returned {wid!r} although nothing could be claimed")]
            if wid not in candidates:
                if wid in self.items:
                    it = self.items[wid]
                    clause = "lease.single_holder" if self.spec.statuses[it["status"]].leased else self._forbidden_blame(it["status"], "running", "claim")
                    return [Violation(clause, f"claim took {wid!r}, which is {it['status']}")]
                return [Violation("core.transition.allowed", f"claim returned unknown work {wid!r}")]
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
            self.tokens[wid].append(tok)
            self._append(wid, self.spec.operations["claim"].event_for(dst), it["status"], dst, now, new)
            self._commit(wid, new, blame, "core.transition.allowed")
            return out + self._compare_work(new, res, blame, "core.transition.allowed")

        return Accept(h, "core.transition.allowed", "claim always answers (null when nothing is claimable)")

    def _lease_guard(self, op: str, a: Mapping[str, Any], dst: str | None) -> tuple[dict[str, Any], Refuse | None]:
        wid = a["work_id"]
        if wid not in self.items:
            return {}, Refuse(frozenset({"not_found"}), "core.not_found", f"no work {wid!r}")
        it = self.items[wid]
        lp = self._lease_problem(it, a.get("token"), a["now"])
        if dst is not None and not self.spec.allowed(it["status"], dst) or dst is not None and op not in self.spec.edge(it["status"], dst).ops:
            return it, self._refuse_transition(it, dst, op, lp)
        if lp is not None:
            return it, Refuse(frozenset({"stale_lease"}), "lease.fencing", f"{wid}: {lp}")
        return it, None

    def _release(self, new: dict[str, Any]) -> None:
        new.update(owner=None, lease_token=None, lease_expires_at=None)

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

    def _op_cancel(self, a: dict[str, Any]) -> Expectation:
        wid, now = a["work_id"], a["now"]
        if wid not in self.items:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no work {wid!r}")
        it = self.items[wid]
        op = self.spec.operations["cancel"]
        if it["status"] in op.intent_from:
            def intent(res: Any) -> list[Violation]:
                new = dict(it)
                self._begin(wid)
                if not it["cancel_requested"]:
                    new = rules.apply_effects(self.spec, "cancel", it, "intent", now=now)
                    self._append(wid, op.intent_event, None, None, now, new)
                self._commit(wid, new, {"status": "cancel.intent_first", "cancel_requested": "cancel.intent_first"}, "cancel.intent_first")
                return self._check_returned(new, res, {}, "cancel.intent_first")
            return Accept(intent, "cancel.intent_first", f"cancelling running work {wid} records the intent")
        targets = self.spec.targets("cancel", it["status"])
        if not targets:
            return self._refuse_transition(it, "cancelled", "cancel")
        dst = targets[0]
        clause = "waiting.cancel" if it["status"] in self._wait_kinds.values() else "cancel.immediate"

        def h(res: Any) -> list[Violation]:
            new = rules.apply_effects(self.spec, "cancel", it, now=now, args={"reason": a.get("reason")}, dst=dst)
            self._begin(wid)
            self._open_effects(wid, "cancel", it)
            self._append(wid, op.event_for(dst), it["status"], dst, now, new)
            self._commit(wid, new, {}, clause)
            return self._check_returned(new, res, {}, clause)

        return Accept(h, clause, f"{wid} is {it['status']} and is cancelled at once")

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
            self._commit(wid, new, blame, "core.requeue.terminal")
            return self._check_returned(new, res, blame, "core.requeue.terminal")

        return Accept(h, "core.requeue.terminal", f"{wid} is terminal and may be requeued")

    def _open_effects(self, wid: str, op: str, before: Mapping[str, Any], step: str = "move") -> None:
        """Leave open what the contract leaves open after a step of ``op`` (its may_keep and
        may_clear effects); call after ``_begin``."""
        for f, other in rules.open_fields(self.spec, op, before, step).items():
            self._open(wid, f, other)

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

    # ------------------------------------------------------------------ lease
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
            self._commit(wid, new, {"lease_expires_at": ttl_clause}, "lease.renew.extends")
            return self._check_returned(new, res, {"lease_expires_at": ttl_clause}, "lease.renew.extends")

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

    # ------------------------------------------------------------------ waiting
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
            if not isinstance(res, Mapping):
                raise _Bad("waiting.resume", f"expected a snapshot, got {res!r:.80}")
            tok, out = self._fresh_token(wid, res, "waiting.resume")
            lt = self.spec.lease_for(it["source_system"])
            new = dict(it)
            new.update(status=dst, owner=a["owner"], lease_token=tok, lease_version=it["lease_version"] + 1,
                       lease_expires_at=now + lt.ttl, waiting_kind=None, waiting_ref=None, waiting_deadline=None, started_at=now)
            blame = {"lease_version": "lease.version.monotonic", "lease_expires_at": self._lease_blame(it, "waiting.resume"),
                     "started_at": "retry.execution_timeout"}
            self._begin(wid)
            self.tokens[wid].append(tok)
            self._append(wid, self.spec.operations["resume"].event_for(dst), it["status"], dst, now, new)
            self._commit(wid, new, blame, "waiting.resume")
            return out + self._compare_work(new, res, blame, "waiting.resume")

        return Accept(h, "waiting.resume", f"{wid} is waiting and may be resumed")

    # ------------------------------------------------------------------ retry
    def _op_fail(self, a: dict[str, Any]) -> Expectation:
        wid, now = a["work_id"], a["now"]
        if wid not in self.items:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no work {wid!r}")
        it = self.items[wid]
        targets = self.spec.targets("fail", it["status"])
        lp = self._lease_problem(it, a["token"], now)
        if not targets:
            return self._refuse_transition(it, "failed", "fail", lp)
        if lp is not None:
            return Refuse(frozenset({"stale_lease"}), "lease.fencing", f"{wid}: {lp}")
        policy = self.spec.retry_policy_for(it["source_system"], self.policies.get(wid))
        retryable = self.spec.error_classes[a["error_class"]]
        op = self.spec.operations["fail"]
        retry_to = next((t for t in targets if not self.spec.terminal(t)), None)
        fail_to = next((t for t in targets if self.spec.terminal(t)), None)
        overridden = bool(self.policies.get(wid))
        if retryable and it["attempt"] < policy.max_attempts and retry_to:
            dst, status_clause = retry_to, "retry.schedule"
        else:
            dst = fail_to
            status_clause = "retry.non_retryable" if not retryable else "retry.exhausted"
        lo, hi = self.spec.backoff_range(policy, it["attempt"])

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, Mapping):
                raise _Bad(status_clause, f"expected a snapshot, got {res!r:.80}")
            out = []
            new = dict(it)
            new.update(status=dst, error_class=a["error_class"])
            self._release(new)
            blame = {"status": status_clause}
            if dst == retry_to:
                nra = res.get("next_retry_at")
                bounds_clause = "retry.policy_override" if overridden else "retry.bounds"
                if not _is_num(nra):
                    out.append(Violation(bounds_clause, f"{wid}: retry_scheduled needs next_retry_at, got {nra!r}"))
                    nra = now + hi
                elif nra > now + policy.max_backoff + self.tol:
                    out.append(Violation("retry.cap", f"{wid}: retry after attempt {it['attempt']} is due in {nra - now:g}s, above max_backoff {policy.max_backoff:g}s"))
                elif not (now + lo - self.tol <= nra <= now + hi + self.tol):
                    out.append(Violation(bounds_clause, f"{wid}: retry after attempt {it['attempt']} is due in {nra - now:g}s, outside [{lo:g}, {hi:g}]s ({policy.jitter} jitter)"))
                new["next_retry_at"] = nra
                blame["next_retry_at"] = bounds_clause
            else:
                new.update(finished_at=now, result=None)
            self._begin(wid)
            if dst != retry_to:
                self._open(wid, "result", ANY)  # the contract does not say what a failed record's result holds
            self._append(wid, op.event_for(dst), it["status"], dst, now, new)
            self._commit(wid, new, blame, status_clause)
            return out + self._compare_work(new, res, blame, status_clause)

        return Accept(h, status_clause, f"{wid} fails with {a['error_class']} at attempt {it['attempt']} -> {dst}",
                      refused_as=_LIVE_LEASE_REFUSED)

    def _op_promote_due(self, a: dict[str, Any]) -> Expectation:
        now = a["now"]
        sure, maybe = set(), set()
        for wid, it in self.items.items():
            if self.spec.targets("promote_due", it["status"]) and it["next_retry_at"] is not None:
                if self._ambiguous(now, it["next_retry_at"]):
                    maybe.add(wid)
                elif now >= it["next_retry_at"]:
                    sure.add(wid)
        op = self.spec.operations["promote_due"]

        def h(res: Any) -> list[Violation]:
            out = []
            moves = _moves(res, "retry.promote")
            got = {m["work_id"] for m in moves}
            early = got - sure - maybe
            late = sure - got
            if early:
                out.append(Violation("retry.promote", f"promoted {sorted(early)} before next_retry_at (now {now})"))
            if late:
                out.append(Violation("retry.promote", f"did not promote {sorted(late)}, due at or before {now}"))
            for wid in got & (sure | maybe):
                it = self.items[wid]
                dst = self.spec.targets("promote_due", it["status"])[0]
                new = dict(it)
                new.update(status=dst, next_retry_at=None)
                self._begin(wid)
                self._open(wid, "next_retry_at", it["next_retry_at"])  # the contract does not say it is cleared
                self._append(wid, op.event_for(dst), it["status"], dst, now, new)
                self._commit(wid, new, {}, "retry.promote")
            return out

        return Accept(h, "retry.promote", "the monitor always answers")

    # ------------------------------------------------------------------ idempotency
    def _work_lease_check(self, wid: str, token: Any, now: float, clause: str) -> Refuse | None:
        if token is None:
            return None
        lp = self._lease_problem(self.items[wid], token, now)
        if lp is not None:
            return Refuse(frozenset({"stale_lease"}), clause, f"{wid}: {lp}")
        return None

    def _op_effect_begin(self, a: dict[str, Any]) -> Expectation:
        wid, now = a["work_id"], a["now"]
        if wid not in self.items:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no work {wid!r}")
        key = self.spec.effect_key(work_id=wid, step_id=a["step_id"], tool=a["tool"])
        ih = self.spec.input_hash(a["input"])
        existing = self.receipts.get(key)
        fenced = self._work_lease_check(wid, a.get("token"), now, "idem.fenced")
        if existing is not None and existing["input_hash"] != ih:
            codes = {"idempotency_conflict"} | ({"stale_lease"} if fenced else set())
            return Refuse(frozenset(codes), "idem.conflict", f"key {key[:12]} was begun with another input")
        if fenced:
            return fenced

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, Mapping) or not isinstance(res.get("receipt"), Mapping):
                raise _Bad("idem.begin", f"expected {{receipt, created}}, got {res!r:.80}")
            out = []
            if existing is not None:
                if res.get("created") is not False:
                    out.append(Violation("idem.begin", f"beginning key {key[:12]} again must report created=false"))
                return out + self._compare_receipt(existing, res["receipt"], "idem.begin")
            if res.get("created") is not True:
                out.append(Violation("idem.begin", f"beginning key {key[:12]} the first time must report created=true"))
            rec = {"key": key, "work_id": wid, "step_id": a["step_id"], "tool": a["tool"], "step_class": a["step_class"],
                   "input_hash": ih, "state": "pending", "result": None}
            self.receipts[key] = rec
            self.receipt_order.append(key)
            return out + self._compare_receipt(rec, res["receipt"], "idem.begin")

        return Accept(h, "idem.begin", "beginning an effect is always accepted")

    def _settled_receipt(self, rec: dict[str, Any]) -> None:
        """A later operation set the receipt's state: recovery's marking no longer speaks for it."""
        rec.pop("marked_by_recovery", None)
        if rec.pop("may_be", None) and not any(r.get("may_be") for r in self.receipts.values()
                                                            if r["work_id"] == rec["work_id"]):
            self.unresolved.discard(rec["work_id"])

    def _compare_receipt(self, exp: dict[str, Any], got: Any, clause: str) -> list[Violation]:
        if not isinstance(got, Mapping):
            return [Violation(clause, f"expected a receipt, got {got!r:.80}")]
        out = []
        for f in ("key", "input_hash"):
            if got.get(f) != exp[f]:
                out.append(Violation("idem.key.derivation", f"receipt {f} is {got.get(f)!r}, the contract's derivation gives {exp[f]!r}"))
        if exp.get("may_be") and got.get("state") in (exp["may_be"], exp["state"]):
            exp["state"] = got["state"]  # the implementation chose; from now on it is known
            del exp["may_be"]
            if not any(r.get("may_be") for r in self.receipts.values() if r["work_id"] == exp["work_id"]):
                self.unresolved.discard(exp["work_id"])
        for f in ("work_id", "step_id", "tool", "step_class", "state", "result"):
            if not same_json(got.get(f), exp[f]):
                c = clause
                if f == "result" and exp["state"] == "completed":
                    # the stored result is idem.record's; once a second record was tried, a
                    # changed result is that record overwriting the first
                    c = "idem.duplicate_returns_stored" if clause == "idem.duplicate_returns_stored" or exp.get("recorded_again") else "idem.record"
                if f == "state" and exp.get("marked_by_recovery"):
                    c = "recovery.receipt_marking"
                out.append(Violation(c, f"receipt {exp['key'][:12]} has {f} {got.get(f)!r}, expected {exp[f]!r}"))
        return out

    def _op_effect_lookup(self, a: dict[str, Any]) -> Expectation:
        rec = self.receipts.get(a["key"])

        def h(res: Any) -> list[Violation]:
            if rec is None:
                return [] if res is None else [Violation("idem.lookup_miss", f"lookup of unknown key {a['key'][:12]} returned {res!r:.60}")]
            if res is None:
                return [Violation("idem.retention" if rec["state"] == "completed" else "idem.begin", f"receipt {a['key'][:12]} ({rec['state']}) is gone")]
            return self._compare_receipt(rec, res, "idem.record")

        return Accept(h, "idem.lookup_miss", "lookups always answer")

    def _op_effect_record(self, a: dict[str, Any]) -> Expectation:
        key, now = a["key"], a["now"]
        rec = self.receipts.get(key)
        if rec is None:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no receipt {key[:12]}")
        fenced = self._work_lease_check(rec["work_id"], a.get("token"), now, "idem.fenced")
        if a["input_hash"] != rec["input_hash"]:
            # both refusals apply when the token is not live either; the contract orders neither
            codes = {"idempotency_conflict"} | ({"stale_lease"} if fenced else set())
            return Refuse(frozenset(codes), "idem.conflict", f"receipt {key[:12]} was begun with another input")
        if rec["state"] == "completed":
            def dup(res: Any) -> list[Violation]:
                rec["recorded_again"] = True
                return self._compare_receipt(rec, res, "idem.duplicate_returns_stored")
            return Accept(dup, "idem.duplicate_returns_stored", "recording again returns the stored result",
                          also_refuse=frozenset({"stale_lease"}) if fenced else frozenset())
        if fenced:
            return fenced
        if (rec["state"], "completed") not in self.spec.receipt_transitions:
            return Refuse(frozenset({"invalid_transition"}), "idem.receipt_states", f"receipt {key[:12]} is {rec['state']}")

        def h(res: Any) -> list[Violation]:
            rec.update(state="completed", result=copy.deepcopy(a["result"]))
            self._settled_receipt(rec)
            return self._compare_receipt(rec, res, "idem.record")

        return Accept(h, "idem.record", f"receipt {key[:12]} is {rec['state']} and can be completed")

    def _op_effect_mark(self, a: dict[str, Any]) -> Expectation:
        key = a["key"]
        rec = self.receipts.get(key)
        if rec is None:
            codes = {"not_found"} | ({"invalid_argument"} if a["state"] == "completed" else set())
            return Refuse(frozenset(codes), "core.not_found", f"no receipt {key[:12]}")
        if (rec["state"], a["state"]) not in self.spec.receipt_transitions:
            # an implementation that completes only through effect_record may say so instead
            codes = {"invalid_transition"} | ({"invalid_argument"} if a["state"] == "completed" else set())
            return Refuse(frozenset(codes), "idem.receipt_states", f"receipt {key[:12]} cannot go {rec['state']} -> {a['state']}")

        def h(res: Any) -> list[Violation]:
            rec["state"] = a["state"]
            self._settled_receipt(rec)
            return self._compare_receipt(rec, res, "idem.receipt_states")

        # completing by mark (no result) is a transition the table allows; an implementation
        # may also insist on effect_record, which carries the result
        also = frozenset({"invalid_argument", "invalid_transition"}) if a["state"] == "completed" else frozenset()
        return Accept(h, "idem.receipt_states", f"{rec['state']} -> {a['state']} is a receipt transition", also_refuse=also)

    def _op_effect_list(self, a: dict[str, Any]) -> Expectation:
        wid = a["work_id"]
        if wid not in self.items:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no work {wid!r}")
        want = [self.receipts[k] for k in self.receipt_order if self.receipts[k]["work_id"] == wid]

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, list):
                raise _Bad("idem.begin", f"effect_list must return a list, got {res!r:.80}")
            got = {r.get("key"): r for r in res if isinstance(r, Mapping)}
            out = []
            if set(got) != {r["key"] for r in want} or len(got) != len(res):
                out.append(Violation("idem.begin", f"{wid}: journal holds {sorted(k[:12] for k in got if isinstance(k, str))}, expected {sorted(r['key'][:12] for r in want)}"))
            for r in want:
                if r["key"] in got:
                    out += self._compare_receipt(r, got[r["key"]], "idem.record")
            return out

        return Accept(h, "idem.begin", "the journal can always be listed")

    # ------------------------------------------------------------------ inbox
    def _box(self, recipient: str) -> list[dict[str, Any]]:
        return self.inbox.setdefault(recipient, [])

    def _op_inbox_deliver(self, a: dict[str, Any]) -> Expectation:
        box = self._box(a["recipient"])
        dup = any(m["message_id"] == a["message_id"] for m in box)

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, Mapping) or not isinstance(res.get("delivered"), bool):
                raise _Bad("inbox.deliver.idempotent", f"expected {{delivered: bool}}, got {res!r:.80}")
            if dup:
                return [] if res["delivered"] is False else [Violation("inbox.deliver.idempotent", f"message {a['message_id']!r} delivered twice")]
            box.append({"message_id": a["message_id"], "sender": a["sender"], "body": copy.deepcopy(a.get("body")),
                        "state": "pending", "nacks": 0})
            return [] if res["delivered"] is True else [Violation("inbox.deliver.idempotent", f"first delivery of {a['message_id']!r} reported as duplicate")]

        return Accept(h, "inbox.deliver.idempotent", "delivery is always accepted")

    def _op_inbox_drain(self, a: dict[str, Any]) -> Expectation:
        box = self._box(a["recipient"])
        limit = a.get("max") or self.spec.inbox_drain_max

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, list) or not all(isinstance(m, Mapping) for m in res):
                raise _Bad("inbox.drain.max", f"drain must return a list of messages, got {res!r:.80}")
            out = []
            by_id = {m["message_id"]: m for m in box}
            if len(res) > limit:
                out.append(Violation("inbox.drain.max", f"drain(max={limit}) handed out {len(res)} messages"))
            seen = set()
            handed = []
            for m in res:
                mid = m.get("message_id")
                mm = by_id.get(mid)
                if mm is None:
                    out.append(Violation("inbox.deliver.idempotent", f"drain handed out unknown message {mid!r}"))
                    continue
                if mid in seen:
                    out.append(Violation("inbox.drain.inflight", f"drain handed out {mid!r} twice in one batch"))
                    continue
                seen.add(mid)
                if mm["state"] == "inflight":
                    out.append(Violation("inbox.drain.inflight", f"{mid!r} was handed out again before it was nacked"))
                elif mm["state"] == "acked":
                    out.append(Violation("inbox.ack", f"{mid!r} was handed out again after it was acknowledged"))
                elif mm["state"] == "dead":
                    out.append(Violation("inbox.dead_letter", f"dead-lettered {mid!r} was handed out again"))
                else:
                    handed.append(mm)
                if m.get("sender") != mm["sender"] or not same_json(m.get("body"), mm["body"]):
                    out.append(Violation("inbox.deliver.idempotent", f"{mid!r} came back with sender/body {m.get('sender')!r}/{m.get('body')!r:.40}"))
                if m.get("nacks") != mm["nacks"]:
                    out.append(Violation("inbox.nack.redeliver", f"{mid!r} reports {m.get('nacks')!r} nacks, expected {mm['nacks']}"))
            # per-sender FIFO: what is handed out for a sender is the head of its pending messages, in order
            pending = [m for m in box if m["state"] == "pending"]
            for sender in {m["sender"] for m in handed}:
                mine = [m["message_id"] for m in pending if m["sender"] == sender]
                got = [m["message_id"] for m in handed if m["sender"] == sender]
                if got != mine[: len(got)]:
                    out.append(Violation("inbox.fifo.per_sender", f"sender {sender!r}: handed out {got}, but pending in arrival order is {mine}"))
            if not res and limit >= 1:
                busy = {m["sender"] for m in box if m["state"] == "inflight"}
                ready = [m for m in pending if m["sender"] not in busy]
                if ready:
                    m0 = ready[0]
                    clause = "inbox.nack.redeliver" if m0["nacks"] else "inbox.deliver.idempotent"
                    out.append(Violation(clause, f"drain handed out nothing although {m0['message_id']!r} is pending"))
            for mm in handed:
                mm["state"] = "inflight"
            return out

        return Accept(h, "inbox.drain.max", "draining always answers")

    def _inbox_msg(self, a: Mapping[str, Any]) -> tuple[dict[str, Any] | None, Refuse | None]:
        for m in self._box(a["recipient"]):
            if m["message_id"] == a["message_id"]:
                return m, None
        return None, Refuse(frozenset({"not_found"}), "core.not_found", f"no message {a['message_id']!r} for {a['recipient']!r}")

    def _op_inbox_ack(self, a: dict[str, Any]) -> Expectation:
        m, refuse = self._inbox_msg(a)
        if refuse:
            return refuse
        if m["state"] == "acked":
            return Accept(lambda res: [], "inbox.ack", "acknowledging twice changes nothing", also_refuse=frozenset({"invalid_transition"}))
        if m["state"] != "inflight":
            return Refuse(frozenset({"invalid_transition"}), "inbox.ack", f"{m['message_id']!r} is {m['state']}, not handed out")

        def h(res: Any) -> list[Violation]:
            m["state"] = "acked"
            return []

        return Accept(h, "inbox.ack", f"{m['message_id']!r} is handed out and can be acknowledged")

    def _op_inbox_nack(self, a: dict[str, Any]) -> Expectation:
        m, refuse = self._inbox_msg(a)
        if refuse:
            return refuse
        if m["state"] != "inflight":
            return Refuse(frozenset({"invalid_transition"}), "inbox.nack.redeliver", f"{m['message_id']!r} is {m['state']}, not handed out")
        n = m["nacks"] + 1
        dead = n >= self.spec.inbox_max_nacks

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, Mapping):
                raise _Bad("inbox.dead_letter", f"expected {{dead, nacks}}, got {res!r:.80}")
            out = []
            if res.get("dead") is not dead:
                out.append(Violation("inbox.dead_letter", f"nack {n} of {m['message_id']!r} (max_nacks {self.spec.inbox_max_nacks}) reported dead={res.get('dead')!r}"))
            if res.get("nacks") != n:
                out.append(Violation("inbox.nack.redeliver", f"{m['message_id']!r} reports {res.get('nacks')!r} nacks, expected {n}"))
            m["nacks"] = n
            m["state"] = "dead" if dead else "pending"
            return out

        return Accept(h, "inbox.nack.redeliver", f"{m['message_id']!r} is handed out and can be nacked")

    def _op_inbox_dead(self, a: dict[str, Any]) -> Expectation:
        want = [m["message_id"] for m in self._box(a["recipient"]) if m["state"] == "dead"]

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, list):
                raise _Bad("inbox.dead_letter", f"expected a list, got {res!r:.80}")
            got = sorted(str(m.get("message_id")) for m in res if isinstance(m, Mapping))
            return [] if got == sorted(want) else [Violation("inbox.dead_letter", f"dead letters are {got}, expected {sorted(want)}")]

        return Accept(h, "inbox.dead_letter", "dead letters can always be listed")

    # ------------------------------------------------------------------ outbox
    def _op_outbox_enqueue(self, a: dict[str, Any]) -> Expectation:
        key = a["key"]
        if a.get("work_id") is not None and a["work_id"] not in self.items:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no work {a['work_id']!r}")
        existing = self.outbox.get(key)
        ph = self.spec.input_hash(a["payload"])
        if existing is not None and self.spec.input_hash(existing["payload"]) != ph:
            return Refuse(frozenset({"idempotency_conflict"}), "outbox.dedupe", f"outbox key {key!r} was used with another payload")

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, Mapping) or not isinstance(res.get("message"), Mapping):
                raise _Bad("outbox.intent_first", f"expected {{message, created}}, got {res!r:.80}")
            out = []
            if existing is not None:
                if res.get("created") is not False:
                    out.append(Violation("outbox.dedupe", f"enqueueing key {key!r} again created a second message"))
                return out + _compare_outbox(existing, res["message"], "outbox.dedupe")
            if res.get("created") is not True:
                out.append(Violation("outbox.dedupe", f"first enqueue of {key!r} reported created={res.get('created')!r}"))
            msg = {"key": key, "destination": a["destination"], "payload": copy.deepcopy(a["payload"]),
                   "work_id": a.get("work_id"), "state": "pending", "provider_ref": None}
            self.outbox[key] = msg
            self.outbox_order.append(key)
            return out + _compare_outbox(msg, res["message"], "outbox.intent_first")

        if existing is not None:
            # refusing a reuse of the key with the same payload is a dedupe error, not an intent
            # one; with another destination or work id the contract does not say whether that is
            # "different input" (idempotency_conflict), so either answer is taken
            other = existing["destination"] != a["destination"] or existing["work_id"] != a.get("work_id")
            return Accept(h, "outbox.dedupe", f"outbox key {key!r} is reused with the same payload: the existing message is returned",
                          also_refuse=frozenset({"idempotency_conflict"}) if other else frozenset())
        return Accept(h, "outbox.intent_first", "enqueueing is always accepted")

    def _op_outbox_pending(self, a: dict[str, Any]) -> Expectation:
        limit = a.get("max") or self.spec.outbox_pending_max
        pending = [k for k in self.outbox_order if self.outbox[k]["state"] == "pending"]

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, list) or not all(isinstance(m, Mapping) for m in res):
                raise _Bad("outbox.intent_first", f"expected a list of messages, got {res!r:.80}")
            got = [m.get("key") for m in res]
            out = []
            sent = [k for k in got if k in self.outbox and self.outbox[k]["state"] == "sent"]
            if sent:
                out.append(Violation("outbox.mark_sent", f"sent messages {sent} are still pending"))
            want_n = min(limit, len(pending))
            real = [k for k in got if k in pending]
            if len(got) > limit or len(real) != want_n or len(set(got)) != len(got):
                out.append(Violation("outbox.intent_first", f"pending(max={limit}) gave {len(real)} of {len(pending)} pending messages"))
            elif real != pending[:want_n]:
                out.append(Violation("outbox.order", f"pending messages in order {real}, enqueued as {pending[:want_n]}"))
            for m in res:
                if m.get("key") in self.outbox:
                    out += _compare_outbox(self.outbox[m["key"]], m, "outbox.intent_first")
            return out

        return Accept(h, "outbox.intent_first", "pending messages can always be listed")

    def _op_outbox_mark_sent(self, a: dict[str, Any]) -> Expectation:
        msg = self.outbox.get(a["key"])
        if msg is None:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no outbox message {a['key']!r}")

        def h(res: Any) -> list[Violation]:
            if msg["state"] == "pending":
                msg.update(state="sent", provider_ref=a["provider_ref"])
            return _compare_outbox(msg, res, "outbox.mark_sent")

        return Accept(h, "outbox.mark_sent", "marking sent is always accepted")

    # ------------------------------------------------------------------ event log
    def _op_log_append(self, a: dict[str, Any]) -> Expectation:
        stream = self.logs.setdefault(a["stream"], [])
        last = self.spec.first_seq - 1 + len(stream)
        if a["expected_seq"] != last:
            return Refuse(frozenset({"concurrent_append"}), "eventlog.append.conflict", f"stream {a['stream']!r} is at seq {last}, not {a['expected_seq']}")

        def h(res: Any) -> list[Violation]:
            seq = last + 1
            stream.append({"stream": a["stream"], "seq": seq, "kind": a["kind"], "payload": copy.deepcopy(a.get("payload") or {})})
            got = res.get("seq") if isinstance(res, Mapping) else None
            return [] if got == seq else [Violation("eventlog.append.expected_seq", f"append after seq {last} stored at {got!r}, expected {seq}")]

        return Accept(h, "eventlog.append.expected_seq", f"expected_seq {last} matches")

    def _op_log_read(self, a: dict[str, Any]) -> Expectation:
        start = a.get("from_seq") if a.get("from_seq") is not None else self.spec.first_seq
        want = [e for e in self.logs.get(a["stream"], []) if e["seq"] >= start]

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, list):
                raise _Bad("eventlog.read", f"expected a list of entries, got {res!r:.80}")
            got = [(e.get("seq"), e.get("kind"), e.get("payload") or {}) if isinstance(e, Mapping) else None for e in res]
            exp = [(e["seq"], e["kind"], e["payload"]) for e in want]
            same = len(got) == len(exp) and all(g is not None and g[:2] == x[:2] and same_json(g[2], x[2]) for g, x in zip(got, exp, strict=True))
            return [] if same else [Violation("eventlog.read", f"read({a['stream']!r}, from {start}) gave {[g[0] if g else None for g in got]}, expected seqs {[e[0] for e in exp]}")]

        return Accept(h, "eventlog.read", "reading always works")

    # ------------------------------------------------------------------ recovery
    def _journal(self, wid: str) -> list[tuple[str, str]]:
        """(state, step_class) of an item's receipts, in journal order."""
        return [(r["state"], r["step_class"]) for r in (self.receipts[k] for k in self.receipt_order) if r["work_id"] == wid]

    def _decision(self, wid: str) -> rules.Decision:
        return rules.recovery_decision(self.spec, self.items[wid], self._journal(wid), self.policies.get(wid))

    def recovery_plan(self, now: float) -> tuple[dict[str, rules.Decision], set[str]]:
        """Victims of a recovery scan at ``now``: id -> decision, and boundary items."""
        sure: dict[str, rules.Decision] = {}
        maybe: set[str] = set()
        for wid, it in self.items.items():
            lapse = rules.lease_lapse(self.spec, it)
            if lapse is not None and self._ambiguous(now, lapse):
                maybe.add(wid)
                continue
            last = (self.events.get(wid) or [{}])[-1].get("type")
            if rules.stale_for_recovery(self.spec, it, now, last):
                sure[wid] = self._decision(wid)
        return sure, maybe

    def _op_recover(self, a: dict[str, Any]) -> Expectation:
        now = a["now"]
        sure, maybe = self.recovery_plan(now)
        spec = self.spec
        op = spec.operations["recover"]

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, list) or not all(isinstance(v, Mapping) for v in res):
                raise _Bad("recovery.scan", f"recover must return a list of victims, got {res!r:.80}")
            out: list[Violation] = []
            got = {v.get("work_id"): v for v in res}
            for wid in got:
                if wid in sure or wid in maybe:
                    continue
                it = self.items.get(wid)
                if it is not None and it["status"] in self._wait_kinds.values():
                    out.append(Violation("recovery.waiting_untouched", f"recovery took waiting work {wid!r}"))
                else:
                    out.append(Violation("recovery.scan", f"recovery took {wid!r}, which is not stale ({it['status'] if it else 'unknown'})"))
            for wid, d in sure.items():
                if wid not in got:
                    out.append(Violation("recovery.scan", f"stale {wid!r} was not reported ({d.why})"))
            for wid, v in got.items():
                if wid not in self.items or (wid not in sure and wid not in maybe):
                    continue
                it = self.items[wid]
                d = sure[wid] if wid in sure else self._decision(wid)
                decision = d.name
                if v.get("decision") != decision:
                    clause = "recovery.attempts_exhausted" if d.by_attempts else "recovery.matrix"
                    out.append(Violation(clause, f"{wid}: decision {v.get('decision')!r}, the matrix says {decision!r} "
                                                 f"({d.why if wid in sure else 'boundary'})"))
                self._begin(wid)
                cur = dict(it)
                if self.spec.statuses[cur["status"]].leased:
                    mid = spec.targets("recover", cur["status"])[0]
                    new = rules.apply_effects(spec, "recover", cur, "release", now=now, dst=mid)
                    self._append(wid, op.event_for(mid), cur["status"], mid, now, new)
                    cur = new
                rstate = rules.receipt_marking(spec, decision)
                if rstate:
                    for k in self.receipt_order:
                        r = self.receipts[k]
                        if r["work_id"] == wid and r["state"] == "pending":
                            r["state"] = rstate
                            r["marked_by_recovery"] = True
                            if spec.receipt_decision("pending", r["step_class"]) != decision:
                                # a receipt that alone would not have called for this decision
                                # (a pure step beside a reconciled one) may also stay pending
                                r["may_be"] = "pending"
                                self.unresolved.add(wid)
                        elif (r["work_id"] == wid and r["state"] not in ("completed", rstate)
                              and (r["state"], rstate) in spec.receipt_transitions):
                            # an earlier scan's marking (unknown): the contract lets this scan
                            # move it on to the decision's state or leave it
                            r["may_be"] = rstate
                            self.unresolved.add(wid)
                if rules.requeues(spec, decision):
                    dst = spec.targets("recover", cur["status"])[0]
                    new = rules.apply_effects(spec, "recover", cur, "requeue", now=now, args={"decision": decision}, dst=dst)
                    self._append(wid, op.event_for(dst), cur["status"], dst, now, new)
                    cur = new
                elif rules.quarantines(spec, decision):
                    new = rules.apply_effects(spec, "recover", cur, "quarantine", now=now)
                    self._append(wid, op.intent_event, None, None, now, new)
                    cur = new
                self._commit(wid, cur, {"quarantined": "recovery.quarantine.visible", "status": "recovery.matrix"}, "recovery.scan")
            return out

        return Accept(h, "recovery.scan", "the scan always answers")

    def check_receipts(self, work_id: str, actual: Any) -> list[Violation]:
        """After recovery the journal's receipts must carry the decision's marking."""
        want = {k: r for k, r in self.receipts.items() if r["work_id"] == work_id}
        if not isinstance(actual, list):
            return self.keep([Violation("recovery.receipt_marking", f"{work_id}: journal listing is not a list")])
        out = []
        for r in actual:
            if not isinstance(r, Mapping) or r.get("key") not in want:
                continue
            exp = want[r["key"]]
            if exp.get("may_be") and r.get("state") in (exp["may_be"], exp["state"]):
                self._settled_receipt(exp)
                exp["state"] = r.get("state")
            elif r.get("state") != exp["state"]:
                out.append(Violation("recovery.receipt_marking", f"receipt {r['key'][:12]} is {r.get('state')!r}, expected {exp['state']!r}"))
        return self.keep(out)

    # ------------------------------------------------------------------ resync after indefinite errors
    def adopt(self, work_id: str, snapshot: Mapping[str, Any], events: list[Mapping[str, Any]]) -> None:
        """Take an implementation's state of one item as the model's (after an indefinite error)."""
        self.items[work_id] = {f: copy.deepcopy(snapshot.get(f)) for f in self.spec.work_fields} | {"status_reason": snapshot.get("status_reason")}
        self.items[work_id]["work_id"] = work_id
        self.fixed_reason.pop(work_id, None)
        self.events[work_id] = [
            {"type": e.get("type"), "from_status": e.get("from_status"), "to_status": e.get("to_status"),
             "at": e.get("at"), "data": copy.deepcopy(e.get("data") or {})} for e in events
        ]
        tok = snapshot.get("lease_token")
        if tok and tok not in self.tokens.setdefault(work_id, []):
            self.tokens[work_id].append(tok)
        self._events_before[work_id] = len(events)


class _Bad(Exception):
    def __init__(self, clause: str, message: str) -> None:
        self.clause = clause
        self.message = message
        super().__init__(message)


def _moves(res: Any, clause: str) -> list[Mapping[str, Any]]:
    if not isinstance(res, list) or not all(isinstance(m, Mapping) and isinstance(m.get("work_id"), str) for m in res):
        raise _Bad(clause, f"expected a list of moves {{work_id, from_status, to_status, reason}}, got {res!r:.80}")
    return res


def same_json(a: Any, b: Any) -> bool:
    """Equality of JSON values as JSON sees them: a boolean is no number (Python's True == 1 is
    not JSON's), an integral float equals its integer (2.0 is 2), containers compare element-wise."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping | list) or isinstance(b, Mapping | list):
        return False
    return a == b


def _compare_outbox(exp: Mapping[str, Any], got: Any, clause: str) -> list[Violation]:
    if not isinstance(got, Mapping):
        return [Violation(clause, f"expected an outbox message, got {got!r:.80}")]
    out = []
    for f in ("key", "destination", "payload", "work_id", "state", "provider_ref"):
        if not same_json(got.get(f), exp[f]):
            c = "outbox.mark_sent" if f in ("state", "provider_ref") else clause
            out.append(Violation(c, f"outbox {exp['key']!r}: {f} is {got.get(f)!r}, expected {exp[f]!r}"))
    return out


def _fmt_filter(a: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in a.items() if v is not None)


__all__ = ["Accept", "Indefinite", "Model", "Outcome", "Refuse", "Violation", "fold"]
