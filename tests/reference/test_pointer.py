"""active-work.json: derived from the database, rewritten atomically, reconciled at open."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from ledgercheck.reference.ledger import Ledger
from ledgercheck.reference.pointer import read_pointer

T0 = 1000.0


def ids(pointer: Path) -> list[str]:
    return [a["work_id"] for a in read_pointer(pointer)["active"]]


def test_pointer_follows_every_lease_change(tmp_path: Path, spec: Any) -> None:
    pointer = tmp_path / "active-work.json"
    with Ledger(tmp_path / "ledger.db", spec, pointer_file=pointer) as led:
        assert read_pointer(pointer)["active"] == []
        a = led.create(source_system="manual", source_id="a", now=T0)["work"]
        b = led.create(source_system="control", source_id="b", now=T0)["work"]
        a = led.claim(owner="w1", work_id=a["work_id"], now=T0)
        b = led.claim(owner="w2", work_id=b["work_id"], now=T0)
        doc = read_pointer(pointer)
        assert doc["ledger"] == str(led.path) and [x["work_id"] for x in doc["active"]] == [a["work_id"], b["work_id"]]
        entry = doc["active"][1]
        lt = spec.lease_for("control")
        assert entry == {"work_id": b["work_id"], "status": "running", "owner": "w2", "lease_version": 1,
                         "lease_expires_at": T0 + lt.ttl, "lapses_at": T0 + lt.ttl + lt.grace}
        led.renew(work_id=b["work_id"], token=b["lease_token"], now=T0 + 10)
        assert read_pointer(pointer)["active"][1]["lease_expires_at"] == T0 + 10 + lt.ttl
        led.set_waiting(work_id=a["work_id"], token=a["lease_token"], kind="user", ref="r", now=T0 + 11)
        assert ids(pointer) == [b["work_id"]]
        led.resume(work_id=a["work_id"], owner="w3", now=T0 + 12)
        assert ids(pointer) == [a["work_id"], b["work_id"]]
        led.expire(now=T0 + 10 + lt.ttl + lt.grace + 1)
        assert ids(pointer) == [a["work_id"]]
        a = led.get(work_id=a["work_id"])
        led.close_out(work_id=a["work_id"], token=a["lease_token"], status="done", now=T0 + 13)
        assert ids(pointer) == []
        assert led.active(now=T0 + 13) == []


def test_pointer_is_reconciled_at_open_and_never_read_back(tmp_path: Path) -> None:
    db, pointer = tmp_path / "ledger.db", tmp_path / "active-work.json"
    with Ledger(db) as led:  # written without a pointer: the file does not know
        w = led.create(source_system="manual", source_id="a", now=T0)["work"]
        led.claim(owner="w1", work_id=w["work_id"], now=T0)
    pointer.write_text(json.dumps({"active": [{"work_id": "ghost", "owner": "nobody"}]}))
    (tmp_path / "active-work.json.12345.tmp").write_text("{half a docu")  # left by a killed writer
    with Ledger(db, pointer_file=pointer) as led:
        assert ids(pointer) == [w["work_id"]]
        assert [x["work_id"] for x in led.list()] == [w["work_id"]]  # the ghost never entered the database
    assert not list(tmp_path.glob("active-work.json.*.tmp"))
    pointer.write_text("garbage")
    with Ledger(db, pointer_file=pointer):
        assert ids(pointer) == [w["work_id"]]


def test_pointer_rewrite_is_atomic(tmp_path: Path) -> None:
    pointer = tmp_path / "active-work.json"
    seen, bad = [0], []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                text = pointer.read_text()
            except FileNotFoundError:
                continue
            try:
                json.loads(text)
                seen[0] += 1
            except ValueError:
                bad.append(text)

    t = threading.Thread(target=reader)
    with Ledger(tmp_path / "ledger.db", pointer_file=pointer) as led:
        t.start()
        try:
            for i in range(150):
                w = led.create(source_system="manual", source_id=f"s{i}", now=T0)["work"]
                c = led.claim(owner="w", work_id=w["work_id"], now=T0)
                if i % 2:
                    led.close_out(work_id=w["work_id"], token=c["lease_token"], status="done", now=T0)
        finally:
            stop.set()
            t.join()
        assert len(ids(pointer)) == 75
    assert bad == [] and seen[0] > 0


def test_two_ledgers_on_one_file_leave_the_pointer_complete(tmp_path: Path) -> None:
    db, pointer = tmp_path / "ledger.db", tmp_path / "active-work.json"
    with Ledger(db, pointer_file=pointer) as one, Ledger(db, pointer_file=pointer) as two:
        made = []
        for i in range(20):
            led = one if i % 2 else two
            w = led.create(source_system="manual", source_id=f"s{i}", now=T0)["work"]
            made.append(led.claim(owner=f"w{i % 2}", work_id=w["work_id"], now=T0)["work_id"])
        assert ids(pointer) == made
