"""The model's shared base: state, dispatch and comparisons every profile's operations use.

The model is a *checker*.  For an operation it first says what the contract expects
(:meth:`ModelBase.expect`): a refusal with one of a set of error codes, or success.  After the
implementation answered, :meth:`ModelBase.settle` compares the answer with the contract, returns
the violations (each naming the clause it breaks) and advances the model.  Where the contract
leaves a choice to the implementation (which queued item a claim takes, the jittered retry
instant, the opaque lease token, which messages a drain hands out), the model checks that the
implementation's choice is allowed and then adopts it.

Each profile's operations live in a module of their own (``core.py``, ``lease.py``, ...), as a
subclass of :class:`ModelBase` naming its ``PROFILE``; ``expect`` finds an operation's handler
through the profile the contract gives the operation (:func:`dispatch_table`).  The facade
(``__init__.py``) joins them into :class:`Model`.

It never imports an implementation and performs no I/O.
"""

from __future__ import annotations

import copy
import marshal
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from ledgercheck.spec import Spec, UnknownClause, rules
from ledgercheck.spec.args import compiled as compiled_arg_checks
from ledgercheck.spec.args import is_num
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
        return self  # a copy of the model's values keeps the one sentinel


ANY = _Any()  # in Model.open_fields: any value is allowed


class Indefinite(Exception):
    """Raised by settle() for an indefinite error: the caller must resync the touched items."""


_is_num = is_num


Handler = Callable[[Any, dict[str, Any]], "Expectation"]


def dispatch_table(spec: Spec, cls: type) -> dict[str, Handler]:
    """Operation name -> its handler, from the contract's data: each operation belongs to one
    profile (``profile:`` in the contract's operations), and ``cls`` holds, among its bases,
    one class per profile (its ``PROFILE``) with a method ``_op_<operation>``.  Operations
    without a profile (the session's hello and reset) and those no base implements are left out:
    :meth:`ModelBase.expect` refuses them."""
    key = (cls, tuple((name, op.profile) for name, op in spec.operations.items()))
    table = _DISPATCH.get(key)
    if table is None:
        by_profile = {k.__dict__["PROFILE"]: k for k in cls.__mro__ if k.__dict__.get("PROFILE")}
        table = {}
        for name, op in spec.operations.items():
            owner = by_profile.get(op.profile) if op.profile is not None else None
            fn = owner.__dict__.get(f"_op_{name}") if owner is not None else None
            if fn is not None:
                table[name] = fn
        _DISPATCH[key] = table
    return table


_DISPATCH: dict[tuple[type, tuple[tuple[str, str | None], ...]], dict[str, Handler]] = {}


