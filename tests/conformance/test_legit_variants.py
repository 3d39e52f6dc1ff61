"""Correct ledgers that choose differently where the contract leaves room pass the harness.

Each variant (in ``adapters.py``) is the reference with one defensible choice changed.  The
scenario that exposes the choice runs through the harness with its model, and a short
stateful exploration runs on top; neither may report anything.  Beside them, a ledger that
really breaks the nearby clause is still caught, for that clause.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ledgercheck.conformance.harness import ClauseFailure, Harness
from ledgercheck.conformance.stateful import hypothesis_settings, machine_profiles, make_machine, run_machine

if str(Path(__file__).parent) not in sys.path:  # python:adapters:... resolves to ./adapters.py
    sys.path.insert(0, str(Path(__file__).parent))

INPUT_A, INPUT_B = {"to": "ada@example.org"}, {"to": "bob@example.org"}


def _claimed(h: Harness) -> tuple[str, str]:
    wid = h.create(source_system="manual")
    return wid, h.claim(wid)


def conflict_with_dead_token(h: Harness) -> None:
    """effect_record with another input hash *and* a token that is not the live lease."""
    wid, tok = _claimed(h)
    rec = h.do("effect_begin", work_id=wid, step_id="s1", tool="email.send", input=INPUT_A, step_class="pure", token=tok).value
    out = h.do("effect_record", key=rec["receipt"]["key"], input_hash=h.spec.input_hash(INPUT_B), result={"ok": 1}, token="forged-token")
    assert not out.ok and out.code in ("idempotency_conflict", "stale_lease")
    h.verify_all()


def reconcile_beside_a_pure_step(h: Harness) -> None:
    """A crashed item with two pending receipts: a pure step and a non-idempotent one with a
    provider lookup.  The scan decides reconcile (the lookup step calls for it)."""
    wid, tok = _claimed(h)
    for step, cls in (("s1", "pure"), ("s2", "non_idempotent_with_lookup")):
        h.do("effect_begin", work_id=wid, step_id=step, tool="email.send", input=INPUT_A, step_class=cls, token=tok)
    h.advance_to(h.lapse_time(wid))
    victims = h.do("recover").value
    assert [v["decision"] for v in victims if v["work_id"] == wid] == ["reconcile"]
    h.verify_all()
    states = sorted(r["state"] for r in h.do("effect_list", work_id=wid).value)
    assert "unknown" in states  # the deciding receipt is marked, whatever happened to the other


def complete_by_mark(h: Harness) -> None:
    wid, tok = _claimed(h)
    rec = h.do("effect_begin", work_id=wid, step_id="s1", tool="email.send", input=INPUT_A, step_class="checkpointed", token=tok).value
    h.do("effect_mark", key=rec["receipt"]["key"], state="completed")
    h.do("effect_lookup", key=rec["receipt"]["key"])
    h.verify_all()


SCENARIOS = {"FencesBeforeConflict": conflict_with_dead_token, "MarksOnlyTheDecidingReceipt": reconcile_beside_a_pure_step,
             "CompletesByMark": complete_by_mark}


@pytest.mark.parametrize("variant", sorted(SCENARIOS))
@pytest.mark.parametrize("address", ["reference", "variant"])
def test_the_choice_is_accepted(harness_for, variant: str, address: str) -> None:
    h = harness_for("reference" if address == "reference" else f"python:adapters:{variant}")
    SCENARIOS[variant](h)


@pytest.mark.parametrize("variant", sorted(SCENARIOS))
def test_stateful_exploration_finds_nothing(harness_for, variant: str) -> None:
    h = harness_for(f"python:adapters:{variant}")
    h = Harness(h.client, h.spec, machine_profiles(h.client.profiles, "lifecycle"))
    run_machine(make_machine(h, only="lifecycle"), hypothesis_settings("ci", database=None, max_examples=25), 11)


def test_a_reconcile_that_marks_nothing_is_still_caught(harness_for) -> None:
    h = harness_for("python:adapters:LeavesReconciledReceiptPending")
    with pytest.raises(ClauseFailure) as info:
        reconcile_beside_a_pure_step(h)
    assert {v.clause for v in info.value.violations} == {"recovery.receipt_marking"}
    assert "expected 'unknown'" in str(info.value)
