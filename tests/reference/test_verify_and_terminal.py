"""`ledger verify` reports every problem and keeps going; `ledger show`/`list` never print raw control bytes."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.reference.ledger import Ledger
from ledgercheck.spec import Spec

from ledgercheck.cli import main

T0 = 100_000.0
# ESC sequences (clear screen, set the window title), BEL, NUL, a C1 CSI, a right-to-left override,
# a bidi isolate and a carriage return: none of them may reach a terminal raw
NASTY = "\x1b[2J\x1b]0;owned\x07\x00\x9b31m\u202eexe.txt\u2066\r"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def run(capsys: Any, db: Path, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["ledger", args[0], "--db", str(db), *args[1:]])
    out, err = capsys.readouterr()
    return rc, out, err


def _two_records(db: Path, spec: Spec) -> tuple[str, str]:
    with Ledger(db, spec) as led:
        a = led.create(source_system="manual", source_id="a", now=T0)["work"]["work_id"]
        b = led.create(source_system="manual", source_id="b", now=T0)["work"]["work_id"]
    return a, b


def _sql(db: Path, *statements: tuple[str, tuple[Any, ...]]) -> None:
    c = sqlite3.connect(db)
    for sql, params in statements:
        c.execute(sql, params)
    c.commit()
    c.close()


# ---- verify ------------------------------------------------------------------------------------


def test_a_record_without_events_is_one_problem_among_the_others(capsys: Any, db: Path, spec: Spec) -> None:
    a, b = _two_records(db, spec)
    # a writer that bypasses the schema: drops the append-only guard and deletes a's whole trail,
    # and (second problem) moves b to cancelled without its event
    _sql(db, ("DROP TRIGGER work_event_no_delete", ()), ("DELETE FROM work_event WHERE work_id = ?", (a,)),
         ("DROP TRIGGER work_guard", ()),
         ("UPDATE work SET status = 'cancelled', finished_at = 1 WHERE work_id = ?", (b,)))
    rc, out, err = run(capsys, db, "verify")
    assert rc == 1, err
    lines = out.splitlines()
    assert any(ln.startswith(f"{a}: the record has no events at all") for ln in lines), out
    assert any(ln.startswith(f"{b}: ") and "cancelled" in ln for ln in lines), out
    assert any(ln.startswith("trigger work_event_no_delete: missing") for ln in lines), out
    assert any(ln.startswith("trigger work_guard: missing") for ln in lines), out
    doc = json.loads(run(capsys, db, "verify", "--json")[1])
    assert doc["ok"] is False and doc["records"] == 2 and len(doc["problems"]) == len(lines)


def test_a_dropped_guard_trigger_alone_is_reported(capsys: Any, db: Path, spec: Spec) -> None:
    _two_records(db, spec)
    assert run(capsys, db, "verify")[0] == 0
    _sql(db, ("DROP TRIGGER work_no_delete", ()))
    rc, out, _ = run(capsys, db, "verify")
    assert rc == 1 and out.splitlines() == ["trigger work_no_delete: missing (the ledger no longer refuses the writes it guards)"]


def test_an_altered_guard_trigger_is_reported(capsys: Any, db: Path, spec: Spec) -> None:
    _two_records(db, spec)
    _sql(db, ("DROP TRIGGER work_no_delete", ()),
         ("CREATE TRIGGER work_no_delete BEFORE DELETE ON work WHEN 0 BEGIN SELECT RAISE(ABORT, 'never'); END", ()))
    rc, out, _ = run(capsys, db, "verify")
    assert rc == 1 and out.splitlines() == ["trigger work_no_delete: differs from the one the schema creates for this contract"]


# ---- terminal-safe ledger output --------------------------------------------------------------


@pytest.fixture
def hostile(db: Path, spec: Spec) -> str:
    with Ledger(db, spec) as led:
        w = led.create(source_system="manual", source_id=f"src{NASTY}", now=T0)["work"]
        led.claim(owner=f"own{NASTY}", work_id=w["work_id"], now=T0)
        return w["work_id"]


def _safe(text: str) -> None:
    assert not RAW.search(text), repr(text)
    for shown in ("\\x1b[2J", "\\x07", "\\x00", "\\x9b", "\\u202e", "\\u2066", "\\x0d"):
        assert shown in text, (shown, text)


def test_show_and_list_escape_control_bytes_in_owners_and_ids(capsys: Any, db: Path, hostile: str) -> None:
    rc, out, err = run(capsys, db, "show", hostile, "--now", str(T0 + 1))
    assert rc == 0, err
    _safe(out)
    rc, out, err = run(capsys, db, "list", "--now", str(T0 + 1))
    assert rc == 0, err
    assert not RAW.search(out) and "own\\x1b[2J" in out, repr(out)
    rc, out, err = run(capsys, db, "events", hostile)
    assert rc == 0, err  # event data is printed as JSON, whose own escapes show C0 controls; bidi is escaped too
    assert not RAW.search(out) and "\\u001b[2J" in out and "\\u202e" in out, repr(out)
    # --json keeps the exact strings (JSON escapes control characters itself)
    doc = json.loads(run(capsys, db, "show", hostile, "--json", "--now", str(T0 + 1))[1])
    assert doc["work"]["owner"] == f"own{NASTY}"


def test_a_hostile_work_id_is_escaped_in_show_and_list(capsys: Any, db: Path, spec: Spec) -> None:
    with Ledger(db, spec) as led:
        wid = led.create(source_system="manual", source_id="x", now=T0)["work"]["work_id"]
    bad = f"id{NASTY}"
    _sql(db, ("DROP TRIGGER work_guard", ()), ("PRAGMA foreign_keys = OFF", ()),
         ("UPDATE work SET work_id = ? WHERE work_id = ?", (bad, wid)),
         ("DROP TRIGGER work_event_no_update", ()), ("UPDATE work_event SET work_id = ? WHERE work_id = ?", (bad, wid)))
    rc, out, err = run(capsys, db, "list", "--now", str(T0 + 1))
    assert rc == 0, err
    assert not RAW.search(out) and "id\\x1b[2J" in out, repr(out)
    rc, out, err = run(capsys, db, "show", bad, "--now", str(T0 + 1))
    assert rc == 0, err
    _safe(out)
    rc, out, err = run(capsys, db, "verify")
    assert rc == 1 and not RAW.search(out + err), repr(out + err)
