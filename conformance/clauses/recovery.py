"""Clause tests of the recovery profile (scanner decisions; crash windows come from chaos).

``recovery.no_loss``, ``recovery.effects_allowed`` and ``recovery.fencing_after_takeover`` can
only be judged by killing real processes: the plugin runs the chaos exploration, one test per
crash point, and every crash window counts for the clauses it checked (``judge: chaos`` in the
contract, read through ``rules.chaos_clauses``).
"""

from __future__ import annotations

from collections.abc import Iterable

from ledgercheck.spec import Spec, rules
from ledgercheck.transport.clock import QUANTUM

from ..harness import Harness, NotApplicable
from . import CaseFn, case, cases, check


def _stale_with(h: Harness, journal: str, cls: str | None) -> str:
    """A running item whose journal shows ``journal`` (none/pending/completed), then lapsed."""
    wid = h.create()
    tok = h.claim(wid)
    if journal in ("pending", "completed"):
        r = h.do("effect_begin", work_id=wid, step_id="s1", tool="tool.x", input={"n": 1}, step_class=cls, token=tok).value["receipt"]
        if journal == "completed":
            h.do("effect_record", key=r["key"], input_hash=r["input_hash"], result={"done": True}, token=tok)
    h.advance_to(h.lapse_time(wid))
    return wid


def _expected(h: Harness, wid: str, journal: list[tuple[str, str]]) -> str:
    """The contract's decision for stale ``wid`` whose journal is ``journal`` (state, class),
    its attempts and its own retry policy counted."""
    return rules.recovery_decision(h.spec, h.item(wid), journal, h.model.policies.get(wid)).name


def _victim(h: Harness, wid: str) -> dict:
    out = h.do("recover")
    mine = [v for v in out.value if v["work_id"] == wid]
    check(len(mine) == 1, "recovery.scan", f"stale {wid} reported {len(mine)} times", h)
    return mine[0]


