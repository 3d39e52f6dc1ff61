"""Wall-clock adapters for tests/conformance/test_wall_stamps.py: the reference ledger with its
own clock, stamping creates either at the end of a slow call (correct: the stamp lies inside the
call) or a second before the call began (wrong)."""

from __future__ import annotations

import time
from typing import Any

from ledgercheck.reference.adapter import ReferenceAdapter

SLOW = 0.12  # longer than the wall tolerance (0.05 s)


class _Wall(ReferenceAdapter):
    def hello(self, protocol: str = "1") -> dict[str, Any]:
        hs = super().hello(protocol)
        hs["name"] = type(self).__name__
        hs["capabilities"] = {**hs["capabilities"], "clock": "wall"}
        return hs


class SlowStamp(_Wall):
    """Each create takes SLOW seconds and stamps the instant it commits."""

    def create(self, **kw: Any) -> dict[str, Any]:
        time.sleep(SLOW)
        kw["now"] = time.time()
        return self.ledger.create(**kw)


class EarlyStamp(_Wall):
    """Each create stamps an instant a second before the call began."""

    def create(self, **kw: Any) -> dict[str, Any]:
        kw["now"] = kw["now"] - 1.0
        return self.ledger.create(**kw)
