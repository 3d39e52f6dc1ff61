"""Clause tests of the waiting profile (spec/contract/clauses/waiting.yaml)."""


from __future__ import annotations

from collections.abc import Iterable

from ledgercheck.spec import Spec
from ledgercheck.transport.clock import QUANTUM

from ..harness import Harness
from . import CaseFn, case, cases, check


def _running(h: Harness, src: str = "manual") -> tuple[str, str]:
    wid = h.create(src)
    return wid, h.claim(wid)


# ---------------------------------------------------------------- waiting
@cases("waiting.requires_ref")
def _requires(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    kind = next(iter(spec.waiting_statuses))
    bad = {"missing-ref": {"kind": kind}, "empty-ref": {"kind": kind, "ref": ""}, "blank-ref": {"kind": kind, "ref": "   "},
           "unknown-kind": {"kind": "coffee", "ref": "r1"}, "terminal-kind": {"kind": "done", "ref": "r1"}}
    for name, over in bad.items():
        def fn(h: Harness, over: dict = over) -> None:
            wid, tok = _running(h)
            out = h.do("set_waiting", work_id=wid, token=tok, **over)
            check(not out.ok and h.item(wid)["status"] == "running", "waiting.requires_ref", f"set_waiting with {over} was accepted", h)
        yield name, fn


@cases("waiting.deadline")
def _deadline(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for kind in spec.waiting_statuses:
        for src in spec.source_systems:
            def default(h: Harness, kind: str = kind, src: str = src) -> None:
                wid, tok = _running(h, src)
                t = h.now()
                out = h.do("set_waiting", work_id=wid, token=tok, kind=kind, ref=f"{kind}-ref")
                budget = h.spec.waiting_timeout(kind, src)
                if not h.wall:
                    check(out.value["waiting_deadline"] == t + budget, "waiting.deadline", f"deadline {out.value['waiting_deadline']} != now + {budget:g}", h)
            yield f"{kind}-{src}-default", default
        def explicit(h: Harness, kind: str = kind) -> None:
            wid, tok = _running(h)
            t = h.now()
            out = h.do("set_waiting", work_id=wid, token=tok, kind=kind, ref="r", timeout=h.contract_seconds(90.0))
            if not h.wall:
                check(out.value["waiting_deadline"] == t + 90.0, "waiting.deadline", "explicit timeout ignored", h)
        yield f"{kind}-explicit", explicit


@case("waiting.releases_lease", "token-dead")
def _releases(h: Harness) -> None:
    wid, tok = _running(h)
    out = h.do("set_waiting", work_id=wid, token=tok, kind=next(iter(h.spec.waiting_statuses)), ref="callback-9")
    check(out.value["owner"] is None and out.value["lease_token"] is None, "waiting.releases_lease", "waiting work still holds a lease", h)
    for op, args in (("renew", {"work_id": wid, "token": tok}),
                     ("close_out", {"work_id": wid, "token": tok, "status": "done"})):
        if h.claims(op):
            o = h.do(op, **args)
            check(not o.ok, "waiting.releases_lease", f"the released token could still {op}", h)


@cases("waiting.resume")
def _resume(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for kind in spec.waiting_statuses:
        def fn(h: Harness, kind: str = kind) -> None:
            wid, tok = _running(h)
            h.do("set_waiting", work_id=wid, token=tok, kind=kind, ref="reply-1")
            h.advance(h.contract_seconds(60.0))
            out = h.do("resume", work_id=wid, owner="worker-2")
            got = out.value
            check(got["status"] == "running" and got["lease_token"] not in (None, tok) and got["lease_version"] == 2,
                  "waiting.resume", f"resume gave {got['status']} token-changed={got['lease_token'] != tok} version {got['lease_version']}", h)
            h.do("renew", work_id=wid, token=got["lease_token"]) if h.claims("renew") else None
        yield kind, fn


@cases("waiting.timeout")
def _timeout(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for kind in spec.waiting_statuses:
        def fn(h: Harness, kind: str = kind) -> None:
            wid, tok = _running(h)
            h.do("set_waiting", work_id=wid, token=tok, kind=kind, ref="r", timeout=h.contract_seconds(600.0))
            dl = h.item(wid)["waiting_deadline"]
            h.advance_to(dl - 1.0)
            h.do("expire")
            if not h.wall:
                h.advance_to(dl)
                h.do("expire")
            check(h.item(wid)["status"] != "timeout", "waiting.timeout", "waiting work timed out at or before its deadline", h)
            h.advance_to(dl + QUANTUM)
            h.do("expire")
            check(h.item(wid)["status"] == "timeout", "waiting.timeout", "waiting work past its deadline was not timed out", h)
        yield kind, fn


@case("waiting.not_stale", "old-but-within-deadline")
def _not_stale(h: Harness) -> None:
    wid, tok = _running(h)
    lt = h.spec.lease_for("manual")
    step = (lt.ttl + lt.grace) * 3  # each step would lapse any lease three times over
    # a wait whose deadline lies beyond the four steps, however long the contract's leases are
    h.do("set_waiting", work_id=wid, token=tok, kind=next(iter(h.spec.waiting_statuses)), ref="approval", timeout=step * 5)
    for _ in range(4):
        h.advance(step)
        h.do("expire")
        if h.claims("recover"):
            h.do("recover")
        h.do("promote_due") if h.claims("promote_due") else None
    check(h.item(wid)["status"] in h.spec.waiting_statuses.values(), "waiting.not_stale", "old waiting work was treated as stale", h)


@cases("waiting.cancel")
def _cancel(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for kind, status in spec.waiting_statuses.items():
        def fn(h: Harness, kind: str = kind, status: str = status) -> None:
            wid, tok = _running(h)
            h.do("set_waiting", work_id=wid, token=tok, kind=kind, ref="r")
            out = h.do("cancel", work_id=wid)
            check(out.ok and out.value["status"] == "cancelled" and out.value["waiting_ref"] is None, "waiting.cancel",
                  f"cancel of {status} gave {out.value!r:.80}", h)
        yield kind, fn


# ---------------------------------------------------------------- round-3 hunt
@cases("waiting.deadline")
def _deadline_more(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for kind in spec.waiting_statuses:
        def longer(h: Harness, kind: str = kind) -> None:
            """An explicit timeout is taken as given, also when it is longer than the kind's default."""
            wid, tok = _running(h)
            t = h.now()
            budget = 2 * h.spec.waiting_timeout(kind, "manual")
            out = h.do("set_waiting", work_id=wid, token=tok, kind=kind, ref="r", timeout=budget)
            if not h.wall:
                check(out.value["waiting_deadline"] == t + budget, "waiting.deadline",
                      f"timeout {budget:g}: deadline {out.value['waiting_deadline']} != now + {budget:g}", h)

        def same_ref_again(h: Harness, kind: str = kind) -> None:
            """Each wait has its own deadline, counted from its own start, even under a reference used before."""
            h.need("resume")
            wid, tok = _running(h)
            ttl = h.spec.lease_for("manual").ttl
            for timeout in (h.contract_seconds(600.0), h.contract_seconds(600.0), None):
                t = h.now()
                out = h.do("set_waiting", work_id=wid, token=tok, kind=kind, ref="thread-1", timeout=timeout)
                budget = timeout if timeout is not None else h.spec.waiting_timeout(kind, "manual")
                if not h.wall:
                    check(out.value["waiting_deadline"] == t + budget, "waiting.deadline",
                          f"wait under a reused reference: deadline {out.value['waiting_deadline']} != now + {budget:g}", h)
                h.advance(min(h.contract_seconds(60.0), budget / 2))  # inside the wait
                tok = h.do("resume", work_id=wid, owner="worker-2").value["lease_token"]
                h.advance(min(h.contract_seconds(30.0), ttl / 2))  # inside the new lease

        yield f"{kind}-explicit-longer-than-default", longer
        yield f"{kind}-reference-reused", same_ref_again


