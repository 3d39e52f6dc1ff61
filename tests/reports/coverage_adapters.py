"""Adapters for the coverage tests, importable as ``python:coverage_adapters:<Name>`` when
tests/reports is on PYTHONPATH (test_coverage_runs.py puts it there for its subprocess runs)."""

from __future__ import annotations

from typing import Any

from ledgercheck.reference.adapter import ReferenceAdapter
from ledgercheck.transport.protocol import Handshake, LedgerError


class NoTimeoutCloseOut(ReferenceAdapter):
    """Claims core, and does not offer closing work out as timeout (``unsupported``): that
    transition is not offered, never "never reached"; timeout is still reached through expire."""

    def hello(self, protocol: str = "1.0") -> Handshake:
        hs = super().hello(protocol)
        hs.update(name="no-timeout-close-out", profiles=["core"])
        return hs

    def close_out(self, **kw: Any) -> Any:
        if kw.get("status") == "timeout":
            raise LedgerError("unsupported", "close_out: this ledger times work out by itself only")
        assert self.ledger is not None
        return self.ledger.close_out(**kw)


class ClaimKeepsVersionZero(ReferenceAdapter):
    """Claims core and lease, and reports every lease with version 0 (a queue that keeps no lease
    version): each claim breaks lease.acquire, yet each moves its item from queued to running.
    The transition was made; what is wrong about it is lease.acquire's business."""

    def hello(self, protocol: str = "1.0") -> Handshake:
        hs = super().hello(protocol)
        hs.update(name="claim-keeps-version-zero", profiles=["core", "lease"])
        return hs

    @staticmethod
    def _zero(w: Any) -> Any:
        return {**w, "lease_version": 0} if isinstance(w, dict) and w.get("lease_version") else w

    def claim(self, **kw: Any) -> Any:
        assert self.ledger is not None
        return self._zero(self.ledger.claim(**kw))

    def get(self, **kw: Any) -> Any:
        assert self.ledger is not None
        return self._zero(self.ledger.get(**kw))