class ModelBase:
    """State, dispatch and comparisons; a subclass per profile adds that profile's operations."""

    PROFILE: str | None = None  # the contract profile whose operations a subclass holds

    def __init__(self, spec: Spec, profiles: Iterable[str] | None = None, tolerance: float = TOLERANCE) -> None:
        self.spec = spec
        self.profiles = set(profiles) if profiles is not None else set(spec.profiles)
        self.tol = tolerance
        # on a wall clock the ledger may stamp any instant while the call is under way: the
        # harness sets this to the duration of the call being settled (0 on an injected clock)
        self.slack = 0.0
        self._clause_profile = {c.id: c.profile for c in spec.clauses}
        self.items: dict[str, dict[str, Any]] = {}
        self.events: dict[str, list[dict[str, Any]]] = {}
        self.order: dict[str, int] = {}  # creation sequence
        self.identity: dict[tuple[Any, ...], str] = {}
        self.policies: dict[str, dict[str, Any] | None] = {}
        self.tokens: dict[str, list[str]] = {}  # every token ever issued per item, oldest first
        # token -> (the first item of ``tokens`` holding it, its first place in that item's list):
        # what a scan of ``tokens`` finds first, kept in step by _new_tokens and _add_token (the
        # only writers of ``tokens``), so the trace names a token without a scan (Harness.symbolize)
        self.token_refs: dict[str, tuple[str, int]] = {}
        self.blame: dict[str, dict[str, str]] = {}  # per item: field -> clause for the last change
        self.blame_default: dict[str, str] = {}
        # per item: the operation of its last change; with the clauses' ``judges`` of the form
        # <operation>.<field>, it says which clause a wrong value of that field breaks
        self.changed_by: dict[str, str] = {}
        self._op: str | None = None  # the operation being settled
        self._judged = {j: c for j, c in rules.judgements(spec).items() if "." in j}
        # a create writes every field of the new record: its answer's clause outranks the fields' owners
        self._create_blame = self._answer_blame("create", "core.create.initial")
        self.receipts: dict[str, dict[str, Any]] = {}
        self.receipt_order: list[str] = []
        # items whose receipts recovery marked where the contract also lets them stay pending
        self.unresolved: set[str] = set()
        self.inbox: dict[str, list[dict[str, Any]]] = {}
        self.outbox: dict[str, dict[str, Any]] = {}
        self.outbox_order: list[str] = []
        self.logs: dict[str, list[dict[str, Any]]] = {}
        self.lanes: dict[tuple[str, str], dict[str, Any]] = {}  # (session key, lane) -> lease and tasks (lanes.py)
        self.runs: dict[str, dict[str, Any]] = {}  # run id -> state, cycle, wakeups, timer (wakeups.py)
        # spawn profile: parent -> [(spawn key, child)] in spawn order, and each child's root
        self.spawned: dict[str, list[tuple[str, str]]] = {}
        self.roots: dict[str, str] = {}
        self.touched: set[str] = set()
        self._events_before: dict[str, int] = {}
        # per item: the model's trail, how many events of the implementation's trail passed, their
        # encoding and the fold of them (marshal), for check_trail
        self._verified: dict[str, tuple[list[dict[str, Any]], int, bytes, dict[str, Any] | bytes | None]] = {}
        self._wait_kinds = dict(spec.waiting_statuses)  # kind -> status
        self._pending_point = next(p for p, c in spec.crash_points.items() if c.journal == "pending")
        self._compared = [(n, f.compare) for n, f in spec.work_fields.items() if f.compare != "none"]
        # per event type: its data fields and how each compares (a field not compared on the
        # snapshot is compared exactly in event data); the fold fields the fold check compares
        self._event_fields: dict[str, tuple[tuple[str, str], ...]] = {}
        self._folded = tuple((n, f.compare) for n, f in spec.work_fields.items() if f.fold and f.compare != "none")
        # each of those fields' values of a mapping, as a tuple (KeyError where one is missing)
        self._pick_compared = _picker([n for n, _ in self._compared])
        self._pick_folded = _picker([n for n, _ in self._folded])
        self._field_owner = rules.field_owners(spec)  # the contract's `blame` of each snapshot field
        # status_reason is not compared in general (close-out, cancel and requeue store the
        # caller's free text); the contract fixes it only for work the monitor marked timeout
        # (core.expire.timeout_reason): item -> the reasons its record may store, until the
        # item changes again
        self.fixed_reason: dict[str, frozenset[str]] = {}
        # fields whose value after an item's last operation the contract leaves open: item ->
        # field -> the other values an implementation may store (ANY: whatever it likes).  The
        # model predicts one value; another allowed one is taken over (snapshot and event data)
        self.open_fields: dict[str, dict[str, tuple[Any, ...]]] = {}
        self._handlers = dispatch_table(spec, type(self))
        self._arg_checks = compiled_arg_checks(spec)  # operation -> arg_problem of it, compiled

    # ------------------------------------------------------------------ public interface
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
        handler = self._handlers.get(op)
        if handler is None:
            owner = self.spec.operations[op].profile if op in self.spec.operations else None
            raise KeyError(f"the model has no operation {op!r}" + (f" (profile {owner!r})" if owner else ""))
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
        return handler(self, dict(args))

    def settle(self, op: str, exp: Expectation, outcome: Outcome) -> list[Violation]:
        self.touched = set()
        self._op = op
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
        if not _is_map(actual):
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
        return self._fold_problems(actual_work, fold(self.spec, actual_events))

    def check_trail(self, work_id: str, actual: Any, snapshot: Mapping[str, Any] | None = None) -> list[Violation]:
        """:meth:`check_events` and, given the snapshot read with the trail, :meth:`check_fold`,
        with the same verdicts, but the events a read-back of this item already found right are
        not compared field by field again while they are unchanged.

        After a trail passed, it is kept as bytes (:func:`_trail_encoding`, ``marshal``: exact
        about types, dict order included), with the fold of it.  The item's next trail is encoded
        the same way: while its first events encode to the bytes kept (each value's encoding
        delimits itself, and decoding them depends on nothing after them, so equal leading bytes
        are equal events), only the events after them are compared with the model, and the fold
        goes on from the one kept.  Any difference in those first events (a changed value, type,
        key order, or which of their objects are one object), a trail marshal cannot encode, or
        a model trail that is not the one they were compared with (:meth:`adopt` replaces it)
        falls back to the full comparison."""
        blob = _trail_encoding(actual) if type(actual) is list else None
        start, state = self._verified_prefix(work_id, blob)
        found = self._compare_events(work_id, actual, start)
        folded = None
        if snapshot is not None:
            folded = fold(self.spec, actual[start:], state) if state is not None else fold(self.spec, actual)
        exp = self.events.get(work_id)
        if found or blob is None or exp is None:
            self._verified.pop(work_id, None)
        else:
            self._verified[work_id] = (exp, len(actual), blob[5:], _frozen(folded))
        out = self.keep(found) if found else found
        if folded is not None:
            out += self._fold_problems(snapshot, folded)
        return out

    def _verified_prefix(self, wid: str, blob: bytes | None) -> tuple[int, dict[str, Any] | None]:
        """How many first events of a trail (``blob``: its encoding) are those of the item's
        last trail that passed, byte for byte (0 when none), and the fold of them (if kept)."""
        held = self._verified.get(wid)
        if held is None or blob is None:
            return 0, None
        exp, n, kept, state = held
        # (a list's encoding: 5 bytes of type and length, then its elements' encodings in turn;
        # ``kept`` holds the elements' part)
        if exp is not self.events.get(wid) or len(exp) < n or not blob.startswith(kept, 5):
            return 0, None
        return n, (marshal.loads(state) if type(state) is bytes else state)

    def _fold_problems(self, actual_work: Mapping[str, Any], folded: Mapping[str, Any]) -> list[Violation]:
        out: list[Violation] = []
        if _all_same(self._pick_folded, folded, actual_work):
            return out
        fold_get, snap_get = folded.get, actual_work.get
        for name, kind in self._folded:
            a, b = fold_get(name), snap_get(name)
            if a is b or (a == b and type(a) is type(b)):  # (the first test _same makes)
                continue
            if not self._same(kind, a, b):
                out.append(Violation("eventlog.fold", f"{actual_work.get('work_id')}: fold(events).{name} = {folded.get(name)!r} but the snapshot has {actual_work.get(name)!r}"))
        return self.keep(out) if out else out

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
            return _is_num(a) and _is_num(b) and a - self.tol <= b <= a + self.tol + self.slack
        if _is_num(a) and _is_num(b):
            return a == b
        return a == b and {type(a), type(b)} <= {int, float}

    def _compare_work(self, expect: Mapping[str, Any], actual: Mapping[str, Any], blame: Mapping[str, str], default: str) -> list[Violation]:
        out: list[Violation] = []
        status = actual.get("status")
        if status not in self.spec.statuses:
            out.append(Violation("core.status.enum", f"{expect['work_id']}: status {status!r} is not a contract status"))
            return out
        if not _all_same(self._pick_compared, expect, actual):
            self._compare_fields(expect, actual, blame, default, out)
        fixed = self.fixed_reason.get(expect["work_id"])
        if fixed is not None and expect.get("status") == status and actual.get("status_reason") in fixed \
                and isinstance(expect, dict):
            expect["status_reason"] = actual.get("status_reason")  # the phase the record names, from now on
        if fixed is not None and expect.get("status") == status and actual.get("status_reason") not in fixed:
            out.append(Violation("core.expire.timeout_reason", f"{expect['work_id']}: marked {status} by the monitor, status_reason is "
                                 f"{actual.get('status_reason')!r}, the phase that ran out is {'/'.join(sorted(fixed))}"))
        return out

    def _compare_fields(self, expect: Mapping[str, Any], actual: Mapping[str, Any], blame: Mapping[str, str], default: str,
                        out: list[Violation]) -> None:
        """_compare_work's comparison of the snapshot fields, one by one (appended to ``out``)."""
        for name, kind in self._compared:
            if name not in actual:
                out.append(Violation(blame.get(name, default), f"{expect['work_id']}: snapshot lacks field {name!r}"))
                continue
            a, b = expect.get(name), actual[name]
            if (a is b or (a == b and type(a) is type(b))) or self._same(kind, a, b):
                if kind == "time" and a != b and isinstance(expect, dict):
                    expect[name] = b  # a wall-clock ledger's own stamp, within tolerance: read-backs hold it to that
                continue
            if self._allowed_other(expect["work_id"], name, kind, b):
                if isinstance(expect, dict):
                    expect[name] = copy.deepcopy(b)  # the implementation's choice, from now on
                continue
            clause = blame.get(name) or (self._field_owner.get(name, default) if default != self._create_blame else default)
            if self._judged:  # a clause that takes "<operation>.<field>" for the item's last change
                clause = self._judged.get(f"{self.changed_by.get(expect['work_id'])}.{name}", clause)
            out.append(Violation(clause, f"{expect['work_id']}: {name} is {b!r}, the contract says {a!r}"))

    def _compare_events(self, wid: str, actual: Any, start: int = 0) -> list[Violation]:
        """The implementation's trail against the model's; events before ``start`` are known
        to be unchanged since they last passed (check_trail) and are not compared again."""
        out: list[Violation] = []
        exp = self.events.get(wid, [])
        if not isinstance(actual, list):
            return [Violation("trail.append_only", f"{wid}: events are not a list")]
        before = self._events_before.get(wid, len(exp))
        n = min(len(exp), len(actual))
        first_seq = self.spec.first_seq
        event_fields = self._event_fields
        for i in range(start, n):
            e, a = exp[i], actual[i]
            if type(a) is not dict and not isinstance(a, Mapping):
                out.append(Violation("trail.append_only", f"{wid}: event {i} is not an object"))
                continue
            old = i < before
            seq = first_seq + i
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
            if type(data) is not dict and not isinstance(data, Mapping):
                out.append(Violation("eventlog.event_data", f"{wid}: event {seq} has no data object"))
                continue
            for k, (want, clause) in e.get("extra", {}).items():  # keys an event carries besides snapshot fields
                if data.get(k) != want:
                    out.append(Violation(clause, f"{wid}: {e['type']} event {seq} has data.{k} = {data.get(k)!r}, expected {want!r}"))
            edata = e["data"]
            fields = event_fields.get(e["type"]) or self._data_fields(e["type"])
            for fname, kind in fields:
                if fname not in data:
                    out.append(Violation("eventlog.event_data", f"{wid}: {e['type']} event {seq} lacks data.{fname}"))
                    continue
                x, y = edata.get(fname), data.get(fname)
                if x is y or (x == y and type(x) is type(y)):  # (the first test _same makes)
                    continue
                if not self._same(kind, x, y):
                    if not old and self._allowed_other(wid, fname, kind, data.get(fname)):
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

    def _stray(self, snap: Any, default: str) -> str:
        """The clause blamed for a record the model does not know: a second child of a spawn
        the parent's log records once (made before the log was consulted) is the spawn's."""
        if isinstance(snap, Mapping) and "spawn" in self.profiles:
            # a spawn key is its child's source_id: a record made with one, under the parent's
            # source system, that the parent's log does not record
            for parent, kids in self.spawned.items():
                if self.items[parent]["source_system"] == snap.get("source_system") \
                        and any(k == snap.get("source_id") for k, _ in kids):
                    return "spawn.logged_first"
        return default

    def _data_fields(self, etype: str) -> tuple[tuple[str, str], ...]:
        """An event type's data fields and how each compares (exactly where the snapshot does not)."""
        kinds = [(n, self.spec.work_fields[n].compare) for n in self.spec.events[etype].data]
        got = self._event_fields[etype] = tuple((n, k if k != "none" else "exact") for n, k in kinds)
        return got

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

    def _answer_blame(self, op: str, fallback: str) -> str:
        """The clause the contract says owns what ``op`` answers (the operation's ``blame``),
        ``fallback`` for a contract that names none."""
        o = self.spec.operations.get(op)
        return (o.blame if o is not None else None) or fallback

    def _allowed_other(self, wid: str, name: str, kind: str, got: Any) -> bool:
        alts = self.open_fields.get(wid, {}).get(name)
        if alts is None:
            return False
        return any(x is ANY or self._same(kind, x, got) for x in alts)

    def _commit(self, wid: str, new: dict[str, Any], blame: Mapping[str, str], default: str) -> None:
        self.fixed_reason.pop(wid, None)
        prev = self.items.get(wid)
        self.items[wid] = new
        if self.spec.terminal(new["status"]) and (prev is None or not self.spec.terminal(prev["status"])):
            self._child_finished(wid)
        self.blame[wid] = dict(blame)
        self.blame_default[wid] = default
        if self._op is not None:
            self.changed_by[wid] = self._op

    def _child_finished(self, wid: str) -> None:
        """spawn.wakes_parent: a child that reached a terminal status fires the contract's wakeup on
        its parent's run (the run named by the parent's work_id), when both profiles are claimed."""
        pid, kind = self.items[wid].get("source_run_id"), self.spec.spawn_wakeup
        run = self.runs.get(pid) if isinstance(pid, str) else None
        if run is None or kind is None or not {"spawn", "wakeups"} <= self.profiles:
            return
        if any(c == wid for _, c in self.spawned.get(pid, ())):
            run["wakeups"] = [*run["wakeups"], kind]
            if run["state"] == "suspended":
                run["state"] = "pending"

    def _check_returned(self, new: Mapping[str, Any], res: Any, blame: Mapping[str, str], default: str) -> list[Violation]:
        if not _is_map(res):
            raise _Bad(default, f"expected a work snapshot, got {res!r:.80}")
        return self._compare_work(new, res, blame, default)

    def _new_tokens(self, wid: str) -> None:
        """A new item holds no token yet."""
        had = self.tokens.get(wid)
        self.tokens[wid] = []
        if had:  # (never for a new item) tokens left the index: work it out again
            self._index_tokens()

    def _add_token(self, wid: str, tok: Any) -> None:
        """Note a token issued to ``wid`` (its list of tokens exists)."""
        toks = self.tokens[wid]
        toks.append(tok)
        if isinstance(tok, str):
            refs = self.token_refs
            held = refs.get(tok)
            if held is None:
                refs[tok] = (wid, len(toks) - 1)
            elif held[0] != wid:
                # the same token held by two items: the one a scan meets first keeps it
                order = list(self.tokens)
                if order.index(wid) < order.index(held[0]):
                    refs[tok] = (wid, toks.index(tok))

    def _index_tokens(self) -> None:
        """``token_refs`` worked out from ``tokens`` (what a scan finds first)."""
        refs: dict[str, tuple[str, int]] = {}
        for wid, toks in self.tokens.items():
            for i, tok in enumerate(toks):
                if isinstance(tok, str) and tok not in refs:
                    refs[tok] = (wid, i)
        self.token_refs = refs

    def token_ref(self, tok: str) -> tuple[str, int] | None:
        """The first item holding the token ``tok`` and its place in that item's list, as a scan
        of ``tokens`` in order finds them; None when no item holds it."""
        return self.token_refs.get(tok)

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
        bad = self._arg_checks[op](args)  # (arg_problem, compiled: spec.args.compiled)
        if bad is None:
            return None
        name, problem = bad
        return rules.argument_blame(self.spec, op, name, args.get(name)), f"{name} {problem}" if problem.startswith("is ") else f"{name}: {problem}"

    def _nonterminal_close_out(self, op: str, args: Mapping[str, Any]) -> bool:
        st = args.get("status")
        if op != "close_out" or not isinstance(st, str) or st not in self.spec.statuses or self.spec.terminal(st):
            return False
        bad = self._arg_checks[op](args)
        return bad is not None and bad[0] == "status"

    # ------------------------------------------------------------------ shared by the profiles' operations
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

    def _open_effects(self, wid: str, op: str, before: Mapping[str, Any], step: str = "move") -> None:
        """Leave open what the contract leaves open after a step of ``op`` (its may_keep and
        may_clear effects); call after ``_begin``."""
        for f, other in rules.open_fields(self.spec, op, before, step).items():
            self._open(wid, f, other)

    # ------------------------------------------------------------------ resync after indefinite errors
    def adopt(self, work_id: str, snapshot: Mapping[str, Any], events: list[Mapping[str, Any]]) -> None:
        """Take an implementation's state of one item as the model's (after an indefinite error)."""
        self.items[work_id] = {f: copy.deepcopy(snapshot.get(f)) for f in self.spec.work_fields} | {"status_reason": snapshot.get("status_reason")}
        self.items[work_id]["work_id"] = work_id
        self.fixed_reason.pop(work_id, None)
        self.changed_by.pop(work_id, None)
        self.events[work_id] = [
            {"type": e.get("type"), "from_status": e.get("from_status"), "to_status": e.get("to_status"),
             "at": e.get("at"), "data": copy.deepcopy(e.get("data") or {})} for e in events
        ]
        tok = snapshot.get("lease_token")
        if tok and tok not in self.tokens.setdefault(work_id, []):
            self._add_token(work_id, tok)
        self._events_before[work_id] = len(events)


