"""Coverage is part of every verdict (docs/results.md, "Coverage"): a run that records what it
exercised certifies a profile only when every transition of its own through offered operations
was reached and every clause of it ran a case; otherwise it is INCONCLUSIVE (exit 2), never a pass.

Each document here is built from the facts of a run that certifies with full coverage, minus one
thing it did not reach; the same facts with that thing reached certify, so every check fails if
the verdict ignored the gap (or invented one)."""

from __future__ import annotations

import copy
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from ledgercheck.reports import verdicts
from ledgercheck.reports.html_report import render_html
from ledgercheck.reports.junit_report import render_junit
from ledgercheck.reports.markdown_report import render_markdown
from ledgercheck.reports.results import ResultsError, merge_results, validate_results
from ledgercheck.reports.terminal import summary_json, summary_text
from ledgercheck.spec import rules

CANCEL_FROM_RETRY = ("retry_scheduled", "cancel", "cancelled")


def _state(doc: dict[str, Any], move: tuple[str, str, str]) -> str:
    return next(r["state"] for r in doc["coverage"]["transitions"] if (r["from"], r["operation"], r["to"]) == move)


def test_every_transition_reached_certifies(factory, spec) -> None:
    doc = factory.covered()
    assert (doc["verdict"], doc["exit_code"]) == ("CERTIFIED", 0)
    cov = doc["coverage"]
    assert [(r["from"], r["operation"], r["to"]) for r in cov["transitions"]] == list(rules.moves(spec))
    assert {r["state"] for r in cov["transitions"]} == {"reached"}
    assert cov["profiles"]["core"] == {"transitions": 12, "reached": 12, "not_offered": 0, "missing": [], "clauses": 23,
                                       "clauses_run": 23, "not_run": []}
    # the plan comes from the contract: each operation's profile, what makes a guard hold
    assert cov["plan"]["operations"]["recover"] == "recovery" and cov["plan"]["guards"] == {"cancel_requested": ["cancel"]}
    assert cov["clause_cases"]["lease.fencing"] >= 1
    assert [p["point"] for p in cov["crash_points"]] == list(spec.crash_points)
    assert {"status": "done", "operation": "claim", "accepted": 0, "refused": 1} in cov["states_operations"]


def test_a_transition_never_reached_is_inconclusive(factory) -> None:
    doc = factory.covered(skip=[CANCEL_FROM_RETRY])
    assert (doc["verdict"], doc["exit_code"], doc["certified_profiles"]) == ("INCONCLUSIVE", 2, [])
    assert _state(doc, CANCEL_FROM_RETRY) == "missing"
    v = doc["profiles"]["verdicts"]
    assert v["cancel"]["verdict"] == "inconclusive" and v["retry"]["verdict"] == "certified"  # the move is cancel's
    assert doc["coverage"]["profiles"]["cancel"]["missing"] == ["retry_scheduled -cancel-> cancelled"]
    assert doc["verdict_line"] == "INCONCLUSIVE: 1 of 25 transitions never reached (retry_scheduled -cancel-> cancelled)"
    gap = [f for f in doc["findings"] if f["severity"] == "not_reached"]
    assert [(f["what"], f["words"]) for f in gap] == [("cancel", "cancel: 1 of 4 transitions never reached")]


def test_a_transition_answered_unsupported_is_not_offered_not_missing(factory) -> None:
    doc = factory.covered(skip=[CANCEL_FROM_RETRY], unoffered=[CANCEL_FROM_RETRY])
    assert _state(doc, CANCEL_FROM_RETRY) == "not_offered"
    assert doc["coverage"]["profiles"]["cancel"]["not_offered"] == 1 and doc["verdict"] == "CERTIFIED"


def test_a_status_reached_only_through_moves_not_offered_makes_its_moves_not_offered(factory) -> None:
    # retry_scheduled is reached only by fail; with fail not offered, nothing leaves it either
    into = ("running", "fail", "retry_scheduled")
    out_of = [("retry_scheduled", "promote_due", "queued"), CANCEL_FROM_RETRY]
    doc = factory.covered(skip=[into, *out_of], unoffered=[into])
    assert [_state(doc, m) for m in (into, *out_of)] == ["not_offered"] * 3
    assert doc["verdict"] == "CERTIFIED"
    # reached after all by another test: then a move out of it that no test made is missing again
    doc = factory.covered(skip=[out_of[1]], unoffered=[into])
    assert _state(doc, into) == "reached" and _state(doc, out_of[1]) == "missing" and doc["verdict"] == "INCONCLUSIVE"


def test_moves_of_profiles_not_claimed_are_out_of_scope(factory) -> None:
    claims = ["core", "lease"]
    tests = [t for t in factory.tests(claimed=claims, known_bugs=(), failing=(),
                                      exercised=factory.exercised(claimed=claims))]
    doc = factory.build(tests=tests, windows=factory.windows(bad=()), record_coverage=True, requested=claims,
                        adapter=factory.adapter(profiles=claims, known_bugs={}))
    assert doc["verdict"] == "CERTIFIED", doc["verdict_line"]
    states = {(r["from"], r["operation"], r["to"]): r["state"] for r in doc["coverage"]["transitions"]}
    # cancel's moves, and core's close-out as cancelled (its guard needs cancel), are not in scope
    assert states[("queued", "cancel", "cancelled")] == "out_of_scope"
    assert states[("running", "close_out", "cancelled")] == "out_of_scope"
    assert states[("running", "close_out", "done")] == "reached"
    assert set(doc["coverage"]["profiles"]) == {"core", "lease"}


