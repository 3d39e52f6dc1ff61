"""The checker's expectations come from the contract: every matrix cell, the scanner rule, the
allowances, the two legitimate outcomes of a kill inside an operation."""

from __future__ import annotations

import dataclasses

import pytest
from ledgercheck.chaos.crash.checker import (
    Observation,
    alternatives,
    check_window,
    expected_decision,
    fold_problems,
    make_alt,
    step_allowance,
    storm_step_allowed,
)
from ledgercheck.chaos.crash.points import check_contract, stage_point, worker_points
from ledgercheck.chaos.safety.workload import Item, Step, Workload
from ledgercheck.spec import Spec, default_spec
from ledgercheck.spec.contract import CrashPoint, MatrixEntry


def _item(cls_: str, wait: bool = False) -> Item:
    steps = [Step("s1", "effect", cls_, "crm.call", {"a": 1})]
    if wait:
        steps = [Step("w1", "wait", wait_kind="user", wait_ref="user:1", wait_timeout=60.0)] + steps
    return Item("item-1", "manual", "m-1", tuple(steps))


def test_the_contract_fits_the_worker_protocol(spec: Spec) -> None:
    assert check_contract(spec) == []
    assert set(worker_points(spec)) == set(spec.crash_points)


def test_a_contract_point_names_the_worker_stage_it_stands_for(spec: Spec) -> None:
    """Each crash point names a stage of the worker's protocol (``stage``); the harness refuses a
    contract whose point names no such stage, leaves a stage without a point, or gives two points
    of one stage (which the checker cannot tell apart) different matrix entries."""
    def with_points(points: dict, matrix: dict | None = None) -> Spec:
        return dataclasses.replace(spec, crash_points=points, matrix=matrix if matrix is not None else spec.matrix)

    pts = dict(spec.crash_points)
    odd = with_points({**pts, "after_claim": dataclasses.replace(pts["after_claim"], stage="claimed")})
    assert any("stands for stage 'claimed'" in p for p in check_contract(odd))
    assert any("no crash point for the worker's stage 'acquired'" in p for p in check_contract(odd))
    # a second point of the 'recorded' stage: the same entries fit, other ones do not
    twin = CrashPoint("after_record_before_next", "completed", False, "between two steps", "recorded")
    first = stage_point(spec, "recorded")
    same = {c: {**row, twin.name: row[first]} for c, row in spec.matrix.items()}
    assert check_contract(with_points({**pts, twin.name: twin}, same)) == []
    assert stage_point(with_points({**pts, twin.name: twin}, same), "recorded") == first  # contract order
    other = {c: {**row, twin.name: MatrixEntry("retry", row[first].effects)} for c, row in spec.matrix.items()}
    assert any("cannot tell them apart" in p for p in check_contract(with_points({**pts, twin.name: twin}, other)))
    # its journal must be the stage's
    wrong = dataclasses.replace(twin, journal="pending")
    assert any("the worker's protocol leaves completed" in p for p in check_contract(with_points({**pts, twin.name: wrong}, same)))


@pytest.mark.parametrize("point", list(default_spec().crash_points))
def test_every_matrix_cell_is_what_the_checker_expects(spec: Spec, point: str) -> None:
    for cls_, row in spec.matrix.items():
        waiting = spec.crash_points[point].waiting
        item = _item(cls_, wait=waiting)
        step = 0
        done = {0} if (waiting or spec.crash_points[point].journal == "completed") else set()
        alt = make_alt(spec, item, spec.crash_points[point].stage, step, done)
        decision, by_attempts = expected_decision(spec, item, alt, attempt=1)
        want = "none" if spec.crash_points[point].waiting else row[point].decision
        assert (decision, by_attempts) == (want, False), (cls_, point)
        effect_step = 1 if waiting else 0
        assert step_allowance(spec, item, effect_step, alt, quarantined=False) == spec.allowances[row[point].effects]


def test_attempts_exhausted_turns_a_requeue_into_quarantine(spec: Spec) -> None:
    item = _item("idempotent_with_key")
    alt = make_alt(spec, item, "acquired", 0, set())
    limit = spec.retry_policy_for("manual").max_attempts
    assert expected_decision(spec, item, alt, attempt=limit - 1) == ("retry", False)
    assert expected_decision(spec, item, alt, attempt=limit) == ("quarantine", True)


