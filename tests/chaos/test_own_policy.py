"""The chaos checks count attempts against the item's own retry policy, as the contract says.

A workload item may carry the retry policy it is created with; the crash-window checker and the
storm barrier then expect what ``spec.rules.recovery_decision`` says for it.  A real window on
the reference passes, and a ledger that ignores the item's policy is caught.
"""

from __future__ import annotations

from typing import Any

from ledgercheck.chaos.crash.checker import expected_decision, make_alt, step_allowance
from ledgercheck.chaos.crash.exploration import run_one
from ledgercheck.chaos.crash.storms import Storm, _Run
from ledgercheck.chaos.safety.workload import Item, Step, Workload
from ledgercheck.spec import Spec


def _item(policy: dict[str, Any] | None, key: str = "item-1") -> Item:
    return Item(key, "manual", f"m-{key}", (Step("s1", "effect", "idempotent_with_key", "crm.call", {"a": 1}),),
                retry_policy=policy)


def test_the_window_checker_reads_the_items_policy(spec: Spec) -> None:
    assert spec.retry_policy_for("manual").max_attempts == 3
    alt = make_alt(spec, _item(None), "acquired", 0, set())
    assert expected_decision(spec, _item(None), alt, attempt=2) == ("retry", False)
    assert expected_decision(spec, _item({"max_attempts": 2}), alt, attempt=2) == ("quarantine", True)
    assert expected_decision(spec, _item({"max_attempts": 5}), alt, attempt=3) == ("retry", False)


def test_a_step_quarantined_by_attempts_keeps_what_it_had_at_the_kill(spec: Spec) -> None:
    it = _item({"max_attempts": 1})
    claimed = make_alt(spec, it, "acquired", 0, set())
    submitted = make_alt(spec, it, "submitted", 0, set())
    assert step_allowance(spec, it, 0, claimed, quarantined=True, by_attempts=True).max == 0
    a = step_allowance(spec, it, 0, submitted, quarantined=True, by_attempts=True)
    assert (a.min, a.max) == (0, 1)
    # not quarantined by attempts: the matrix row decides, as before
    row = spec.matrix["idempotent_with_key"]
    assert step_allowance(spec, it, 0, claimed, quarantined=False) == spec.allowances[row["after_claim"].effects]
    assert step_allowance(spec, it, 0, submitted, quarantined=True) == spec.allowances[row["after_submit_before_record"].effects]


def test_a_workload_item_keeps_its_policy_through_its_document(spec: Spec) -> None:
    wl = Workload(0, (_item({"max_attempts": 2}), _item(None, "item-2")))
    back = Workload.from_dict(wl.to_dict(), spec)
    assert [it.retry_policy for it in back.items] == [{"max_attempts": 2}, None]
    assert "retry_policy" not in wl.to_dict()["items"][1]


def _barrier(spec: Spec, item: Item, decision: str, quarantined: bool) -> list[str]:
    storm = Storm.__new__(Storm)  # the barrier check alone: no processes
    storm.spec, storm.run, storm.workload, storm._by_source = spec, _Run(), Workload(0, (item,)), None
    storm.run.barriers = 1
    work = {"work_id": "w1", "source_system": item.source_system, "source_id": item.source_id, "source_run_id": None,
            "status": "running", "attempt": 2}
    after = {"status": "timeout" if quarantined else spec.initial_status, "quarantined": quarantined}
    storm._check_barrier({"before": {"w1": {"work": work, "receipts": []}}, "waiting": {},
                          "victims": [{"work_id": "w1", "decision": decision, "reason": ""}],
                          "after": {"w1": {"work": after, "receipts": []}}})
    return [v.clause for v in storm.run.violations]


def test_the_storm_barrier_reads_the_items_policy(spec: Spec) -> None:
    own = _item({"max_attempts": 2})
    assert _barrier(spec, own, "quarantine", True) == []
    assert "recovery.attempts_exhausted" in _barrier(spec, own, "retry", False)
    assert _barrier(spec, _item(None), "retry", False) == []
    assert "recovery.matrix" in _barrier(spec, _item(None), "quarantine", True)


def _window(spec: Spec, address: str, tmp_path: Any) -> dict[str, Any]:
    wl = Workload(0, (_item({"max_attempts": 1}),))
    return run_one(address, spec, "after_claim", workload=wl, tmp_root=str(tmp_path), save=False, timeout=600.0)


def test_a_real_window_with_an_own_policy_passes_on_the_reference(spec: Spec, tmp_path: Any) -> None:
    d = _window(spec, "reference", tmp_path)
    assert (d["decision_expected"], d["decision_observed"], d["verdict"]) == ("quarantine", "quarantine", "pass"), d


def test_a_ledger_that_ignores_the_items_policy_is_caught(spec: Spec, tmp_path: Any) -> None:
    d = _window(spec, "python:ledgercheck.fixtures.testkit.broken_recovery:IgnoresOwnRetryPolicy", tmp_path)
    assert d["verdict"] == "fail" and d["decision_observed"] == "retry", d
    assert "recovery.attempts_exhausted" in d["clauses"], d