class _Fields:
    """Some fields of a mapping: their values as a tuple (calling it; KeyError where one is
    missing) and ``same(a, b)``, :func:`_all_same`'s test of them, compiled to one test per
    field in line (CPython 3.11 runs that faster than tuples built through itemgetter and
    map(type, ...))."""

    __slots__ = ("names", "pick", "same")

    def __init__(self, names: list[str]) -> None:
        self.names = tuple(names)
        if len(names) == 1:
            self.pick: Callable[[Any], tuple[Any, ...]] = lambda m, _n=names[0]: (m[_n],)
        else:
            self.pick = itemgetter(*names) if names else (lambda m: ())
        self.same: Callable[[Any, Any], bool] = _compile_same(self.names)

    def __call__(self, m: Any) -> tuple[Any, ...]:
        return self.pick(m)


_SAME: dict[tuple[str, ...], Callable[[Any, Any], bool]] = {}


def _compile_same(names: tuple[str, ...]) -> Callable[[Any, Any], bool]:
    """``same(a, b)``: every field of ``names`` in both mappings (read first, as itemgetter reads
    them: KeyError or TypeError is False) and, in each, the same object or equal and of the same
    type.  Compiled once per tuple of names (a model is made for every fresh ledger)."""
    got = _SAME.get(names)
    if got is None:
        if len(_SAME) > 64:
            _SAME.clear()
        got = _SAME[names] = _compile_same_now(names)
    return got


