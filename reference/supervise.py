"""Spawn, join and cancel cascade, ask outcomes and event-log reads of the reference ledger.

A mixin of :class:`ledgercheck.reference.ledger.Ledger`, with its transaction, argument checks
and event discipline.  The parent's trail is the record of its children: a spawn appends
``child_spawned`` (``child_id``, ``spawn_key``) to the parent's trail and inserts the child with
its own ``work_created`` event (whose data also names its ``parent_id`` and ``root_id``) in one
transaction, so no child exists without its record and a replayed spawn finds the child there.
No table is added: the tree is read from the trails.  A child reaching a terminal status fires
the contract's ``spawn.wakes_parent`` wakeup on its parent's run (the wakeups run named by the
parent's work_id) in the transaction that finishes it (``_wake_parent``, called by ``_write``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

from ledgercheck.spec import Spec
from ledgercheck.transport.protocol import LedgerError

from .rows import INSERT_EVENT, Rec, decode, encode

SPAWNED = "child_spawned"
_TRAIL_OF_TYPE = "SELECT data FROM work_event WHERE work_id = ? AND type = ? ORDER BY seq"


class SuperviseOps:
    # provided by Ledger
    spec: Spec
    actor: str
    terminal: frozenset[str]
    _tx: Any
    _first: int
    _created_event: str
    _check: Callable[[str, Mapping[str, Any]], None]
    _read: Callable[..., list[Any]]
    _get: Callable[[sqlite3.Cursor, str], Rec]
    get: Callable[..., dict[str, Any]]
    _insert_item: Callable[..., dict[str, Any] | None]
    _cancel_rec: Callable[[sqlite3.Cursor, Rec, float, str | None], dict[str, Any]]
    _fire: Callable[[sqlite3.Cursor, str, str, float], dict[str, Any]]

    # ------------------------------------------------------------------ the tree, from the trails
    @staticmethod
    def _spawned(cur: Any, work_id: str) -> list[dict[str, Any]]:
        """The child_spawned records of an item's trail, in spawn order."""
        return [decode(r[0]) for r in cur.execute(_TRAIL_OF_TYPE, (work_id, SPAWNED)).fetchall()]

    def _root_of(self, cur: Any, work_id: str) -> str:
        r = cur.execute(_TRAIL_OF_TYPE, (work_id, self._created_event)).fetchone()
        return (decode(r[0]).get("root_id") if r is not None else None) or work_id

    def _descendants(self, cur: Any, work_id: str) -> list[str]:
        """Every descendant of an item, breadth-first in spawn order."""
        out: list[str] = []
        frontier = [work_id]
        while frontier:
            nxt = [d["child_id"] for w in frontier for d in self._spawned(cur, w)]
            out += nxt
            frontier = nxt
        return out

    def _wake_parent(self, cur: Any, child: Mapping[str, Any], now: float) -> None:
        """A finished child's wakeup on its parent's run, when the parent has one and logged the child."""
        kind = self.spec.spawn_wakeup
        parent = child["source_run_id"]
        if kind is None or cur.execute("SELECT 1 FROM wake_run WHERE run_id = ?", (parent,)).fetchone() is None:
            return
        if any(d.get("child_id") == child["work_id"] for d in self._spawned(cur, parent)):
            self._fire(cur, parent, kind, now)

    # ------------------------------------------------------------------ spawn profile
    def spawn(self, *, parent_id: str, key: str, now: float, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        self._check("spawn", {"parent_id": parent_id, "key": key, "payload": payload, "now": now})
        now = float(now)
        with self._tx as cur:
            parent = self._get(cur, parent_id)
            p = parent.snap
            done = next((d for d in self._spawned(cur, parent_id) if d.get("spawn_key") == key), None)
            if done is not None:  # a replay: the parent's log already holds this child
                return {"work": self._get(cur, done["child_id"]).snap, "created": False}
            if p["status"] in self.terminal or p["cancel_requested"]:
                raise LedgerError("invalid_transition", f"spawn: {parent_id} is {p['status']}"
                                  f"{' with its cancel requested' if p['cancel_requested'] else ''}; it spawns no new child")
            root = self._root_of(cur, parent_id)
            count = len(self._descendants(cur, root))
            if count + 1 > self.spec.spawn_budget:
                raise LedgerError("spawn_denied", f"spawn: the tree of {root} has {count} descendants; the budget is "
                                  f"{self.spec.spawn_budget}")
            # the record in the parent's log first, then the child (one transaction: both or neither)
            n = parent.n
            cur.execute("UPDATE work SET event_count = ?, updated_at = ? WHERE seq = ?", (n + 1, now, parent.seq))
            parent.n = n + 1
            child = self._insert_item(cur, p["source_system"], key, parent_id, p["priority"], payload, None, now,
                                      {"parent_id": parent_id, "root_id": root})
            if child is None:
                raise LedgerError("idempotency_conflict", f"spawn: the unit ({p['source_system']}, {key!r}, {parent_id}) "
                                  "already exists and is not a child of this parent")
            cur.execute(INSERT_EVENT, (parent_id, self._first + n, SPAWNED, None, None, now, self.actor,
                                       encode({"child_id": child["work_id"], "spawn_key": key})))
        return {"work": child, "created": True}

    def children(self, *, work_id: str) -> list[dict[str, Any]]:
        self._check("children", {"work_id": work_id})
        self.get(work_id=work_id)  # not_found first
        rows = self._read(_TRAIL_OF_TYPE, (work_id, SPAWNED))
        return [self.get(work_id=decode(r[0])["child_id"]) for r in rows]

    def cancel_tree(self, *, work_id: str, now: float, reason: str | None = None) -> list[dict[str, Any]]:
        self._check("cancel_tree", {"work_id": work_id, "now": now, "reason": reason})
        now = float(now)
        out = []
        with self._tx as cur:
            for wid in [work_id, *self._descendants(cur, self._get(cur, work_id).snap["work_id"])]:
                rec = self._get(cur, wid)
                out.append(rec.snap if rec.snap["status"] in self.terminal else self._cancel_rec(cur, rec, now, reason))
        return out

    # ------------------------------------------------------------------ ask profile
    def ask_outcome(self, *, work_id: str) -> dict[str, Any]:
        self._check("ask_outcome", {"work_id": work_id})
        s = self.get(work_id=work_id)
        outcome = self.spec.ask_outcomes.get(s["status"], self.spec.ask_unfinished)
        return {"outcome": outcome, "result": s["result"] if outcome == self.spec.ask_outcomes.get("done") else None}

    # ------------------------------------------------------------------ logread profile
    def log_last_seq(self, *, stream: str) -> dict[str, Any]:
        self._check("log_last_seq", {"stream": stream})
        first = self.spec.first_seq
        return {"seq": self._read("SELECT ifnull(max(seq), ?) FROM log_entry WHERE stream = ?", (first - 1, stream))[0][0]}

    def log_tail(self, *, stream: str, from_seq: int, max: int) -> list[dict[str, Any]]:
        self._check("log_tail", {"stream": stream, "from_seq": from_seq, "max": max})
        return [{"stream": r[0], "seq": r[1], "kind": r[2], "payload": decode(r[3]), "at": r[4]}
                for r in self._read("SELECT stream, seq, kind, payload, at FROM log_entry WHERE stream = ? AND seq >= ? "
                                    "ORDER BY seq LIMIT ?", (stream, from_seq, max))]
