"""Broken ledgers that only unusual inputs expose must be caught by the clause tests.

Every class in ``ledgercheck.fixtures.testkit.broken_inputs`` mishandles values the contract allows or
forbids but a test suite easily never sends (an empty run id, a boolean priority, identifiers
differing only by case, nulls inside payloads, a zero count, non-ASCII step ids...).  The clause
tests of the broken clause's profile must fail and blame that clause (as in
test_broken_ledgers.py; no stateful-alone runs here, they are too slow for CI).
"""

from __future__ import annotations

import pytest
from clause_runs import clause_test_failures
from ledgercheck.fixtures.testkit import broken_inputs


def _address(cls: type) -> str:
    return f"python:ledgercheck.fixtures.testkit.broken_inputs:{cls.__name__}"


def test_variants_name_contract_clauses(spec):
    ids = {c.id for c in spec.clauses}
    for cls in broken_inputs.ALL:
        assert cls.BREAKS in ids, cls.__name__
        assert cls.WHAT, cls.__name__


@pytest.mark.parametrize("cls", broken_inputs.ALL, ids=lambda c: c.__name__)
def test_clause_tests_catch_it(cls, spec, harness_for):
    # As test_broken_ledgers.py::test_clause_tests_catch_it, run as the plugin runs clause tests
    # (fresh ledger, focus on the test's clause), but only the tests of the broken clause: a
    # failure among them is a failure of the profile's clause tests, and the whole core profile
    # (over 300 tests) for each of six core variants would not fit the suite's time budget.
    profile = spec.clause(cls.BREAKS).profile
    h = harness_for(_address(cls))
    failed = clause_test_failures(h, spec, lambda case: case.clause == cls.BREAKS)
    assert failed, f"{cls.__name__} ({cls.WHAT}) passed every clause test of profile {profile}"
    assert cls.BREAKS in failed, f"{cls.__name__}: expected {cls.BREAKS} to fail, failing clauses were {sorted(failed)}"
    assert cls.BREAKS in failed[cls.BREAKS], f"{cls.__name__}: the failing test of {cls.BREAKS} blamed {failed[cls.BREAKS]}"
