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
