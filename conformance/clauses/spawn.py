"""Clause tests of the spawn profile (spec/contract/clauses/spawn.yaml)."""


from __future__ import annotations

from ..harness import Harness, NotApplicable
from . import case, check, durable

SPAWNED = "child_spawned"


def _spawn(h: Harness, parent: str, key: str) -> str:
    out = h.do("spawn", parent_id=parent, key=key)
    return out.value["work"]["work_id"]


def _queued_with_identity(h: Harness, parent: str, key: str) -> list[str]:
    src = h.item(parent)["source_system"]
    return [w["work_id"] for w in h.raw("list").value
            if (w.get("source_system"), w.get("source_id"), w.get("source_run_id")) == (src, key, parent)]


# ------------------------------------------------------------------ spawn
@case("spawn.logged_first", "parent-log-records-child")
def _logged_first(h: Harness) -> None:
    h.need("spawn", "list")
    parent = h.create(source_id="supervisor")
    child = _spawn(h, parent, "research")
    rec = [e for e in (h.trail_of(parent, "spawn.logged_first") or []) if e.get("type") == SPAWNED]
    if h.claims("events"):
        check(len(rec) == 1 and (rec[0].get("data") or {}).get("child_id") == child, "spawn.logged_first",
              f"the parent's trail records {[(e.get('data') or {}) for e in rec]} for child {child}", h)
    # a replay, as a worker that took the parent over after a crash would send it: the log is
    # consulted before anything is enqueued, so no second child appears anywhere
    for _ in range(2):
        again = h.do("spawn", parent_id=parent, key="research")
        check(again.value["work"]["work_id"] == child, "spawn.logged_first", "a replay returned another child", h)
    found = _queued_with_identity(h, parent, "research")
    check(found == [child], "spawn.logged_first", f"the spawn key 'research' of {parent} has records {found}", h)
    h.do("list")


@case("spawn.logged_first", "crash-inside-spawn-then-replay")
def _crash_replay(h: Harness) -> None:
    """A worker dies inside a spawn, at each crash point of the adapter the spawn passes (a real
    SIGKILL while the adapter blocks there); after a reopen the replay (same parent, same key)
    must leave exactly one new item, the child the parent's log records.  An implementation
    that enqueues before it logs leaves a second child here.  Needs an adapter that can be
    stopped at its own crash points (the wire protocol's ``arm``) and durable state."""
    points = list(h.client.crash_points) if hasattr(h.client, "crash_points") else []
    if not points or not callable(getattr(h.client, "arm", None)):
        raise NotApplicable("the adapter declares no crash points it can be stopped at (arm)")
    h.need("spawn", "list", "children")
    with durable(h) as reopen:
        for point in points:
            for occurrence in (1, 2, 3):
                key = f"crash-{point}-{occurrence}"
                parent = h.create(source_id=f"parent-{key}")  # a tree of its own: the budget never binds
                before = {w["work_id"] for w in h.raw("list").value}
                armed = h.client.arm(point, occurrence)
                if not armed.ok:
                    raise NotApplicable(f"arm {point}: {armed.code}: {armed.message}")
                first = h.client.call("spawn", parent_id=parent, key=key, now=h.now())
                reopen()
                crashed = not first.ok and first.code == "adapter_crashed"
                again = h.raw("spawn", parent_id=parent, key=key, now=h.now())
                check(again.ok, "spawn.logged_first", f"the replay after a crash at {point} failed: {again.code} {again.message}", h)
                child = again.value["work"]["work_id"]
                new = {w["work_id"] for w in h.raw("list").value} - before
                logged = [c["work_id"] for c in h.raw("children", work_id=parent).value if c.get("source_id") == key]
                check(new == {child} and logged == [child], "spawn.logged_first",
                      f"after a {'crash at ' + point if crashed else 'spawn'} (occurrence {occurrence}) and a replay, "
                      f"the new items are {sorted(new)}, the parent's log records {logged} for {key!r}", h)
                if not crashed:
                    break  # the spawn passes this point fewer times


def _both_claimed(h: Harness) -> None:
    if "wakeups" not in h.client.profiles:
        raise NotApplicable("spawn.wakes_parent is judged only when wakeups is claimed too")


