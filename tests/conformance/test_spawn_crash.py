"""A crash inside a spawn, then its replay (issue 17: "a replayed spawn after the crash must return
the same child").  The clause case kills the adapter process at each of its own crash points
while it spawns, reopens the ledger and replays the spawn: the reference leaves one child, the
ledger that enqueues before it logs (fixtures/broken_spawn.py) a second one."""

from __future__ import annotations

import pytest
from ledgercheck.conformance.clauses import all_cases
from ledgercheck.conformance.harness import ClauseFailure, NotApplicable

CASE = "spawn.logged_first[crash-inside-spawn-then-replay]"


def _run(h, spec) -> None:
    case = next(c for c in all_cases(spec) if c.name == CASE)
    h.start_case(case.clause)
    case.fn(h)


def test_the_reference_leaves_one_child_after_a_crash_and_a_replay(spec, harness_for) -> None:
    _run(harness_for("exec:ledgercheck serve reference"), spec)


def test_enqueue_before_log_leaves_a_second_child(spec, harness_for) -> None:
    h = harness_for("exec:ledgercheck serve python:ledgercheck.fixtures.broken_spawn:SpawnEnqueuesBeforeLog")
    with pytest.raises(ClauseFailure) as info:
        _run(h, spec)
    assert info.value.clauses == ["spawn.logged_first"]
    assert "the parent's log records" in str(info.value)


def test_an_adapter_that_cannot_be_stopped_is_not_judged(spec, harness_for) -> None:
    with pytest.raises(NotApplicable):
        _run(harness_for("python:ledgercheck.reference.adapter:ReferenceAdapter"), spec)
