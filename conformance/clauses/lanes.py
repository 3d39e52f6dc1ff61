"""Clause tests of the lanes profile: one holder per (session key, lane), takeover only after the
lease lapsed, and the lane's follow-up work kept until its holder marks it done."""

from __future__ import annotations

from typing import Any

from ledgercheck.transport.clock import QUANTUM

from ..harness import Harness, NotApplicable
from . import case, check, durable

SK, LANE = "session-42", "interactive"


def _acquire(h: Harness, owner: str, lane: str = LANE) -> dict[str, Any] | None:
    return h.do("lane_acquire", session_key=SK, lane=lane, owner=owner).value


def _holder(h: Harness, owner: str, clause: str, lane: str = LANE) -> str:
    got = _acquire(h, owner, lane)
    check(isinstance(got, dict) and bool(got.get("token")), clause, f"acquiring the free lane {lane!r} gave {got!r}", h)
    assert got is not None
    return str(got["token"])


def _push(h: Harness, *tasks: str, lane: str = LANE) -> None:
    for t in tasks:
        h.do("lane_push", session_key=SK, lane=lane, task_id=t, body={"text": f"follow-up {t}"})


def _next(h: Harness, token: str, lane: str = LANE) -> str | None:
    got = h.do("lane_next", session_key=SK, lane=lane, token=token).value
    return got["task_id"] if isinstance(got, dict) else None


def _tasks(h: Harness, lane: str = LANE) -> list[tuple[str, str]]:
    return [(t["task_id"], t["state"]) for t in h.do("lane_tasks", session_key=SK, lane=lane).value]


@case("lanes.exclusive", "live-lease")
def _exclusive(h: Harness) -> None:
    lt = h.spec.lease_default
    _holder(h, "worker-A", "lanes.exclusive")
    for owner in ("worker-B", "worker-A"):  # another worker, and the holder asking twice
        check(_acquire(h, owner) is None, "lanes.exclusive", f"{owner} got the lane while its lease is live", h)
    h.advance(lt.ttl + lt.grace / 2)  # expired, but within its grace: still live
    check(_acquire(h, "worker-B") is None, "lanes.exclusive", "the lane was handed over within the lease's grace", h)
    other = _acquire(h, "worker-B", lane="background")  # another lane of the same session is free
    check(other is not None, "lanes.takeover", f"the free lane 'background' was not handed out: {other!r}", h)


@case("lanes.exclusive", "at-the-lapse-instant")
def _exclusive_edge(h: Harness) -> None:
    if h.wall:
        raise NotApplicable("the lapse instant cannot be hit exactly on a wall clock (live-lease judges it)")
    lt = h.spec.lease_default
    lease = _acquire(h, "worker-A")
    check(lease is not None, "lanes.takeover", "the free lane was not handed out", h)
    assert lease is not None
    h.advance_to(lease["expires_at"] + lt.grace)
    check(_acquire(h, "worker-B") is None, "lanes.exclusive", "the lane was handed over at expires_at + grace, not after it", h)
    h.advance(h.contract_seconds(QUANTUM))
    check(_acquire(h, "worker-B") is not None, "lanes.takeover", "the lapsed lane was not handed over", h)


@case("lanes.takeover", "after-lapse")
def _takeover(h: Harness) -> None:
    first = _acquire(h, "worker-A")
    check(first is not None and first["version"] == 1, "lanes.takeover", f"first lease {first!r}", h)
    h.advance(h.lapse_step())
    second = _acquire(h, "worker-B")
    check(second is not None and second["owner"] == "worker-B", "lanes.takeover", f"the lapsed lane was not handed over: {second!r}", h)
    assert first is not None and second is not None
    check(second["version"] == 2 and second["token"] != first["token"], "lanes.takeover",
          f"takeover gave version {second['version']} and {'the same' if second['token'] == first['token'] else 'a new'} token", h)


@case("lanes.takeover", "after-release")
def _takeover_release(h: Harness) -> None:
    tok = _holder(h, "worker-A", "lanes.takeover")
    h.do("lane_release", session_key=SK, lane=LANE, token=tok)
    got = _acquire(h, "worker-B")
    check(got is not None and got["version"] == 2, "lanes.takeover", f"the released lane was not handed over: {got!r}", h)


@case("lanes.renew", "keeps-the-lane")
def _renew(h: Harness) -> None:
    lt = h.spec.lease_default
    _push(h, "t1")
    tok = _holder(h, "worker-A", "lanes.renew")
    for _ in range(3):
        h.advance(lt.ttl / 2)
        got = h.do("lane_renew", session_key=SK, lane=LANE, token=tok).value
        check(isinstance(got, dict) and got.get("token") == tok and got.get("version") == 1, "lanes.renew", f"renew gave {got!r}", h)
    # past the first lease's lapse, but the renewed lease is live: nobody else gets the lane
    check(_acquire(h, "worker-B") is None, "lanes.exclusive", "the lane was handed over while its renewed lease is live", h)
    check(_next(h, tok) == "t1", "lanes.renew", "the holder's renewed lease did not hand it its task", h)


