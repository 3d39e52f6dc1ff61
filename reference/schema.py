"""The reference ledger's SQLite schema, generated from the contract.

Tables are declared through sqlite-utils (``create_table_sql``) and then given CHECK
constraints built from the Spec: the status enum, the source systems, the priority range, the
receipt states, and the coupling between a status and the fields it needs (a leased status has
a lease token, a waiting status has a reference).  Triggers enforce what a CHECK cannot see:
a status change must be an edge of the transition table (kept in ``allowed_transition``,
rewritten from the Spec at every open), lease_version never decreases, and events are never
updated or deleted.
"""

from __future__ import annotations

import sqlite3

import sqlite_utils
from ledgercheck.spec import Spec

SCHEMA_VERSION = 1
APPLICATION_ID = 0x4C444743  # "LDGC"


def _q(values: list[str] | tuple[str, ...]) -> str:
    return ", ".join("'" + v.replace("'", "''") + "'" for v in values)


def _with_checks(sql: str, checks: list[str]) -> str:
    """Add table CHECK constraints to a CREATE TABLE statement from sqlite-utils."""
    body = sql.strip().rstrip(";").rstrip()
    suffix = ""
    if body.endswith("STRICT"):
        body, suffix = body[: -len("STRICT")].rstrip(), " STRICT"
    if not body.endswith(")"):
        raise ValueError(f"unexpected CREATE TABLE statement: {sql!r}")
    extra = "".join(f",\n   CHECK ({c})" for c in checks)
    return body[:-1].rstrip() + extra + "\n)" + suffix


