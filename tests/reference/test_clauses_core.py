"""Core clauses (spec/contract/clauses/core.yaml), one test per clause, driven by the contract."""

from __future__ import annotations

from typing import Any

import pytest
from ledgercheck.spec import default_spec
from ledgercheck.transport.protocol import LedgerError

T0 = 1000.0
SPEC = default_spec()


def move(kit: Any, op: str, w: dict[str, Any], dst: str, now: float = T0) -> Any:
    """Perform ``op`` on ``w`` aiming at ``dst``; returns what the operation returned."""
    led, spec, wid = kit.led, kit.led.spec, w["work_id"]
    if op == "claim":
        return led.claim(owner="w2", work_id=wid, now=now)
    if op == "cancel":
        return led.cancel(work_id=wid, now=now)
    if op == "requeue":
        return led.requeue(work_id=wid, now=now)
    if op == "resume":
        return led.resume(work_id=wid, owner="w2", now=now)
    if op == "close_out":
        if spec.edge(w["status"], dst) and spec.edge(w["status"], dst).guard == "cancel_requested":
            led.cancel(work_id=wid, now=now)
        return led.close_out(work_id=wid, token=w["lease_token"] or "no-lease", status=dst, now=now)
    if op == "set_waiting":
        kind = spec.statuses[dst].waiting_kind or "user"
        return led.set_waiting(work_id=wid, token=w["lease_token"] or "no-lease", kind=kind, ref="r", now=now)
    if op == "fail":
        retryable = not spec.terminal(dst)
        cls = next(c for c, r in spec.error_classes.items() if r == retryable)
        return led.fail(work_id=wid, token=w["lease_token"] or "no-lease", error_class=cls, now=now)
    if op == "expire":
        return led.expire(now=now + 10 * 86400)
    if op == "promote_due":
        return led.promote_due(now=now + 86400)
    if op == "recover":
        return led.recover(now=now + 86400)
    raise AssertionError(op)


def prepared(kit: Any, src: str, op: str, dst: str) -> dict[str, Any]:
    """A record in ``src`` such that ``op`` takes the edge to ``dst``."""
    if op == "recover" and kit.led.spec.terminal(src):
        w = kit.running(now=T0)  # a timeout for a lapsed lease, not yet classified
        kit.led.expire(now=T0 + 86400)
        return kit.led.get(work_id=w["work_id"])
    if op == "recover":  # one attempt allowed: the scan quarantines, the record stays timeout
        return kit.running(now=T0, retry_policy={"max_attempts": 1})
    return kit.reach(src, now=T0)


EDGES = [(t.src, t.dst, op) for t in SPEC.transitions for op in t.ops]


@pytest.mark.parametrize(("src", "dst", "op"), EDGES, ids=[f"{s}-{op}-{d}" for s, d, op in EDGES])
def test_core_transition_allowed(kit: Any, spec: Any, src: str, dst: str, op: str) -> None:
    w = prepared(kit, src, op, dst)
    assert w["status"] == src
    before = kit.events(w)
    move(kit, op, w, dst)
    after = kit.events(w)
    assert after[: len(before)] == before
    new = after[len(before):]
    transitions = [e for e in new if e["to_status"] is not None]
    assert [(e["from_status"], e["to_status"]) for e in transitions][:1] == [(src, dst)]
    if not (op == "recover" and spec.terminal(dst)):
        assert kit.led.get(work_id=w["work_id"])["status"] in (dst, spec.initial_status)
    assert transitions[0]["type"] == spec.operations[op].event_for(dst)


def test_trail_types(kit: Any, spec: Any) -> None:
    """Each operation appends the type the contract assigns, including the non-transition events."""
    w = kit.running(now=T0)
    kit.led.renew(work_id=w["work_id"], token=w["lease_token"], now=T0 + 1)
    kit.led.cancel(work_id=w["work_id"], now=T0 + 2)
    kit.led.close_out(work_id=w["work_id"], token=w["lease_token"], status="cancelled", now=T0 + 3)
    types = [e["type"] for e in kit.events(w)]
    assert types == [spec.operations["create"].event, spec.operations["claim"].event_for("running"),
                     spec.operations["renew"].event, spec.operations["cancel"].intent_event,
                     spec.operations["close_out"].event_for("cancelled")]
    q = kit.running(now=T0, retry_policy={"max_attempts": 1})
    kit.led.recover(now=T0 + 86400)
    assert kit.events(q)[-1]["type"] == spec.operations["recover"].intent_event


