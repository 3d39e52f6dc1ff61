"""Clause tests of the cancel profile."""

from __future__ import annotations

from collections.abc import Iterable

from ledgercheck.spec import Spec

from ..harness import Harness
from . import CaseFn, case, cases, check


@cases("cancel.immediate")
def _cancel_now(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for t in spec.transitions:
        if "cancel" in t.ops and not spec.statuses[t.src].waiting_kind:
            def fn(h: Harness, src: str = t.src, dst: str = t.dst) -> None:
                wid = h.create()
                h.drive(wid, src)
                h.do("cancel", work_id=wid, reason="no longer needed")
                check(h.item(wid)["status"] == dst, "cancel.immediate", f"cancel left {src} work {h.item(wid)['status']}", h)
            yield t.src, fn


@case("cancel.intent_first", "running")
def _intent(h: Harness) -> None:
    wid = h.create()
    tok = h.claim(wid)
    out = h.do("close_out", work_id=wid, token=tok, status="cancelled")
    check(not out.ok, "cancel.intent_first", "close-out as cancelled without a cancel request was accepted", h)
    h.do("cancel", work_id=wid)
    got = h.raw("get", work_id=wid).value
    check(got["status"] == "running" and got["cancel_requested"] is True, "cancel.intent_first",
          f"cancelling running work gave {got['status']} cancel_requested={got['cancel_requested']}", h)
    h.do("cancel", work_id=wid)
    h.do("close_out", work_id=wid, token=tok, status="cancelled")


@case("cancel.intent_first", "after-requeue")
def _intent_after_requeue(h: Harness) -> None:
    """A cancel request belongs to one run of the work: requeue clears it (with the result, the
    error class and the times), so the next holder cannot close out as cancelled on the old
    request."""
    h.need("requeue")
    wid = h.create()
    tok = h.claim(wid)
    h.do("cancel", work_id=wid)
    h.do("close_out", work_id=wid, token=tok, status="cancelled")
    h.do("requeue", work_id=wid, reason="operator")
    got = h.raw("get", work_id=wid).value
    check(got.get("cancel_requested") is False, "cancel.intent_first",
          f"requeued work still carries cancel_requested={got.get('cancel_requested')!r}", h)
    tok = h.claim(wid)
    out = h.do("close_out", work_id=wid, token=tok, status="cancelled")
    check(not out.ok, "cancel.intent_first", "after a requeue, close-out as cancelled was accepted on the old run's request", h)
