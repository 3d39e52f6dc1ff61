"""Ledgers of the takeover tests (tests/chaos/test_safety_takeover.py), importable by the
campaign's worker processes: the independent ledgers declared ``reclaim: operator`` / ``never``,
and a queue whose holder keeps its item however long it is gone."""

from __future__ import annotations

import os
from typing import Any

from ledgercheck.fixtures.testkit.broken_safety import _COLUMNS, SmallQueue, declaring
from ledgercheck.fixtures.testkit.independent import MemLedger, SharedMemLedger
from ledgercheck.transport.protocol import LedgerError

SharedMemOperator = declaring(SharedMemLedger, "operator", "SharedMemOperator")
SharedMemNever = declaring(SharedMemLedger, "never", "SharedMemNever")
MemOperator = declaring(MemLedger, "operator", "MemOperator")  # not durable: the campaign runs in one process


class _HeldUntilReleased(SmallQueue):
    """SmallQueue without lease expiry: a claim takes a queued item, which is its holder's until
    the holder closes it out, however long the holder is gone, and no operation moves it.
    Correct for ``reclaim: never`` (nothing takes a live holder's item); a campaign against it
    can displace nobody."""

    NAME = "small-queue-held-until-released"

    def _next(self, c: Any, now: float) -> dict[str, Any] | None:
        r = c.execute(f"SELECT {', '.join(_COLUMNS)} FROM item WHERE status = 'queued' ORDER BY priority, seq").fetchone()
        return None if r is None else dict(zip(_COLUMNS, r, strict=True))

    def _take(self, c: Any, row: dict[str, Any], owner: str, now: float) -> dict[str, Any]:
        c.execute("UPDATE item SET status = 'running', owner = ?, lease_token = ?, lease_version = lease_version + 1, "
                  "lease_expires_at = NULL, attempt = attempt + 1, started_at = ? WHERE work_id = ?",
                  (owner, os.urandom(12).hex(), now, row["work_id"]))
        return self._snap(self._must(c, row["work_id"]))

    def _held(self, c: Any, work_id: str, token: str, now: float, op: str) -> dict[str, Any]:
        row = self._must(c, work_id)
        if row["status"] != "running" or row["lease_token"] != token:
            raise LedgerError("stale_lease", f"{op}: {work_id}: the token is not the live lease")
        return row

    def renew(self, *, work_id: str, token: str, now: float) -> dict[str, Any]:
        def op(c: Any) -> dict[str, Any]:
            self._held(c, work_id, token, float(now), "renew")
            return self._snap(self._must(c, work_id))
        return self._write(op)


HeldUntilReleasedNever = declaring(_HeldUntilReleased, "never", "HeldUntilReleasedNever")
