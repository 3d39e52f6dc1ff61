"""Lanes and wakeups clauses (spec/contract/clauses/{lanes,wakeups}.yaml) against the reference directly."""

from __future__ import annotations

from pathlib import Path

import pytest
from ledgercheck.reference.ledger import Ledger
from ledgercheck.transport.protocol import LedgerError

T0 = 1000.0
SK, LANE = "s-1", "main"


def stale(fn, **kw) -> None:  # noqa: ANN001
    with pytest.raises(LedgerError) as info:
        fn(**kw)
    assert info.value.code == "stale_lease"


def handout(out: dict | None) -> dict | None:
    """A hand-out without its lease (token, expires_at, attempt), for comparing the rest."""
    return None if out is None else {k: v for k, v in out.items() if k not in ("token", "expires_at", "attempt")}


def lapse(led: Ledger) -> float:
    return led.spec.lease_default.ttl + led.spec.lease_default.grace


# ---------------------------------------------------------------------- lanes
def test_lanes_exclusive(ledger: Ledger) -> None:
    a = ledger.lane_acquire(session_key=SK, lane=LANE, owner="A", now=T0)
    assert a is not None and a["version"] == 1 and a["expires_at"] == T0 + ledger.spec.lease_default.ttl
    assert ledger.lane_acquire(session_key=SK, lane=LANE, owner="B", now=T0 + lapse(ledger)) is None  # the lapse instant: live
    assert ledger.lane_acquire(session_key=SK, lane=LANE, owner="A", now=T0 + 1) is None
    assert ledger.lane_acquire(session_key=SK, lane="other", owner="B", now=T0) is not None


def test_lanes_takeover(ledger: Ledger) -> None:
    a = ledger.lane_acquire(session_key=SK, lane=LANE, owner="A", now=T0)
    b = ledger.lane_acquire(session_key=SK, lane=LANE, owner="B", now=T0 + lapse(ledger) + 0.001)
    assert a is not None and b is not None and b["version"] == 2 and b["token"] != a["token"] and b["owner"] == "B"
    ledger.lane_release(session_key=SK, lane=LANE, token=b["token"], now=T0 + 100)
    c = ledger.lane_acquire(session_key=SK, lane=LANE, owner="C", now=T0 + 100)
    assert c is not None and c["version"] == 3


def test_lanes_renew(ledger: Ledger) -> None:
    a = ledger.lane_acquire(session_key=SK, lane=LANE, owner="A", now=T0)
    assert a is not None
    r = ledger.lane_renew(session_key=SK, lane=LANE, token=a["token"], now=T0 + 40)
    assert r == {**a, "expires_at": T0 + 40 + ledger.spec.lease_default.ttl}
    assert ledger.lane_acquire(session_key=SK, lane=LANE, owner="B", now=T0 + lapse(ledger) + 1) is None


def test_lanes_fencing(ledger: Ledger) -> None:
    ledger.lane_push(session_key=SK, lane=LANE, task_id="t1", now=T0)
    a = ledger.lane_acquire(session_key=SK, lane=LANE, owner="A", now=T0)
    assert a is not None
    late = T0 + lapse(ledger) + 1
    # the lapsed holder is refused even before anyone took the lane over (the reference's choice)
    stale(ledger.lane_next, session_key=SK, lane=LANE, token=a["token"], now=late)
    b = ledger.lane_acquire(session_key=SK, lane=LANE, owner="B", now=late)
    assert b is not None
    for tok in (a["token"], "forged"):
        stale(ledger.lane_renew, session_key=SK, lane=LANE, token=tok, now=late)
        stale(ledger.lane_next, session_key=SK, lane=LANE, token=tok, now=late)
        stale(ledger.lane_done, session_key=SK, lane=LANE, token=tok, task_id="t1", now=late)
        stale(ledger.lane_release, session_key=SK, lane=LANE, token=tok, now=late)
    assert ledger.lane_tasks(session_key=SK, lane=LANE) == [{"task_id": "t1", "body": None, "state": "queued"}]


