"""Lease clauses (spec/contract/clauses/lease.yaml)."""

from __future__ import annotations

from typing import Any

import pytest

T0 = 1000.0


def test_lease_acquire(kit: Any, spec: Any) -> None:
    w = kit.new(now=T0)
    c = kit.led.claim(owner="worker-7", now=T0 + 3)
    lt = spec.lease_for("manual")
    assert c["work_id"] == w["work_id"] and c["owner"] == "worker-7"
    assert isinstance(c["lease_token"], str) and len(c["lease_token"]) >= 16
    assert c["lease_version"] == w["lease_version"] + 1 and c["lease_expires_at"] == T0 + 3 + lt.ttl
    assert c["attempt"] == 1 and c["started_at"] == T0 + 3
    ev = kit.events(c)[-1]
    assert ev["type"] == "claimed" and ev["data"]["lease_token"] == c["lease_token"] and ev["data"]["lease_version"] == 1


def test_lease_version_monotonic(kit: Any, spec: Any) -> None:
    led = kit.led
    w = kit.running(now=T0)
    wid = w["work_id"]
    versions, tokens = [w["lease_version"]], {w["lease_token"]}
    w = led.set_waiting(work_id=wid, token=w["lease_token"], kind="external", ref="cb", now=T0 + 1)
    versions.append(w["lease_version"])
    w = led.resume(work_id=wid, owner="w2", now=T0 + 2)
    versions.append(w["lease_version"])
    tokens.add(w["lease_token"])
    led.expire(now=T0 + 3600 * 2)
    versions.append(led.get(work_id=wid)["lease_version"])
    led.requeue(work_id=wid, now=T0 + 7300)
    w = led.claim(owner="w3", work_id=wid, now=T0 + 7301)
    versions.append(w["lease_version"])
    tokens.add(w["lease_token"])
    assert versions == [1, 1, 2, 2, 3]
    assert len(tokens) == 3  # every acquire gives a fresh token
    trail = [e["data"]["lease_version"] for e in led.events(work_id=wid) if "lease_version" in e["data"]]
    assert trail == sorted(trail)


def test_lease_renew_extends(kit: Any, spec: Any) -> None:
    w = kit.running(now=T0)
    lt = spec.lease_for("manual")
    r = kit.led.renew(work_id=w["work_id"], token=w["lease_token"], now=T0 + 20)
    assert r["lease_expires_at"] == T0 + 20 + lt.ttl and r["status"] == "running" and r["lease_token"] == w["lease_token"]
    assert {k: v for k, v in r.items() if k != "lease_expires_at"} == {k: v for k, v in w.items() if k != "lease_expires_at"}
    ev = kit.events(w)[-1]
    assert (ev["type"], ev["from_status"], ev["to_status"], ev["data"]) == ("lease_renewed", None, None, {"lease_expires_at": T0 + 20 + lt.ttl})


def test_lease_renew_conditions(kit: Any) -> None:
    w = kit.running(now=T0)
    kit.refused("stale_lease", kit.led.renew, work_id=w["work_id"], token="forged", now=T0 + 1)
    waited = kit.led.set_waiting(work_id=w["work_id"], token=w["lease_token"], kind="user", ref="r", now=T0 + 2)
    assert waited["lease_token"] is None
    kit.refused("stale_lease", kit.led.renew, work_id=w["work_id"], token=w["lease_token"], now=T0 + 3)
    x = kit.running(now=T0)
    kit.led.close_out(work_id=x["work_id"], token=x["lease_token"], status="done", now=T0 + 1)
    kit.refused("stale_lease", kit.led.renew, work_id=x["work_id"], token=x["lease_token"], now=T0 + 2)


def test_lease_renew_grace(kit: Any, spec: Any) -> None:
    lt = spec.lease_for("manual")
    w = kit.running(now=T0)
    exp = w["lease_expires_at"]
    r = kit.led.renew(work_id=w["work_id"], token=w["lease_token"], now=exp + lt.grace / 2)  # expired, in grace
    assert r["lease_expires_at"] == exp + lt.grace / 2 + lt.ttl
    edge = kit.running(now=T0)
    kit.led.renew(work_id=edge["work_id"], token=edge["lease_token"], now=edge["lease_expires_at"] + lt.grace)  # the last instant
    late = kit.running(now=T0)
    kit.refused("stale_lease", kit.led.renew, work_id=late["work_id"], token=late["lease_token"], now=late["lease_expires_at"] + lt.grace + 0.001)


def test_lease_expiry_grace(kit: Any, spec: Any) -> None:
    lt = spec.lease_for("manual")
    w = kit.running(now=T0)
    limit = w["lease_expires_at"] + lt.grace
    for t in (w["lease_expires_at"], w["lease_expires_at"] + 1, limit):
        assert kit.led.expire(now=t) == []
        assert kit.led.recover(now=t) == []
    assert kit.led.get(work_id=w["work_id"])["status"] == "running"
    assert [m["work_id"] for m in kit.led.expire(now=limit + 0.001)] == [w["work_id"]]


