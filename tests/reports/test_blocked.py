"""A clause whose every failing test stopped at another clause's violation was not judged: the
verdict line names what stopped it, never the clause's own words (a library that moves an expired
item back to queued must not read "expires leases before their grace ends")."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ledgercheck.reports import verdicts
from ledgercheck.reports.integrity import file_bytes, with_integrity
from ledgercheck.reports.results import ResultsError, read_results

STOPPED, STOPPER = "lease.expiry.grace", "core.running.renew_or_leave"


def _doc(factory, *, stopper_fails: bool, own: bool = False) -> dict[str, Any]:
    tests = factory.tests(known_bugs=(), failing=())
    for t in tests:
        if t["clause"] == STOPPED:
            named = f"{STOPPED}, {STOPPER}" if own else STOPPER
            t.update(outcome="failed", message=f"clause violated: {named}\nafter: claim -> expire()\n"
                     f"[{STOPPER}] expire: w1: move reported as running -> queued")
        if t["clause"] == STOPPER and stopper_fails:
            t.update(outcome="failed", message=f"clause violated: {STOPPER}\n[{STOPPER}] moved to queued")
    return factory.build(tests=tests, windows=factory.windows(bad=()), adapter=factory.adapter(known_bugs={}))


def test_a_clause_stopped_at_another_clauses_violation_is_not_headlined(factory) -> None:
    doc = _doc(factory, stopper_fails=True)
    found = doc["findings"]
    assert [f["what"] for f in found if f["severity"] == "violation"] == [STOPPER]
    [blocked] = [f for f in found if f["what"] == "blocked"]
    assert blocked["clauses"] == [STOPPED] and f"{STOPPED} at {STOPPER}" in blocked["words"]
    line = doc["verdict_line"]
    assert line.startswith("NOT CERTIFIED: ") and "1 clause not judged" in line
    words = next(c["headline"] for c in doc["clauses"] if c["id"] == STOPPED)
    assert words not in line  # the stopped clause's own words are not claimed
    # the clause table still says its test failed
    assert next(c for c in doc["clauses"] if c["id"] == STOPPED)["outcome"] == "fail"


def test_a_failure_that_names_the_clause_itself_is_headlined(factory) -> None:
    doc = _doc(factory, stopper_fails=True, own=True)
    assert {f["what"] for f in doc["findings"] if f["severity"] == "violation"} == {STOPPED, STOPPER}
    assert not [f for f in doc["findings"] if f["what"] == "blocked"]


def test_a_stopper_that_fails_nowhere_on_its_own_keeps_the_stopped_clause_a_violation(factory) -> None:
    """Never hide a failure: if what stopped the test is not reported failing elsewhere, the
    stopped clause stays a violation (it is the only place the failure shows)."""
    doc = _doc(factory, stopper_fails=False)
    assert STOPPED in [f["what"] for f in doc["findings"] if f["severity"] == "violation"]


def test_results_written_under_earlier_rules_are_read_with_current_rules_only_when_asked(factory, tmp_path) -> None:
    doc = _doc(factory, stopper_fails=True)
    old = copy.deepcopy(doc)
    old["verdict_line"] = "NOT CERTIFIED: what an earlier version said"
    old.pop("integrity", None)
    path = tmp_path / "results.json"  # sealed as it is: intact, but judged by other rules
    path.write_bytes(file_bytes(with_integrity(old)))
    with pytest.raises(ResultsError, match="does not follow from the profile verdicts"):
        read_results(path)
    again = verdicts.apply(copy.deepcopy(read_results(path, current_rules=True).doc))
    assert again["verdict_line"] == doc["verdict_line"]
