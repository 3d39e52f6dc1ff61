"""Helper processes for the PostgreSQL reference tests, run as ``python pg_procs.py ROLE DSN SCHEMA ...``.

    claim DSN SCHEMA WORK_ID HOLD_FILE OUT first|second [nolock]
        claim WORK_ID and write the outcome as JSON to OUT.  ``first``: at the crash point before
        COMMIT (the transaction holds its write lock) create HOLD_FILE and keep the transaction
        open until another session of the database waits for a lock (the second claimer, held up
        by this transaction whichever lock it meets first): so the second claim runs inside the
        first's transaction by construction, however slowly the machine starts it.
        ``second``: print "ready", wait until HOLD_FILE exists, then claim at once.
        ``nolock``: a broken backend whose transactions take no write lock.
    crash DSN SCHEMA POINT [autocommit]
        claim the next queued item and SIGKILL itself at the ledger's crash point POINT.
        ``autocommit``: a broken backend that runs each statement as its own transaction.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from ledgercheck.reference.pg import PgLedger
from ledgercheck.transport.protocol import LedgerError

WAIT = 600.0  # seconds: a safety net for a second claimer that never comes


def _until_another_session_waits_for_a_lock(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as watch:
        end = time.monotonic() + WAIT
        while not watch.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()").fetchone()[0]:
            if time.monotonic() > end:
                raise SystemExit("no other session waited for this transaction's locks")
            time.sleep(0.005)


def claim(dsn: str, schema: str, work_id: str, hold: str, out: str, role: str, mode: str = "") -> None:
    def hook(point: str) -> None:
        if point == "ledger.after_event_insert" and role == "first":
            open(hold, "w").close()
            _until_another_session_waits_for_a_lock(dsn)

    led = PgLedger(dsn, schema, crash_hook=hook, busy_timeout=600.0)
    if mode == "nolock":
        led._begin = lambda: setattr(led._cur, "prefix", [("BEGIN", None)])  # type: ignore[method-assign]
    if role == "second":
        print("ready", flush=True)
        while not os.path.exists(hold):
            time.sleep(0.001)
    try:
        w = led.claim(owner=f"pid-{os.getpid()}", now=10.0, work_id=work_id)
        result = {"ok": True, "token": w["lease_token"]}
    except LedgerError as exc:
        result = {"ok": False, "code": exc.code, "message": exc.message}
    with open(out, "w") as fh:
        json.dump(result, fh)


def crash(dsn: str, schema: str, point: str, mode: str = "") -> None:
    def hook(p: str) -> None:
        if p == point:
            os.kill(os.getpid(), signal.SIGKILL)

    led = PgLedger(dsn, schema, crash_hook=hook)
    if mode == "autocommit":
        led._begin = lambda: None  # type: ignore[method-assign]
        led._commit = lambda: None  # type: ignore[method-assign]
    led.claim(owner="doomed", now=10.0)
    raise SystemExit("the crash point never fired")


if __name__ == "__main__":
    {"claim": claim, "crash": crash}[sys.argv[1]](*sys.argv[2:])
