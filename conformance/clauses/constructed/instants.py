"""Cases by construction: every time rule of the contract at its instant.

Each rule the contract ties to an instant is probed one time quantum (``QUANTUM`` of the injected
clock) before it, exactly at it and one quantum after it, for every source of its timing the
contract has: the default, each source system's override (``by_source``) and, where an item can
carry its own (a retry policy given at creation, a timeout given to ``set_waiting``, a timer),
the item's own.  The rules, read from the contract:

* a lease lapses only when now > lease_expires_at + grace (policy ``lease``): every operation
  that requires the lease (``requires_lease``) is accepted before and at that instant and refused
  after it; the monitor (``expire``) and the recovery scan (``recover``) leave the work alone
  before and at it and act after it;
* every phase whose budget the monitor enforces (``phases`` with ``action: timeout`` and a
  ``timeout``) runs out only when its stint is longer than the budget (strictly);
* a wait runs out only when now > waiting_deadline, the deadline from the kind's budget (per
  source) or the timeout given;
* a scheduled retry is promoted once now >= next_retry_at, never before (for the default policy,
  each source's and an item's own);
* no retry waits longer than max_backoff: for the default policy and each source's, the retry after
  the first attempt whose delay reaches the cap is due exactly max_backoff later (exact jitter,
  ``retry.cap``: ``instant:cap:<source>``), and every retry before it exactly at its uncapped delay
  (``retry.bounds``: ``instant:backoff:<source>``): the default's and each source's backoff, which
  a full-jitter draw hides;
* a run's timer wakes it once now >= timer_at; a hand-out (``handouts``) lapses, and is handed out
  again, only when now > expires_at + grace; a lane's lease is live while now <= expires_at + grace.

Each case registers under the clause of the rule it probes (param ``instant:<rule>:<source>``),
so a rule that fires a quantum early or late fails that clause.  The model judges every call; the
case's own checks say which side of the instant went wrong.  Wall-clock runs cannot hit an
instant exactly: there every case is not applicable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ledgercheck.conformance.clauses import CaseFn, cases, check
from ledgercheck.conformance.harness import Harness, NotApplicable
from ledgercheck.spec import Spec, rules
from ledgercheck.transport.clock import QUANTUM

SIDES = (("before", -QUANTUM), ("at", 0.0), ("after", QUANTUM))


def _virtual(h: Harness) -> None:
    if h.wall:
        raise NotApplicable("an instant cannot be hit to the quantum on a wall clock")


def default_source(spec: Spec) -> str:
    """The source the plain cases use: the harness's default, else one without overrides."""
    if "manual" in spec.source_systems:
        return "manual"
    return next((s for s in spec.source_systems if s not in spec.lease_by_source), spec.source_systems[0])


def timing_sources(spec: Spec, by_source: Iterable[str]) -> list[str]:
    """The default source, then every source the contract gives its own timings (``by_source``)."""
    first = default_source(spec)
    return [first, *(s for s in spec.source_systems if s in set(by_source) and s != first)]


def _plain(h: Harness, op: str, skip: Iterable[str] = ("work_id", "token", "now")) -> dict[str, Any]:
    """The required arguments of ``op`` beyond ``skip``, one plain valid value each (the pools'
    draws the stateful machines use, from the contract's argument types)."""
    from .edges import _draws

    draws = _draws(h.spec, h.scale)
    return {n: draws.plain(n, a.type) for n, a in h.spec.operations[op].args.items() if a.required and n not in skip}


def fenced_ops(spec: Spec) -> tuple[str, ...]:
    """The operations that take an item's lease token (``requires_lease``), in contract order."""
    return tuple(op for op, o in spec.operations.items() if o.requires_lease)


def lease_clause(spec: Spec, op: str) -> str:
    """The clause of a fenced operation's lapse rule: a renewal's grace window is its own clause
    (the operation that renews the lease, ``lease: renew``), every other write is fenced."""
    return "lease.renew.grace" if spec.operations[op].lease == "renew" else "lease.fencing"


