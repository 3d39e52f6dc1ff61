"""Cases by construction, optional arguments (issue 32): every optional argument of the operations
that move one work item, given and left out, combined with every status class of the item and
every value of the operation's enum-typed required arguments (a close-out's terminal status, a
wait's kind, a failure's error class), checked against the model; and every field of a per-item
retry policy on its own, with every error class.

Each row is registered under the clause of the rule the call follows there: an argument's own
``blame`` in the contract (``create``'s ``retry_policy``: ``retry.policy_override``), else the
clause the model names for that call on an item of that class (``model_clause``: an item of the
class put into a model, the model asked; a cancel of waiting work is ``waiting.cancel``'s, of
running work ``cancel.intent_first``'s, a close-out as cancelled without the intent the guard's,
a failure of a retryable class ``retry.schedule``'s ...).  Each case makes the call twice, on two
items of the class, without the argument and with it: an optional argument never changes which
rule applies, so both answers must agree with the model and with each other (accepted or
refused, the status they leave).

For each per-item retry policy field the case creates an item whose policy overrides that field
alone, fails it with each error class until it is failed, and checks each answer against the
merged policy (``spec.retry_policy_for``): retry or not by ``max_attempts``, ``next_retry_at``
within the jitter range of the backoff for that attempt.  Param ids: ``option:<operation>:<argument>:
<status class>[:<value>]`` and ``option:create:retry_policy.<field>:<error class>``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ledgercheck.conformance.clauses import CaseFn, cases, check
from ledgercheck.conformance.harness import DriveBlocked, Harness, NotApplicable
from ledgercheck.conformance.model import Model
from ledgercheck.spec import Spec, default_spec

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


_PROBES: dict[str, Model] = {}  # one model per contract, its probe item replaced for each question


def model_clause(spec: Spec, op: str, cls: StatusClass, fixed: dict[str, Any]) -> str:
    """The clause the model names for ``op`` on an item of class ``cls`` (its acceptance's or its
    refusal's): an item of that class is put into a model of every profile and the model asked
    what the call must answer (the model reads the contract; nothing is called)."""
    m = _PROBES.get(spec.digest)
    if m is None:
        m = _PROBES[spec.digest] = Model(spec, list(spec.profiles))
    st = spec.statuses[cls.status]
    snap: dict[str, Any] = {f: None for f in spec.work_fields}
    snap.update(status=cls.status, source_system=spec.source_systems[0], source_id="probe", priority=spec.priority_default,
                attempt=1, lease_version=1, cancel_requested=False, quarantined=False, created_at=0.0)
    for f in _intent_fields(spec, cls):
        snap[f] = True
    far = 1e12
    if st.leased:
        snap.update(owner="probe-owner", lease_token="probe-token", lease_expires_at=far, started_at=0.0)
    if st.waiting_kind:
        snap.update(waiting_kind=st.waiting_kind, waiting_ref="probe-ref", waiting_deadline=far)
    if not st.terminal and not st.leased and not st.waiting_kind and not st.initial:
        snap.update(next_retry_at=far)  # a status waiting for its due time
    m.adopt("probe", snap, [])
    args = {"work_id": "probe", "token": "probe-token", "owner": "probe-owner", "ref": "probe-ref", "now": 1.0, **fixed}
    return m.expect(op, {k: v for k, v in args.items() if k in spec.operations[op].args}).clause


def _intent_fields(spec: Spec, cls: StatusClass) -> set[str]:
    step = (spec.effects.get(cls.intent_op or "") or {}).get("intent")
    return {f for f, _ in (step.writes if step else ())}


def option_clause(spec: Spec, op: str, arg: str, cls: StatusClass, fixed: dict[str, Any]) -> str:
    """An argument's own ``blame``, else the clause the model names for the call on that class."""
    return spec.operations[op].args[arg].blame or model_clause(spec, op, cls, fixed)


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
            outcomes.append((out.ok, h.item(wid)["status"] if out.ok else before))  # (read back by the call)
        check(outcomes[0] == outcomes[1], clause, f"{op} on {cls.label} {fixed or ''} answered "
              f"{'accepted' if outcomes[0][0] else 'refused'} -> {outcomes[0][1]} without {arg} and "
              f"{'accepted' if outcomes[1][0] else 'refused'} -> {outcomes[1][1]} with it", h)
    return fn


_ROWS: dict[str, list[tuple[str, str, CaseFn]]] = {}


def _option_rows(spec: Spec) -> list[tuple[str, str, CaseFn]]:
    """(clause, param id, case) of every option row, worked out once per contract."""
    got = _ROWS.get(spec.digest)
    if got is None:
        got = _ROWS[spec.digest] = _make_rows(spec)
    return got


def _make_rows(spec: Spec) -> list[tuple[str, str, CaseFn]]:
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


# every clause the default contract's option rows fall to, each with a generator taking its own rows
OPTION_CLAUSES = tuple(sorted({c for c, _, _ in _option_rows(default_spec())}))


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
    """(field, value) for every field of the retry policy: a valid value other than the default's
    (every other jitter mode for the jitter field; backoffs kept within the policy's own rule that
    max_backoff is not below initial_backoff, whatever the contract's defaults)."""
    d = spec.retry_default
    out: list[tuple[str, Any]] = []
    for f, v in d.as_dict().items():
        if f == "jitter":
            out += [(f, m) for m in spec.jitter_modes if m != v]
        elif f == "max_attempts":
            out.append((f, v + 1))
        elif f == "multiplier":
            out.append((f, v + 1))
        elif f == "initial_backoff" and v > 0:
            out.append((f, v / 2))  # stays within the default max_backoff, which a policy must not go below
        elif f == "max_backoff":
            second = d.initial_backoff * d.multiplier  # binds from the second retry on
            mid = (d.initial_backoff + v) / 2
            pick = second if d.initial_backoff <= second < v else mid if d.initial_backoff < mid < v else None
            if pick is not None:
                out.append((f, pick))
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