def _compile_same_now(names: tuple[str, ...]) -> Callable[[Any, Any], bool]:
    reads = [f"        a{i} = a[{n!r}]\n        b{i} = b[{n!r}]" for i, n in enumerate(names)]
    tests = [f"    if a{i} is not b{i} and not (a{i} == b{i} and type(a{i}) is type(b{i})): return False"
             for i in range(len(names))]
    src = ("def same(a, b):\n    try:\n" + ("\n".join(reads) or "        pass")
           + "\n    except (KeyError, TypeError):\n        return False\n" + "\n".join(tests) + "\n    return True\n")
    scope: dict[str, Any] = {}
    exec(src, scope)  # noqa: S102 - generated from the contract's field names (repr'd) only
    return scope["same"]  # type: ignore[no-any-return]


def same_plain(names: tuple[str, ...], a: Any, b: Any) -> bool:
    """The plain version of :func:`_compile_same`'s ``same`` (the oracle for its differential test,
    tests/conformance/test_oracle_plain.py): every field read from both mappings first (a missing
    field or a mapping that is not one: False), then each pair the same object, or equal and of
    the same type.  Same answers, a loop instead of generated code."""
    try:
        pairs = [(a[n], b[n]) for n in names]
    except (KeyError, TypeError):
        return False
    for x, y in pairs:
        if x is y:
            continue
        if not (x == y and type(x) is type(y)):
            return False
    return True


