"""The harness must catch deliberately broken ledgers, each for the right clause.

Every class in ``ledgercheck.fixtures.testkit.broken``, ``broken_lanes`` and ``broken_spawn`` breaks one clause of the contract (named in its
``BREAKS``).  For each of them:

* the clause tests of that clause's profile fail, a failure names the clause, and every failing
  test of the profile names the broken clause or its own (the attribution, not only the failure);
* the stateful model-based tests alone (no clause tests) find the bug too, with a fixed seed
  and the same budget for every ledger, and blame that clause (the default run: one ledger per
  profile and machine family; the long tier: every ledger).

The reference ledger passes the very same runs (tests/conformance/test_reference_conformance.py).
"""

from __future__ import annotations

import pytest
from clause_runs import clause_test_failures
from hypothesis import Phase
from ledgercheck.conformance.harness import ClauseFailure, find_exception
from ledgercheck.conformance.stateful import (
    TREE_PROFILES,
    hypothesis_settings,
    machine_profiles,
    make_machine,
    run_machine,
)
from ledgercheck.fixtures.testkit import broken, broken_lanes, broken_spawn
from ledgercheck.spec import default_spec

MESSAGING = {"inbox", "outbox", "lanes", "wakeups", "logread"}  # profiles the messaging machine family checks
STATEFUL_BUDGET = 150  # examples, same for every ledger
SEED = 0
# every catalogue of broken ledgers these tests hold to their clauses: fixtures/testkit/broken.py, and a module
# per later group of profiles
CATALOGUE: list[type] = [*broken.ALL, *broken_lanes.ALL, *broken_spawn.SPAWN_LEDGERS]


def _address(cls: type) -> str:
    return f"python:{cls.__module__}:{cls.__name__}"


def test_there_are_enough_broken_ledgers(spec):
    assert len(CATALOGUE) >= 15
    for cls in CATALOGUE:
        assert cls.BREAKS in {c.id for c in spec.clauses}, cls.__name__
        assert cls.WHAT, cls.__name__
    assert len({cls.BREAKS for cls in CATALOGUE}) == len(CATALOGUE), "each ledger breaks a different clause"


@pytest.mark.parametrize("cls", CATALOGUE, ids=lambda c: c.__name__)
def test_clause_tests_catch_it(cls, spec, harness_for):
    profile = spec.clause(cls.BREAKS).profile
    h = harness_for(_address(cls))
    failed = clause_test_failures(h, spec, lambda case: spec.clause(case.clause).profile == profile)
    assert failed, f"{cls.__name__} ({cls.WHAT}) passed every clause test of profile {profile}"
    assert cls.BREAKS in failed, f"{cls.__name__}: expected {cls.BREAKS} to fail, failing clauses were {sorted(failed)}"
    assert cls.BREAKS in failed[cls.BREAKS], f"{cls.__name__}: the failing test of {cls.BREAKS} blamed {failed[cls.BREAKS]}"
    # attribution, not only failure: a test of another clause may see the bug too (a terminal
    # record that moves fails core.status.terminal's test as well), but its failure must name the
    # broken clause or the clause that test is about, never only a third one
    misblamed = {c: sorted(set(b)) for c, b in failed.items() if cls.BREAKS not in b and c not in b}
    assert not misblamed, f"{cls.__name__} breaks {cls.BREAKS}; these tests' failures named neither it nor their own clause: {misblamed}"


# A ledger whose bug the stateful machines cannot see says why in its STATEFUL_BLIND (claim
# order, a SHOULD the model leaves open): only its clause test judges it.
def test_a_stateful_blind_ledger_says_why(spec):
    blind = [cls for cls in CATALOGUE if cls.STATEFUL_BLIND is not None]
    assert all(isinstance(cls.STATEFUL_BLIND, str) and len(cls.STATEFUL_BLIND) > 20 for cls in blind)
    assert len(blind) <= len(CATALOGUE) // 5, "most broken ledgers must be caught by the stateful machines too"


def _family(cls: type) -> str:
    """The machine family whose rules reach the clause ``cls`` breaks."""
    profile = default_spec().clause(cls.BREAKS).profile
    return "messaging" if profile in MESSAGING or cls.BREAKS.startswith("eventlog.append") else \
        "tree" if profile in TREE_PROFILES else "lifecycle"


def _stateful_params() -> list:
    """Every ledger the stateful machines must catch.  The default run keeps the first of the
    catalogue for each profile and machine family (every profile's stateful checks, in each machine
    that judges them, shown to catch a bug with no clause test's help); the long tier runs the rest."""
    first: dict[tuple[str, str], type] = {}
    seen = [c for c in CATALOGUE if c.STATEFUL_BLIND is None]
    for cls in seen:
        first.setdefault((default_spec().clause(cls.BREAKS).profile, _family(cls)), cls)
    keep = set(first.values())
    return [pytest.param(c, id=c.__name__, marks=() if c in keep else pytest.mark.thorough) for c in seen]


@pytest.mark.parametrize("cls", _stateful_params())
def test_stateful_tests_alone_catch_it(cls, spec, harness_for):
    family = _family(cls)
    h = harness_for(_address(cls))
    h = harness_for(_address(cls), machine_profiles(h.client.profiles, family))
    machine = make_machine(h, only=family)
    # detection only: no shrinking (the failing program's shrinking is tested elsewhere)
    opts = hypothesis_settings("dev", database=None, max_examples=STATEFUL_BUDGET, phases=(Phase.generate,))
    with pytest.raises(BaseException) as info:
        run_machine(machine, opts, SEED)
    failure = find_exception(info.value, ClauseFailure)
    assert failure is not None, f"{cls.__name__}: stateful run ended with {info.value!r:.300}"
    blamed = failure.clauses
    assert cls.BREAKS in blamed, f"{cls.__name__}: stateful tests blamed {blamed}, expected {cls.BREAKS}"
