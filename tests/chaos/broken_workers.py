"""Deliberately broken workers: a runtime that ignores what recovery decided."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ledgercheck.chaos.crash.worker import Worker


class BlindRetryWorker(Worker):
    """Re-runs every open step after a crash without asking the provider first, and takes
    quarantined work back (an operator's requeue it was never given)."""

    def on_open_receipt(self, state: str, effect: str, created: bool) -> str:
        return "execute"

    def on_quarantined(self, work: Mapping[str, Any]) -> bool:
        self.op("requeue", work_id=work["work_id"], now=self.now, reason="retrying blindly")
        return True
