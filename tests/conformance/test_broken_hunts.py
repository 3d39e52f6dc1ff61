"""Broken ledgers found by adversarial hunts are caught by the clause tests, each for its clause.

``fixtures/testkit/broken_paths.py`` (bugs that show only on one path), ``fixtures/testkit/broken_recovery.py``
(crash recovery; its crash-only variants are in tests/chaos/test_broken.py) and
``fixtures/testkit/broken_journal.py`` (journals, inputs, long runs), ``fixtures/testkit/broken_edges.py`` (arguments at
their edges, answers read field by field).  For every variant the clause
tests of its clause's profile fail, the failing test of the broken clause blames that clause,
and no other clause's tests fail beyond those listed in ``ALSO``; the reference passes the same tests.
"""

from __future__ import annotations

import pytest
from clause_runs import clause_test_failures
from ledgercheck.fixtures.testkit import broken_edges, broken_journal, broken_paths, broken_recovery

MODULES = (broken_paths, broken_recovery, broken_journal, broken_edges)
VARIANTS = [(m, cls) for m in MODULES for cls in m.ALL]

# bugs whose consequence another clause's test may see as well, rightly: a refused append that
# takes a seq has stored something (eventlog.append.conflict, when the race test's appends
# interleave so), a claim that skips the top priority breaks the claim order test's transition
# (and a fence keyed on the owner's name that lets renew through too breaks renewal's own
# condition, which fences.py's renew cases judge: lease.renew.conditions)
ALSO = {"ConflictBurnsSeq": {"eventlog.append.conflict"}, "ClaimSkipsTopPriorityValue": {"core.claim.order"},
        "FencesByOwnerName": {"lease.renew.conditions"},
        # the backoff probes of retry.bounds and retry.cap give an item a partial policy of their own (its exact
        # jitter mode): a ledger that fills a partial policy wrongly fails them, each failure blamed on the override
        "PartialPolicyMultiplierOne": {"retry.bounds", "retry.cap"}}


def test_variants_name_must_clauses(spec):
    ids = {c.id for c in spec.clauses}
    for m in MODULES:
        for cls in [*m.ALL, *getattr(m, "CHAOS", [])]:
            assert cls.BREAKS in ids and cls.WHAT, cls.__name__
            assert spec.clause(cls.BREAKS).level == "MUST", cls.__name__


@pytest.mark.parametrize("module, cls", VARIANTS, ids=[f"{m.__name__.rsplit('.', 1)[1]}-{c.__name__}" for m, c in VARIANTS])
def test_clause_tests_catch_it(module, cls, spec, harness_for):
    profile = spec.clause(cls.BREAKS).profile
    h = harness_for(f"python:{module.__name__}:{cls.__name__}")
    failed = clause_test_failures(h, spec, lambda case: spec.clause(case.clause).profile == profile)
    assert failed, f"{cls.__name__} ({cls.WHAT}) passed every clause test of profile {profile}"
    assert cls.BREAKS in failed, f"{cls.__name__}: expected {cls.BREAKS} to fail, failing clauses were {sorted(failed)}"
    assert cls.BREAKS in failed[cls.BREAKS], f"{cls.__name__}: the failing test of {cls.BREAKS} blamed {failed[cls.BREAKS]}"
    assert set(failed) - {cls.BREAKS} <= ALSO.get(cls.__name__, set()), f"{cls.__name__}: tests of other clauses failed too: {failed}"


def test_the_reference_passes_the_same_tests(spec, harness_for):
    h = harness_for("reference")
    profiles = {spec.clause(cls.BREAKS).profile for _, cls in VARIANTS}
    assert clause_test_failures(h, spec, lambda case: spec.clause(case.clause).profile in profiles) == {}
