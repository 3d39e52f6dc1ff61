"""The reference work ledger: the whole contract on one SQLite file.

Every writing operation is one ``BEGIN IMMEDIATE`` transaction that reads the row it needs,
decides with the rules of the Spec it was opened with (the transition table, timings, retry
policy, error classes, recovery matrix), writes the new state and appends its event(s), and
commits.  Nothing here decides by the wall clock: every time-dependent operation takes ``now``.

The database enforces what it can on its own (see ``schema.py``): status enum, transition
table, lease coupling, an event for every change, append-only events.  A bug here therefore
shows up as a refused write, not as a corrupt ledger.

Hot path notes (``bench/bench_reference.py`` measures them against raw sqlite3): argument
checks are compiled once per Spec (``argcheck.py``); a written row is never read back (the new
snapshot is built from the old one and the changes); a record this connection committed is
reused after a one-column check that its ``event_count`` is unchanged, instead of materialising
the whole row again, and an event trail it read before on the same condition (only the events
appended since are read and parsed; the trail is handed out as new dicts copied from ones no
caller holds); event data goes through one pre-built JSON encoder; CHECKs and triggers
avoid constant ``IN`` lists; contending writers are retried in sub-millisecond steps.
"""

from __future__ import annotations

import functools
import marshal
import os
import random
import re
import sqlite3
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ledgercheck.spec import Spec, default_spec, rules
from ledgercheck.transport.protocol import LedgerError

from .argcheck import Problem, compile_all
from .journal import JournalOps
from .lanes import LaneOps
from .opening import LedgerOpenError, busy_retries, check_file, classify, prepare
from .pointer import ActivePointer
from .recovery import RecoveryOps
from .rows import INSERT_EVENT, SELECT_WORK, Rec, decode, encode, load
from .schema import _triggers as schema_triggers
from .schema import claim_filter
from .supervise import SuperviseOps

__all__ = ["CRASH_POINTS", "Ledger", "LedgerOpenError"]

CRASH_POINTS = ("ledger.after_event_insert", "ledger.after_commit")
SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
_RELEASE = {"owner": None, "lease_token": None, "lease_expires_at": None}
_INSERT_WORK = (
    "INSERT INTO work(seq, work_id, source_system, source_id, source_run_id, status, priority, payload, retry_policy, "
    "created_at, updated_at, event_count) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1) ON CONFLICT DO NOTHING"
)
_BY_IDENTITY = SELECT_WORK + (" WHERE source_system = ? AND source_id = ? AND "
                              "ifnull(source_run_id, char(0)) = ifnull(?, char(0))")
_BY_ID = SELECT_WORK + " WHERE work_id = ?"
_VERSION = "SELECT event_count FROM work WHERE seq = ?"
_COUNT_BY_ID = "SELECT event_count FROM work WHERE work_id = ?"
_TRAIL = ("SELECT work_id, seq, type, from_status, to_status, at, actor, data FROM work_event "
          "WHERE work_id = ? AND seq >= ? ORDER BY seq")
CACHE_MAX = 4096
_TRIGGER_NAME = re.compile(r"CREATE TRIGGER (\w+)")
# monitor scans name their (partial) indexes: a query that could not use one fails loudly
_LEASED = SELECT_WORK + " INDEXED BY work_lease WHERE lease_token IS NOT NULL"
_WAIT_DUE = SELECT_WORK + " INDEXED BY work_wait WHERE waiting_deadline < ?"
_RETRY_DUE = SELECT_WORK + " INDEXED BY work_retry WHERE next_retry_at <= ?"


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _flat_data(data: Any) -> bool:
    """Whether an event's data is a dict of immutable scalars only (copied with ``{**data}``)."""
    return type(data) is dict and all(type(v) in _SCALARS for v in data.values())


def _handout(events: Any, flat: tuple[bool, ...]) -> list[dict[str, Any]]:
    """New objects equal to ``events`` (same types, same key order) that share nothing mutable
    with them: each event dict copied, its data copied too (``flat``: at one level; else a
    marshal round trip, exact about types and order)."""
    if all(flat):
        return [{**e, "data": {**e["data"]}} for e in events]
    return [{**e, "data": {**e["data"]} if f else marshal.loads(marshal.dumps(e["data"]))} for e, f in zip(events, flat, strict=True)]


