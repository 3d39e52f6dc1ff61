"""An interrupt while the reference waits to begin a transaction leaves nothing held.

Another connection holds the database's write lock, so ``create`` waits in BEGIN IMMEDIATE;
a real SIGALRM, raised once the ledger is in its wait for the lock, raises KeyboardInterrupt
there (as Ctrl-C would).  Afterwards the ledger's own
lock must be free and the ledger usable: before the fix the lock stayed taken for good and the
next operation (or the teardown) blocked forever.
"""

from __future__ import annotations

import signal
import sqlite3
import time
import types
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.reference.ledger import Ledger
from ledgercheck.spec import Spec


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt("test interrupt")


def test_an_interrupt_while_waiting_to_begin_releases_the_lock(db: Path, spec: Spec, monkeypatch: pytest.MonkeyPatch) -> None:
    from ledgercheck.reference import opening

    led = Ledger(db, spec, busy_timeout=600.0)
    other = sqlite3.connect(db, isolation_level=None)
    previous = signal.signal(signal.SIGALRM, _interrupt)
    waits: list[float] = []

    def pause(seconds: float) -> None:
        # the ledger is waiting for the write lock (its BEGIN met it taken): the signal comes now,
        # however late the machine got here, and the interrupt lands inside that wait
        waits.append(seconds)
        if len(waits) == 1:
            signal.raise_signal(signal.SIGALRM)
        time.sleep(seconds)

    monkeypatch.setattr(opening, "time", types.SimpleNamespace(sleep=pause, monotonic=time.monotonic))
    try:
        other.execute("BEGIN IMMEDIATE")  # the write lock: the ledger's BEGIN waits for it
        with pytest.raises(KeyboardInterrupt):
            led.create(source_system="manual", source_id="a", now=1.0)
        assert waits, "the interrupt did not come while the ledger waited for the lock"
        # free at once (a lock the interrupted transaction kept would stay taken for good)
        assert led._lock.acquire(blocking=False), "the interrupted transaction kept the ledger's lock"
        led._lock.release()
        assert not led.conn.in_transaction
        other.execute("ROLLBACK")
        snap = led.create(source_system="manual", source_id="b", now=2.0)
        assert snap["work"]["status"] == "queued" and snap["created"] is True
    finally:
        signal.signal(signal.SIGALRM, previous)
        other.close()
        if led._lock.acquire(blocking=False):
            led._lock.release()
            led.close()
