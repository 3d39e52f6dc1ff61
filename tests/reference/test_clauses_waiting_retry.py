"""Waiting and retry clauses (spec/contract/clauses/waiting.yaml, retry.yaml)."""

from __future__ import annotations

from typing import Any

import pytest

T0 = 1000.0


# ---------------------------------------------------------------------- waiting
def test_waiting_requires_ref(kit: Any) -> None:
    w = kit.running(now=T0)
    for kind, ref in [("user", ""), ("user", "   "), ("user", None), ("phone", "r"), (None, "r")]:
        kit.refused("invalid_argument", kit.led.set_waiting, work_id=w["work_id"], token=w["lease_token"], kind=kind, ref=ref, now=T0)
    ok = kit.led.set_waiting(work_id=w["work_id"], token=w["lease_token"], kind="user", ref="approval-17", now=T0)
    assert (ok["waiting_kind"], ok["waiting_ref"]) == ("user", "approval-17")


def test_waiting_deadline(kit: Any, spec: Any, overlay: Any) -> None:
    for kind, status in spec.waiting_statuses.items():
        w = kit.running(now=T0)
        d = kit.led.set_waiting(work_id=w["work_id"], token=w["lease_token"], kind=kind, ref="r", now=T0)
        assert d["status"] == status and d["waiting_deadline"] == T0 + spec.waiting_timeout(kind, "manual")
        x = kit.running(now=T0)
        e = kit.led.set_waiting(work_id=x["work_id"], token=x["lease_token"], kind=kind, ref="r", timeout=90, now=T0)
        assert e["waiting_deadline"] == T0 + 90
    # a per-source budget from the contract is used when no timeout is given
    from ledgercheck.reference.ledger import Ledger

    s2 = overlay("waiting:\n  by_source:\n    control: {timeouts: {user: 10m}}\n")
    with Ledger(kit.led.path.with_name("per-source.db"), s2) as led:
        w = led.create(source_system="control", source_id="c", now=T0)["work"]
        w = led.claim(owner="o", work_id=w["work_id"], now=T0)
        assert led.set_waiting(work_id=w["work_id"], token=w["lease_token"], kind="user", ref="r", now=T0)["waiting_deadline"] == T0 + 600


def test_waiting_releases_lease(kit: Any) -> None:
    w = kit.running(now=T0)
    d = kit.led.set_waiting(work_id=w["work_id"], token=w["lease_token"], kind="external", ref="cb", now=T0 + 1)
    assert (d["owner"], d["lease_token"], d["lease_expires_at"]) == (None, None, None)
    assert kit.led.active(now=T0 + 1) == []
    kit.refused("stale_lease", kit.led.renew, work_id=w["work_id"], token=w["lease_token"], now=T0 + 2)
    kit.refused("invalid_transition", kit.led.close_out, work_id=w["work_id"], token=w["lease_token"], status="done", now=T0 + 2)
    kit.refused("stale_lease", kit.led.effect_begin, work_id=w["work_id"], step_id="s", tool="t", input=1, step_class="pure",
                token=w["lease_token"], now=T0 + 2)


def test_waiting_resume(kit: Any, spec: Any) -> None:
    w = kit.waiting(now=T0, kind="user")
    r = kit.led.resume(work_id=w["work_id"], owner="w9", now=T0 + 50)
    lt = spec.lease_for("manual")
    assert (r["status"], r["owner"], r["lease_version"], r["lease_expires_at"]) == ("running", "w9", w["lease_version"] + 1, T0 + 50 + lt.ttl)
    assert r["waiting_ref"] is None and r["waiting_deadline"] is None and r["lease_token"] and r["started_at"] == T0 + 50
    assert r["attempt"] == w["attempt"]  # a resume continues the attempt
    ev = kit.events(w)[-1]
    assert (ev["type"], ev["from_status"], ev["to_status"]) == ("resumed", "waiting_user", "running")
    kit.refused("invalid_transition", kit.led.resume, work_id=w["work_id"], owner="w9", now=T0 + 51)