OPS_TRYING = ("claim", "cancel", "requeue", "resume", "close_out", "set_waiting", "fail")


@pytest.mark.parametrize("src", list(SPEC.statuses))
def test_core_transition_forbidden(kit: Any, spec: Any, src: str) -> None:
    """From each status every operation either takes an allowed edge that lists it or is refused and writes nothing."""
    for op in OPS_TRYING:
        for dst in spec.statuses:
            if spec.allowed(src, dst) and op in spec.edge(src, dst).ops:
                continue
            w = kit.reach(src, now=T0)
            if op == "close_out" and not spec.terminal(dst) or op == "set_waiting" and not spec.statuses[dst].waiting_kind:
                continue  # not a target these operations take (see core.waiting_closeout.exclusive)
            before = (kit.led.get(work_id=w["work_id"]), kit.events(w))
            try:
                move(kit, op, w, dst)
            except LedgerError as exc:
                assert exc.code in ("invalid_transition", "stale_lease"), (src, op, dst, exc)
                if op != "close_out" or dst != "cancelled":  # the cancel intent recorded by move() is its own op
                    assert (kit.led.get(work_id=w["work_id"]), kit.events(w)) == before
                continue
            got = kit.led.get(work_id=w["work_id"])["status"]
            assert got != dst or src == dst, f"{op} moved {src} -> {dst}, a forbidden pair"
            if got != src:
                assert spec.allowed(src, got) and op in spec.edge(src, got).ops


def test_core_transition_corruption(kit: Any, spec: Any) -> None:
    for src, dst in spec.forbidden_examples:
        for op in {op for t in spec.transitions if t.dst == dst for op in t.ops} & set(OPS_TRYING):
            w = kit.reach(src, now=T0)
            with pytest.raises(LedgerError) as info:
                move(kit, op, w, dst)
            assert info.value.code in ("invalid_transition", "stale_lease")
            assert kit.led.get(work_id=w["work_id"])["status"] == src


def test_core_status_enum(kit: Any, spec: Any) -> None:
    for status in spec.statuses:
        kit.reach(status, now=T0)
    assert {w["status"] for w in kit.led.list()} == set(spec.statuses)


def test_core_status_terminal(kit: Any, spec: Any) -> None:
    for status, st in spec.statuses.items():
        w = kit.reach(status, now=T0)
        assert (w["finished_at"] is not None) == st.terminal
        requeued = True
        try:
            kit.led.requeue(work_id=w["work_id"], now=T0)
        except LedgerError as exc:
            assert exc.code == "invalid_transition"
            requeued = False
        assert requeued == st.terminal
    assert set(spec.terminal_statuses) == {"done", "failed", "timeout", "cancelled"}


def test_core_create_initial(kit: Any, spec: Any) -> None:
    w = kit.new(now=T0, priority=5, payload={"q": "hi"})
    assert (w["status"], w["attempt"], w["owner"], w["lease_token"], w["lease_expires_at"], w["lease_version"]) == \
        (spec.initial_status, 0, None, None, None, 0)
    assert w["priority"] == 5 and w["created_at"] == T0 and not w["cancel_requested"] and not w["quarantined"]
    evs = kit.events(w)
    assert len(evs) == 1 and evs[0]["type"] == "work_created" and evs[0]["to_status"] == spec.initial_status
    assert evs[0]["from_status"] is None and evs[0]["seq"] == spec.first_seq
    assert evs[0]["data"] == {f: w[f] for f in spec.events["work_created"].data}
    assert kit.led.get(work_id=w["work_id"]) == w