def monitor_clause(spec: Spec, op: str) -> str | None:
    """The clause of a monitor's lease-lapse rule: the recovery scan's (a monitor with a
    ``release`` step of its own, acting on a lapsed lease) or the expiry monitor's (a monitor that
    releases leases, ``lease: release``); None for a monitor that does not act on leases."""
    o = spec.operations[op]
    if o.kind != "monitor":
        return None
    if "release" in spec.effects.get(op, {}):
        return "recovery.scan"
    return "lease.expiry.grace" if o.lease == "release" else None


def _holding_statuses(spec: Spec, op: str) -> tuple[str, ...]:
    """The statuses in which ``op`` writes under a lease: its own ``statuses``, else every leased
    status it moves an item out of."""
    o = spec.operations[op]
    if o.statuses:
        return tuple(o.statuses)
    return tuple(dict.fromkeys(t.src for t in spec.transitions if op in t.ops and spec.statuses[t.src].leased))


def claimed_status(spec: Spec) -> str:
    """The status a claim moves queued work into (the leased target of ``claim``)."""
    return next(t.dst for t in spec.transitions if "claim" in t.ops and spec.statuses[t.dst].leased)


# ----------------------------------------------------------------------------- leases
def _lease_probe(op: str, src: str, clause: str) -> CaseFn:
    def fn(h: Harness) -> None:
        _virtual(h)
        h.need(op)
        lt = h.spec.lease_for(src)
        wids = {side: h.create(src, f"{src}-{op}-{side}") for side, _ in SIDES}
        toks = {side: h.claim(w) for side, w in wids.items()}
        lapse = h.item(wids["at"])["lease_expires_at"] + lt.grace
        extra = _plain(h, op)
        for side, dt in SIDES:
            h.advance_to(lapse + dt)
            out = h.do(op, work_id=wids[side], token=toks[side], **extra)
            what = f"{op} of {src} work {side} its lease lapses ({dt:+g}s from expires_at + grace {lt.grace:g}s)"
            if side == "after":
                check(not out.ok and out.code == "stale_lease", clause, f"{what} answered {out.code or 'ok'}, not stale_lease", h)
            else:
                check(out.ok, clause, f"{what} was refused ({out.code}: {out.message})", h)
    return fn


def _monitor_probe(op: str, src: str, clause: str) -> CaseFn:
    def fn(h: Harness) -> None:
        _virtual(h)
        h.need(op)
        lt = h.spec.lease_for(src)
        wid = h.create(src, f"{src}-{op}")
        h.claim(wid)
        held = h.item(wid)["status"]
        lapse = h.item(wid)["lease_expires_at"] + lt.grace
        for side, dt in SIDES:
            h.advance_to(lapse + dt)
            h.do(op)
            got = h.raw("get", work_id=wid).value["status"]
            moved = got != held
            check(moved == (side == "after"), clause,
                  f"{op} {side} the lease of {src} work lapsed ({dt:+g}s from expires_at + grace {lt.grace:g}s) left it {got}", h)
    return fn


def _lease_cases(clause: str) -> Callable[[Spec], Iterator[tuple[str, CaseFn]]]:
    def gen(spec: Spec) -> Iterator[tuple[str, CaseFn]]:
        held = claimed_status(spec)
        for op in fenced_ops(spec):
            if lease_clause(spec, op) == clause and held in _holding_statuses(spec, op):
                for src in timing_sources(spec, spec.lease_by_source):
                    yield f"instant:lapse:{op}:{src}", _lease_probe(op, src, clause)
        for op in spec.operations:
            if monitor_clause(spec, op) == clause:
                for src in timing_sources(spec, spec.lease_by_source):
                    yield f"instant:lapse:{op}:{src}", _monitor_probe(op, src, clause)
    return gen


for _clause in ("lease.renew.grace", "lease.fencing", "lease.expiry.grace", "recovery.scan"):
    cases(_clause)(_lease_cases(_clause))


