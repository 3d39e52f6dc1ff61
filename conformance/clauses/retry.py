"""Clause tests of the retry profile (spec/contract/clauses/retry.yaml)."""


from __future__ import annotations

from collections.abc import Iterable

from ledgercheck.spec import Spec
from ledgercheck.spec.checks import MAX_ATTEMPTS, MAX_MULTIPLIER
from ledgercheck.spec.contract import RetryPolicy
from ledgercheck.transport.clock import QUANTUM

from ..harness import Harness, NotApplicable
from . import CaseFn, case, cases, check, durable
from .waiting import _running


# ---------------------------------------------------------------- retry
def _retryable(spec: Spec) -> str:
    return next(c for c, r in spec.error_classes.items() if r)


@case("retry.schedule", "first-failure")
def _schedule(h: Harness) -> None:
    wid, tok = _running(h)
    out = h.do("fail", work_id=wid, token=tok, error_class=_retryable(h.spec), message="503 from upstream")
    check(out.value["status"] == "retry_scheduled" and out.value["lease_token"] is None, "retry.schedule",
          f"retryable failure gave {out.value['status']} token {out.value['lease_token']!r}", h)


@case("retry.schedule", "error-class-after-retry")
def _schedule_class_kept(h: Harness) -> None:
    """The error class a retryable failure records stays what it was through the retry: promoted,
    claimed again and closed out, the record holds that class or (the contract lets a close-out
    clear it) none, never another one."""
    h.need("promote_due")
    cls = _retryable(h.spec)
    for status in h.spec.terminal_statuses:
        if status not in ("done", "failed"):
            continue
        wid, tok = _running(h)
        out = h.do("fail", work_id=wid, token=tok, error_class=cls, message="503 from upstream")
        if out.value["status"] != "retry_scheduled":
            raise NotApplicable("a retryable failure did not schedule a retry")
        h.advance_to(out.value["next_retry_at"])
        h.do("promote_due")
        tok = h.claim(wid)
        done = h.do("close_out", work_id=wid, token=tok, status=status, result={"ok": status == "done"}).value
        check(done.get("error_class") in (cls, None), "retry.schedule",
              f"closed out {status} after a {cls} retry, the record holds error_class {done.get('error_class')!r}", h)


def _fail_at_attempts(h: Harness, policy: dict | None, n: int) -> list[tuple[float, float]]:
    """Fail with a retryable error at attempts 1..n; return (now, next_retry_at) per retry."""
    wid = h.create(retry_policy=policy) if policy else h.create()
    out: list[tuple[float, float]] = []
    for _ in range(n):
        tok = h.claim(wid)
        t = h.now()
        o = h.do("fail", work_id=wid, token=tok, error_class=_retryable(h.spec))
        if o.value["status"] != "retry_scheduled":
            break
        out.append((t, o.value["next_retry_at"]))
        h.advance_to(o.value["next_retry_at"])
        h.do("promote_due")
    return out


