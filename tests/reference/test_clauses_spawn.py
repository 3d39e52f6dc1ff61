"""Spawn, ask and log-read clauses (spec/contract/clauses/{spawn,ask,logread}.yaml) against the reference directly."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.reference.ledger import Ledger

T0 = 1000.0


def spawn(kit: Any, parent: dict[str, Any], key: str, **kw: Any) -> dict[str, Any]:
    return kit.led.spawn(parent_id=parent["work_id"], key=key, now=T0, **kw)


def child_records(kit: Any, parent: dict[str, Any]) -> list[dict[str, Any]]:
    return [e["data"] for e in kit.events(parent) if e["type"] == "child_spawned"]


class _Crash(Exception):
    pass


def _crashing(db: Path, spec: Any, armed: dict[str, bool]) -> Ledger:
    """A ledger that stops inside its transaction (after the event row, before COMMIT) once armed."""
    def hook(point: str) -> None:
        if armed["on"] and point == "ledger.after_event_insert":
            raise _Crash(point)

    return Ledger(db, spec, crash_hook=hook)


# ---------------------------------------------------------------------- spawn
def test_spawn_logged_first(kit: Any) -> None:
    p = kit.running(now=T0)
    c = spawn(kit, p, "research")["work"]
    assert child_records(kit, p) == [{"child_id": c["work_id"], "spawn_key": "research"}]
    assert kit.events(c)[0]["type"] == "work_created" and kit.events(c)[0]["data"]["parent_id"] == p["work_id"]


def test_spawn_logged_first_crash_between_log_and_child(db: Path, spec: Any) -> None:
    """A crash inside the spawn's transaction (after the parent's record, before the commit)
    leaves neither; the replay after reopening makes exactly one child."""
    armed = {"on": False}
    led = _crashing(db, spec, armed)
    p = led.create(source_system="manual", source_id="p", now=T0)["work"]
    armed["on"] = True
    with pytest.raises(_Crash):
        led.spawn(parent_id=p["work_id"], key="k", now=T0)
    led.close()
    led = Ledger(db, spec)
    try:
        assert [w["work_id"] for w in led.list()] == [p["work_id"]]
        c = led.spawn(parent_id=p["work_id"], key="k", now=T0)
        again = led.spawn(parent_id=p["work_id"], key="k", now=T0 + 1)
        assert c["created"] and not again["created"] and again["work"]["work_id"] == c["work"]["work_id"]
        assert len(led.list()) == 2
    finally:
        led.close()


def test_spawn_wakes_parent(kit: Any) -> None:
    p = kit.running(now=T0)
    kit.led.wake_suspend(run_id=p["work_id"], now=T0)
    a, b = spawn(kit, p, "a")["work"], spawn(kit, p, "b")["work"]
    stranger = kit.led.create(source_system="manual", source_id="not-a-child", source_run_id=p["work_id"], now=T0)["work"]
    kit.led.cancel(work_id=stranger["work_id"], now=T0)  # names the parent, but its log does not record it
    assert kit.led.wake_get(run_id=p["work_id"])["state"] == "suspended"
    kit.led.cancel(work_id=a["work_id"], now=T0)
    assert kit.led.wake_get(run_id=p["work_id"])["wakeups"] == ["child_done"]
    got = kit.led.claim(owner="w", work_id=b["work_id"], now=T0)
    kit.led.close_out(work_id=b["work_id"], token=got["lease_token"], status="done", now=T0)
    assert kit.led.wake_get(run_id=p["work_id"]) == {"run_id": p["work_id"], "state": "pending", "cycle": 0,
                                                     "wakeups": ["child_done", "child_done"], "timer_at": None}


def test_spawn_wakes_parent_crash_inside_close_out(db: Path, spec: Any) -> None:
    """A crash inside the child's close-out (before its commit) leaves the child running and the
    parent's run asleep: neither half without the other."""
    armed = {"on": False}
    led = _crashing(db, spec, armed)
    p = led.create(source_system="manual", source_id="p", now=T0)["work"]
    led.wake_suspend(run_id=p["work_id"], now=T0)
    c = led.spawn(parent_id=p["work_id"], key="k", now=T0)["work"]
    tok = led.claim(owner="w", work_id=c["work_id"], now=T0)["lease_token"]
    armed["on"] = True
    with pytest.raises(_Crash):
        led.close_out(work_id=c["work_id"], token=tok, status="done", now=T0)
    led.close()
    led = Ledger(db, spec)
    try:
        assert led.get(work_id=c["work_id"])["status"] == "running"
        assert led.wake_get(run_id=p["work_id"])["state"] == "suspended"
    finally:
        led.close()


