"""An operation the implementation does not offer (it answers ``unsupported``) is *not offered*:
never a failure of any clause, but its profile is not certified (docs/results.md, "Not offered").
What the implementation does offer is still judged: a real bug beside the gaps fails its clause,
and ``unsupported`` as the answer to a refusal of an operation the ledger offers is a wrong refusal.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from adapters_unoffered import LacksEventsCancelExpire, PlainQueueWithoutTrail
from clause_runs import clause_test_failures
from hypothesis import Phase
from ledgercheck.conformance.harness import ClauseFailure, NotOffered, find_exception
from ledgercheck.conformance.stateful import hypothesis_settings, make_machine, run_machine
from ledgercheck.reports.junit_report import render_junit
from ledgercheck.reports.results import load_results

LACKS = "python:adapters_unoffered:LacksEventsCancelExpire"
BUGGY = "python:adapters_unoffered:LacksEventsAndReclosesFinishedWork"
PLAIN = "python:adapters_unoffered:PlainQueueWithoutTrail"
CLAIMS_TRAIL = "python:adapters_unoffered:ClaimsTheTrailItLacks"
ITS_CLAIMS = "core,trail,cancel"  # what LACKS and BUGGY claim


def _run(suite, tmp_path: Path, address: str, *extra: str, profiles: str = ITS_CLAIMS) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "results.json"
    proc = suite(tmp_path, "--ledger-adapter", address, "--ledger-profile", profiles, "--ledger-clauses-only",
                 "--ledger-results", str(out), *extra)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return load_results(str(out))


def _clause(doc: dict, cid: str) -> dict:
    return next(c for c in doc["clauses"] if c["id"] == cid)


def test_operations_not_offered_are_never_failures(tmp_path, suite):
    doc = _run(suite, tmp_path, LACKS)
    assert not [t for t in doc["tests"] if t["outcome"] in ("failed", "error")], \
        [(t["nodeid"], t["message"]) for t in doc["tests"] if t["outcome"] in ("failed", "error")]
    assert _clause(doc, "trail.types")["outcome"] == "not_offered"
    assert "events" in _clause(doc, "trail.types")["lacks"]
    assert "cancel" in _clause(doc, "cancel.immediate")["lacks"]
    assert "expire" in _clause(doc, "core.expire.timeout_reason")["lacks"]
    # the refusals it could not judge (cancel of finished work) leave terminal immutability unjudged, not failed
    assert _clause(doc, "core.terminal.immutable")["outcome"] == "not_offered"
    assert _clause(doc, "core.claim.empty")["outcome"] == "pass"  # what needs none of them is judged as usual
    verdicts = doc["profiles"]["verdicts"]
    for p in ("core", "trail", "cancel"):
        assert verdicts[p]["verdict"] == "not_offered" and verdicts[p]["failed"] == 0, (p, verdicts[p])
    assert verdicts["core"]["lacks"] == ["cancel", "expire"]  # the cancel of finished work, the monitor
    assert "events" in verdicts["trail"]["lacks"] and "cancel" in verdicts["cancel"]["lacks"]
    assert doc["verdict"] == "NOT CERTIFIED" and doc["exit_code"] == 1
    assert doc["verdict_line"].startswith("NOT CERTIFIED: lacks: ") and "event trail" in doc["verdict_line"]
    assert "violation" not in doc["verdict_line"]
    assert [f["severity"] for f in doc["findings"]] == ["not_offered"] * len(doc["findings"])
    # JUnit: skipped with the operation named, never a failure
    root = ET.fromstring(render_junit(doc))
    cases = [c for c in root.iter("testcase") if c.get("name") == "trail.types"]
    assert cases and all(c.find("failure") is None and c.find("error") is None for c in cases)
    unoffered = [c for c in cases if c.find("skipped") is not None and c.find("skipped").get("type") == "not_offered"]
    assert len(unoffered) == sum(1 for t in doc["tests"] if t["clause"] == "trail.types" and t["outcome"] == "not_offered")
    assert any("events" in c.find("skipped").get("message") for c in unoffered)
    for c in unoffered:
        assert {p.get("name"): p.get("value") for p in c.iter("property")}["ledger_outcome"] == "not_offered"
    assert root.get("failures") == "0" and root.get("errors") == "0"


def test_a_real_bug_beside_the_gaps_still_fails_its_clause(tmp_path, suite):
    doc = _run(suite, tmp_path, BUGGY)
    immutable = _clause(doc, "core.terminal.immutable")
    assert immutable["outcome"] == "fail", immutable
    assert "unsupported" not in (immutable["message"] or "")
    assert _clause(doc, "trail.types")["outcome"] == "not_offered"
    assert doc["profiles"]["verdicts"]["core"]["verdict"] == "failed"
    assert doc["profiles"]["verdicts"]["trail"]["verdict"] == "not_offered"
    # accepting a close-out of finished work breaks these, and nothing else fails
    failed = {c["id"] for c in doc["clauses"] if c["outcome"] == "fail"}
    assert failed <= {"core.terminal.immutable", "core.status.terminal", "core.transition.forbidden",
                      "core.transition.corruption"}, failed
    # worst first in the contract's words: the first three named, the rest counted; a clause whose
    # tests all stopped at another failing clause's violation is counted as not judged instead
    judged = [f["what"] for f in doc["findings"] if f["severity"] == "violation"]
    blocked = [c for f in doc["findings"] if f["what"] == "blocked" for c in f["clauses"]]
    assert sorted(judged + blocked) == sorted(failed)
    named = [c for c in judged if f"({c})" in doc["verdict_line"]]
    assert doc["verdict_line"].startswith("NOT CERTIFIED: ") and len(named) == min(3, len(judged))
    if len(judged) > 3:
        assert f"; {len(judged) - 3} more contract violation" in doc["verdict_line"]
    if blocked:
        assert f"{len(blocked)} clause{'s' if len(blocked) > 1 else ''} not judged" in doc["verdict_line"]
    lacks = doc["verdict_line"].split("; lacks: ")[1].split("; ")[0]
    assert set(lacks.split(", ")) == {"cancel", "event trail", "expire"}, doc["verdict_line"]
    sev = [f["severity"] for f in doc["findings"]]
    assert sev == sorted(sev, key=["unsafe", "violation", "not_offered", "not_reached", "warning"].index) and sev[0] == "violation"
    for c in doc["clauses"]:  # no failure stands on an unsupported answer
        if c["outcome"] == "fail":
            assert "unsupported" not in (c["message"] or ""), c


@pytest.mark.thorough  # a whole certification: the long tier
def test_a_plain_queue_without_an_event_trail_certifies_core(tmp_path, suite, spec, harness_for):
    """No trail and no cancellation, claimed honestly as core alone: core is certified, and no
    check asked for the operations it lacks (operations of an unclaimed profile are never demanded)."""
    doc = _run(suite, tmp_path, PLAIN, profiles="core")
    assert doc["verdict"] == "CERTIFIED" and doc["verdict_line"] == "CERTIFIED for profiles core", doc["verdict_line"]
    assert doc["profiles"]["claimed"] == ["core"] and doc["findings"] == []
    assert {c["outcome"] for c in doc["clauses"] if c["profile"] == "core"} == {"pass"}
    assert not [t for t in doc["tests"] if t["outcome"] == "not_offered"]
    # the same clause tests in process: the queue is never asked for events or cancel
    PlainQueueWithoutTrail.ASKED.clear()
    h = harness_for(PLAIN)
    assert clause_test_failures(h, spec, lambda case: spec.clause(case.clause).profile == "core") == {}
    # and the stateful exploration of the lifecycle, on the profiles it claims
    opts = hypothesis_settings("ci", max_examples=15, stateful_step_count=30, phases=(Phase.explicit, Phase.generate))
    run_machine(make_machine(h, only="lifecycle"), opts, 1)
    assert PlainQueueWithoutTrail.ASKED == {} and "events" not in h.not_offered


def test_without_cancel_a_close_out_as_cancelled_is_a_forbidden_move(spec, harness_for):
    """Core judges the guard of the cancelled close-out on a ledger that has no cancel profile:
    accepting it fails core.transition.forbidden, and that clause alone."""
    h = harness_for("python:adapters_unoffered:ClosesOutCancelledUnasked")
    assert h.profiles == {"core"}
    failed = clause_test_failures(h, spec, lambda case: spec.clause(case.clause).profile == "core")
    assert set(failed) == {"core.transition.forbidden"} and set(failed["core.transition.forbidden"]) == {"core.transition.forbidden"}, failed


@pytest.mark.thorough  # a whole certification: the long tier
def test_claiming_the_trail_it_lacks_is_not_offered_and_core_still_certified(tmp_path, suite):
    doc = _run(suite, tmp_path, CLAIMS_TRAIL, profiles="core,trail")
    verdicts = doc["profiles"]["verdicts"]
    assert verdicts["core"]["verdict"] == "certified", verdicts["core"]
    assert verdicts["trail"]["verdict"] == "not_offered" and verdicts["trail"]["lacks"] == ["events"]
    assert verdicts["trail"]["failed"] == 0 and {c["outcome"] for c in doc["clauses"] if c["profile"] == "trail"} == {"not_offered"}
    assert doc["verdict"] == "NOT CERTIFIED" and doc["verdict_line"] == "NOT CERTIFIED: lacks: event trail", doc["verdict_line"]


@pytest.mark.thorough  # a whole certification: the long tier
def test_the_reference_is_still_certified_by_the_same_run(tmp_path, suite):
    doc = _run(suite, tmp_path, "reference", profiles="core")
    assert doc["verdict"] == "CERTIFIED", doc["verdict_line"]
    assert doc["verdict_line"] == "CERTIFIED for profiles core" and doc["findings"] == []


def test_unsupported_for_a_refusal_of_an_offered_variant_is_a_wrong_refusal(spec, harness_for):
    """close_out as done was answered on this ledger: close_out as done of finished work answered
    unsupported is a refusal with the wrong code, not a missing operation."""
    h = harness_for("python:adapters_unoffered:CallsRefusalsUnsupported")
    failed = clause_test_failures(h, spec, lambda case: case.clause == "core.terminal.immutable")
    assert failed.get("core.terminal.immutable"), failed
    wid = h.create()
    h.drive(wid, "done")
    with pytest.raises(ClauseFailure) as err:
        h.do("close_out", work_id=wid, token=h.token(wid) or "t", status="done")
    assert "answered it earlier on this ledger" in str(err.value)


def test_a_variant_not_offered_is_named_and_others_are_judged(spec, harness_for):
    h = harness_for("python:adapters_unoffered:LacksTimeoutCloseOut")
    wid = h.create()
    tok = h.claim(wid)
    with pytest.raises(NotOffered) as err:
        h.do("close_out", work_id=wid, token=tok, status="timeout")
    assert err.value.what == "close_out as timeout"
    assert h.item(wid)["status"] == "running"  # the model kept the item where the implementation left it
    h.do("close_out", work_id=wid, token=tok, status="done")
    assert h.item(wid)["status"] == "done"
    failed = clause_test_failures(h, spec, lambda case: spec.clause(case.clause).profile == "core")
    assert not failed, failed


def test_the_stateful_machine_notes_what_is_not_offered_and_does_not_ask_again(spec, harness_for):
    LacksEventsCancelExpire.COUNTS.clear()
    h = harness_for(LACKS)
    h.note_unoffered = True
    machine = make_machine(h, only="lifecycle")
    opts = hypothesis_settings("ci", max_examples=15, stateful_step_count=30,
                               phases=(Phase.explicit, Phase.generate))
    try:
        run_machine(machine, opts, 1)
    except BaseException as exc:  # noqa: BLE001 - report what hypothesis wrapped
        found = find_exception(exc, ClauseFailure)
        pytest.fail(f"the machine failed an implementation that only lacks operations: {found or exc!r}")
    assert {"events", "cancel", "expire"} <= set(h.not_offered), h.not_offered
    # once answered unsupported, an operation is not asked for again in the run
    assert LacksEventsCancelExpire.COUNTS.get("cancel") == 1 and LacksEventsCancelExpire.COUNTS.get("expire") == 1
