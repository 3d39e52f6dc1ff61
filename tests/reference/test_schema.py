"""The schema refuses bad writes on its own; the ledger follows the contract it is opened with."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.reference import ledger as ledger_mod
from ledgercheck.reference.ledger import Ledger, LedgerOpenError
from ledgercheck.reference.schema import recover_filter
from ledgercheck.reference.verify import verify
from ledgercheck.transport.protocol import LedgerError

T0 = 1000.0


def refused(c: sqlite3.Connection, sql: str, params: tuple[Any, ...] = (), match: str = "") -> str:
    with pytest.raises(sqlite3.IntegrityError) as info:
        c.execute(sql, params)
    assert match in str(info.value)
    return str(info.value)


@pytest.fixture
def populated(kit: Any) -> dict[str, dict[str, Any]]:
    return {s: kit.reach(s, now=T0) for s in ("queued", "running", "waiting_user", "done")}


def test_raw_forbidden_status_change_refused(db: Path, populated: Any, rawdb: Any) -> None:
    c = rawdb(db)
    done, queued = populated["done"]["work_id"], populated["queued"]["work_id"]
    refused(c, "UPDATE work SET status = 'running', owner = 'x', lease_token = 't', lease_expires_at = 1, finished_at = NULL, "
               "event_count = event_count + 1 WHERE work_id = ?", (done,), "forbidden status change")
    refused(c, "UPDATE work SET status = 'done', finished_at = 1, event_count = event_count + 1 WHERE work_id = ?", (queued,),
            "forbidden status change")
    refused(c, "UPDATE work SET status = 'paused' WHERE work_id = ?", (queued,), "forbidden status change")
    refused(c, "INSERT INTO work(seq, work_id, source_system, source_id, status, priority, created_at, updated_at, event_count) "
               "VALUES (99, 'x', 'manual', 'x', 'paused', 3, 0, 0, 1)", (), "CHECK")


def test_raw_status_change_without_event_refused(db: Path, populated: Any, rawdb: Any) -> None:
    c = rawdb(db)
    refused(c, "UPDATE work SET status = 'cancelled', finished_at = 1 WHERE work_id = ?", (populated["queued"]["work_id"],),
            "must append its event")


def test_raw_change_without_event_or_of_identity_refused(db: Path, populated: Any, rawdb: Any) -> None:
    c = rawdb(db)
    wid = populated["running"]["work_id"]
    refused(c, "UPDATE work SET priority = 0 WHERE work_id = ?", (wid,), "appends an event")
    refused(c, "UPDATE work SET work_id = 'other', event_count = event_count + 1 WHERE work_id = ?", (wid,), "identity")
    refused(c, "UPDATE work SET source_id = 'other', event_count = event_count + 1 WHERE work_id = ?", (wid,), "identity")


def test_raw_lease_version_decrease_refused(db: Path, populated: Any, rawdb: Any) -> None:
    c = rawdb(db)
    refused(c, "UPDATE work SET lease_version = lease_version - 1 WHERE work_id = ?", (populated["running"]["work_id"],),
            "lease_version decreased")


def test_raw_lease_coupling_refused(db: Path, populated: Any, rawdb: Any) -> None:
    c = rawdb(db)
    bump = ", event_count = event_count + 1"  # past the trigger, so that the CHECK is what refuses
    refused(c, f"UPDATE work SET lease_token = 'sneaky'{bump} WHERE work_id = ?", (populated["queued"]["work_id"],), "CHECK")
    refused(c, f"UPDATE work SET lease_token = NULL{bump} WHERE work_id = ?", (populated["running"]["work_id"],), "CHECK")
    refused(c, f"UPDATE work SET waiting_ref = NULL{bump} WHERE work_id = ?", (populated["waiting_user"]["work_id"],), "CHECK")
    refused(c, f"UPDATE work SET waiting_kind = 'external'{bump} WHERE work_id = ?", (populated["waiting_user"]["work_id"],), "CHECK")


def test_raw_terminal_record_frozen(db: Path, populated: Any, rawdb: Any) -> None:
    c = rawdb(db)
    refused(c, "UPDATE work SET result = '\"forged\"', event_count = event_count + 1 WHERE work_id = ?", (populated["done"]["work_id"],),
            "only by requeue")


def test_raw_event_update_and_delete_refused(db: Path, populated: Any, rawdb: Any) -> None:
    c = rawdb(db)
    wid = populated["running"]["work_id"]
    refused(c, "UPDATE work_event SET type = 'cancelled' WHERE work_id = ?", (wid,), "append-only")
    refused(c, "DELETE FROM work_event WHERE work_id = ?", (wid,), "append-only")
    refused(c, "DELETE FROM work WHERE work_id = ?", (wid,), "never deleted")
    refused(c, "INSERT INTO work_event(work_id, seq, type, from_status, to_status, at, data) VALUES (?, 99, 'claimed', 'queued', "
               "'running', 1, '{}')", (wid,), "does not match")
    refused(c, "INSERT INTO work_event(work_id, seq, type, at, data) VALUES (?, 1, 'no_such_event', 1, '{}')", (wid,), "CHECK")


def test_raw_log_is_append_only(kit: Any, db: Path, rawdb: Any) -> None:
    kit.led.log_append(stream="s", expected_seq=0, kind="k", now=T0)
    c = rawdb(db)
    refused(c, "UPDATE log_entry SET kind = 'x'", (), "append-only")
    refused(c, "DELETE FROM log_entry", (), "append-only")


def test_guards_do_not_fire_on_the_ledgers_own_writes(kit: Any, spec: Any) -> None:
    for status in spec.statuses:
        for _ in range(2):
            kit.reach(status, now=T0)
    kit.led.recover(now=T0 + 10**6)
    kit.led.expire(now=T0 + 10**6)
    assert verify(kit.led) == []


def test_a_connection_never_trusts_a_stale_copy_of_a_record(db: Path, spec: Any) -> None:
    """Each ledger keeps the records it wrote; another writer's change must be seen, never the old copy."""
    with Ledger(db, spec) as a, Ledger(db, spec) as b:
        w = a.create(source_system="manual", source_id="x", now=T0)["work"]
        w = a.claim(owner="a", work_id=w["work_id"], now=T0)
        a.renew(work_id=w["work_id"], token=w["lease_token"], now=T0 + 1)
        b.expire(now=T0 + 3600)
        b.requeue(work_id=w["work_id"], now=T0 + 3601)
        taken = b.claim(owner="b", now=T0 + 3602)
        assert a.get(work_id=w["work_id"]) == taken
        with pytest.raises(LedgerError) as info:
            a.renew(work_id=w["work_id"], token=w["lease_token"], now=T0 + 3603)
        assert info.value.code == "stale_lease"
        r = a.renew(work_id=w["work_id"], token=taken["lease_token"], now=T0 + 3604)
        assert r["owner"] == "b" and r["lease_version"] == 2 and len(a.events(work_id=w["work_id"])) == 7
        r["owner"] = "mutated by the caller"  # a caller's copy is its own
        assert a.get(work_id=w["work_id"])["owner"] == "b" == b.get(work_id=w["work_id"])["owner"]


