"""The reference, for runs that must start together (``python:adapters_together:Together``).

The first handshake in a process (certify's probe, just before it picks its report folder) waits
until every run of the test reached its own: each run adds a file to the folder
``$LEDGERCHECK_TOGETHER_DIR`` and waits until ``$LEDGERCHECK_TOGETHER_N`` are there.  Importing
this module also stops the clock of report folder names at one second, so runs started together
ask for the same folder name however long each took to start: only what the folder code adds to
the time keeps them apart.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ledgercheck.reference.adapter import ReferenceAdapter
from ledgercheck.reports import outdirs
from ledgercheck.transport.protocol import Handshake

outdirs.stamp = lambda t=None: "20250101T000000Z"
_waited: list[bool] = []


class Together(ReferenceAdapter):
    def hello(self, protocol: str = "1.0") -> Handshake:
        where = os.environ.get("LEDGERCHECK_TOGETHER_DIR")
        if where and not _waited:
            _waited.append(True)
            n = int(os.environ.get("LEDGERCHECK_TOGETHER_N", "1"))
            (Path(where) / str(os.getpid())).touch()
            while len(os.listdir(where)) < n:  # the others are still starting
                time.sleep(0.01)
        return super().hello(protocol)
