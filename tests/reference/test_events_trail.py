"""The ledger keeps the event trails it has read (events()): what it hands out is still the file's
trail, new objects on every call, whoever appended to it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ledgercheck.reference.ledger import Ledger
from ledgercheck.spec import Spec

T0 = 100_000.0


def _cycle(led: Ledger, wid: str, t: float) -> None:
    tok = led.claim(owner="w", now=t, work_id=wid)["lease_token"]
    led.close_out(work_id=wid, token=tok, status="done", now=t + 1)


def test_a_changed_answer_does_not_change_the_next_one(db: Path, spec: Spec) -> None:
    with Ledger(db, spec) as led:
        wid = led.create(source_system="manual", source_id="a", now=T0)["work"]["work_id"]
        _cycle(led, wid, T0)
        first = led.events(work_id=wid)
        want = [dict(e, data=dict(e["data"])) for e in first]
        first[0]["type"] = "changed"
        first[-1]["data"]["status"] = "changed"
        first.append({"seq": 99})
        assert led.events(work_id=wid) == want
        again = led.events(work_id=wid)  # (the trail held since the last read)
        again[1]["data"].clear()
        assert led.events(work_id=wid) == want


def test_events_appended_by_another_connection_are_read(db: Path, spec: Spec) -> None:
    with Ledger(db, spec) as led, Ledger(db, spec) as other:
        wid = led.create(source_system="manual", source_id="a", now=T0)["work"]["work_id"]
        assert [e["type"] for e in led.events(work_id=wid)] == ["work_created"]
        _cycle(other, wid, T0)
        got = led.events(work_id=wid)
        assert got == other.events(work_id=wid)
        assert [e["seq"] for e in got] == list(range(spec.first_seq, spec.first_seq + len(got)))
        assert len(got) == 3


def test_a_trail_cut_behind_the_ledgers_back_is_read_again(db: Path, spec: Spec) -> None:
    with Ledger(db, spec) as led:
        wid = led.create(source_system="manual", source_id="a", now=T0)["work"]["work_id"]
        _cycle(led, wid, T0)
        full = led.events(work_id=wid)
        # a writer that bypasses the schema's guards removes the last event and its count
        c = sqlite3.connect(db)
        c.execute("DROP TRIGGER work_event_no_delete")
        c.execute("DROP TRIGGER work_guard")
        c.execute("DELETE FROM work_event WHERE work_id = ? AND seq = ?", (wid, full[-1]["seq"]))
        c.execute("UPDATE work SET event_count = event_count - 1 WHERE work_id = ?", (wid,))
        c.commit()
        c.close()
        assert led.events(work_id=wid) == full[:-1]


def test_nested_event_data_is_handed_out_anew_too(db: Path, spec: Spec) -> None:
    """A close-out's result is nested JSON in its event's data: a caller changing it inside the
    trail it got changes no later answer (flat data is copied at one level, nested data whole)."""
    with Ledger(db, spec) as led:
        wid = led.create(source_system="manual", source_id="a", now=T0)["work"]["work_id"]
        tok = led.claim(owner="w", now=T0, work_id=wid)["lease_token"]
        first = led.events(work_id=wid)  # kept: the trail so far (flat data)
        result = {"rows": [1, {"deep": [2.5, True, None]}], "n": 1}
        led.close_out(work_id=wid, token=tok, status="done", result=result, now=T0 + 1)
        got = led.events(work_id=wid)  # the kept events, then the close-out's, read now
        want = [dict(e, data=dict(e["data"])) for e in got]
        want[-1]["data"]["result"] = {"rows": [1, {"deep": [2.5, True, None]}], "n": 1}
        assert got == want and len(got) == len(first) + 1
        assert [type(x) for x in got[-1]["data"]["result"]["rows"][1]["deep"]] == [float, bool, type(None)]
        got[-1]["data"]["result"]["rows"][1]["deep"].append("changed")
        got[-1]["data"]["result"]["n"] = 2
        got[0]["data"]["status"] = "changed"
        again = led.events(work_id=wid)  # (from what was kept)
        assert again == want
        again[-1]["data"]["result"]["rows"].clear()
        assert led.events(work_id=wid) == want
