"""Recovery clauses the reference can show in one process (spec/contract/clauses/recovery.yaml).

The scanner's decision is checked for every step class at every crash point of the contract, by
leaving the effect journal exactly as the crash point describes.  The clauses that need a real
worker kill (no_loss, effects_allowed, fencing_after_takeover, marker_kept) belong to the chaos
campaigns; the ledger's own survival of SIGKILL is tested in test_sigkill.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from ledgercheck.spec import default_spec

T0 = 1000.0
LAPSE = T0 + 3600.0  # far past ttl + grace
SPEC = default_spec()
CELLS = [(cls, point) for cls in SPEC.step_classes for point in SPEC.crash_points]


def crashed_at(kit: Any, step_class: str, point: str, now: float = T0, **kw: Any) -> dict[str, Any]:
    """A record whose worker died at ``point`` of a step of ``step_class`` (the journal as the point says)."""
    cp = kit.led.spec.crash_points[point]
    w = kit.running(now=now, **kw)
    if cp.waiting:
        return kit.led.set_waiting(work_id=w["work_id"], token=w["lease_token"], kind="external", ref="cb", now=now)
    if cp.journal in ("pending", "completed"):
        r = kit.led.effect_begin(work_id=w["work_id"], step_id="step-1", tool="tool", input={"q": 1}, step_class=step_class,
                                 token=w["lease_token"], now=now)["receipt"]
        if cp.journal == "completed":
            kit.led.effect_record(key=r["key"], input_hash=r["input_hash"], result={"ok": True}, token=w["lease_token"], now=now)
    return w


@pytest.mark.parametrize(("step_class", "point"), CELLS, ids=[f"{c}@{p}" for c, p in CELLS])
def test_recovery_matrix(kit: Any, spec: Any, step_class: str, point: str) -> None:
    w = crashed_at(kit, step_class, point)
    want = spec.matrix[step_class][point].decision
    victims = {v["work_id"]: v for v in kit.led.recover(now=LAPSE)}
    if want == "none":
        assert w["work_id"] not in victims
        return
    assert victims[w["work_id"]]["decision"] == want
    after = kit.led.get(work_id=w["work_id"])
    if spec.decisions[want].get("requeue"):
        assert after["status"] == spec.initial_status and after["status_reason"] == f"recovered: {want}"
        types = [e["type"] for e in kit.events(w)][-2:]
        assert types == ["timeout_marked", "requeued"]
    else:
        assert after["status"] == "timeout" and after["quarantined"] is True


def test_recovery_matrix_highest_rank_wins(kit: Any, spec: Any) -> None:
    w = kit.running(now=T0)
    tok = w["lease_token"]
    for step, cls in [("a", "idempotent_with_key"), ("b", "non_idempotent_with_lookup"), ("c", "pure")]:
        kit.led.effect_begin(work_id=w["work_id"], step_id=step, tool="t", input=step, step_class=cls, token=tok, now=T0)
    [v] = kit.led.recover(now=LAPSE)
    assert v["decision"] == "reconcile" == spec.scanner_decision(
        [("pending", "idempotent_with_key"), ("pending", "non_idempotent_with_lookup"), ("pending", "pure")], False)
    # a receipt left in a decision's state by an earlier scan decides that decision again
    x = crashed_at(kit, "pure", "after_record_before_close_out")
    r = kit.led.effect_begin(work_id=x["work_id"], step_id="z", tool="t", input=0, step_class="pure", now=T0)["receipt"]
    kit.led.effect_mark(key=r["key"], state="needs_inspection", now=T0)
    assert {v["work_id"]: v["decision"] for v in kit.led.recover(now=LAPSE)}[x["work_id"]] == "quarantine"


def test_recovery_scan(kit: Any, spec: Any) -> None:
    lt = spec.lease_for("manual")
    stale = kit.running(now=T0)
    fresh = kit.running(now=LAPSE - 5)
    marked = kit.running(now=T0)  # the monitor already timed it out for its lease; the scan still classifies it
    kit.led.expire(now=T0 + lt.ttl + lt.grace + 1)
    assert kit.led.get(work_id=marked["work_id"])["status"] == "timeout"
    done = kit.reach("done", now=T0)
    got = {v["work_id"]: v for v in kit.led.recover(now=LAPSE)}
    assert set(got) == {stale["work_id"], marked["work_id"]}
    assert all(v["decision"] == "retry" and v["reason"] for v in got.values())
    for wid in (stale["work_id"], marked["work_id"]):
        assert kit.led.get(work_id=wid)["status"] == "queued"
    assert kit.led.get(work_id=fresh["work_id"])["status"] == "running"
    assert kit.led.get(work_id=done["work_id"])["status"] == "done"
    assert kit.led.recover(now=LAPSE) == []  # classified once


def test_recovery_quarantine_visible(kit: Any) -> None:
    w = crashed_at(kit, "non_idempotent_without_lookup", "after_submit_before_record")
    [v] = kit.led.recover(now=LAPSE)
    assert v["decision"] == "quarantine"
    q = kit.led.get(work_id=w["work_id"])
    assert q["quarantined"] is True and q["status"] == "timeout"
    assert [x["work_id"] for x in kit.led.list(quarantined=True)] == [w["work_id"]]
    for t in (LAPSE + 1, LAPSE + 86400 * 30):  # never picked up again by itself
        assert kit.led.recover(now=t) == [] and kit.led.expire(now=t) == [] and kit.led.promote_due(now=t) == []
        assert kit.led.claim(owner="w", now=t) is None
    kit.refused("invalid_transition", kit.led.claim, owner="w", work_id=w["work_id"], now=LAPSE + 2)
    r = kit.led.requeue(work_id=w["work_id"], reason="operator checked the provider", now=LAPSE + 3)
    assert r["quarantined"] is False and r["status"] == "queued"
    assert kit.led.claim(owner="w", now=LAPSE + 4)["work_id"] == w["work_id"]


@pytest.mark.parametrize(("step_class", "state"), [("non_idempotent_with_lookup", "unknown"),
                                                   ("non_idempotent_without_lookup", "needs_inspection")])
def test_recovery_receipt_marking(kit: Any, step_class: str, state: str) -> None:
    w = crashed_at(kit, step_class, "after_intent_before_submit")
    done = kit.led.effect_begin(work_id=w["work_id"], step_id="earlier", tool="t", input=0, step_class=step_class, now=T0)["receipt"]
    kit.led.effect_record(key=done["key"], input_hash=done["input_hash"], result=1, now=T0)
    kit.led.recover(now=LAPSE)
    states = {r["step_id"]: r["state"] for r in kit.led.effect_list(work_id=w["work_id"])}
    assert states == {"step-1": state, "earlier": "completed"}


def test_recovery_waiting_untouched(kit: Any, spec: Any) -> None:
    user = kit.waiting(now=T0, kind="user")
    ext = crashed_at(kit, "non_idempotent_without_lookup", "after_waiting_set")
    for t in (LAPSE, T0 + 86400 * 365):
        assert kit.led.recover(now=t) == []
    for w in (user, ext):
        assert kit.led.get(work_id=w["work_id"])["status"] in spec.waiting_statuses.values()


def test_recovery_attempts_exhausted(kit: Any, spec: Any) -> None:
    w = crashed_at(kit, "pure", "after_claim", retry_policy={"max_attempts": 2})
    [v] = kit.led.recover(now=LAPSE)
    assert v["decision"] == "retry"  # attempt 1 of 2
    c = kit.led.claim(owner="w2", work_id=w["work_id"], now=LAPSE + 1)
    assert c["attempt"] == 2
    [v] = kit.led.recover(now=LAPSE + 7200)
    assert v["decision"] == "quarantine" and v["reason"].startswith("attempts exhausted")
    q = kit.led.get(work_id=w["work_id"])
    assert q["quarantined"] and q["status"] == "timeout"
    assert kit.led.recover(now=LAPSE + 9000) == []  # the crash loop ended
