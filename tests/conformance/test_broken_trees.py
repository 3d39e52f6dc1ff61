"""Cases by construction (issue 32: trees, replays, options, table rows) catch the broken ledgers of
``fixtures/testkit/broken_trees.py``, each on its own clause, and the correct ledgers pass every one of them.

* every broken ledger fails a case of its class (param prefix ``tree:``, ``replay:``, ``option:``,
  ``row:``) registered under the clause it breaks, and that failure names the clause;
* over the whole of its profile's clause tests, every failing test names the broken clause or its
  own (attribution, as tests/conformance/test_broken_ledgers.py holds the older catalogues to);
* ``OLD_MISSED``: the ledgers the clause tests that existed before these cases do not catch on their
  clause (the long tier checks that record against the older cases themselves);
* the reference and the independent ledgers (in process; in the long tier the event-sourced one and
  the Node.js one over the wire, which the default run certifies whole) pass every new case;
* the rule tables the generators use (an operation -> the clause of its rule) agree with the clause
  the model names for that operation.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import pytest
from clause_runs import clause_test_failures
from ledgercheck.conformance.clauses import all_cases
from ledgercheck.conformance.clauses.constructed import options, replays, tables, trees
from ledgercheck.conformance.model.base import _Bad
from ledgercheck.fixtures.testkit import broken_trees

ROOT = Path(__file__).resolve().parents[2]
CLASSES = ("tree", "replay", "option", "row")
NEW = tuple(f"{c}:" for c in CLASSES)
CATALOGUE = broken_trees.ALL

# Measured against the clause tests as they were before the cases by construction (every case of the
# profile whose param has none of the NEW prefixes): these pass the old tests of their clause.
OLD_MISSED = {"CascadeStopsAtFinished", "BudgetCountsLiveOnly", "ChildrenOmitCancelled", "CancelledChildWakesNobody",
              "SpawnReplayUnderFinishedParent", "CreateReadmitsFinishedUnit",
              "CancelReasonOnlyForHeldWork", "LastRetryableClassFatal", "MonitorTimeoutAskedUnfinished"}


def _address(cls: type) -> str:
    return f"python:{cls.__module__}:{cls.__name__}"


def _first_per_class() -> set[type]:
    first: dict[str, type] = {}
    for cls in CATALOGUE:
        first.setdefault(cls.CLASS, cls)
    return set(first.values())


def _params(default: set[type] | None = None) -> list:
    keep = default if default is not None else set(CATALOGUE)
    return [pytest.param(c, id=c.__name__, marks=() if c in keep else pytest.mark.thorough) for c in CATALOGUE]


def test_the_catalogue_has_several_ledgers_per_class_over_profiles(spec):
    ids = {c.id for c in spec.clauses}
    for cls in CATALOGUE:
        assert cls.BREAKS in ids and cls.WHAT and cls.CLASS in CLASSES, cls.__name__
        assert spec.clause(cls.BREAKS).level in ("MUST", "SHOULD"), cls.__name__
    for klass in CLASSES:
        mine = [c for c in CATALOGUE if c.CLASS == klass]
        assert len(mine) >= 2, klass
        if klass != "tree":  # every tree operation is the spawn profile's
            assert len({spec.clause(c.BREAKS).profile for c in mine}) >= 2, klass
    assert len({c.BREAKS for c in CATALOGUE}) == len(CATALOGUE), "each ledger breaks a different clause"
    assert OLD_MISSED <= {c.__name__ for c in CATALOGUE}


@pytest.mark.parametrize("cls", _params())
def test_a_case_of_its_class_fails_on_its_clause(cls, spec, harness_for):
    h = harness_for(_address(cls))
    prefix = f"{cls.CLASS}:"
    failed = clause_test_failures(h, spec, lambda case: case.clause == cls.BREAKS and case.param.startswith(prefix))
    assert cls.BREAKS in failed, f"{cls.__name__} ({cls.WHAT}) passed every {prefix} case of {cls.BREAKS}"
    assert cls.BREAKS in failed[cls.BREAKS], f"{cls.__name__}: the failing {prefix} cases blamed {failed[cls.BREAKS]}"


@pytest.mark.parametrize("cls", _params(_first_per_class()))
def test_every_failure_over_its_profile_names_the_broken_clause_or_its_own(cls, spec, harness_for):
    profile = spec.clause(cls.BREAKS).profile
    h = harness_for(_address(cls))
    failed = clause_test_failures(h, spec, lambda case: spec.clause(case.clause).profile == profile)
    assert cls.BREAKS in failed and cls.BREAKS in failed[cls.BREAKS], f"{cls.__name__}: {failed}"
    misblamed = {c: sorted(set(b)) for c, b in failed.items() if cls.BREAKS not in b and c not in b}
    assert not misblamed, f"{cls.__name__} breaks {cls.BREAKS}; these tests' failures named neither it nor their own clause: {misblamed}"


@pytest.mark.thorough
@pytest.mark.parametrize("cls", CATALOGUE, ids=lambda c: c.__name__)
def test_the_old_cases_record(cls, spec, harness_for):
    """OLD_MISSED is what the clause tests before these cases did: they pass those ledgers on the
    broken clause, and catch the others there."""
    profile = spec.clause(cls.BREAKS).profile
    h = harness_for(_address(cls))
    old = clause_test_failures(h, spec, lambda case: spec.clause(case.clause).profile == profile and not case.param.startswith(NEW))
    caught = cls.BREAKS in old and cls.BREAKS in old[cls.BREAKS]
    assert caught != (cls.__name__ in OLD_MISSED), f"{cls.__name__}: the old cases gave {old}"


def _new_cases_failures(h, spec) -> tuple[dict[str, list[str]], float]:
    t0 = time.process_time()
    failed = clause_test_failures(h, spec, lambda case: case.param.startswith(NEW))
    return failed, time.process_time() - t0


@pytest.mark.parametrize("address", ["reference", "python:ledgercheck.fixtures.testkit.independent:SharedMemLedger"])
def test_correct_ledgers_in_process_pass_every_new_case(address, spec, harness_for):
    h = harness_for(address)
    failed, _ = _new_cases_failures(h, spec)
    assert failed == {}, f"{address}: {failed}"


def _wire_ledgers() -> list:
    node = shutil.which("node") or "node"
    return [pytest.param(f"exec:{sys.executable} {ROOT / 'fixtures' / 'testkit' / 'eventsourced' / 'ledger.py'}", id="eventsourced"),
            pytest.param(f"exec:{node} {ROOT / 'fixtures' / 'libraries' / 'node' / 'full-ledger.js'}", id="node-full-ledger")]


# the default run certifies both (tests/protocol/test_eventsourced_ledger.py, test_node_full_ledger.py),
# every new case included; here, in the long tier, the new cases alone, for a quicker diagnosis
@pytest.mark.thorough
@pytest.mark.parametrize("address", _wire_ledgers())
def test_independent_ledgers_over_the_wire_pass_every_new_case(address, spec, harness_for):
    h = harness_for(address)
    failed, _ = _new_cases_failures(h, spec)
    assert failed == {}, f"{address}: {failed}"


def test_the_cases_cover_every_class_operation_and_row(spec):
    """Derived from the contract: a case for every tree operation x status class, every keyed
    operation, every optional argument of the operations that move an item, every error class."""
    params = {c.param for c in all_cases(spec)}
    for op in trees.tree_operations(spec):
        for cls in trees.status_classes(spec):
            assert f"tree:{op}:{cls.label}" in params
    for op in replays.keyed_operations(spec):
        assert any(p.startswith(f"replay:{op}:") for p in params), op
        assert f"replay:{op}:reopened" in params
    for op in options.option_ops(spec):
        for name, a in spec.operations[op].args.items():
            if not a.required and a.type not in options.SKIP_TYPES and not a.blame:
                assert any(p.startswith(f"option:{op}:{name}:") for p in params), (op, name)
    for cls in spec.error_classes:
        assert any(p.startswith(f"row:error_class:{cls}:") for p in params), cls
    for status in spec.statuses:
        assert any(p.startswith(f"row:ask:{status}:") for p in params), status
    for step in spec.step_classes:
        assert any(p.startswith(f"row:decision:{step}:") for p in params), step
    assert {"retry.schedule", "retry.exhausted", "retry.non_retryable"} == {
        tables.error_row_clause(spec, c, a, 3) for c in spec.error_classes for a in (1, 3)}


def test_the_rule_tables_agree_with_the_model(spec, harness_for):
    """REPLAY_RULES: the clause the model blames for a replay of each keyed operation answered as if
    it had made the record (its flag flipped); TREE_RULES: the clause the model names for each tree
    operation (its acceptance, or the refusal the tree rows probe)."""
    h = harness_for("reference")
    for op in replays.keyed_operations(spec):
        h.fresh()
        item = h.create(source_id="rules") if replays._takes_item(spec, op) else None
        args = replays.first_args(spec, op, item)
        assert h.do(op, **args).ok, op
        call = {**args, "now": h.now()}
        exp = h.model.expect(op, call)
        answer = h.raw(op, **call).value
        flipped = {k: (not v if isinstance(v, bool) else v) for k, v in answer.items()}
        try:
            named = {v.clause for v in exp.handler(flipped)}
        except _Bad as bad:
            named = {bad.clause}
        assert replays.REPLAY_RULES[op] in named, (op, named)
    h.fresh()
    root = h.create(source_id="rules-tree")
    for op in trees.tree_operations(spec):
        args = {"parent_id": root, "key": "k", "now": h.now()} if "parent_id" in spec.operations[op].args \
            else {"work_id": root, "now": h.now()}
        exp = h.model.expect(op, {k: v for k, v in args.items() if k in spec.operations[op].args})
        named = {exp.clause, *getattr(exp, "refused_as", {}).values()}
        assert trees.TREE_RULES[op] in named, (op, named)
