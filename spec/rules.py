"""The one reading of the contract's recovery and snapshot-effect rules.

The reference ledger, the harness model, the chaos checker, the storm barrier and the recovery
clause tests all decide through these functions; none of them restates a rule.  Each function
is pure: it reads the Spec and the values it is given, and returns a value.

* ``recovery_decision`` - what a scan decides for a stale item: the scanner rule over its
  journal, then ``attempts_exhausted`` (the item's own retry policy counts);
* ``lease_lapse`` / ``stale_for_recovery`` - which items a scan must classify (``stale``);
* ``effect_changes`` / ``apply_effects`` / ``open_fields`` - what one step of an operation
  writes on a snapshot, and what the contract leaves open (``effects`` of an operation);
* ``field_owner`` / ``argument_blame`` / ``chaos_clauses`` / ``judging_clause`` - which clause a
  wrong field or argument breaks (the ``blame`` of work fields, arguments and error codes), which
  clauses only the chaos exploration judges (``judge: chaos``) and which clause takes one of the
  model's judgements (``judges``: a named one, or ``<operation>.<field>``, the value an operation
  leaves in a snapshot field);
* ``handout_expiry`` / ``handout_lapse`` / ``redelivery`` - the lease of a hand-out that is not
  a work item (``handouts``: a run of the wakeups profile) and what recovers a lapsed one;
* ``guard_setters`` / ``moves`` - which operations make a transition's guard hold, and every
  (from, operation, to) of the transition table (what a run's coverage counts);
* ``identity_folded`` - whether two identity keys differ only by case, surrounding whitespace or
  Unicode normalization form.
"""

from __future__ import annotations

import string
import unicodedata
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .contract import EffectStep, HandoutRule, LeaseTimings, Spec


# ---------------------------------------------------------------------------------- decisions
@dataclass(frozen=True)
class Decision:
    """A scan's decision for one stale item.  ``by_attempts``: the attempts rule turned the
    journal's decision (``journal``) into this one."""

    name: str
    why: str
    journal: str
    by_attempts: bool = False


def attempt_limit(spec: Spec, source_system: str | None, retry_policy: Mapping[str, Any] | None = None) -> int:
    """max_attempts for an item: its own retry policy's, else its source's, else the default."""
    return spec.retry_policy_for(source_system, retry_policy).max_attempts


def journal_why(receipts: Iterable[tuple[str, str]]) -> str:
    recs = list(receipts)
    open_ = [(st, cls) for st, cls in recs if st != "completed"]
    return "journal: " + (", ".join(f"{st} {cls}" for st, cls in open_) or ("completed receipts" if recs else "empty"))


def recovery_decision(spec: Spec, item: Mapping[str, Any], receipts: Iterable[tuple[str, str]],
                      retry_policy: Mapping[str, Any] | None = None) -> Decision:
    """The decision for a stale ``item`` (a snapshot: ``source_system`` and ``attempt``; an
    attempt of None is unknown and never exhausts) whose journal holds ``receipts``, (state,
    step_class) of each receipt.  ``retry_policy`` is the item's own policy, if it was given one."""
    recs = list(receipts)
    open_ = [(st, cls) for st, cls in recs if st != "completed"]
    journal = spec.scanner_decision(open_, any(st == "completed" for st, _ in recs))
    why = journal_why(recs)
    attempt = item.get("attempt")
    if spec.decisions[journal].get("requeue") and attempt is not None:
        limit = attempt_limit(spec, item.get("source_system"), retry_policy)
        if attempt >= limit:
            return Decision(spec.attempts_exhausted, f"attempts exhausted ({attempt}/{limit})", journal, True)
    return Decision(journal, why, journal)


def receipt_marking(spec: Spec, decision: str) -> str | None:
    """The state a decision marks the item's pending receipts with (None: they stay pending)."""
    return spec.decisions[decision].get("receipt_state")


def requeues(spec: Spec, decision: str) -> bool:
    return bool(spec.decisions[decision].get("requeue"))


def quarantines(spec: Spec, decision: str) -> bool:
    """Whether a decision flags the item quarantined (recover's ``quarantine`` step)."""
    return bool(spec.decisions[decision].get("quarantine"))


