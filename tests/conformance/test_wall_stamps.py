"""A wall-clock ledger may stamp any instant while a call is under way: a create that commits
after a slow call is not a violation, and read-backs hold the ledger to the stamp it chose; a stamp
outside the call's window still is one (core.create.initial)."""

from __future__ import annotations

import pytest
from ledgercheck.conformance.harness import ClauseFailure


def _create_and_read(h):
    rec = h.do("create", source_system="manual", source_id="u-1").value["work"]
    h.do("create", source_system="manual", source_id="u-2")
    h.verify(rec["work_id"])  # a read-back, with a fast call of its own
    return rec


def test_a_stamp_taken_during_a_slow_call_is_accepted_and_read_back(harness_for):
    h = harness_for("python:tests.conformance.wall_stamps:SlowStamp", ["core"])
    assert h.wall
    rec = _create_and_read(h)
    assert h.model.items[rec["work_id"]]["created_at"] == rec["created_at"]


def test_a_stamp_outside_the_call_is_a_violation(harness_for):
    h = harness_for("python:tests.conformance.wall_stamps:EarlyStamp", ["core"])
    with pytest.raises(ClauseFailure) as err:
        _create_and_read(h)
    assert "core.create.initial" in str(err.value) and "created_at" in str(err.value)