@case("lanes.fencing", "old-and-forged-tokens")
def _fencing(h: Harness) -> None:
    _push(h, "t1", "t2")
    old = _holder(h, "worker-A", "lanes.fencing")
    _next(h, old)
    h.advance(h.lapse_step())
    new = _holder(h, "worker-B", "lanes.takeover")
    for tok in (old, "forged-token"):
        for op, extra in (("lane_renew", {}), ("lane_next", {}), ("lane_done", {"task_id": "t1"}), ("lane_release", {})):
            out = h.do(op, session_key=SK, lane=LANE, token=tok, **extra)
            check(not out.ok and out.code == "stale_lease", "lanes.fencing", f"{op} with a stale token answered {out}", h)
    # what the lane holds, whatever order it lists it in (the order is lanes.queue.order's)
    check(sorted(_tasks(h)) == [("t1", "queued"), ("t2", "queued")], "lanes.fencing", f"after the stale writes the lane holds {_tasks(h)}", h)
    lease = h.do("lane_renew", session_key=SK, lane=LANE, token=new).value
    check(isinstance(lease, dict) and lease.get("owner") == "worker-B", "lanes.fencing", f"the new holder's lease reads {lease!r}", h)


@case("lanes.queue.durable", "pushed-while-busy")
def _durable_busy(h: Harness) -> None:
    a = _holder(h, "worker-A", "lanes.queue.durable")
    _push(h, "t1", "t2", "t3")  # the lane is busy: the follow-ups must wait, not vanish
    check(sorted(t for t, _ in _tasks(h)) == ["t1", "t2", "t3"], "lanes.queue.durable", f"lane holds {_tasks(h)}", h)
    check(_next(h, a) == "t1", "lanes.queue.durable", "the holder did not get the first follow-up", h)
    h.advance(h.lapse_step())  # worker A dies holding t1
    b = _holder(h, "worker-B", "lanes.takeover")
    done = []
    for _ in range(5):
        t = _next(h, b)
        if t is None:
            break
        h.do("lane_done", session_key=SK, lane=LANE, token=b, task_id=t)
        done.append(t)
    check(done == ["t1", "t2", "t3"], "lanes.queue.durable", f"after the takeover the lane handed out {done}", h)
    check(_tasks(h) == [], "lanes.queue.durable", f"done tasks are still listed: {_tasks(h)}", h)


@case("lanes.queue.durable", "after-reopen")
def _durable_reopen(h: Harness) -> None:
    with durable(h) as reopen:
        a = _holder(h, "worker-A", "lanes.queue.durable")
        _push(h, "t1", "t2")
        _next(h, a)
        reopen()
        check(sorted(_tasks(h)) == [("t1", "handed"), ("t2", "queued")], "lanes.queue.durable", f"after a restart the lane holds {_tasks(h)}", h)
        h.advance(h.lapse_step())
        b = _holder(h, "worker-B", "lanes.takeover")
        check(_next(h, b) == "t1", "lanes.queue.durable", "the task handed to the dead holder was not handed out again", h)


@case("lanes.queue.order", "arrival-order")
def _order(h: Harness) -> None:
    _push(h, "t1", "t2", "t3", "t4")
    # the lane's list shows its queue in the order next serves it (lane_tasks: "in arrival order")
    listed = [t for t, _ in _tasks(h)]
    check(listed == ["t1", "t2", "t3", "t4"], "lanes.queue.order", f"the lane lists {listed}, pushed t1..t4 in that order", h)
    tok = _holder(h, "worker-A", "lanes.queue.order")
    got = []
    for _ in range(6):
        t = _next(h, tok)
        if t is None:
            break
        got.append(t)
        h.do("lane_done", session_key=SK, lane=LANE, token=tok, task_id=t)
    check(got == ["t1", "t2", "t3", "t4"], "lanes.queue.order", f"next handed out {got}", h)


@case("lanes.queue.order", "handed-back-keeps-its-place")
def _order_back(h: Harness) -> None:
    _push(h, "t1", "t2")
    a = _holder(h, "worker-A", "lanes.queue.order")
    check(_next(h, a) == "t1", "lanes.queue.order", "first next", h)
    h.do("lane_release", session_key=SK, lane=LANE, token=a)
    b = _holder(h, "worker-B", "lanes.takeover")
    check(_next(h, b) == "t1", "lanes.queue.order", "the handed-back task lost its place", h)


@case("lanes.push.idempotent", "same-task-twice")
def _push_dup(h: Harness) -> None:
    first = h.do("lane_push", session_key=SK, lane=LANE, task_id="t1", body={"n": 1}).value
    again = h.do("lane_push", session_key=SK, lane=LANE, task_id="t1", body={"n": 1}).value
    check(first.get("queued") is True and again.get("queued") is False, "lanes.push.idempotent", f"pushes answered {first}, {again}", h)
    tok = _holder(h, "worker-A", "lanes.push.idempotent")
    check(_next(h, tok) == "t1" and _next(h, tok) is None, "lanes.push.idempotent", "the task was handed out twice", h)
