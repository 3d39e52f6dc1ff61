"""Constants shared by the chaos tests (importable because conftest.py puts this directory on sys.path)."""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
BROKEN_WORKER = f"{HERE / 'broken_workers.py'}:BlindRetryWorker"
FULL = bool(os.environ.get("LEDGERCHECK_CHAOS_FULL"))
