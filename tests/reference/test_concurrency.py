"""Several real processes claiming from one ledger file at once."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
import types
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.reference.ledger import Ledger
from ledgercheck.reference.verify import verify
from ledgercheck.transport.protocol import LedgerError
from patience import SAFETY_NET

ITEMS = 200


def claim_round(procs: list[str], db: Path, tmp: Path, tag: str, claimers: int) -> list[dict[str, Any]]:
    go = tmp / f"go-{tag}"
    outs = [tmp / f"claims-{tag}-{i}.jsonl" for i in range(claimers)]
    ps = [subprocess.Popen([*procs, "claim", str(db), str(o), str(go), str(claimers)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
          for o in outs]
    for p in ps:  # every claimer has its ledger open before any of them starts
        assert p.stdout is not None and p.stdout.readline().strip() == "ready", p.stderr.read() if p.stderr else ""
    go.touch()
    for p in ps:
        _, err = p.communicate(timeout=SAFETY_NET)
        assert p.returncode == 0, err
    return [json.loads(line) for o in outs for line in o.read_text().splitlines()]


@pytest.fixture
def filled(db: Path) -> Path:
    with Ledger(db) as led:
        for i in range(ITEMS):
            led.create(source_system="manual", source_id=f"job-{i}", priority=i % 4, now=0.0)
    return db


def test_concurrent_claimers_never_share_an_item_and_fence_stale_tokens(procs: list[str], filled: Path, tmp_path: Path) -> None:
    # three processes claim, renew and close out everything at once
    claims = claim_round(procs, filled, tmp_path, "a", 3)
    ids = [c["work_id"] for c in claims]
    assert len(ids) == len(set(ids)) == ITEMS
    assert {c["lease_version"] for c in claims} == {1}
    assert len({c["owner"] for c in claims}) == 3, "every claimer holds a lease at once (procs.py's barrier)"
    first = {c["work_id"]: c for c in claims}
    with Ledger(filled) as led:
        for w in led.list():
            evs = led.events(work_id=w["work_id"])
            claimed = [e for e in evs if e["type"] == "claimed"]
            assert len(claimed) == 1 and claimed[0]["data"]["owner"] == first[w["work_id"]]["owner"]
            assert w["status"] == "done" and w["result"] == {"by": first[w["work_id"]]["owner"]}
        assert verify(led) == []
        for wid in first:
            led.requeue(work_id=wid, now=10.0)
    # a second round: every acquire raises lease_version and issues a fresh token
    second = {c["work_id"]: c for c in claim_round(procs, filled, tmp_path, "b", 2)}
    assert set(second) == set(first)
    assert all(second[w]["lease_version"] == first[w]["lease_version"] + 1 for w in first)
    assert all(second[w]["token"] != first[w]["token"] for w in first)
    # a third holder; every token of the earlier leases is refused and writes nothing
    with Ledger(filled) as led:
        for wid in first:
            led.requeue(work_id=wid, now=20.0)
        live = {}
        while (w := led.claim(owner="holder", now=21.0)) is not None:
            live[w["work_id"]] = w
            assert w["lease_version"] == 3
        for wid, old in list(first.items())[:20]:
            snap, trail = led.get(work_id=wid), led.events(work_id=wid)
            for stale in (old["token"], second[wid]["token"]):
                for fn, kw in [(led.renew, {}), (led.close_out, {"status": "done"}), (led.fail, {"error_class": "rate_limited"}),
                               (led.set_waiting, {"kind": "user", "ref": "r"}),
                               (led.effect_begin, {"step_id": "s", "tool": "t", "input": 1, "step_class": "pure"})]:
                    with pytest.raises(LedgerError) as info:
                        fn(work_id=wid, token=stale, now=22.0, **kw)
                    assert info.value.code == "stale_lease"
            assert led.get(work_id=wid) == snap and led.events(work_id=wid) == trail and led.effect_list(work_id=wid) == []
            assert snap["lease_token"] == live[wid]["lease_token"]


def test_a_ledger_opens_beside_writers_that_never_pause(procs: list[str], db: Path) -> None:
    # Two workers write as fast as they can; opening the file a third time must get through their
    # locks, again and again.  How the opening waits (in short steps, as every operation does, not
    # in SQLite's own busy handler) is checked below without a clock; here each open may wait as
    # long as the machine makes it (the safety net of minutes only turns a hang into a failure).
    Ledger(db).close()
    ws = [subprocess.Popen([*procs, "write", str(db), str(seed)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
          for seed in (1, 2)]
    try:
        for p in ws:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready", p.stderr.read() if p.stderr else ""
        for _ in range(20):
            Ledger(db, busy_timeout=SAFETY_NET).close()
    finally:
        for p in ws:
            p.kill()
            p.wait()


def test_opening_waits_for_writers_in_short_steps_not_in_sqlites_busy_handler(db: Path, monkeypatch) -> None:
    """SQLite's own busy handler sleeps up to 100 ms between tries and loses every race against
    writers that retry every few milliseconds; the ledger turns it off and retries itself, after
    half a millisecond at first and never more than LONGEST_PAUSE (x1.5 jitter).  Checked on the
    pauses themselves (recorded, not slept), so the machine's speed does not enter."""
    from ledgercheck.reference import opening

    Ledger(db).close()
    with Ledger(db) as led:
        assert led.conn.execute("PRAGMA busy_timeout").fetchone()[0] == 0  # SQLite's handler is off
    pauses: list[float] = []
    monkeypatch.setattr(opening, "time", types.SimpleNamespace(sleep=pauses.append, monotonic=time.monotonic))
    tries = iter(range(12))

    def locked() -> str:
        if next(tries) < 11:
            raise sqlite3.OperationalError("database is locked")
        return "in"

    assert opening.while_busy(locked, SAFETY_NET) == "in"
    assert len(pauses) == 11 and all(0 < p <= opening.LONGEST_PAUSE * 1.5 for p in pauses), pauses
    assert pauses[0] <= opening.FIRST_PAUSE * 1.5
