"""An interrupt while the reference waits to begin a transaction leaves nothing held.

Another connection holds the database's write lock, so ``create`` waits in BEGIN IMMEDIATE;
a real SIGALRM raises KeyboardInterrupt there (as Ctrl-C would).  Afterwards the ledger's own
lock must be free and the ledger usable: before the fix the lock stayed taken for good and the
next operation (or the teardown) blocked forever.
"""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.reference.ledger import Ledger
from ledgercheck.spec import Spec


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt("test interrupt")


def test_an_interrupt_while_waiting_to_begin_releases_the_lock(db: Path, spec: Spec) -> None:
    led = Ledger(db, spec, busy_timeout=30.0)
    other = sqlite3.connect(db, isolation_level=None)
    previous = signal.signal(signal.SIGALRM, _interrupt)
    try:
        other.execute("BEGIN IMMEDIATE")  # the write lock: the ledger's BEGIN waits for it
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(KeyboardInterrupt):
            led.create(source_system="manual", source_id="a", now=1.0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        assert led._lock.acquire(timeout=1.0), "the interrupted transaction kept the ledger's lock"
        led._lock.release()
        assert not led.conn.in_transaction
        other.execute("ROLLBACK")
        snap = led.create(source_system="manual", source_id="b", now=2.0)
        assert snap["work"]["status"] == "queued" and snap["created"] is True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        other.close()
        if led._lock.acquire(timeout=1.0):
            led._lock.release()
            led.close()