def test_core_create_unique_unit(kit: Any) -> None:
    first = kit.led.create(source_system="conversation", source_id="msg-1", now=T0)
    again = kit.led.create(source_system="conversation", source_id="msg-1", now=T0 + 5, priority=1)
    assert first["created"] is True and again["created"] is False
    assert again["work"] == first["work"]
    assert len(kit.events(first["work"])) == 1 and len(kit.led.list()) == 1
    other = kit.led.create(source_system="manual", source_id="msg-1", now=T0)
    assert other["created"] is True and other["work"]["work_id"] != first["work"]["work_id"]


def test_core_identity_exact(kit: Any) -> None:
    """Source ids compare code point by code point: case, surrounding whitespace and Unicode
    normalization form each make a different unit; only the exact same id finds the stored one."""
    first = kit.led.create(source_system="conversation", source_id="Caf\u00e9-7", now=T0)["work"]
    variants = ["caf\u00e9-7", "Caf\u00e9-7 ", " Caf\u00e9-7", "Cafe\u0301-7", "Caf\u00e9-7\U0001F600"]
    made = [kit.led.create(source_system="conversation", source_id=v, now=T0) for v in variants]
    assert all(m["created"] for m in made)
    assert [m["work"]["source_id"] for m in made] == variants
    assert len({m["work"]["work_id"] for m in made} | {first["work_id"]}) == len(variants) + 1
    again = kit.led.create(source_system="conversation", source_id="Caf\u00e9-7", now=T0 + 1)
    assert again["created"] is False and again["work"] == first


def test_core_create_source_system(kit: Any, spec: Any) -> None:
    kit.refused("invalid_argument", kit.led.create, source_system="fax", source_id="x", now=T0)
    kit.refused("invalid_argument", kit.led.create, source_system="manual", source_id="x", priority=spec.priority_max + 1, now=T0)
    kit.refused("invalid_argument", kit.led.create, source_system="manual", source_id="x", priority=spec.priority_min - 1, now=T0)
    kit.refused("invalid_argument", kit.led.create, source_system="manual", source_id="x", priority=True, now=T0)
    assert kit.led.list() == []


def test_core_scheduler_run_identity(kit: Any) -> None:
    kit.refused("invalid_argument", kit.led.create, source_system="scheduler", source_id="nightly", now=T0)
    kit.refused("invalid_argument", kit.led.create, source_system="scheduler", source_id="nightly", source_run_id="", now=T0)
    a = kit.led.create(source_system="scheduler", source_id="nightly", source_run_id="2026-01-01", now=T0)
    b = kit.led.create(source_system="scheduler", source_id="nightly", source_run_id="2026-01-02", now=T0)
    assert a["created"] and b["created"] and a["work"]["work_id"] != b["work"]["work_id"]
    assert kit.led.create(source_system="scheduler", source_id="nightly", source_run_id="2026-01-01", now=T0)["created"] is False


def test_trail_one_per_transition(kit: Any, spec: Any) -> None:
    w = kit.running(now=T0)
    wid, tok = w["work_id"], w["lease_token"]
    kit.led.renew(work_id=wid, token=tok, now=T0 + 1)
    w = kit.led.fail(work_id=wid, token=tok, error_class="rate_limited", now=T0 + 2)
    kit.led.promote_due(now=w["next_retry_at"])
    w = kit.led.claim(owner="w2", work_id=wid, now=T0 + 600)
    kit.refused("stale_lease", kit.led.close_out, work_id=wid, token=tok, status="done", now=T0 + 601)
    kit.led.close_out(work_id=wid, token=w["lease_token"], status="done", now=T0 + 602)
    evs = kit.events(w)
    statuses = [e["to_status"] for e in evs if e["to_status"] is not None]
    assert statuses == ["queued", "running", "retry_scheduled", "queued", "running", "done"]
    chain = [e for e in evs if e["to_status"] is not None]
    assert all(b["from_status"] == a["to_status"] for a, b in zip(chain, chain[1:], strict=False))
    assert sum(1 for e in evs if e["to_status"] is None) == 1  # the renewal