def _guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Errors from a damaged file (bad text, bad JSON, values of the wrong type) become one LedgerError."""

    @functools.wraps(fn)
    def op(self: Ledger, *args: Any, **kw: Any) -> Any:
        try:
            return fn(self, *args, **kw)
        except self._CAUGHT as exc:
            raise self._damaged(exc, fn.__name__) from None

    return op


class _Tx:
    """``with ledger._tx as cur``: one writing transaction (``Ledger._begin``: BEGIN IMMEDIATE on
    SQLite, one writer at a time on PostgreSQL too, see ``pg.py``), crash points, error mapping.
    Both backends share it, so the crash points fire at the same logical places."""

    __slots__ = ("led",)

    def __init__(self, led: Ledger) -> None:
        self.led = led

    def __enter__(self) -> sqlite3.Cursor:
        led = self.led
        led._lock.acquire()
        try:
            led._begin()
        except BaseException as exc:
            # whatever ends the begin (a database error, or an interrupt while it waits for
            # another writer), nothing holds the transaction: roll back what began, release
            led._rollback()
            led._lock.release()
            if isinstance(exc, led.DB_ERRORS):
                raise led._db_error(exc) from None
            raise
        return led._cur

    def __exit__(self, et: Any, ev: Any, tb: Any) -> bool:
        led = self.led
        try:
            if et is not None:
                led._pending.clear()
                led._rollback()
                if isinstance(ev, led.DB_ERRORS):
                    raise led._db_error(ev) from None
                return False  # LedgerError and damage errors propagate (see _guarded)
            hook = led.crash_hook
            try:
                if hook is not None:
                    led._flush()
                    hook("ledger.after_event_insert")
                led._commit()
            except BaseException as exc:
                led._pending.clear()
                led._rollback()
                if isinstance(exc, led.DB_ERRORS):
                    raise led._db_error(exc) from None
                raise
            if led._pending:
                led._remember()
            if hook is not None:
                hook("ledger.after_commit")
            return False
        finally:
            led._lock.release()


_RULES: dict[str, dict[str, Any]] = {}


class Ledger(RecoveryOps, JournalOps, LaneOps, SuperviseOps):
    """A work ledger on a SQLite file (WAL mode).

    ``create=False`` refuses a path that does not exist yet instead of making a new ledger
    there (the operator CLI opens that way).
    """

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
        create: bool = True,
        seed: int | None = None,
    ) -> None:
        if str(synchronous).upper() not in SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {', '.join(SYNCHRONOUS)}, not {synchronous!r}")
        self.path = Path(path)
        self._setup(spec, crash_hook=crash_hook, actor=actor, busy_timeout=busy_timeout, synchronous=synchronous, seed=seed)
        check_file(self.path, create)
        try:
            self.conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False,
                                        timeout=self.busy_timeout, cached_statements=256)
        except sqlite3.Error as exc:
            raise LedgerOpenError(f"{self.path}: cannot open: {exc}") from None
        try:
            prepare(self.conn, self.path, self.spec, self.synchronous, int(self.busy_timeout * 1000))
        except LedgerOpenError:
            self.conn.close()
            raise
        except sqlite3.Error as exc:
            self.conn.close()
            if classify(exc) == "busy":
                raise LedgerError("busy", f"{self.path}: database stayed locked past the busy timeout while opening") from None
            raise LedgerOpenError(f"{self.path}: not a usable ledger database ({exc})") from None
        except (ValueError, KeyError, TypeError) as exc:  # damaged contents (bad text encoding, bad JSON)
            self.conn.close()
            raise LedgerOpenError(f"{self.path}: damaged ledger database ({type(exc).__name__}: {exc})") from None
        # prepare() left SQLite's busy handler off: the ledger waits for other writers itself
        # (see _waiting), in steps far shorter than SQLite's own (1, 2, 5, 10 ... 100 ms).
        self._cur = self.conn.cursor()
        self.pointer: ActivePointer | None = None
        if pointer_file is not None:
            self.pointer = ActivePointer(pointer_file, self.path, durable=self.synchronous in ("FULL", "EXTRA"))
            try:
                self.pointer.reconcile(self.active_leases)
            except OSError as exc:
                self.conn.close()
                raise LedgerOpenError(f"{self.pointer.path}: cannot write the active pointer ({exc.strerror or exc})") from None
            except LedgerError as exc:
                self.conn.close()
                raise LedgerOpenError(f"{self.path}: {exc.message}") from None

    def _setup(self, spec: Spec | None, *, crash_hook: Callable[[str], None] | None, actor: str, busy_timeout: float,
               synchronous: str, seed: int | None) -> None:
        """What every backend's ledger holds besides its connection."""
        self.spec = spec or default_spec()
        self.crash_hook = crash_hook
        self.actor = actor
        self.busy_timeout = float(busy_timeout)
        self.synchronous = str(synchronous).upper()
        self._lock = threading.Lock()
        self._tx = _Tx(self)
        # Records this connection committed or read, by work id.  A cached record is only used
        # after checking that its event_count (which every change of a row increases, see
        # schema.py) is still the row's; it saves materialising the whole row again.
        self._cache: dict[str, Rec] = {}
        self._pending: list[Rec] = []
        # Event trails this connection read, by work id: (events, the events as dicts no caller
        # holds, which of their data are flat (_flat_data), the row's seq if known), reused on the
        # same condition (see events()).
        self._trails: dict[str, tuple[int, tuple[dict[str, Any], ...], tuple[bool, ...], int | None]] = {}
        # jitter draws: from a seeded generator when the caller wants replays to repeat
        # exactly (the harness's hypothesis runs), from the OS otherwise
        self._rng: random.Random = random.Random(seed) if seed is not None else random.SystemRandom()
        self._prepare_rules()

    # ------------------------------------------------------------------ the backend seam
    # What differs between the SQLite file and PostgreSQL (``pg.PgLedger`` overrides these):
    # which exceptions are the database's, how a writing transaction begins and commits, how a
    # database error becomes a LedgerError.  The operations above them are shared.
    DB_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error,)
    _CAUGHT: tuple[type[Exception], ...] = (sqlite3.Error, ValueError, KeyError, TypeError)

    def _begin(self) -> None:
        self._waiting(self._cur.execute, "BEGIN IMMEDIATE")

    def _commit(self) -> None:
        self._cur.execute("COMMIT")

    def _flush(self) -> None:
        """Send whatever the transaction holds back before a crash point fires (nothing on SQLite)."""

    # ------------------------------------------------------------------ rules from the Spec
    def _prepare_rules(self) -> None:
        """Derive everything the operations need from the Spec (once per contract, shared)."""
        cached = _RULES.get(self.spec.digest)
        if cached is None or cached.get("spec") is not self.spec:
            before = set(self.__dict__)
            self._derive_rules()
            cached = {k: v for k, v in self.__dict__.items() if k not in before}
            cached["spec"] = self.spec
            if len(_RULES) > 16:
                _RULES.clear()
            _RULES[self.spec.digest] = cached
        self.__dict__.update({k: v for k, v in cached.items() if k != "spec"})
        self._upd = {}

    def _derive_rules(self) -> None:
        s = self.spec
        self._checks = compile_all(s)
        self.targets: dict[str, dict[str, list[str]]] = {}
        self._edges = {(t.src, t.dst): t for t in s.transitions}
        for t in s.transitions:
            for op in t.ops:
                self.targets.setdefault(op, {}).setdefault(t.src, []).append(t.dst)
        self.leased = frozenset(n for n, st in s.statuses.items() if st.leased)
        self.waiting_of = dict(s.waiting_statuses)  # kind -> status
        self.waiting = frozenset(self.waiting_of.values())
        self.terminal = frozenset(s.terminal_statuses)
        self._event_fields = {n: e.data for n, e in s.events.items()}
        self._ops = s.operations
        self._ev: dict[tuple[str, str | None], str] = {}  # (operation, target status) -> event type
        for name, o in s.operations.items():
            for dst in (None, *s.statuses):
                ev = o.event_for(dst) if dst is not None or not isinstance(o.event, Mapping) else None
                if ev:
                    self._ev[(name, dst)] = ev
        self._first = s.first_seq
        self._initial = s.initial_status
        self._created_event = s.operations["create"].event_for(self._initial)
        exec_phase = s.phases.get("execution", {})
        self.exec_timeout = s.phase_timeout("execution") if exec_phase.get("action") == "timeout" else None
        self._claim_sql = SELECT_WORK + f" WHERE {claim_filter(s)} ORDER BY priority, seq LIMIT 1"
        self._upd: dict[tuple[str, ...], str] = {}

    # ------------------------------------------------------------------ plumbing
    def close(self) -> None:
        try:
            self.conn.close()
        except sqlite3.Error:
            pass

    def discard(self) -> None:
        """Close a ledger whose file is about to be deleted: skip the durable checkpoint."""
        try:
            self.conn.execute("PRAGMA synchronous = OFF")
        except sqlite3.Error:
            pass
        self.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def integrity_check(self) -> list[str]:
        """Problems PRAGMA integrity_check and foreign_key_check find (empty when the file is sound)."""
        rows = self._read("PRAGMA integrity_check")
        fk = self._read("PRAGMA foreign_key_check")
        return [r[0] for r in rows if r[0] != "ok"] + [f"foreign key violation in {r[0]} row {r[1]}" for r in fk]

    def guard_triggers(self) -> tuple[dict[str, str], dict[str, str]]:
        """The guard triggers the file holds and those the schema creates for this contract, by name."""
        have = dict(self._read("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"))
        want = {}
        for sql in schema_triggers(self.spec):
            m = _TRIGGER_NAME.match(sql)
            want[m.group(1) if m else sql] = sql
        return have, want

    def _rollback(self) -> None:
        try:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass

    def _db_error(self, exc: sqlite3.Error) -> LedgerError:
        if isinstance(exc, sqlite3.IntegrityError):
            msg = str(exc)
            if msg.startswith("invalid_transition"):
                return LedgerError("invalid_transition", msg)
            return LedgerError("invalid_argument", f"constraint failed: {msg}")
        if classify(exc) == "busy":
            return LedgerError("busy", f"{self.path}: database stayed locked past the busy timeout ({self.busy_timeout:g}s)")
        return LedgerError("internal", f"{self.path}: database error: {exc}")

    def _waiting(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, retried in short steps while the database is locked, until the busy
        timeout (``opening.while_busy``, its first try made here without a closure)."""
        try:
            return fn(*args)
        except sqlite3.OperationalError as exc:
            if classify(exc) != "busy":
                raise
        return busy_retries(lambda: fn(*args), self.busy_timeout)

    def _one(self, sql: str, params: tuple[Any, ...] | list[Any]) -> Any:
        """The first row of a query outside a transaction (through :meth:`_waiting`)."""
        return self.conn.execute(sql, params).fetchone()

    def _all(self, sql: str, params: tuple[Any, ...] | list[Any]) -> list[Any]:
        """Every row of a query outside a transaction (through :meth:`_waiting`)."""
        return self.conn.execute(sql, params).fetchall()

    def _read(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> list[Any]:
        with self._lock:
            try:
                return self._waiting(self._all, sql, params)
            except self.DB_ERRORS as exc:
                raise self._db_error(exc) from None

    def _damaged(self, exc: Exception, op: str) -> LedgerError:
        if isinstance(exc, self.DB_ERRORS):
            return self._db_error(exc)
        return LedgerError("internal", f"{self.path}: {op}: cannot read the ledger ({type(exc).__name__}: {exc}); "
                                       "the file may be damaged")

    def _check(self, op: str, args: Mapping[str, Any]) -> None:
        bad = self._checks[op](args)
        if bad is not None:
            raise self._bad(op, bad)

    @staticmethod
    def _bad(op: str, bad: Problem) -> LedgerError:
        return LedgerError("invalid_argument", f"{op}: {bad[0]} {bad[1]}")

    # ------------------------------------------------------------------ rows and events
    def _get(self, cur: sqlite3.Cursor, work_id: str) -> Rec:
        hit = self._cache.get(work_id)
        if hit is not None and cur.execute(_VERSION, (hit.seq,)).fetchone() == (hit.n,):
            rec = Rec(hit.snap.copy(), hit.seq, hit.n, hit.rp)
        else:
            r = cur.execute(_BY_ID, (work_id,)).fetchone()
            if r is None:
                raise LedgerError("not_found", f"no work {work_id!r}")
            rec = load(r)
        self._pending.append(rec)
        return rec

    def _remember(self) -> None:
        """After a COMMIT: cache the records the transaction read or wrote, as committed."""
        cache = self._cache
        for rec in self._pending:
            cache[rec.snap["work_id"]] = Rec(rec.snap.copy(), rec.seq, rec.n, rec.rp)
        self._pending.clear()
        while len(cache) > CACHE_MAX:
            del cache[next(iter(cache))]

    def _write(self, cur: sqlite3.Cursor, rec: Rec, changes: dict[str, Any], now: float, etype: str,
               src: str | None, dst: str | None) -> dict[str, Any]:
        """Apply ``changes`` to the row and append one event of ``etype`` carrying the new values."""
        new = rec.snap.copy()
        new.update(changes)
        cols = tuple(changes)
        sql = self._upd.get(cols)
        if sql is None:
            sql = self._upd[cols] = ("UPDATE work SET " + ", ".join(f"{c} = ?" for c in cols)
                                     + ", event_count = ?, updated_at = ? WHERE seq = ?")
        params = list(changes.values())
        if "result" in changes and changes["result"] is not None:
            params[cols.index("result")] = encode(changes["result"])
        n = rec.n
        params += (n + 1, now, rec.seq)
        cur.execute(sql, params)
        fields = self._event_fields[etype]
        cur.execute(INSERT_EVENT, (new["work_id"], self._first + n, etype, src, dst, now, self.actor,
                                   encode({f: new[f] for f in fields})))
        rec.snap = new
        rec.n = n + 1
        self._pending.append(rec)
        if dst in self.terminal and src not in self.terminal and new["source_run_id"] is not None:
            self._wake_parent(cur, new, now)  # spawn.wakes_parent: in this same transaction
        return new

    def _dst(self, op: str, rec: Rec, want: str | None = None) -> str:
        src = rec.snap["status"]
        dsts = self.targets.get(op, {}).get(src, ())
        if want is not None:
            if want not in dsts:
                raise LedgerError("invalid_transition", f"{op}: {rec.snap['work_id']} is {src}; {src} -> {want} is not allowed")
            return want
        if not dsts:
            raise LedgerError("invalid_transition", f"{op}: {rec.snap['work_id']} is {src}; {op} cannot move it")
        return dsts[0]

    def _lease_ok(self, rec: Rec, token: Any, now: float, op: str) -> None:
        s = rec.snap
        if s["status"] not in self.leased or s["lease_token"] is None:
            raise LedgerError("stale_lease", f"{op}: {s['work_id']} is {s['status']} and holds no lease")
        if token != s["lease_token"]:
            raise LedgerError("stale_lease", f"{op}: {s['work_id']}: the token is not the live lease (lease_version {s['lease_version']})")
        limit = s["lease_expires_at"] + self.spec.lease_for(s["source_system"]).grace
        if now > limit:
            raise LedgerError("stale_lease", f"{op}: {s['work_id']}: the lease lapsed at {limit:g}")

    def _acquire(self, s: Mapping[str, Any], owner: str, now: float) -> dict[str, Any]:
        """The lease fields an acquire (claim, resume) writes: a fresh token, the next version,
        the source's ttl from now, and the start of the running stint."""
        return {"owner": owner, "lease_token": self._token(), "lease_version": s["lease_version"] + 1,
                "lease_expires_at": now + self.spec.lease_for(s["source_system"]).ttl, "started_at": now}

    def _resume_lease(self, s: Mapping[str, Any], owner: str, now: float) -> dict[str, Any]:
        return self._acquire(s, owner, now)

    @staticmethod
    def _token() -> str:
        return os.urandom(12).hex()

    # ------------------------------------------------------------------ active pointer
    def active_leases(self) -> list[dict[str, Any]]:
        """Every record holding a lease, with the instant its lease lapses (expiry + grace)."""
        recs = sorted((load(r) for r in self._read(_LEASED)), key=lambda rec: rec.seq)
        out = []
        for rec in recs:
            s = rec.snap
            grace = self.spec.lease_for(s["source_system"]).grace
            out.append({"work_id": s["work_id"], "status": s["status"], "owner": s["owner"], "lease_version": s["lease_version"],
                        "lease_expires_at": s["lease_expires_at"], "lapses_at": s["lease_expires_at"] + grace})
        return out

    def write_pointer(self) -> None:
        """Rewrite active-work.json from the database (atomically: a temporary file, then a rename)."""
        if self.pointer is not None:
            try:
                self.pointer.rewrite(self.active_leases)
            except OSError as exc:
                raise LedgerError("internal", f"{self.pointer.path}: cannot rewrite the active pointer ({exc}); "
                                  "the operation itself was committed") from None

    _pointer_changed = write_pointer

    # ------------------------------------------------------------------ core
    def create(self, *, source_system: str, source_id: str, now: float, source_run_id: str | None = None,
               priority: int | None = None, payload: dict[str, Any] | None = None,
               retry_policy: dict[str, Any] | None = None) -> dict[str, Any]:
        bad = self._checks["create"]({"source_system": source_system, "source_id": source_id, "source_run_id": source_run_id,
                                      "priority": priority, "payload": payload, "retry_policy": retry_policy, "now": now})
        if bad is not None:
            raise self._bad("create", bad)
        now = float(now)
        run = source_run_id or None
        prio = self.spec.priority_default if priority is None else priority
        with self._tx as cur:
            made = self._insert_item(cur, source_system, source_id, run, prio, payload, retry_policy, now)
            if made is None:
                r = cur.execute(_BY_IDENTITY, (source_system, source_id, run)).fetchone()
                if r is None:
                    raise LedgerError("internal", "create: the work id collided; nothing was created")
                return {"work": load(r).snap, "created": False}
        return {"work": made, "created": True}

    def _insert_item(self, cur: sqlite3.Cursor, source_system: str, source_id: str, run: str | None, prio: int,
                     payload: dict[str, Any] | None, retry_policy: dict[str, Any] | None, now: float,
                     extra: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """Insert a new item in the initial status with its work_created event (``extra``: more
        keys of that event's data); None when its identity is taken."""
        status = self._initial
        # Ids sort by creation: the id index and the event table (clustered by work id) then grow
        # at their right edge, where the pages are hot, instead of at random places.
        seq = cur.execute("SELECT ifnull(max(seq), 0) + 1 FROM work").fetchone()[0]
        wid = f"{seq:012x}{os.urandom(10).hex()}"
        cur.execute(_INSERT_WORK, (seq, wid, source_system, source_id, run, status, prio,
                                   None if payload is None else encode(payload),
                                   encode(retry_policy) if retry_policy else None, now, now))
        if cur.rowcount != 1:
            return None
        snap = {
            "work_id": wid, "source_system": source_system, "source_id": source_id, "source_run_id": run,
            "status": status, "status_reason": None, "priority": prio, "attempt": 0, "owner": None,
            "lease_token": None, "lease_version": 0, "lease_expires_at": None, "waiting_kind": None,
            "waiting_ref": None, "waiting_deadline": None, "next_retry_at": None, "error_class": None,
            "cancel_requested": False, "quarantined": False, "result": None, "created_at": now,
            "started_at": None, "finished_at": None,
        }
        data = {f: snap[f] for f in self._event_fields[self._created_event]}
        cur.execute(INSERT_EVENT, (wid, self._first, self._created_event, None, status, now, self.actor,
                                   encode({**data, **extra} if extra else data)))
        self._pending.append(Rec(snap, seq, 1, encode(retry_policy) if retry_policy else None))
        return snap

    def get(self, *, work_id: str) -> dict[str, Any]:
        self._check("get", {"work_id": work_id})
        with self._lock:
            try:
                hit = self._cache.get(work_id)
                if hit is not None and self._waiting(self._one, _VERSION, (hit.seq,)) == (hit.n,):
                    return hit.snap.copy()
                r = self._waiting(self._one, _BY_ID, (work_id,))
            except self.DB_ERRORS as exc:
                raise self._db_error(exc) from None
        if r is None:
            raise LedgerError("not_found", f"no work {work_id!r}")
        return load(r).snap

    def list(self, *, status: str | None = None, quarantined: bool | None = None) -> list[dict[str, Any]]:
        self._check("list", {"status": status, "quarantined": quarantined})
        where, params = [], []
        if status is not None:
            where.append("status = ?")
            params.append(status)
        if quarantined is not None:
            where.append("quarantined = ?")
            params.append(int(quarantined))
        sql = SELECT_WORK + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY seq"
        return [load(r).snap for r in self._read(sql, params)]

    def events(self, *, work_id: str) -> list[dict[str, Any]]:
        """The record's events in order.  A trail read before is kept (objects no caller ever
        gets): it is reused while the row's ``event_count`` is unchanged, and only the events
        appended since are read and parsed (the trail is append-only, schema.py); every call
        hands out new objects (:func:`_handout`), which a caller may change freely."""
        self._check("events", {"work_id": work_id})
        with self._lock:
            try:
                held = self._trails.get(work_id)
                if held is not None:
                    # (by the row's seq when this connection knows it: one b-tree instead of two)
                    got = self._waiting(self._one, _COUNT_BY_ID, (work_id,)) if held[3] is None \
                        else self._waiting(self._one, _VERSION, (held[3],))
                    if got is not None and got[0] == held[0]:
                        return _handout(held[1], held[2])
                    if got is None or got[0] < held[0]:
                        held = None  # not the trail this connection read: read it whole
                since = held[0] if held is not None else 0
                rows = self._waiting(self._all, _TRAIL, (work_id, self._first + since))
            except self.DB_ERRORS as exc:
                raise self._db_error(exc) from None
        if not rows and held is None:  # every record has its work_created event
            raise LedgerError("not_found", f"no work {work_id!r}")
        # one parse for what is new: "[d1,d2,...]" (each data column holds one JSON object)
        datas = decode("[" + ",".join(r[7] for r in rows) + "]")
        if len(datas) != len(rows):
            raise ValueError("an event's data column is not one JSON value")
        new = [{"work_id": r[0], "seq": r[1], "type": r[2], "from_status": r[3], "to_status": r[4], "at": r[5],
                "actor": r[6], "data": d} for r, d in zip(rows, datas, strict=True)]
        # what is kept: copies of the new events (taken before the caller gets them), after
        # copies of those kept before (the caller gets those, as ever, as new objects)
        flat = tuple(map(_flat_data, datas))
        kept_new = _handout(new, flat)
        if held is not None:
            trail = _handout(held[1], held[2]) + new
            kept, flat = held[1] + tuple(kept_new), held[2] + flat
        else:
            trail, kept = new, tuple(kept_new)
        trails = self._trails
        rec = self._cache.get(work_id)
        trails[work_id] = (since + len(rows), kept, flat, rec.seq if rec is not None else None)
        while len(trails) > CACHE_MAX:
            del trails[next(iter(trails))]
        return trail

    def status_since(self, work_id: str) -> float:
        """When the record entered its current status (the instant of its last transition event)."""
        rows = self._read("SELECT at FROM work_event WHERE work_id = ? AND to_status IS NOT NULL ORDER BY seq DESC LIMIT 1",
                          (work_id,))
        if not rows:
            raise LedgerError("not_found", f"no work {work_id!r}")
        return rows[0][0]

    def claim(self, *, owner: str, now: float, work_id: str | None = None) -> dict[str, Any] | None:
        self._check("claim", {"owner": owner, "now": now, "work_id": work_id})
        now = float(now)
        with self._tx as cur:
            if work_id is not None:
                rec = self._get(cur, work_id)
                if rec.snap["status"] in self.leased:
                    raise LedgerError("invalid_transition", f"claim: {work_id} is already leased (lease_version {rec.snap['lease_version']})")
                if rec.snap["quarantined"]:
                    raise LedgerError("invalid_transition", f"claim: {work_id} is quarantined; only an operator's requeue releases it")
            else:
                r = cur.execute(self._claim_sql).fetchone()
                if r is None:
                    return None
                rec = load(r)
            s = rec.snap
            src = s["status"]
            dst = self._dst("claim", rec)
            new = self._write(cur, rec, {"status": dst, **self._acquire(s, owner, now), "attempt": s["attempt"] + 1},
                              now, self._ev[("claim", dst)], src, dst)
        if self.pointer is not None:
            self.write_pointer()
        return new

    def close_out(self, *, work_id: str, token: str, status: str, now: float, result: Any = None,
                  reason: str | None = None) -> dict[str, Any]:
        self._check("close_out", {"work_id": work_id, "token": token, "status": status, "result": result,
                                  "reason": reason, "now": now})
        now = float(now)
        with self._tx as cur:
            rec = self._get(cur, work_id)
            src = rec.snap["status"]
            dst = self._dst("close_out", rec, status)
            self._lease_ok(rec, token, now, "close_out")
            edge = self._edges[(src, dst)]
            if edge.guard is not None and not rec.snap[edge.guard]:
                raise LedgerError("invalid_transition", f"close_out: {work_id}: closing out as {dst} needs {edge.guard} first")
            changes = rules.effect_changes(self.spec, "close_out", now=now, args={"result": result, "reason": reason}, dst=dst)
            new = self._write(cur, rec, changes, now, self._ev[("close_out", dst)], src, dst)
        if self.pointer is not None:
            self.write_pointer()
        return new

    def cancel(self, *, work_id: str, now: float, reason: str | None = None) -> dict[str, Any]:
        self._check("cancel", {"work_id": work_id, "now": now, "reason": reason})
        now = float(now)
        with self._tx as cur:
            return self._cancel_rec(cur, self._get(cur, work_id), now, reason)

    def _cancel_rec(self, cur: sqlite3.Cursor, rec: Rec, now: float, reason: str | None) -> dict[str, Any]:
        """Cancel one record inside the caller's transaction: the intent on running work, at once elsewhere."""
        op = self._ops["cancel"]
        src = rec.snap["status"]
        if src in op.intent_from:
            if rec.snap["cancel_requested"]:
                return rec.snap
            return self._write(cur, rec, rules.effect_changes(self.spec, "cancel", "intent", now=now), now, op.intent_event, None, None)
        dst = self._dst("cancel", rec)
        return self._write(cur, rec, rules.effect_changes(self.spec, "cancel", now=now, args={"reason": reason}, dst=dst),
                           now, op.event_for(dst), src, dst)

    def _requeue_changes(self, dst: str, reason: str | None, now: float) -> dict[str, Any]:
        return rules.effect_changes(self.spec, "requeue", now=now, args={"reason": reason}, dst=dst)

    def requeue(self, *, work_id: str, now: float, reason: str | None = None) -> dict[str, Any]:
        self._check("requeue", {"work_id": work_id, "now": now, "reason": reason})
        now = float(now)
        with self._tx as cur:
            rec = self._get(cur, work_id)
            src = rec.snap["status"]
            dst = self._dst("requeue", rec)
            return self._write(cur, rec, self._requeue_changes(dst, reason, now), now, self._ev[("requeue", dst)], src, dst)

    def _timeouts(self, cur: sqlite3.Cursor, now: float) -> list[tuple[Rec, str]]:
        """Records the monitor must mark timeout now, with the phase that ran out."""
        reasons = self.spec.timeout_reasons
        out = []
        for r in cur.execute(_LEASED).fetchall():
            rec = load(r)
            s = rec.snap
            if now > s["lease_expires_at"] + self.spec.lease_for(s["source_system"]).grace:
                out.append((rec, reasons["heartbeat"]))
            elif self.exec_timeout is not None and s["started_at"] is not None and now > s["started_at"] + self.exec_timeout:
                out.append((rec, reasons["execution"]))
        for r in cur.execute(_WAIT_DUE, (now,)).fetchall():
            rec = load(r)
            if rec.snap["status"] in self.waiting and now > rec.snap["waiting_deadline"]:
                out.append((rec, reasons["waiting"]))
        out.sort(key=lambda x: x[0].seq)
        return out

    def expire(self, *, now: float) -> list[dict[str, Any]]:
        self._check("expire", {"now": now})
        now = float(now)
        moves = []
        op = self._ops["expire"]
        with self._tx as cur:
            for rec, reason in self._timeouts(cur, now):
                src = rec.snap["status"]
                dsts = self.targets.get("expire", {}).get(src)
                if not dsts:
                    continue
                dst = dsts[0]
                self._write(cur, rec, rules.effect_changes(self.spec, "expire", now=now, args={"reason": reason}, dst=dst),
                            now, op.event_for(dst), src, dst)
                moves.append({"work_id": rec.snap["work_id"], "from_status": src, "to_status": dst, "reason": reason})
        if moves and self.pointer is not None:
            self.write_pointer()
        return moves

    # ------------------------------------------------------------------ lease
    def renew(self, *, work_id: str, token: str, now: float) -> dict[str, Any]:
        self._check("renew", {"work_id": work_id, "token": token, "now": now})
        now = float(now)
        op = self._ops["renew"]
        with self._tx as cur:
            rec = self._get(cur, work_id)
            s = rec.snap
            if s["status"] not in op.statuses:
                raise LedgerError("stale_lease", f"renew: {work_id} is {s['status']} and holds no lease")
            self._lease_ok(rec, token, now, "renew")
            ttl = self.spec.lease_for(s["source_system"]).ttl
            new = self._write(cur, rec, {"lease_expires_at": now + ttl}, now, self._ev[("renew", None)], None, None)
        if self.pointer is not None:
            self.write_pointer()
        return new

    def active(self, *, now: float) -> list[str]:
        self._check("active", {"now": now})
        return [a["work_id"] for a in self.active_leases() if now <= a["lapses_at"]]

    # ------------------------------------------------------------------ waiting
    def set_waiting(self, *, work_id: str, token: str, kind: str, ref: str, now: float,
                    timeout: float | None = None) -> dict[str, Any]:
        self._check("set_waiting", {"work_id": work_id, "token": token, "kind": kind, "ref": ref, "timeout": timeout, "now": now})
        now = float(now)
        with self._tx as cur:
            rec = self._get(cur, work_id)
            src = rec.snap["status"]
            dst = self._dst("set_waiting", rec, self.waiting_of[kind])
            self._lease_ok(rec, token, now, "set_waiting")
            budget = timeout if timeout is not None else self.spec.waiting_timeout(kind, rec.snap["source_system"])
            new = self._write(cur, rec, {"status": dst, "waiting_kind": kind, "waiting_ref": ref,
                                         "waiting_deadline": now + budget, **_RELEASE},
                              now, self._ev[("set_waiting", dst)], src, dst)
        if self.pointer is not None:
            self.write_pointer()
        return new

    def resume(self, *, work_id: str, owner: str, now: float) -> dict[str, Any]:
        self._check("resume", {"work_id": work_id, "owner": owner, "now": now})
        now = float(now)
        with self._tx as cur:
            rec = self._get(cur, work_id)
            s = rec.snap
            src = s["status"]
            dst = self._dst("resume", rec)
            new = self._write(cur, rec, {"status": dst, **self._resume_lease(s, owner, now), "waiting_kind": None,
                                         "waiting_ref": None, "waiting_deadline": None},
                              now, self._ev[("resume", dst)], src, dst)
        if self.pointer is not None:
            self.write_pointer()
        return new

    # ------------------------------------------------------------------ retry
    def fail(self, *, work_id: str, token: str, error_class: str, now: float, message: str | None = None) -> dict[str, Any]:
        self._check("fail", {"work_id": work_id, "token": token, "error_class": error_class, "message": message, "now": now})
        now = float(now)
        with self._tx as cur:
            rec = self._get(cur, work_id)
            s = rec.snap
            src = s["status"]
            dsts = self.targets.get("fail", {}).get(src, [])
            if not dsts:
                raise LedgerError("invalid_transition", f"fail: {work_id} is {src}; fail cannot move it")
            self._lease_ok(rec, token, now, "fail")
            policy = self.spec.retry_policy_for(s["source_system"], decode(rec.rp) if rec.rp else None)
            retry_to = next((d for d in dsts if d not in self.terminal), None)
            fail_to = next((d for d in dsts if d in self.terminal), None)
            changes: dict[str, Any] = {"error_class": error_class, "status_reason": message, **_RELEASE}
            if self.spec.error_classes[error_class] and s["attempt"] < policy.max_attempts and retry_to:
                lo, hi = self.spec.backoff_range(policy, s["attempt"])
                frac = self._rng.random()
                changes.update(status=retry_to, next_retry_at=now + lo + (hi - lo) * frac)
                dst = retry_to
            elif fail_to is not None:
                changes.update(status=fail_to, finished_at=now, result=None)
                dst = fail_to
            else:
                raise LedgerError("invalid_transition", f"fail: {work_id}: the contract gives {src} no terminal failure edge")
            new = self._write(cur, rec, changes, now, self._ev[("fail", dst)], src, dst)
        if self.pointer is not None:
            self.write_pointer()
        return new

    def promote_due(self, *, now: float) -> list[dict[str, Any]]:
        self._check("promote_due", {"now": now})
        now = float(now)
        op = self._ops["promote_due"]
        srcs = self.targets.get("promote_due", {})
        moves = []
        with self._tx as cur:
            for rec in sorted((load(r) for r in cur.execute(_RETRY_DUE, (now,)).fetchall()), key=lambda x: x.seq):
                src = rec.snap["status"]
                if src not in srcs:
                    continue
                dst = srcs[src][0]
                self._write(cur, rec, {"status": dst, "next_retry_at": None}, now, op.event_for(dst), src, dst)
                moves.append({"work_id": rec.snap["work_id"], "from_status": src, "to_status": dst, "reason": None})
        return moves


PUBLIC = (
    "create", "get", "list", "events", "claim", "close_out", "cancel", "requeue", "expire", "renew", "active",
    "set_waiting", "resume", "fail", "promote_due", "effect_begin", "effect_lookup", "effect_record", "effect_mark",
    "effect_list", "inbox_deliver", "inbox_drain", "inbox_ack", "inbox_nack", "inbox_dead", "outbox_enqueue",
    "outbox_pending", "outbox_mark_sent", "log_append", "log_read", "recover", "active_leases", "status_since",
    "integrity_check", "lane_acquire", "lane_renew", "lane_release", "lane_push", "lane_next", "lane_done", "lane_tasks",
    "wake_suspend", "wake_fire", "wake_take", "wake_get",
)
for _name in PUBLIC:
    setattr(Ledger, _name, _guarded(getattr(Ledger, _name)))
