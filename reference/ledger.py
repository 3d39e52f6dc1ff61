"""The reference work ledger: the whole contract on one SQLite file.

Every operation is one ``BEGIN IMMEDIATE`` transaction that reads the rows it needs, decides
with the rules of the Spec it was opened with (the transition table, timings, retry policy,
error classes, recovery matrix), writes the new state and appends its event(s), and commits.
Nothing here decides by the wall clock: every time-dependent operation takes ``now``.

The database enforces what it can on its own (see ``schema.py``): status enum, transition
table, lease coupling, append-only events.  A bug here therefore shows up as a refused write,
not as a corrupt ledger.
"""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ledgercheck.conformance.protocol import LedgerError
from ledgercheck.spec import Spec, default_spec
from ledgercheck.spec.args import arg_problem

from .schema import APPLICATION_ID, SCHEMA_VERSION, create_schema, sync_transitions

WORK_COLUMNS = (
    "work_id", "seq", "source_system", "source_id", "source_run_id", "status", "status_reason", "priority",
    "attempt", "owner", "lease_token", "lease_version", "lease_expires_at", "waiting_kind", "waiting_ref",
    "waiting_deadline", "next_retry_at", "error_class", "cancel_requested", "quarantined", "result", "payload",
    "retry_policy", "created_at", "updated_at", "started_at", "finished_at", "event_count",
)
_SELECT_WORK = f"SELECT {', '.join(WORK_COLUMNS)} FROM work"
_IDX = {c: i for i, c in enumerate(WORK_COLUMNS)}
_BOOL = ("cancel_requested", "quarantined")
_JSON = ("result", "payload", "retry_policy")
CRASH_POINTS = ("ledger.after_event_insert", "ledger.after_commit")