@cases("recovery.scan")
def _scan(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    def lapsed(h: Harness) -> None:
        _victim(h, _stale_with(h, "none", None))

    def live_untouched(h: Harness) -> None:
        wid = h.create()
        h.claim(wid)
        out = h.do("recover")
        check(all(v["work_id"] != wid for v in out.value), "recovery.scan", "live work was recovered", h)

    def at_lapse_instant(h: Harness) -> None:
        # lapsed means now > lease_expires_at + grace: at that very instant the lease is still
        # the holder's (it may renew), so the scan leaves it; one quantum later it is stale
        if h.wall:
            raise NotApplicable("needs an exact instant")
        wid = h.create()
        h.claim(wid)
        it = h.item(wid)
        h.advance_to(it["lease_expires_at"] + h.spec.lease_for(it["source_system"]).grace)
        out = h.do("recover")
        check(all(v["work_id"] != wid for v in out.value), "recovery.scan",
              "work was recovered at the instant its lease lapses (lapsed means strictly after expiry + grace)", h)
        h.advance(h.contract_seconds(QUANTUM))
        _victim(h, wid)

    def marked_by_monitor(h: Harness) -> None:
        wid = _stale_with(h, "none", None)
        h.do("expire")
        _victim(h, wid)

    def only_once(h: Harness) -> None:
        wid = _stale_with(h, "none", None)
        _victim(h, wid)
        again = h.do("recover").value
        check(all(v["work_id"] != wid for v in again), "recovery.scan", "recovered work was reported again", h)

    def holder_timeout(h: Harness) -> None:
        wid = h.create()
        tok = h.claim(wid)
        h.do("close_out", work_id=wid, token=tok, status="timeout", reason=h.spec.timeout_reasons["heartbeat"])
        h.advance(h.contract_seconds(3600.0))
        out = h.do("recover")
        check(all(v["work_id"] != wid for v in out.value), "recovery.scan",
              "a holder's own close-out as timeout was treated as a lapsed lease", h)

    def renewed(h: Harness) -> None:
        # a long run whose holder keeps renewing: its lease never lapses, however long ago the
        # run started (kept inside the execution budget, which the scan does not judge)
        h.need("renew")
        wid = h.create()
        tok = h.claim(wid)
        it = h.item(wid)
        lt = h.spec.lease_for(it["source_system"])
        start = it["started_at"]
        until = start + lt.ttl + lt.grace + lt.renew_interval
        budget = h.spec.phase_timeout("execution")
        if budget is not None and until >= start + budget:
            raise NotApplicable("the execution budget ends before a renewed lease could outlive ttl + grace")
        while h.now() < until:
            h.advance(lt.renew_interval)
            h.do("renew", work_id=wid, token=tok)
        out = h.do("recover")
        check(all(v["work_id"] != wid for v in out.value), "recovery.scan",
              f"work renewed all along ({h.now() - start:g}s since its claim, lease live) was recovered", h)

    yield "lapsed-lease", lapsed
    yield "renewed-lease-not-stale", renewed
    yield "holder-close-out-not-stale", holder_timeout
    yield "live-lease", live_untouched
    yield "at-lapse-instant", at_lapse_instant
    yield "after-monitor-timeout", marked_by_monitor
    yield "once", only_once


@cases("recovery.matrix")
def _matrix(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for cls in spec.step_classes:
        for journal in ("pending", "completed"):
            def fn(h: Harness, cls: str = cls, journal: str = journal) -> None:
                wid = _stale_with(h, journal, cls)
                v = _victim(h, wid)
                want = _expected(h, wid, [(journal, cls)])
                check(v["decision"] == want, "recovery.matrix", f"{cls} with a {journal} receipt: decision {v['decision']!r}, matrix says {want!r}", h)
            yield f"{cls}-{journal}", fn

    def empty(h: Harness) -> None:
        wid = _stale_with(h, "none", None)
        v = _victim(h, wid)
        want = _expected(h, wid, [])
        check(v["decision"] == want, "recovery.matrix", f"empty journal: decision {v['decision']!r}, the contract says {want!r}", h)
    yield "empty-journal", empty

    # a second crash: the first scan marked the receipt (unknown, needs_inspection); the item
    # ran again (requeued by the decision, or by an operator) and its lease lapsed again.  A
    # receipt still open in a marked state decides by its class and state, like a pending one.
    for cls in spec.step_classes:
        first = spec.receipt_decision("pending", cls)
        state = spec.decisions[first].get("receipt_state")
        if not state:
            continue

        def again(h: Harness, cls: str = cls, state: str = state) -> None:
            h.need("effect_list", "requeue")
            wid = _stale_with(h, "pending", cls)
            _victim(h, wid)
            if h.item(wid)["status"] not in {t.src for t in h.spec.edges_of("claim")}:
                h.do("requeue", work_id=wid, reason="operator reviewed")
            h.claim(wid)
            h.advance_to(h.lapse_time(wid))
            # the model has checked the journal the second scan will see
            journal = [(r["state"], r["step_class"]) for r in h.do("effect_list", work_id=wid).value]
            # the second run may have been the last attempt (recovery.attempts_exhausted)
            want = _expected(h, wid, journal)
            v = _victim(h, wid)
            check(v["decision"] == want, "recovery.matrix", f"{cls}: a second crash with the receipt left {state!r} by the "
                  f"first scan: decision {v['decision']!r}, the contract says {want!r}", h)
        yield f"{cls}-second-crash", again

    # a second crash after a resume: the completed receipts still mean resume (they are never
    # re-opened, whatever the attempt), and they stay completed
    for cls in spec.step_classes:
        def again_completed(h: Harness, cls: str = cls) -> None:
            h.need("effect_list")
            wid = _stale_with(h, "completed", cls)
            _victim(h, wid)
            if h.item(wid)["status"] not in {t.src for t in h.spec.edges_of("claim")}:
                h.do("requeue", work_id=wid, reason="operator reviewed")
            h.claim(wid)
            h.advance_to(h.lapse_time(wid))
            want = _expected(h, wid, [("completed", cls)])
            v = _victim(h, wid)
            check(v["decision"] == want, "recovery.matrix", f"{cls}: a second crash with the step completed: decision "
                  f"{v['decision']!r}, the contract says {want!r}", h)
            states = [r["state"] for r in h.do("effect_list", work_id=wid).value]
            check(states == ["completed"], "recovery.matrix", f"{cls}: after a second crash the completed receipt is {states}", h)
        yield f"{cls}-completed-second-crash", again_completed

    # several open receipts (steps run side by side): the decision of the highest rank wins,
    # whichever receipt was begun last
    by_rank = sorted({spec.receipt_decision("pending", c): c for c in spec.step_classes}.items(),
                     key=lambda dc: spec.decisions[dc[0]]["rank"])
    if len(by_rank) >= 2:
        lo, hi = by_rank[0][1], by_rank[-1][1]
        for name, order in (("highest-last", (lo, hi)), ("highest-first", (hi, lo))):
            def several(h: Harness, order: tuple[str, ...] = order) -> None:
                wid = h.create()
                tok = h.claim(wid)
                for n, cls in enumerate(order):
                    h.do("effect_begin", work_id=wid, step_id=f"s{n + 1}", tool="tool.x", input={"n": n}, step_class=cls,
                         token=tok)
                h.advance_to(h.lapse_time(wid))
                v = _victim(h, wid)
                want = _expected(h, wid, [("pending", c) for c in order])
                check(v["decision"] == want, "recovery.matrix", f"open receipts {', '.join(order)} (begun in that order): "
                      f"decision {v['decision']!r}, the highest rank gives {want!r}", h)
            yield f"several-open-{name}", several


def _quarantine_class(spec: Spec) -> str:
    for cls in spec.step_classes:
        if spec.receipt_decision("pending", cls) == "quarantine":
            return cls
    raise NotApplicable("no step class is quarantined by the matrix")


@case("recovery.quarantine.visible", "until-operator")
def _quarantine(h: Harness) -> None:
    wid = _stale_with(h, "pending", _quarantine_class(h.spec))
    _victim(h, wid)
    listed = [w["work_id"] for w in h.do("list", quarantined=True).value]
    check(wid in listed, "recovery.quarantine.visible", "quarantined work is not listed as quarantined", h)
    out = h.do("claim", owner="worker-2")
    check(out.value is None, "recovery.quarantine.visible", "quarantined work was picked up again", h)
    # "never picked up again by itself": however long it sits there (an hour, then past every
    # budget the contract knows: waits, retries, receipt retention), scans and the monitor
    # leave it quarantined, listed and unclaimable (on a wall clock, where days cannot pass, the hour)
    hour = h.contract_seconds(3600.0)
    horizon = max([hour, h.spec.retention, *h.spec.waiting_timeouts.values()]) + h.contract_seconds(1.0)
    for dt in (hour,) if h.wall else (hour, horizon):
        h.advance(dt)
        h.do("recover")
        h.do("expire")
        it = h.item(wid)
        listed = [w["work_id"] for w in h.do("list", quarantined=True).value]
        check(bool(it["quarantined"]) and wid in listed, "recovery.quarantine.visible",
              f"{dt:g}s later a scan or the monitor released quarantined work ({it['status']}, quarantined "
              f"{it['quarantined']})", h)
        out = h.do("claim", owner="worker-2")
        check(out.value is None, "recovery.quarantine.visible", f"quarantined work was picked up again {dt:g}s later", h)
    h.do("requeue", work_id=wid, reason="operator reviewed")
    check(not h.item(wid)["quarantined"], "recovery.quarantine.visible", "requeue did not release quarantine", h)


@cases("recovery.receipt_marking")
def _marking(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for cls in spec.step_classes:
        dec = spec.receipt_decision("pending", cls)
        state = spec.decisions[dec].get("receipt_state")
        if not state:
            continue
        def fn(h: Harness, cls: str = cls, state: str = state) -> None:
            wid = _stale_with(h, "pending", cls)
            _victim(h, wid)
            rec = h.do("effect_list", work_id=wid).value
            check(h.model.check_receipts(wid, rec) == [] and rec and rec[0]["state"] == state, "recovery.receipt_marking",
                  f"{cls}: receipt is {rec[0]['state'] if rec else None!r}, expected {state!r}", h)
        yield cls, fn


@case("recovery.waiting_untouched", "old-wait")
def _waiting(h: Harness) -> None:
    h.need("set_waiting")
    wid = h.create()
    tok = h.claim(wid)
    h.do("set_waiting", work_id=wid, token=tok, kind=next(iter(h.spec.waiting_statuses)), ref="approval", timeout=h.contract_seconds(86400.0))
    h.advance(h.contract_seconds(40000.0))
    snap, trail = h.raw("get", work_id=wid).value, h.trail_of(wid, "recovery.waiting_untouched")
    out = h.do("recover")
    check(all(v["work_id"] != wid for v in out.value), "recovery.waiting_untouched", "recovery took waiting work", h)
    # left alone means left alone: not resumed and parked again, no new deadline, no event
    after, trail2 = h.raw("get", work_id=wid).value, h.trail_of(wid, "recovery.waiting_untouched")
    changed = sorted(k for k in set(snap) | set(after) if snap.get(k) != after.get(k))
    new_events = len(trail2) - len(trail) if trail is not None and trail2 is not None else 0  # none read without the trail
    check(not changed and new_events == 0, "recovery.waiting_untouched",
          f"the scan changed old waiting work: fields {', '.join(changed) or 'none'}, {new_events} new event(s)", h)


@case("recovery.attempts_exhausted", "crash-loop")
def _exhausted(h: Harness) -> None:
    wid = h.create(retry_policy={"max_attempts": 2})
    for attempt in (1, 2):
        h.claim(wid)
        h.advance_to(h.lapse_time(wid))
        v = _victim(h, wid)
        if attempt < 2:
            check(v["decision"] != "quarantine", "recovery.attempts_exhausted", "quarantined with attempts left", h)
    check(v["decision"] == "quarantine" and h.item(wid)["quarantined"], "recovery.attempts_exhausted",
          f"a stale item at its last attempt got {v['decision']!r}", h)


@case("recovery.marker_kept", "bystander-untouched")
def _marker_bystander(h: Harness) -> None:
    """Recovery classifies the stale item's receipts only: a live holder's in-flight marker (and
    a waiting item's) stays pending through a scan that reconciles or quarantines another item."""
    cls = next((c for c in h.spec.step_classes if h.spec.receipt_decision("pending", c) in ("reconcile", "quarantine")), None)
    if cls is None:
        raise NotApplicable("no step class makes recovery mark a receipt")
    stale = _stale_with(h, "pending", cls)
    live = h.create()
    tok = h.claim(live)  # claimed at the stale item's lapse: its own lease is fresh
    mine = h.do("effect_begin", work_id=live, step_id="s1", tool="tool.x", input={"n": 2}, step_class=cls, token=tok).value["receipt"]
    _victim(h, stale)
    got = h.do("effect_lookup", key=mine["key"]).value
    check(got is not None and got["state"] == "pending", "recovery.marker_kept",
          f"recovering another item changed a live holder's pending receipt to {got and got['state']!r}", h)


@case("recovery.marker_kept", "pending-until-classified")
def _marker(h: Harness) -> None:
    wid = _stale_with(h, "pending", "non_idempotent_with_lookup")
    rec = h.do("effect_list", work_id=wid).value
    check(bool(rec) and rec[0]["state"] == "pending", "recovery.marker_kept", "the in-flight marker vanished before recovery", h)
    _victim(h, wid)
    rec = h.do("effect_list", work_id=wid).value
    check(bool(rec) and rec[0]["state"] != "completed", "recovery.marker_kept", "recovery marked an unknown effect completed", h)