def test_spawn_replay(kit: Any) -> None:
    p, q = kit.running(now=T0), kit.running(now=T0)
    a = spawn(kit, p, "step")
    b = spawn(kit, p, "step", payload={"other": True})
    assert a["created"] and not b["created"] and a["work"]["work_id"] == b["work"]["work_id"]
    assert spawn(kit, q, "step")["work"]["work_id"] != a["work"]["work_id"]
    assert (a["work"]["source_system"], a["work"]["source_id"], a["work"]["source_run_id"]) == ("manual", "step", p["work_id"])
    # the unit already exists and is no child of this parent: refused, nothing written
    kit.led.create(source_system="manual", source_id="taken", source_run_id=q["work_id"], now=T0)
    kit.refused("idempotency_conflict", kit.led.spawn, parent_id=q["work_id"], key="taken", now=T0)


def test_spawn_mobile(kit: Any) -> None:
    p = kit.running(now=T0, owner="w1")
    c = spawn(kit, p, "sub")["work"]
    assert c["status"] == "queued" and c["owner"] is None
    got = kit.led.claim(owner="w2", work_id=c["work_id"], now=T0)
    assert got["owner"] == "w2" and [e["type"] for e in kit.events(c)] == ["work_created", "claimed"]


def test_spawn_live_parent(kit: Any) -> None:
    done = kit.closed("done", now=T0)
    kit.refused("invalid_transition", kit.led.spawn, parent_id=done["work_id"], key="late", now=T0)
    r = kit.running(now=T0)
    kit.led.cancel(work_id=r["work_id"], now=T0)
    kit.refused("invalid_transition", kit.led.spawn, parent_id=r["work_id"], key="late", now=T0)
    kit.refused("not_found", kit.led.spawn, parent_id="nope", key="late", now=T0)


def test_spawn_budget(kit: Any, spec: Any) -> None:
    root = kit.new(now=T0)
    node = root
    for i in range(spec.spawn_budget):
        node = spawn(kit, node, f"g{i}")["work"]
    for parent in (node, root):
        kit.refused("spawn_denied", kit.led.spawn, parent_id=parent["work_id"], key="extra", now=T0)
    assert not spawn(kit, root, "g0")["created"]  # a replay is not counted
    assert spawn(kit, kit.new(now=T0), "first")["created"]  # another root, another budget


def test_spawn_cancel_cascade(kit: Any) -> None:
    root = kit.new(now=T0)
    kid = spawn(kit, root, "k")["work"]
    grand = spawn(kit, kid, "g")["work"]
    great = spawn(kit, grand, "gg")["work"]
    running = kit.led.claim(owner="w", work_id=grand["work_id"], now=T0)
    out = kit.led.cancel_tree(work_id=root["work_id"], now=T0 + 1, reason="stop")
    by = {w["work_id"]: w for w in out}
    assert set(by) == {root["work_id"], kid["work_id"], grand["work_id"], great["work_id"]}
    assert by[great["work_id"]]["status"] == "cancelled" and by[root["work_id"]]["status"] == "cancelled"
    assert by[grand["work_id"]]["status"] == "running" and by[grand["work_id"]]["cancel_requested"] is True
    done = kit.led.close_out(work_id=grand["work_id"], token=running["lease_token"], status="cancelled", now=T0 + 2)
    assert done["status"] == "cancelled"