@case("spawn.wakes_parent", "finished-children-wake-the-parent-run")
def _wakes_parent(h: Harness) -> None:
    _both_claimed(h)
    h.need("spawn", "wake_suspend", "wake_get", "wake_take")
    kind = h.spec.spawn_wakeup
    parent = h.create(source_id="waiter")
    h.do("wake_suspend", run_id=parent)  # the parent's run: named by its work_id
    first = _spawn(h, parent, "part-1")
    second = _spawn(h, parent, "part-2") if h.spec.spawn_budget >= 2 else None
    h.drive(first, "done")
    run = h.do("wake_get", run_id=parent).value
    check(run["state"] == "pending" and run["wakeups"] == [kind], "spawn.wakes_parent",
          f"after its child {first} finished, the parent's run reads {run}", h)
    out = h.do("wake_take", worker="worker-A").value
    check(isinstance(out, dict) and out["run_id"] == parent and out["woken_by"] == [kind], "spawn.wakes_parent",
          f"the woken parent's run was handed out as {out!r}", h)
    if second is None:
        return
    h.drive(second, "failed")  # while the parent's run runs: kept for its next wake cycle
    run = h.do("wake_get", run_id=parent).value
    check(run["wakeups"] == [kind], "spawn.wakes_parent", f"after its child {second} failed, the running parent's run reads {run}", h)
    h.do("wake_suspend", run_id=parent, token=out["token"])


@case("spawn.wakes_parent", "crash-inside-child-close-out")
def _crash_close_out(h: Harness) -> None:
    """A worker's close-out of a child dies inside the adapter, at each crash point of the adapter
    the close-out passes (a real SIGKILL while the adapter blocks there).  After a reopen the child
    is terminal exactly when its parent's run has the wakeup: an implementation that wakes the
    parent in a step of its own leaves a finished child whose parent never wakes.  A close-out the
    crash undid is repeated (the lease is still live) and must then wake the parent.  Needs an
    adapter that can be stopped at its own crash points (the wire protocol's ``arm``) and durable
    state."""
    _both_claimed(h)
    window = h.spec.promise_windows.get("child_wakes_parent")
    clause = window.clause if window is not None else "spawn.wakes_parent"
    points = list(h.client.crash_points) if hasattr(h.client, "crash_points") else []
    if not points or not callable(getattr(h.client, "arm", None)):
        raise NotApplicable("the adapter declares no crash points it can be stopped at (arm)")
    h.need("spawn", "claim", "close_out", "get", "wake_suspend", "wake_get")
    kind = h.spec.spawn_wakeup

    def woken(parent: str) -> bool:
        run = h.raw("wake_get", run_id=parent).value
        return run["state"] == "pending" and run["wakeups"] == [kind]

    with durable(h) as reopen:
        for point in points:
            for occurrence in (1, 2, 3):
                key = f"crash-{point}-{occurrence}"
                parent = h.create(source_id=f"parent-{key}")  # a tree of its own: the budget never binds
                h.raw("wake_suspend", run_id=parent, now=h.now())
                child = h.raw("spawn", parent_id=parent, key=key, now=h.now()).value["work"]["work_id"]
                lease = h.raw("claim", owner="worker-A", work_id=child, now=h.now()).value
                if not isinstance(lease, dict) or lease.get("work_id") != child:
                    raise NotApplicable("the implementation cannot claim a given item (only the next queued one)")
                armed = h.client.arm(point, occurrence)
                if not armed.ok:
                    raise NotApplicable(f"arm {point}: {armed.code}: {armed.message}")
                first = h.client.call("close_out", work_id=child, token=lease["lease_token"], status="done", now=h.now())
                reopen()
                crashed = not first.ok and first.code == "adapter_crashed"
                where = f"a crash at {point} (occurrence {occurrence})" if crashed else "a close-out"
                status = h.raw("get", work_id=child).value["status"]
                finished = h.spec.terminal(status)
                check(finished == woken(parent), clause, f"after {where} the child {child} is {status} and its parent's "
                      f"run reads {h.raw('wake_get', run_id=parent).value}", h)
                if not finished:  # the crash undid the close-out: the worker repeats it
                    again = h.raw("close_out", work_id=child, token=lease["lease_token"], status="done", now=h.now())
                    check(again.ok and woken(parent), clause, f"after {where} undid it, the repeated close-out answered "
                          f"{again.code or 'ok'} and the parent's run reads {h.raw('wake_get', run_id=parent).value}", h)
                if not crashed:
                    break  # the close-out passes this point fewer times


@case("spawn.replay", "same-key-same-child")
def _replay(h: Harness) -> None:
    parent = h.create(source_id="planner")
    a = _spawn(h, parent, "step-1")
    b = _spawn(h, parent, "step-2") if h.spec.spawn_budget >= 2 else _spawn(h, h.create(source_id="planner-b"), "step-2")
    check(a != b, "spawn.replay", "two spawn keys gave one child", h)
    out = h.do("spawn", parent_id=parent, key="step-1", payload={"again": True})
    check(out.value["created"] is False and out.value["work"]["work_id"] == a, "spawn.replay",
          f"replaying step-1 gave {out.value!r:.120}", h)
    other = h.create(source_id="planner-2")  # another parent's key of the same name is another child
    c = _spawn(h, other, "step-1")
    check(c not in (a, b), "spawn.replay", "a key was shared across parents", h)
    h.do("children", work_id=parent) if h.claims("children") else None


