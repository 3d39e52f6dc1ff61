"""Ledgers without a renewal, for tests/chaos/test_safety_norenew.py (importable by the campaign's
worker processes): SmallQueue (a claim takes a lapsed lease, a close-out needs the live token)
with ``renew`` answered ``unsupported``, correct; and the same queue whose close-out finds the
item by id and never looks at the token, which accepts a displaced holder's late close-out.

A job queue of this kind (a broker's visibility timeout, a job's expiry with no heartbeat) hands
the work to another worker once the first one's time is up and gives the first one no call to
learn it: that worker goes on and closes out."""

from __future__ import annotations

import sqlite3
from typing import Any

from ledgercheck.fixtures.testkit.broken_safety import SmallQueue
from ledgercheck.transport.protocol import LedgerError


class SmallQueueNoRenew(SmallQueue):
    NAME = "small-queue-no-renew"

    def renew(self, *, work_id: str, token: str, now: float) -> dict[str, Any]:
        raise LedgerError("unsupported", "this queue cannot extend a claim: a worker's time is fixed at its claim")


class SmallQueueNoRenewNoFence(SmallQueueNoRenew):
    """Its close-out finishes whatever item is running under the id, whoever holds it."""

    NAME = "small-queue-no-renew-no-fence"

    def _held(self, c: sqlite3.Connection, work_id: str, token: str, now: float, op: str) -> dict[str, Any]:
        row = self._must(c, work_id)
        if row["status"] != "running":
            raise LedgerError("invalid_transition", f"{op}: {work_id} is {row['status']}, not running")
        return row
