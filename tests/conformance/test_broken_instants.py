"""The cases by construction (instants, fences, bounds, identifiers) catch their broken ledgers, each
on its own clause, and raise no false alarm on correct ledgers.

For every class in ``ledgercheck.fixtures.testkit.broken_instants.ALL``: the clause tests of its clause's
profile fail, the failing test of its clause blames that clause, and no other clause fails beyond
``ALSO``; the new cases alone (param ids ``instant:``/``fence:``/``bound:``/``ident:``) already fail
that clause.  ``OLD_MISSED`` records the variants the clause tests without the new cases let through
on their clause (measured when the cases were added; kept as a record, not asserted, since later
cases may catch them too).  The reference and the independent ledgers pass every new case.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from clause_runs import clause_test_failures
from ledgercheck.conformance.clauses.constructed import bounds, fences
from ledgercheck.fixtures.testkit import broken_instants

NEW = ("instant:", "fence:", "bound:", "ident:")
VARIANTS = broken_instants.ALL
ROOT = Path(__file__).resolve().parents[2]

# the old clause tests drive promote_due at exactly next_retry_at for work with its own policy:
# a retry promoted late leaves those scenarios stuck, blamed on the transition table
ALSO = {"PromoteOwnPolicyStrictlyAfter": {"retry.bounds", "retry.cap", "retry.exhausted", "retry.policy_override",
                                          "retry.non_retryable"},
        "StreamNameFolded": {"eventlog.read"}}

# missed on their own clause by the clause tests before these cases (the other six were caught)
OLD_MISSED = {"PromoteOwnPolicyStrictlyAfter", "TimerStrictlyAfter", "HandoutRedeliveredAtLapse", "LaneRenewRefusedAtLapse",
              "LaneFenceByOwner", "HandoutFenceByWorker", "EffectFenceByOwner", "AppendPastEmptyStream", "LaneTaskIdStripped"}


def _address(cls: type) -> str:
    return f"python:ledgercheck.fixtures.testkit.broken_instants:{cls.__name__}"


def _new(case) -> bool:
    return case.param.startswith(NEW)


def test_variants_name_contract_clauses_over_profiles(spec):
    ids = {c.id for c in spec.clauses}
    for cls in VARIANTS:
        assert cls.BREAKS in ids and cls.WHAT, cls.__name__
        assert spec.clause(cls.BREAKS).level == "MUST", cls.__name__
    for group in (broken_instants.INSTANTS, broken_instants.FENCES, broken_instants.BOUNDS, broken_instants.IDENTS):
        assert len(group) >= 3
        assert len({spec.clause(c.BREAKS).profile for c in group}) >= 2, [c.__name__ for c in group]
    assert OLD_MISSED <= {c.__name__ for c in VARIANTS}


def test_cases_register_under_the_clauses_they_derive(spec):
    """The clause a case belongs to is worked out from the contract; every one it can be is registered."""
    assert fences.item_clauses(spec) <= set(fences.ITEM_CLAUSES)
    assert bounds.derived_clauses(spec) <= set(bounds.BOUND_CLAUSES) | set(bounds.IDENT_CLAUSES)


def test_every_class_has_cases(spec):
    from ledgercheck.conformance.clauses import all_cases

    params = [c.param for c in all_cases(spec)]
    for prefix in NEW:
        assert sum(p.startswith(prefix) for p in params) >= 5, prefix
    # every fenced operation under all eight combinations
    for op in fences.item_fenced_ops(spec):
        assert sum(p.startswith(f"fence:{op}:") for p in params) >= 6, op


@pytest.mark.parametrize("cls", VARIANTS, ids=lambda c: c.__name__)
def test_clause_tests_catch_it_on_its_clause(cls, spec, harness_for):
    profile = spec.clause(cls.BREAKS).profile
    h = harness_for(_address(cls))
    failed = clause_test_failures(h, spec, lambda case: spec.clause(case.clause).profile == profile)
    assert cls.BREAKS in failed, f"{cls.__name__} ({cls.WHAT}): expected {cls.BREAKS} to fail, failing clauses were {sorted(failed)}"
    assert cls.BREAKS in failed[cls.BREAKS], f"{cls.__name__}: the failing test of {cls.BREAKS} blamed {failed[cls.BREAKS]}"
    assert set(failed) - {cls.BREAKS} <= ALSO.get(cls.__name__, set()), f"{cls.__name__}: tests of other clauses failed too: {failed}"
    new_only = clause_test_failures(h, spec, lambda case: _new(case) and spec.clause(case.clause).profile == profile)
    assert cls.BREAKS in new_only and set(new_only[cls.BREAKS]) == {cls.BREAKS}, \
        f"{cls.__name__}: the new cases alone gave {new_only}"


ADDRESSES = ["reference", "python:ledgercheck.fixtures.testkit.independent:MemLedger",
             "python:ledgercheck.fixtures.testkit.independent:SharedMemLedger",
             f"exec:{sys.executable} {ROOT / 'fixtures' / 'testkit' / 'eventsourced' / 'ledger.py'}"]


@pytest.mark.parametrize("address", ADDRESSES, ids=["reference", "independent", "independent-shared", "eventsourced"])
def test_correct_ledgers_pass_every_new_case(address, spec, harness_for):
    h = harness_for(address)
    assert clause_test_failures(h, spec, lambda case: _new(case) and spec.clause(case.clause).profile in h.profiles) == {}


def test_node_ledger_passes_every_new_case(spec, harness_for):
    import shutil

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    h = harness_for(f"exec:{node} {ROOT / 'fixtures' / 'libraries' / 'node' / 'full-ledger.js'}")
    assert clause_test_failures(h, spec, lambda case: _new(case) and spec.clause(case.clause).profile in h.profiles) == {}
