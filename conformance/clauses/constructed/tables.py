"""Cases by construction, tables (issue 32): every row of the contract's tables exercised and its
answer compared with the model's, every row rather than a sample.

* ``retry.error_classes``: every error class, failed at the first attempt and at the last one the
  policy allows, under the default policy and under a per-item policy (``create``'s
  ``retry_policy``) whose ``max_attempts`` differs: a retryable class with attempts left is
  ``retry.schedule``'s row, a retryable class with none left ``retry.exhausted``'s, a
  non-retryable class ``retry.non_retryable``'s (the row's own ``retryable`` value decides).
* ``ask.outcomes``: every status the table maps (and the unfinished ones) reached through every
  edge of the transition table into it (a target timed out by a close-out, by the monitor or by
  recovery; cancelled directly or by its holder's close-out...), registered under the clause
  named after the row's outcome (``<profile of ask_outcome>.<outcome>``).
* ``decisions`` with ``attempts_exhausted``: every step class, its receipt left pending, completed
  or absent, the item's attempts remaining or used up, then the lease lapsed and a recovery scan:
  a row whose decision requeues becomes the ``attempts_exhausted`` decision once attempts are used
  up (``recovery.attempts_exhausted``), every other row is ``recovery.matrix``'s.

Param ids: ``row:<table>:<row>...``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ledgercheck.conformance.clauses import CaseFn, cases, check
from ledgercheck.conformance.harness import DriveBlocked, Harness, NotApplicable
from ledgercheck.spec import Spec, default_spec

# ------------------------------------------------------------------ error classes x attempts


def _running(h: Harness, name: str, **kw: Any) -> tuple[str, str]:
    wid = h.create(source_id=name, **kw)
    h.need_claim_by_id()
    return wid, h.claim(wid)


def _fail_at(h: Harness, wid: str, tok: str, cls: str, attempt: int) -> Any:
    """Fail ``wid`` at ``attempt`` (each earlier attempt failed retryably, promoted and claimed)."""
    retryable = next(c for c, r in h.spec.error_classes.items() if r)
    for _ in range(attempt - 1):
        out = h.do("fail", work_id=wid, token=tok, error_class=retryable)
        if h.item(wid)["status"] != "retry_scheduled":
            raise DriveBlocked(f"an earlier retryable failure left {wid} {h.item(wid)['status']}")
        h.advance_to(out.value["next_retry_at"])
        h.do("promote_due")
        tok = h.claim(wid)
    return h.do("fail", work_id=wid, token=tok, error_class=cls, message=f"{cls} at attempt {attempt}")


def _error_row(cls: str, last: bool, own: int | None, clause: str) -> CaseFn:
    def fn(h: Harness) -> None:
        h.need("fail", "promote_due")
        kw = {"retry_policy": {"max_attempts": own}} if own is not None else {}
        wid, tok = _running(h, f"row-{cls}", **kw)
        policy = h.spec.retry_policy_for(h.item(wid)["source_system"], kw.get("retry_policy"))
        attempt = policy.max_attempts if last else 1
        out = _fail_at(h, wid, tok, cls, attempt)
        retry = error_row_clause(h.spec, cls, attempt, policy.max_attempts) == "retry.schedule"
        got = out.value.get("status") if out.ok and isinstance(out.value, dict) else out.code
        want = "retry_scheduled" if retry else next(s for s in h.spec.targets("fail", "running") if h.spec.terminal(s))
        check(got == want, clause, f"{cls} failed at attempt {attempt} of {policy.max_attempts} answered {got}, "
              f"the row says {want}", h)
    return fn


def error_row_clause(spec: Spec, cls: str, attempt: int, max_attempts: int) -> str:
    """The clause whose rule a failure of class ``cls`` at ``attempt`` of ``max_attempts`` follows."""
    if not spec.error_classes[cls]:
        return "retry.non_retryable"
    return "retry.exhausted" if attempt >= max_attempts else "retry.schedule"


def _error_rows_for(clause: str) -> Any:
    def gen(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
        default = spec.retry_default.max_attempts
        for cls in spec.error_classes:
            for own in (None, default + 1):
                top = own or default
                for last in (False, True):
                    if error_row_clause(spec, cls, top if last else 1, top) != clause:
                        continue
                    where = "last-attempt" if last else "first-attempt"
                    policy = f"own-max-{own}" if own is not None else "default-policy"
                    yield f"row:error_class:{cls}:{where}:{policy}", _error_row(cls, last, own, clause)
    return gen


for _clause in ("retry.schedule", "retry.exhausted", "retry.non_retryable"):
    cases(_clause)(_error_rows_for(_clause))


# ------------------------------------------------------------------ ask outcomes x ways in
def _ask_row(status: str, edge: tuple[str, str], outcome: str, clause: str) -> CaseFn:
    src, op = edge

    def fn(h: Harness) -> None:
        h.need("ask_outcome", op)
        # a recovery that would requeue the target (attempts left) takes it through the status and
        # on: one attempt in all keeps it there (the attempts-exhausted decision holds it)
        own = {"retry_policy": {"max_attempts": 1}} if h.spec.operations[op].kind == "monitor" \
            and h.spec.operations[op].intent_event else {}
        wid = h.create(source_id=f"asked-{status}-via-{op}", **own)
        try:
            h.drive(wid, src)
            if src != status:
                h.perform(wid, src, status, op)
        except (NotApplicable, DriveBlocked) as exc:
            raise NotApplicable(f"{status} through {op} from {src}: {exc}") from exc
        out = h.do("ask_outcome", work_id=wid)
        got = out.value.get("outcome") if out.ok and isinstance(out.value, dict) else out.code
        check(got == outcome, clause, f"a target {status} through {op} from {src} answered {got}, the row says {outcome}", h)
    return fn


def _ask_rows_for(spec: Spec) -> list[tuple[str, str, tuple[str, str], str]]:
    """(clause, status, (from, op), outcome) for every status and every edge into it."""
    op = next((n for n, o in spec.operations.items() if o.returns == "ask_result"), None)
    if op is None:
        return []
    prof = spec.operations[op].profile
    out = []
    for status in spec.statuses:
        outcome = spec.ask_outcomes.get(status, spec.ask_unfinished) if spec.terminal(status) else spec.ask_unfinished
        ways = [(t.src, o) for t in spec.transitions if t.dst == status for o in t.ops] or [(status, "create")]
        if status == spec.initial_status:
            ways = [(status, "create")]
        for way in ways:
            out.append((f"{prof}.{outcome}", status, way, outcome))
    return out


def _ask_gen(clause: str) -> Any:
    def gen(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
        for c, status, way, outcome in _ask_rows_for(spec):
            if c == clause:
                yield f"row:ask:{status}:via-{way[1]}-from-{way[0]}", _ask_row(status, way, outcome, clause)
    return gen


# one generator under each clause the default contract's ask table names (ask.<outcome>), each
# taking the rows of its own clause
for _clause in sorted({c for c, *_ in _ask_rows_for(default_spec())}):
    cases(_clause)(_ask_gen(_clause))


# ------------------------------------------------------------------ recovery decisions x attempts
def _decision_row(step_class: str, journal: str, exhausted: bool, clause: str) -> CaseFn:
    def fn(h: Harness) -> None:
        h.need("recover", "claim", *(("effect_begin",) if journal != "none" else ()))
        policy = {"max_attempts": 1} if exhausted else {"max_attempts": h.spec.retry_default.max_attempts + 1}
        wid, tok = _running(h, f"row-{step_class}-{journal}", retry_policy=policy)
        if journal != "none":
            began = h.do("effect_begin", work_id=wid, step_id="s1", tool="t", input={"n": 1}, step_class=step_class, token=tok)
            if journal == "completed":
                rec = began.value["receipt"]
                h.do("effect_record", key=rec["key"], input_hash=rec["input_hash"], result={"ok": 1}, token=tok)
        h.advance_to(h.lapse_time(wid))
        out = h.do("recover")
        check(out.ok, clause, f"the recovery scan was refused: {out.code}", h)
        h.do("get", work_id=wid)
        if h.claims("effect_list"):
            h.do("effect_list", work_id=wid)
    return fn


def _decision_rows(spec: Spec) -> list[tuple[str, str, str, bool]]:
    """(clause, step class, journal, exhausted): every step class x every journal state a scanner
    can see x attempts left or used up."""
    journals = sorted({cp.journal for cp in spec.crash_points.values()})
    rows = []
    for cls in spec.step_classes:
        for journal in journals:
            if journal == "none" and cls != next(iter(spec.step_classes)):
                continue  # no receipt: the class plays no part (one row)
            for exhausted in (False, True):
                decision = spec.scanner_decision([("pending", cls)] if journal == "pending" else [], journal == "completed")
                requeues = bool(spec.decisions[decision].get("requeue"))
                clause = "recovery.attempts_exhausted" if exhausted and requeues else "recovery.matrix"
                rows.append((clause, cls, journal, exhausted))
    return rows


def _decision_gen(clause: str) -> Any:
    def gen(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
        for c, cls, journal, exhausted in _decision_rows(spec):
            if c == clause:
                attempts = "attempts-used-up" if exhausted else "attempts-left"
                yield f"row:decision:{cls}:{journal}:{attempts}", _decision_row(cls, journal, exhausted, clause)
    return gen


for _clause in ("recovery.matrix", "recovery.attempts_exhausted"):
    cases(_clause)(_decision_gen(_clause))