def test_trail_append_only(kit: Any, spec: Any) -> None:
    w = kit.running(now=T0)
    trail = kit.events(w)
    kit.led.renew(work_id=w["work_id"], token=w["lease_token"], now=T0 + 1)
    kit.led.close_out(work_id=w["work_id"], token=w["lease_token"], status="done", result={"n": 1}, now=T0 + 2)
    kit.led.requeue(work_id=w["work_id"], now=T0 + 3)
    later = kit.events(w)
    assert later[: len(trail)] == trail
    assert [e["seq"] for e in later] == list(range(spec.first_seq, spec.first_seq + len(later)))


def test_core_terminal_immutable(kit: Any, spec: Any) -> None:
    for status in spec.terminal_statuses:
        w = kit.reach(status, now=T0)
        wid, tok = w["work_id"], kit.events(w)[1]["data"]["lease_token"]  # the token it was worked with
        for fn, kw in [
            (kit.led.renew, {"token": tok}),
            (kit.led.close_out, {"token": tok, "status": "done"}),
            (kit.led.set_waiting, {"token": tok, "kind": "user", "ref": "r"}),
            (kit.led.fail, {"token": tok, "error_class": "transient_network"}),
            (kit.led.claim, {"owner": "w9"}),
            (kit.led.resume, {"owner": "w9"}),
            (kit.led.cancel, {}),
        ]:
            with pytest.raises(LedgerError) as info:
                fn(work_id=wid, now=T0 + 1, **kw)
            assert info.value.code in ("invalid_transition", "stale_lease")
        assert kit.led.get(work_id=wid) == w and len(kit.events(w)) == len(kit.events(w))
        assert kit.led.requeue(work_id=wid, now=T0 + 2)["status"] == spec.initial_status


def test_core_waiting_closeout_exclusive(kit: Any, spec: Any) -> None:
    w = kit.running(now=T0)
    for waiting in spec.waiting_statuses.values():
        kit.refused("invalid_argument", kit.led.close_out, work_id=w["work_id"], token=w["lease_token"], status=waiting, now=T0)
    kit.refused("invalid_argument", kit.led.close_out, work_id=w["work_id"], token=w["lease_token"], status="running", now=T0)
    waited = kit.led.set_waiting(work_id=w["work_id"], token=w["lease_token"], kind="user", ref="r", now=T0)
    assert waited["status"] == "waiting_user" and waited["finished_at"] is None and waited["result"] is None


def test_core_running_renew_or_leave(kit: Any, spec: Any) -> None:
    lt = spec.lease_for("manual")
    kept, left = kit.running(now=T0), kit.running(now=T0)
    t = T0
    while t < T0 + 3 * (lt.ttl + lt.grace):
        t += lt.renew_interval
        kit.led.renew(work_id=kept["work_id"], token=kept["lease_token"], now=t)
        for m in kit.led.expire(now=t):
            assert m["work_id"] == left["work_id"] and t > T0 + lt.ttl + lt.grace
    assert kit.led.get(work_id=kept["work_id"])["status"] == "running"
    gone = kit.led.get(work_id=left["work_id"])
    assert gone["status"] == "timeout" and gone["status_reason"] == spec.timeout_reasons["heartbeat"]


def test_core_close_out_explicit(kit: Any, spec: Any) -> None:
    assert {op for t in spec.transitions if t.dst == "done" for op in t.ops} == {"close_out"}
    w = kit.running(now=T0)
    kit.refused("stale_lease", kit.led.close_out, work_id=w["work_id"], token="not-the-token", status="done", now=T0 + 1)
    for monitor in (kit.led.expire, kit.led.promote_due, kit.led.recover):
        monitor(now=T0 + 1)
    assert kit.led.get(work_id=w["work_id"])["status"] == "running"
    done = kit.led.close_out(work_id=w["work_id"], token=w["lease_token"], status="done", result={"answer": 42}, now=T0 + 2)
    assert done["status"] == "done" and done["result"] == {"answer": 42} and done["owner"] is None


