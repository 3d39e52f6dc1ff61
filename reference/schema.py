"""The reference ledger's SQLite schema, generated from the contract.

Every table is STRICT and carries CHECK constraints built from the Spec: the status enum, the
source systems, the priority range, the receipt states, and the coupling between a status and
the fields it needs (a leased status has an owner, a token and an expiry; a waiting status has
its kind, reference and deadline; a terminal status has finished_at).  Triggers enforce what a
CHECK cannot see: a status change must be an edge of the transition table (kept in
``allowed_transition``, synchronised with the Spec at open), must be accompanied by its event,
lease_version never decreases, a terminal record is frozen, and events are never updated or
deleted.

Layout choices keep a commit small (each touched b-tree costs one WAL frame): ``work`` is keyed
by its creation ``seq`` (the rowid), events are clustered by ``(work_id, seq)`` in a WITHOUT
ROWID table, and the monitor indexes are partial and keyed by columns a renewal does not touch.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import Any

from ledgercheck.spec import Spec, rules

SCHEMA_VERSION = 3
APPLICATION_ID = 0x4C444743  # "LDGC"
TABLES = ("work", "work_event", "effect", "inbox", "outbox", "log_entry", "allowed_transition", "meta", "lane", "lane_task",
          "wake_run")

# Columns a snapshot is made of, in the order the ledger selects them.
SNAPSHOT_COLUMNS = (
    "work_id", "source_system", "source_id", "source_run_id", "status", "status_reason", "priority",
    "attempt", "owner", "lease_token", "lease_version", "lease_expires_at", "waiting_kind", "waiting_ref",
    "waiting_deadline", "next_retry_at", "error_class", "cancel_requested", "quarantined", "result",
    "created_at", "started_at", "finished_at",
)
# Columns of a terminal record that only a status change (requeue) may touch.
FROZEN_WHEN_TERMINAL = tuple(c for c in SNAPSHOT_COLUMNS if c not in ("status", "quarantined")) + ("retry_policy", "payload")


def lit(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def one_of(column: str, values: Iterable[str]) -> str:
    """``column`` equals one of ``values``, as a chain of comparisons.

    Not ``column IN (...)``: for a constant list of more than two values SQLite builds an
    ephemeral table every time a statement runs, and these expressions run in every CHECK,
    trigger and partial-index test of every write (``IN`` lists of two are left alone).
    """
    terms = [f"{column} = {lit(v)}" for v in values]
    if not terms:
        return "0"
    return terms[0] if len(terms) == 1 else "(" + " OR ".join(terms) + ")"


def contract_shape(spec: Spec) -> dict[str, Any]:
    """The parts of a contract the schema's CHECK constraints are built from.

    A ledger file can only be opened with a contract of the same shape; transitions and timings
    may differ (the transition guard is re-synchronised at open, timings are never stored).
    """
    return {
        "statuses": {n: {"terminal": s.terminal, "initial": s.initial, "leased": s.leased, "waiting_kind": s.waiting_kind}
                     for n, s in spec.statuses.items()},
        "source_systems": sorted(spec.source_systems),
        "priority": [spec.priority_min, spec.priority_max],
        "run_id_required_for": sorted(spec.run_id_required_for),
        "events": {n: e.transition for n, e in spec.events.items()},
        "receipt_states": sorted(spec.receipt_states),
        "step_classes": sorted(spec.step_classes),
        "first_seq": spec.first_seq,
    }


def _work_table(spec: Spec) -> str:
    leased = one_of("status", [s for s, st in spec.statuses.items() if st.leased])
    waiting = one_of("status", [s for s, st in spec.statuses.items() if st.waiting_kind])
    terminal = one_of("status", spec.terminal_statuses)
    kind_case = " ".join(f"WHEN {lit(k)} THEN {lit(s)}" for k, s in spec.waiting_statuses.items())
    checks = [
        one_of("status", spec.statuses),
        one_of("source_system", spec.source_systems),
        f"priority BETWEEN {spec.priority_min} AND {spec.priority_max}",
        "attempt >= 0",
        "lease_version >= 0",
        "event_count >= 1",
        "cancel_requested IN (0, 1)",
        "quarantined IN (0, 1)",
        f"({leased}) = (lease_token IS NOT NULL)",
        f"({leased}) = (lease_expires_at IS NOT NULL)",
        f"({leased}) = (owner IS NOT NULL)",
        f"({waiting}) = (waiting_kind IS NOT NULL AND waiting_ref IS NOT NULL AND waiting_deadline IS NOT NULL)",
        f"({terminal}) = (finished_at IS NOT NULL)",
    ]
    if kind_case:
        checks.append(f"waiting_kind IS NULL OR status = CASE waiting_kind {kind_case} END")
    checks += [f"source_system <> {lit(s)} OR source_run_id IS NOT NULL" for s in spec.run_id_required_for]
    body = ",\n  ".join([
        "seq INTEGER PRIMARY KEY", "work_id TEXT NOT NULL", "source_system TEXT NOT NULL", "source_id TEXT NOT NULL",
        "source_run_id TEXT", "status TEXT NOT NULL", "status_reason TEXT", "priority INTEGER NOT NULL",
        "attempt INTEGER NOT NULL DEFAULT 0", "owner TEXT", "lease_token TEXT", "lease_version INTEGER NOT NULL DEFAULT 0",
        "lease_expires_at REAL", "waiting_kind TEXT", "waiting_ref TEXT", "waiting_deadline REAL", "next_retry_at REAL",
        "error_class TEXT", "cancel_requested INTEGER NOT NULL DEFAULT 0", "quarantined INTEGER NOT NULL DEFAULT 0",
        "result TEXT", "created_at REAL NOT NULL", "started_at REAL", "finished_at REAL", "event_count INTEGER NOT NULL",
        "retry_policy TEXT", "payload TEXT", "updated_at REAL NOT NULL",
    ] + [f"CHECK ({c})" for c in checks])
    return f"CREATE TABLE work (\n  {body}\n) STRICT"


def _event_table(spec: Spec) -> str:
    transition_events = one_of("type", [n for n, e in spec.events.items() if e.transition])
    return f"""CREATE TABLE work_event (
  work_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  type TEXT NOT NULL,
  from_status TEXT,
  to_status TEXT,
  at REAL NOT NULL,
  actor TEXT,
  data TEXT NOT NULL,
  PRIMARY KEY (work_id, seq),
  CHECK ({one_of("type", spec.events)}),
  CHECK (from_status IS NULL OR {one_of("from_status", spec.statuses)}),
  CHECK (to_status IS NULL OR {one_of("to_status", spec.statuses)}),
  CHECK (({transition_events}) = (to_status IS NOT NULL)),
  CHECK (seq >= {spec.first_seq})
) STRICT, WITHOUT ROWID"""


def _journal_tables(spec: Spec) -> list[str]:
    return [
        f"""CREATE TABLE effect (
  key TEXT PRIMARY KEY, work_id TEXT NOT NULL REFERENCES work(work_id), step_id TEXT NOT NULL, tool TEXT NOT NULL,
  step_class TEXT NOT NULL, input_hash TEXT NOT NULL, state TEXT NOT NULL, result TEXT,
  created_at REAL NOT NULL, updated_at REAL NOT NULL, seq INTEGER NOT NULL UNIQUE,
  CHECK ({one_of("state", spec.receipt_states)}),
  CHECK ({one_of("step_class", spec.step_classes)}),
  CHECK (length(key) = 64 AND length(input_hash) = 64)
) STRICT, WITHOUT ROWID""",
        "CREATE INDEX effect_work ON effect(work_id, seq)",
        """CREATE TABLE inbox (
  recipient TEXT NOT NULL, message_id TEXT NOT NULL, sender TEXT NOT NULL, body TEXT, arrival INTEGER NOT NULL,
  state TEXT NOT NULL, nacks INTEGER NOT NULL, delivered_at REAL NOT NULL, updated_at REAL NOT NULL, last_error TEXT,
  PRIMARY KEY (recipient, message_id),
  CHECK (state = 'pending' OR state = 'inflight' OR state = 'acked' OR state = 'dead'),
  CHECK (nacks >= 0)
) STRICT, WITHOUT ROWID""",
        "CREATE UNIQUE INDEX inbox_arrival ON inbox(recipient, arrival)",
        "CREATE INDEX inbox_pending ON inbox(recipient, state, arrival)",
        "CREATE VIEW inbox_dead_letter AS SELECT recipient, message_id, sender, body, nacks, last_error, "
        "updated_at AS dead_at FROM inbox WHERE state = 'dead'",
        """CREATE TABLE outbox (
  key TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, destination TEXT NOT NULL, payload TEXT NOT NULL,
  payload_hash TEXT NOT NULL, work_id TEXT REFERENCES work(work_id), state TEXT NOT NULL, provider_ref TEXT,
  created_at REAL NOT NULL, sent_at REAL,
  CHECK (state IN ('pending', 'sent')),
  CHECK ((state = 'sent') = (provider_ref IS NOT NULL))
) STRICT, WITHOUT ROWID""",
        "CREATE INDEX outbox_pending ON outbox(seq) WHERE state = 'pending'",
        f"""CREATE TABLE log_entry (
  stream TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, payload TEXT NOT NULL, at REAL NOT NULL,
  PRIMARY KEY (stream, seq), CHECK (seq >= {spec.first_seq})
) STRICT, WITHOUT ROWID""",
        *lane_tables(),
        "CREATE TABLE allowed_transition (src TEXT NOT NULL, dst TEXT NOT NULL, PRIMARY KEY (src, dst)) STRICT, WITHOUT ROWID",
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT, WITHOUT ROWID",
    ]


def lane_tables() -> list[str]:
    """The tables of the lanes and wakeups profiles (``lanes.py``), in SQL both backends accept."""
    return [
        """CREATE TABLE lane (
  session_key TEXT NOT NULL, lane TEXT NOT NULL, owner TEXT NOT NULL, token TEXT NOT NULL, version INTEGER NOT NULL,
  expires_at REAL NOT NULL, released INTEGER NOT NULL, updated_at REAL NOT NULL,
  PRIMARY KEY (session_key, lane), CHECK (version >= 1), CHECK (released = 0 OR released = 1)
) STRICT, WITHOUT ROWID""",
        """CREATE TABLE lane_task (
  session_key TEXT NOT NULL, lane TEXT NOT NULL, task_id TEXT NOT NULL, arrival INTEGER NOT NULL, body TEXT,
  state TEXT NOT NULL, handed_version INTEGER, updated_at REAL NOT NULL,
  PRIMARY KEY (session_key, lane, task_id),
  CHECK (state = 'queued' OR state = 'handed' OR state = 'done'),
  CHECK ((state = 'handed') = (handed_version IS NOT NULL))
) STRICT, WITHOUT ROWID""",
        "CREATE UNIQUE INDEX lane_task_arrival ON lane_task(session_key, lane, arrival)",
        """CREATE TABLE wake_run (
  run_id TEXT PRIMARY KEY, state TEXT NOT NULL, cycle INTEGER NOT NULL, wakeups TEXT NOT NULL, timer_at REAL,
  worker TEXT, ready INTEGER NOT NULL, updated_at REAL NOT NULL,
  token TEXT, expires_at REAL, handed TEXT NOT NULL DEFAULT '[]', attempt INTEGER NOT NULL DEFAULT 0,
  CHECK (state = 'suspended' OR state = 'pending' OR state = 'running'), CHECK (cycle >= 0),
  CHECK ((state = 'running') = (token IS NOT NULL AND expires_at IS NOT NULL))
) STRICT, WITHOUT ROWID""",
    ]


def _triggers(spec: Spec) -> list[str]:
    terminal = one_of("OLD.status", spec.terminal_statuses)
    frozen = " OR ".join(f"NEW.{c} IS NOT OLD.{c}" for c in FROZEN_WHEN_TERMINAL)
    # One trigger per table and event: SQLite runs every trigger as a sub-program, so a single
    # trigger holding several checks costs one call instead of one per check.
    out = [
        f"""CREATE TRIGGER work_guard BEFORE UPDATE ON work BEGIN
  SELECT RAISE(ABORT, 'invalid_transition: forbidden status change')
   WHERE NEW.status <> OLD.status AND NOT EXISTS (SELECT 1 FROM allowed_transition WHERE src = OLD.status AND dst = NEW.status);
  SELECT RAISE(ABORT, 'invalid_transition: a status change must append its event')
   WHERE NEW.status <> OLD.status AND NEW.event_count <= OLD.event_count;
  SELECT RAISE(ABORT, 'invalid_transition: lease_version decreased') WHERE NEW.lease_version < OLD.lease_version;
  SELECT RAISE(ABORT, 'invalid_transition: every change of a work record appends an event') WHERE NEW.event_count <= OLD.event_count;
  SELECT RAISE(ABORT, 'invalid_transition: the identity of a work record never changes')
   WHERE NEW.seq IS NOT OLD.seq OR NEW.work_id IS NOT OLD.work_id OR NEW.source_system IS NOT OLD.source_system
      OR NEW.source_id IS NOT OLD.source_id OR NEW.source_run_id IS NOT OLD.source_run_id OR NEW.created_at IS NOT OLD.created_at;
  SELECT RAISE(ABORT, 'invalid_transition: a terminal record changes only by requeue')
   WHERE {terminal} AND NEW.status = OLD.status AND ({frozen});
