"""Helper processes for the reference tests, run as ``python procs.py ROLE ARGS...``.

    lock DB                    hold BEGIN IMMEDIATE on DB (prints "locked") until killed
    claim DB OUT GO N          print "ready", wait for the file GO, then claim, renew and close out until nothing
                               is left; one JSON line per claim to OUT. The first claim is held until all N
                               claimers hold one (files GO.held.PID), so the claimers overlap by construction
                               however the host schedules them
    write DB SEED              a worker doing a random mix of ledger operations forever (prints
                               "ready"); it is meant to be SIGKILLed
    crash DB POINT             claim the next queued item and SIGKILL itself at the ledger's crash
                               point POINT (with the active pointer maintained next to DB)
    wakecrash DB POINT         take the pending run (profile wakeups) and SIGKILL itself at POINT
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path

from ledgercheck.reference.ledger import Ledger
from ledgercheck.transport.protocol import LedgerError


def lock(db: str) -> None:
    c = sqlite3.connect(db, isolation_level=None)
    c.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    threading.Event().wait()  # until the test kills it, however long the test takes


def claim(db: str, out: str, go: str, claimers: str) -> None:
    led = Ledger(db, busy_timeout=600.0)
    me = f"pid-{os.getpid()}"
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    now = 1000.0
    gate = Path(go)
    first = True
    with open(out, "w", encoding="utf-8") as fh:
        while True:
            w = led.claim(owner=me, now=now)
            if w is None:
                break
            fh.write(json.dumps({"work_id": w["work_id"], "lease_version": w["lease_version"], "token": w["lease_token"],
                                 "owner": me}) + "\n")
            if first:  # hold the first lease until every claimer holds one of its own
                first = False
                gate.with_name(f"{gate.name}.held.{os.getpid()}").touch()
                while len(list(gate.parent.glob(f"{gate.name}.held.*"))) < int(claimers):
                    time.sleep(0.001)
            led.renew(work_id=w["work_id"], token=w["lease_token"], now=now + 1)
            led.close_out(work_id=w["work_id"], token=w["lease_token"], status="done", result={"by": me}, now=now + 2)
    led.close()


def write(db: str, seed: str) -> None:
    rng = random.Random(int(seed))
    led = Ledger(db, busy_timeout=600.0, pointer_file=Path(db).with_name("active-work.json"))
    now = 1000.0 + rng.random()
    print("ready", flush=True)
    n = 0
    live: list[str] = []
    while True:
        n += 1
        now += rng.choice([0.5, 1, 5, 20, 60])
        if n % 5 == 1:
            live = [w["work_id"] for w in led.list() if w["status"] not in ("done", "failed", "cancelled")]
        pick = led.get(work_id=rng.choice(live)) if live else None
        r = rng.random()
        try:
            if r < 0.22 or pick is None:
                run = f"r{n}" if rng.random() < 0.3 else None
                led.create(source_system="scheduler" if run else "manual", source_id=f"s{rng.randrange(10**6)}", source_run_id=run,
                           priority=rng.randrange(0, 10), payload={"n": n, "text": "x" * rng.randrange(0, 300)}, now=now)
            elif r < 0.40:
                led.claim(owner=f"w{rng.randrange(3)}", now=now)
            elif pick["lease_token"] is not None and r < 0.70:
                wid, tok = pick["work_id"], pick["lease_token"]
                s = rng.random()
                if s < 0.3:
                    led.renew(work_id=wid, token=tok, now=now)
                elif s < 0.5:
                    led.close_out(work_id=wid, token=tok, status=rng.choice(["done", "done", "failed"]), result={"n": n}, now=now)
                elif s < 0.65:
                    led.fail(work_id=wid, token=tok, error_class=rng.choice(["rate_limited", "validation_error"]), now=now)
                elif s < 0.8:
                    led.set_waiting(work_id=wid, token=tok, kind=rng.choice(["user", "external"]), ref=f"ref-{n}", timeout=100, now=now)
                else:
                    r2 = led.effect_begin(work_id=wid, step_id=f"st{n % 3}", tool="t", input={"n": n % 2},
                                          step_class=rng.choice(["pure", "non_idempotent_with_lookup"]), token=tok, now=now)["receipt"]
                    if rng.random() < 0.5:
                        led.effect_record(key=r2["key"], input_hash=r2["input_hash"], result={"ok": n}, token=tok, now=now)
            elif r < 0.76:
                led.resume(work_id=pick["work_id"], owner="w9", now=now)
            elif r < 0.82:
                led.cancel(work_id=pick["work_id"], now=now)
            elif r < 0.86:
                led.requeue(work_id=rng.choice(led.list())["work_id"], now=now)
            elif r < 0.90:
                led.expire(now=now)
            elif r < 0.93:
                led.promote_due(now=now)
            elif r < 0.96:
                led.recover(now=now)
            else:
                stream = f"log-{rng.randrange(2)}"
                last = len(led.log_read(stream=stream))
                led.log_append(stream=stream, expected_seq=last, kind="note", payload={"n": n}, now=now)
        except LedgerError as exc:
            if exc.code not in ("invalid_transition", "stale_lease", "idempotency_conflict", "not_found", "concurrent_append"):
                raise


def crash(db: str, point: str) -> None:
    def hook(p: str) -> None:
        if p == point:
            os.kill(os.getpid(), signal.SIGKILL)

    led = Ledger(db, pointer_file=Path(db).with_name("active-work.json"), crash_hook=hook)
    print("ready", flush=True)
    led.claim(owner="doomed", now=2000.0)
    print("survived", flush=True)



def wakecrash(db: str, point: str) -> None:
    """Take the pending run and SIGKILL this process at the ledger's crash point POINT of that
    take: between merging the run's wakeups into the hand-out and answering it."""
    def hook(p: str) -> None:
        if p == point:
            os.kill(os.getpid(), signal.SIGKILL)

    led = Ledger(db, crash_hook=hook)
    print("ready", flush=True)
    led.wake_take(worker="doomed", now=2000.0)
    print("survived", flush=True)


if __name__ == "__main__":
    role, *rest = sys.argv[1:]
    {"lock": lock, "claim": claim, "write": write, "crash": crash, "wakecrash": wakecrash}[role](*rest)