@pytest.mark.parametrize("status", ["queued", "retry_scheduled", "waiting_user", "waiting_external"])
def test_cancel_immediate(kit: Any, spec: Any, status: str) -> None:
    w = kit.reach(status, now=T0)
    n = len(kit.events(w))
    c = kit.led.cancel(work_id=w["work_id"], reason="user asked", now=T0 + 1)
    assert c["status"] == "cancelled" and c["finished_at"] == T0 + 1 and c["status_reason"] == "user asked"
    assert c["waiting_ref"] is None and c["waiting_deadline"] is None and c["next_retry_at"] is None
    evs = kit.events(w)
    assert len(evs) == n + 1 and (evs[-1]["type"], evs[-1]["from_status"], evs[-1]["to_status"]) == ("cancelled", status, "cancelled")


def test_cancel_intent_first(kit: Any) -> None:
    w = kit.running(now=T0)
    wid, tok = w["work_id"], w["lease_token"]
    kit.refused("invalid_transition", kit.led.close_out, work_id=wid, token=tok, status="cancelled", now=T0)
    c = kit.led.cancel(work_id=wid, now=T0 + 1)
    assert c["status"] == "running" and c["cancel_requested"] is True and c["lease_token"] == tok
    evs = kit.events(w)
    assert (evs[-1]["type"], evs[-1]["from_status"], evs[-1]["to_status"]) == ("cancel_requested", None, None)
    assert kit.led.cancel(work_id=wid, now=T0 + 2) == c and len(kit.events(w)) == len(evs)  # no second intent
    kit.refused("stale_lease", kit.led.close_out, work_id=wid, token="someone-else", status="cancelled", now=T0 + 3)
    done = kit.led.close_out(work_id=wid, token=tok, status="cancelled", now=T0 + 4)
    assert done["status"] == "cancelled"


def test_core_requeue_terminal(kit: Any, spec: Any) -> None:
    for status in spec.statuses:
        w = kit.reach(status, now=T0)
        if spec.terminal(status):
            r = kit.led.requeue(work_id=w["work_id"], reason="operator", now=T0 + 1)
            assert (r["status"], r["finished_at"], r["result"], r["error_class"]) == (spec.initial_status, None, None, None)
            assert r["lease_version"] == w["lease_version"] and kit.events(w)[-1]["type"] == "requeued"
        else:
            kit.refused("invalid_transition", kit.led.requeue, work_id=w["work_id"], now=T0 + 1)


def test_core_not_found(kit: Any) -> None:
    kit.new(now=T0)
    calls = [
        (kit.led.get, {}), (kit.led.events, {}), (kit.led.claim, {"owner": "w", "now": T0}),
        (kit.led.close_out, {"token": "t", "status": "done", "now": T0}), (kit.led.cancel, {"now": T0}),
        (kit.led.requeue, {"now": T0}), (kit.led.renew, {"token": "t", "now": T0}),
        (kit.led.set_waiting, {"token": "t", "kind": "user", "ref": "r", "now": T0}),
        (kit.led.resume, {"owner": "w", "now": T0}), (kit.led.fail, {"token": "t", "error_class": "rate_limited", "now": T0}),
        (kit.led.effect_list, {}),
        (kit.led.effect_begin, {"step_id": "s", "tool": "t", "input": 1, "step_class": "pure", "now": T0}),
    ]
    for bogus in ("no-such-work", "000000000001" + "0" * 20, ""):
        for fn, kw in calls:
            with pytest.raises(LedgerError) as info:
                fn(work_id=bogus, **kw)
            assert info.value.code == "not_found", (fn.__name__, bogus)
    assert len(kit.led.list()) == 1 and len(kit.events(kit.led.list()[0])) == 1