def test_a_kill_inside_an_operation_allows_before_and_after(spec: Spec) -> None:
    item = _item("non_idempotent_with_lookup")
    ctx = {"item": "item-1", "step": 0, "stage": "submitted", "completed": [], "op": "effect_record"}
    alts = alternatives(spec, item, ctx)
    assert [a.stage for a in alts] == ["submitted", "recorded"]
    assert [dict(a.journal) for a in alts] == [{"s1": "pending"}, {"s1": "completed"}]
    assert [expected_decision(spec, item, a, 1)[0] for a in alts] == ["reconcile", "resume"]
    reads = alternatives(spec, item, {**ctx, "op": "events"})
    assert len(reads) == 1


def test_later_steps_of_quarantined_work_must_not_run(spec: Spec) -> None:
    item = Item("i", "manual", "m", (Step("s1", "effect", "non_idempotent_without_lookup", "t", 1),
                                     Step("s2", "effect", "idempotent_with_key", "t", 2)))
    alt = make_alt(spec, item, "submitted", 0, set())
    assert step_allowance(spec, item, 1, alt, quarantined=True).max == 0
    assert step_allowance(spec, item, 1, alt, quarantined=False) == spec.allowances["exactly_once"]


def test_storm_allowances_are_the_union_of_the_row(spec: Spec) -> None:
    assert storm_step_allowed(spec, "checkpointed", "completed", 3)
    assert not storm_step_allowed(spec, "checkpointed", "completed", 0)
    assert storm_step_allowed(spec, "idempotent_with_key", "completed", 1)
    assert not storm_step_allowed(spec, "idempotent_with_key", "completed", 2)
    assert not storm_step_allowed(spec, "non_idempotent_with_lookup", "completed", 2)
    assert storm_step_allowed(spec, "non_idempotent_without_lookup", "needs_inspection", 1)
    assert storm_step_allowed(spec, "non_idempotent_without_lookup", "needs_inspection", 0)
    assert not storm_step_allowed(spec, "non_idempotent_without_lookup", "needs_inspection", 2)
    assert not storm_step_allowed(spec, "pure", "completed", 1)
    assert not storm_step_allowed(spec, "idempotent_with_key", None, 1)  # an effect nobody began


def test_fold_problems_name_the_field(spec: Spec) -> None:
    events = [{"type": "work_created", "from_status": None, "to_status": "queued",
               "data": {"source_system": "manual", "source_id": "x", "source_run_id": None, "priority": 3,
                        "attempt": 0, "lease_version": 0, "cancel_requested": False, "quarantined": False}}]
    work = {"source_system": "manual", "source_id": "x", "source_run_id": None, "status": "queued", "priority": 3,
            "attempt": 0, "lease_version": 0, "cancel_requested": False, "quarantined": False}
    assert fold_problems(spec, work, events) == []
    assert fold_problems(spec, {**work, "priority": 5}, events) == ["priority: snapshot 5, events fold to 3"]


def _obs(spec: Spec, item: Item, *, victims: list, post_state: str, final_status: str, applied: int,
         quarantined: bool) -> Observation:
    wid = "w1"
    key = spec.effect_key(work_id=wid, step_id="s1", tool=item.steps[0].tool)
    rec = {"key": key, "step_id": "s1", "state": "pending"}
    pre = {item.key: {"work": {"status": "running", "attempt": 1}, "receipts": [rec]}}
    post = {item.key: {"work": {"status": "timeout", "quarantined": quarantined}, "receipts": [{**rec, "state": post_state}]}}
    final = {item.key: {"work": {"status": final_status, "quarantined": quarantined}, "receipts": [], "events": []}}
    crash = {"ctx": {"item": item.key, "step": 0, "stage": "submitted", "completed": [], "op": None}}
    return Observation({item.key: wid}, crash, pre, [], victims, post, final, [wid] if quarantined else [],
                       {key: applied})


def test_a_correct_quarantine_passes_and_a_blind_rerun_fails(spec: Spec) -> None:
    item = _item("non_idempotent_without_lookup")
    wl = Workload(0, (item,))
    good = _obs(spec, item, victims=[{"work_id": "w1", "decision": "quarantine"}], post_state="needs_inspection",
                final_status="timeout", applied=1, quarantined=True)
    v = check_window(spec, wl, "after_submit_before_record", good)
    # the synthetic end state carries no events, so only the fold check may complain here
    assert [x for x in v.violations if x.clause != "eventlog.fold"] == []
    bad = _obs(spec, item, victims=[{"work_id": "w1", "decision": "retry"}], post_state="pending",
               final_status="done", applied=2, quarantined=False)
    clauses = {x.clause for x in check_window(spec, wl, "after_submit_before_record", bad).violations}
    assert {"recovery.matrix", "recovery.receipt_marking", "recovery.effects_allowed",
            "recovery.quarantine.visible"} <= clauses
