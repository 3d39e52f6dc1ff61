"""An operation the implementation does not offer (it answers ``unsupported``) is *not offered*:
never a failure of any clause, but its profile is not certified (docs/results.md, "Not offered").
What the implementation does offer is still judged: a real bug beside the gaps fails its clause,
and ``unsupported`` as the answer to a refusal of an operation the ledger offers is a wrong refusal.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from adapters_unoffered import LacksEventsCancelExpire
from clause_runs import clause_test_failures
from hypothesis import Phase
from ledgercheck.conformance.harness import ClauseFailure, NotOffered, find_exception
from ledgercheck.conformance.stateful import hypothesis_settings, make_machine, run_machine
from ledgercheck.reports.junit_report import render_junit
from ledgercheck.reports.results import load_results

LACKS = "python:adapters_unoffered:LacksEventsCancelExpire"
BUGGY = "python:adapters_unoffered:LacksEventsAndReclosesFinishedWork"


def _run(suite, tmp_path: Path, address: str, *extra: str) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "results.json"
    proc = suite(tmp_path, "--ledger-adapter", address, "--ledger-profile", "core", "--ledger-clauses-only",
                 "--ledger-results", str(out), *extra)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return load_results(str(out))


def _clause(doc: dict, cid: str) -> dict:
    return next(c for c in doc["clauses"] if c["id"] == cid)


def test_operations_not_offered_are_never_failures(tmp_path, suite):
    doc = _run(suite, tmp_path, LACKS)
    assert not [t for t in doc["tests"] if t["outcome"] in ("failed", "error")], \
        [(t["nodeid"], t["message"]) for t in doc["tests"] if t["outcome"] in ("failed", "error")]
    assert _clause(doc, "core.event.types")["outcome"] == "not_offered"
    assert "events" in _clause(doc, "core.event.types")["lacks"]
    assert "cancel" in _clause(doc, "core.cancel.immediate")["lacks"]
    assert "expire" in _clause(doc, "core.expire.timeout_reason")["lacks"]
    # the refusals it could not judge (cancel of finished work) leave terminal immutability unjudged, not failed
    assert _clause(doc, "core.terminal.immutable")["outcome"] == "not_offered"
    assert _clause(doc, "core.claim.empty")["outcome"] == "pass"  # what needs none of them is judged as usual
    # events on an unknown id, with no event trail: the refusal is judged as far as it can be, and
    # the test ends not offered (Harness.do never hands a clause test an unsupported answer)
    (nf,) = [t for t in doc["tests"] if t["nodeid"].endswith("core.not_found[events]")]
    assert nf["outcome"] == "not_offered" and nf["not_offered"] == ["events"], nf
    core = doc["profiles"]["verdicts"]["core"]
    assert core["verdict"] == "not_offered" and core["failed"] == 0
    assert {"events", "cancel", "expire"} <= set(core["lacks"])
    assert doc["verdict"] == "NOT CERTIFIED" and doc["exit_code"] == 1
    assert doc["verdict_line"].startswith("NOT CERTIFIED: lacks: ") and "event trail" in doc["verdict_line"]
    assert "violation" not in doc["verdict_line"]
    assert [f["severity"] for f in doc["findings"]] == ["not_offered"] * len(doc["findings"])
    # JUnit: skipped with the operation named, never a failure
    root = ET.fromstring(render_junit(doc))
    cases = [c for c in root.iter("testcase") if c.get("name") == "core.event.types"]
    assert cases and all(c.find("failure") is None and c.find("error") is None for c in cases)
    unoffered = [c for c in cases if c.find("skipped") is not None and c.find("skipped").get("type") == "not_offered"]
    assert len(unoffered) == sum(1 for t in doc["tests"] if t["clause"] == "core.event.types" and t["outcome"] == "not_offered")
    assert any("events" in c.find("skipped").get("message") for c in unoffered)
    for c in unoffered:
        assert {p.get("name"): p.get("value") for p in c.iter("property")}["ledger_outcome"] == "not_offered"
    assert root.get("failures") == "0" and root.get("errors") == "0"


def test_a_real_bug_beside_the_gaps_still_fails_its_clause(tmp_path, suite):
    doc = _run(suite, tmp_path, BUGGY)
    immutable = _clause(doc, "core.terminal.immutable")
    assert immutable["outcome"] == "fail", immutable
    assert "unsupported" not in (immutable["message"] or "")
    assert _clause(doc, "core.event.types")["outcome"] == "not_offered"
    assert doc["profiles"]["verdicts"]["core"]["verdict"] == "failed"
    # accepting a close-out of finished work breaks these, and nothing else fails
    failed = {c["id"] for c in doc["clauses"] if c["outcome"] == "fail"}
    assert failed <= {"core.terminal.immutable", "core.status.terminal", "core.transition.forbidden",
                      "core.transition.corruption"}, failed
    assert doc["verdict_line"].startswith(f"NOT CERTIFIED: {len(failed)} contract violations (")
    assert doc["verdict_line"].endswith("; lacks: cancel, event trail, expire")
    sev = [f["severity"] for f in doc["findings"]]
    assert sev == sorted(sev, key=["unsafe", "violation", "not_offered", "warning"].index) and sev[0] == "violation"
    for c in doc["clauses"]:  # no failure stands on an unsupported answer
        if c["outcome"] == "fail":
            assert "unsupported" not in (c["message"] or ""), c


def test_the_reference_is_still_certified_by_the_same_run(tmp_path, suite):
    doc = _run(suite, tmp_path, "reference")
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
