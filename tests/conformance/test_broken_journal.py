"""Broken ledgers that get the journals, inputs or long runs wrong are caught by the clause tests, each for its clause.

For every class in ``ledgercheck.fixtures.broken_journal.ALL`` the clause tests of its clause's
profile fail, and the failing test of the broken clause blames that clause; the reference passes
the same tests.
"""

from __future__ import annotations

import pytest
from clause_runs import clause_test_failures
from ledgercheck.fixtures import broken_journal

# bugs whose consequence another clause's test sees as well, rightly: a refused append that takes
# a seq has stored something (eventlog.append.conflict); a claim that skips the top priority
# breaks the claim order test's transition
ALSO = {"ConflictBurnsSeq": {"eventlog.append.conflict"}, "ClaimSkipsTopPriorityValue": {"core.claim.order"}}


def test_variants_name_contract_clauses(spec):
    ids = {c.id for c in spec.clauses}
    for cls in broken_journal.ALL:
        assert cls.BREAKS in ids and cls.WHAT, cls.__name__
        assert spec.clause(cls.BREAKS).level == "MUST", cls.__name__


@pytest.mark.parametrize("cls", broken_journal.ALL, ids=lambda c: c.__name__)
def test_clause_tests_catch_it(cls, spec, harness_for):
    profile = spec.clause(cls.BREAKS).profile
    h = harness_for(f"python:ledgercheck.fixtures.broken_journal:{cls.__name__}")
    failed = clause_test_failures(h, spec, lambda case: spec.clause(case.clause).profile == profile)
    assert failed, f"{cls.__name__} ({cls.WHAT}) passed every clause test of profile {profile}"
    assert cls.BREAKS in failed, f"{cls.__name__}: expected {cls.BREAKS} to fail, failing clauses were {sorted(failed)}"
    assert cls.BREAKS in failed[cls.BREAKS], f"{cls.__name__}: the failing test of {cls.BREAKS} blamed {failed[cls.BREAKS]}"
    assert set(failed) == {cls.BREAKS} | ALSO.get(cls.__name__, set()), f"{cls.__name__}: tests of other clauses failed too: {failed}"


def test_the_reference_passes_the_same_tests(spec, harness_for):
    h = harness_for("reference")
    profiles = {spec.clause(cls.BREAKS).profile for cls in broken_journal.ALL}
    assert clause_test_failures(h, spec, lambda case: spec.clause(case.clause).profile in profiles) == {}