@dataclass(frozen=True)
class RecoveryStep:
    """One step of acting on a recovery decision for one item, in the order they are applied.
    ``step`` is a step of the recover operation's ``effects`` (``release``: leave the leased
    status, ``requeue``, ``quarantine``) or ``mark`` (the item's pending receipts take
    ``receipt_state``).  A move has ``src``/``dst``; ``event`` is the event it appends (the
    operation's intent event for a step that does not move the item)."""

    step: str
    src: str | None = None
    dst: str | None = None
    event: str | None = None
    receipt_state: str | None = None

    def changes(self, spec: Spec, now: float, decision: str, op: str = "recover") -> dict[str, Any]:
        """The fields this step writes (``effect_changes`` of its effects step)."""
        args = {"decision": decision} if self.step == "requeue" else None
        return effect_changes(spec, op, self.step, now=now, args=args, dst=self.dst)


def recovery_steps(spec: Spec, status: str, decision: str, op: str = "recover") -> tuple[RecoveryStep, ...]:
    """What acting on ``decision`` does to a stale item in ``status``, step by step: the one
    writing of these steps the reference ledger and the model both follow.  A leased item is
    first released to where ``op`` moves it; the decision's receipt marking follows; then a
    requeueing decision moves it on (when the table has that move), or a quarantining one flags it."""
    o = spec.operations[op]
    out: list[RecoveryStep] = []
    src = status
    st = spec.statuses.get(src)
    if st is not None and st.leased:
        mid = spec.targets(op, src)[0]
        out.append(RecoveryStep("release", src, mid, o.event_for(mid)))
        src = mid
    state = receipt_marking(spec, decision)
    if state:
        out.append(RecoveryStep("mark", receipt_state=state))
    if requeues(spec, decision) and spec.targets(op, src):
        dst = spec.targets(op, src)[0]
        out.append(RecoveryStep("requeue", src, dst, o.event_for(dst)))
    elif quarantines(spec, decision):
        out.append(RecoveryStep("quarantine", event=o.intent_event))
    return tuple(out)


# ---------------------------------------------------------------------------------- staleness
def recoverable(spec: Spec, status: str) -> bool:
    """Whether some transition lets ``recover`` move an item out of ``status``."""
    return bool(spec.targets("recover", status))


def lease_lapse(spec: Spec, item: Mapping[str, Any]) -> float | None:
    """The instant after which a leased item is stale (lease_expires_at + its source's grace),
    or None when the contract does not make it stale by its lease."""
    if not spec.stale.lease_lapsed or item.get("lease_expires_at") is None:
        return None
    st = spec.statuses.get(item.get("status") or "")
    if st is None or not st.leased or not recoverable(spec, st.name):
        return None
    return float(item["lease_expires_at"]) + spec.lease_for(item.get("source_system")).grace


def marked_event(spec: Spec, status: str) -> str | None:
    """The event the monitor of ``stale.monitor_marked`` appends moving an item into ``status``."""
    rule = spec.stale.monitor_marked
    if rule is None:
        return None
    return spec.operations[rule.by].event_for(status)


def marked_statuses(spec: Spec) -> tuple[str, ...]:
    """The statuses in which an item may be stale for having been marked by the monitor."""
    if spec.stale.monitor_marked is None:
        return ()
    return tuple(s for s, st in spec.statuses.items() if not st.leased and recoverable(spec, s))


def marked_for_recovery(spec: Spec, item: Mapping[str, Any], last_event: str | None) -> bool:
    """Whether ``item`` (whose last event has type ``last_event``) was moved by the monitor for
    a lapsed lease and is still waiting for a scan to classify it."""
    rule = spec.stale.monitor_marked
    status = item.get("status")
    return (rule is not None and status in _marked(spec) and item.get("status_reason") == rule.reason
            and not any(item.get(f) for f in rule.unless) and last_event is not None
            and last_event == marked_event(spec, status))


_ONCE: dict[tuple[str, int], tuple[Spec, Any]] = {}


def _once(name: str, spec: Spec, make: Callable[[Spec], Any]) -> Any:
    """``make(spec)``, worked out once per Spec: the contract is frozen, and the model and the
    reference ask on every operation (the Spec is kept here, so its id is not reused)."""
    hit = _ONCE.get((name, id(spec)))
    if hit is None or hit[0] is not spec:
        if len(_ONCE) >= 64:  # a campaign over many contracts keeps only the recent ones alive
            _ONCE.clear()
        hit = _ONCE[(name, id(spec))] = (spec, make(spec))
    return hit[1]


def _marked(spec: Spec) -> tuple[str, ...]:
    return _once("marked_statuses", spec, marked_statuses)  # type: ignore[no-any-return]


def stale_for_recovery(spec: Spec, item: Mapping[str, Any], now: float, last_event: str | None = None) -> bool:
    """Whether a recovery scan at ``now`` must classify ``item``; ``last_event`` (the type of its
    last event) matters only for an item the monitor marked."""
    lapse = lease_lapse(spec, item)
    if lapse is not None:
        return now > lapse
    return marked_for_recovery(spec, item, last_event)


