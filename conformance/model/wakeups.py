"""The wakeups profile's operations: suspended runs, the wakeups that make them pending, and the
take that hands a pending run out once per wake cycle.

A run is ``suspended``, ``pending`` or ``running``.  Its ``wakeups`` are the kinds fired since
its last hand-out, compared as a multiset (the contract leaves their order open).  A timer is
due once now >= timer_at; whether a snapshot already shows a suspended run with a due timer as
pending (with ``timer`` among its wakeups) is left open, and so is which of several pending runs
a take hands out: the model checks the choice is allowed and adopts it.

A take hands a run out under a lease (the contract's ``handouts`` rule, read through
spec/rules.py): a fresh token, expires_at = now + ttl.  The holder's suspend and renew carry the
token; a hand-out lapsed (now > expires_at + grace) is handed out again by a take: the same wake
cycle, its attempt one higher, woken by the lost hand-out's wakeups and those fired since.  Until
a take hands it out again, a lapsed run may read ``running`` or ``pending`` (with the lost
wakeups among its pending ones), and its holder's token may be accepted or refused (both left
open, as for a lane lease).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ledgercheck.spec import rules

from .base import Accept, Expectation, ModelBase, Refuse, Violation, _Bad

TIMER = "timer"

# the clause that says what a wakeup does to a run in each state
STATE_CLAUSE = {"suspended": "wakeups.wake", "pending": "wakeups.coalesce", "running": "wakeups.kept"}
PROFILE = "wakeups"
LIVE, LAPSED, EDGE = "live", "lapsed", "edge"


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

    def _handout(self, run: Mapping[str, Any], now: float | None) -> str | None:
        """The state of a running run's hand-out lease at ``now`` (None: the run is not running;
        at an unknown instant, a lease that may have lapsed is at its edge)."""
        if run["state"] != "running" or run.get("expires_at") is None:
            return None
        limit = rules.handout_lapse(self.spec, PROFILE, run["expires_at"])
        if now is None or self._ambiguous(now, limit):
            return EDGE
        return LAPSED if now > limit else LIVE

    def _snapshot_ok(self, run: Mapping[str, Any], res: Any, now: float | None, clause_of: Mapping[str, str]) -> list[Violation]:
        if not isinstance(res, Mapping):
            raise _Bad(clause_of["state"], f"expected a run snapshot, got {res!r:.80}")
        rid = run["run_id"]
        due = self._due(run, now) if now is not None else (run["timer_at"] is not None and None)
        states, kinds = {run["state"]}, [sorted(run["wakeups"])]
        if self._handout(run, now) in (LAPSED, EDGE):  # a lapsed hand-out may already read pending again
            states.add("pending")
            kinds.append(sorted([*run["handed"], *run["wakeups"]]))
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

    def _fence(self, op: str, run: Mapping[str, Any], a: Mapping[str, Any]) -> tuple[Refuse | None, frozenset[str]]:
        """A refusal when ``a["token"]`` is not the run's live hand-out, and the refusals also
        allowed (stale_lease once the hand-out lapsed or is at its edge: left open)."""
        lease = self._handout(run, a["now"])
        if run["state"] != "running" or a.get("token") != run["token"]:
            why = "a token of an earlier hand-out" if a.get("token") in run["tokens"] else \
                "no token" if a.get("token") is None else "not the token of the run's hand-out"
            return Refuse(frozenset({"stale_lease"}), "wakeups.fencing", f"{op}: {why} for run {run['run_id']!r}"), frozenset()
        # a lapsed hand-out's run may already read pending again: a suspend may then find it not running
        lapsed = frozenset({"stale_lease", "invalid_transition"} if op == "wake_suspend" else {"stale_lease"})
        return None, lapsed if lease in (LAPSED, EDGE) else frozenset()

    def _op_wake_suspend(self, a: dict[str, Any]) -> Expectation:
        rid = a["run_id"]
        run = self.runs.get(rid)
        if run is not None and run["state"] != "running":
            return Refuse(frozenset({"invalid_transition"}), "wakeups.wake", f"run {rid!r} is {run['state']}, not running")
        also: frozenset[str] = frozenset()
        if run is not None:
            refuse, also = self._fence("wake_suspend", run, a)
            if refuse:
                return refuse

        def h(res: Any) -> list[Violation]:
            if run is None:
                new = {"run_id": rid, "state": "suspended", "cycle": 0, "wakeups": [], "timer_at": a.get("timer_at"),
                       "token": None, "expires_at": None, "handed": [], "attempt": 0, "tokens": []}
                self.runs[rid] = new
                return self._snapshot_ok(new, res, a["now"], {"state": "wakeups.wake", "wakeups": "wakeups.wake"})
            kept = bool(run["wakeups"])
            run.update(state="pending" if kept else "suspended", timer_at=a.get("timer_at"), token=None, expires_at=None, handed=[])
            clause = "wakeups.kept" if kept else "wakeups.wake"
            return self._snapshot_ok(run, res, a["now"], {"state": clause, "wakeups": clause})

        return Accept(h, "wakeups.fencing" if run is not None else "wakeups.wake", f"run {rid!r} can be suspended", also_refuse=also)

    def _op_wake_renew(self, a: dict[str, Any]) -> Expectation:
        rid = a["run_id"]
        run = self.runs.get(rid)
        if run is None:
            return Refuse(frozenset({"not_found", "stale_lease"}), "wakeups.fencing", f"no run {rid!r}")
        refuse, also = self._fence("wake_renew", run, a)
        if refuse:
            return refuse
        now = a["now"]

        def h(res: Any) -> list[Violation]:
            want = rules.handout_expiry(self.spec, PROFILE, now)
            out = self._handout_ok(run, res, "wakeups.lease", want, run["cycle"], run["attempt"], run["handed"])
            if isinstance(res, Mapping) and res.get("token") != run["token"]:
                out.append(Violation("wakeups.lease", f"run {rid!r}: renew changed the hand-out's token"))
            # the renewal extends the hand-out it was given: the same holder, named as the taker gave it
            if isinstance(res, Mapping) and res.get("worker") != run.get("worker"):
                out.append(Violation("wakeups.lease", f"run {rid!r}: renew answers the hand-out as held by "
                                     f"{res.get('worker')!r}, the taker was {run.get('worker')!r}"))
            run["expires_at"] = res.get("expires_at") if isinstance(res, Mapping) and self._same("time", want, res.get("expires_at")) else want
            return out

        # the live token's renewal is what wakeups.lease says happens; refusing it with the fence's
        # code misjudges which hand-out is live, the judgement wakeups.fencing is about (as a work
        # item's and a lane's renewal: the renewal's own clause, the fence's for a stale refusal)
        fence = self.spec.handouts[PROFILE].fence
        return Accept(h, "wakeups.lease", f"the holder renews the hand-out of run {rid!r}", also_refuse=also,
                      refused_as={fence: "wakeups.fencing"})

    def _handout_ok(self, run: Mapping[str, Any], res: Any, clause: str, expires: float, cycle: int, attempt: int,
                    woken: list[str] | None) -> list[Violation]:
        """The fields of a hand-out answer other than its worker (``woken``: None when checked apart)."""
        if not isinstance(res, Mapping):
            raise _Bad(clause, f"expected a hand-out, got {res!r:.80}")
        rid, out = run["run_id"], []
        if res.get("run_id") != rid:
            out.append(Violation(clause, f"hand-out names run {res.get('run_id')!r}, expected {rid!r}"))
        if not self._same("time", expires, res.get("expires_at")):
            out.append(Violation("wakeups.lease", f"run {rid!r}: hand-out expires at {res.get('expires_at')!r}, "
                                 f"the contract says now + ttl = {expires!r}"))
        tok = res.get("token")
        if not isinstance(tok, str) or not tok:
            out.append(Violation("wakeups.lease", f"run {rid!r}: hand-out carries no token ({tok!r})"))
        if res.get("cycle") != cycle:
            out.append(Violation(clause, f"run {rid!r} handed out as wake cycle {res.get('cycle')!r}, expected {cycle}"))
        if res.get("attempt") != attempt:
            out.append(Violation(clause, f"run {rid!r}: hand-out attempt {res.get('attempt')!r}, expected {attempt}"))
        if woken is not None and (not isinstance(res.get("woken_by"), list) or sorted(map(str, res["woken_by"])) != sorted(woken)):
            out.append(Violation(clause, f"run {rid!r}: hand-out woken by {res.get('woken_by')!r}, expected {woken}"))
        return out

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

    def _take_null_ok(self, now: float) -> list[Violation]:
        for run in self.runs.values():
            if run["state"] == "pending":
                return [Violation("wakeups.wake", f"take answered null although run {run['run_id']!r} is pending")]
            if run["state"] == "suspended" and self._due(run, now) is True:
                return [Violation("wakeups.timer", f"take answered null although the timer of run {run['run_id']!r} "
                                  f"was due at {run['timer_at']!r}")]
            if self._handout(run, now) == LAPSED:
                return [Violation("wakeups.redeliver", f"take answered null although the hand-out of run {run['run_id']!r} "
                                  f"(wake cycle {run['cycle']}) lapsed at {rules.handout_lapse(self.spec, PROFILE, run['expires_at'])!r}")]
        return []

    def _redelivered(self, run: dict[str, Any], res: Mapping[str, Any], a: Mapping[str, Any]) -> list[Violation]:
        """A take handed out a running run: allowed only once its hand-out lapsed, as the same cycle."""
        rid, now = run["run_id"], a["now"]
        if self._handout(run, now) == LIVE:
            return [Violation("wakeups.coalesce", f"run {rid!r} handed out again in wake cycle {run['cycle']} while it is running "
                              f"(its hand-out lives until {rules.handout_lapse(self.spec, PROFILE, run['expires_at'])!r})")]
        after = rules.redelivery(self.spec, PROFILE, run["cycle"], run["handed"], run["wakeups"])
        out = self._handout_ok(run, res, "wakeups.redeliver", rules.handout_expiry(self.spec, PROFILE, now), after.cycle,
                               run["attempt"] + 1, None)
        got = res.get("woken_by")
        if not isinstance(got, list) or sorted(map(str, got)) != sorted(after.wakeups):
            out.append(Violation("wakeups.redeliver_kept", f"run {rid!r} handed out again woken by {got!r}; the lost hand-out "
                                 f"carried {run['handed']} and {run['wakeups']} fired since"))
        if res.get("token") in run["tokens"]:
            out.append(Violation("wakeups.redeliver", f"run {rid!r} handed out again with the lost hand-out's token"))
        if res.get("worker") != a["worker"]:
            out.append(Violation("wakeups.wake", f"run {rid!r} handed to {res.get('worker')!r}, the taker is {a['worker']!r}"))
        self._hold(run, res, now, after.cycle, run["attempt"] + 1, list(after.wakeups), a["worker"])
        return out

    def _hold(self, run: dict[str, Any], res: Mapping[str, Any], now: float, cycle: int, attempt: int, woken: list[str],
              worker: str) -> None:
        want = rules.handout_expiry(self.spec, PROFILE, now)
        tok = res.get("token")
        run.update(state="running", cycle=cycle, attempt=attempt, wakeups=[], timer_at=None, handed=woken, token=tok, worker=worker,
                   expires_at=res.get("expires_at") if self._same("time", want, res.get("expires_at")) else want)
        run["tokens"].append(tok)

    def _op_wake_take(self, a: dict[str, Any]) -> Expectation:
        now = a["now"]

        def h(res: Any) -> list[Violation]:
            if res is None:
                return self._take_null_ok(now)
            if not isinstance(res, Mapping):
                raise _Bad("wakeups.coalesce", f"expected a hand-out or null, got {res!r:.80}")
            rid = res.get("run_id")
            run = self.runs.get(rid) if isinstance(rid, str) else None
            if run is None:
                return [Violation("wakeups.wake", f"take handed out unknown run {rid!r}")]
            due = self._due(run, now)
            if run["state"] == "running":
                return self._redelivered(run, res, a)
            if run["state"] == "suspended" and due is False:
                if run["timer_at"] is not None:
                    return [Violation("wakeups.timer", f"run {rid!r} handed out at {now!r} before its timer ({run['timer_at']!r})")]
                return [Violation("wakeups.wake", f"suspended run {rid!r} handed out without a wakeup")]
            out = self._handout_ok(run, res, "wakeups.coalesce", rules.handout_expiry(self.spec, PROFILE, now), run["cycle"] + 1, 1, None)
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
                woken = allowed[0]
            else:
                woken = list(map(str, got))
            if res.get("token") in run["tokens"]:
                out.append(Violation("wakeups.lease", f"run {rid!r} handed out with the token of an earlier hand-out"))
            self._hold(run, res, now, run["cycle"] + 1, 1, woken, a["worker"])
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
