"""A run that did not finish is INCOMPLETE (exit 2) whatever its tests say, in every rendering.

The document is built from the facts of a run that would otherwise certify, plus ``run.incomplete``
(docs/results.md); without that record the same facts certify, so each check here fails if the
verdict or a renderer ignored it.
"""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.reports.render import render_html, render_junit, render_markdown, verdict_line, write_bundle
from ledgercheck.reports.results import ResultsError, load_results, merge_results, validate_results
from ledgercheck.reports.terminal import summary_text

INCOMPLETE = {
    "reason": "interrupted", "message": "interrupted by SIGINT while running ledgercheck::recovery::chaos[after_claim]",
    "signal": "SIGINT",
    "tests": {"planned": 480, "finished": 472, "unfinished": ["ledgercheck::recovery::chaos[after_claim]"]},
    "crash_windows": {"points_planned": 8, "points_finished": 1, "finished": 43, "planned": None},
}


def _docs(factory: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    good = factory.certified()
    run = factory.run(incomplete=copy.deepcopy(INCOMPLETE))
    cut = factory.build(tests=factory.tests(known_bugs=(), failing=()), windows=factory.windows(bad=()),
                        adapter=factory.adapter(known_bugs={}), run=run)
    return good, cut


def test_incomplete_comes_before_every_other_verdict(factory) -> None:
    good, cut = _docs(factory)
    assert (good["verdict"], good["exit_code"]) == ("CERTIFIED", 0)
    assert (cut["verdict"], cut["exit_code"], cut["certified_profiles"]) == ("INCOMPLETE", 2, [])
    line = verdict_line(cut)
    assert line.startswith("INCOMPLETE: interrupted by SIGINT")
    assert "ran 472 of 480 tests, 1 of 8 crash points (43 crash windows)" in line
    # even a run with failures and a run-level error says INCOMPLETE first
    failing = factory.build(run=factory.run(incomplete=copy.deepcopy(INCOMPLETE), error="adapter never started"))
    assert failing["verdict"] == "INCOMPLETE"


def test_every_renderer_says_incomplete_first(factory, tmp_path: Path) -> None:
    _, cut = _docs(factory)
    md = render_markdown(cut)
    assert md.splitlines()[0].startswith("### ⏹️ ledgercheck: INCOMPLETE")
    assert md.splitlines()[2].startswith("**INCOMPLETE: interrupted by SIGINT")
    assert "Without an outcome" in md and "after\\_claim" in md
    html = render_html(cut)
    assert 'data-verdict="INCOMPLETE"' in html and 'class="banner v-incomplete"' in html
    assert html.index("INCOMPLETE: interrupted by SIGINT") < html.index('id="profiles"')
    root = ET.fromstring(render_junit(cut))
    first = root.find("testsuite")
    assert first is not None and first.get("name") == "run"
    err = first.find("testcase/error")
    assert err is not None and err.get("type") == "incomplete" and err.get("message", "").startswith("INCOMPLETE:")
    assert "ledgercheck::recovery::chaos[after_claim]" in (err.text or "")
    assert summary_text(cut, "results.json", "0" * 64).startswith("INCOMPLETE: interrupted by SIGINT")
    paths = write_bundle(cut, tmp_path)
    assert load_results(paths["results"])["verdict"] == "INCOMPLETE"


def test_a_complete_document_renders_no_incomplete_parts(factory) -> None:
    good, _ = _docs(factory)
    assert "INCOMPLETE" not in render_markdown(good) and 'class="banner v-incomplete"' not in render_html(good)
    assert 'id="incomplete"' not in render_html(good)
    root = ET.fromstring(render_junit(good))
    assert [s.get("name") for s in root.findall("testsuite")][0] != "run"


def test_the_record_cannot_be_edited_away_or_made_inconsistent(factory) -> None:
    _, cut = _docs(factory)
    forged = copy.deepcopy(cut)
    forged["run"]["incomplete"] = None
    forged.pop("integrity")
    with pytest.raises(ResultsError, match="does not follow"):
        validate_results(forged)
    bad = copy.deepcopy(INCOMPLETE)
    bad["tests"]["finished"] = 481
    with pytest.raises(ResultsError, match=r"run.incomplete.tests: 481 finished of 480 planned"):
        factory.build(run=factory.run(incomplete=bad))
    wrong = copy.deepcopy(INCOMPLETE)
    wrong["reason"] = "bored"
    with pytest.raises(ResultsError, match="run"):
        factory.build(run=factory.run(incomplete=wrong))


def test_a_merge_with_an_incomplete_part_is_incomplete(factory) -> None:
    tests = factory.tests(known_bugs=(), failing=())
    adapter = factory.adapter(known_bugs={})
    half = len(tests) // 2
    a = factory.build(tests=tests[:half], windows=[], adapter=adapter,
                      run=factory.run(id="part-a", shard={"index": 1, "count": 2}))
    b = factory.build(tests=tests[half:], windows=factory.windows(bad=()), adapter=adapter,
                      run=factory.run(id="part-b", shard={"index": 2, "count": 2}, incomplete=copy.deepcopy(INCOMPLETE)))
    whole = merge_results([a, factory.build(tests=tests[half:], windows=factory.windows(bad=()), adapter=adapter,
                                            run=factory.run(id="part-c", shard={"index": 2, "count": 2}))])
    assert whole["verdict"] == "CERTIFIED"
    merged = merge_results([a, b])
    assert merged["verdict"] == "INCOMPLETE" and merged["run"]["incomplete"]["tests"]["planned"] == 480
    assert json.loads(json.dumps(merged))["exit_code"] == 2
