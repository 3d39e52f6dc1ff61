"""Cases by construction: every fenced operation under every kind of holder and token.

A fenced operation is one that takes a lease token, read from the contract: the operations on an
item that take ``token`` with ``work_id`` (those that require the lease, and the journal writes
that may carry it), the lane operations that take a lane's token, the hand-out operations that
take a run's token.  Each is called with

* the same owner (the worker that held the first lease comes back and takes the work again,
  under the same name) or another owner holding the work now;
* the current token or the old one (of the lease that lapsed and was taken over);
* the current lease live or lapsed (one quantum past expires_at + grace) at the call;

and only the current token of a live lease may write: every other call is refused with
``stale_lease`` (the clause of the operation's fence).  A fence keyed on the owner's name, not on
the token, passes the old token of a worker that came back: these cases see it.  Param ids:
``fence:<operation>:<same|other>-owner:<current|old>-token:<live|lapsed>``.

(Where the contract leaves the current holder's own token open once its lease lapsed and nobody
took over, a lane's or a hand-out's ("may be refused too"), that call is left to the model.)
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import product
from typing import Any

from ledgercheck.conformance.clauses import CaseFn, cases, check
from ledgercheck.conformance.harness import Harness, NotApplicable
from ledgercheck.spec import Spec, rules
from ledgercheck.transport.clock import QUANTUM

from .instants import _plain, _virtual, claimed_status

OWNERS = ("same", "other")
TOKENS = ("current", "old")
LEASES = ("live", "lapsed")


def combos() -> Iterator[tuple[str, str, str]]:
    return product(OWNERS, TOKENS, LEASES)


def _pid(op: str, owner: str, token: str, lease: str) -> str:
    return f"fence:{op}:{owner}-owner:{token}-token:{lease}"


def item_fenced_ops(spec: Spec) -> tuple[str, ...]:
    """Operations on an item that take its lease token, in contract order."""
    return tuple(op for op, o in spec.operations.items() if "token" in o.args and "work_id" in o.args)


def item_fence_clause(spec: Spec, op: str, token: str, lease: str) -> str:
    """The clause a wrong answer of ``op`` breaks: a renewal's own (its grace window for the
    current token of a lapsed lease, its conditions otherwise); for an operation that takes the
    token optionally, the clause of its own profile that fences it (the one whose statement
    refuses a token that is not the live lease with stale_lease); the lease fence for the rest."""
    o = spec.operations[op]
    if o.lease == "renew":
        if token == "current" and lease == "lapsed":
            return "lease.renew.grace"
        return "lease.renew.extends" if (token, lease) == ("current", "live") else "lease.renew.conditions"
    if not o.requires_lease:
        own = next((c.id for c in spec.clauses if c.profile == o.profile and "stale_lease" in c.statement
                    and "token" in c.statement), None)
        if own is not None:
            return own
    return "lease.fencing"


def _item_case(op: str, owner: str, token: str, lease: str, clause: str) -> CaseFn:
    def fn(h: Harness) -> None:
        _virtual(h)
        h.need(op, "expire", "requeue")
        h.need_claim_by_id()
        wid = h.create()
        queued = h.item(wid)["status"]
        first = "worker-A"
        old = h.claim(wid, owner=first)
        h.advance_to(h.lapse_time(wid))
        h.do("expire")  # the lapsed lease is taken away, then the work is handed out again
        h.drive(wid, queued)
        current = h.claim(wid, owner=first if owner == "same" else "worker-B")
        check(current != old, clause, f"the second claim of {wid} handed out the first lease's token again", h)
        if lease == "lapsed":
            h.advance_to(h.lapse_time(wid))
        sent = current if token == "current" else old
        args = _plain(h, op)
        out = h.do(op, work_id=wid, token=sent, **args)
        what = f"{op} with the {token} token ({owner} owner, current lease {lease})"
        if (token, lease) == ("current", "live"):
            check(out.ok, clause, f"{what} was refused ({out.code}: {out.message})", h)
        else:
            check(not out.ok and out.code == "stale_lease", clause, f"{what} answered {out.code or 'ok'}, not stale_lease", h)
    return fn


def _item_cases(clause: str) -> Any:
    def gen(spec: Spec) -> Iterator[tuple[str, CaseFn]]:
        held = claimed_status(spec)
        for op in item_fenced_ops(spec):
            o = spec.operations[op]
            if o.statuses and held not in o.statuses:
                continue
            for owner, token, lease in combos():
                if not o.requires_lease and (token, lease) == ("current", "lapsed"):
                    continue  # an optional token's rule for a lapsed lease is the journal's, not a fence's
                if item_fence_clause(spec, op, token, lease) == clause:
                    yield _pid(op, owner, token, lease), _item_case(op, owner, token, lease, clause)
    return gen


def item_clauses(spec: Spec) -> set[str]:
    """Every clause an item-fence case of ``spec`` belongs to (tests hold ``ITEM_CLAUSES`` to it)."""
    return {item_fence_clause(spec, op, t, lease) for op in item_fenced_ops(spec) for _, t, lease in combos()}


ITEM_CLAUSES = ("lease.fencing", "lease.renew.conditions", "lease.renew.grace", "lease.renew.extends", "idem.fenced")
for _clause in ITEM_CLAUSES:
    cases(_clause)(_item_cases(_clause))


# ----------------------------------------------------------------------------- lanes
def lane_fenced_ops(spec: Spec) -> tuple[str, ...]:
    """The lane operations that take the lane's token and nothing beyond the lane's key."""
    acquire = spec.operations.get("lane_acquire")
    if acquire is None:
        return ()
    key = {n for n, a in acquire.args.items() if a.required and n not in ("owner", "now")}
    return tuple(op for op, o in spec.operations.items() if o.profile == acquire.profile and "token" in o.args
                 and {n for n, a in o.args.items() if a.required} <= key | {"token", "now"})


def _lane_case(op: str, owner: str, token: str, lease: str) -> CaseFn:
    def fn(h: Harness) -> None:
        _virtual(h)
        h.need("lane_acquire", op)
        key = {"session_key": "sk-fence", "lane": "main"}
        grace = h.spec.lease_default.grace
        first = h.do("lane_acquire", owner="owner-A", **key).value
        check(first is not None, "lanes.takeover", "a free lane was not handed out", h)
        h.advance_to(first["expires_at"] + grace + QUANTUM)
        again = h.do("lane_acquire", owner="owner-A" if owner == "same" else "owner-B", **key).value
        check(again is not None and again["token"] != first["token"], "lanes.takeover",
              f"the lapsed lane was handed over as {again!r:.120}", h)
        if lease == "lapsed":
            h.advance_to(again["expires_at"] + grace + QUANTUM)
        sent = (again if token == "current" else first)["token"]
        out = h.do(op, token=sent, **key)
        what = f"{op} with the {token} token ({owner} owner, current lease {lease})"
        if (token, lease) == ("current", "live"):
            check(out.ok, "lanes.fencing", f"{what} was refused ({out.code}: {out.message})", h)
        elif token == "old":
            check(not out.ok and out.code == "stale_lease", "lanes.fencing", f"{what} answered {out.code or 'ok'}, not stale_lease", h)
        # (the holder's own token once its lease lapsed, before anyone took the lane over: the
        # contract fences a token that is not the lane's current lease, and leaves this one open)
    return fn


@cases("lanes.fencing")
def _lanes(spec: Spec) -> Iterator[tuple[str, CaseFn]]:
    for op in lane_fenced_ops(spec):
        for owner, token, lease in combos():
            yield _pid(op, owner, token, lease), _lane_case(op, owner, token, lease)


# ----------------------------------------------------------------------------- hand-outs
def handout_fenced_ops(spec: Spec, profile: str) -> tuple[str, ...]:
    """The operations of a hand-out profile that take the run's token."""
    return tuple(op for op, o in spec.operations.items() if o.profile == profile and "token" in o.args)