def test_spawn_join(kit: Any) -> None:
    p = kit.new(now=T0)
    kids = [spawn(kit, p, f"c{i}")["work"] for i in range(3)]
    spawn(kit, kids[0], "nested")
    r = kit.led.claim(owner="w", work_id=kids[2]["work_id"], now=T0)
    kit.led.close_out(work_id=r["work_id"], token=r["lease_token"], status="done", result={"n": 2}, now=T0)
    got = kit.led.children(work_id=p["work_id"])
    assert [w["work_id"] for w in got] == [k["work_id"] for k in kids]
    assert got[2]["status"] == "done" and got[2]["result"] == {"n": 2}


def test_spawn_is_one_transaction(db: Path, spec: Any) -> None:
    """The parent's record and the child are written by one commit (read from the file)."""
    led = Ledger(db, spec)
    p = led.create(source_system="manual", source_id="p", now=T0)["work"]
    c = led.spawn(parent_id=p["work_id"], key="k", now=T0)["work"]
    led.close()
    con = sqlite3.connect(str(db))
    try:
        assert con.execute("SELECT count(*) FROM work_event WHERE work_id = ? AND type = 'child_spawned'", (p["work_id"],)).fetchone() == (1,)
        assert con.execute("SELECT event_count FROM work WHERE work_id = ?", (p["work_id"],)).fetchone() == (2,)
        assert con.execute("SELECT status FROM work WHERE work_id = ?", (c["work_id"],)).fetchone() == ("queued",)
    finally:
        con.close()


# ---------------------------------------------------------------------- ask
def test_ask_replied(kit: Any) -> None:
    w = kit.running(now=T0)
    kit.led.close_out(work_id=w["work_id"], token=w["lease_token"], status="done", result={"answer": 42}, now=T0)
    assert kit.led.ask_outcome(work_id=w["work_id"]) == {"outcome": "replied", "result": {"answer": 42}}


def test_ask_timed_out(kit: Any, spec: Any) -> None:
    for status in [s for s in spec.statuses if not spec.terminal(s)]:
        w = kit.reach(status, now=T0)
        assert kit.led.ask_outcome(work_id=w["work_id"])["outcome"] == "timed_out", status


def test_ask_target_failed(kit: Any) -> None:
    for status in ("failed", "timeout"):
        w = kit.closed(status, now=T0)
        assert kit.led.ask_outcome(work_id=w["work_id"]) == {"outcome": "target_failed", "result": None}


def test_ask_target_cancelled(kit: Any) -> None:
    w = kit.new(now=T0)
    kit.led.cancel(work_id=w["work_id"], now=T0)
    assert kit.led.ask_outcome(work_id=w["work_id"])["outcome"] == "target_cancelled"
    kit.refused("not_found", kit.led.ask_outcome, work_id="nope")


# ---------------------------------------------------------------------- log reads
def test_logread_last_seq(kit: Any, spec: Any) -> None:
    first = spec.first_seq
    assert kit.led.log_last_seq(stream="s") == {"seq": first - 1}
    for i in range(3):
        seq = kit.led.log_append(stream="s", expected_seq=first - 1 + i, kind="k", now=T0)["seq"]
        assert kit.led.log_last_seq(stream="s") == {"seq": seq}
    assert kit.led.log_last_seq(stream="S") == {"seq": first - 1}


def test_logread_tail(kit: Any, spec: Any) -> None:
    first = spec.first_seq
    for i in range(5):
        kit.led.log_append(stream="s", expected_seq=first - 1 + i, kind=f"k{i}", payload={"i": i}, now=T0 + i)
    got = kit.led.log_tail(stream="s", from_seq=first + 1, max=2)
    assert [(e["seq"], e["kind"], e["payload"]) for e in got] == [(first + 1, "k1", {"i": 1}), (first + 2, "k2", {"i": 2})]
    assert len(kit.led.log_tail(stream="s", from_seq=first, max=99)) == 5
    assert kit.led.log_tail(stream="s", from_seq=first + 9, max=3) == []
