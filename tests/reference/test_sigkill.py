"""A worker process is SIGKILLed (psutil) at random instants while it writes; the ledger must survive.

After every kill the file is reopened and checked: SQLite's integrity check passes; every
record's snapshot equals the fold of its events (the fold fields of the contract); no status
change lacks its event or the other way round (the transition events chain from status to
status and end at the record's status); event seqs are gapless; no record holds a lease in a
status that is not leased; and the active pointer matches the database again.

The default run does ten kills on one file (each reopen also recovers the file the last kill
left); LEDGERCHECK_KILL_RUNS=200 does more.  The ledger's own crash points (inside the
transaction before COMMIT, and after COMMIT before the pointer is rewritten) are killed at
deterministically as well.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import psutil
import pytest
from ledgercheck.reference.ledger import CRASH_POINTS, Ledger
from ledgercheck.reference.pointer import read_pointer
from ledgercheck.reference.verify import verify
from ledgercheck.spec.rules import fold
from patience import SAFETY_NET, until

RUNS = int(os.environ.get("LEDGERCHECK_KILL_RUNS", "10"))
SEED = int(os.environ.get("LEDGERCHECK_KILL_SEED", "20261121"))


def start(argv: list[str]) -> subprocess.Popen[str]:
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    line = p.stdout.readline().strip()
    if line != "ready":
        p.kill()
        raise AssertionError(f"helper did not start: {line!r} {p.stderr.read() if p.stderr else ''}")
    return p


def check_survived(db: Path, spec: Any) -> dict[str, int]:
    with Ledger(db, spec, pointer_file=db.with_name("active-work.json")) as led:
        assert led.integrity_check() == []
        snaps = led.list()
        n_events = 0
        for w in snaps:
            evs = led.events(work_id=w["work_id"])
            n_events += len(evs)
            folded = fold(spec, evs)
            for name, f in spec.work_fields.items():
                if f.fold:
                    assert folded[name] == w[name], (w["work_id"], name, folded[name], w[name])
            assert [e["seq"] for e in evs] == list(range(spec.first_seq, spec.first_seq + len(evs)))
            moves = [e for e in evs if e["to_status"] is not None]
            assert all(b["from_status"] == a["to_status"] for a, b in zip(moves, moves[1:], strict=False))
            assert moves[-1]["to_status"] == w["status"]
        leased = [s for s, st in spec.statuses.items() if st.leased]
        bad = led._read(f"SELECT count(*) FROM work WHERE lease_token IS NOT NULL AND status NOT IN ({', '.join('?' * len(leased))})", leased)
        assert bad[0][0] == 0
        assert verify(led) == []
        pointer = read_pointer(db.with_name("active-work.json"))
        assert pointer["active"] == led.active_leases()  # reconciled at open
        assert not list(db.parent.glob("active-work.json.*.tmp"))
        return {"records": len(snaps), "events": n_events}


def _counts(db: Path) -> tuple[int, int]:
    """(records, events) committed so far, read beside the writer (WAL: a reader never blocks it)."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as c:
        return c.execute("SELECT (SELECT count(*) FROM work), (SELECT count(*) FROM work_event)").fetchone()