def test_lanes_queue_durable(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "l.db")
    a = led.lane_acquire(session_key=SK, lane=LANE, owner="A", now=T0)
    assert a is not None
    for t in ("t1", "t2"):
        assert led.lane_push(session_key=SK, lane=LANE, task_id=t, body={"t": t}, now=T0) == {"queued": True}
    assert led.lane_next(session_key=SK, lane=LANE, token=a["token"], now=T0)["task_id"] == "t1"
    led.close()
    led = Ledger(tmp_path / "l.db")  # a restart keeps the queue and what was handed out
    assert [(t["task_id"], t["state"]) for t in led.lane_tasks(session_key=SK, lane=LANE)] == [("t1", "handed"), ("t2", "queued")]
    b = led.lane_acquire(session_key=SK, lane=LANE, owner="B", now=T0 + lapse(led) + 1)
    assert b is not None
    assert led.lane_next(session_key=SK, lane=LANE, token=b["token"], now=T0 + 80) == {"task_id": "t1", "body": {"t": "t1"}, "state": "handed"}
    led.lane_done(session_key=SK, lane=LANE, token=b["token"], task_id="t1", now=T0 + 80)
    assert [t["task_id"] for t in led.lane_tasks(session_key=SK, lane=LANE)] == ["t2"]
    led.close()


def test_lanes_queue_order(ledger: Ledger) -> None:
    for t in ("t1", "t2", "t3"):
        ledger.lane_push(session_key=SK, lane=LANE, task_id=t, now=T0)
    a = ledger.lane_acquire(session_key=SK, lane=LANE, owner="A", now=T0)
    assert a is not None
    assert ledger.lane_next(session_key=SK, lane=LANE, token=a["token"], now=T0)["task_id"] == "t1"
    assert ledger.lane_next(session_key=SK, lane=LANE, token=a["token"], now=T0)["task_id"] == "t2"
    ledger.lane_release(session_key=SK, lane=LANE, token=a["token"], now=T0)
    b = ledger.lane_acquire(session_key=SK, lane=LANE, owner="B", now=T0)
    assert b is not None
    got = [ledger.lane_next(session_key=SK, lane=LANE, token=b["token"], now=T0) for _ in range(4)]
    assert [g and g["task_id"] for g in got] == ["t1", "t2", "t3", None]


def test_lanes_push_idempotent(ledger: Ledger) -> None:
    assert ledger.lane_push(session_key=SK, lane=LANE, task_id="t1", now=T0) == {"queued": True}
    assert ledger.lane_push(session_key=SK, lane=LANE, task_id="t1", now=T0) == {"queued": False}
    assert len(ledger.lane_tasks(session_key=SK, lane=LANE)) == 1


# ---------------------------------------------------------------------- wakeups
def test_wakeups_wake(ledger: Ledger) -> None:
    for kind in ledger.spec.wakeup_kinds:
        rid = f"run-{kind}"
        assert ledger.wake_suspend(run_id=rid, now=T0)["state"] == "suspended"
        assert ledger.wake_take(worker="w", now=T0) is None
        assert ledger.wake_fire(run_id=rid, kind=kind, now=T0) == {"run_id": rid, "state": "pending", "cycle": 0,
                                                                   "wakeups": [kind], "timer_at": None}
        assert handout(ledger.wake_take(worker="w", now=T0)) == {"run_id": rid, "worker": "w", "cycle": 1, "woken_by": [kind]}
    with pytest.raises(LedgerError) as info:
        ledger.wake_fire(run_id="run-x", kind="telepathy", now=T0)
    assert info.value.code == "invalid_argument"


def test_wakeups_coalesce(ledger: Ledger) -> None:
    ledger.wake_suspend(run_id="r", now=T0)
    for kind in ("message", "timer", "message", "signal"):
        ledger.wake_fire(run_id="r", kind=kind, now=T0)
    out = ledger.wake_take(worker="w1", now=T0)
    assert out is not None and out["cycle"] == 1 and sorted(out["woken_by"]) == ["message", "message", "signal", "timer"]
    assert ledger.wake_take(worker="w2", now=T0) is None