def test_lease_expiry_release(kit: Any, spec: Any) -> None:
    w = kit.running(now=T0)
    moves = kit.led.expire(now=T0 + 3600)
    assert moves == [{"work_id": w["work_id"], "from_status": "running", "to_status": "timeout", "reason": spec.timeout_reasons["heartbeat"]}]
    t = kit.led.get(work_id=w["work_id"])
    assert (t["owner"], t["lease_token"], t["lease_expires_at"], t["finished_at"]) == (None, None, None, T0 + 3600)
    ev = kit.events(w)[-1]
    assert ev["type"] == "timeout_marked" and ev["data"]["lease_token"] is None and ev["data"]["owner"] is None


def test_lease_fencing(kit: Any) -> None:
    led = kit.led
    w = kit.running(now=T0)
    wid = w["work_id"]
    rec = led.effect_begin(work_id=wid, step_id="s", tool="t", input={"a": 1}, step_class="pure", token=w["lease_token"], now=T0)["receipt"]
    near = w["lease_token"][:-1] + ("1" if w["lease_token"][-1] == "0" else "0")  # one character off
    for forged in ("forged", near, ""):
        kit.refused("stale_lease", led.renew, work_id=wid, token=forged, now=T0 + 1)
        kit.refused("stale_lease", led.close_out, work_id=wid, token=forged, status="done", now=T0 + 1)
        kit.refused("stale_lease", led.set_waiting, work_id=wid, token=forged, kind="user", ref="r", now=T0 + 1)
        kit.refused("stale_lease", led.fail, work_id=wid, token=forged, error_class="rate_limited", now=T0 + 1)
        kit.refused("stale_lease", led.effect_begin, work_id=wid, step_id="s2", tool="t", input=1, step_class="pure", token=forged, now=T0 + 1)
        kit.refused("stale_lease", led.effect_record, key=rec["key"], input_hash=rec["input_hash"], result=1, token=forged, now=T0 + 1)
    assert [r["step_id"] for r in led.effect_list(work_id=wid)] == ["s"] and led.effect_list(work_id=wid)[0]["state"] == "pending"


def test_lease_takeover(kit: Any) -> None:
    led = kit.led
    old = kit.running(now=T0)
    wid = old["work_id"]
    led.expire(now=T0 + 3600)
    led.requeue(work_id=wid, now=T0 + 3601)
    new = led.claim(owner="w2", now=T0 + 3602)
    assert new["work_id"] == wid and new["lease_version"] > old["lease_version"] and new["lease_token"] != old["lease_token"]
    kit.refused("stale_lease", led.renew, work_id=wid, token=old["lease_token"], now=T0 + 3603)
    kit.refused("stale_lease", led.close_out, work_id=wid, token=old["lease_token"], status="done", now=T0 + 3603)
    kit.refused("stale_lease", led.fail, work_id=wid, token=old["lease_token"], error_class="validation_error", now=T0 + 3603)
    assert led.get(work_id=wid)["owner"] == "w2"


def test_lease_single_holder(kit: Any) -> None:
    led = kit.led
    a = kit.running(now=T0)
    kit.refused("invalid_transition", led.claim, owner="w2", work_id=a["work_id"], now=T0 + 1)
    kit.new(now=T0)
    b = led.claim(owner="w2", now=T0 + 1)
    assert b["work_id"] != a["work_id"]
    assert led.claim(owner="w3", now=T0 + 2) is None
    holders = [w for w in led.list() if w["lease_token"] is not None]
    assert sorted(w["owner"] for w in holders) == ["w1", "w2"]
    # several claimers on one file (real processes) are covered in test_concurrency.py


def test_lease_per_source(kit: Any, spec: Any) -> None:
    control, manual = spec.lease_for("control"), spec.lease_for("manual")
    assert (control.ttl, control.grace) != (manual.ttl, manual.grace)
    c = kit.running(now=T0, source_system="control")
    m = kit.running(now=T0, source_system="manual")
    assert c["lease_expires_at"] == T0 + control.ttl and m["lease_expires_at"] == T0 + manual.ttl
    assert kit.led.renew(work_id=c["work_id"], token=c["lease_token"], now=T0 + 5)["lease_expires_at"] == T0 + 5 + control.ttl
    lapse = T0 + 5 + control.ttl + control.grace + 0.5
    assert lapse < T0 + manual.ttl + manual.grace
    assert [x["work_id"] for x in kit.led.expire(now=lapse)] == [c["work_id"]]
    assert kit.led.active(now=lapse) == [m["work_id"]]


@pytest.mark.parametrize("pointer", [False, True])
def test_lease_active_pointer(kit: Any, spec: Any, pointer: bool) -> None:
    led = kit.led
    lt = spec.lease_for("manual")
    a, b = kit.running(now=T0), kit.running(now=T0 + 30)
    kit.waiting(now=T0)
    kit.new(now=T0)
    kit.reach("done", now=T0)
    assert led.active(now=T0 + 1) == [a["work_id"], b["work_id"]]
    assert led.active(now=a["lease_expires_at"] + lt.grace) == [a["work_id"], b["work_id"]]
    assert led.active(now=a["lease_expires_at"] + lt.grace + 0.01) == [b["work_id"]]
    assert led.active(now=T0 + 10_000) == []
    if pointer:  # the derived view carries the same leases (tests/reference/test_pointer.py covers the file)
        assert [x["work_id"] for x in led.active_leases()] == [a["work_id"], b["work_id"]]