def test_waiting_timeout(kit: Any, spec: Any) -> None:
    w = kit.waiting(now=T0, kind="external")
    d = w["waiting_deadline"]
    assert kit.led.expire(now=d) == []
    moves = kit.led.expire(now=d + 0.001)
    assert [(m["work_id"], m["to_status"], m["reason"]) for m in moves] == [(w["work_id"], "timeout", spec.timeout_reasons["waiting"])]
    t = kit.led.get(work_id=w["work_id"])
    assert t["waiting_ref"] is None and t["waiting_deadline"] is None and t["finished_at"] == d + 0.001


def test_waiting_not_stale(kit: Any, spec: Any) -> None:
    w = kit.waiting(now=T0, kind="user")
    lt = spec.lease_for("manual")
    for t in (T0 + lt.ttl + lt.grace + 1, T0 + spec.phase_timeout("execution") + 1, w["waiting_deadline"]):
        assert kit.led.expire(now=t) == [] and kit.led.recover(now=t) == []
    assert kit.led.get(work_id=w["work_id"])["status"] == "waiting_user"


@pytest.mark.parametrize("kind", ["user", "external"])
def test_waiting_cancel(kit: Any, kind: str) -> None:
    w = kit.waiting(now=T0, kind=kind)
    c = kit.led.cancel(work_id=w["work_id"], now=T0 + 1)
    assert c["status"] == "cancelled" and (c["waiting_kind"], c["waiting_ref"], c["waiting_deadline"]) == (None, None, None)
    assert kit.events(w)[-1]["data"]["waiting_ref"] is None


# ---------------------------------------------------------------------- retry
def fail(kit: Any, w: dict[str, Any], cls: str = "transient_network", now: float = T0) -> dict[str, Any]:
    return kit.led.fail(work_id=w["work_id"], token=w["lease_token"], error_class=cls, now=now)


def test_retry_schedule(kit: Any) -> None:
    w = kit.running(now=T0)
    f = kit.led.fail(work_id=w["work_id"], token=w["lease_token"], error_class="service_unavailable", message="503", now=T0 + 1)
    assert f["status"] == "retry_scheduled" and f["error_class"] == "service_unavailable" and f["status_reason"] == "503"
    assert (f["owner"], f["lease_token"], f["lease_expires_at"]) == (None, None, None) and f["next_retry_at"] >= T0 + 1
    kit.refused("stale_lease", kit.led.renew, work_id=w["work_id"], token=w["lease_token"], now=T0 + 2)


def test_retry_bounds(kit: Any, spec: Any) -> None:
    policy = spec.retry_policy_for("manual")
    for attempt in range(1, policy.max_attempts):
        for _ in range(8):
            w = kit.new(now=T0)
            for _ in range(attempt):
                c = kit.led.claim(owner="w", work_id=w["work_id"], now=T0)
                f = fail(kit, c, now=T0)
                if f["status"] == "retry_scheduled" and c["attempt"] < attempt:
                    kit.led.promote_due(now=f["next_retry_at"])
            lo, hi = spec.backoff_range(policy, attempt)
            assert f["attempt"] == attempt and lo <= f["next_retry_at"] - T0 <= hi
    for jitter in ("none", "equal"):
        w = kit.running(now=T0, retry_policy={"jitter": jitter})
        f = fail(kit, w)
        lo, hi = spec.backoff_range(policy.merged({"jitter": jitter}), 1)
        assert lo <= f["next_retry_at"] - T0 <= hi and (jitter != "none" or f["next_retry_at"] - T0 == hi)


def test_retry_cap(kit: Any, spec: Any) -> None:
    rp = {"max_attempts": 30, "initial_backoff": 10, "multiplier": 10.0, "max_backoff": 60, "jitter": "none"}
    w = kit.new(now=T0, retry_policy=rp)
    delays = []
    for _ in range(8):
        c = kit.led.claim(owner="w", work_id=w["work_id"], now=T0)
        f = fail(kit, c)
        delays.append(f["next_retry_at"] - T0)
        kit.led.promote_due(now=f["next_retry_at"])
    assert max(delays) == 60 and delays[:2] == [10, 60] and all(d <= 60 for d in delays)