# ----------------------------------------------------------------------------- phase budgets
def enforced_phases(spec: Spec) -> tuple[str, ...]:
    """Phases whose own budget the monitor enforces (``action: timeout`` with a ``timeout``)."""
    return tuple(p for p, ph in spec.phases.items() if ph.get("action") == "timeout" and ph.get("timeout") is not None)


@cases("retry.execution_timeout")
def _phases(spec: Spec) -> Iterator[tuple[str, CaseFn]]:
    clause = "retry.execution_timeout"
    for phase in enforced_phases(spec):
        def fn(h: Harness, phase: str = phase) -> None:
            _virtual(h)
            h.need("renew")
            src = default_source(h.spec)
            budget = h.spec.phase_timeout(phase)
            lt = h.spec.lease_for(src)
            wid = h.create(src, f"stint-{phase}")
            tok = h.claim(wid)
            held = h.item(wid)["status"]
            due = h.item(wid)["started_at"] + budget
            for side, dt in SIDES:
                # the lease renewed all the way there, so only the phase budget can run out
                while h.now() < due + dt:
                    h.advance_to(min(h.now() + lt.renew_interval, due + dt))
                    if h.item(wid)["status"] == held:
                        h.do("renew", work_id=wid, token=tok)
                h.do("expire")
                got = h.raw("get", work_id=wid).value["status"]
                check((got != held) == (side == "after"), clause,
                      f"expire {side} the {phase} budget ran out ({dt:+g}s from start + {budget:g}s) left the work {got}", h)
        yield f"instant:phase:{phase}", fn


# ----------------------------------------------------------------------------- waits
def waiting_sources(spec: Spec) -> list[tuple[str, str | None]]:
    """(source, None) for the default budget and each source's own, then (default source,
    "given") for a timeout given to set_waiting."""
    return [*((s, None) for s in timing_sources(spec, spec.waiting_by_source)), (default_source(spec), "given")]


@cases("waiting.timeout")
def _waits(spec: Spec) -> Iterator[tuple[str, CaseFn]]:
    clause = "waiting.timeout"
    for kind in spec.waiting_statuses:
        for src, given in waiting_sources(spec):
            def fn(h: Harness, kind: str = kind, src: str = src, given: str | None = given) -> None:
                _virtual(h)
                h.need("set_waiting")
                # a given timeout other than the kind's budget, so the two sources differ
                timeout = None if given is None else h.spec.waiting_timeout(kind, src) / 2
                wid = h.create(src, f"wait-{kind}")
                tok = h.claim(wid)
                args = {"timeout": timeout} if timeout is not None else {}
                h.do("set_waiting", work_id=wid, token=tok, kind=kind, ref=f"ref-{kind}", **args)
                waiting = h.item(wid)["status"]
                due = h.item(wid)["waiting_deadline"]
                for side, dt in SIDES:
                    h.advance_to(due + dt)
                    h.do("expire")
                    got = h.raw("get", work_id=wid).value["status"]
                    check((got != waiting) == (side == "after"), clause,
                          f"expire {side} the deadline of a {kind} wait ({given or src} budget, {dt:+g}s) left the work {got}", h)
            yield f"instant:deadline:{kind}:{given or src}", fn


# ----------------------------------------------------------------------------- retries
def retry_sources(spec: Spec) -> list[tuple[str, dict[str, Any] | None]]:
    """(source, None) for the default policy and each source's own, then (default source, an
    item's own policy): a first backoff twice the default's, drawn without jitter where the
    contract has a mode whose range is a single point."""
    base = spec.retry_policy_for(default_source(spec))
    own: dict[str, Any] = {"initial_backoff": base.initial_backoff * 2, "max_backoff": max(base.max_backoff, base.initial_backoff * 2)}
    exact = next((m for m, (lo, hi) in spec.jitter_modes.items() if lo == hi), None)
    if exact is not None:
        own["jitter"] = exact
    return [*((s, None) for s in timing_sources(spec, spec.retry_by_source)), (default_source(spec), own)]


