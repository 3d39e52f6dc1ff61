"""Every clause the reference claims is tested against it, under the clause's own name.

Either by a unit test of its own in tests/reference (``test_<clause id with _ for .>``), which
states the rule against the reference's API directly, or by the harness' registered cases of the
clause, which ``test_the_reference_passes_the_cases_of`` below runs against the reference in
process.  A clause added to the contract with its case (conformance/clauses) and its broken ledger
(fixtures) is then tested against the reference without a file of its own here.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest
from ledgercheck.conformance.clauses import NoCheck, all_cases
from ledgercheck.conformance.harness import ClauseFailure, DriveBlocked, Harness, NotApplicable, NotOffered
from ledgercheck.spec import default_spec, rules
from ledgercheck.transport.client import connect

SPEC = default_spec()


@cache
def unit_test_names() -> frozenset[str]:
    names: set[str] = set()
    for path in Path(__file__).parent.glob("test_*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}
    return frozenset(names)


def has_unit_test(clause: str) -> bool:
    return "test_" + clause.replace(".", "_") in unit_test_names()


def test_every_claimed_clause_has_a_test_named_after_it() -> None:
    # the clauses judged by crash windows are the chaos suite's (the ledger's own survival of kills
    # is tested in test_sigkill.py); every other one has a unit test here or registered cases
    chaos = set(rules.chaos_clauses(SPEC))
    assert chaos, "the contract names no clause judged by crash windows"
    cased = {c.clause for c in all_cases(SPEC)}
    missing = sorted(c.id for c in SPEC.clauses if c.id not in chaos and not has_unit_test(c.id) and c.id not in cased)
    assert missing == []


def case_failures(address: str, profile: str) -> tuple[dict[str, list[str]], set[str]]:
    """Each registered case of the profile's clauses against ``address``, on a fresh ledger, as
    the plugin runs it (focus on its clause): the cases that failed (name -> the clauses the
    failure blamed) and the clauses at least one case judged."""
    client = connect(address, SPEC)
    failed: dict[str, list[str]] = {}
    judged: set[str] = set()
    try:
        h = Harness(client, SPEC, client.profiles)
        for case in all_cases(SPEC):
            if SPEC.clause(case.clause).profile != profile:
                continue
            try:
                h.start_case(case.clause)  # a fresh ledger, model and clock
                case.fn(h)
            except ClauseFailure as exc:
                failed[case.name] = sorted(set(exc.clauses))
            except NoCheck as exc:
                failed[case.name] = [f"no check: {exc}"]
            except (NotApplicable, NotOffered, DriveBlocked):
                continue
            judged.add(case.clause)
    finally:
        client.close()
    return failed, judged


@pytest.mark.parametrize("profile", list(SPEC.profiles))
def test_the_reference_passes_the_cases_of(profile: str) -> None:
    """A clause without a unit test here must have a case judged in process (not only cases that
    need an adapter process to kill, or another profile to judge them)."""
    failed, judged = case_failures("reference", profile)
    assert failed == {}
    unjudged = sorted(c.id for c in SPEC.clauses if c.profile == profile and not has_unit_test(c.id)
                      and c.id not in rules.chaos_clauses(SPEC) and c.id not in judged)
    assert unjudged == [], "clauses with neither a unit test in tests/reference nor a case judged in process"


def test_the_same_run_fails_a_ledger_that_breaks_a_clause() -> None:
    # identifiers folded by case: the cases of core.identity.exact fail, every failure blames it
    failed, judged = case_failures("python:ledgercheck.fixtures.testkit.broken:IdentityFoldsCase", "core")
    assert any(name.startswith("core.identity.exact[") for name in failed), failed
    assert {c for blamed in failed.values() for c in blamed} == {"core.identity.exact"}, failed
