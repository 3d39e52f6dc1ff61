from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ledgercheck.conformance.harness import Harness, run_harness
from ledgercheck.spec import default_spec
from ledgercheck.transport.client import connect

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # helper modules of these tests (adapters, clause_runs)
    sys.path.insert(0, str(HERE))


@pytest.fixture(scope="session")
def spec():
    return default_spec()


@pytest.fixture
def harness_for(spec):
    """harness_for(address, profiles=None) -> Harness on a fresh ledger, built as a run builds it
    (a wall-clock adapter's at the default wall scale); closed after the test."""
    clients = []

    def make(address: str, profiles: list[str] | None = None) -> Harness:
        c = connect(address, spec)
        clients.append(c)
        h = run_harness(c, spec, profiles if profiles is not None else c.profiles)
        h.fresh()
        return h

    yield make
    for c in clients:
        c.close()


@pytest.fixture
def cli():
    return run_ledgercheck


@pytest.fixture
def suite():
    return run_suite


def run_ledgercheck(*args: str, cwd: Path | None = None, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the CLI as a real subprocess (what a CI job does)."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(HERE), e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-m", "ledgercheck", *args], cwd=cwd, env=e, capture_output=True, text=True, timeout=timeout)


def run_suite(tmp_path: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run pytest with the ledgercheck plugin in an empty directory (only the ledger suite)."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(HERE), e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    work = tmp_path / "run"
    work.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "pytest", str(work), "--rootdir", str(work), "-p", "no:cacheprovider", "-q",
           "--ledger-only", "--ledger-artifacts", str(tmp_path / "artifacts"), *args]
    return subprocess.run(cmd, cwd=work, env=e, capture_output=True, text=True, timeout=timeout)