def test_retry_non_retryable(kit: Any, spec: Any) -> None:
    for cls, retryable in spec.error_classes.items():
        if retryable:
            continue
        w = kit.running(now=T0, retry_policy={"max_attempts": 10})
        f = fail(kit, w, cls)
        assert (f["status"], f["error_class"], f["next_retry_at"], f["finished_at"]) == ("failed", cls, None, T0)
        assert kit.events(w)[-1]["type"] == spec.operations["fail"].event_for("failed")


def test_retry_exhausted(kit: Any, spec: Any) -> None:
    w = kit.new(now=T0, retry_policy={"max_attempts": 2})
    c = kit.led.claim(owner="w", work_id=w["work_id"], now=T0)
    f = fail(kit, c)
    assert f["status"] == "retry_scheduled"
    kit.led.promote_due(now=f["next_retry_at"])
    c = kit.led.claim(owner="w", work_id=w["work_id"], now=T0 + 100)
    assert c["attempt"] == 2
    assert fail(kit, c, now=T0 + 101)["status"] == "failed"


def test_retry_promote(kit: Any) -> None:
    w = kit.running(now=T0, retry_policy={"jitter": "none"})
    f = fail(kit, w)
    due = f["next_retry_at"]
    assert kit.led.promote_due(now=due - 0.001) == []
    assert kit.led.get(work_id=w["work_id"])["status"] == "retry_scheduled"
    moves = kit.led.promote_due(now=due)
    assert moves == [{"work_id": w["work_id"], "from_status": "retry_scheduled", "to_status": "queued", "reason": None}]
    q = kit.led.get(work_id=w["work_id"])
    assert q["next_retry_at"] is None and kit.events(w)[-1]["type"] == "retry_promoted"
    assert kit.led.promote_due(now=due + 100) == []


def test_retry_unknown_class(kit: Any) -> None:
    w = kit.running(now=T0)
    for cls in ("disk_on_fire", "", None, 3):
        kit.refused("invalid_argument", kit.led.fail, work_id=w["work_id"], token=w["lease_token"], error_class=cls, now=T0)


def test_retry_policy_override(kit: Any, spec: Any) -> None:
    w = kit.running(now=T0, retry_policy={"max_attempts": 1})
    assert fail(kit, w)["status"] == "failed"  # the default (3) would retry
    x = kit.running(now=T0, retry_policy={"initial_backoff": 100, "jitter": "none"})
    assert fail(kit, x)["next_retry_at"] == T0 + 100
    assert spec.retry_policy_for("manual").initial_backoff != 100
    kit.refused("invalid_argument", kit.led.create, source_system="manual", source_id="bad", retry_policy={"jitter": "wild"}, now=T0)


def test_retry_execution_timeout(kit: Any, spec: Any) -> None:
    exec_t = spec.phase_timeout("execution")
    lt = spec.lease_for("manual")
    w = kit.running(now=T0)
    t = T0
    while t + lt.renew_interval <= T0 + exec_t:
        t += lt.renew_interval
        kit.led.renew(work_id=w["work_id"], token=w["lease_token"], now=t)
        assert kit.led.expire(now=t) == []
    assert kit.led.expire(now=T0 + exec_t) == []
    moves = kit.led.expire(now=T0 + exec_t + 0.001)
    assert [(m["work_id"], m["reason"]) for m in moves] == [(w["work_id"], spec.timeout_reasons["execution"])]
    # a resume starts a new stint: the budget counts from the resume
    x = kit.waiting(now=T0)
    r = kit.led.resume(work_id=x["work_id"], owner="w", now=T0 + exec_t)
    kit.led.renew(work_id=x["work_id"], token=r["lease_token"], now=T0 + exec_t + 10)
    assert kit.led.expire(now=T0 + exec_t + 20) == []
