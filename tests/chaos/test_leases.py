"""Lease campaigns: real worker processes killed (SIGKILL) or paused (SIGSTOP) holding a lease."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from ledgercheck.chaos.crash.leases import run_campaign
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
BROKEN = "python:ledgercheck.fixtures.testkit.broken:"


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
    for w in windows[:2]:
        # what brought it back, named: the ledger's own monitor (reclaim: lease), not an operator
        assert w["came_back_by"] == ["expire", "recover"] and "lease_version 1 -> 2" in w["message"], w
        assert "the ledger's monitor operation expire moved it (running -> timeout)" in w["message"]
        assert "core.running.renew_or_leave" in w["clauses"] and "recovery.scan" in w["clauses"]
    assert "right after renewing" in windows[1]["message"]
    assert "refused" in windows[2]["message"]
    s = windows[3]
    # effectively-once, through the journal: the dead worker's pending receipt is looked up at a
    # provider that does not deduplicate, and the effect is not run again
    assert s["delivery"] == "effectively-once" and s["step_class"] == "non_idempotent_with_lookup"
    assert s["decision_observed"] == "reconcile" and s["effects_observed"] == 1 and s["effects_expected"] == "exactly_once"
    assert "ran 1x at a provider without a deduplicating key" in s["message"]
    assert "idem.duplicate_returns_stored" in s["clauses"]


def test_an_effect_doubled_under_a_declared_effectively_once_fails(spec):
    """The journal lives in the worker process's memory: the rescuing worker finds no receipt,
    runs the effect again, and the provider (no key to deduplicate by) applies it twice."""
    (s,) = run_campaign("python:ledgercheck.fixtures.testkit.broken_safety:JournalInProcessMemory", spec,
                        scenarios=["kill_after_submit_before_record"])
    assert s["verdict"] == "fail" and s["effects_observed"] == 2 and s["delivery"] == "effectively-once", s
    assert s["clauses"] == ["idem.duplicate_returns_stored"], s["clauses"]
    assert "ran 2x" in s["message"] and "which effectively-once does not allow" in s["message"]


@pytest.mark.parametrize("address", ["python:adapters_nondurable:JournalInMemoryAtLeastOnce", "python:adapters_nondurable:AtLeastOnce"])
def test_the_same_repeat_under_at_least_once_is_permitted_not_a_pass_nor_a_failure(spec, address):
    (s,) = run_campaign(address, spec, scenarios=["kill_after_submit_before_record"])
    assert s["verdict"] == "permitted" and s["effects_observed"] == 2 and s["delivery"] == "at-least-once", s
    assert s["decision_observed"] == "retry" and s["step_class"] == "non_idempotent_without_lookup"
    assert s["message"].startswith("permitted: ") and "ran 2x" in s["message"] and "allowed by at-least-once" in s["message"]
    assert "idem.duplicate_returns_stored" not in s["clauses"]  # a permitted repeat is no evidence for it


def test_at_most_once_is_held_to_no_repeat_and_a_lost_rerun_is_what_it_promises(spec):
    (bad,) = run_campaign("python:adapters_nondurable:AtMostOnce", spec, scenarios=["kill_after_submit_before_record"])
    assert bad["verdict"] == "fail" and bad["effects_observed"] == 2 and "which at-most-once does not allow" in bad["message"]
    (kept,) = run_campaign("python:adapters_nondurable:AtMostOnceTimesOut", spec, scenarios=["kill_after_submit_before_record"])
    assert kept["verdict"] == "pass" and kept["effects_observed"] == 1 and kept["final_status"] == "timeout", kept
    assert "was not run again, as at-most-once promises" in kept["message"]
    assert "the ledger's monitor operation expire moved it (running -> timeout)" in kept["message"]


def test_an_item_brought_back_only_by_the_operator_names_the_call(spec):
    """The reference declaring reclaim: operator: its expire and recover are the operator's calls
    now, and the window says so; it is permitted (the declaration allows it), not a pass."""
    windows = _by_scenario(run_campaign("python:adapters_nondurable:ReclaimedByOperator", spec,
                                        scenarios=["kill_holding_lease", "kill_after_submit_before_record"]))
    k = windows["kill"]
    assert k["verdict"] == "permitted" and k["came_back_by"] == ["expire", "recover"] and k["reclaim"] == "operator", k
    assert "came back only through the operator's expire, recover" in k["message"]
    assert "the operator's expire moved it (running -> timeout)" in k["message"] and "allowed by reclaim: operator" in k["message"]
    s = windows["submit"]  # the effect is still judged: effectively-once held
    assert s["verdict"] == "permitted" and s["effects_observed"] == 1 and "operator's expire, recover" in s["message"]


def test_an_item_a_reopen_brought_back_says_so_and_is_no_evidence_of_the_lease(spec):
    (k,) = run_campaign("python:ledgercheck.fixtures.testkit.broken_safety:ReopenRequeuesClaimed", spec, scenarios=["kill_holding_lease"])
    assert k["verdict"] == "pass" and k["came_back_by"] == ["reopen"], k
    assert "opening the ledger again (a new process's reset, before the lease lapsed) moved it (running -> queued)" in k["message"]
    assert k["clauses"] == ["recovery.no_loss"]  # not core.running.renew_or_leave: the lease did not do it


def test_under_reclaim_lease_an_item_only_an_operator_brought_back_fails_the_lease_clause(spec):
    """The rule itself (the campaign's operator path requeues only finished work, which the ledger
    has to have moved first, so a ledger cannot easily be made to show it)."""
    from ledgercheck.chaos.crash.leases import Comeback, Declared, _came_back, _Run

    back = Comeback({"work_id": "w", "lease_version": 2}, ["requeue"], ["timeout -> queued"], {"status": "queued"})
    for reclaim, want in (("lease", "fail"), ("operator", "permitted"), ("never", "permitted")):
        run = _Run("x", spec, {}, False, {"core", "lease"}, 1.0, Declared("at-least-once", reclaim))
        verdict, clauses, text = _came_back(back, run, {"lease_version": 1})
        assert verdict == want, (reclaim, verdict)
        if want == "fail":
            assert clauses == ["core.running.renew_or_leave"] and "must come back by itself" in text
        else:
            assert clauses == ["core.requeue.terminal"] and "the operator's requeue moved it (timeout -> queued)" in text


def test_a_duplicate_effect_is_blamed_as_the_safety_campaign_blames_it():
    from ledgercheck.chaos.crash.leases import DUPLICATE_CLAUSES
    from ledgercheck.conformance.safety_item import CLAUSES

    assert DUPLICATE_CLAUSES == CLAUSES["duplicate_effect"]


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


def test_leases_longer_than_the_contracts_are_waited_out_only_to_the_contracts_window(spec):
    """A ledger whose leases last 50 minutes (it reports them) is judged at the contract's ttl + grace:
    the item is still running there, not handed back after the ledger's own lease."""
    windows = _by_scenario(run_campaign("python:adapters_nondurable:LongLeases", spec))
    kill = windows["kill"]
    assert kill["verdict"] == "fail" and "core.running.renew_or_leave" in kill["clauses"], kill
    assert "still running" in kill["message"] and "worker-doomed" in kill["message"]


def test_work_that_cannot_be_finished_after_a_takeover_is_caught(spec):
    """Only the effect window finishes the work after taking it back; the plain kill window
    stops once the item is claimed again, and passes."""
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
