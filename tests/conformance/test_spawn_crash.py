"""A crash inside a spawn, then its replay (issue 17: "a replayed spawn after the crash must return
the same child").  The clause case kills the adapter process at each of its own crash points
while it spawns, reopens the ledger and replays the spawn: the reference leaves one child, the
ledger that enqueues before it logs (fixtures/testkit/broken_spawn.py) a second one.

And a crash inside a child's close-out ("between a child's completion and the parent's wake"):
the reference finishes the child and wakes its parent's run in one transaction; the ledger that
wakes the parent in a second one leaves a finished child whose parent never wakes."""

from __future__ import annotations

import pytest
from ledgercheck.conformance.clauses import all_cases
from ledgercheck.conformance.harness import ClauseFailure, NotApplicable

CASE = "spawn.logged_first[crash-inside-spawn-then-replay]"
WAKE_CASE = "spawn.wakes_parent[crash-inside-child-close-out]"


def _run(h, spec, name: str = CASE) -> None:
    case = next(c for c in all_cases(spec) if c.name == name)
    h.start_case(case.clause)
    case.fn(h)


def test_the_reference_leaves_one_child_after_a_crash_and_a_replay(spec, harness_for) -> None:
    _run(harness_for("exec:ledgercheck serve reference"), spec)


def test_enqueue_before_log_leaves_a_second_child(spec, harness_for) -> None:
    h = harness_for("exec:ledgercheck serve python:ledgercheck.fixtures.testkit.broken_spawn:SpawnEnqueuesBeforeLog")
    with pytest.raises(ClauseFailure) as info:
        _run(h, spec)
    assert info.value.clauses == ["spawn.logged_first"]
    assert "the parent's log records" in str(info.value)


def test_an_adapter_that_cannot_be_stopped_is_not_judged(spec, harness_for) -> None:
    with pytest.raises(NotApplicable):
        _run(harness_for("python:ledgercheck.reference.adapter:ReferenceAdapter"), spec)


def test_the_reference_wakes_the_parent_of_a_child_a_crash_finished(spec, harness_for) -> None:
    _run(harness_for("exec:ledgercheck serve reference"), spec, WAKE_CASE)


def test_waking_the_parent_in_a_second_step_leaves_it_asleep(spec, harness_for) -> None:
    h = harness_for("exec:ledgercheck serve python:ledgercheck.fixtures.testkit.broken_spawn:ChildWakesParentSeparately")
    with pytest.raises(ClauseFailure) as info:
        _run(h, spec, WAKE_CASE)
    assert info.value.clauses == ["spawn.wakes_parent"]
    assert "is done and its parent's run reads" in str(info.value)
