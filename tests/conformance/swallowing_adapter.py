"""An in-process adapter that swallows interrupts: from its third ``reset`` on, the first one
waits, ignoring any exception meanwhile (KeyboardInterrupt included), until it has swallowed an
interrupt, then resets like the reference.  As each reset begins it appends ``adapter-wait`` to
$LEDGERCHECK_PROGRESS_FILE, so a test that sends its signal after the third line knows the adapter
is waiting for it (the wait lasts until the signal has come, however slow the machine)."""

from __future__ import annotations

import os
import time
from typing import Any

from ledgercheck.reference.adapter import ReferenceAdapter

WAIT = 600.0  # seconds: a safety net for a signal that never comes


class SwallowsInterrupts(ReferenceAdapter):
    resets = 0
    swallowed = False

    def reset(self, config: dict[str, Any] | None = None) -> None:
        SwallowsInterrupts.resets += 1
        waits = SwallowsInterrupts.resets >= 3 and not SwallowsInterrupts.swallowed
        try:  # the line is written inside: a signal sent once it is there always lands in here
            path = os.environ.get("LEDGERCHECK_PROGRESS_FILE")
            if path:
                with open(path, "a", encoding="utf-8") as f:
                    f.write("adapter-wait\n")
            end = time.monotonic() + WAIT
            while waits and time.monotonic() < end:
                time.sleep(0.01)
        except BaseException:  # noqa: BLE001 - the point: an adapter that eats Ctrl-C
            SwallowsInterrupts.swallowed = True
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
