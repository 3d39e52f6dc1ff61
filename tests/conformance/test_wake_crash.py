"""A crash inside a take (issue 17: "between merging wakeups and handing out the work").  The
clause case kills the adapter process at each of its own crash points while it takes, reopens
the ledger and checks the promise: the merged wakeups are still pending, whole, or were handed
out once, and a hand-out whose holder died is handed out again, whole, after its lease lapsed
and never while it is live.  The reference keeps it; a ledger that records the hand-out in a
second transaction (fixtures/testkit/broken_lanes.py) loses the wakeups."""

from __future__ import annotations

import pytest
from ledgercheck.conformance.clauses import all_cases
from ledgercheck.conformance.harness import ClauseFailure, NotApplicable

CASE = "wakeups.redeliver[crash-inside-take-then-lapse]"


def _run(h, spec) -> None:
    case = next(c for c in all_cases(spec) if c.name == CASE)
    h.start_case(case.clause)
    case.fn(h)


def test_the_reference_hands_the_merged_wakeups_out_once_after_a_crash(spec, harness_for) -> None:
    _run(harness_for("exec:ledgercheck serve reference"), spec)


def test_a_take_in_two_steps_loses_the_wakeups(spec, harness_for) -> None:
    h = harness_for("exec:ledgercheck serve python:ledgercheck.fixtures.testkit.broken_lanes:WakeTakeInTwoSteps")
    with pytest.raises(ClauseFailure) as info:
        _run(h, spec)
    assert info.value.clauses == ["wakeups.redeliver"]
    assert "hand-out lapsed, the next take gave" in str(info.value)


def test_an_adapter_that_cannot_be_stopped_is_not_judged(spec, harness_for) -> None:
    with pytest.raises(NotApplicable):
        _run(harness_for("python:ledgercheck.reference.adapter:ReferenceAdapter"), spec)
