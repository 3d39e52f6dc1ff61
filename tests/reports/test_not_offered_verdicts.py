"""Not offered is not failed, and one verdict line tells implementations apart by severity:
UNSAFE (safety anomalies) / NOT CERTIFIED (contract violations; lacks ...) / SAFE; lacks ... /
CERTIFIED, with INCOMPLETE first of all (docs/results.md, "The verdict line")."""

from __future__ import annotations

import copy
import shlex
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from ledgercheck.reports.history import compare, judged
from ledgercheck.reports.html_report import render_html
from ledgercheck.reports.junit_report import render_junit
from ledgercheck.reports.markdown_report import render_markdown
from ledgercheck.reports.results import ResultsError, build_results, merge_results, validate_results
from ledgercheck.reports.summary import verdict_line
from ledgercheck.reports.terminal import summary_text

CLAIMS = ["core", "trail", "cancel", "lease"]
NOT_OFFERED = {"trail.types": ["events"], "cancel.immediate": ["cancel"],
               "trail.one_per_transition": ["events"]}


def _tests(factory, *, failing: tuple[str, ...] = (), not_offered: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
    """Passing tests for the claimed profiles, then: the last test of each ``failing`` clause fails,
    every test of a ``not_offered`` clause is not offered (naming its operations)."""
    tests = factory.tests(claimed=CLAIMS, known_bugs=(), failing=failing)
    for t in tests:
        ops = (not_offered or {}).get(t["clause"])
        if ops and t["outcome"] == "passed":
            t.update(outcome="not_offered", not_offered=list(ops), message=f"not offered: {', '.join(ops)}")
    return tests


def _campaign(anomalies: dict[str, int]) -> dict[str, Any]:
    blame = {"lost_work": "core.running.renew_or_leave", "duplicate_effect": "core.close_out.explicit"}
    listed = [{"class": k, "work_id": f"w-{k}-{i}", "explanation": f"{k} number {i}", "clause": blame[k]}
              for k, n in anomalies.items() for i in range(n)]
    return {"adapter": "exec:./bin/acme-ledger --stdio", "seed": 7, "verdict": "fail" if listed else "pass",
            "anomalies": listed, "anomaly_count": len(listed), "summary": dict(anomalies), "history": "history.jsonl"}


def _build(factory, tests, *, safety=(), run=None, known_bugs=None) -> dict[str, Any]:
    adapter = factory.adapter(profiles=list(CLAIMS), known_bugs=known_bugs or {})
    return build_results(run=run or factory.run(), spec=factory.spec, adapter=adapter, environment=factory.environment(),
                         tests=tests, crash_windows=[], requested_profiles=CLAIMS, safety=list(safety))


def test_certified(factory):
    doc = _build(factory, _tests(factory), safety=[_campaign({})])
    assert doc["verdict"] == "CERTIFIED" and doc["verdict_line"] == "CERTIFIED for profiles core, trail, cancel, lease"
    assert doc["findings"] == []


def test_not_offered_blocks_certification_but_is_no_failure(factory):
    doc = _build(factory, _tests(factory, not_offered=NOT_OFFERED))
    c = {x["id"]: x for x in doc["clauses"]}
    assert c["trail.types"]["outcome"] == "not_offered" and c["trail.types"]["lacks"] == ["events"]
    assert c["trail.types"]["not_offered"] == c["trail.types"]["tests"]
    verdicts = doc["profiles"]["verdicts"]
    assert verdicts["core"]["verdict"] == "certified"  # the trail and cancellation are profiles of their own
    trail, cancel = verdicts["trail"], verdicts["cancel"]
    assert trail == {**trail, "verdict": "not_offered", "failed": 0, "not_offered": 2, "lacks": ["events"]}
    assert cancel == {**cancel, "verdict": "not_offered", "failed": 0, "not_offered": 1, "lacks": ["cancel"]}
    assert doc["profiles"]["verdicts"]["lease"]["verdict"] == "certified"
    assert doc["verdict"] == "NOT CERTIFIED" and doc["exit_code"] == 1
    # no safety campaign ran: it cannot say SAFE
    assert doc["verdict_line"] == "NOT CERTIFIED: lacks: event trail, cancel"
    assert [(f["severity"], f["what"], f["count"]) for f in doc["findings"]] == [("not_offered", "events", 2),
                                                                               ("not_offered", "cancel", 1)]


def test_safe_but_lacking(factory):
    doc = _build(factory, _tests(factory, not_offered=NOT_OFFERED), safety=[_campaign({})])
    assert doc["verdict_line"] == "SAFE; lacks: event trail, cancel"
    assert doc["verdict"] == "NOT CERTIFIED"


def test_contract_violations_come_before_what_is_lacking(factory):
    doc = _build(factory, _tests(factory, failing=("core.terminal.immutable", "lease.fencing"), not_offered=NOT_OFFERED),
                 safety=[_campaign({})])
    # worst first: a stale holder's write (ownership) before a change to finished work (integrity)
    assert doc["verdict_line"] == ("NOT CERTIFIED: accepts a stale holder's writes (lease.fencing), changes finished "
                                   "work (core.terminal.immutable); lacks: event trail, cancel")
    assert [f["severity"] for f in doc["findings"]] == ["violation", "violation", "not_offered", "not_offered"]
    assert doc["profiles"]["verdicts"]["core"]["verdict"] == "failed"
    assert doc["profiles"]["verdicts"]["core"]["lacks"] == []  # what is lacking is the trail's and cancel's
    assert doc["profiles"]["verdicts"]["trail"]["lacks"] == ["events"]


def test_unsafe_comes_first(factory):
    doc = _build(factory, _tests(factory, failing=("core.running.renew_or_leave",), not_offered=NOT_OFFERED),
                 safety=[_campaign({"duplicate_effect": 5, "lost_work": 2})])
    assert doc["verdict_line"] == ("UNSAFE: loses work (2), runs work twice (5); leaves work running after its lease "
                                   "lapsed (core.running.renew_or_leave); lacks: event trail, cancel")
    sev = [f["severity"] for f in doc["findings"]]
    assert sev[:2] == ["unsafe", "unsafe"] and sev[2] == "violation"
    assert doc["findings"][0]["clauses"] == ["core.running.renew_or_leave"]


def test_incomplete_stays_first_of_all(factory):
    inc = {"reason": "interrupted", "message": "interrupted by SIGINT", "signal": "SIGINT",
           "tests": {"planned": 90, "finished": 40, "unfinished": ["ledgercheck::core::x"]},
           "crash_windows": {"points_planned": 0, "points_finished": 0, "finished": 0, "planned": 0}}
    doc = _build(factory, _tests(factory, not_offered=NOT_OFFERED), safety=[_campaign({"lost_work": 1})],
                 run=factory.run(incomplete=inc))
    assert doc["verdict"] == "INCOMPLETE" and doc["verdict_line"].startswith("INCOMPLETE: interrupted by SIGINT; ran 40 of 90")


def test_every_renderer_shows_the_same_line_and_the_severity_order(factory):
    doc = _build(factory, _tests(factory, failing=("core.terminal.immutable",), not_offered=NOT_OFFERED),
                 safety=[_campaign({"lost_work": 2})])
    line = doc["verdict_line"]
    assert verdict_line(doc) == line
    text = summary_text(doc, "results.json", "0" * 64)
    assert text.splitlines()[0] == line
    assert text.index("UNSAFE: the safety campaign found") < text.index("(contract violations)") < text.index("not offered (")
    md = render_markdown(doc)
    assert md.index("**Safety anomalies**") < md.index("**Contract violations**") < md.index("**Not offered**")
    assert "❌ failed" in md and "not offered (lacks `events`)" in md
    html = render_html(doc)
    assert html.index('id="unsafe"') < html.index("Failed: contract violations") < html.index("Not offered:")
    root = ET.fromstring(render_junit(doc))
    suites = {x.get("name"): {p.get("name"): p.get("value") for p in x.find("properties")}
              for x in root.iter("testsuite") if x.find("properties") is not None}
    props = suites["core"]
    assert props["verdict"] == line and props["findings.unsafe"] == "lost_work=2"
    assert props["findings.violations"] == "core.terminal.immutable" and props["profile.lacks"] == ""
    assert suites["trail"]["profile.lacks"] == "events" and suites["cancel"]["profile.lacks"] == "cancel"
    skipped = [c for c in root.iter("testcase") if c.find("skipped") is not None
               and c.find("skipped").get("type") == "not_offered"]
    assert len(skipped) == sum(1 for t in doc["tests"] if t["outcome"] == "not_offered")
    assert all(any(p.get("name") == "ledger_outcome" and p.get("value") == "not_offered" for p in c.iter("property"))
               for c in skipped)


def test_shards_with_not_offered_merge_to_the_whole(factory):
    tests = _tests(factory, failing=("lease.fencing",), not_offered=NOT_OFFERED)
    argv = ["pytest", "--ledger-adapter", "exec:./bin/acme-ledger --stdio"]
    whole = _build(factory, tests, run=factory.run(kind="conformance", argv=argv, command=shlex.join(argv)))
    parts = []
    for k in (1, 2):
        a = [*argv, "--ledger-shard", f"{k}/2"]
        parts.append(_build(factory, tests[k - 1::2], run=factory.run(id=f"s{k}", kind="conformance", argv=a,
                                                                      command=shlex.join(a), shard={"index": k, "count": 2})))
    merged = merge_results(parts)
    for key in ("clauses", "profiles", "verdict", "verdict_line", "findings"):
        assert merged[key] == whole[key], key
    assert merged["profiles"]["verdicts"]["trail"]["verdict"] == "not_offered"
    assert merged["profiles"]["verdicts"]["lease"]["verdict"] == "failed"


def test_documents_that_misstate_not_offered_are_refused(factory):
    doc = _build(factory, _tests(factory, not_offered=NOT_OFFERED))
    bad = copy.deepcopy(doc)
    bad.pop("integrity")
    t = next(t for t in bad["tests"] if t["outcome"] == "not_offered")
    t["not_offered"] = []
    with pytest.raises(ResultsError, match="names no operation"):
        validate_results(bad)
    bad = copy.deepcopy(doc)
    bad.pop("integrity")
    bad["verdict_line"] = "CERTIFIED for profiles core, trail, cancel, lease"
    with pytest.raises(ResultsError, match="verdict_line"):
        validate_results(bad)
    bad = copy.deepcopy(doc)
    bad.pop("integrity")
    bad["findings"] = []
    with pytest.raises(ResultsError, match="findings"):
        validate_results(bad)


def test_history_tells_not_offered_apart_from_failed():
    changes = compare({"a": "fail", "b": "pass", "c": "not_offered", "d": "not_offered"},
                      {"a": "not_offered", "b": "not_offered", "c": "pass", "d": "not_offered"})
    assert changes.changed == [("a", "fail", "not_offered")]
    assert changes.regressed == [("b", "pass", "not_offered")] and changes.fixed == [("c", "not_offered", "pass")]
    # a run recorded before the outcome existed stored "fail" for an unsupported operation
    old = "ledgercheck::core::x: close_out: operation not supported by the implementation (no timeout)"
    assert judged("fail", old) == "not_offered"
    assert judged("fail", "x: the implementation offers no event trail (unsupported: none)") == "not_offered"
    assert judged("fail", "claim: should be refused with invalid_transition but succeeded") == "fail"
    wrong = "close_out: refused with 'unsupported' but the contract says invalid_transition (...); the implementation " \
            "offers close_out as done: it answered it earlier on this ledger"
    assert judged("fail", wrong) == "fail"
