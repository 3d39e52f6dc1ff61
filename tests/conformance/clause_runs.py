"""Shared by the broken-ledger tests: run selected clause tests as the plugin runs them."""

from __future__ import annotations

from ledgercheck.conformance.harness import Harness


def clause_test_failures(h: Harness, spec, keep) -> dict[str, list[str]]:
    """Run the clause tests whose case ``keep(case)`` selects as the plugin runs them (a fresh
    ledger each, focus on the test's clause, so other clauses' snapshot divergences are set
    aside); for each clause whose tests failed, the clauses the failures blamed."""
    from ledgercheck.conformance.clauses import NoCheck, all_cases
    from ledgercheck.conformance.harness import ClauseFailure, DriveBlocked, NotApplicable, NotOffered

    failed: dict[str, list[str]] = {}
    for case in all_cases(spec):
        if not keep(case):
            continue
        try:
            h.start_case(case.clause)
            case.fn(h)
        except ClauseFailure as exc:
            failed.setdefault(case.clause, []).extend(exc.clauses)
        except (NotApplicable, NotOffered, NoCheck, DriveBlocked):
            pass  # not judged (an operation not offered is never a failure)
    return failed