def _picker(names: list[str]) -> _Fields:
    """The values of ``names`` in a mapping, as a tuple (KeyError where one is missing), and their
    one-step comparison (:func:`_all_same`)."""
    return _Fields(names)


def _all_same(pick: Callable[[Any], tuple[Any, ...]], a: Any, b: Any) -> bool:
    """Whether every field ``pick`` takes is in both mappings and passes the first test of
    ``_same`` in each (the same object, or equal and of the same type): one test per field in
    line (:class:`_Fields`), where the field-by-field loops would find nothing to report."""
    same = getattr(pick, "same", None)
    if same is not None:
        return same(a, b)  # type: ignore[no-any-return]
    try:
        x, y = pick(a), pick(b)
    except (KeyError, TypeError):
        return False
    return x == y and tuple(map(type, x)) == tuple(map(type, y))


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _frozen(folded: dict[str, Any] | None) -> dict[str, Any] | bytes | None:
    """A fold kept for later: as it is when it holds only immutable values (fold() copies the
    dict it goes on from), else encoded, so that no later change to an object it shares with
    the implementation's answer reaches it."""
    if folded is None or _SCALARS.issuperset(map(type, folded.values())):
        return folded
    return _encoded(folded)


_LIST = ord("[")  # marshal's type code of a list not entered in its table of shared objects