def create_schema(conn: sqlite3.Connection, spec: Spec) -> None:
    """Create every table, index, view and trigger (in the caller's transaction)."""
    db = sqlite_utils.Database(conn)
    statuses = list(spec.statuses)
    leased = [s for s, st in spec.statuses.items() if st.leased]
    waiting = [s for s, st in spec.statuses.items() if st.waiting_kind]
    terminal = list(spec.terminal_statuses)

    work_sql = db.create_table_sql(
        "work",
        {
            "work_id": str, "seq": int, "source_system": str, "source_id": str, "source_run_id": str,
            "status": str, "status_reason": str, "priority": int, "attempt": int, "owner": str,
            "lease_token": str, "lease_version": int, "lease_expires_at": float, "waiting_kind": str,
            "waiting_ref": str, "waiting_deadline": float, "next_retry_at": float, "error_class": str,
            "cancel_requested": int, "quarantined": int, "result": str, "payload": str, "retry_policy": str,
            "created_at": float, "updated_at": float, "started_at": float, "finished_at": float, "event_count": int,
        },
        pk="work_id",
        not_null=["seq", "source_system", "source_id", "status", "priority", "attempt", "lease_version",
                  "cancel_requested", "quarantined", "created_at", "updated_at", "event_count"],
        defaults={"attempt": 0, "lease_version": 0, "cancel_requested": 0, "quarantined": 0, "event_count": 0},
        strict=True,
    )
    work_checks = [
        f"status IN ({_q(statuses)})",
        f"source_system IN ({_q(list(spec.source_systems))})",
        f"priority BETWEEN {spec.priority_min} AND {spec.priority_max}",
        "attempt >= 0",
        "lease_version >= 0",
        "cancel_requested IN (0, 1)",
        "quarantined IN (0, 1)",
        f"(status IN ({_q(leased)})) = (lease_token IS NOT NULL)",
        f"(status IN ({_q(leased)})) = (lease_expires_at IS NOT NULL)",
        f"(status IN ({_q(waiting)})) = (waiting_ref IS NOT NULL AND waiting_deadline IS NOT NULL)",
        f"status NOT IN ({_q(terminal)}) OR finished_at IS NOT NULL",
    ]
    for s in spec.run_id_required_for:
        work_checks.append(f"source_system <> '{s}' OR source_run_id IS NOT NULL")
    conn.execute(_with_checks(work_sql, work_checks))
    conn.execute("CREATE UNIQUE INDEX work_identity ON work(source_system, source_id, ifnull(source_run_id, char(0)))")
    conn.execute("CREATE UNIQUE INDEX work_seq ON work(seq)")
    conn.execute("CREATE INDEX work_claim ON work(status, priority, seq)")
    conn.execute("CREATE INDEX work_lease ON work(lease_expires_at) WHERE lease_expires_at IS NOT NULL")
    conn.execute("CREATE INDEX work_wait ON work(waiting_deadline) WHERE waiting_deadline IS NOT NULL")
    conn.execute("CREATE INDEX work_retry ON work(next_retry_at) WHERE next_retry_at IS NOT NULL")

    ev_sql = db.create_table_sql(
        "work_event",
        {"event_id": int, "work_id": str, "seq": int, "type": str, "from_status": str, "to_status": str,
         "at": float, "actor": str, "data": str},
        pk="event_id",
        foreign_keys=[("work_id", "work", "work_id")],
        not_null=["work_id", "seq", "type", "at", "data"],
        strict=True,
    )
    conn.execute(_with_checks(ev_sql, [
        f"type IN ({_q(list(spec.events))})",
        f"from_status IS NULL OR from_status IN ({_q(statuses)})",
        f"to_status IS NULL OR to_status IN ({_q(statuses)})",
        f"seq >= {spec.first_seq}",
    ]))
    conn.execute("CREATE UNIQUE INDEX work_event_seq ON work_event(work_id, seq)")

    eff_sql = db.create_table_sql(
        "effect",
        {"key": str, "work_id": str, "step_id": str, "tool": str, "step_class": str, "input_hash": str,
         "state": str, "result": str, "created_at": float, "updated_at": float, "seq": int},
        pk="key",
        foreign_keys=[("work_id", "work", "work_id")],
        not_null=["work_id", "step_id", "tool", "step_class", "input_hash", "state", "created_at", "updated_at", "seq"],
        strict=True,
    )
    conn.execute(_with_checks(eff_sql, [
        f"state IN ({_q(list(spec.receipt_states))})",
        f"step_class IN ({_q(list(spec.step_classes))})",
        "length(key) = 64 AND length(input_hash) = 64",
    ]))
    conn.execute("CREATE INDEX effect_work ON effect(work_id, seq)")

    inbox_sql = db.create_table_sql(
        "inbox",
        {"recipient": str, "message_id": str, "sender": str, "body": str, "arrival": int, "state": str,
         "nacks": int, "delivered_at": float, "updated_at": float, "last_error": str},
        pk=("recipient", "message_id"),
        not_null=["sender", "arrival", "state", "nacks", "delivered_at", "updated_at"],
        strict=True,
    )
    conn.execute(_with_checks(inbox_sql, ["state IN ('pending', 'inflight', 'acked', 'dead')", "nacks >= 0"]))
    conn.execute("CREATE INDEX inbox_pending ON inbox(recipient, state, arrival)")
    conn.execute("CREATE VIEW inbox_dead_letter AS SELECT recipient, message_id, sender, body, nacks, last_error, updated_at AS dead_at FROM inbox WHERE state = 'dead'")

    out_sql = db.create_table_sql(
        "outbox",
        {"key": str, "seq": int, "destination": str, "payload": str, "payload_hash": str, "work_id": str,
         "state": str, "provider_ref": str, "created_at": float, "sent_at": float},
        pk="key",
        not_null=["seq", "destination", "payload", "payload_hash", "state", "created_at"],
        strict=True,
    )
    conn.execute(_with_checks(out_sql, ["state IN ('pending', 'sent')", "(state = 'sent') = (provider_ref IS NOT NULL)"]))
    conn.execute("CREATE INDEX outbox_pending ON outbox(state, seq)")

    db.create_table("log_entry", {"stream": str, "seq": int, "kind": str, "payload": str, "at": float},
                    pk=("stream", "seq"), not_null=["kind", "payload", "at"], strict=True)
    db.create_table("allowed_transition", {"src": str, "dst": str}, pk=("src", "dst"), strict=True)
    db.create_table("meta", {"key": str, "value": str}, pk="key", strict=True)

    conn.execute("""CREATE TRIGGER work_status_guard BEFORE UPDATE OF status ON work
        WHEN NEW.status <> OLD.status
         AND NOT EXISTS (SELECT 1 FROM allowed_transition WHERE src = OLD.status AND dst = NEW.status)
        BEGIN SELECT RAISE(ABORT, 'invalid_transition: forbidden status change'); END""")
    conn.execute("""CREATE TRIGGER work_lease_version_guard BEFORE UPDATE OF lease_version ON work
        WHEN NEW.lease_version < OLD.lease_version
        BEGIN SELECT RAISE(ABORT, 'invalid_transition: lease_version decreased'); END""")
    for table in ("work_event", "log_entry"):
        conn.execute(f"CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table} BEGIN SELECT RAISE(ABORT, '{table} is append-only'); END")
        conn.execute(f"CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table} BEGIN SELECT RAISE(ABORT, '{table} is append-only'); END")


def sync_transitions(conn: sqlite3.Connection, spec: Spec) -> None:
    """Make the transition guard follow the Spec the ledger was opened with."""
    conn.execute("DELETE FROM allowed_transition")
    conn.executemany("INSERT INTO allowed_transition(src, dst) VALUES (?, ?)", [(t.src, t.dst) for t in spec.transitions])
