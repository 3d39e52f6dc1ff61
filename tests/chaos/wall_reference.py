"""The reference ledger behind a wall clock: it declares ``clock: wall`` and decides by its own
``time.time()``, whatever ``now`` the harness sends (the safety campaign's wall-clock path)."""

from __future__ import annotations

import time
from typing import Any

from ledgercheck.reference.adapter import ReferenceAdapter


class WallReference(ReferenceAdapter):
    def hello(self, protocol: str = "1.0") -> Any:
        hs = super().hello(protocol)
        hs["capabilities"] = {**hs["capabilities"], "clock": "wall"}
        return hs

    def __getattr__(self, name: str) -> Any:
        fn = super().__getattr__(name)
        if not callable(fn):
            return fn

        def own_clock(**kw: Any) -> Any:
            if "now" in kw:
                kw["now"] = time.time()
            return fn(**kw)
        return own_clock