def test_wakeups_timer(ledger: Ledger) -> None:
    ledger.wake_suspend(run_id="r", timer_at=T0 + 60, now=T0)
    assert ledger.wake_take(worker="w", now=T0 + 59.999) is None
    assert handout(ledger.wake_take(worker="w", now=T0 + 60)) == {"run_id": "r", "worker": "w", "cycle": 1, "woken_by": ["timer"]}
    assert ledger.wake_get(run_id="r")["timer_at"] is None


def test_wakeups_kept(ledger: Ledger) -> None:
    ledger.wake_suspend(run_id="r", now=T0)
    ledger.wake_fire(run_id="r", kind="message", now=T0)
    held = ledger.wake_take(worker="w", now=T0)
    assert ledger.wake_fire(run_id="r", kind="child_done", now=T0)["state"] == "running"
    assert ledger.wake_suspend(run_id="r", token=held["token"], now=T0)["state"] == "pending"
    assert handout(ledger.wake_take(worker="w", now=T0)) == {"run_id": "r", "worker": "w", "cycle": 2, "woken_by": ["child_done"]}


def held_run(ledger: Ledger, *kinds: str) -> dict:
    ledger.wake_suspend(run_id="r", now=T0)
    for kind in kinds or ("message",):
        ledger.wake_fire(run_id="r", kind=kind, now=T0)
    out = ledger.wake_take(worker="A", now=T0)
    assert out is not None
    return out


def test_wakeups_lease(ledger: Ledger) -> None:
    ttl = ledger.spec.lease_default.ttl
    out = held_run(ledger)
    assert out["expires_at"] == T0 + ttl and out["attempt"] == 1 and out["token"]
    renewed = ledger.wake_renew(run_id="r", token=out["token"], now=T0 + ttl)
    assert renewed == {**out, "expires_at": T0 + 2 * ttl}
    assert ledger.wake_take(worker="B", now=T0 + lapse(ledger) + 1) is None  # renewed: still live
    assert ledger.wake_suspend(run_id="r", token=out["token"], now=T0 + ttl + 1)["state"] == "suspended"


def test_wakeups_fencing(ledger: Ledger) -> None:
    out = held_run(ledger)
    stale(ledger.wake_suspend, run_id="r", now=T0)
    stale(ledger.wake_suspend, run_id="r", token="made-up", now=T0)
    stale(ledger.wake_renew, run_id="r", token="made-up", now=T0)
    again = ledger.wake_take(worker="B", now=T0 + lapse(ledger) + 1)
    assert again is not None and again["token"] != out["token"]
    stale(ledger.wake_suspend, run_id="r", token=out["token"], now=T0 + lapse(ledger) + 1)
    stale(ledger.wake_renew, run_id="r", token=out["token"], now=T0 + lapse(ledger) + 1)
    assert ledger.wake_get(run_id="r")["state"] == "running"
    assert ledger.wake_suspend(run_id="r", token=again["token"], now=T0 + lapse(ledger) + 2)["state"] == "suspended"


def test_wakeups_redeliver(ledger: Ledger) -> None:
    out = held_run(ledger, "message", "signal")
    assert ledger.wake_take(worker="B", now=T0 + lapse(ledger)) is None  # the lapse instant: live
    again = ledger.wake_take(worker="B", now=T0 + lapse(ledger) + 0.001)
    assert again is not None and (again["run_id"], again["cycle"], again["attempt"], again["worker"]) == ("r", 1, 2, "B")
    assert again["token"] != out["token"] and again["expires_at"] == T0 + lapse(ledger) + 0.001 + ledger.spec.lease_default.ttl
    assert ledger.wake_take(worker="C", now=T0 + lapse(ledger) + 1) is None


def test_wakeups_redeliver_kept(ledger: Ledger) -> None:
    held_run(ledger, "message", "signal")
    ledger.wake_fire(run_id="r", kind="child_done", now=T0 + 1)
    again = ledger.wake_take(worker="B", now=T0 + lapse(ledger) + 1)
    assert again is not None and again["woken_by"] == ["message", "signal", "child_done"]