@case("spawn.mobile", "any-worker-claims-child")
def _mobile(h: Harness) -> None:
    parent = h.create(source_id="lead")
    h.claim(parent, owner="worker-a")
    child = _spawn(h, parent, "sub")
    check(h.item(child)["status"] == h.spec.initial_status, "spawn.mobile", "the child is not queued", h)
    h.need_claim_by_id()
    h.claim(child, owner="worker-b")  # another worker than the parent's
    check(h.item(child)["owner"] == "worker-b", "spawn.mobile", "the child was not claimed by the second worker", h)
    h.trail_of(child, "spawn.mobile")


@case("spawn.live_parent", "terminal-and-cancelling")
def _live_parent(h: Harness) -> None:
    done = h.create(source_id="finished")
    h.drive(done, "done")
    out = h.do("spawn", parent_id=done, key="late")
    check(not out.ok, "spawn.live_parent", "a finished parent spawned a child", h)
    if h.claims("cancel"):
        running = h.create(source_id="stopping")
        h.claim(running)
        h.do("cancel", work_id=running)
        out = h.do("spawn", parent_id=running, key="late")
        check(not out.ok, "spawn.live_parent", "a parent whose cancel was requested spawned a child", h)
    h.do("spawn", parent_id="no-such-work", key="x")


@case("spawn.budget", "counted-on-root")
def _budget(h: Harness) -> None:
    budget = h.spec.spawn_budget
    root = h.create(source_id="root")
    # a chain, one child per generation: a per-branch (or per-parent) count never sees the total
    node = root
    for i in range(budget):
        node = _spawn(h, node, f"gen-{i}")
    out = h.do("spawn", parent_id=node, key="one-too-many")
    check(not out.ok and out.code == "spawn_denied", "spawn.budget", f"spawn past the budget answered {out.code or 'ok'}", h)
    out = h.do("spawn", parent_id=root, key="sibling")
    check(not out.ok and out.code == "spawn_denied", "spawn.budget", f"a sibling past the budget answered {out.code or 'ok'}", h)
    h.do("spawn", parent_id=root, key="gen-0")  # a replay is not a new spawn: still answered
    other = h.create(source_id="another-root")  # another tree has a budget of its own
    _spawn(h, other, "first")


@case("spawn.cancel_cascade", "three-generations")
def _cascade(h: Harness) -> None:
    # a chain as deep as the budget allows (three generations), a sibling with what is left; the
    # second generation runs (it gets the intent and honours it at its next close-out)
    budget = h.spec.spawn_budget
    root = h.create(source_id="tree")
    chain = [root]
    for i in range(min(3, budget)):
        chain.append(_spawn(h, chain[-1], f"gen-{i}"))
    others = [_spawn(h, root, "sibling")] if budget > 3 else []
    running = chain[2] if len(chain) > 2 else None
    if running is not None:
        h.need_claim_by_id()
        h.claim(running, owner="worker-g")
    h.do("cancel_tree", work_id=root, reason="user stopped")
    for w in [*chain, *others]:
        if w != running:
            check(h.item(w)["status"] == "cancelled", "spawn.cancel_cascade", f"{w} is {h.item(w)['status']}", h)
    if running is not None:
        check(h.item(running)["cancel_requested"] is True, "spawn.cancel_cascade", "the running grandchild got no intent", h)
        h.do("close_out", work_id=running, token=h.token(running), status="cancelled")
    h.do("list")


@case("spawn.join", "children-outcomes")
def _join(h: Harness) -> None:
    budget = h.spec.spawn_budget
    parent = h.create(source_id="joiner")
    kids = [_spawn(h, parent, f"part-{i}") for i in range(min(3, budget))]
    if budget > len(kids):
        _spawn(h, kids[0], "nested")  # a grandchild is not a direct child
    h.drive(kids[-1], "done")
    out = h.do("children", work_id=parent)
    check([w["work_id"] for w in out.value] == kids, "spawn.join", "children are not the spawns in order", h)
    check(out.value[-1]["status"] == "done", "spawn.join", "a finished child's outcome is not seen", h)
    h.do("children", work_id=kids[0])
    h.do("children", work_id="no-such-work")


