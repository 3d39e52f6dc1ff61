"""Clause tests of the wakeups profile: what wakes a suspended run, that wakeups fired while it
is pending merge into one hand-out, and the hand-out's lease: its holder's writes are fenced by
its token, and a hand-out whose holder died is handed out again, whole, once its lease lapsed."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ledgercheck.spec import Spec

from ..harness import Harness, NotApplicable
from . import CaseFn, answered, case, cases, check, durable


def _take(h: Harness, worker: str = "worker-A") -> dict[str, Any] | None:
    return h.do("wake_take", worker=worker).value


def _fire(h: Harness, run: str, kind: str) -> dict[str, Any]:
    return h.do("wake_fire", run_id=run, kind=kind).value


@cases("wakeups.wake")
def _wake(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for kind in spec.wakeup_kinds:
        def fn(h: Harness, kind: str = kind) -> None:
            h.do("wake_suspend", run_id="run-1")
            check(_take(h) is None, "wakeups.wake", "a suspended run was handed out without a wakeup", h)
            got = _fire(h, "run-1", kind)
            check(got["state"] == "pending", "wakeups.wake", f"a {kind} wakeup left the run {got['state']}", h)
            out = _take(h)
            check(out is not None and out["run_id"] == "run-1" and out["woken_by"] == [kind], "wakeups.wake",
                  f"take after a {kind} wakeup gave {out!r}", h)
        yield kind, fn


@case("wakeups.coalesce", "every-kind-while-pending")
def _coalesce(h: Harness) -> None:
    h.do("wake_suspend", run_id="run-1")
    h.do("wake_suspend", run_id="run-2")
    for kind in (*h.spec.wakeup_kinds, "message"):
        _fire(h, "run-1", kind)
    got = h.do("wake_get", run_id="run-1").value
    check(got["state"] == "pending" and len(got["wakeups"]) == len(h.spec.wakeup_kinds) + 1, "wakeups.coalesce",
          f"after {len(h.spec.wakeup_kinds) + 1} wakeups the run reads {got}", h)
    first = _take(h, "worker-A")
    second = _take(h, "worker-B")
    check(first is not None and first["run_id"] == "run-1" and first["cycle"] == 1, "wakeups.coalesce", f"first take {first!r}", h)
    check(second is None, "wakeups.coalesce", f"one wake cycle was handed out twice: {second!r}", h)


@case("wakeups.coalesce", "two-cycles")
def _cycles(h: Harness) -> None:
    h.do("wake_suspend", run_id="run-1")
    for cycle in (1, 2):
        _fire(h, "run-1", "message")
        _fire(h, "run-1", "signal")
        out = _take(h)
        check(out is not None and out["cycle"] == cycle and sorted(out["woken_by"]) == ["message", "signal"], "wakeups.coalesce",
              f"wake cycle {cycle} handed out {out!r}", h)
        check(_take(h) is None, "wakeups.coalesce", f"wake cycle {cycle} was handed out twice", h)
        assert out is not None
        h.do("wake_suspend", run_id="run-1", token=out.get("token"))


@case("wakeups.timer", "not-before-its-instant")
def _timer(h: Harness) -> None:
    at = h.now() + h.contract_seconds(60.0)
    h.do("wake_suspend", run_id="run-1", timer_at=at)
    h.advance(h.contract_seconds(30.0))
    check(_take(h) is None, "wakeups.timer", "the run was handed out before its timer", h)
    h.advance(h.contract_seconds(31.0))
    out = _take(h)
    check(out is not None and out["run_id"] == "run-1" and out["woken_by"] == ["timer"], "wakeups.timer", f"the due timer gave {out!r}", h)


@case("wakeups.timer", "merges-with-a-message")
def _timer_merge(h: Harness) -> None:
    at = h.now() + h.contract_seconds(10.0)
    h.do("wake_suspend", run_id="run-1", timer_at=at)
    _fire(h, "run-1", "message")
    h.advance(h.contract_seconds(11.0))
    out = _take(h)
    check(out is not None and sorted(out["woken_by"]) == ["message", "timer"], "wakeups.timer", f"take gave {out!r}", h)
    check(_take(h) is None, "wakeups.coalesce", "the timer handed the run out a second time", h)


@case("wakeups.kept", "fired-while-running")
def _kept(h: Harness) -> None:
    h.do("wake_suspend", run_id="run-1")
    _fire(h, "run-1", "message")
    held = _take(h)
    got = _fire(h, "run-1", "child_done")  # the run is running: the wakeup waits for its next cycle
    check(got["state"] == "running", "wakeups.kept", f"the running run reads {got}", h)
    after = h.do("wake_suspend", run_id="run-1", token=(held or {}).get("token")).value
    check(after["state"] == "pending", "wakeups.kept", f"suspending with a kept wakeup left the run {after['state']}", h)
    out = _take(h)
    check(out is not None and out["woken_by"] == ["child_done"] and out["cycle"] == 2, "wakeups.kept", f"next cycle {out!r}", h)


# ------------------------------------------------------------------ the hand-out's lease
def _said(out: Any) -> str:
    return f"{out.value!r:.80}" if out.ok else f"{out.code}: {out.message}"


def _held(h: Harness, clause: str, *kinds: str, worker: str = "worker-A") -> dict[str, Any]:
    """run-1 suspended, woken by ``kinds`` and handed to ``worker``: the hand-out."""
    h.do("wake_suspend", run_id="run-1")
    for kind in kinds or ("message",):
        _fire(h, "run-1", kind)
    out = _take(h, worker)
    check(isinstance(out, dict) and out.get("run_id") == "run-1" and isinstance(out.get("token"), str) and bool(out["token"]),
          clause, f"take of the woken run gave {out!r}", h)
    assert out is not None
    return out


@case("wakeups.lease", "token-expiry-and-renew")
def _lease(h: Harness) -> None:
    lt = h.spec.lease_default
    start = h.now()
    out = _held(h, "wakeups.lease")
    check(abs(out.get("expires_at", 0) - (start + lt.ttl)) <= h.contract_seconds(1.0) + (h.wall_tolerance if h.wall else 0.0) and out.get("attempt") == 1, "wakeups.lease",
          f"the hand-out at {start} has expires_at {out.get('expires_at')!r} and attempt {out.get('attempt')!r}, "
          f"the contract says now + {lt.ttl:g}s and 1", h)
    for _ in range(3):
        h.advance(lt.ttl / 2)
        got = h.do("wake_renew", run_id="run-1", token=out["token"]).value
        check(isinstance(got, dict) and got.get("token") == out["token"] and got.get("cycle") == 1, "wakeups.lease", f"renew gave {got!r}", h)
    # past the first hand-out's lapse, but the renewed one is live: nobody else gets the run
    check(_take(h, "worker-B") is None, "wakeups.redeliver", "a renewed hand-out was handed out again", h)
    done = h.do("wake_suspend", run_id="run-1", token=out["token"]).value
    check(done["state"] == "suspended", "wakeups.lease", f"the holder's suspend left the run {done['state']}", h)


@case("wakeups.lease", "renew-after-handed-out-again")
def _lease_second_holder(h: Harness) -> None:
    """The renewal of a hand-out given out again (its first holder's lapsed) renews that
    hand-out: the second holder's, its token and its worker, not the first's."""
    _held(h, "wakeups.lease", worker="worker-A")
    h.advance(h.lapse_step())
    second = _take(h, "worker-B")
    check(second is not None and second["run_id"] == "run-1", "wakeups.redeliver", f"the lapsed hand-out was not handed out again: {second!r}", h)
    assert second is not None
    h.advance(h.spec.lease_default.ttl / 2)
    got = h.do("wake_renew", run_id="run-1", token=second["token"]).value
    check(isinstance(got, dict) and got.get("worker") == "worker-B" and got.get("token") == second["token"]
          and got.get("cycle") == second["cycle"], "wakeups.lease",
          f"worker-B's renewal of the hand-out it was given after worker-A's lapsed answered {got!r}", h)
    h.do("wake_suspend", run_id="run-1", token=second["token"])


@case("wakeups.fencing", "missing-made-up-and-superseded-tokens")
def _fencing(h: Harness) -> None:
    first = _held(h, "wakeups.fencing")
    for token in (None, "made-up", first["token"] + "x"):
        out = h.do("wake_suspend", run_id="run-1", **({} if token is None else {"token": token}))
        check(not out.ok and out.code == "stale_lease", "wakeups.fencing", f"suspend with token {token!r} answered {_said(out)}", h)
    out = h.do("wake_renew", run_id="run-1", token="made-up")
    check(not out.ok and out.code == "stale_lease", "wakeups.fencing", f"renew with a made-up token answered {_said(out)}", h)
    h.advance(h.lapse_step())
    second = _take(h, "worker-B")
    check(second is not None and second["run_id"] == "run-1", "wakeups.redeliver", f"the lapsed hand-out was not handed out again: {second!r}", h)
    assert second is not None
    for op, args in (("wake_renew", {}), ("wake_suspend", {})):
        out = h.do(op, run_id="run-1", token=first["token"], **args)
        check(not out.ok and out.code == "stale_lease", "wakeups.fencing",
              f"{op} with the dead holder's token after the run was handed out again answered {_said(out)}", h)
    got = h.do("wake_get", run_id="run-1").value
    check(got["state"] == "running", "wakeups.fencing", f"the refused writes left the run {got['state']}", h)
    h.do("wake_suspend", run_id="run-1", token=second["token"])


@case("wakeups.redeliver", "after-the-holder-dies")
def _redeliver(h: Harness) -> None:
    lt = h.spec.lease_default
    first = _held(h, "wakeups.redeliver", "message", "signal")
    h.advance(lt.ttl + lt.grace / 2)  # expired, within its grace: still live
    check(_take(h, "worker-B") is None, "wakeups.redeliver", "a hand-out was handed out again before its lease lapsed", h)
    h.advance(lt.grace)
    again = _take(h, "worker-B")
    check(again is not None and again["run_id"] == "run-1" and again["cycle"] == first["cycle"] and again.get("attempt") == 2
          and again["worker"] == "worker-B" and again.get("token") != first["token"], "wakeups.redeliver",
          f"after the hand-out {first!r} lapsed, take gave {again!r}", h)
    check(_take(h, "worker-C") is None, "wakeups.redeliver", "the handed-out-again run was handed out a third time at once", h)


@case("wakeups.redeliver_kept", "lost-wakeups-and-those-since")
def _redeliver_kept(h: Harness) -> None:
    _held(h, "wakeups.redeliver_kept", "message", "signal")
    _fire(h, "run-1", "child_done")  # fired while the (soon dead) holder runs
    h.advance(h.lapse_step())
    again = _take(h, "worker-B")
    check(again is not None and sorted(again["woken_by"]) == ["child_done", "message", "signal"], "wakeups.redeliver_kept",
          f"the lost hand-out carried message and signal, child_done fired since; the next take gave {again!r}", h)


# ------------------------------------------------------------------ a crash inside a take
WINDOW = "merged_handout"  # the contract's promise window of a take (recovery.yaml)


@case("wakeups.redeliver", "crash-inside-take-then-lapse")
def _crash_take(h: Harness) -> None:
    """A worker's take dies inside the adapter, at each crash point of the adapter the take passes
    (a real SIGKILL while the adapter blocks there).  After a reopen the wakeups merged into the
    run are either still pending, whole, and the next take hands them out once; or they were
    handed out (to the dead worker): then no take hands the run out while that hand-out's lease
    is live, and once it lapsed the next take hands the same wake cycle out again, with every
    wakeup, exactly once.  Needs an adapter that can be stopped at its own crash points (the wire
    protocol's ``arm``) and durable state."""
    window = h.spec.promise_windows.get(WINDOW)
    clause = window.clause if window is not None else "wakeups.redeliver"
    points = list(h.client.crash_points) if hasattr(h.client, "crash_points") else []
    if not points or not callable(getattr(h.client, "arm", None)):
        raise NotApplicable("the adapter declares no crash points it can be stopped at (arm)")
    h.need("wake_suspend", "wake_fire", "wake_take", "wake_get")
    with durable(h) as reopen:
        for point in points:
            for occurrence in (1, 2, 3):
                rid = f"run-{point}-{occurrence}"
                answered(h, "wake_suspend", clause, run_id=rid, now=h.now())
                for kind in ("message", "signal"):
                    answered(h, "wake_fire", clause, run_id=rid, kind=kind, now=h.now())
                armed = h.client.arm(point, occurrence)
                if not armed.ok:
                    raise NotApplicable(f"arm {point}: {armed.code}: {armed.message}")
                first = h.client.call("wake_take", worker="doomed", now=h.now())
                reopen()
                crashed = not first.ok and first.code == "adapter_crashed"
                where = f"a crash at {point} (occurrence {occurrence})" if crashed else "a take"
                run = answered(h, "wake_get", clause, run_id=rid)
                check(run["state"] in ("pending", "running"), clause, f"after {where} run {rid!r} reads {run}", h)
                if run["state"] == "pending":
                    check(sorted(run["wakeups"]) == ["message", "signal"], clause,
                          f"after {where} the pending run {rid!r} lists wakeups {run['wakeups']}: the merged ones were not kept whole", h)
                    got = answered(h, "wake_take", clause, worker="worker-B", now=h.now())
                    check(isinstance(got, dict) and got["run_id"] == rid and got.get("cycle") == 1
                          and sorted(got["woken_by"]) == ["message", "signal"], clause,
                          f"after {where} left the run pending, the next take gave {got!r}", h)
                else:
                    live = answered(h, "wake_take", clause, worker="worker-B", now=h.now())
                    check(live is None, clause, f"after {where} handed run {rid!r} out, it was handed out again while that "
                          f"hand-out's lease is live: {live!r}", h)
                    h.advance(h.lapse_step())
                    got = answered(h, "wake_take", clause, worker="worker-B", now=h.now())
                    check(isinstance(got, dict) and got["run_id"] == rid and got.get("cycle") == 1 and got.get("attempt") == 2
                          and sorted(got["woken_by"]) == ["message", "signal"], clause,
                          f"after {where} handed run {rid!r} out and that hand-out lapsed, the next take gave {got!r}", h)
                again = answered(h, "wake_take", clause, worker="worker-C", now=h.now())
                check(again is None, clause, f"after {where}, wake cycle 1 of {rid!r} was handed out twice: {again!r}", h)
                answered(h, "wake_suspend", clause, run_id=rid, token=got["token"], now=h.now())
                if not crashed:
                    break  # the take passes this point fewer times
