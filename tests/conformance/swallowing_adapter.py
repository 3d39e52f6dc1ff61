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


class ExitsOnce(ReferenceAdapter):
    """Ends the process it runs in (``os._exit``) the first time ``get`` is called: the file named
    by $LEDGERCHECK_TEST_EXIT_ONCE records that it happened.  A crash of the harness's process,
    as far as the run can tell."""

    def get(self, work_id: str) -> Any:
        marker = os.environ.get("LEDGERCHECK_TEST_EXIT_ONCE")
        if marker and not os.path.exists(marker):
            with open(marker, "w", encoding="utf-8") as f:
                f.write(str(os.getpid()))
            os._exit(70)
        return self.__getattr__("get")(work_id=work_id)
