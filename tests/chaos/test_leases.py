"""Lease campaigns: real worker processes killed (SIGKILL) or paused (SIGSTOP) holding a lease."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from ledgercheck.chaos.leases import run_campaign
from ledgercheck.spec import default_spec

HERE = str(Path(__file__).resolve().parent)


@pytest.fixture(autouse=True, scope="module")
def _importable_test_adapters():
    """The small adapters of this directory load by address, here and in worker processes."""
    old_path, old_env = list(sys.path), os.environ.get("PYTHONPATH")
    sys.path.insert(0, HERE)
    os.environ["PYTHONPATH"] = os.pathsep.join([HERE, old_env or ""]).rstrip(os.pathsep)
    yield
    sys.path[:] = old_path
    if old_env is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = old_env
BROKEN = "python:ledgercheck.fixtures.broken:"


@pytest.fixture(scope="module")
def spec():
    return default_spec()


def test_reference_passes_both_scenarios(spec):
    windows = run_campaign("reference", spec)
    assert [(w["mode"], w["verdict"]) for w in windows] == [("kill", "pass"), ("takeover", "pass")], windows
    assert "lease_version 1 -> 2" in windows[0]["message"]
    assert "refused" in windows[1]["message"]


def test_a_stale_worker_that_is_not_fenced_is_caught(spec):
    windows = {w["mode"]: w for w in run_campaign(BROKEN + "AcceptsStaleToken", spec)}
    assert windows["kill"]["verdict"] == "pass"
    t = windows["takeover"]
    assert t["verdict"] == "fail" and "lease.fencing" in t["clauses"]
    assert "close_out accepted" in t["message"] and "worker-stale" in t["message"]


def test_leases_that_never_lapse_are_caught(spec):
    windows = {w["mode"]: w for w in run_campaign("python:adapters_nondurable:StuckLeases", spec)}
    k = windows["kill"]
    assert k["verdict"] == "fail" and "core.running.renew_or_leave" in k["clauses"]
    assert "still running" in k["message"] and "worker-doomed" in k["message"]
    assert windows["takeover"]["verdict"] == "fail"


def test_adapters_without_durable_state_are_refused(spec):
    from ledgercheck.chaos import ChaosError

    with pytest.raises(ChaosError, match="durable"):
        run_campaign("python:adapters_nondurable:Volatile", spec)
