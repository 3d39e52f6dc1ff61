"""Cases by construction, optional arguments (issue 32): every optional argument of the operations
that move one work item, given and left out, combined with every status class of the item and
every value of the operation's enum-typed required arguments (a close-out's terminal status, a
wait's kind, a failure's error class), checked against the model; and every field of a per-item
retry policy on its own, with every error class.

Clauses, from the contract:

* an argument with a ``blame`` of its own is judged under it (``create``'s ``retry_policy``:
  ``retry.policy_override``);
* on a status the operation records an intent on (``intent_from``), under the clause that owns the
  intent's field (``work_fields``' ``blame``: ``cancel.intent_first``);
* otherwise under ``core.transition.allowed`` where the transition table lets the operation move an
  item of that class to the status it would go to (its guard holding in the class), and
  ``core.transition.forbidden`` where it does not: an optional argument never changes which edge
  is taken.

For each per-item retry policy field the case creates an item whose policy overrides that field
alone, fails it with each error class until it is failed, and checks each answer against the
merged policy (``spec.retry_policy_for``): retry or not by ``max_attempts``, ``next_retry_at``
within the jitter range of the backoff for that attempt.  Param ids: ``option:<operation>:<argument>:
<status class>[:<value>]`` and ``option:create:retry_policy.<field>:<error class>``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ledgercheck.spec import Spec

from ..harness import DriveBlocked, Harness, NotApplicable
from . import CaseFn, cases, check
from .replays import ENUMS, enum_values
from .trees import StatusClass, reach, status_classes

ITEM = "work_id"
SKIP_TYPES = ("time",)


def option_ops(spec: Spec) -> list[str]:
    """Operations that move or mark one work item (along edges of the table, or by an intent) and
    have optional arguments."""
    out = []
    for name, op in spec.operations.items():
        takes = ITEM in op.args and op.args[ITEM].required
        moves = bool(spec.edges_of(name)) or bool(op.intent_from)
        optional = [a for a in op.args.values() if not a.required and a.type not in SKIP_TYPES]
        if takes and moves and optional:
            out.append(name)
    return out


def _option_value(h: Harness, typ: str, name: str, cls: StatusClass) -> Any:
    if typ == "duration":
        return h.contract_seconds(90.0)
    if typ == "any" or typ == "object":
        return {"given": name, "class": cls.label}
    return f"{name} given on {cls.label}"


def _enum_variants(spec: Spec, op: str) -> list[dict[str, Any]]:
    """Every combination of values of the operation's required enum-typed arguments (one such
    argument per operation under contract 1.1)."""
    enums = [a for a in spec.operations[op].args.values() if a.required and a.type in ENUMS]
    out: list[dict[str, Any]] = [{}]
    for a in enums:
        out = [{**o, a.name: v} for o in out for v in enum_values(spec, a.type)]
    return out


def _intent_clause(spec: Spec, op: str) -> str | None:
    step = (spec.effects.get(op) or {}).get("intent")
    blames = [spec.work_fields[f].blame for f, _ in (step.writes if step else ()) if f in spec.work_fields]
    return next((b for b in blames if b), None)


def _target(spec: Spec, op: str, cls: StatusClass, fixed: dict[str, Any]) -> str | None:
    """The status ``op`` would move an item of class ``cls`` to, the table and its guard allowing."""
    wanted = next((v for v in fixed.values() if v in spec.statuses), None)
    for dst in spec.targets(op, cls.status):
        if wanted is not None and dst != wanted:
            continue
        if wanted is None and spec.waiting_statuses and fixed.get("kind") is not None \
                and spec.waiting_statuses.get(fixed["kind"]) != dst:
            continue
        edge = spec.edge(cls.status, dst)
        if edge is not None and edge.guard and not (cls.intent_op is not None and edge.guard in _intent_fields(spec, cls)):
            continue
        return dst
    return None


def _intent_fields(spec: Spec, cls: StatusClass) -> set[str]:
    step = (spec.effects.get(cls.intent_op or "") or {}).get("intent")
    return {f for f, _ in (step.writes if step else ())}


def option_clause(spec: Spec, op: str, arg: str, cls: StatusClass, fixed: dict[str, Any]) -> str:
    a = spec.operations[op].args[arg]
    if a.blame:
        return a.blame
    if cls.status in spec.operations[op].intent_from and cls.intent_op is None:
        got = _intent_clause(spec, op)
        if got:
            return got
    if _target(spec, op, cls, fixed) is not None:
        return "core.transition.allowed"
    wanted = next((v for v in fixed.values() if v in spec.statuses), None)
    edge = spec.edge(cls.status, wanted) if wanted is not None else None
    if edge is not None and op in edge.ops and edge.guard in spec.work_fields and spec.work_fields[edge.guard].blame:
        return spec.work_fields[edge.guard].blame  # the move is in the table; its guard does not hold
    return "core.transition.forbidden"


def _fill_required(h: Harness, op: str, wid: str, fixed: dict[str, Any]) -> dict[str, Any]:
    args: dict[str, Any] = {ITEM: wid, **fixed}
    for name, a in h.spec.operations[op].args.items():
        if name in args or name == "now" or not a.required:
            continue
        if name == "token":
            args[name] = h.token(wid) or "no-live-token"
        elif name == "owner":
            args[name] = "worker-option"
        elif a.type == "nonempty_string":
            args[name] = f"{name}-{h.model.order.get(wid, 0)}"
        else:
            raise NotApplicable(f"{op}.{name} ({a.type}) has no value the option cases can make")
    return args


def _option_case(op: str, arg: str, cls: StatusClass, fixed: dict[str, Any], clause: str) -> CaseFn:
    def fn(h: Harness) -> None:
        h.need(op)
        outcomes = []
        for given in (False, True):
            wid = h.create(source_id=f"option-{'given' if given else 'left-out'}")
            try:
                reach(h, wid, cls)
            except DriveBlocked as exc:
                raise NotApplicable(str(exc)) from exc
            args = _fill_required(h, op, wid, fixed)
            if given:
                args[arg] = wid if arg == ITEM else _option_value(h, h.spec.operations[op].args[arg].type, arg, cls)
            before = h.item(wid)["status"]
            out = h.do(op, **args)
            outcomes.append((out.ok, h.item(wid)["status"] if out.ok else before))
            h.do("get", work_id=wid)
        check(outcomes[0] == outcomes[1], clause, f"{op} on {cls.label} {fixed or ''} answered "
              f"{'accepted' if outcomes[0][0] else 'refused'} -> {outcomes[0][1]} without {arg} and "
              f"{'accepted' if outcomes[1][0] else 'refused'} -> {outcomes[1][1]} with it", h)
    return fn


def _option_rows(spec: Spec) -> list[tuple[str, str, CaseFn]]:
    rows = []
    for op in option_ops(spec):
        optional = [n for n, a in spec.operations[op].args.items() if not a.required and a.type not in SKIP_TYPES]
        for arg in optional:
            if spec.operations[op].args[arg].blame:
                continue  # judged by the cases of its own clause (retry_policy below)
            for cls in status_classes(spec):
                for fixed in _enum_variants(spec, op):
                    clause = option_clause(spec, op, arg, cls, fixed)
                    tail = "".join(f":{v}" for v in fixed.values())
                    rows.append((clause, f"option:{op}:{arg}:{cls.label}{tail}", _option_case(op, arg, cls, fixed, clause)))
    return rows


OPTION_CLAUSES = ("core.transition.allowed", "core.transition.forbidden", "cancel.intent_first")


def _rows_for(clause: str) -> Any:
    def gen(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
        rows = _option_rows(spec)
        stray = sorted({c for c, _, _ in rows} - set(OPTION_CLAUSES))
        if stray:  # never dropped silently: a contract whose option rows fall to another clause says so
            raise ValueError(f"options: rows judged under {stray}, which OPTION_CLAUSES does not register")
        for c, pid, fn in rows:
            if c == clause:
                yield pid, fn
    return gen


for _clause in OPTION_CLAUSES:
    cases(_clause)(_rows_for(_clause))


# ------------------------------------------------------------------ a per-item retry policy, field by field
def policy_field_values(spec: Spec) -> list[tuple[str, Any]]:
    """(field, value) for every field of the retry policy: a value other than the default's (every
    other jitter mode for the jitter field)."""
    d = spec.retry_default
    out: list[tuple[str, Any]] = []
    for f, v in d.as_dict().items():
        if f == "jitter":
            out += [(f, m) for m in spec.jitter_modes if m != v]
        elif isinstance(v, bool):
            continue
        elif f == "max_attempts":
            out.append((f, v + 1))
        elif f == "max_backoff":
            out.append((f, d.initial_backoff * d.multiplier))  # binds from the second retry on
        elif isinstance(v, int | float):
            out.append((f, v * 2))
    return out


def _policy_case(field: str, value: Any, cls: str, clause: str) -> CaseFn:
    def fn(h: Harness) -> None:
        h.need("fail", "promote_due")
        override = h.contract_policy({field: value})
        wid = h.create(source_id=f"policy-{field}", retry_policy=override)
        policy = h.spec.retry_policy_for(h.item(wid)["source_system"], override)
        h.need_claim_by_id()
        tok = h.claim(wid)
        slack = h.wall_tolerance if h.wall else 1e-6
        for attempt in range(1, policy.max_attempts + 1):
            now = h.now()
            out = h.do("fail", work_id=wid, token=tok, error_class=cls, message=f"attempt {attempt}")
            got = out.value if out.ok and isinstance(out.value, dict) else {}
            retry = h.spec.error_classes[cls] and attempt < policy.max_attempts
            check(out.ok and (got.get("status") == "retry_scheduled") == retry, clause,
                  f"with its own {field}={value!r}, a {cls} failure at attempt {attempt} of {policy.max_attempts} answered "
                  f"{got.get('status') or out.code}", h)
            if not retry:
                return
            lo, hi = h.spec.backoff_range(policy, attempt)
            at = got.get("next_retry_at")
            check(isinstance(at, int | float) and now + lo - slack <= at <= now + hi + slack, clause,
                  f"with its own {field}={value!r}, the retry after attempt {attempt} is due at +{(at or now) - now:.3f}s, "
                  f"the merged policy allows [{lo:.3f}, {hi:.3f}]", h)
            h.advance_to(at)
            h.do("promote_due")
            tok = h.claim(wid)
    return fn


@cases("retry.policy_override")
def _policy_fields(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    arg = spec.operations["create"].args.get("retry_policy")
    if arg is None or not spec.error_classes:
        return
    clause = arg.blame or "retry.policy_override"
    for field, value in policy_field_values(spec):
        for cls in spec.error_classes:
            yield f"option:create:retry_policy.{field}={value}:{cls}", _policy_case(field, value, cls, clause)


__all__ = ["option_clause", "option_ops", "policy_field_values"]