# ---------------------------------------------------------------------------------- effects
def effect_step(spec: Spec, op: str, step: str = "move") -> EffectStep:
    try:
        return spec.effects[op][step]
    except KeyError:
        raise KeyError(f"the contract gives {op!r} no effects.{step}") from None


def _render(template: str, args: Mapping[str, Any]) -> str:
    names = [n for _, n, _, _ in string.Formatter().parse(template) if n]
    return template.format(**{n: args.get(n) for n in names})


def effect_changes(spec: Spec, op: str, step: str = "move", *, now: float | None = None,
                   args: Mapping[str, Any] | None = None, dst: str | None = None) -> dict[str, Any]:
    """The fields one step of ``op`` writes: ``status`` (``dst``, when the step moves the item)
    and then the step's effects in contract order.  ``args``: the call's arguments and what the
    operation worked out (expire's ``reason``, recover's ``decision``); a missing one is None."""
    a = args or {}
    out: dict[str, Any] = {} if dst is None else {"status": dst}
    for f, v in effect_step(spec, op, step).writes:
        k = v.kind
        if k == "const":
            out[f] = v.param
        elif k == "now":
            if now is None:
                raise ValueError(f"{op}.{step} writes {f} = now, but no instant was given")
            out[f] = now
        elif k == "arg":
            out[f] = a.get(v.param)
        else:
            out[f] = _render(v.param, a)
    return out


def apply_effects(spec: Spec, op: str, snapshot: Mapping[str, Any], step: str = "move", *, now: float | None = None,
                  args: Mapping[str, Any] | None = None, dst: str | None = None) -> dict[str, Any]:
    """``snapshot`` after one step of ``op`` (a new dict; the given one is not changed)."""
    new = dict(snapshot)
    new.update(effect_changes(spec, op, step, now=now, args=args, dst=dst))
    return new


def open_fields(spec: Spec, op: str, before: Mapping[str, Any], step: str = "move") -> dict[str, Any]:
    """Fields whose value after the step the contract leaves open, each with the other value an
    implementation may store: the old one (``may_keep``) or None (``may_clear``).  Only fields
    that were set before the step are open (otherwise both choices are the same)."""
    eff = effect_step(spec, op, step)
    out: dict[str, Any] = {}
    for f in eff.may_keep:
        if before.get(f) is not None:
            out[f] = before[f]
    for f in eff.may_clear:
        if before.get(f) is not None:
            out[f] = None
    return out


# ---------------------------------------------------------------------------------- transitions
def guard_holds(spec: Spec, item: Mapping[str, Any], dst: str) -> bool:
    """Whether the edge from the item's status to ``dst`` is allowed by its guard (an edge
    without a guard always is; a missing edge never is)."""
    edge = spec.edge(item.get("status") or "", dst)
    return edge is not None and (edge.guard is None or bool(item.get(edge.guard)))


def guard_setters(spec: Spec, guard: str) -> tuple[str, ...]:
    """The operations that can make a transition's guard hold: those whose effects set the guard's
    field to true (``cancel`` sets ``cancel_requested``), in contract order."""
    return tuple(dict.fromkeys(op for op, steps in spec.effects.items() for step in steps.values()
                               for name, value in step.writes
                               if name == guard and value.kind == "const" and value.param is True))


def moves(spec: Spec) -> tuple[tuple[str, str, str], ...]:
    """Every (from status, operation, to status) the transition table allows, in table order:
    what a run's coverage counts (docs/results.md, "Coverage")."""
    return tuple((t.src, op, t.dst) for t in spec.transitions for op in t.ops)


# ---------------------------------------------------------------------------------- roles
# What the safety tier (campaign, checker) and the transport need of the contract by kind rather
# than by name: statuses by kind, operations by what they do to an item's lease and status,
# errors by whether they are definite, crash points by the stage of the worker they stand for.
@dataclass(frozen=True)
class Roles:
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
    success: str = ""  # the terminal status finished work is closed out with

    @classmethod
    def of(cls, spec: Spec) -> Roles:
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
                   parked=parked,  # a spawn (answering a create_result) creates its child
                   creates=frozenset(n for n, o in ops.items() if o.kind == "create" or o.returns == "create_result"),
                   grants=grants, claims=claims,
                   token_writes=frozenset(n for n, o in ops.items() if o.requires_lease), releases=releasing,
                   close_outs=close_outs, renews=frozenset(n for n, o in ops.items() if o.lease == "renew"),
                   monitor=frozenset(n for n, o in ops.items() if o.kind == "monitor" and o.lease == "release"),
                   requeues=requeue_ops,
                   operator_requeues=frozenset(o for o in requeue_ops if o in ops and ops[o].kind != "monitor"),
                   reads=frozenset(n for n, o in ops.items() if o.kind == "read"),
                   lists=frozenset(n for n, o in ops.items() if o.kind == "read" and o.returns == "work_list"),
                   success=next((n for n, st in spec.statuses.items() if st.success), ""))