def test_core_invalid_argument(kit: Any) -> None:
    w = kit.running(now=T0)
    wid, tok = w["work_id"], w["lease_token"]
    bad = [
        (kit.led.create, {"source_system": "manual", "source_id": 7, "now": T0}),
        (kit.led.create, {"source_system": "manual", "source_id": "x", "now": "soon"}),
        (kit.led.create, {"source_system": "manual", "source_id": "x", "now": float("nan")}),
        (kit.led.create, {"source_system": "manual", "source_id": "x", "payload": [1], "now": T0}),
        (kit.led.create, {"source_system": "manual", "source_id": "x", "retry_policy": {"max_attempts": 0}, "now": T0}),
        (kit.led.renew, {"work_id": wid, "token": None, "now": T0}),
        (kit.led.renew, {"work_id": wid, "token": tok, "now": None}),
        (kit.led.close_out, {"work_id": wid, "token": tok, "status": "finished", "now": T0}),
        (kit.led.close_out, {"work_id": wid, "token": tok, "status": "done", "result": {1, 2}, "now": T0}),
        (kit.led.set_waiting, {"work_id": wid, "token": tok, "kind": "user", "ref": "r", "timeout": -5, "now": T0}),
        (kit.led.claim, {"owner": 3, "now": T0}),
        (kit.led.list, {"status": "paused"}),
        (kit.led.expire, {"now": float("inf")}),
        (kit.led.inbox_drain, {"recipient": "r", "max": 0, "now": T0}),
    ]
    for fn, kw in bad:
        with pytest.raises(LedgerError) as info:
            fn(**kw)
        assert info.value.code == "invalid_argument", (fn.__name__, kw, info.value)
        assert fn.__name__ in info.value.message or any(k in info.value.message for k in kw)
    assert kit.led.get(work_id=wid) == w and len(kit.led.list()) == 1 and len(kit.events(w)) == 2


def test_core_claim_empty(kit: Any, ledger: Any) -> None:
    assert ledger.claim(owner="w", now=T0) is None
    kit.running(now=T0)
    kit.reach("done", now=T0)
    changes = ledger.conn.total_changes
    assert ledger.claim(owner="w", now=T0 + 1) is None
    assert ledger.conn.total_changes == changes


def test_core_claim_order(kit: Any) -> None:
    made = [kit.new(now=T0 + i, priority=p) for i, p in enumerate([5, 3, 9, 3, 0, 5])]
    order = []
    while (w := kit.led.claim(owner="w", now=T0 + 10)) is not None:
        order.append(w["work_id"])
    ranked = sorted(range(len(made)), key=lambda i: (made[i]["priority"], i))
    assert order == [made[i]["work_id"] for i in ranked]


def test_core_list_complete(kit: Any, spec: Any) -> None:
    made: dict[str, list[str]] = {}
    for status in spec.statuses:
        for _ in range(2):
            made.setdefault(status, []).append(kit.reach(status, now=T0)["work_id"])
    assert sorted(w["work_id"] for w in kit.led.list()) == sorted(sum(made.values(), []))
    for status, ids in made.items():
        assert sorted(w["work_id"] for w in kit.led.list(status=status)) == sorted(ids)
    assert kit.led.list(quarantined=True) == []
    assert len(kit.led.list(quarantined=False)) == 2 * len(spec.statuses)


def test_core_expire_timeout_reason(kit: Any, spec: Any) -> None:
    reasons = spec.timeout_reasons
    lt = spec.lease_for("manual")
    exec_t = spec.phase_timeout("execution")
    lapsed = kit.running(now=T0)
    long = kit.running(now=T0)
    waits = kit.waiting(now=T0, kind="external")
    t = T0
    while t < T0 + exec_t:
        t = min(t + lt.renew_interval, T0 + exec_t)
        kit.led.renew(work_id=long["work_id"], token=long["lease_token"], now=t)
    moves = {m["work_id"]: m for m in kit.led.expire(now=T0 + exec_t + 1)}
    assert moves[lapsed["work_id"]]["reason"] == reasons["heartbeat"]
    assert moves[long["work_id"]]["reason"] == reasons["execution"]
    assert waits["work_id"] not in moves
    moves = kit.led.expire(now=waits["waiting_deadline"] + 1)
    assert [(m["work_id"], m["reason"]) for m in moves] == [(waits["work_id"], reasons["waiting"])]
    for wid, reason in [(lapsed["work_id"], "heartbeat"), (long["work_id"], "execution"), (waits["work_id"], "waiting")]:
        assert kit.led.get(work_id=wid)["status_reason"] == reasons[reason]