def test_an_interrupted_transaction_leaves_no_trace(db: Path, spec: Any) -> None:
    """A hook raising inside the transaction (before COMMIT) rolls everything back, cached copies included."""
    with Ledger(db, spec) as led:
        w = led.create(source_system="manual", source_id="x", now=T0)["work"]
        w = led.claim(owner="a", work_id=w["work_id"], now=T0)

        def boom(point: str) -> None:
            if point == "ledger.after_event_insert":
                raise RuntimeError("interrupted")

        led.crash_hook = boom
        with pytest.raises(RuntimeError):
            led.close_out(work_id=w["work_id"], token=w["lease_token"], status="done", now=T0 + 1)
        led.crash_hook = None
        assert led.get(work_id=w["work_id"]) == w and len(led.events(work_id=w["work_id"])) == 2
        assert led.renew(work_id=w["work_id"], token=w["lease_token"], now=T0 + 2)["status"] == "running"
        assert verify(led) == []


def test_overlay_transition_is_followed(tmp_path: Path, overlay: Any) -> None:
    # the shipped table without the retry_scheduled -> cancelled edge
    s2 = overlay("""transitions:
  - {from: queued, to: running, ops: [claim]}
  - {from: queued, to: cancelled, ops: [cancel]}
  - {from: running, to: waiting_user, ops: [set_waiting]}
  - {from: running, to: waiting_external, ops: [set_waiting]}
  - {from: running, to: done, ops: [close_out]}
  - {from: running, to: failed, ops: [close_out, fail]}
  - {from: running, to: timeout, ops: [close_out, expire, recover]}
  - {from: running, to: retry_scheduled, ops: [fail]}
  - {from: running, to: cancelled, ops: [close_out], guard: cancel_requested}
  - {from: waiting_user, to: running, ops: [resume]}
  - {from: waiting_user, to: timeout, ops: [expire]}
  - {from: waiting_user, to: cancelled, ops: [cancel]}
  - {from: waiting_external, to: running, ops: [resume]}
  - {from: waiting_external, to: timeout, ops: [expire]}
  - {from: waiting_external, to: cancelled, ops: [cancel]}
  - {from: retry_scheduled, to: queued, ops: [promote_due]}
  - {from: done, to: queued, ops: [requeue], requeue: true}
  - {from: failed, to: queued, ops: [requeue], requeue: true}
  - {from: timeout, to: queued, ops: [requeue, recover], requeue: true}
  - {from: cancelled, to: queued, ops: [requeue], requeue: true}
""")
    path = tmp_path / "overlay.db"
    with Ledger(path, s2) as led:
        w = led.create(source_system="manual", source_id="a", now=T0)["work"]
        w = led.claim(owner="o", work_id=w["work_id"], now=T0)
        w = led.fail(work_id=w["work_id"], token=w["lease_token"], error_class="rate_limited", now=T0)
        with pytest.raises(LedgerError) as info:
            led.cancel(work_id=w["work_id"], now=T0)
        assert info.value.code == "invalid_transition"
    with Ledger(path) as led:  # reopened with the shipped contract: the edge exists again, in code and in the guard
        assert led.cancel(work_id=w["work_id"], now=T0)["status"] == "cancelled"
    with Ledger(path, s2) as led:  # and the database guard follows the overlay again
        c = sqlite3.connect(str(path))
        assert ("retry_scheduled", "cancelled") not in set(c.execute("SELECT src, dst FROM allowed_transition"))
        c.close()