def _trail_encoding(trail: list[Any]) -> bytes | None:
    """A trail's marshal encoding (the current version, which writes short strings directly and
    a second occurrence of an object as a back-reference) for comparing prefixes: None for a
    trail marshal cannot encode, or one whose list marshal entered in its table of shared
    objects (the encoding of a fresh copy of the list never is, in CPython).

    Decoding an element reads only its own bytes and the objects decoded before it; with the
    list itself out of the table, nothing in the elements can refer to it, so the first k
    elements' bytes decode to the same values wherever they stand: equal leading bytes after
    the 5 of the list's type and length are equal leading events (types and key order
    included).  Equal events whose objects are shared differently encode differently, which
    only costs a full comparison."""
    try:
        blob = marshal.dumps(list(trail))
    except ValueError:
        return None
    return blob if blob[0] == _LIST else None


def _encoded(value: Any) -> bytes | None:
    """``value``'s marshal encoding, version 2 (no references between objects, so equal values
    of equal types in the same order encode to equal bytes); None for a value it cannot encode."""
    try:
        return marshal.dumps(value, 2)
    except ValueError:
        return None


class _Bad(Exception):
    def __init__(self, clause: str, message: str) -> None:
        self.clause = clause
        self.message = message
        super().__init__(message)


def _moves(res: Any, clause: str) -> list[Mapping[str, Any]]:
    if not isinstance(res, list) or not all(_is_map(m) and isinstance(m.get("work_id"), str) for m in res):
        raise _Bad(clause, f"expected a list of moves {{work_id, from_status, to_status, reason}}, got {res!r:.80}")
    return res


def _is_map(x: Any) -> bool:
    """``isinstance(x, Mapping)``, a dict answered without asking the ABC."""
    return type(x) is dict or isinstance(x, Mapping)


_JSON_SCALARS = frozenset({str, int, float, type(None)})


def same_json(a: Any, b: Any) -> bool:
    """Equality of JSON values as JSON sees them: a boolean is no number (Python's True == 1 is
    not JSON's), an integral float equals its integer (2.0 is 2), containers compare element-wise."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if type(a) in _JSON_SCALARS and type(b) in _JSON_SCALARS:  # (neither a Mapping nor a list)
        return a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (Mapping, list)) or isinstance(b, (Mapping, list)):
        return False
    return a == b