def test_sigkill_at_random_instants(procs: list[str], tmp_path: Path, spec: Any) -> None:
    rng = random.Random(SEED)
    db = tmp_path / "ledger.db"
    seen = {"records": 0, "events": 0}
    for run in range(RUNS):
        p = start([*procs, "write", str(db), str(SEED + run)])
        # the writer is under way before the random instant is counted: it committed this run, and
        # the file holds more than creates (however slowly a busy machine started it)
        before = seen["events"]
        until(lambda before=before: (c := _counts(db))[1] > before and c[1] > c[0], "the writer committing", every=0.002)
        try:
            psutil.Process(p.pid).wait(timeout=rng.uniform(0.01, 0.35))
            raise AssertionError(f"the writer exited by itself: {p.stderr.read() if p.stderr else ''}")
        except psutil.TimeoutExpired:
            psutil.Process(p.pid).send_signal(signal.SIGKILL)
        assert p.wait(timeout=SAFETY_NET) == -signal.SIGKILL
        now = check_survived(db, spec)
        assert now["events"] >= seen["events"]  # nothing committed is ever lost
        seen = now
    assert seen["records"] > 0 and seen["events"] > seen["records"], "the writer never got going; the kills proved nothing"


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_kill_at_the_ledgers_crash_points(procs: list[str], tmp_path: Path, spec: Any, point: str) -> None:
    db = tmp_path / "ledger.db"
    pointer = db.with_name("active-work.json")
    with Ledger(db, spec, pointer_file=pointer) as led:
        w = led.create(source_system="manual", source_id="victim", now=1000.0)["work"]
    p = start([*procs, "crash", str(db), point])
    out, _ = p.communicate(timeout=SAFETY_NET)
    assert p.returncode == -signal.SIGKILL and "survived" not in out
    assert read_pointer(pointer)["active"] == []  # the killed process never got to rewrite it
    check_survived(db, spec)
    with Ledger(db, spec) as led:
        after = led.get(work_id=w["work_id"])
        n = len(led.events(work_id=w["work_id"]))
    if point == "ledger.after_event_insert":  # killed before COMMIT: nothing of the claim is there
        assert (after["status"], after["lease_version"], n) == ("queued", 0, 1)
    else:  # killed after COMMIT: the claim is durable, and the pointer was stale until the reopen above
        assert (after["status"], after["owner"], n) == ("running", "doomed", 2)
        assert [a["work_id"] for a in read_pointer(pointer)["active"]] == [w["work_id"]]


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_kill_between_merging_wakeups_and_handing_out(procs: list[str], tmp_path: Path, spec: Any, point: str) -> None:
    """A run woken by two wakeups (merged into one pending entry) is taken by a process that is
    SIGKILLed inside that take: before COMMIT the run is still pending with both wakeups and the
    next take hands it out once with both; after COMMIT the hand-out is durable (cycle 1, no
    wakeups left) and no later take hands the cycle out a second time."""
    db = tmp_path / "ledger.db"
    with Ledger(db, spec) as led:
        led.wake_suspend(run_id="run-1", now=1000.0)
        led.wake_fire(run_id="run-1", kind="message", now=1001.0)
        led.wake_fire(run_id="run-1", kind="signal", now=1002.0)
    p = start([*procs, "wakecrash", str(db), point])
    out, _ = p.communicate(timeout=SAFETY_NET)
    assert p.returncode == -signal.SIGKILL and "survived" not in out
    with Ledger(db, spec) as led:
        assert led.integrity_check() == []
        run = led.wake_get(run_id="run-1")
        again = led.wake_take(worker="survivor", now=2001.0)
        assert led.wake_take(worker="survivor", now=2002.0) is None
    if point == "ledger.after_event_insert":  # killed before COMMIT: the merged wake is intact
        assert (run["state"], run["cycle"], sorted(run["wakeups"])) == ("pending", 0, ["message", "signal"])
        lease = {"token": again["token"], "attempt": 1, "expires_at": 2001.0 + spec.lease_default.ttl}
        assert again == {"run_id": "run-1", "worker": "survivor", "cycle": 1, "woken_by": ["message", "signal"], **lease}
    else:  # killed after COMMIT: the doomed process's hand-out stands, once, while its lease is live
        assert (run["state"], run["cycle"], run["wakeups"]) == ("running", 1, [])
        assert again is None
        with Ledger(db, spec) as led:  # once it lapses, the lost cycle is handed out again with all it carried
            late = 2000.0 + spec.lease_default.ttl + spec.lease_default.grace + 1
            redo = led.wake_take(worker="survivor", now=late)
            assert redo is not None and (redo["cycle"], sorted(redo["woken_by"]), redo["attempt"]) == (1, ["message", "signal"], 2)