@cases("retry.bounds")
def _bounds(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for mode in spec.jitter_modes:
        def fn(h: Harness, mode: str = mode) -> None:
            pol = h.contract_policy({"jitter": mode, "max_attempts": 6, "initial_backoff": 4.0, "multiplier": 2.0, "max_backoff": 40.0})
            policy = h.spec.retry_default.merged(pol)
            for sample in range(4 if mode != "none" else 1):
                got = _fail_at_attempts(h, pol, policy.max_attempts)
                check(len(got) == policy.max_attempts - 1, "retry.bounds", f"{len(got)} retries scheduled for {policy.max_attempts} attempts", h)
                for n, (t, nra) in enumerate(got, start=1):
                    lo, hi = h.spec.backoff_range(policy, n)
                    tol = h.wall_tolerance if h.wall else 0.0
                    check(t + lo - tol <= nra <= t + hi + tol, "retry.bounds",
                          f"sample {sample}: retry after attempt {n} due in {nra - t:g}s, outside [{lo:g}, {hi:g}]", h)
        yield mode, fn
    def default(h: Harness) -> None:
        policy = h.spec.retry_default
        got = _fail_at_attempts(h, None, policy.max_attempts)
        for n, (t, nra) in enumerate(got, start=1):
            lo, hi = h.spec.backoff_range(policy, n)
            check(t + lo <= nra <= t + hi, "retry.bounds", f"default policy: retry {n} due in {nra - t:g}s, outside [{lo:g}, {hi:g}]", h)
    yield "default-policy", default


@case("retry.cap", "many-attempts")
def _cap(h: Harness) -> None:
    pol = h.contract_policy({"max_attempts": 12, "initial_backoff": 1.0, "multiplier": 3.0, "max_backoff": 30.0, "jitter": "none"})
    got = _fail_at_attempts(h, pol, 12)
    worst = max(nra - t for t, nra in got)
    cap = pol["max_backoff"]
    check(worst <= cap + (h.wall_tolerance if h.wall else 0.0), "retry.cap", f"a retry was delayed {worst:g}s, above max_backoff {cap:g}s", h)


@cases("retry.non_retryable")
def _non_retryable(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for cls, retryable in spec.error_classes.items():
        if retryable:
            continue
        def fn(h: Harness, cls: str = cls) -> None:
            wid, tok = _running(h)
            out = h.do("fail", work_id=wid, token=tok, error_class=cls)
            check(out.value["status"] == "failed", "retry.non_retryable", f"{cls} gave {out.value['status']}", h)
        yield cls, fn


@cases("retry.exhausted")
def _exhausted(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for n in sorted({1, 2, spec.retry_default.max_attempts}):
        def fn(h: Harness, n: int = n) -> None:
            pol = {"max_attempts": n} if n != h.spec.retry_default.max_attempts else None
            got = _fail_at_attempts(h, pol, n + 1)
            check(len(got) == n - 1, "retry.exhausted", f"max_attempts {n}: {len(got)} retries were scheduled, expected {n - 1}", h)
        yield f"max-{n}", fn


@case("retry.promote", "not-before-due")
def _promote(h: Harness) -> None:
    wid, tok = _running(h)
    out = h.do("fail", work_id=wid, token=tok, error_class=_retryable(h.spec))
    due = out.value["next_retry_at"]
    if due - h.now() > 2 * QUANTUM:
        h.advance_to(due - QUANTUM)
        h.do("promote_due")
        check(h.item(wid)["status"] == "retry_scheduled", "retry.promote", "promoted before next_retry_at", h)
    h.advance_to(due)
    h.do("promote_due")
    check(h.item(wid)["status"] == "queued", "retry.promote", "not promoted at next_retry_at", h)


@case("retry.unknown_class", "refused")
def _unknown(h: Harness) -> None:
    wid, tok = _running(h)
    out = h.do("fail", work_id=wid, token=tok, error_class="gremlins")
    check(not out.ok and out.code == "invalid_argument", "retry.unknown_class", f"unknown class answered {out.code or 'ok'}", h)


@cases("retry.policy_override")
def _override(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    def one_attempt(h: Harness) -> None:
        got = _fail_at_attempts(h, {"max_attempts": 1}, 2)
        check(not got, "retry.policy_override", "max_attempts 1 still scheduled a retry", h)

    def exact_delay(h: Harness) -> None:
        delay = min(h.contract_seconds(10.0), h.spec.retry_default.max_backoff)  # valid with the default max_backoff
        got = _fail_at_attempts(h, {"initial_backoff": delay, "jitter": "none"}, 1)
        check(bool(got) and (h.wall or got[0][1] - got[0][0] == delay), "retry.policy_override", f"delay {got!r}", h)

    def bad_policy(h: Harness) -> None:
        out = h.do("create", source_system="manual", source_id="p", retry_policy={"max_attempts": 0})
        check(not out.ok, "retry.policy_override", "a retry policy with max_attempts 0 was accepted", h)

    yield "max-attempts-1", one_attempt
    yield "fixed-delay", exact_delay
    yield "invalid-policy", bad_policy


@case("retry.execution_timeout", "renewed-but-too-long")
def _exec_timeout(h: Harness) -> None:
    h.need("renew")
    limit = h.spec.phase_timeout("execution")
    if limit is None:
        raise NotApplicable("the contract has no execution phase timeout")
    wid, tok = _running(h)
    lt = h.spec.lease_for("manual")
    start = h.now()
    if h.wall:
        while h.now() + lt.renew_interval - start < limit:
            h.advance(lt.renew_interval)
            h.do("renew", work_id=wid, token=tok)
            h.do("expire")
            check(h.item(wid)["status"] == "running", "retry.execution_timeout", "expired before the execution budget ran out", h)
    else:
        # "longer than the budget": a stint of exactly the budget is not, so the holder renews
        # all the way to started_at + limit, and the monitor, run at that very instant, leaves it
        end = start + limit
        while h.now() < end:
            h.advance_to(min(h.now() + lt.renew_interval, end))
            h.do("renew", work_id=wid, token=tok)
            h.do("expire")
            check(h.item(wid)["status"] == "running", "retry.execution_timeout",
                  f"marked timeout after a stint of {h.now() - start:g}s, not longer than the execution budget {limit:g}s", h)
    h.advance_to(start + limit + QUANTUM)
    h.do("renew", work_id=wid, token=tok)
    h.do("expire")
    check(h.item(wid)["status"] == "timeout", "retry.execution_timeout", "a stint past the execution budget kept running", h)


@case("retry.execution_timeout", "stint-restarts-on-resume")
def _exec_timeout_after_resume(h: Harness) -> None:
    """A stint runs "since the claim or the last resume": time spent before a wait does not
    count against the stint after it, so a resumed holder that renews keeps running until the
    resume instant + the budget, and is marked execution_timeout just after it."""
    h.need("renew", "set_waiting", "resume")
    limit = h.spec.phase_timeout("execution")
    if limit is None:
        raise NotApplicable("the contract has no execution phase timeout")
    if h.wall:
        raise NotApplicable("walks the clock over a whole execution budget")
    wid, tok = _running(h)
    lt = h.spec.lease_for("manual")
    first = h.now()
    while h.now() < first + limit / 2:  # half a budget in the first stint
        h.advance_to(min(h.now() + lt.renew_interval, first + limit / 2))
        h.do("renew", work_id=wid, token=tok)
    kind = next(iter(h.spec.waiting_statuses))
    h.do("set_waiting", work_id=wid, token=tok, kind=kind, ref="thread-7")
    h.advance(h.contract_seconds(QUANTUM))
    tok = h.do("resume", work_id=wid, owner="worker-2").value["lease_token"]
    start = h.now()
    end = start + limit
    while h.now() < end:  # across first + limit, where a stint counted from the claim would end
        h.advance_to(min(h.now() + lt.renew_interval, end))
        h.do("renew", work_id=wid, token=tok)
        h.do("expire")
        check(h.item(wid)["status"] == "running", "retry.execution_timeout",
              f"marked timeout {h.now() - start:g}s after the resume (the claim was {h.now() - first:g}s ago); "
              f"the stint since the resume is not longer than the budget {limit:g}s", h)
    h.advance_to(end + QUANTUM)
    h.do("renew", work_id=wid, token=tok)
    h.do("expire")
    check(h.item(wid)["status"] == "timeout", "retry.execution_timeout", "a resumed stint past the execution budget kept running", h)


def _other_value(d: RetryPolicy, name: str) -> float:
    """A value of one retry policy field that differs from the contract's default ``d`` (where the
    contract leaves room) and, merged with the other defaults, still makes a valid policy."""
    if name == "max_attempts":
        return d.max_attempts + 1 if d.max_attempts < MAX_ATTEMPTS else d.max_attempts - 1
    if name == "multiplier":
        return d.multiplier + 1 if d.multiplier + 1 <= MAX_MULTIPLIER else 1.0
    if name == "initial_backoff":  # at most the default max_backoff
        return _quantum(d.max_backoff / 2) if d.initial_backoff != _quantum(d.max_backoff / 2) else d.max_backoff
    return d.initial_backoff + (_quantum((d.max_backoff - d.initial_backoff) / 2) or QUANTUM)  # at least initial


def _quantum(seconds: float) -> float:
    return round(seconds / QUANTUM) * QUANTUM


@cases("retry.policy_override")
def _override_more(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for name in ("max_attempts", "initial_backoff", "multiplier", "max_backoff"):
        def partial(h: Harness, name: str = name) -> None:
            """A policy that gives one field (and jitter none, for exact delays) keeps every other default."""
            pol = {"jitter": "none", name: _other_value(h.spec.retry_default, name)}  # from h.spec: clock seconds
            policy = h.spec.retry_default.merged(pol)
            got = _fail_at_attempts(h, pol, policy.max_attempts + 1)
            check(len(got) == policy.max_attempts - 1, "retry.policy_override",
                  f"policy {pol}: {len(got)} retries for max_attempts {policy.max_attempts}", h)
            for n, (t, nra) in enumerate(got, start=1):
                lo, hi = h.spec.backoff_range(policy, n)
                tol = h.wall_tolerance if h.wall else 0.0
                check(t + lo - tol <= nra <= t + hi + tol, "retry.policy_override",
                      f"policy {pol}: retry after attempt {n} due in {nra - t:g}s, the merged policy gives {lo:g}", h)
        yield f"only-{name}", partial

    def after_requeue(h: Harness) -> None:
        """The override belongs to the work item: a requeue keeps it (max_attempts 1: every run fails at once)."""
        h.need("requeue")
        wid = h.create(retry_policy={"max_attempts": 1})
        tok = h.claim(wid)
        h.do("fail", work_id=wid, token=tok, error_class=_retryable(h.spec))
        h.do("requeue", work_id=wid, reason="operator")
        tok = h.claim(wid)
        # the last call, read here (the model would blame the outcome on retry.exhausted, whose
        # rule holds for whatever policy the ledger applied)
        out = h.raw("fail", work_id=wid, token=tok, error_class=_retryable(h.spec), now=h.now())
        check(out.ok and out.value["status"] == "failed", "retry.policy_override",
              f"max_attempts 1, after a requeue: a retryable failure gave {out.value['status'] if out.ok else out.code}", h)

    def after_reopen(h: Harness) -> None:
        """The override is part of the durable record: it still holds after the ledger is reopened."""
        with durable(h) as reopen:
            wid = h.create(retry_policy={"max_attempts": 1})
            reopen()
            tok = h.claim(wid)
            out = h.raw("fail", work_id=wid, token=tok, error_class=_retryable(h.spec), now=h.now())  # the last call
            check(out.ok and out.value["status"] == "failed", "retry.policy_override",
                  f"max_attempts 1 after a reopen: a retryable failure gave {out.value['status'] if out.ok else out.code}", h)

    yield "kept-across-requeue", after_requeue
    yield "kept-across-reopen", after_reopen