def test_overlay_timing_is_followed(tmp_path: Path, overlay: Any) -> None:
    s2 = overlay("lease:\n  ttl: 7s\n  renew_interval: 2s\n  grace: 1s\n  by_source:\n    control: {ttl: 7s, renew_interval: 2s, grace: 1s}\n"
                 "retry:\n  policy: {max_attempts: 5, initial_backoff: 1s, jitter: none}\n"
                 "phases:\n  execution: {timeout: 20s}\n")
    with Ledger(tmp_path / "timing.db", s2) as led:
        w = led.create(source_system="manual", source_id="a", now=T0)["work"]
        w = led.claim(owner="o", work_id=w["work_id"], now=T0)
        assert w["lease_expires_at"] == T0 + 7
        assert led.expire(now=T0 + 8) == []
        assert [m["reason"] for m in led.expire(now=T0 + 8.5)] == ["lease_expired"]
        x = led.create(source_system="manual", source_id="b", now=T0)["work"]
        x = led.claim(owner="o", work_id=x["work_id"], now=T0)
        f = led.fail(work_id=x["work_id"], token=x["lease_token"], error_class="rate_limited", now=T0)
        assert f["next_retry_at"] == T0 + 1
        y = led.create(source_system="manual", source_id="c", now=T0)["work"]
        y = led.claim(owner="o", work_id=y["work_id"], now=T0)
        for t in range(2, 22, 2):
            led.renew(work_id=y["work_id"], token=y["lease_token"], now=T0 + t)
        assert [m["reason"] for m in led.expire(now=T0 + 21)] == ["execution_timeout"]


def test_statuses_differ_refused(tmp_path: Path, overlay: Any, kit: Any) -> None:
    path = kit.led.path
    kit.new(now=T0)
    table = "".join(f"  - {{from: {t.src}, to: {t.dst}, ops: [{', '.join(t.ops)}]"
                    f"{', guard: ' + t.guard if t.guard else ''}{', requeue: true' if t.requeue else ''}}}\n" for t in kit.led.spec.transitions)
    s2 = overlay("statuses:\n  paused: {terminal: false, description: 'Held by an operator.'}\ntransitions:\n" + table
                 + "  - {from: queued, to: paused, ops: [expire]}\n  - {from: paused, to: queued, ops: [promote_due]}\n")
    assert "paused" in s2.statuses
    with pytest.raises(LedgerOpenError) as info:
        Ledger(path, s2)
    assert str(path) in str(info.value) and "statuses" in str(info.value) and "paused" in str(info.value)
    s3 = overlay("priority: {default: 3, min: 0, max: 20}\n")
    with pytest.raises(LedgerOpenError, match="priority"):
        Ledger(path, s3)


def test_hot_queries_use_their_indexes(ledger: Ledger) -> None:
    def plan(sql: str, *params: Any) -> str:
        return " | ".join(r[3] for r in ledger.conn.execute("EXPLAIN QUERY PLAN " + sql, params))

    assert "work_claim" in plan(ledger._claim_sql)
    assert "INTEGER PRIMARY KEY" in plan("SELECT * FROM work WHERE seq = 1") or "rowid" in plan("SELECT * FROM work WHERE seq = 1")
    assert "work_by_id" in plan("SELECT * FROM work WHERE work_id = ?", "x")
    assert "PRIMARY KEY" in plan("SELECT * FROM work_event WHERE work_id = ? ORDER BY seq", "x")
    for sql in (ledger_mod._WAIT_DUE, ledger_mod._RETRY_DUE):
        assert "USING INDEX" in plan(sql, 1.0) and "SCAN work" not in plan(sql, 1.0).replace("USING", "")
    assert "work_lease" in plan(ledger_mod._LEASED)
    assert "work_recover" in plan(ledger_mod.SELECT_WORK + " WHERE " + recover_filter(ledger.spec))
