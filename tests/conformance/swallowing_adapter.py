"""An in-process adapter that swallows interrupts: ``reset`` first waits half a second and
ignores any exception meanwhile (KeyboardInterrupt included), then resets like the reference.
As the wait begins it appends ``adapter-wait`` to $LEDGERCHECK_PROGRESS_FILE, so a test can send
its signal while the adapter is sure to be waiting."""

from __future__ import annotations

import os
import time
from typing import Any

from ledgercheck.reference.adapter import ReferenceAdapter


class SwallowsInterrupts(ReferenceAdapter):
    def reset(self, config: dict[str, Any] | None = None) -> None:
        path = os.environ.get("LEDGERCHECK_PROGRESS_FILE")
        if path:
            with open(path, "a", encoding="utf-8") as f:
                f.write("adapter-wait\n")
        try:
            time.sleep(0.5)
        except BaseException:  # noqa: BLE001 - the point: an adapter that eats Ctrl-C
            pass
        super().reset(config)
