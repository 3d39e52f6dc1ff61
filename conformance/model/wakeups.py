"""The wakeups profile's operations: suspended runs, the wakeups that make them pending, and the
take that hands a pending run out once per wake cycle.

A run is ``suspended``, ``pending`` or ``running``.  Its ``wakeups`` are the kinds fired since
its last hand-out, compared as a multiset (the contract leaves their order open).  A timer is
due once now >= timer_at; whether a snapshot already shows a suspended run with a due timer as
pending (with ``timer`` among its wakeups) is left open, and so is which of several pending runs
a take hands out: the model checks the choice is allowed and adopts it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Accept, Expectation, ModelBase, Refuse, Violation, _Bad

TIMER = "timer"

# the clause that says what a wakeup does to a run in each state
STATE_CLAUSE = {"suspended": "wakeups.wake", "pending": "wakeups.coalesce", "running": "wakeups.kept"}


class WakeupsOps(ModelBase):
    PROFILE = "wakeups"

    def _due(self, run: Mapping[str, Any], now: float) -> bool | None:
        """Whether the run's timer is due at ``now`` (None: too close to call)."""
        at = run["timer_at"]
        if at is None:
            return False
        if self._ambiguous(now, at):
            return None
        return now >= at

    def _snapshot_ok(self, run: Mapping[str, Any], res: Any, now: float | None, clause_of: Mapping[str, str]) -> list[Violation]:
        if not isinstance(res, Mapping):
            raise _Bad(clause_of["state"], f"expected a run snapshot, got {res!r:.80}")
        rid = run["run_id"]
        due = self._due(run, now) if now is not None else (run["timer_at"] is not None and None)
        states, kinds = {run["state"]}, [sorted(run["wakeups"])]
        if run["timer_at"] is not None and due is not False:  # a due timer may already show
            kinds.append(sorted([*run["wakeups"], TIMER]))
            if run["state"] == "suspended":
                states.add("pending")
        out = []
        if res.get("run_id") != rid:
            out.append(Violation(clause_of["state"], f"snapshot names run {res.get('run_id')!r}, expected {rid!r}"))
        if res.get("state") not in states:
            out.append(Violation(clause_of["state"], f"run {rid!r} is {res.get('state')!r}, the contract says {'/'.join(sorted(states))}"))
        got = res.get("wakeups")
        if not isinstance(got, list) or sorted(map(str, got)) not in kinds:
            out.append(Violation(clause_of["wakeups"], f"run {rid!r} lists wakeups {got!r}, the contract says {run['wakeups']}"))
        if res.get("cycle") != run["cycle"]:
            out.append(Violation("wakeups.coalesce", f"run {rid!r} reports wake cycle {res.get('cycle')!r}, expected {run['cycle']}"))
        if not self._same("time", run["timer_at"], res.get("timer_at")):
            out.append(Violation("wakeups.timer", f"run {rid!r} has timer_at {res.get('timer_at')!r}, expected {run['timer_at']!r}"))
        return out

    def _op_wake_suspend(self, a: dict[str, Any]) -> Expectation:
        rid = a["run_id"]
        run = self.runs.get(rid)
        if run is not None and run["state"] != "running":
            return Refuse(frozenset({"invalid_transition"}), "wakeups.wake", f"run {rid!r} is {run['state']}, not running")

        def h(res: Any) -> list[Violation]:
            if run is None:
                new = {"run_id": rid, "state": "suspended", "cycle": 0, "wakeups": [], "timer_at": a.get("timer_at")}
                self.runs[rid] = new
                return self._snapshot_ok(new, res, a["now"], {"state": "wakeups.wake", "wakeups": "wakeups.wake"})
            kept = bool(run["wakeups"])
            run.update(state="pending" if kept else "suspended", timer_at=a.get("timer_at"))
            clause = "wakeups.kept" if kept else "wakeups.wake"
            return self._snapshot_ok(run, res, a["now"], {"state": clause, "wakeups": clause})

        return Accept(h, "wakeups.wake", f"run {rid!r} can be suspended")

    def _op_wake_fire(self, a: dict[str, Any]) -> Expectation:
        rid = a["run_id"]
        run = self.runs.get(rid)
        if run is None:
            return Refuse(frozenset({"not_found"}), "wakeups.wake", f"no run {rid!r}")
        clause = STATE_CLAUSE[run["state"]]

        def h(res: Any) -> list[Violation]:
            run["wakeups"] = [*run["wakeups"], a["kind"]]
            if run["state"] == "suspended":
                run["state"] = "pending"
            return self._snapshot_ok(run, res, a["now"], {"state": clause, "wakeups": clause})

        return Accept(h, clause, f"a {a['kind']} wakeup for run {rid!r} is always accepted")

    def _op_wake_take(self, a: dict[str, Any]) -> Expectation:
        now = a["now"]

        def h(res: Any) -> list[Violation]:
            if res is None:
                for run in self.runs.values():
                    if run["state"] == "pending":
                        return [Violation("wakeups.wake", f"take answered null although run {run['run_id']!r} is pending")]
                    if run["state"] == "suspended" and self._due(run, now) is True:
                        return [Violation("wakeups.timer", f"take answered null although the timer of run {run['run_id']!r} "
                                          f"was due at {run['timer_at']!r}")]
                return []
            if not isinstance(res, Mapping):
                raise _Bad("wakeups.coalesce", f"expected a hand-out or null, got {res!r:.80}")
            rid = res.get("run_id")
            run = self.runs.get(rid) if isinstance(rid, str) else None
            if run is None:
                return [Violation("wakeups.wake", f"take handed out unknown run {rid!r}")]
            due = self._due(run, now)
            if run["state"] == "running":
                return [Violation("wakeups.coalesce", f"run {rid!r} handed out again in wake cycle {run['cycle']} while it is running")]
            if run["state"] == "suspended" and due is False:
                if run["timer_at"] is not None:
                    return [Violation("wakeups.timer", f"run {rid!r} handed out at {now!r} before its timer ({run['timer_at']!r})")]
                return [Violation("wakeups.wake", f"suspended run {rid!r} handed out without a wakeup")]
            out = []
            if res.get("cycle") != run["cycle"] + 1:
                out.append(Violation("wakeups.coalesce", f"run {rid!r} handed out as wake cycle {res.get('cycle')!r}, expected {run['cycle'] + 1}"))
            if res.get("worker") != a["worker"]:
                out.append(Violation("wakeups.wake", f"run {rid!r} handed to {res.get('worker')!r}, the taker is {a['worker']!r}"))
            got = res.get("woken_by")
            base = sorted(run["wakeups"])
            allowed = {True: [sorted([*base, TIMER])], False: [base], None: [base, sorted([*base, TIMER])]}[due]
            if not isinstance(got, list) or sorted(map(str, got)) not in allowed:
                only_timer = isinstance(got, list) and sorted(x for x in map(str, got) if x != TIMER) == sorted(x for x in base if x != TIMER)
                clause = "wakeups.timer" if only_timer else "wakeups.coalesce"
                out.append(Violation(clause, f"run {rid!r} handed out woken by {got!r}, the wakeups merged into it are "
                                     f"{run['wakeups'] + ([TIMER] if due else [])}"))
            run.update(state="running", cycle=run["cycle"] + 1, wakeups=[], timer_at=None)
            return out

        return Accept(h, "wakeups.wake", "take always answers")

    def _op_wake_get(self, a: dict[str, Any]) -> Expectation:
        rid = a["run_id"]
        run = self.runs.get(rid)
        if run is None:
            return Refuse(frozenset({"not_found"}), "wakeups.wake", f"no run {rid!r}")
        clause = STATE_CLAUSE[run["state"]]

        def h(res: Any) -> list[Violation]:
            return self._snapshot_ok(run, res, None, {"state": clause, "wakeups": clause})

        return Accept(h, clause, f"run {rid!r} can be read")