def roles(spec: Spec) -> Roles:
    """The contract's statuses and operations by role (:class:`Roles`), worked out once per Spec."""
    return _once("roles", spec, Roles.of)  # type: ignore[no-any-return]


def definite_errors(spec: Spec) -> frozenset[str]:
    """The error codes after which the operation certainly did not take effect (``definite``)."""
    return _once("definite_errors", spec, lambda sp: frozenset(c for c, d in sp.errors.items() if d))  # type: ignore[no-any-return]


def indefinite_errors(spec: Spec) -> frozenset[str]:
    """The error codes after which either outcome is possible (not ``definite``): the call timed
    out, the adapter died, answered nonsense or failed for a reason of its own."""
    return frozenset(c for c in spec.errors if c not in definite_errors(spec))


def success_status(spec: Spec) -> str:
    """The terminal status finished work is closed out with (``success``)."""
    return next(n for n, st in spec.statuses.items() if st.success)


def creating_operations(spec: Spec) -> tuple[str, ...]:
    """The operations that create a work item (``kind: create``), in contract order."""
    return tuple(n for n, o in spec.operations.items() if o.kind == "create")


def crash_points_at(spec: Spec, stage: str) -> tuple[str, ...]:
    """The contract's crash points that stand for a kill at ``stage`` of the chaos worker's
    protocol (their ``stage``), in contract order."""
    return tuple(p for p, cp in spec.crash_points.items() if cp.stage == stage)


def in_profiles(spec: Spec, op: str, profiles: Collection[str]) -> bool:
    """Whether operation ``op`` belongs to one of ``profiles`` (its ``profile``)."""
    o = spec.operations.get(op)
    return o is not None and o.profile in profiles


__all__ = [
    "Decision", "RecoveryStep", "Roles", "recovery_steps", "apply_effects", "creating_operations", "crash_points_at", "definite_errors",
    "in_profiles", "indefinite_errors", "roles", "success_status", "attempt_limit", "effect_changes", "effect_step", "guard_holds", "guard_setters",
    "journal_why",
    "lease_lapse", "marked_event", "marked_for_recovery", "marked_statuses", "open_fields", "quarantines",
    "moves", "receipt_marking", "recoverable", "recovery_decision", "requeues", "stale_for_recovery",
]


# ---------------------------------------------------------------------------------- the trail
def fold(spec: Spec, events: Iterable[Mapping[str, Any]], start: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Rebuild a snapshot's fold fields from an item's events (eventlog.fold); ``start``: the
    fold of the events before these, to go on from."""
    snap: dict[str, Any] = dict.fromkeys(_once("fold_fields", spec, _fold_fields)) if start is None else dict(start)
    for e in events:
        if type(e) is not dict and not isinstance(e, Mapping):
            continue
        if e.get("to_status") is not None:
            snap["status"] = e["to_status"]
        data = e.get("data")
        if type(data) is dict or isinstance(data, Mapping):
            for k, v in data.items():
                if k in snap and k != "status":
                    snap[k] = v
    return snap


def _fold_fields(spec: Spec) -> tuple[str, ...]:
    return tuple(f for f, wf in spec.work_fields.items() if wf.fold)


# ---------------------------------------------------------------------------------- blame
def field_owner(spec: Spec, name: str) -> str | None:
    """The clause that owns snapshot field ``name`` (its ``blame``), or None."""
    f = spec.work_fields.get(name)
    return f.blame if f is not None else None


def field_owners(spec: Spec) -> dict[str, str]:
    """Snapshot field -> the clause that owns it, for every field that names one."""
    return {n: f.blame for n, f in spec.work_fields.items() if f.blame is not None}


def argument_blame(spec: Spec, op: str, name: str, value: Any = None) -> str:
    """The clause blamed when argument ``name`` of ``op`` is missing or out of range (``value``
    is what the call passed): the argument's own ``blame`` (its ``waiting_status`` one when the
    value is a waiting status), else the invalid_argument error's."""
    arg = spec.operations[op].args.get(name) if op in spec.operations else None
    if arg is not None and arg.blame is not None:
        if arg.blame_waiting is not None and isinstance(value, str) and value in spec.statuses \
                and spec.statuses[value].waiting_kind:
            return arg.blame_waiting
        return arg.blame
    return spec.error_blame["invalid_argument"]


