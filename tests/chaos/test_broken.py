"""Each deliberately broken ledger or worker is caught, at the right crash point, by the right clause;
the same windows pass against the reference."""

from __future__ import annotations

import json

import pytest
from chaos_support import BROKEN_WORKER
from ledgercheck.chaos.crash.exploration import explore
from ledgercheck.spec import Spec


def _failing(windows: list[dict], clause: str) -> list[dict]:
    return [w for w in windows if w["verdict"] == "fail" and clause in (w["message"] or "")]


CASES = [
    # (adapter, worker, points, takeover windows only, clause, classes that must fail)
    ("python:broken_ledgers:EagerReceipt", None, ["after_intent_before_submit"], False, "recovery.marker_kept",
     {"idempotent_with_key", "checkpointed", "non_idempotent_with_lookup", "non_idempotent_without_lookup", "pure"}),
    ("python:broken_ledgers:DropMarker", None, ["after_submit_before_record"], False, "recovery.marker_kept",
     {"idempotent_with_key", "checkpointed", "non_idempotent_with_lookup", "non_idempotent_without_lookup", "pure"}),
    ("reference", BROKEN_WORKER, ["after_submit_before_record"], False, "recovery.effects_allowed",
     {"non_idempotent_with_lookup", "non_idempotent_without_lookup"}),
    ("python:broken_ledgers:NoFencing", None, ["after_submit_before_record", "during_renew"], True,
     "recovery.fencing_after_takeover", {"idempotent_with_key", "checkpointed", "non_idempotent_with_lookup", "pure"}),
    ("python:broken_ledgers:WaitingIsStale", None, ["after_waiting_set"], False, "recovery.waiting_untouched",
     {"idempotent_with_key", "checkpointed", "non_idempotent_with_lookup", "non_idempotent_without_lookup", "pure"}),
]
IDS = ["eager-receipt", "drop-marker", "blind-retry-worker", "no-fencing", "waiting-is-stale"]


@pytest.mark.parametrize("adapter, worker, points, takeover, clause, classes", CASES, ids=IDS)
def test_broken_variant_is_caught(spec: Spec, scratch: str | None, tmp_path, adapter: str, worker: str | None,
                                  points: list[str], takeover: bool, clause: str, classes: set[str]) -> None:
    ws = explore(adapter, spec, points=points, fencing=takeover, worker=worker, jobs=2, tmp_root=scratch,
                 replay_dir=str(tmp_path))
    if takeover:
        ws = [w for w in ws if "recovery.fencing_after_takeover" in w["clauses"]]
    bad = _failing(ws, clause)
    assert {w["step_class"] for w in bad} >= classes
    for w in bad:
        assert w["point"] in points
        assert f"at {w['point']}" in w["message"]
        assert clause in w["clauses"]
        doc = json.loads(open(w["replay_file"], encoding="utf-8").read())
        assert (doc["point"], doc["occurrence"], doc["adapter"]) == (w["point"], w["occurrence"], adapter)
        # the file alone may not choose a python: adapter or a worker variant: the command names them
        named = (f" --adapter {adapter}" if adapter.startswith("python:") else "") + (f" --worker {worker}" if worker else "")
        assert w["replay"] == f"ledgercheck crash replay {w['replay_file']}{named}"
    assert not [w for w in ws if w["verdict"] == "error"]


def test_blind_worker_is_only_wrong_where_retrying_is_unsafe(spec: Spec, scratch: str | None, tmp_path) -> None:
    ws = explore("reference", spec, points=["after_submit_before_record"], fencing=False, worker=BROKEN_WORKER, jobs=2,
                 tmp_root=scratch, replay_dir=str(tmp_path))
    by_class: dict[str, set[str]] = {}
    for w in ws:
        by_class.setdefault(w["step_class"], set()).add(w["verdict"])
    assert by_class["idempotent_with_key"] == by_class["checkpointed"] == by_class["pure"] == {"pass"}
    unsafe = [w for w in ws if w["step_class"] == "non_idempotent_without_lookup"]
    assert all("recovery.quarantine.visible" in w["message"] for w in unsafe)


