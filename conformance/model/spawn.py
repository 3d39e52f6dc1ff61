"""The spawn profile's operations: spawn (a child recorded in the parent's log), children
(join: the parent reads its children's outcomes) and cancel_tree (cancellation cascading to
every generation)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Accept, Expectation, ModelBase, Refuse, Violation, _Bad

SPAWNED = "child_spawned"


class SpawnOps(ModelBase):
    PROFILE = "spawn"

    def descendants(self, wid: str) -> list[str]:
        """Every descendant of an item, breadth-first in spawn order."""
        out: list[str] = []
        frontier = [wid]
        while frontier:
            frontier = [c for w in frontier for _, c in self.spawned.get(w, ())]
            out += frontier
        return out

    def _op_spawn(self, a: dict[str, Any]) -> Expectation:
        pid, key, now = a["parent_id"], a["key"], a["now"]
        if pid not in self.items:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no work {pid!r}")
        done = next((c for k, c in self.spawned.get(pid, ()) if k == key), None)
        if done is not None:
            return Accept(lambda res: self._replayed(done, res), "spawn.replay", f"{pid} already spawned {done} under {key!r}")
        p = self.items[pid]
        if self.spec.terminal(p["status"]) or p["cancel_requested"]:
            why = "its cancel was requested" if p["cancel_requested"] else f"it is {p['status']}"
            return Refuse(frozenset({"invalid_transition"}), "spawn.live_parent", f"{pid} spawns no new child: {why}")
        ident = (p["source_system"], key, pid)
        if ident in self.identity:
            return Refuse(frozenset({"idempotency_conflict"}), "spawn.replay", f"the unit {ident} exists and is not a child of {pid}")
        root = self.roots.get(pid, pid)
        count = len(self.descendants(root))
        if count >= self.spec.spawn_budget:
            return Refuse(frozenset({"spawn_denied"}), "spawn.budget",
                          f"the tree of {root} has {count} descendants, the budget is {self.spec.spawn_budget}")

        def new(res: Any) -> list[Violation]:
            w = _work_of(res, "spawn.logged_first")
            wid = w.get("work_id")
            if not isinstance(wid, str) or not wid:
                raise _Bad("spawn.mobile", f"the child's work_id must be a non-empty string, got {wid!r}")
            if wid in self.items:
                raise _Bad("spawn.replay", f"a new spawn under {key!r} returned the existing record {wid!r}")
            out = [] if res.get("created") is True else [Violation("spawn.replay", f"a new spawn under {key!r} must report created=true")]
            item = self._new_item(wid, {"source_system": p["source_system"], "source_id": key, "source_run_id": pid,
                                        "priority": p["priority"], "now": now})
            self._begin(wid)
            self._events_before[wid] = 0
            self.order[wid] = len(self.order)
            self.identity[ident] = wid
            self.policies[wid] = None
            self._new_tokens(wid)
            self.events[wid] = []
            self._append(wid, self.spec.operations["create"].event_for(item["status"]), None, item["status"], now, item)
            self._commit(wid, item, {}, self._answer_blame("spawn", "spawn.mobile"))
            # the parent's trail: its record of the child (the parent's snapshot does not change)
            self._events_before[pid] = len(self.events.get(pid, []))
            self.touched.add(pid)
            self._append(pid, SPAWNED, None, None, now, p)
            self.events[pid][-1]["extra"] = {"child_id": (wid, "spawn.logged_first"), "spawn_key": (key, "spawn.logged_first")}
            self.spawned.setdefault(pid, []).append((key, wid))
            self.roots[wid] = root
            return out + self._compare_work(item, w, {}, self._answer_blame("spawn", "spawn.mobile"))

        return Accept(new, "spawn.logged_first", f"{pid} spawns a new child under {key!r}",
                      refused_as={"spawn_denied": "spawn.budget", "invalid_transition": "spawn.live_parent"})

    def _replayed(self, child: str, res: Any) -> list[Violation]:
        w = _work_of(res, "spawn.replay")
        out = [] if res.get("created") is False else [Violation("spawn.replay", f"a replayed spawn must report created=false (child {child})")]
        if w.get("work_id") != child:
            clause = self._stray(w, "spawn.replay")
            return out + [Violation(clause, f"a replayed spawn returned {w.get('work_id')!r}, not the child {child} its parent's log records")]
        self.touched.add(child)
        # the record a replay hands back is the child as it is now: a field no clause owns (its status)
        # that differs is the replay's to answer for, as a repeated create's is the unit's
        return out + self.check_work(w, child, blame="spawn.replay")

    def _op_children(self, a: dict[str, Any]) -> Expectation:
        pid = a["work_id"]
        if pid not in self.items:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no work {pid!r}")
        want = [c for _, c in self.spawned.get(pid, ())]

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, list) or not all(isinstance(x, Mapping) for x in res):
                raise _Bad("spawn.join", f"children must return a list of snapshots, got {res!r:.80}")
            got = [x.get("work_id") for x in res]
            if got != want:
                return [Violation("spawn.join", f"children({pid}) gave {got}, its log records {want} in that order")]
            return [v for x in res for v in self.check_work(x)]

        return Accept(h, "spawn.join", "reading children always works")

    def _op_cancel_tree(self, a: dict[str, Any]) -> Expectation:
        wid, now = a["work_id"], a["now"]
        if wid not in self.items:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no work {wid!r}")
        tree = [wid, *self.descendants(wid)]

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, list) or not all(isinstance(x, Mapping) for x in res):
                raise _Bad("spawn.cancel_cascade", f"cancel_tree must return a list of snapshots, got {res!r:.80}")
            got = {x.get("work_id"): x for x in res}
            out: list[Violation] = []
            if sorted(map(str, got)) != sorted(tree) or len(got) != len(res):
                out.append(Violation("spawn.cancel_cascade", f"cancel_tree({wid}) returned {sorted(map(str, got))}, "
                                     f"the tree is {sorted(tree)}"))
            for w in tree:
                exp = self._op_cancel({"work_id": w, "now": now, "reason": a.get("reason")})  # type: ignore[attr-defined]
                snap = got.get(w)
                if isinstance(exp, Accept):
                    found = exp.handler(snap if snap is not None else self.items[w])
                    self.blame[w] = {"status": "spawn.cancel_cascade", "cancel_requested": "spawn.cancel_cascade"}
                    self.blame_default[w] = "spawn.cancel_cascade"
                    if snap is not None:
                        out += [Violation("spawn.cancel_cascade", v.message) for v in found]
                elif snap is not None:
                    out += self.check_work(snap, w)
            self.touched.update(tree)
            return out

        return Accept(h, "spawn.cancel_cascade", f"cancelling the tree of {wid} ({len(tree)} items)")


def _work_of(res: Any, clause: str) -> Mapping[str, Any]:
    if not isinstance(res, Mapping) or not isinstance(res.get("work"), Mapping):
        raise _Bad(clause, f"expected {{work, created}}, got {res!r:.80}")
    return res["work"]
