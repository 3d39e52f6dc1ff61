"""Constants shared by the chaos tests (importable because conftest.py puts this directory on sys.path)."""

from __future__ import annotations

import fcntl
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

HERE = Path(__file__).resolve().parent
BROKEN_WORKER = f"{HERE / 'broken_workers.py'}:BlindRetryWorker"
FULL = bool(os.environ.get("LEDGERCHECK_CHAOS_FULL"))

T = TypeVar("T")
# set by tests/conftest.py to the test run's own scratch directory, which every xdist worker shares
SHARED_DIR = "LEDGERCHECK_TEST_SHARED_DIR"


def shared_once(name: str, compute: Callable[[], T]) -> T:
    """``compute()``, run once per test run and shared by the xdist workers: the first worker to
    ask computes it under a lock and leaves it in the run's scratch directory, the others wait
    and read it.  Without that directory (not a run of this test tree) every caller computes.
    A computation that raises leaves nothing, so the next caller computes (and fails) itself."""
    root = os.environ.get(SHARED_DIR)
    if not root or not os.path.isdir(root):
        return compute()
    path = Path(root) / f"shared-{name}.pickle"
    with open(Path(root) / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            return pickle.loads(path.read_bytes())
        value = compute()
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(value))
        tmp.replace(path)
        return value