def _dumps(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _loads(s: str | None) -> Any:
    return None if s is None else json.loads(s)


class LedgerOpenError(Exception):
    """The file is not a usable ledger; the message names the file."""


class Ledger:
    """A work ledger on a SQLite file (WAL mode)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        spec: Spec | None = None,
        *,
        synchronous: str = "NORMAL",
        busy_timeout: float = 5.0,
        pointer_file: str | os.PathLike[str] | None = None,
        crash_hook: Callable[[str], None] | None = None,
        actor: str = "ledger",
    ) -> None:
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}")
        self.path = Path(path)
        self.spec = spec or default_spec()
        self.crash_hook = crash_hook
        self.actor = actor
        self.pointer = Path(pointer_file) if pointer_file else None
        self._prepare_rules()
        try:
            self.conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False,
                                        timeout=busy_timeout, cached_statements=256)
        except sqlite3.Error as exc:
            raise LedgerOpenError(f"{self.path}: cannot open: {exc}") from None
        try:
            self._open(synchronous.upper(), busy_timeout)
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            raise LedgerOpenError(f"{self.path}: not a usable ledger database ({exc})") from None
        except LedgerOpenError:
            self.conn.close()
            raise
        if self.pointer is not None:
            self.write_pointer()

    # ------------------------------------------------------------------ opening
    def _prepare_rules(self) -> None:
        s = self.spec
        self.targets: dict[str, dict[str, list[str]]] = {}
        for t in s.transitions:
            for op in t.ops:
                self.targets.setdefault(op, {}).setdefault(t.src, []).append(t.dst)
        self.leased = frozenset(n for n, st in s.statuses.items() if st.leased)
        self.waiting_of = dict(s.waiting_statuses)  # kind -> status
        self.waiting = frozenset(self.waiting_of.values())
        self.terminal = frozenset(s.terminal_statuses)
        self.event_fields = {n: e.data for n, e in s.events.items()}
        exec_phase = s.phases.get("execution", {})
        self.exec_timeout = exec_phase.get("timeout") if exec_phase.get("action") == "timeout" else None
        self.claim_from = tuple(self.targets.get("claim", {}))
        self.hb_reason = s.timeout_reasons["heartbeat"]

    def _open(self, synchronous: str, busy_timeout: float) -> None:
        c = self.conn
        c.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        head = self.path.read_bytes()[:16] if self.path.exists() and self.path.stat().st_size else b""
        if head and not head.startswith(b"SQLite format 3\x00"):
            raise LedgerOpenError(f"{self.path}: not a SQLite database")
        mode = c.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise LedgerOpenError(f"{self.path}: cannot switch to WAL mode (got {mode})")
        c.execute(f"PRAGMA synchronous = {synchronous}")
        c.execute("PRAGMA foreign_keys = ON")
        with self._tx(reply=False):
            app = c.execute("PRAGMA application_id").fetchone()[0]
            version = c.execute("PRAGMA user_version").fetchone()[0]
            tables = c.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
            if app == 0 and version == 0 and tables == 0:
                create_schema(c, self.spec)
                c.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                c.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", [
                    ("statuses", _dumps(list(self.spec.statuses))),
                    ("spec_digest", self.spec.digest),
                    ("spec_version", self.spec.version),
                ])
            elif app != APPLICATION_ID:
                raise LedgerOpenError(f"{self.path}: a SQLite database, but not a ledgercheck ledger (application_id {app:#x})")
            elif version != SCHEMA_VERSION:
                raise LedgerOpenError(f"{self.path}: ledger schema version {version}, this ledgercheck reads {SCHEMA_VERSION}")
            else:
                row = c.execute("SELECT value FROM meta WHERE key = 'statuses'").fetchone()
                if row is None or json.loads(row[0]) != list(self.spec.statuses):
                    raise LedgerOpenError(f"{self.path}: created for a contract with statuses {row and row[0]}, "
                                          f"opened with {list(self.spec.statuses)}")
                c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('spec_digest', ?)", (self.spec.digest,))
            sync_transitions(c, self.spec)

    def close(self) -> None:
        try:
            self.conn.close()
        except sqlite3.Error:
            pass

    def integrity_check(self) -> list[str]:
        rows = self.conn.execute("PRAGMA integrity_check").fetchall()
        fk = self.conn.execute("PRAGMA foreign_key_check").fetchall()
        out = [r[0] for r in rows if r[0] != "ok"]
        out += [f"foreign key violation in {r[0]} row {r[1]}" for r in fk]
        return out

    # ------------------------------------------------------------------ transactions
    @contextmanager
    def _tx(self, reply: bool = True) -> Iterator[sqlite3.Connection]:
        c = self.conn
        try:
            c.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise LedgerError("busy", f"{self.path}: database stayed locked past the busy timeout") from None
            raise
        try:
            yield c
            if self.crash_hook is not None and reply:
                self.crash_hook("ledger.after_event_insert")
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise
        if self.crash_hook is not None and reply:
            self.crash_hook("ledger.after_commit")

    def _check(self, op: str, args: Mapping[str, Any]) -> None:
        bad = arg_problem(self.spec, op, args)
        if bad is not None:
            raise LedgerError("invalid_argument", f"{op}: {bad[0]} {bad[1]}")

    # ------------------------------------------------------------------ rows and events
    def _row(self, c: sqlite3.Connection, work_id: str) -> list[Any]:
        r = c.execute(_SELECT_WORK + " WHERE work_id = ?", (work_id,)).fetchone()
        if r is None:
            raise LedgerError("not_found", f"no work {work_id!r}")
        return list(r)

    @staticmethod
    def _snapshot(r: list[Any] | tuple[Any, ...]) -> dict[str, Any]:
        return {
            "work_id": r[0], "source_system": r[2], "source_id": r[3], "source_run_id": r[4], "status": r[5],
            "status_reason": r[6], "priority": r[7], "attempt": r[8], "owner": r[9], "lease_token": r[10],
            "lease_version": r[11], "lease_expires_at": r[12], "waiting_kind": r[13], "waiting_ref": r[14],
            "waiting_deadline": r[15], "next_retry_at": r[16], "error_class": r[17],
            "cancel_requested": bool(r[18]), "quarantined": bool(r[19]), "result": _loads(r[20]),
            "created_at": r[23], "started_at": r[25], "finished_at": r[26],
        }

    def _write(self, c: sqlite3.Connection, old: list[Any], changes: dict[str, Any], now: float,
               events: list[tuple[str, str | None, str | None]]) -> list[Any]:
        """Apply ``changes`` to the row and append ``events`` (type, from, to) in one go."""
        new = list(old)
        for k, v in changes.items():
            new[_IDX[k]] = _dumps(v) if k in _JSON and v is not None else (int(v) if k in _BOOL else v)
        base = old[_IDX["event_count"]]
        new[_IDX["event_count"]] = base + len(events)
        new[_IDX["updated_at"]] = now
        cols = list(changes) + ["event_count", "updated_at"]
        sql = "UPDATE work SET " + ", ".join(f"{k} = ?" for k in cols) + " WHERE work_id = ?"
        try:
            c.execute(sql, [new[_IDX[k]] for k in cols] + [old[0]])
        except sqlite3.IntegrityError as exc:
            raise self._integrity(exc) from None
        self._events(c, old[0], base, new, now, events)
        return new

    def _events(self, c: sqlite3.Connection, work_id: str, base: int, row: list[Any], now: float,
                events: list[tuple[str, str | None, str | None]]) -> None:
        snap = self._snapshot(row)
        first = self.spec.first_seq
        rows = [(work_id, first + base + i, etype, src, dst, now, self.actor,
                 _dumps({f: snap[f] for f in self.event_fields[etype]}))
                for i, (etype, src, dst) in enumerate(events)]
        c.executemany("INSERT INTO work_event(work_id, seq, type, from_status, to_status, at, actor, data) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)

    @staticmethod
    def _integrity(exc: sqlite3.IntegrityError) -> LedgerError:
        msg = str(exc)
        if msg.startswith("invalid_transition"):
            return LedgerError("invalid_transition", msg)
        return LedgerError("invalid_argument", f"constraint failed: {msg}")

    def _dst(self, op: str, row: list[Any], want: str | None = None) -> str:
        src = row[_IDX["status"]]
        dsts = self.targets.get(op, {}).get(src, [])
        if want is not None:
            if want not in dsts:
                raise LedgerError("invalid_transition", f"{op}: {row[0]} is {src}; {src} -> {want} is not allowed")
            return want
        if not dsts:
            raise LedgerError("invalid_transition", f"{op}: {row[0]} is {src}; {op} cannot move it")
        return dsts[0]

    def _lease_ok(self, row: list[Any], token: Any, now: float, op: str) -> None:
        if row[_IDX["status"]] not in self.leased or row[_IDX["lease_token"]] is None:
            raise LedgerError("stale_lease", f"{op}: {row[0]} holds no lease")
        if token != row[_IDX["lease_token"]]:
            raise LedgerError("stale_lease", f"{op}: {row[0]}: the token is not the live lease")
        grace = self.spec.lease_for(row[_IDX["source_system"]]).grace
        if now > row[_IDX["lease_expires_at"]] + grace:
            raise LedgerError("stale_lease", f"{op}: {row[0]}: the lease lapsed at {row[_IDX['lease_expires_at']] + grace}")

    @staticmethod
    def _token() -> str:
        return os.urandom(12).hex()

    def _release(self) -> dict[str, Any]:
        return {"owner": None, "lease_token": None, "lease_expires_at": None}

    # ------------------------------------------------------------------ core
    def create(self, *, source_system: str, source_id: str, now: float, source_run_id: str | None = None,
               priority: int | None = None, payload: dict[str, Any] | None = None,
               retry_policy: dict[str, Any] | None = None) -> dict[str, Any]:
        args = {"source_system": source_system, "source_id": source_id, "source_run_id": source_run_id,
                "priority": priority, "payload": payload, "retry_policy": retry_policy, "now": now}
        self._check("create", args)
        run = source_run_id or None
        prio = self.spec.priority_default if priority is None else priority
        with self._tx() as c:
            wid = uuid.uuid4().hex
            seq = c.execute("SELECT ifnull(max(seq), 0) + 1 FROM work").fetchone()[0]
            status = self.spec.initial_status
            cur = c.execute(
                "INSERT INTO work(work_id, seq, source_system, source_id, source_run_id, status, priority, payload, "
                "retry_policy, created_at, updated_at, event_count) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1) "
                "ON CONFLICT DO NOTHING",
                (wid, seq, source_system, source_id, run, status, prio, None if payload is None else _dumps(payload),
                 None if not retry_policy else _dumps(retry_policy), now, now))
            if cur.rowcount == 0:
                r = c.execute(_SELECT_WORK + " WHERE source_system = ? AND source_id = ? AND "
                              "ifnull(source_run_id, char(0)) = ifnull(?, char(0))", (source_system, source_id, run)).fetchone()
                return {"work": self._snapshot(r), "created": False}
            row = self._row(c, wid)
            self._events(c, wid, 0, row, now, [("work_created", None, status)])
        return {"work": self._snapshot(row), "created": True}

    def get(self, *, work_id: str) -> dict[str, Any]:
        self._check("get", {"work_id": work_id})
        return self._snapshot(self._row(self.conn, work_id))

    def list(self, *, status: str | None = None, quarantined: bool | None = None) -> list[dict[str, Any]]:
        self._check("list", {"status": status, "quarantined": quarantined})
        where, params = [], []
        if status is not None:
            where.append("status = ?")
            params.append(status)
        if quarantined is not None:
            where.append("quarantined = ?")
            params.append(int(quarantined))
        sql = _SELECT_WORK + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY seq"
        return [self._snapshot(r) for r in self.conn.execute(sql, params)]

    def events(self, *, work_id: str) -> list[dict[str, Any]]:
        self._check("events", {"work_id": work_id})
        self._row(self.conn, work_id)
        return [
            {"work_id": r[0], "seq": r[1], "type": r[2], "from_status": r[3], "to_status": r[4], "at": r[5],
             "actor": r[6], "data": json.loads(r[7])}
            for r in self.conn.execute("SELECT work_id, seq, type, from_status, to_status, at, actor, data "
                                       "FROM work_event WHERE work_id = ? ORDER BY seq", (work_id,))
        ]

    def claim(self, *, owner: str, now: float, work_id: str | None = None) -> dict[str, Any] | None:
        self._check("claim", {"owner": owner, "now": now, "work_id": work_id})
        with self._tx() as c:
            if work_id is not None:
                row = self._row(c, work_id)
                if row[_IDX["status"]] in self.leased:
                    raise LedgerError("invalid_transition", f"claim: {work_id} is already leased")
            else:
                marks = ", ".join("?" * len(self.claim_from))
                r = c.execute(_SELECT_WORK + f" WHERE status IN ({marks}) ORDER BY priority, seq LIMIT 1",
                              self.claim_from).fetchone()
                if r is None:
                    return None
                row = list(r)
            dst = self._dst("claim", row)
            lt = self.spec.lease_for(row[_IDX["source_system"]])
            new = self._write(c, row, {
                "status": dst, "owner": owner, "lease_token": self._token(),
                "lease_version": row[_IDX["lease_version"]] + 1, "lease_expires_at": now + lt.ttl,
                "attempt": row[_IDX["attempt"]] + 1, "started_at": now,
            }, now, [("claimed", row[_IDX["status"]], dst)])
        self._pointer_changed()
        return self._snapshot(new)

    def close_out(self, *, work_id: str, token: str, status: str, now: float, result: Any = None,
                  reason: str | None = None) -> dict[str, Any]:
        self._check("close_out", {"work_id": work_id, "token": token, "status": status, "result": result,
                                  "reason": reason, "now": now})
        with self._tx() as c:
            row = self._row(c, work_id)
            dst = self._dst("close_out", row, status)
            edge = self.spec.edge(row[_IDX["status"]], dst)
            if edge is not None and edge.guard == "cancel_requested" and not row[_IDX["cancel_requested"]]:
                raise LedgerError("invalid_transition", f"close_out: {work_id}: closing out as {dst} needs a cancel request first")
            self._lease_ok(row, token, now, "close_out")
            changes = {"status": dst, "result": result, "finished_at": now, "status_reason": reason, **self._release()}
            new = self._write(c, row, changes, now, [(self.spec.operations["close_out"].event_for(dst), row[_IDX["status"]], dst)])
        self._pointer_changed()
        return self._snapshot(new)

    def cancel(self, *, work_id: str, now: float, reason: str | None = None) -> dict[str, Any]:
        self._check("cancel", {"work_id": work_id, "now": now, "reason": reason})
        op = self.spec.operations["cancel"]
        with self._tx() as c:
            row = self._row(c, work_id)
            src = row[_IDX["status"]]
            if src in op.intent_from:
                if row[_IDX["cancel_requested"]]:
                    return self._snapshot(row)
                new = self._write(c, row, {"cancel_requested": True}, now, [(op.intent_event, None, None)])
                return self._snapshot(new)
            dst = self._dst("cancel", row)
            new = self._write(c, row, {"status": dst, "waiting_kind": None, "waiting_ref": None, "waiting_deadline": None,
                                       "next_retry_at": None, "finished_at": now, "status_reason": reason},
                              now, [(op.event_for(dst), src, dst)])
        return self._snapshot(new)

    def _requeue_changes(self, dst: str, reason: str | None) -> dict[str, Any]:
        return {"status": dst, "finished_at": None, "result": None, "error_class": None, "next_retry_at": None,
                "cancel_requested": False, "quarantined": False, "started_at": None, "status_reason": reason}

    def requeue(self, *, work_id: str, now: float, reason: str | None = None) -> dict[str, Any]:
        self._check("requeue", {"work_id": work_id, "now": now, "reason": reason})
        with self._tx() as c:
            row = self._row(c, work_id)
            dst = self._dst("requeue", row)
            new = self._write(c, row, self._requeue_changes(dst, reason), now,
                              [(self.spec.operations["requeue"].event_for(dst), row[_IDX["status"]], dst)])
        return self._snapshot(new)

    def _timeouts(self, c: sqlite3.Connection, now: float) -> list[tuple[list[Any], str]]:
        """Rows the monitor must mark timeout, with the reason."""
        out = []
        reasons = self.spec.timeout_reasons
        leased = tuple(self.leased)
        marks = ", ".join("?" * len(leased))
        sql = _SELECT_WORK + f" WHERE status IN ({marks}) AND (lease_expires_at < ?"
        params: list[Any] = [*leased, now]
        if self.exec_timeout is not None:
            sql += " OR started_at < ?"
            params.append(now - self.exec_timeout)
        sql += ") ORDER BY seq"
        for r in c.execute(sql, params):
            row = list(r)
            grace = self.spec.lease_for(row[_IDX["source_system"]]).grace
            if now > row[_IDX["lease_expires_at"]] + grace:
                out.append((row, reasons["heartbeat"]))
            elif self.exec_timeout is not None and now > row[_IDX["started_at"]] + self.exec_timeout:
                out.append((row, reasons["execution"]))
        waits = tuple(self.waiting)
        marks = ", ".join("?" * len(waits))
        for r in c.execute(_SELECT_WORK + f" WHERE status IN ({marks}) AND waiting_deadline < ? ORDER BY seq", (*waits, now)):
            out.append((list(r), reasons["waiting"]))
        return out

    def expire(self, *, now: float) -> list[dict[str, Any]]:
        self._check("expire", {"now": now})
        moves = []
        op = self.spec.operations["expire"]
        with self._tx() as c:
            for row, reason in self._timeouts(c, now):
                src = row[_IDX["status"]]
                dsts = self.targets.get("expire", {}).get(src, [])
                if not dsts:
                    continue
                dst = dsts[0]
                self._write(c, row, {"status": dst, "status_reason": reason, "waiting_kind": None, "waiting_ref": None,
                                     "waiting_deadline": None, "finished_at": now, **self._release()},
                            now, [(op.event_for(dst), src, dst)])
                moves.append({"work_id": row[0], "from_status": src, "to_status": dst, "reason": reason})
        if moves:
            self._pointer_changed()
        return moves

    # ------------------------------------------------------------------ lease
    def renew(self, *, work_id: str, token: str, now: float) -> dict[str, Any]:
        self._check("renew", {"work_id": work_id, "token": token, "now": now})
        op = self.spec.operations["renew"]
        with self._tx() as c:
            row = self._row(c, work_id)
            if row[_IDX["status"]] not in op.statuses:
                raise LedgerError("stale_lease", f"renew: {work_id} is {row[_IDX['status']]} and holds no lease")
            self._lease_ok(row, token, now, "renew")
            lt = self.spec.lease_for(row[_IDX["source_system"]])
            new = self._write(c, row, {"lease_expires_at": now + lt.ttl}, now, [(op.event_for(), None, None)])
        return self._snapshot(new)

    def active(self, *, now: float) -> list[str]:
        self._check("active", {"now": now})
        leased = tuple(self.leased)
        marks = ", ".join("?" * len(leased))
        out = []
        for wid, src, exp in self.conn.execute(f"SELECT work_id, source_system, lease_expires_at FROM work WHERE status IN ({marks}) ORDER BY seq", leased):
            if exp is not None and now <= exp + self.spec.lease_for(src).grace:
                out.append(wid)
        return out

    # ------------------------------------------------------------------ waiting
    def set_waiting(self, *, work_id: str, token: str, kind: str, ref: str, now: float,
                    timeout: float | None = None) -> dict[str, Any]:
        self._check("set_waiting", {"work_id": work_id, "token": token, "kind": kind, "ref": ref, "timeout": timeout, "now": now})
        with self._tx() as c:
            row = self._row(c, work_id)
            dst = self._dst("set_waiting", row, self.waiting_of[kind])
            self._lease_ok(row, token, now, "set_waiting")
            budget = timeout if timeout is not None else self.spec.waiting_timeout(kind, row[_IDX["source_system"]])
            new = self._write(c, row, {"status": dst, "waiting_kind": kind, "waiting_ref": ref, "waiting_deadline": now + budget,
                                       **self._release()},
                              now, [(self.spec.operations["set_waiting"].event_for(dst), row[_IDX["status"]], dst)])
        self._pointer_changed()
        return self._snapshot(new)

    def resume(self, *, work_id: str, owner: str, now: float) -> dict[str, Any]:
        self._check("resume", {"work_id": work_id, "owner": owner, "now": now})
        with self._tx() as c:
            row = self._row(c, work_id)
            dst = self._dst("resume", row)
            lt = self.spec.lease_for(row[_IDX["source_system"]])
            new = self._write(c, row, {
                "status": dst, "owner": owner, "lease_token": self._token(), "lease_version": row[_IDX["lease_version"]] + 1,
                "lease_expires_at": now + lt.ttl, "waiting_kind": None, "waiting_ref": None, "waiting_deadline": None,
                "started_at": now,
            }, now, [(self.spec.operations["resume"].event_for(dst), row[_IDX["status"]], dst)])
        self._pointer_changed()
        return self._snapshot(new)

    # ------------------------------------------------------------------ retry
    def fail(self, *, work_id: str, token: str, error_class: str, now: float, message: str | None = None) -> dict[str, Any]:
        self._check("fail", {"work_id": work_id, "token": token, "error_class": error_class, "message": message, "now": now})
        op = self.spec.operations["fail"]
        with self._tx() as c:
            row = self._row(c, work_id)
            src = row[_IDX["status"]]
            dsts = self.targets.get("fail", {}).get(src, [])
            if not dsts:
                raise LedgerError("invalid_transition", f"fail: {work_id} is {src}")
            self._lease_ok(row, token, now, "fail")
            policy = self.spec.retry_policy_for(row[_IDX["source_system"]], _loads(row[_IDX["retry_policy"]]))
            retry_to = next((d for d in dsts if d not in self.terminal), None)
            fail_to = next((d for d in dsts if d in self.terminal), None)
            attempt = row[_IDX["attempt"]]
            changes: dict[str, Any] = {"error_class": error_class, "status_reason": message, **self._release()}
            if self.spec.error_classes[error_class] and attempt < policy.max_attempts and retry_to:
                lo, hi = self.spec.backoff_range(policy, attempt)
                frac = int.from_bytes(os.urandom(4), "big") / 0xFFFFFFFF
                changes.update(status=retry_to, next_retry_at=now + lo + (hi - lo) * frac)
                dst = retry_to
            else:
                changes.update(status=fail_to, finished_at=now, result=None)
                dst = fail_to
            new = self._write(c, row, changes, now, [(op.event_for(dst), src, dst)])
        self._pointer_changed()
        return self._snapshot(new)

    def promote_due(self, *, now: float) -> list[dict[str, Any]]:
        self._check("promote_due", {"now": now})
        op = self.spec.operations["promote_due"]
        moves = []
        srcs = tuple(self.targets.get("promote_due", {}))
        if not srcs:
            return moves
        marks = ", ".join("?" * len(srcs))
        with self._tx() as c:
            rows = [list(r) for r in c.execute(_SELECT_WORK + f" WHERE status IN ({marks}) AND next_retry_at <= ? ORDER BY seq", (*srcs, now))]
            for row in rows:
                src = row[_IDX["status"]]
                dst = self.targets["promote_due"][src][0]
                self._write(c, row, {"status": dst, "next_retry_at": None}, now, [(op.event_for(dst), src, dst)])
                moves.append({"work_id": row[0], "from_status": src, "to_status": dst, "reason": None})
        return moves

    # ------------------------------------------------------------------ idempotency
    _RECEIPT = "SELECT key, work_id, step_id, tool, step_class, input_hash, state, result FROM effect"

    @staticmethod
    def _receipt(r: tuple[Any, ...]) -> dict[str, Any]:
        return {"key": r[0], "work_id": r[1], "step_id": r[2], "tool": r[3], "step_class": r[4],
                "input_hash": r[5], "state": r[6], "result": _loads(r[7])}

    def _fence(self, c: sqlite3.Connection, work_id: str, token: str | None, now: float, op: str) -> None:
        if token is not None:
            self._lease_ok(self._row(c, work_id), token, now, op)

    def effect_begin(self, *, work_id: str, step_id: str, tool: str, input: Any, step_class: str, now: float,
                     token: str | None = None) -> dict[str, Any]:
        self._check("effect_begin", {"work_id": work_id, "step_id": step_id, "tool": tool, "input": input,
                                     "step_class": step_class, "token": token, "now": now})
        key = self.spec.effect_key(work_id=work_id, step_id=step_id, tool=tool)
        ih = self.spec.input_hash(input)
        with self._tx() as c:
            self._row(c, work_id)
            r = c.execute(self._RECEIPT + " WHERE key = ?", (key,)).fetchone()
            if r is not None and r[5] != ih:
                raise LedgerError("idempotency_conflict", f"effect_begin: key {key[:12]} was begun with input {r[5][:12]}, not {ih[:12]}")
            self._fence(c, work_id, token, now, "effect_begin")
            if r is not None:
                return {"receipt": self._receipt(r), "created": False}
            seq = c.execute("SELECT ifnull(max(seq), 0) + 1 FROM effect").fetchone()[0]
            c.execute("INSERT INTO effect(key, work_id, step_id, tool, step_class, input_hash, state, result, created_at, updated_at, seq) "
                      "VALUES (?, ?, ?, ?, ?, ?, 'pending', NULL, ?, ?, ?)", (key, work_id, step_id, tool, step_class, ih, now, now, seq))
            r = c.execute(self._RECEIPT + " WHERE key = ?", (key,)).fetchone()
        return {"receipt": self._receipt(r), "created": True}

    def effect_lookup(self, *, key: str) -> dict[str, Any] | None:
        self._check("effect_lookup", {"key": key})
        r = self.conn.execute(self._RECEIPT + " WHERE key = ?", (key,)).fetchone()
        return None if r is None else self._receipt(r)

    def effect_record(self, *, key: str, input_hash: str, result: Any, now: float, token: str | None = None) -> dict[str, Any]:
        self._check("effect_record", {"key": key, "input_hash": input_hash, "result": result, "token": token, "now": now})
        with self._tx() as c:
            r = c.execute(self._RECEIPT + " WHERE key = ?", (key,)).fetchone()
            if r is None:
                raise LedgerError("not_found", f"effect_record: no receipt {key[:12]}")
            if r[5] != input_hash:
                raise LedgerError("idempotency_conflict", f"effect_record: receipt {key[:12]} was begun with another input")
            self._fence(c, r[1], token, now, "effect_record")
            if r[6] == "completed":
                return self._receipt(r)
            if (r[6], "completed") not in self.spec.receipt_transitions:
                raise LedgerError("invalid_transition", f"effect_record: receipt {key[:12]} is {r[6]}")
            c.execute("UPDATE effect SET state = 'completed', result = ?, updated_at = ? WHERE key = ?", (_dumps(result), now, key))
            r = c.execute(self._RECEIPT + " WHERE key = ?", (key,)).fetchone()
        return self._receipt(r)

    def effect_mark(self, *, key: str, state: str, now: float) -> dict[str, Any]:
        self._check("effect_mark", {"key": key, "state": state, "now": now})
        if state == "completed":
            raise LedgerError("invalid_argument", "effect_mark: completing a receipt needs its result; use effect_record")
        with self._tx() as c:
            r = c.execute(self._RECEIPT + " WHERE key = ?", (key,)).fetchone()
            if r is None:
                raise LedgerError("not_found", f"effect_mark: no receipt {key[:12]}")
            if (r[6], state) not in self.spec.receipt_transitions:
                raise LedgerError("invalid_transition", f"effect_mark: receipt {key[:12]} cannot go {r[6]} -> {state}")
            c.execute("UPDATE effect SET state = ?, updated_at = ? WHERE key = ?", (state, now, key))
            r = c.execute(self._RECEIPT + " WHERE key = ?", (key,)).fetchone()
        return self._receipt(r)

    def effect_list(self, *, work_id: str) -> list[dict[str, Any]]:
        self._check("effect_list", {"work_id": work_id})
        self._row(self.conn, work_id)
        return [self._receipt(r) for r in self.conn.execute(self._RECEIPT + " WHERE work_id = ? ORDER BY seq", (work_id,))]

    # ------------------------------------------------------------------ inbox
    def inbox_deliver(self, *, recipient: str, message_id: str, sender: str, now: float, body: Any = None) -> dict[str, Any]:
        self._check("inbox_deliver", {"recipient": recipient, "message_id": message_id, "sender": sender, "body": body, "now": now})
        with self._tx() as c:
            arrival = c.execute("SELECT ifnull(max(arrival), 0) + 1 FROM inbox WHERE recipient = ?", (recipient,)).fetchone()[0]
            cur = c.execute("INSERT INTO inbox(recipient, message_id, sender, body, arrival, state, nacks, delivered_at, updated_at) "
                            "VALUES (?, ?, ?, ?, ?, 'pending', 0, ?, ?) ON CONFLICT DO NOTHING",
                            (recipient, message_id, sender, _dumps(body), arrival, now, now))
        return {"delivered": cur.rowcount == 1}

    @staticmethod
    def _msg(r: tuple[Any, ...]) -> dict[str, Any]:
        return {"message_id": r[0], "sender": r[1], "body": _loads(r[2]), "nacks": r[3]}

    def inbox_drain(self, *, recipient: str, now: float, max: int | None = None) -> list[dict[str, Any]]:
        self._check("inbox_drain", {"recipient": recipient, "max": max, "now": now})
        limit = max or self.spec.inbox_drain_max
        with self._tx() as c:
            rows = c.execute("SELECT message_id, sender, body, nacks FROM inbox WHERE recipient = ? AND state = 'pending' "
                             "ORDER BY arrival LIMIT ?", (recipient, limit)).fetchall()
            c.executemany("UPDATE inbox SET state = 'inflight', updated_at = ? WHERE recipient = ? AND message_id = ?",
                          [(now, recipient, r[0]) for r in rows])
        return [self._msg(r) for r in rows]

    def _inbox_row(self, c: sqlite3.Connection, recipient: str, message_id: str) -> tuple[Any, ...]:
        r = c.execute("SELECT state, nacks FROM inbox WHERE recipient = ? AND message_id = ?", (recipient, message_id)).fetchone()
        if r is None:
            raise LedgerError("not_found", f"no message {message_id!r} for {recipient!r}")
        return r

    def inbox_ack(self, *, recipient: str, message_id: str, now: float) -> None:
        self._check("inbox_ack", {"recipient": recipient, "message_id": message_id, "now": now})
        with self._tx() as c:
            state, _ = self._inbox_row(c, recipient, message_id)
            if state == "acked":
                return None
            if state != "inflight":
                raise LedgerError("invalid_transition", f"inbox_ack: {message_id!r} is {state}, not handed out")
            c.execute("UPDATE inbox SET state = 'acked', updated_at = ? WHERE recipient = ? AND message_id = ?", (now, recipient, message_id))
        return None

    def inbox_nack(self, *, recipient: str, message_id: str, now: float, error: str | None = None) -> dict[str, Any]:
        self._check("inbox_nack", {"recipient": recipient, "message_id": message_id, "error": error, "now": now})
        with self._tx() as c:
            state, nacks = self._inbox_row(c, recipient, message_id)
            if state != "inflight":
                raise LedgerError("invalid_transition", f"inbox_nack: {message_id!r} is {state}, not handed out")
            nacks += 1
            dead = nacks >= self.spec.inbox_max_nacks
            c.execute("UPDATE inbox SET state = ?, nacks = ?, last_error = ?, updated_at = ? WHERE recipient = ? AND message_id = ?",
                      ("dead" if dead else "pending", nacks, error, now, recipient, message_id))
        return {"dead": dead, "nacks": nacks}

    def inbox_dead(self, *, recipient: str) -> list[dict[str, Any]]:
        self._check("inbox_dead", {"recipient": recipient})
        return [self._msg(r) for r in self.conn.execute(
            "SELECT message_id, sender, body, nacks FROM inbox_dead_letter WHERE recipient = ? ORDER BY dead_at, message_id", (recipient,))]

    # ------------------------------------------------------------------ outbox
    _OUT = "SELECT key, destination, payload, work_id, state, provider_ref, payload_hash FROM outbox"

    @staticmethod
    def _out(r: tuple[Any, ...]) -> dict[str, Any]:
        return {"key": r[0], "destination": r[1], "payload": _loads(r[2]), "work_id": r[3], "state": r[4], "provider_ref": r[5]}

    def outbox_enqueue(self, *, key: str, destination: str, payload: Any, now: float, work_id: str | None = None) -> dict[str, Any]:
        self._check("outbox_enqueue", {"key": key, "destination": destination, "payload": payload, "work_id": work_id, "now": now})
        ph = self.spec.input_hash(payload)
        with self._tx() as c:
            if work_id is not None:
                self._row(c, work_id)
            r = c.execute(self._OUT + " WHERE key = ?", (key,)).fetchone()
            if r is not None:
                if r[6] != ph:
                    raise LedgerError("idempotency_conflict", f"outbox_enqueue: key {key!r} was used with another payload")
                return {"message": self._out(r), "created": False}
            seq = c.execute("SELECT ifnull(max(seq), 0) + 1 FROM outbox").fetchone()[0]
            c.execute("INSERT INTO outbox(key, seq, destination, payload, payload_hash, work_id, state, created_at) "
                      "VALUES (?, ?, ?, ?, ?, ?, 'pending', ?)", (key, seq, destination, _dumps(payload), ph, work_id, now))
            r = c.execute(self._OUT + " WHERE key = ?", (key,)).fetchone()
        return {"message": self._out(r), "created": True}

    def outbox_pending(self, *, max: int | None = None) -> list[dict[str, Any]]:
        self._check("outbox_pending", {"max": max})
        limit = max or self.spec.outbox_pending_max
        return [self._out(r) for r in self.conn.execute(self._OUT + " WHERE state = 'pending' ORDER BY seq LIMIT ?", (limit,))]

    def outbox_mark_sent(self, *, key: str, provider_ref: str, now: float) -> dict[str, Any]:
        self._check("outbox_mark_sent", {"key": key, "provider_ref": provider_ref, "now": now})
        with self._tx() as c:
            r = c.execute(self._OUT + " WHERE key = ?", (key,)).fetchone()
            if r is None:
                raise LedgerError("not_found", f"outbox_mark_sent: no message {key!r}")
            if r[4] == "pending":
                c.execute("UPDATE outbox SET state = 'sent', provider_ref = ?, sent_at = ? WHERE key = ?", (provider_ref, now, key))
                r = c.execute(self._OUT + " WHERE key = ?", (key,)).fetchone()
        return self._out(r)

    # ------------------------------------------------------------------ event log
    def log_append(self, *, stream: str, expected_seq: int, kind: str, now: float, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        self._check("log_append", {"stream": stream, "expected_seq": expected_seq, "kind": kind, "payload": payload, "now": now})
        with self._tx() as c:
            last = c.execute("SELECT ifnull(max(seq), ?) FROM log_entry WHERE stream = ?", (self.spec.first_seq - 1, stream)).fetchone()[0]
            if expected_seq != last:
                raise LedgerError("concurrent_append", f"log_append: stream {stream!r} is at seq {last}, not {expected_seq}")
            c.execute("INSERT INTO log_entry(stream, seq, kind, payload, at) VALUES (?, ?, ?, ?, ?)",
                      (stream, last + 1, kind, _dumps(payload or {}), now))
        return {"seq": last + 1}

    def log_read(self, *, stream: str, from_seq: int | None = None) -> list[dict[str, Any]]:
        self._check("log_read", {"stream": stream, "from_seq": from_seq})
        start = self.spec.first_seq if from_seq is None else from_seq
        return [{"stream": r[0], "seq": r[1], "kind": r[2], "payload": json.loads(r[3]), "at": r[4]}
                for r in self.conn.execute("SELECT stream, seq, kind, payload, at FROM log_entry WHERE stream = ? AND seq >= ? ORDER BY seq",
                                           (stream, start))]

    # ------------------------------------------------------------------ recovery
    def recover(self, *, now: float) -> list[dict[str, Any]]:
        """Classify stale in-flight work by the recovery matrix and act on each decision."""
        self._check("recover", {"now": now})
        op = self.spec.operations["recover"]
        victims = []
        leased = tuple(self.leased)
        marks = ", ".join("?" * len(leased))
        with self._tx() as c:
            rows = []
            for r in c.execute(_SELECT_WORK + f" WHERE status IN ({marks}) AND lease_expires_at < ? ORDER BY seq", (*leased, now)):
                row = list(r)
                if now > row[_IDX["lease_expires_at"]] + self.spec.lease_for(row[_IDX["source_system"]]).grace:
                    rows.append(row)
            tmarks = ", ".join("?" * len(self.terminal))
            rows += [list(r) for r in c.execute(_SELECT_WORK + f" WHERE status IN ({tmarks}) AND status_reason = ? AND quarantined = 0 ORDER BY seq",
                                                (*self.terminal, self.hb_reason))]
            for row in rows:
                wid = row[0]
                if not self.targets.get("recover", {}).get(row[_IDX["status"]]):
                    continue
                recs = c.execute("SELECT state, step_class FROM effect WHERE work_id = ? ORDER BY seq", (wid,)).fetchall()
                open_ = [(s, k) for s, k in recs if s != "completed"]
                decision = self.spec.scanner_decision(open_, any(s == "completed" for s, _ in recs))
                why = "journal: " + (", ".join(f"{s} {k}" for s, k in open_) or ("completed receipts" if recs else "empty"))
                policy = self.spec.retry_policy_for(row[_IDX["source_system"]], _loads(row[_IDX["retry_policy"]]))
                dec = self.spec.decisions[decision]
                if dec.get("requeue") and row[_IDX["attempt"]] >= policy.max_attempts:
                    decision, why = "quarantine", f"attempts exhausted ({row[_IDX['attempt']]}/{policy.max_attempts})"
                    dec = self.spec.decisions[decision]
                src = row[_IDX["status"]]
                if src in self.leased:
                    mid = self.targets["recover"][src][0]
                    row = self._write(c, row, {"status": mid, "status_reason": self.hb_reason, "finished_at": now,
                                               **self._release()}, now, [(op.event_for(mid), src, mid)])
                    src = mid
                if dec.get("receipt_state"):
                    c.execute("UPDATE effect SET state = ?, updated_at = ? WHERE work_id = ? AND state = 'pending'",
                              (dec["receipt_state"], now, wid))
                if dec.get("requeue"):
                    dst = self.targets["recover"][src][0]
                    self._write(c, row, self._requeue_changes(dst, f"recovered: {decision}"), now, [(op.event_for(dst), src, dst)])
                elif decision == "quarantine":
                    self._write(c, row, {"quarantined": True}, now, [(op.intent_event, None, None)])
                victims.append({"work_id": wid, "decision": decision, "reason": why})
        if victims:
            self._pointer_changed()
        return victims

    # ------------------------------------------------------------------ active pointer
    def _pointer_changed(self) -> None:
        if self.pointer is not None:
            self.write_pointer()

    def write_pointer(self) -> None:
        """Rewrite active-work.json from the database (atomically: write a temp file, then rename)."""
        if self.pointer is None:
            return
        leased = tuple(self.leased)
        marks = ", ".join("?" * len(leased))
        rows = self.conn.execute(f"SELECT work_id, owner, lease_version, lease_expires_at FROM work WHERE status IN ({marks}) ORDER BY seq", leased).fetchall()
        doc = {"source_of_truth": str(self.path), "active": [
            {"work_id": r[0], "owner": r[1], "lease_version": r[2], "lease_expires_at": r[3]} for r in rows]}
        tmp = self.pointer.with_name(self.pointer.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, self.pointer)
