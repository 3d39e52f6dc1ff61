"""Clause tests of the lease profile."""

from __future__ import annotations

import functools
from collections.abc import Iterable

from ledgercheck.spec import Spec
from ledgercheck.transport.clock import QUANTUM

from ..harness import OWNER, Harness, NotApplicable
from ..stateful_args import Pools, edges, nfd_variant
from . import CaseFn, case, cases, check


@cases("lease.acquire")
def _acquire(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for src in spec.source_systems:
        def fn(h: Harness, src: str = src) -> None:
            wid = h.create(src)
            t0 = h.now()
            tok = h.claim(wid, owner="worker-A")
            got = h.raw("get", work_id=wid).value
            lt = h.spec.lease_for(src)
            check(got["owner"] == "worker-A" and tok and got["lease_version"] == 1, "lease.acquire",
                  f"claim gave owner {got['owner']!r} token {tok!r} version {got['lease_version']}", h)
            if not h.wall:
                check(got["lease_expires_at"] == t0 + lt.ttl, "lease.acquire", f"expires at {got['lease_expires_at']}, expected now + {lt.ttl:g}", h)
        yield src, fn


@functools.lru_cache(maxsize=1)
def _owner_forms() -> tuple[str, ...]:
    first = nfd_variant(Pools().owners[0])
    return (first, *edges(first, allow_empty=True))


@case("lease.acquire", "owner-names-as-given")
def _acquire_owner_forms(h: Harness) -> None:
    """An owner name is stored and returned as given (core.identity.exact), at its edges: another
    case, surrounding whitespace, the other normalization form, an astral character, and the
    empty name (which is a name, not "no holder"); the forms come from the contract-drawn pools
    the stateful machine uses (conformance/stateful_args.py)."""
    for i, owner in enumerate(_owner_forms()):
        wid = h.create("manual", f"owner-form-{i}")
        h.claim(wid, owner=owner)  # the model compares the answer and the read-back, field by field
        got = h.raw("get", work_id=wid).value
        check(got.get("owner") == owner, "lease.acquire", f"claimed by {owner!r}, the record names {got.get('owner')!r}", h)


@case("lease.version.monotonic", "across-everything")
def _monotonic(h: Harness) -> None:
    wid = h.create()
    versions = []
    h.claim(wid)
    versions.append(h.item(wid)["lease_version"])
    if h.claims("set_waiting"):
        h.drive(wid, next(iter(h.spec.waiting_statuses.values())))
        h.do("resume", work_id=wid, owner="worker-2")
        versions.append(h.item(wid)["lease_version"])
    if h.claims("fail"):
        h.drive(wid, "retry_scheduled")
        h.drive(wid, "running")
        versions.append(h.item(wid)["lease_version"])
    h.drive(wid, "done")
    h.do("requeue", work_id=wid)
    h.claim(wid, owner="worker-3")
    versions.append(h.item(wid)["lease_version"])
    got = [v for v in versions]
    check(all(b > a for a, b in zip(got, got[1:], strict=False)), "lease.version.monotonic", f"lease versions {got}", h)


@cases("lease.renew.extends")
def _extends(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    # every source with its own lease timings (the default source keeps the plain ids)
    for src in spec.source_systems:
        for frac in (0.25, 0.5, 0.75):
            def fn(h: Harness, frac: float = frac, src: str = src) -> None:
                lt = h.spec.lease_for(src)
                wid = h.create(src)
                tok = h.claim(wid)
                step = lt.renew_interval * frac  # whole quanta on a virtual clock, exact sums
                h.advance(step if h.wall else round(step / QUANTUM) * QUANTUM or QUANTUM)
                t = h.now()
                out = h.do("renew", work_id=wid, token=tok)
                if not h.wall and src not in h.spec.lease_by_source:
                    # (an override's ttl is lease.per_source's: the model blames it there, and
                    # lease.per_source[<src>-renewed] fails for it)
                    check(out.value["lease_expires_at"] == t + lt.ttl, "lease.renew.extends",
                          f"renew of {src} work set {out.value['lease_expires_at']}, expected now + {lt.ttl:g}", h)
                check(out.value["status"] == "running", "lease.renew.extends", "renew changed the status", h)
            yield (f"at-{frac:g}-interval" if src == _default_source(spec) else f"{src}-at-{frac:g}-interval"), fn


def _default_source(spec: Spec) -> str:
    """The source the plain lease tests use (the harness's default), or one on the default lease."""
    if "manual" in spec.source_systems:
        return "manual"
    return next((s for s in spec.source_systems if s not in spec.lease_by_source), spec.source_systems[0])


def _lease_sources(spec: Spec) -> list[str]:
    """One source per distinct lease timing of the contract: the default one, then each override."""
    out = [_default_source(spec)]
    for src in spec.source_systems:
        if src not in out and spec.lease_for(src) not in [spec.lease_for(s) for s in out]:
            out.append(src)
    return out


@cases("lease.renew.conditions")
def _conditions(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    def wrong_token(h: Harness) -> None:
        wid = h.create()
        h.claim(wid)
        out = h.do("renew", work_id=wid, token="forged-token")
        check(not out.ok, "lease.renew.conditions", "renew with a forged token was accepted", h)

    def while_waiting(h: Harness) -> None:
        h.need("set_waiting")
        wid = h.create()
        tok = h.claim(wid)
        h.do("set_waiting", work_id=wid, token=tok, kind=next(iter(h.spec.waiting_statuses)), ref="approval-17")
        out = h.do("renew", work_id=wid, token=tok)
        check(not out.ok, "lease.renew.conditions", "renew while waiting was accepted", h)

    def after_close(h: Harness) -> None:
        wid = h.create()
        tok = h.claim(wid)
        h.do("close_out", work_id=wid, token=tok, status="done")
        out = h.do("renew", work_id=wid, token=tok)
        check(not out.ok, "lease.renew.conditions", "renew after close-out was accepted", h)

    yield "wrong-token", wrong_token
    yield "while-waiting", while_waiting
    yield "after-close-out", after_close


@cases("lease.renew.grace")
def _grace(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    def within(h: Harness) -> None:
        wid = h.create()
        tok = h.claim(wid)
        lt = h.spec.lease_for("manual")
        # half the grace (a whole quantum at least, the grace at most: with no grace, the expiry itself)
        h.advance_to(h.item(wid)["lease_expires_at"] + min(lt.grace, max(QUANTUM, round(lt.grace / 2 / QUANTUM) * QUANTUM)))
        out = h.do("renew", work_id=wid, token=tok)
        check(out.ok, "lease.renew.grace", "renew within the grace window was refused", h)

    def beyond(h: Harness) -> None:
        wid = h.create()
        tok = h.claim(wid)
        h.advance_to(h.lapse_time(wid))
        out = h.do("renew", work_id=wid, token=tok)
        check(not out.ok, "lease.renew.grace", "renew after expiry + grace was accepted", h)

    yield "within-grace", within
    yield "beyond-grace", beyond

    # The boundary itself: a lease has lapsed only when now > lease_expires_at + grace (the
    # policy's own words; lease.expiry.grace: "never at or before that instant"), so a renewal
    # just before and at exactly expiry + grace still succeeds, and one a moment later is refused.
    # Per source, each with its own ttl and grace.
    for src in _lease_sources(spec):
        def boundary(h: Harness, src: str = src) -> None:
            if h.wall:
                raise NotApplicable("the lapse instant cannot be hit exactly on a wall clock (within-grace and beyond-grace judge it)")
            lt = h.spec.lease_for(src)
            before, at, after = h.create(src, f"{src}-before"), h.create(src, f"{src}-at"), h.create(src, f"{src}-after")
            toks = {w: h.claim(w) for w in (before, at, after)}
            lapse = {w: h.item(w)["lease_expires_at"] + lt.grace for w in toks}
            for wid, t, ok in ((before, lapse[before] - QUANTUM, True), (at, lapse[at], True), (after, lapse[after] + QUANTUM, False)):
                h.advance_to(t)
                out = h.do("renew", work_id=wid, token=toks[wid])
                what = f"expiry + grace {'- ' + str(QUANTUM) + 's' if t < lapse[wid] else '+ ' + str(QUANTUM) + 's' if t > lapse[wid] else 'exactly'}"
                if ok:
                    # (the new expiry is checked by the model, under the clause that owns the ttl)
                    check(out.ok, "lease.renew.grace", f"renew of {src} work at {what} (grace {lt.grace:g}s) was refused ({out.code})", h)
                else:
                    check(not out.ok and out.code == "stale_lease", "lease.renew.grace",
                          f"renew of {src} work at {what} (grace {lt.grace:g}s) answered {out.code or 'ok'}", h)
        yield f"lapse-boundary-{src}", boundary


@cases("lease.expiry.grace")
def _expiry(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for src in spec.source_systems:
        def fn(h: Harness, src: str = src) -> None:
            wid = h.create(src)
            h.claim(wid)
            lt = h.spec.lease_for(src)
            exp = h.item(wid)["lease_expires_at"]
            for t in (exp, exp + lt.grace / 2, exp + lt.grace):
                if h.wall and abs(t - (exp + lt.grace)) < h.wall_tolerance * 2:
                    continue
                h.advance_to(t)
                h.do("expire")
                check(h.item(wid)["status"] == "running", "lease.expiry.grace", f"expired at expiry + {t - exp:g}s, within grace {lt.grace:g}s", h)
            h.advance_to(exp + lt.grace + QUANTUM)
            h.do("expire")
            check(h.item(wid)["status"] != "running", "lease.expiry.grace", "not expired after expiry + grace", h)
        yield src, fn


def _released(h: Harness, wid: str, how: str) -> None:
    got = h.raw("get", work_id=wid).value
    check(got["owner"] is None and got["lease_token"] is None and got["lease_expires_at"] is None, "lease.expiry.release",
          f"work expired ({how}) still has owner {got['owner']!r}, token {got['lease_token']!r}, "
          f"expiry {got['lease_expires_at']!r}", h)
    trail = h.trail_of(wid, "lease.expiry.release")
    if trail is not None:  # with the trail profile, the expiry is on record too
        types = [e["type"] for e in trail]
        check(h.spec.operations["expire"].event_for("timeout") in types, "lease.expiry.release", f"events {types}", h)


@case("lease.expiry.release", "clears-lease")
def _release(h: Harness) -> None:
    wid = h.create()
    h.claim(wid)
    h.advance_to(h.lapse_time(wid))
    h.do("expire")
    _released(h, wid, "lease lapsed")


@case("lease.expiry.release", "execution-timeout")
def _release_exec(h: Harness) -> None:
    """The monitor ends a stint that ran past its execution budget while the lease was renewed:
    the lease is released all the same (timeout_marked clears owner, token and expiry)."""
    budget = h.spec.phase_timeout("execution")
    if budget is None:
        raise NotApplicable("the contract sets no execution budget")
    h.need("renew")
    wid = h.create()
    tok = h.claim(wid)
    start, lt = h.now(), h.spec.lease_for("manual")
    while h.now() + lt.renew_interval < start + budget:
        h.advance(lt.renew_interval)
        h.do("renew", work_id=wid, token=tok)
    h.advance_to(start + budget + 1.0)
    h.do("expire")
    _released(h, wid, "execution budget spent")


def _guarded_writes(h: Harness, wid: str, tok: str) -> list[tuple[str, dict]]:
    out = [("close_out", {"work_id": wid, "token": tok, "status": "done"})]
    if h.claims("renew"):
        out.append(("renew", {"work_id": wid, "token": tok}))
    if h.claims("fail"):
        out.append(("fail", {"work_id": wid, "token": tok, "error_class": next(iter(h.spec.error_classes))}))
    if h.claims("set_waiting"):
        out.append(("set_waiting", {"work_id": wid, "token": tok, "kind": next(iter(h.spec.waiting_statuses)), "ref": "stale-ref"}))
    if h.claims("effect_begin"):
        out.append(("effect_begin", {"work_id": wid, "step_id": "s1", "tool": "t", "input": {}, "step_class": "pure", "token": tok}))
    return out


@cases("lease.fencing")
def _fencing(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for op in ("close_out", "renew", "fail", "set_waiting", "effect_begin"):
        def fn(h: Harness, op: str = op) -> None:
            h.need(op)
            wid = h.create()
            h.claim(wid)
            for name, args in _guarded_writes(h, wid, "stale-" + (h.token(wid) or "x")):
                if name == op:
                    out = h.do(name, **args)
                    check(not out.ok and out.code == "stale_lease", "lease.fencing", f"{op} with a forged token answered {out.code or 'ok'}", h)
        yield op, fn

    # The holder's own token stops being the live lease the moment the lease lapses (now >
    # lease_expires_at + grace), whether or not the monitor has marked the work yet; up to and
    # at that instant it is live.  (Renewal has its own clause, lease.renew.grace; effect
    # journal writes theirs, idem.fenced.)
    for op in ("close_out", "fail", "set_waiting"):
        for src in _lease_sources(spec):
            def lapsed(h: Harness, op: str = op, src: str = src) -> None:
                h.need(op)
                wid = h.create(src)
                tok = h.claim(wid)
                h.advance_to(h.lapse_time(wid))  # no expire: the monitor has not run
                for name, args in _guarded_writes(h, wid, tok):
                    if name == op:
                        out = h.do(name, **args)
                        check(not out.ok and out.code == "stale_lease", "lease.fencing",
                              f"{op} with the holder's token after its lease lapsed (monitor not run yet) answered {out.code or 'ok'}", h)
                check(h.item(wid)["status"] == "running", "lease.fencing", f"the refused {op} changed the work", h)

            def live(h: Harness, op: str = op, src: str = src) -> None:
                h.need(op)
                if h.wall:
                    raise NotApplicable("the lapse instant cannot be hit exactly on a wall clock")
                lt = h.spec.lease_for(src)
                before, at = h.create(src, f"{src}-before"), h.create(src, f"{src}-at")
                toks = {w: h.claim(w) for w in (before, at)}
                for wid, delta in ((before, -QUANTUM), (at, 0.0)):
                    h.advance_to(h.item(wid)["lease_expires_at"] + lt.grace + delta)
                    for name, args in _guarded_writes(h, wid, toks[wid]):
                        if name == op:
                            out = h.do(name, **args)
                            check(out.ok, "lease.fencing", f"{op} with the live token at expiry + grace{delta:+g}s was refused ({out.code})", h)
            yield f"{op}-lapsed-before-monitor-{src}", lapsed
            yield f"{op}-live-until-lapse-{src}", live


@cases("lease.takeover")
def _takeover(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for op in ("close_out", "renew", "fail", "set_waiting"):
        def fn(h: Harness, op: str = op) -> None:
            h.need(op)
            wid = h.create()
            old = h.claim(wid, owner="worker-old")
            h.advance_to(h.lapse_time(wid))
            h.do("expire")
            h.do("requeue", work_id=wid, reason="taken over")
            new = h.claim(wid, owner="worker-new")
            check(new != old and h.item(wid)["lease_version"] == 2, "lease.takeover", "takeover did not issue a new lease", h)
            for name, args in _guarded_writes(h, wid, old):
                if name == op:
                    out = h.do(name, **args)
                    check(not out.ok, "lease.takeover", f"the old holder's {op} was accepted after takeover", h)
            check(h.item(wid)["owner"] == "worker-new", "lease.takeover", "the new holder lost the item", h)
        yield op, fn


@cases("lease.fencing")
def _fencing_same_owner(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    """The same worker name takes its own lapsed item over: the lease is new all the same, and
    the old token is refused although the owner's name did not change (fencing is by the
    lease, not by who holds it).  Renewal is left out: a renew with a stale token is its own
    clause's (lease.renew.conditions, where the model blames it)."""
    for op in ("close_out", "fail", "set_waiting"):
        def fn(h: Harness, op: str = op) -> None:
            h.need(op)
            wid = h.create()
            old = h.claim(wid, owner="worker-same")
            h.advance_to(h.lapse_time(wid))
            h.do("expire")
            h.do("requeue", work_id=wid, reason="taken over")
            new = h.claim(wid, owner="worker-same")
            check(new != old, "lease.fencing", "the same owner's new claim kept the old token", h)
            for name, args in _guarded_writes(h, wid, old):
                if name == op:
                    out = h.do(name, **args)
                    check(not out.ok, "lease.fencing", f"the same owner's {op} with its old token was accepted after it took the item over", h)
        yield f"same-owner-takes-over-{op}", fn


@case("lease.single_holder", "claim-twice")
def _single(h: Harness) -> None:
    wid = h.create()
    h.claim(wid, owner="worker-A")
    out = h.do("claim", owner="worker-B", work_id=wid)
    if not h.last_claim_fallback:
        check(not out.ok, "lease.single_holder", "a second owner claimed running work", h)
    out = h.do("claim", owner="worker-B")
    check(out.value is None, "lease.single_holder", "claim handed out leased work", h)


@case("lease.single_holder", "concurrent-claims")
def _concurrent(h: Harness) -> None:
    """Two connections claim from one durable ledger at once; no item gets two owners."""
    from .constructed.concurrency import concurrent_claims

    concurrent_claims(h)


def _around_lapse(h: Harness, wid: str, grace: float) -> tuple[str, str]:
    """The item's status as the monitor leaves it just inside its lease's grace and just past it.

    On a virtual clock: at the lapse instant itself (lease_expires_at + grace) and a quantum
    later.  On a wall clock the ledger decides by its own clock, and at the lapse instant either
    answer is right (docs/contract.md, within the tolerance): there, twice the tolerance either
    side of it."""
    edge = h.item(wid)["lease_expires_at"] + grace
    off = 2 * h.wall_tolerance if h.wall else 0.0
    h.advance_to(edge - off)
    h.do("expire")
    inside = h.item(wid)["status"]
    h.advance_to(edge + (off if h.wall else QUANTUM))
    h.do("expire")
    return inside, h.item(wid)["status"]


@cases("lease.per_source")
def _per_source(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for src in spec.lease_by_source:
        def fn(h: Harness, src: str = src) -> None:
            wid = h.create(src)
            t0 = h.now()
            h.claim(wid)
            lt = h.spec.lease_for(src)
            if not h.wall:
                check(h.item(wid)["lease_expires_at"] == t0 + lt.ttl, "lease.per_source", "ttl override ignored", h)
            inside, past = _around_lapse(h, wid, lt.grace)
            check(inside == "running", "lease.per_source", "expired within the override's grace", h)
            check(past != "running", "lease.per_source", "the override's grace was not applied", h)
        yield src, fn

        def resumed(h: Harness, src: str = src) -> None:
            # every acquire takes the source's ttl: a resume is an acquire like a claim
            h.need("set_waiting", "resume")
            if h.wall:
                raise NotApplicable("compares exact instants")
            wid = h.create(src)
            tok = h.claim(wid)
            kind = next(iter(h.spec.waiting_statuses))
            h.do("set_waiting", work_id=wid, token=tok, kind=kind, ref="thread-1")
            h.advance(h.contract_seconds(1.0))
            t0 = h.now()
            got = h.do("resume", work_id=wid, owner="worker-2").value
            lt = h.spec.lease_for(src)
            check(got["lease_expires_at"] == t0 + lt.ttl, "lease.per_source",
                  f"resume of {src} work set lease_expires_at {got['lease_expires_at']}, expected now + {lt.ttl:g}", h)
        yield f"{src}-resumed", resumed

        def renewed(h: Harness, src: str = src) -> None:
            """A renewal extends by the source's own ttl, and the source's grace counts from there."""
            h.need("renew")
            wid = h.create(src)
            tok = h.claim(wid)
            lt = h.spec.lease_for(src)
            # renew after renew_interval, or sooner when the renewed lease's ttl + grace would
            # otherwise reach past the execution budget (whose timeout is another clause's)
            limit = h.spec.phase_timeout("execution")
            step = lt.renew_interval
            if limit is not None and step + lt.ttl + lt.grace >= limit:
                step = (limit - lt.ttl - lt.grace) / 2
            h.advance(step)
            t = h.now()
            out = h.do("renew", work_id=wid, token=tok)
            if not h.wall:
                check(out.value["lease_expires_at"] == t + lt.ttl, "lease.per_source",
                      f"renew set lease_expires_at = now + {out.value['lease_expires_at'] - t:g}s, the {src} ttl is {lt.ttl:g}s", h)
            inside, past = _around_lapse(h, wid, lt.grace)
            check(inside == "running", "lease.per_source", "renewed work expired within the override's ttl + grace", h)
            check(past != "running", "lease.per_source", "renewed work outlived the override's ttl + grace", h)
        yield f"{src}-renewed", renewed
    if not spec.lease_by_source:
        def none(h: Harness) -> None:
            raise NotApplicable("the contract defines no per-source lease overrides")
        yield "none", none


@case("lease.active_pointer", "derived")
def _active(h: Harness) -> None:
    a, b, c = h.create(), h.create(), h.create()
    h.claim(a)
    tok_b = h.claim(b)
    h.do("active")
    h.do("close_out", work_id=b, token=tok_b, status="done")
    h.do("active")
    h.claim(c)
    h.advance_to(h.lapse_time(a))
    h.do("active")
    got = h.raw("active", now=h.now()).value
    check(a not in got and b not in got, "lease.active_pointer", f"active view {got}", h)
    _ = OWNER


# ---------------------------------------------------------------- round-3 hunt
@case("lease.version.monotonic", "requeued-again")
def _monotonic_requeued_again(h: Harness) -> None:
    """The same requeue (the same item, the same reason) after another stint: a new move, answered
    with the record as it is then, its lease_version the one the stint's acquire grew.  A requeue
    answered from the first call's snapshot (an idempotency cache keyed by the call) reports the
    version going back."""
    end = next((s for s in h.spec.terminal_statuses if h.spec.targets("requeue", s)), None)
    if end is None:
        raise NotApplicable("no terminal status is requeued")
    wid = h.create()
    versions = []
    for _ in range(2):
        h.drive(wid, end)
        out = h.do("requeue", work_id=wid, reason="operator")
        versions.append(out.value["lease_version"] if out.ok and isinstance(out.value, dict) else None)
    check(versions[0] is not None and versions[1] is not None and versions[1] > versions[0], "lease.version.monotonic",
          f"requeued twice, the answers carried lease versions {versions}", h)


@case("lease.version.monotonic", "resumes-in-one-attempt")
def _monotonic_resumes(h: Harness) -> None:
    """Several waits and resumes within one attempt: every resume is an acquire of its own."""
    h.need("set_waiting", "resume")
    wid = h.create()
    tok = h.claim(wid)
    versions = [h.item(wid)["lease_version"]]
    kind = next(iter(h.spec.waiting_statuses))
    for i in range(3):
        h.do("set_waiting", work_id=wid, token=tok, kind=kind, ref=f"ref-{i}")
        tok = h.do("resume", work_id=wid, owner=f"worker-{i}").value["lease_token"]
        versions.append(h.raw("get", work_id=wid).value["lease_version"])
    check(all(b > a for a, b in zip(versions, versions[1:], strict=False)), "lease.version.monotonic", f"lease versions {versions}", h)


@case("lease.version.monotonic", "many-acquires")
def _monotonic_many(h: Harness) -> None:
    """No bound on lease_version: past any small counter width (a byte) it still grows."""
    h.need("requeue")
    wid = h.create()
    last = h.item(wid)["lease_version"]
    # plain calls (the model would compare the whole growing trail after each one); the item is
    # not used through the model afterwards
    for i in range(300):
        now = h.now()
        got = h.raw("claim", owner=f"w-{i % 3}", work_id=wid, now=now).value
        check(isinstance(got, dict) and got.get("lease_version", -1) > last, "lease.version.monotonic",
              f"acquire {i + 1}: lease_version {got.get('lease_version') if isinstance(got, dict) else got!r} after {last}", h)
        last = got["lease_version"]
        h.raw("close_out", work_id=wid, token=got["lease_token"], status="done", now=now)
        h.raw("requeue", work_id=wid, now=now)