def test_a_clause_no_case_ran_for_is_not_run_and_inconclusive(factory) -> None:
    doc = factory.covered(drop=["waiting.deadline"])
    c = next(c for c in doc["clauses"] if c["id"] == "waiting.deadline")
    assert (c["outcome"], c["tests"]) == ("not_run", 0)
    assert doc["profiles"]["verdicts"]["waiting"] == {**doc["profiles"]["verdicts"]["waiting"],
                                                      "verdict": "inconclusive", "not_run": 1}
    assert doc["verdict"] == "INCONCLUSIVE" and doc["exit_code"] == 2
    assert doc["verdict_line"] == "INCONCLUSIVE: no case run for 1 of 81 clauses (waiting.deadline)"
    # a run that does not record coverage cannot tell a deselected clause from one nothing checks
    plain = factory.build(tests=[t for t in factory.tests(known_bugs=(), failing=()) if t["clause"] != "waiting.deadline"],
                          windows=factory.windows(bad=()), adapter=factory.adapter(known_bugs={}))
    assert plain["verdict"] == "ERROR"


def test_a_failure_comes_first_and_the_line_says_what_was_not_reached(factory) -> None:
    doc = factory.covered(skip=[CANCEL_FROM_RETRY], failing=["lease.fencing"])
    assert (doc["verdict"], doc["exit_code"]) == ("NOT CERTIFIED", 1)
    assert doc["verdict_line"] == ("NOT CERTIFIED: accepts a stale holder's writes (lease.fencing); "
                                   "1 of 25 transitions never reached (retry_scheduled -cancel-> cancelled)")
    assert [f["severity"] for f in doc["findings"]] == ["violation", "not_reached"]


def test_an_error_and_an_incomplete_run_come_before_inconclusive(factory) -> None:
    err = factory.covered(skip=[CANCEL_FROM_RETRY], run=factory.run(error="the adapter never started"))
    assert err["verdict"] == "ERROR"
    inc = {"reason": "interrupted", "message": "interrupted by SIGINT", "signal": "SIGINT",
           "tests": {"planned": 9, "finished": 8, "unfinished": ["x"]},
           "crash_windows": {"points_planned": 0, "points_finished": 0, "finished": 0, "planned": 0}}
    assert factory.covered(skip=[CANCEL_FROM_RETRY], run=factory.run(incomplete=inc))["verdict"] == "INCOMPLETE"


