"""The stateful budgets: every named budget is a valid choice, and ``smoke`` reports a failing
program as found instead of shrinking it (against a wall clock, shrinking sleeps for minutes)."""

from __future__ import annotations

import pytest
from hypothesis import Phase
from ledgercheck.conformance.budgets import PROFILES
from ledgercheck.conformance.harness import ClauseFailure, find_exception
from ledgercheck.conformance.stateful import hypothesis_settings, make_machine, run_machine


def test_every_budget_is_a_setting_and_only_smoke_skips_shrinking():
    for name in PROFILES:
        opts = hypothesis_settings(name)
        assert opts.max_examples == PROFILES[name]["max_examples"]
        assert (Phase.shrink in opts.phases) == (name != "smoke"), name
    with pytest.raises(ValueError, match="unknown hypothesis profile 'huge'"):
        hypothesis_settings("huge")


def test_smoke_still_finds_a_broken_ledger(harness_for):
    # a ledger that records no event when work is claimed: the smoke budget drives the lifecycle rules and
    # finds it (seeded), and the failure names the clause
    h = harness_for("python:ledgercheck.fixtures.testkit.broken:NoEventOnClaim")
    with pytest.raises(BaseException) as info:
        run_machine(make_machine(h, only="lifecycle"), hypothesis_settings("smoke"), 0)
    failure = find_exception(info.value, ClauseFailure)
    assert failure is not None, repr(info.value)[:300]
    assert "trail.one_per_transition" in failure.clauses, failure.clauses


def test_cli_lists_the_budgets(cli):
    out = cli("certify", "--help")
    assert "{" + ",".join(PROFILES) + "}" in out.stdout