@cases("retry.promote")
def _promotes(spec: Spec) -> Iterator[tuple[str, CaseFn]]:
    clause = "retry.promote"
    retryable = next((c for c, ok in spec.error_classes.items() if ok), None)
    if retryable is None:
        return
    for src, own in retry_sources(spec):
        def fn(h: Harness, src: str = src, own: dict[str, Any] | None = own) -> None:
            _virtual(h)
            h.need("fail", "promote_due")
            kw = {"retry_policy": h.contract_policy(own)} if own else {}
            wid = h.create(src, "retry-unit", **kw)
            tok = h.claim(wid)
            h.do("fail", work_id=wid, token=tok, error_class=retryable)
            scheduled = h.item(wid)["status"]
            due = h.item(wid)["next_retry_at"]
            if due is None or due - QUANTUM < h.now():
                raise NotApplicable(f"the retry was scheduled {due!r}, too soon to probe a quantum before it")
            for side, dt in SIDES:
                h.advance_to(due + dt)
                h.do("promote_due")
                got = h.raw("get", work_id=wid).value["status"]
                check((got != scheduled) == (side != "before"), clause,
                      f"promote_due {side} next_retry_at ({'own policy' if own else src}, {dt:+g}s) left the work {got}", h)
                if got != scheduled:
                    break
        yield f"instant:promote:{'item-policy' if own else src}", fn


# ----------------------------------------------------------------------------- wakeups
@cases("wakeups.timer")
def _timers(spec: Spec) -> Iterator[tuple[str, CaseFn]]:
    def fn(h: Harness) -> None:
        _virtual(h)
        h.need("wake_suspend", "wake_take")
        at = h.now() + h.spec.lease_default.ttl  # any instant ahead; the timer is the run's own
        runs = {side: f"run-{side}" for side, _ in SIDES}
        for side, dt in SIDES:
            h.do("wake_suspend", run_id=runs[side], timer_at=at - dt)  # the take at ``at`` is ``dt`` from its timer
        # one take at ``at``: the run whose timer is a quantum later stays; the others are due
        h.advance_to(at)
        taken = set()
        for _ in SIDES:
            got = h.do("wake_take", worker="worker-A").value
            if got is None:
                break
            taken.add(got["run_id"])
        check(runs["before"] not in taken, "wakeups.timer", "a take a quantum before the timer handed the run out", h)
        check(runs["at"] in taken, "wakeups.timer", "a take at exactly timer_at did not hand the run out", h)
        check(runs["after"] in taken, "wakeups.timer", "a take a quantum after timer_at did not hand the run out", h)
    yield "instant:timer:run", fn


def _handout(h: Harness) -> tuple[str, dict[str, Any]]:
    h.do("wake_suspend", run_id="run-1")
    kind = h.spec.wakeup_kinds[0]
    h.do("wake_fire", run_id="run-1", kind=kind)
    got = h.do("wake_take", worker="worker-A").value
    if got is None:
        raise NotApplicable("a woken run was not handed out (wakeups.wake judges it)")
    return "run-1", got


@cases("wakeups.redeliver")
def _redeliver(spec: Spec) -> Iterator[tuple[str, CaseFn]]:
    for profile, rule in spec.handouts.items():
        def fn(h: Harness, profile: str = profile, op: str = rule.operation) -> None:
            _virtual(h)
            h.need("wake_suspend", "wake_fire", op)
            run, got = _handout(h)
            lapse = rules.handout_lapse(h.spec, profile, got["expires_at"])
            for side, dt in SIDES:
                h.advance_to(lapse + dt)
                again = h.do(op, worker="worker-B").value
                handed = again is not None and again.get("run_id") == run
                check(handed == (side == "after"), "wakeups.redeliver",
                      f"{op} {side} the hand-out lapsed ({dt:+g}s from expires_at + grace) answered {again!r:.120}", h)
        yield f"instant:handout-lapse:{profile}", fn