def _with_safety(doc: dict[str, Any], **campaign: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    out["safety"] = [{"adapter": "acme", "seed": 1, "anomalies": [], "anomaly_count": 0, "history": None,
                      "summary": {}, **campaign}]
    return verdicts.apply(out)


def test_an_inconclusive_safety_campaign_makes_the_run_inconclusive(factory) -> None:
    missing = ["no live holder was displaced (by time, operator or reopen)", "no claim ever completed ok"]
    doc = _with_safety(factory.covered(), verdict="inconclusive", missing=missing,
                       coverage={"claim_ok": 0, "holder_displaced": 0, "kill": 2, "final_read": 1})
    assert (doc["verdict"], doc["exit_code"]) == ("INCONCLUSIVE", 2)
    assert doc["verdict_line"] == ("INCONCLUSIVE: the safety campaign: no live holder was displaced (by time, operator "
                                   "or reopen); no claim ever completed ok")
    gap = doc["findings"][-1]
    assert (gap["severity"], gap["what"], gap["count"]) == ("not_reached", "safety", 2)
    # the same campaign, covered: no anomaly is a pass
    assert _with_safety(factory.covered(), verdict="pass", missing=[], coverage={"claim_ok": 9})["verdict"] == "CERTIFIED"
    # and a failure stays the verdict, the line still saying what the campaign missed
    failing = _with_safety(factory.covered(failing=["lease.fencing"]), verdict="inconclusive", missing=missing[:1])
    assert failing["verdict"] == "NOT CERTIFIED" and failing["verdict_line"].endswith(
        "; the safety campaign: no live holder was displaced (by time, operator or reopen)")
    assert not failing["verdict_line"].startswith("SAFE")


def test_the_recorded_coverage_is_checked(factory) -> None:
    doc = factory.covered(skip=[CANCEL_FROM_RETRY])
    validate_results(doc)
    edited = copy.deepcopy(doc)
    del edited["integrity"]  # (an edit that recomputes the hash: the derived members are still checked)
    edited["coverage"]["profiles"]["cancel"]["missing"] = []
    with pytest.raises(ResultsError, match="coverage.profiles does not follow"):
        validate_results(edited)
    # a test that says it reached the move makes the derived members disagree with the recorded ones
    edited = copy.deepcopy(doc)
    del edited["integrity"]
    edited["tests"][-1]["exercised"]["transitions"].append(" ".join(CANCEL_FROM_RETRY))
    with pytest.raises(ResultsError, match="does not follow"):
        validate_results(edited)
    edited = copy.deepcopy(doc)
    del edited["integrity"]
    edited["tests"][-1]["exercised"]["transitions"].append("retry_scheduled cancel")
    with pytest.raises(ResultsError, match="exercised"):
        validate_results(edited)


def test_shards_merge_their_coverage(factory) -> None:
    whole = factory.covered()
    tests = whole["tests"]
    stateful = next(t for t in tests if t["kind"] == "stateful")
    moves = stateful["exercised"]["transitions"]
    a, b = copy.deepcopy(stateful), copy.deepcopy(stateful)
    a["nodeid"], b["nodeid"] = "ledger::stateful[part-a]", "ledger::stateful[part-b]"
    a["exercised"]["transitions"], b["exercised"]["transitions"] = moves[:10], moves[10:]
    clause_tests = [t for t in tests if t["kind"] != "stateful"]
    half = len(clause_tests) // 2

    def part(ts: list[dict[str, Any]], index: int) -> dict[str, Any]:
        return factory.build(tests=ts, windows=factory.windows(bad=()) if index == 1 else [],
                             adapter=factory.adapter(known_bugs={}), record_coverage=True,
                             run=factory.run(id=f"run-{index}", shard={"index": index, "count": 2}))
    one, two = part([*clause_tests[:half], a], 1), part([*clause_tests[half:], b], 2)
    assert one["verdict"] == two["verdict"] == "INCONCLUSIVE"  # each shard alone did not reach everything
    merged = merge_results([one, two])
    assert merged["verdict"] == "CERTIFIED" and merged["coverage"]["profiles"] == whole["coverage"]["profiles"]
    # a part that recorded no coverage adds its tests and nothing else
    bare = factory.build(tests=[], windows=[], adapter=factory.adapter(known_bugs={}), run=factory.run(id="run-3"))
    assert merge_results([whole, bare])["coverage"]["profiles"] == whole["coverage"]["profiles"]


def test_every_rendering_says_what_was_not_reached(factory) -> None:
    doc = factory.covered(skip=[CANCEL_FROM_RETRY], drop=["waiting.deadline"])
    line = doc["verdict_line"]
    assert line == ("INCONCLUSIVE: 1 of 25 transitions never reached (retry_scheduled -cancel-> cancelled); "
                    "no case run for 1 of 81 clauses (waiting.deadline)")
    text = summary_text(doc, "results.json", "0" * 64)
    assert text.splitlines()[0] == line and "not reached (2):" in text
    assert "coverage: transitions 24 of 25 reached; clauses 80 of 81 with a case run" in text
    summary = summary_json(doc, "results.json", "0" * 64)
    assert summary["coverage"]["missing"] == ["retry_scheduled -cancel-> cancelled"]
    md = render_markdown(doc)
    assert md.splitlines()[0].startswith("### ❔ ledgercheck: INCONCLUSIVE")
    assert "| cancel | ❔ inconclusive |" in md and "**Not reached** (2;" in md
    assert "- cancel: 1 of 4 transitions never reached: `retry_scheduled -cancel-> cancelled`" in md
    assert "- waiting: no case run for 1 of 7 clauses: `waiting.deadline`" in md
    html = render_html(doc)
    assert 'class="banner v-inconclusive"' in html and 'id="coverage"' in html and 'href="#coverage"' in html
    assert '<tr data-profile="cancel" data-gaps="1">' in html and '<tr data-profile="core" data-gaps="0">' in html
    assert 'data-move="retry_scheduled -cancel-&gt; cancelled" data-state="missing"' in html
    root = ET.fromstring(render_junit(doc))
    props = {p.get("name"): p.get("value") for p in root.find("testsuite").iter("property")}
    assert props["run.verdict"] == "INCONCLUSIVE" and props["verdict"] == line
    cov = next(s for s in root.findall("testsuite") if s.get("name") == "coverage")
    errors = cov.findall("testcase/error")
    assert [e.get("type") for e in errors] == ["not_reached", "not_reached"] and cov.get("errors") == "2"
    cancel = next(s for s in root.findall("testsuite") if s.get("name") == "cancel")
    cancel_props = {p.get("name"): p.get("value") for p in cancel.iter("property")}
    assert cancel_props["profile.not_reached"] == "retry_scheduled -cancel-> cancelled"


def test_a_certified_run_shows_full_coverage_and_no_coverage_suite(factory) -> None:
    doc = factory.covered()
    assert "coverage: transitions 25 of 25 reached; clauses 81 of 81 with a case run; crash points 6 of 6 hit" \
        in summary_text(doc, "results.json", "0" * 64)
    root = ET.fromstring(render_junit(doc))
    assert "coverage" not in [s.get("name") for s in root.findall("testsuite")]
    assert int(root.get("errors")) == 0 and int(root.get("failures")) == 0
    html = render_html(doc)
    assert 'data-gaps="1"' not in html and "Transitions: 25 of 25 reached" in html
