"""The cases added for the mutant classes below their floors (issue 32, docs/selfcheck.md): each
broken ledger of ``fixtures/testkit/broken_classes.py`` fails a case of its class on the clause it
breaks, blamed on that clause, and the reference and the independent ledgers pass the same cases."""

from __future__ import annotations

import pytest
from clause_runs import clause_test_failures
from ledgercheck.fixtures.testkit import broken_classes

NEW = tuple(p for c in broken_classes.ALL for p in c.CASES)  # the cases the fixes added or now blame differently


def _address(cls: type) -> str:
    return f"python:{cls.__module__}:{cls.__name__}"


@pytest.mark.parametrize("cls", broken_classes.ALL, ids=lambda c: c.__name__)
def test_a_case_of_its_class_fails_on_its_clause(cls, spec, harness_for):
    h = harness_for(_address(cls))
    failed = clause_test_failures(h, spec, lambda case: case.param.startswith(cls.CASES))
    assert failed, f"{cls.__name__} ({cls.WHAT}) passed every case of {cls.CASES}"
    assert any(cls.BREAKS in b for b in failed.values()), f"{cls.__name__}: the failing cases blamed {failed}"
    stray = {c: b for c, b in failed.items() if cls.BREAKS not in b and c not in b}
    assert not stray, f"{cls.__name__} breaks {cls.BREAKS}; these failures named neither it nor their own clause: {stray}"


@pytest.mark.parametrize("address", ["reference", "python:ledgercheck.fixtures.testkit.independent:SharedMemLedger"])
def test_correct_ledgers_pass_the_new_cases(address, spec, harness_for):
    h = harness_for(address)
    assert clause_test_failures(h, spec, lambda case: case.param.startswith(NEW)) == {}