@cases("wakeups.fencing")
def _handout_renew(spec: Spec) -> Iterator[tuple[str, CaseFn]]:
    """The holder's renewal is accepted while its hand-out is live (before and at the lapse); the
    contract lets a lapsed one be refused or not, so only the live side is required."""
    for profile in spec.handouts:
        def fn(h: Harness, profile: str = profile) -> None:
            _virtual(h)
            h.need("wake_suspend", "wake_fire", "wake_take", "wake_renew")
            run, got = _handout(h)
            lapse = rules.handout_lapse(h.spec, profile, got["expires_at"])
            h.advance_to(lapse - QUANTUM)
            out = h.do("wake_renew", run_id=run, token=got["token"])
            check(out.ok, "wakeups.fencing", f"wake_renew a quantum before the hand-out lapsed was refused ({out.code})", h)
            lapse = rules.handout_lapse(h.spec, profile, out.value["expires_at"])
            h.advance_to(lapse)
            out = h.do("wake_renew", run_id=run, token=got["token"])
            check(out.ok, "wakeups.fencing", f"wake_renew at exactly the lapse instant was refused ({out.code})", h)
        yield f"instant:handout-renew:{profile}", fn


# ----------------------------------------------------------------------------- lanes
def _lane_acquires(clause: str, sides: tuple[str, ...]) -> CaseFn:
    def fn(h: Harness) -> None:
        _virtual(h)
        h.need("lane_acquire")
        first = h.do("lane_acquire", session_key="sk-instant", lane="main", owner="owner-A").value
        check(first is not None, clause, "a free lane was not handed out", h)
        lapse = first["expires_at"] + h.spec.lease_default.grace
        for side, dt in SIDES:
            if side not in sides:
                continue
            h.advance_to(lapse + dt)
            got = h.do("lane_acquire", session_key="sk-instant", lane="main", owner="owner-B").value
            check((got is not None) == (side == "after"), clause,
                  f"lane_acquire by another owner {side} the lane lease lapsed ({dt:+g}s) answered {got!r:.120}", h)
    return fn


def _lane_renews(clause: str, sides: tuple[str, ...]) -> CaseFn:
    def fn(h: Harness) -> None:
        _virtual(h)
        h.need("lane_acquire", "lane_renew")
        leases = {side: h.do("lane_acquire", session_key="sk-instant", lane=f"lane-{side}", owner="owner-A").value
                  for side in sides}
        lapse = next(iter(leases.values()))["expires_at"] + h.spec.lease_default.grace
        for side, dt in SIDES:
            if side not in sides:
                continue
            h.advance_to(lapse + dt)
            if side == "after":
                # a lapsed lane's own token is left open until someone takes the lane over, which
                # another owner may do a quantum after the lapse; from then on the token is stale
                h.do("lane_acquire", session_key="sk-instant", lane=f"lane-{side}", owner="owner-B")
            out = h.do("lane_renew", session_key="sk-instant", lane=f"lane-{side}", token=leases[side]["token"])
            if side == "after":
                check(not out.ok and out.code == "stale_lease", clause,
                      f"lane_renew a quantum after the lease lapsed, the lane taken over, answered {out.code or 'ok'}", h)
            else:
                check(out.ok, clause, f"lane_renew {side} the lease lapses ({dt:+g}s) was refused ({out.code})", h)
    return fn


# a lane's lease is live while now <= expires_at + grace (lanes.exclusive, lanes.renew) and free
# after it (lanes.takeover, lanes.fencing): each side under its own clause
cases("lanes.exclusive")(lambda spec: [("instant:lane-lapse:acquire", _lane_acquires("lanes.exclusive", ("before", "at")))])
cases("lanes.takeover")(lambda spec: [("instant:lane-lapse:acquire", _lane_acquires("lanes.takeover", ("after",)))])
cases("lanes.renew")(lambda spec: [("instant:lane-lapse:renew", _lane_renews("lanes.renew", ("before", "at")))])
cases("lanes.fencing")(lambda spec: [("instant:lane-lapse:renew", _lane_renews("lanes.fencing", ("after",)))])


# ----------------------------------------------------------------------------- the backoff cap
def cap_attempt(spec: Spec, policy: Any) -> int | None:
    """The first attempt whose retry delay (before jitter) is the policy's max_backoff: where the
    cap's rule starts to bind; None when the delays never reach it within a few dozen attempts."""
    for n in range(1, 64):
        if spec.backoff_base(policy, n) >= policy.max_backoff:
            return n
    return None