def chaos_clauses(spec: Spec) -> tuple[str, ...]:
    """The clauses only the chaos exploration judges (``judge: chaos``), in contract order."""
    return tuple(c.id for c in spec.clauses if c.judge == "chaos")


# Judgements the model makes by name (beside ``<operation>.<field>``), each with what it judges.
NAMED_JUDGEMENTS = {
    "create.identity_folded": "a create answered with an existing record whose identity differs from the new "
                              "one only by case, surrounding whitespace or Unicode normalization form",
}


def judgement_problem(operations: Collection[str], fields: Collection[str], judgement: str) -> str | None:
    """Why ``judgement`` is not one the model makes (None if it is): a named judgement, or
    ``<operation>.<field>`` for one of the contract's ``operations`` and a field of the work
    snapshot (``fields``): the value that operation leaves in that field, in the snapshot it returns
    and in every later read until the item changes again."""
    if judgement in NAMED_JUDGEMENTS:
        return None
    op, dot, name = judgement.partition(".")
    if not dot or op not in operations:
        return (f"{judgement!r} is neither one of the model's named judgements ({', '.join(sorted(NAMED_JUDGEMENTS))}) "
                f"nor <operation>.<field> for an operation of the contract")
    if name not in fields:
        return f"{judgement!r}: {name!r} is not a field of the work snapshot"
    return None


def judgements(spec: Spec) -> dict[str, str]:
    """Every judgement a clause takes (its ``judges``) -> that clause."""
    return {j: c.id for c in spec.clauses for j in c.judges}


def judging_clause(spec: Spec, judgement: str, default: str) -> str:
    """The clause that takes the model's judgement ``judgement`` (its ``judges``), else ``default``."""
    for c in spec.clauses:
        if judgement in c.judges:
            return c.id
    return default


def _fold(value: Any) -> Any:
    return unicodedata.normalize("NFC", value).strip().casefold() if isinstance(value, str) else value


def identity_folded(a: Iterable[Any], b: Iterable[Any]) -> bool:
    """Whether two identity keys (tuples of ids) are different yet equal once case, surrounding
    whitespace and Unicode normalization form are ignored: what a ledger comparing ids loosely
    would take for one unit."""
    a, b = tuple(a), tuple(b)
    return a != b and len(a) == len(b) and all(_fold(x) == _fold(y) for x, y in zip(a, b, strict=True))


# ---------------------------------------------------------------------------------- hand-outs
def handout_rule(spec: Spec, profile: str) -> HandoutRule:
    try:
        return spec.handouts[profile]
    except KeyError:
        raise KeyError(f"the contract gives profile {profile!r} no hand-out lease (handouts)") from None


def _handout_timings(spec: Spec, profile: str) -> LeaseTimings:
    handout_rule(spec, profile)  # only "lease" timings exist (the schema admits no other)
    return spec.lease_default


def handout_expiry(spec: Spec, profile: str, now: float) -> float:
    """``expires_at`` of a hand-out taken or renewed at ``now``: now + the lease ttl."""
    return float(now) + _handout_timings(spec, profile).ttl


def handout_lapse(spec: Spec, profile: str, expires_at: float) -> float:
    """The instant after which a hand-out is lapsed (expires_at + grace): past it, its holder's
    token is refused and the run is handed out again."""
    return float(expires_at) + _handout_timings(spec, profile).grace


@dataclass(frozen=True)
class Redelivery:
    """A run after the rule recovered its lapsed hand-out."""

    state: str
    wakeups: tuple[str, ...]  # the lost hand-out's, then those fired since
    cycle: int  # the wake cycle the next take hands out


def redelivery(spec: Spec, profile: str, cycle: int, lost: Iterable[str], fired_since: Iterable[str]) -> Redelivery:
    """The run of a lapsed hand-out of wake cycle ``cycle`` that carried ``lost`` (its ``keep``
    field), with ``fired_since`` fired while it was held: ``state`` again with both merged; the
    next take hands out ``cycle`` again (``cycle: same``) or the one after it."""
    r = handout_rule(spec, profile)
    return Redelivery(r.state, (*lost, *fired_since), cycle if r.cycle == "same" else cycle + 1)