def _handout_case(profile: str, op: str, owner: str, token: str, lease: str) -> CaseFn:
    def fn(h: Harness) -> None:
        _virtual(h)
        take = h.spec.handouts[profile].operation
        h.need("wake_suspend", "wake_fire", take, op)
        h.do("wake_suspend", run_id="run-1")
        h.do("wake_fire", run_id="run-1", kind=h.spec.wakeup_kinds[0])
        first = h.do(take, worker="worker-A").value
        if first is None:
            raise NotApplicable("a woken run was not handed out (wakeups.wake judges it)")
        h.advance_to(rules.handout_lapse(h.spec, profile, first["expires_at"]) + QUANTUM)
        again = h.do(take, worker="worker-A" if owner == "same" else "worker-B").value
        check(again is not None and again["token"] != first["token"], "wakeups.redeliver",
              f"the lapsed hand-out was handed out again as {again!r:.120}", h)
        if lease == "lapsed":
            h.advance_to(rules.handout_lapse(h.spec, profile, again["expires_at"]) + QUANTUM)
        sent = (again if token == "current" else first)["token"]
        out = h.do(op, run_id="run-1", token=sent)
        what = f"{op} with the {token} token ({owner} worker, current hand-out {lease})"
        if (token, lease) == ("current", "live"):
            check(out.ok, "wakeups.fencing", f"{what} was refused ({out.code}: {out.message})", h)
        elif token == "old":
            check(not out.ok and out.code == h.spec.handouts[profile].fence, "wakeups.fencing",
                  f"{what} answered {out.code or 'ok'}, not {h.spec.handouts[profile].fence}", h)
    return fn


@cases("wakeups.fencing")
def _handouts(spec: Spec) -> Iterator[tuple[str, CaseFn]]:
    for profile in spec.handouts:
        for op in handout_fenced_ops(spec, profile):
            for owner, token, lease in combos():
                yield _pid(op, owner, token, lease), _handout_case(profile, op, owner, token, lease)