def _backoff_probe(src: str, exact: str, retryable: str, cap: bool) -> CaseFn:
    """An item whose own policy sets only the exact jitter mode and enough attempts, failed up to
    the first attempt whose delay reaches the cap of ``src``'s policy (the backoff itself comes from
    ``src``'s policy).  ``cap``: the retry after that attempt is due exactly max_backoff later;
    else every retry before it exactly at its uncapped delay.  A wrong delay is blamed by what the
    delays say together: the uncapped ones all off by one factor (a wrong backoff), or exact and
    only the capped one off: the backoff's rule (``retry.bounds``; above max_backoff, ``retry.cap``);
    uncapped ones off by varying factors: the item's exact jitter was not applied, the override's
    clause (create's ``retry_policy`` blame)."""
    def fn(h: Harness) -> None:
        _virtual(h)
        h.need("fail", "promote_due")
        base = h.spec.retry_policy_for(src)
        n = cap_attempt(h.spec, base)
        if n is None:
            raise NotApplicable(f"the {src} policy's delays never reach its max_backoff")
        own = {"jitter": exact, "max_attempts": n + 1}
        wid = h.create(src, "retry-cap" if cap else "retry-backoff", retry_policy=h.contract_policy(own))
        policy = h.spec.retry_policy_for(src, own)
        h.need_claim_by_id()
        tok = h.claim(wid)
        got: list[float | None] = []
        for attempt in range(1, n + 1):
            now = h.now()
            out = h.do("fail", work_id=wid, token=tok, error_class=retryable)
            at = out.value.get("next_retry_at") if out.ok and isinstance(out.value, dict) else None
            got.append(at - now if isinstance(at, int | float) else None)
            if attempt == n or at is None:
                break
            h.advance_to(at)
            h.do("promote_due")
            tok = h.claim(wid)
        want = [h.spec.backoff_range(policy, a)[0] for a in range(1, n + 1)]
        # the uncapped delays' factors (a delay the ledger capped itself says nothing of the jitter)
        ratios = {round(g / w, 9) for g, w in zip(got[:n - 1], want, strict=False)
                  if g is not None and w > 0 and abs(g - policy.max_backoff) > 1e-6}
        override = h.spec.operations["create"].args["retry_policy"].blame or "retry.policy_override"
        jitter_kept = len(ratios) <= 1
        for attempt, (g, w) in enumerate(zip(got, want, strict=False), start=1):
            if cap != (attempt == n) or (g is not None and abs(g - w) <= 1e-6):
                continue
            late = g is not None and g > policy.max_backoff + 1e-6
            clause = ("retry.cap" if late else "retry.bounds") if jitter_kept else override
            check(False, clause, f"{src}: the retry after attempt {attempt} is due +{g}s, the policy (its own jitter "
                  f"{exact}) says +{w:g}s ({'capped at max_backoff' if attempt == n else 'below the cap'}); "
                  f"the uncapped delays were off by {'one factor' if jitter_kept else 'varying factors'} "
                  f"{sorted(ratios)[:4]}", h)
    return fn


def _backoff_cases(cap: bool) -> Callable[[Spec], Iterator[tuple[str, CaseFn]]]:
    """For the default policy and each source's own: the cap where it starts to bind
    (``instant:cap:<source>``), or every uncapped delay up to it (``instant:backoff:<source>``)."""
    def gen(spec: Spec) -> Iterator[tuple[str, CaseFn]]:
        retryable = next((c for c, ok in spec.error_classes.items() if ok), None)
        exact = next((m for m, (lo, hi) in spec.jitter_modes.items() if lo == hi), None)
        if retryable is None or exact is None:
            return
        for src in timing_sources(spec, spec.retry_by_source):
            yield f"instant:{'cap' if cap else 'backoff'}:{src}", _backoff_probe(src, exact, retryable, cap)
    return gen


cases("retry.cap")(_backoff_cases(True))
cases("retry.bounds")(_backoff_cases(False))