END""",
        "CREATE TRIGGER work_no_delete BEFORE DELETE ON work BEGIN SELECT RAISE(ABORT, 'work records are never deleted'); END",
        f"""CREATE TRIGGER work_event_matches BEFORE INSERT ON work_event
  WHEN NOT EXISTS (SELECT 1 FROM work WHERE work_id = NEW.work_id AND NEW.seq < {spec.first_seq} + event_count
                   AND (NEW.to_status IS NULL OR NEW.to_status = status))
  BEGIN SELECT RAISE(ABORT, 'invalid_transition: event does not match its work record'); END""",
    ]
    for table in ("work_event", "log_entry"):
        out.append(f"CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table} BEGIN SELECT RAISE(ABORT, '{table} is append-only'); END")
        out.append(f"CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table} BEGIN SELECT RAISE(ABORT, '{table} is append-only'); END")
    return out


def claim_sources(spec: Spec) -> tuple[str, ...]:
    return tuple(t.src for t in spec.transitions if "claim" in t.ops)


def claim_filter(spec: Spec) -> str:
    """WHERE clause of the claim query; the claim index is partial on exactly this clause."""
    return f"{one_of('status', claim_sources(spec))} AND quarantined = 0"


def recover_filter(spec: Spec) -> str:
    """Records a recovery scan may still have to classify because the monitor marked them
    (``stale.monitor_marked``; ``rules.stale_for_recovery`` decides on each)."""
    rule = spec.stale.monitor_marked
    statuses = rules.marked_statuses(spec)
    if rule is None or not statuses:
        return "0"
    unless = "".join(f" AND {f} = 0" for f in rule.unless)
    return f"status_reason = {lit(rule.reason)}{unless} AND {one_of('status', statuses)}"


def rule_indexes(spec: Spec) -> dict[str, str]:
    """Indexes whose definition follows the Spec's transitions (re-created at open when they differ)."""
    return {
        "work_claim": f"CREATE INDEX work_claim ON work(priority, seq) WHERE {claim_filter(spec)}",
        "work_recover": f"CREATE INDEX work_recover ON work(seq) WHERE {recover_filter(spec)}",
    }


