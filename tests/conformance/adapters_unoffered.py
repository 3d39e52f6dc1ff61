"""Variants of the reference that do not offer some core operations (they answer ``unsupported``),
for the tests of the *not offered* outcome (docs/results.md, "Not offered").

Importable as ``python:adapters_unoffered:<Name>`` when tests/conformance is on PYTHONPATH.
"""

from __future__ import annotations

from typing import Any

from ledgercheck.reference.adapter import ReferenceAdapter
from ledgercheck.transport.protocol import Handshake, LedgerError


class LacksEventsCancelExpire(ReferenceAdapter):
    """Claims core, trail and cancel, but has no event trail, cancellation or expiry monitor: each
    answers unsupported.  Everything it does offer is the reference's, so nothing it answers
    breaks the contract."""

    COUNTS: dict[str, int] = {}  # operation -> calls that answered unsupported (this process)
    PROFILES = ["core", "trail", "cancel"]

    def hello(self, protocol: str = "1.0") -> Handshake:
        hs = super().hello(protocol)
        hs.update(name=f"unoffered-{type(self).__name__}", profiles=list(self.PROFILES))
        return hs

    def _unsupported(self, op: str) -> Any:
        self.COUNTS[op] = self.COUNTS.get(op, 0) + 1
        raise LedgerError("unsupported", f"this ledger has no {op}")

    def events(self, *, work_id: str) -> Any:
        return self._unsupported("events")

    def cancel(self, *, work_id: str, now: float, reason: str | None = None) -> Any:
        return self._unsupported("cancel")

    def expire(self, *, now: float) -> Any:
        return self._unsupported("expire")


class PlainQueueWithoutTrail(ReferenceAdapter):
    """A plain job queue: no event trail and no cancellation (both answer unsupported), and it
    claims core alone, which it offers in full.  ``ASKED`` counts the calls of the operations it
    lacks: none may come, since no clause of core demands them."""

    ASKED: dict[str, int] = {}
    PROFILES = ["core"]

    def hello(self, protocol: str = "1.0") -> Handshake:
        hs = super().hello(protocol)
        hs.update(name=f"unoffered-{type(self).__name__}", profiles=list(self.PROFILES))
        return hs

    def _unsupported(self, op: str) -> Any:
        self.ASKED[op] = self.ASKED.get(op, 0) + 1
        raise LedgerError("unsupported", f"this queue has no {op}")

    def events(self, *, work_id: str) -> Any:
        return self._unsupported("events")

    def cancel(self, *, work_id: str, now: float, reason: str | None = None) -> Any:
        return self._unsupported("cancel")


class ClaimsTheTrailItLacks(PlainQueueWithoutTrail):
    """The same queue, claiming the trail profile as well: the trail is not offered."""

    PROFILES = ["core", "trail"]


class LacksEventsAndReclosesFinishedWork(LacksEventsCancelExpire):
    """The same gaps, and a real bug: a close-out of finished work is accepted (answered with the
    item as it is) instead of refused, which breaks core.terminal.immutable."""

    def close_out(self, *, work_id: str, token: str, status: str, now: float, result: Any = None,
                  reason: str | None = None) -> Any:
        if _finished(self, work_id):
            return self.ledger.get(work_id=work_id)
        return self.ledger.close_out(work_id=work_id, token=token, status=status, now=now, result=result, reason=reason)


class CallsRefusalsUnsupported(ReferenceAdapter):
    """Offers close-out, but answers unsupported where the contract demands it be refused on
    finished work (invalid_transition): a wrong refusal, not a missing operation."""

    def hello(self, protocol: str = "1.0") -> Handshake:
        hs = super().hello(protocol)
        hs.update(name="unoffered-CallsRefusalsUnsupported", profiles=["core"])
        return hs

    def close_out(self, *, work_id: str, token: str, status: str, now: float, result: Any = None,
                  reason: str | None = None) -> Any:
        if _finished(self, work_id):
            raise LedgerError("unsupported", "close-out of finished work is not supported")
        return self.ledger.close_out(work_id=work_id, token=token, status=status, now=now, result=result, reason=reason)


class LacksTimeoutCloseOut(ReferenceAdapter):
    """Offers close-out to done, failed and cancelled, not to timeout (a variant not offered)."""

    def hello(self, protocol: str = "1.0") -> Handshake:
        hs = super().hello(protocol)
        hs.update(name="unoffered-LacksTimeoutCloseOut", profiles=["core"])
        return hs

    def close_out(self, *, work_id: str, token: str, status: str, now: float, result: Any = None,
                  reason: str | None = None) -> Any:
        if status == "timeout":
            raise LedgerError("unsupported", "no close-out as timeout")
        return self.ledger.close_out(work_id=work_id, token=token, status=status, now=now, result=result, reason=reason)


def _finished(adapter: ReferenceAdapter, work_id: Any) -> bool:
    """Whether ``work_id`` names an item in a terminal status (False for anything else)."""
    try:
        snap = adapter.ledger.get(work_id=work_id) if adapter.ledger is not None else None
    except LedgerError:
        return False
    return snap is not None and snap["status"] in adapter.spec.terminal_statuses


class ClosesOutCancelledUnasked(PlainQueueWithoutTrail):
    """The plain queue with a bug: a close-out as cancelled of running work is accepted though no
    cancel request was ever recorded (it records one itself on the way), which breaks
    core.transition.forbidden: without the cancel profile that guarded move is never allowed."""

    def close_out(self, *, work_id: str, token: str, status: str, now: float, result: Any = None,
                  reason: str | None = None) -> Any:
        if status == "cancelled" and not _finished(self, work_id):
            try:
                self.ledger.cancel(work_id=work_id, now=now)
            except LedgerError:
                pass  # its own refusal (unknown id, ...) comes from the close-out below
        return self.ledger.close_out(work_id=work_id, token=token, status=status, now=now, result=result, reason=reason)
