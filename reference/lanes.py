"""Lane and wakeup operations of the reference ledger (profiles ``lanes`` and ``wakeups``).

A mixin of :class:`ledgercheck.reference.ledger.Ledger`, like ``journal.py``: every write is one
transaction of the ledger's (``self._tx``), arguments are checked against the contract first, and
the timings come from the Spec (a lane lease lives the default lease ttl and lapses after its
grace; the wakeup kinds are the contract's).

Lanes: one row per (session key, lane) holds its lease; ``lane_task`` holds the lane's follow-up
work in arrival order, ``queued``, ``handed`` (to the lease of version ``handed_version``) or
``done``.  Whenever the lease changes hands (released, or taken over after it lapsed) the tasks
handed out under the old lease go back to ``queued`` at their place.

Wakeups: one row per run, ``suspended``, ``pending`` or ``running``, with the wakeups merged into
its next hand-out (a JSON list of kinds, in firing order) and its timer.  A wakeup on a pending run
only joins the list: the run stays one entry, so one take hands it out once.  A running run holds
its hand-out's lease (``token``, ``expires_at``, the wakeups it carried in ``handed`` and its
``attempt``); the contract's ``handouts`` rule (spec/rules.py) says when it lapsed and what the
next take hands out then: the same wake cycle, with ``handed`` and the wakeups fired since.  The
rule is applied by the take itself (a lapsed run reads ``running`` until a take hands it out).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

from ledgercheck.spec import Spec, rules
from ledgercheck.transport.protocol import LedgerError

from .rows import decode, encode

_LANE = "SELECT owner, token, version, expires_at, released FROM lane WHERE session_key = ? AND lane = ?"
_TASKS = "SELECT task_id, body, state FROM lane_task WHERE session_key = ? AND lane = ? AND state <> 'done' ORDER BY arrival"
_RUN = "SELECT run_id, state, cycle, wakeups, timer_at FROM wake_run WHERE run_id = ?"
_HOLD = "SELECT run_id, state, cycle, wakeups, timer_at, token, expires_at, handed, attempt, worker FROM wake_run WHERE run_id = ?"
_WAKE = "wakeups"  # the profile whose hand-out rule applies


def _task(r: tuple[Any, ...]) -> dict[str, Any]:
    return {"task_id": r[0], "body": None if r[1] is None else decode(r[1]), "state": r[2]}


def _run(r: tuple[Any, ...]) -> dict[str, Any]:
    return {"run_id": r[0], "state": r[1], "cycle": r[2], "wakeups": decode(r[3]), "timer_at": r[4]}




class LaneOps:
    # provided by Ledger
    spec: Spec
    _tx: Any
    _check: Callable[[str, Mapping[str, Any]], None]
    _read: Callable[..., list[Any]]
    _token: Callable[[], str]

    # ------------------------------------------------------------------ lanes
    def _lapsed(self, expires_at: float, now: float) -> bool:
        return now > expires_at + self.spec.lease_default.grace

    def _lease_row(self, cur: sqlite3.Cursor, session_key: str, lane: str, token: Any, now: float, op: str) -> tuple[Any, ...]:
        """The lane's row when ``token`` is its live lease; stale_lease otherwise."""
        r = cur.execute(_LANE, (session_key, lane)).fetchone()
        if r is None or r[4]:
            raise LedgerError("stale_lease", f"{op}: lane {lane!r} of {session_key!r} has no lease")
        if token != r[1]:
            raise LedgerError("stale_lease", f"{op}: the token is not the live lease of lane {lane!r} (version {r[2]})")
        if self._lapsed(r[3], now):
            raise LedgerError("stale_lease", f"{op}: the lease of lane {lane!r} lapsed at {r[3] + self.spec.lease_default.grace:g}")
        return r

    @staticmethod
    def _hand_back(cur: sqlite3.Cursor, session_key: str, lane: str, now: float) -> None:
        cur.execute("UPDATE lane_task SET state = 'queued', handed_version = NULL, updated_at = ? "
                    "WHERE session_key = ? AND lane = ? AND state = 'handed'", (now, session_key, lane))

    def lane_acquire(self, *, session_key: str, lane: str, owner: str, now: float) -> dict[str, Any] | None:
        self._check("lane_acquire", {"session_key": session_key, "lane": lane, "owner": owner, "now": now})
        now = float(now)
        token = self._token()
        expires = now + self.spec.lease_default.ttl
        with self._tx as cur:
            r = cur.execute(_LANE, (session_key, lane)).fetchone()
            if r is None:
                version = 1
                cur.execute("INSERT INTO lane(session_key, lane, owner, token, version, expires_at, released, updated_at) "
                            "VALUES (?, ?, ?, ?, 1, ?, 0, ?)", (session_key, lane, owner, token, expires, now))
            else:
                if not r[4] and not self._lapsed(r[3], now):
                    return None
                version = r[2] + 1
                self._hand_back(cur, session_key, lane, now)
                cur.execute("UPDATE lane SET owner = ?, token = ?, version = ?, expires_at = ?, released = 0, updated_at = ? "
                            "WHERE session_key = ? AND lane = ?", (owner, token, version, expires, now, session_key, lane))
        return {"session_key": session_key, "lane": lane, "owner": owner, "token": token, "version": version, "expires_at": expires}

    def lane_renew(self, *, session_key: str, lane: str, token: str, now: float) -> dict[str, Any]:
        self._check("lane_renew", {"session_key": session_key, "lane": lane, "token": token, "now": now})
        now = float(now)
        expires = now + self.spec.lease_default.ttl
        with self._tx as cur:
            r = self._lease_row(cur, session_key, lane, token, now, "lane_renew")
            cur.execute("UPDATE lane SET expires_at = ?, updated_at = ? WHERE session_key = ? AND lane = ?",
                        (expires, now, session_key, lane))
        return {"session_key": session_key, "lane": lane, "owner": r[0], "token": r[1], "version": r[2], "expires_at": expires}

    def lane_release(self, *, session_key: str, lane: str, token: str, now: float) -> None:
        self._check("lane_release", {"session_key": session_key, "lane": lane, "token": token, "now": now})
        now = float(now)
        with self._tx as cur:
            self._lease_row(cur, session_key, lane, token, now, "lane_release")
            self._hand_back(cur, session_key, lane, now)
            cur.execute("UPDATE lane SET released = 1, updated_at = ? WHERE session_key = ? AND lane = ?", (now, session_key, lane))

    def lane_push(self, *, session_key: str, lane: str, task_id: str, now: float, body: Any = None) -> dict[str, Any]:
        self._check("lane_push", {"session_key": session_key, "lane": lane, "task_id": task_id, "body": body, "now": now})
        now = float(now)
        with self._tx as cur:
            if cur.execute("SELECT 1 FROM lane_task WHERE session_key = ? AND lane = ? AND task_id = ?",
                           (session_key, lane, task_id)).fetchone():
                return {"queued": False}
            arrival = cur.execute("SELECT ifnull(max(arrival), 0) + 1 FROM lane_task WHERE session_key = ? AND lane = ?",
                                  (session_key, lane)).fetchone()[0]
            cur.execute("INSERT INTO lane_task(session_key, lane, task_id, arrival, body, state, handed_version, updated_at) "
                        "VALUES (?, ?, ?, ?, ?, 'queued', NULL, ?)",
                        (session_key, lane, task_id, arrival, None if body is None else encode(body), now))
        return {"queued": True}

    def lane_next(self, *, session_key: str, lane: str, token: str, now: float) -> dict[str, Any] | None:
        self._check("lane_next", {"session_key": session_key, "lane": lane, "token": token, "now": now})
        now = float(now)
        with self._tx as cur:
            r = self._lease_row(cur, session_key, lane, token, now, "lane_next")
            t = cur.execute("SELECT task_id, body FROM lane_task WHERE session_key = ? AND lane = ? AND state = 'queued' "
                            "ORDER BY arrival LIMIT 1", (session_key, lane)).fetchone()
            if t is None:
                return None
            cur.execute("UPDATE lane_task SET state = 'handed', handed_version = ?, updated_at = ? "
                        "WHERE session_key = ? AND lane = ? AND task_id = ?", (r[2], now, session_key, lane, t[0]))
        return _task((t[0], t[1], "handed"))

    def lane_done(self, *, session_key: str, lane: str, token: str, task_id: str, now: float) -> None:
        self._check("lane_done", {"session_key": session_key, "lane": lane, "token": token, "task_id": task_id, "now": now})
        now = float(now)
        with self._tx as cur:
            r = self._lease_row(cur, session_key, lane, token, now, "lane_done")
            t = cur.execute("SELECT state, handed_version FROM lane_task WHERE session_key = ? AND lane = ? AND task_id = ?",
                            (session_key, lane, task_id)).fetchone()
            if t is None:
                raise LedgerError("not_found", f"lane_done: lane {lane!r} has no task {task_id!r}")
            if t[0] != "handed" or t[1] != r[2]:
                raise LedgerError("invalid_transition", f"lane_done: task {task_id!r} is {t[0]}, not handed to this lease")
            cur.execute("UPDATE lane_task SET state = 'done', handed_version = NULL, updated_at = ? "
                        "WHERE session_key = ? AND lane = ? AND task_id = ?", (now, session_key, lane, task_id))

    def lane_tasks(self, *, session_key: str, lane: str) -> list[dict[str, Any]]:
        self._check("lane_tasks", {"session_key": session_key, "lane": lane})
        return [_task(r) for r in self._read(_TASKS, (session_key, lane))]

    # ------------------------------------------------------------------ wakeups
    @staticmethod
    def _next_ready(cur: sqlite3.Cursor) -> int:
        return int(cur.execute("SELECT ifnull(max(ready), 0) + 1 FROM wake_run").fetchone()[0])

    def _handout_lapsed(self, expires_at: float, now: float) -> bool:
        return now > rules.handout_lapse(self.spec, _WAKE, expires_at)

    def _wake_holder(self, r: tuple[Any, ...], token: Any, now: float, op: str) -> None:
        """Refuses (stale_lease) a write of ``op`` whose token is not the running run's live hand-out."""
        if token is None or token != r[5]:
            raise LedgerError("stale_lease", f"{op}: the token is not the live hand-out of run {r[0]!r} (wake cycle {r[2]})")
        if self._handout_lapsed(r[6], now):
            raise LedgerError("stale_lease", f"{op}: the hand-out of run {r[0]!r} lapsed at "
                              f"{rules.handout_lapse(self.spec, _WAKE, r[6]):g}")

    def wake_suspend(self, *, run_id: str, now: float, timer_at: float | None = None, token: str | None = None) -> dict[str, Any]:
        self._check("wake_suspend", {"run_id": run_id, "timer_at": timer_at, "token": token, "now": now})
        now = float(now)
        timer = None if timer_at is None else float(timer_at)
        with self._tx as cur:
            r = cur.execute(_HOLD, (run_id,)).fetchone()
            if r is None:
                cur.execute("INSERT INTO wake_run(run_id, state, cycle, wakeups, timer_at, worker, ready, updated_at) "
                            "VALUES (?, 'suspended', 0, '[]', ?, NULL, 0, ?)", (run_id, timer, now))
                return _run((run_id, "suspended", 0, "[]", timer))
            if r[1] != "running":
                raise LedgerError("invalid_transition", f"wake_suspend: run {run_id!r} is {r[1]}, not running")
            self._wake_holder(r, token, now, "wake_suspend")
            # wakeups fired while it ran were kept: the run is pending again at once
            state = "pending" if decode(r[3]) else "suspended"
            cur.execute("UPDATE wake_run SET state = ?, timer_at = ?, worker = NULL, ready = ?, token = NULL, expires_at = NULL, "
                        "handed = '[]', updated_at = ? WHERE run_id = ?",
                        (state, timer, self._next_ready(cur) if state == "pending" else 0, now, run_id))
        return _run((run_id, state, r[2], r[3], timer))

    def wake_renew(self, *, run_id: str, token: str, now: float) -> dict[str, Any]:
        self._check("wake_renew", {"run_id": run_id, "token": token, "now": now})
        now = float(now)
        expires = rules.handout_expiry(self.spec, _WAKE, now)
        with self._tx as cur:
            r = cur.execute(_HOLD, (run_id,)).fetchone()
            if r is None:
                raise LedgerError("not_found", f"wake_renew: no run {run_id!r}")
            if r[1] != "running":
                raise LedgerError("stale_lease", f"wake_renew: run {run_id!r} is {r[1]}: no hand-out is live")
            self._wake_holder(r, token, now, "wake_renew")
            cur.execute("UPDATE wake_run SET expires_at = ?, updated_at = ? WHERE run_id = ?", (expires, now, run_id))
        return {"run_id": run_id, "worker": r[9], "cycle": r[2], "woken_by": decode(r[7]), "token": r[5],
                "expires_at": expires, "attempt": r[8]}

    def wake_fire(self, *, run_id: str, kind: str, now: float) -> dict[str, Any]:
        self._check("wake_fire", {"run_id": run_id, "kind": kind, "now": now})
        with self._tx as cur:
            return self._fire(cur, run_id, kind, float(now))

    def _fire(self, cur: sqlite3.Cursor, run_id: str, kind: str, now: float) -> dict[str, Any]:
        r = cur.execute(_RUN, (run_id,)).fetchone()
        if r is None:
            raise LedgerError("not_found", f"wake_fire: no run {run_id!r}")
        kinds = encode([*decode(r[3]), kind])
        if r[1] == "suspended":
            cur.execute("UPDATE wake_run SET state = 'pending', wakeups = ?, ready = ?, updated_at = ? WHERE run_id = ?",
                        (kinds, self._next_ready(cur), now, run_id))
            state = "pending"
        else:  # pending: merged into its one entry; running: kept for its next wake cycle
            cur.execute("UPDATE wake_run SET wakeups = ?, updated_at = ? WHERE run_id = ?", (kinds, now, run_id))
            state = r[1]
        return _run((run_id, state, r[2], kinds, r[4]))

    def _ready_run(self, cur: sqlite3.Cursor, now: float) -> tuple[tuple[Any, ...], int, int, list[str]] | None:
        """The run a take at ``now`` hands out, with its wake cycle, attempt and wakeups: a pending
        run, else a suspended one whose timer is due, else a running one whose hand-out lapsed."""
        cols = "run_id, state, cycle, wakeups, timer_at, token, expires_at, handed, attempt, worker"
        r = cur.execute(f"SELECT {cols} FROM wake_run WHERE state = 'pending' ORDER BY ready LIMIT 1").fetchone()
        if r is None:
            r = cur.execute(f"SELECT {cols} FROM wake_run WHERE state = 'suspended' AND timer_at <= ? "
                            "ORDER BY timer_at, run_id LIMIT 1", (now,)).fetchone()
        if r is not None:
            return r, r[2] + 1, 1, [*decode(r[3]), *(["timer"] if r[4] is not None and r[4] <= now else [])]
        r = cur.execute(f"SELECT {cols} FROM wake_run WHERE state = 'running' AND expires_at < ? "
                        "ORDER BY expires_at, run_id LIMIT 1", (now,)).fetchone()
        if r is None or not self._handout_lapsed(r[6], now):
            return None
        again = rules.redelivery(self.spec, _WAKE, r[2], decode(r[7]), decode(r[3]))
        return r, again.cycle, r[8] + 1, list(again.wakeups)

    def wake_take(self, *, worker: str, now: float) -> dict[str, Any] | None:
        self._check("wake_take", {"worker": worker, "now": now})
        now = float(now)
        token = self._token()
        expires = rules.handout_expiry(self.spec, _WAKE, now)
        with self._tx as cur:
            ready = self._ready_run(cur, now)
            if ready is None:
                return None
            r, cycle, attempt, woken = ready
            cur.execute("UPDATE wake_run SET state = 'running', cycle = ?, wakeups = '[]', timer_at = NULL, worker = ?, "
                        "ready = 0, token = ?, expires_at = ?, handed = ?, attempt = ?, updated_at = ? WHERE run_id = ?",
                        (cycle, worker, token, expires, encode(woken), attempt, now, r[0]))
        return {"run_id": r[0], "worker": worker, "cycle": cycle, "woken_by": woken, "token": token,
                "expires_at": expires, "attempt": attempt}

    def wake_get(self, *, run_id: str) -> dict[str, Any]:
        self._check("wake_get", {"run_id": run_id})
        rows = self._read(_RUN, (run_id,))
        if not rows:
            raise LedgerError("not_found", f"wake_get: no run {run_id!r}")
        return _run(rows[0])
