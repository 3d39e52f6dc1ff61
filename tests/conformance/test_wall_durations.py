"""Durations under a wall clock are scaled once.

A run against a wall-clock adapter checks the contract with its timings multiplied by the wall
scale: the harness's ``spec`` (and its model) and the document the adapter is sent hold clock
seconds.  ``Harness.advance`` and the duration arguments of ``Harness.do`` take that unit as it
is; a duration written in the contract's own seconds is converted once (``contract_seconds``).
Scaling a value read from ``h.spec`` a second time shrinks every wait a hundredfold, so a clause
test that lets a lease's renew interval pass never reaches the instants it judges: a ledger whose
renewals do not extend the lease passed it."""

from __future__ import annotations

import time

import pytest
from clause_runs import clause_test_failures
from ledgercheck.conformance.harness import ClauseFailure

from tests.conformance.wall_durations import SENT  # the module the adapter address names

WALL = "python:tests.chaos.wall_reference:WallReference"
SCALE = 0.01  # run_harness's default wall scale


def test_the_harness_spec_of_a_wall_run_is_in_clock_seconds(harness_for, spec):
    h = harness_for(WALL, ["core", "lease"])
    assert h.wall and h.scale == SCALE
    assert h.spec.lease_for("manual").ttl == pytest.approx(spec.lease_for("manual").ttl * SCALE)
    assert h.contract_doc["lease"]["ttl"] == pytest.approx(h.spec.lease_for("manual").ttl)  # what the adapter is sent


def test_advance_sleeps_the_duration_it_is_given(harness_for):
    h = harness_for(WALL, ["core", "lease"])
    step = h.spec.lease_for("manual").renew_interval
    t0 = time.time()
    h.advance(step)
    assert time.time() - t0 >= step  # a renew interval of the run's contract, not a hundredth of it
    t1 = time.time()
    h.advance(h.contract_seconds(1.0))
    assert time.time() - t1 >= SCALE


def test_contract_seconds_convert_once(harness_for):
    h = harness_for(WALL, ["core"])
    assert h.contract_seconds(60.0) == pytest.approx(60.0 * SCALE)
    got = h.contract_policy({"initial_backoff": 4.0, "max_backoff": 40.0, "max_attempts": 3, "multiplier": 2.0, "jitter": "none"})
    assert got == {"initial_backoff": pytest.approx(4.0 * SCALE), "max_backoff": pytest.approx(40.0 * SCALE),
                   "max_attempts": 3, "multiplier": 2.0, "jitter": "none"}
    injected = harness_for("reference", ["core"])
    assert injected.contract_seconds(60.0) == 60.0 and injected.contract_policy({"max_backoff": 40.0}) == {"max_backoff": 40.0}


def test_duration_arguments_reach_the_adapter_as_given(harness_for):
    SENT.clear()
    h = harness_for("python:tests.conformance.wall_durations:Noting", ["core", "lease", "waiting", "retry", "cancel"])
    lt = h.spec.lease_for("manual")
    policy = {"max_attempts": 2, "initial_backoff": h.spec.retry_default.initial_backoff, "max_backoff": lt.ttl}
    wid = h.create(retry_policy=policy)
    tok = h.claim(wid)
    h.do("set_waiting", work_id=wid, token=tok, kind=next(iter(h.spec.waiting_statuses)), ref="r", timeout=lt.grace)
    sent = dict(SENT)
    assert sent["create"]["retry_policy"] == policy
    assert sent["set_waiting"]["timeout"] == lt.grace
    # and the model holds the ledger to the deadline those clock seconds make
    assert h.item(wid)["waiting_deadline"] == pytest.approx(h.now() + lt.grace, abs=0.1)


def _renew_cases(case) -> bool:
    return case.clause == "lease.renew.extends" and "at-0.75-interval" in case.param


def test_a_renewal_that_does_not_extend_fails_on_a_wall_clock(harness_for, spec):
    h = harness_for("python:tests.conformance.wall_durations:StaleRenew", ["core", "lease"])
    failed = clause_test_failures(h, spec, _renew_cases)
    assert {c: set(blamed) for c, blamed in failed.items()} == {"lease.renew.extends": {"lease.renew.extends"}}


def test_the_wall_reference_passes_the_same_renewals(harness_for, spec):
    h = harness_for(WALL, ["core", "lease"])
    assert clause_test_failures(h, spec, _renew_cases) == {}


def test_a_stale_renewal_is_caught_in_the_run_not_before_the_renewal_is_due(harness_for):
    """The failure above is the renewal's: the claim and a renewal with no time passed are right."""
    h = harness_for("python:tests.conformance.wall_durations:StaleRenew", ["core", "lease"])
    wid = h.create()
    tok = h.claim(wid)
    h.do("renew", work_id=wid, token=tok)  # at once: the claim's expiry is the right one (within tolerance)
    h.advance(h.spec.lease_for("manual").renew_interval)
    with pytest.raises(ClauseFailure) as err:
        h.do("renew", work_id=wid, token=tok)
    assert "lease_expires_at" in str(err.value)


def _per_source(case) -> bool:
    return case.clause == "lease.per_source" and case.param in ("control", "control-renewed")


def test_the_wall_reference_keeps_a_per_source_grace(harness_for, spec):
    """At the lapse instant either answer is right on a wall clock: the checks stay a tolerance
    either side of it (checking at the instant itself failed the correct ledger)."""
    assert "control" in spec.lease_by_source
    h = harness_for(WALL, ["core", "lease"])
    assert clause_test_failures(h, spec, _per_source) == {}


def test_a_monitor_ignoring_the_per_source_grace_fails_on_a_wall_clock(harness_for, spec):
    h = harness_for("python:tests.conformance.wall_durations:DefaultGrace", ["core", "lease"])
    failed = clause_test_failures(h, spec, _per_source)
    assert set(failed) == {"lease.per_source"} and "lease.per_source" in failed["lease.per_source"]