def test_the_same_windows_pass_on_the_reference(spec: Spec, scratch: str | None) -> None:
    ws = explore("reference", spec, points=["after_intent_before_submit", "after_waiting_set"], fencing=True,
                 jobs=2, tmp_root=scratch)
    assert ws and all(w["verdict"] == "pass" for w in ws), [w["message"] for w in ws if w["verdict"] != "pass"]


def test_a_torn_record_is_caught(spec: Spec, scratch: str | None, tmp_path) -> None:
    """A receipt completed in one transaction and given its result in a second: a kill between
    them leaves a completed receipt without the outcome (recovery.marker_kept)."""
    adapter = "python:ledgercheck.fixtures.testkit.broken_recovery:TornRecord"
    ws = explore(adapter, spec, points=["ledger.after_event_insert"], fencing=False, jobs=2, tmp_root=scratch,
                 replay_dir=str(tmp_path), scan_kills=False)
    bad = _failing(ws, "recovery.marker_kept")
    assert bad, "no window caught the torn record"
    assert all("completed without the result" in w["message"] for w in bad)
    assert {w["verdict"] for w in ws} <= {"pass", "fail"}


def test_a_scan_killed_between_its_two_transactions_is_caught(spec: Spec, scratch: str | None, tmp_path) -> None:
    """The recovery scan releases leases in one transaction and requeues in another: killed in
    between, it leaves timed-out work no later scan sees.  Only a kill inside the scan shows it."""
    adapter = "python:ledgercheck.fixtures.testkit.broken_recovery:TwoPhaseRecover"
    ws = explore(adapter, spec, points=["ledger.after_commit"], fencing=False, jobs=2, tmp_root=scratch,
                 replay_dir=str(tmp_path), max_occurrence=1)
    scan = [w for w in ws if w["mode"] == "scan-kill"]
    assert {w["decision_expected"] for w in scan} == {"retry", "resume", "reconcile", "quarantine"}
    bad = _failing(scan, "recovery.scan")
    assert bad and all(w["decision_expected"] != "quarantine" for w in bad)
    for w in bad:
        assert w["scan_kill"][0] == "ledger.after_commit"
        doc = json.loads(open(w["replay_file"], encoding="utf-8").read())
        assert (doc["point"], doc["occurrence"], doc["scan_kill"]) == (w["point"], w["occurrence"], w["scan_kill"])
    assert all(w["verdict"] == "pass" for w in ws if w["mode"] == "kill")
    # the same windows pass on the reference, whose scan is one transaction
    ref = explore("reference", spec, points=["ledger.after_commit"], fencing=False, jobs=2, tmp_root=scratch,
                  replay_dir=str(tmp_path), max_occurrence=1)
    assert len([w for w in ref if w["mode"] == "scan-kill"]) == len(scan)
    assert all(w["verdict"] == "pass" for w in ref), [w["message"] for w in ref if w["verdict"] != "pass"]


def test_a_scan_kill_replays(spec: Spec, scratch: str | None, tmp_path) -> None:
    from ledgercheck.chaos.crash.rerun import replay

    adapter = "python:ledgercheck.fixtures.testkit.broken_recovery:TwoPhaseRecover"
    ws = explore(adapter, spec, points=["ledger.after_commit"], fencing=False, jobs=1, tmp_root=scratch,
                 replay_dir=str(tmp_path), max_occurrence=1)
    w = next(w for w in ws if w["mode"] == "scan-kill" and w["verdict"] == "fail")
    again = replay(w["replay_file"], address=adapter, tmp_root=scratch)
    assert (again["mode"], again["scan_kill"], again["verdict"]) == ("scan-kill", w["scan_kill"], "fail")
    assert again["message"] == w["message"]
    assert again["reproduced"] is True
    # the same file against the reference: the window passes, which is not what the file records
    assert replay(w["replay_file"], address="reference", tmp_root=scratch)["reproduced"] is False
