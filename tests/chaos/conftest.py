"""Shared set-up for the chaos tests: the broken ledgers and workers in this directory are
importable by worker processes, and scenario files go to a RAM disk when there is one."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from ledgercheck.spec import Spec, default_spec

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))



def scratch_root() -> str | None:
    """/dev/shm when writable (fsync is free there; a process kill does not need it), else the default."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        # inside the test run's scratch directory when that is on /dev/shm already (tests/conftest.py
        # removes it however a worker ends)
        under = tempfile.gettempdir() if tempfile.gettempdir().startswith(shm + "/") else shm
        return tempfile.mkdtemp(prefix="ledgercheck-chaos-", dir=under)
    return None


@pytest.fixture(scope="session")
def spec() -> Spec:
    return default_spec()


@pytest.fixture(scope="session")
def scratch() -> Iterator[str | None]:
    root = scratch_root()
    yield root
    if root:
        shutil.rmtree(root, ignore_errors=True)
