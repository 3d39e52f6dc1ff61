"""Clause tests of the wakeups profile: what wakes a suspended run, and that wakeups fired while
it is pending merge into one hand-out."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ledgercheck.spec import Spec

from ..harness import Harness
from . import CaseFn, case, cases, check


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
        h.do("wake_suspend", run_id="run-1")


@case("wakeups.timer", "not-before-its-instant")
def _timer(h: Harness) -> None:
    at = h.now() + 60.0 * h.scale
    h.do("wake_suspend", run_id="run-1", timer_at=at)
    h.advance(30.0)
    check(_take(h) is None, "wakeups.timer", "the run was handed out before its timer", h)
    h.advance(31.0)
    out = _take(h)
    check(out is not None and out["run_id"] == "run-1" and out["woken_by"] == ["timer"], "wakeups.timer", f"the due timer gave {out!r}", h)


@case("wakeups.timer", "merges-with-a-message")
def _timer_merge(h: Harness) -> None:
    at = h.now() + 10.0 * h.scale
    h.do("wake_suspend", run_id="run-1", timer_at=at)
    _fire(h, "run-1", "message")
    h.advance(11.0)
    out = _take(h)
    check(out is not None and sorted(out["woken_by"]) == ["message", "timer"], "wakeups.timer", f"take gave {out!r}", h)
    check(_take(h) is None, "wakeups.coalesce", "the timer handed the run out a second time", h)


@case("wakeups.kept", "fired-while-running")
def _kept(h: Harness) -> None:
    h.do("wake_suspend", run_id="run-1")
    _fire(h, "run-1", "message")
    _take(h)
    got = _fire(h, "run-1", "child_done")  # the run is running: the wakeup waits for its next cycle
    check(got["state"] == "running", "wakeups.kept", f"the running run reads {got}", h)
    after = h.do("wake_suspend", run_id="run-1").value
    check(after["state"] == "pending", "wakeups.kept", f"suspending with a kept wakeup left the run {after['state']}", h)
    out = _take(h)
    check(out is not None and out["woken_by"] == ["child_done"] and out["cycle"] == 2, "wakeups.kept", f"next cycle {out!r}", h)