FIXED_INDEXES = (
    "CREATE UNIQUE INDEX work_by_id ON work(work_id)",
    "CREATE UNIQUE INDEX work_identity ON work(source_system, source_id, ifnull(source_run_id, char(0)))",
    # keyed by started_at, which a renewal does not change: renewing touches only the table
    "CREATE INDEX work_lease ON work(started_at) WHERE lease_token IS NOT NULL",
    "CREATE INDEX work_wait ON work(waiting_deadline) WHERE waiting_deadline IS NOT NULL",
    "CREATE INDEX work_retry ON work(next_retry_at) WHERE next_retry_at IS NOT NULL",
)


def create_schema(conn: sqlite3.Connection, spec: Spec) -> None:
    """Create every table, index, view and trigger (in the caller's transaction)."""
    for sql in [_work_table(spec), _event_table(spec), *_journal_tables(spec), *FIXED_INDEXES,
                *rule_indexes(spec).values(), *_triggers(spec)]:
        conn.execute(sql)
    conn.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", [
        ("contract_shape", json.dumps(contract_shape(spec), sort_keys=True)),
    ])


def rules_out_of_date(conn: sqlite3.Connection, spec: Spec) -> bool:
    """Whether the transition guard or a rule index differs from the Spec (a read, no lock)."""
    have = {(s, d) for s, d in conn.execute("SELECT src, dst FROM allowed_transition")}
    if have != {(t.src, t.dst) for t in spec.transitions}:
        return True
    sqls = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND name IN ('work_claim', 'work_recover')"))
    return any(sqls.get(name) != sql for name, sql in rule_indexes(spec).items())


def sync_rules(conn: sqlite3.Connection, spec: Spec) -> None:
    """Make the transition guard and the rule indexes follow the Spec (in the caller's transaction)."""
    conn.execute("DELETE FROM allowed_transition")
    conn.executemany("INSERT INTO allowed_transition(src, dst) VALUES (?, ?)", [(t.src, t.dst) for t in spec.transitions])
    sqls = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND name IN ('work_claim', 'work_recover')"))
    for name, sql in rule_indexes(spec).items():
        if sqls.get(name) != sql:
            conn.execute(f"DROP INDEX IF EXISTS {name}")
            conn.execute(sql)
