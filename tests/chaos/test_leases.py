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


SCENARIO_OF = {("after_claim", "kill"): "kill", ("during_renew", "kill"): "renew", ("after_claim", "takeover"): "takeover",
               ("after_submit_before_record", "kill"): "submit"}


def _by_scenario(windows):
    return {SCENARIO_OF[(w["point"], w["mode"])]: w for w in windows}


def test_reference_passes_every_scenario(spec):
    windows = run_campaign("reference", spec)
    assert [(w["point"], w["mode"], w["verdict"]) for w in windows] == [
        ("after_claim", "kill", "pass"), ("during_renew", "kill", "pass"), ("after_claim", "takeover", "pass"),
        ("after_submit_before_record", "kill", "pass")], windows
    assert "lease_version 1 -> 2" in windows[0]["message"]
    assert "right after renewing" in windows[1]["message"] and "lease_version 1 -> 2" in windows[1]["message"]
    assert "refused" in windows[2]["message"]
    s = windows[3]
    assert s["step_class"] == "idempotent_with_key" and s["decision_observed"] == s["decision_expected"] == "retry"
    assert s["effects_observed"] == 1 and "submitted 2x, applied 1x" in s["message"] and "kept the first receipt" in s["message"]


def test_a_stale_worker_that_is_not_fenced_is_caught(spec):
    windows = _by_scenario(run_campaign(BROKEN + "AcceptsStaleToken", spec))
    assert windows["kill"]["verdict"] == "pass"
    t = windows["takeover"]
    assert t["verdict"] == "fail" and "lease.fencing" in t["clauses"]
    assert "close_out accepted" in t["message"] and "worker-stale" in t["message"]


def test_leases_that_never_lapse_are_caught(spec):
    windows = _by_scenario(run_campaign("python:adapters_nondurable:StuckLeases", spec))
    for k in (windows["kill"], windows["renew"], windows["submit"]):
        assert k["verdict"] == "fail" and "core.running.renew_or_leave" in k["clauses"]
        assert "still running" in k["message"] and "worker-doomed" in k["message"]
    assert windows["takeover"]["verdict"] == "fail"


def test_work_that_cannot_be_finished_after_a_takeover_is_caught(spec):
    """Only the effect window finishes the work after taking it back; the plain kill window
    stops at "claimable again" and passes."""
    windows = _by_scenario(run_campaign("python:adapters_nondurable:FirstLeaseOnly", spec, scenarios=["kill_holding_lease",
                                                                                                      "kill_after_submit_before_record"]))
    assert windows["kill"]["verdict"] == "pass"
    s = windows["submit"]
    assert s["verdict"] == "fail" and s["clauses"] == ["core.running.renew_or_leave", "recovery.no_loss"]
    assert "close-out was refused (stale_lease" in s["message"] and "ended running" in s["message"]


def test_adapters_without_durable_state_are_refused(spec):
    from ledgercheck.chaos import ChaosError

    with pytest.raises(ChaosError, match="durable"):
        run_campaign("python:adapters_nondurable:Volatile", spec)


def test_a_renewal_that_overreaches_is_caught_and_adapters_without_renew_are_not_asked(spec):
    w = run_campaign("python:adapters_nondurable:RenewsTooFar", spec, scenarios=["kill_after_renew"])
    assert len(w) == 1 and w[0]["verdict"] == "fail" and "lease.renew.extends" in w[0]["clauses"]
    assert "beyond renewal time + the longest ttl" in w[0]["message"]
    skipped = []
    assert run_campaign("python:adapters_nondurable:NoRenew", spec, scenarios=["kill_after_renew"], not_applicable=skipped) == []
    assert skipped == [("kill_after_renew", "the adapter has no renew operation")]
