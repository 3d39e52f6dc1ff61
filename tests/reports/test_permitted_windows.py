"""A crash window whose outcome the adapter's declaration permits (docs/chaos.md, "Lease campaigns"):
an effect run again under ``delivery: at-least-once``, an item brought back only by an operator's
call under ``reclaim: operator``.  It fails none of its clauses, and every renderer shows it with
a mark of its own, never as a pass; a results document cannot call a repeated effect a pass, nor
call a window permitted without the declaration that permits it."""

from __future__ import annotations

import copy

import pytest
from ledgercheck.reports.html_report import render_html
from ledgercheck.reports.junit_report import render_junit
from ledgercheck.reports.markdown_report import render_markdown
from ledgercheck.reports.results import ResultsError, validate_results
from ledgercheck.reports.terminal import summary_text

EFFECT = {"point": "after_submit_before_record", "mode": "kill", "step_class": "non_idempotent_without_lookup",
          "occurrence": 1, "clauses": ["core.running.renew_or_leave", "recovery.no_loss"], "decision_observed": "retry",
          "effects_expected": "at_least_once", "effects_observed": 2, "final_status": "done", "delivery": "at-least-once",
          "reclaim": "lease", "came_back_by": ["time"], "verdict": "permitted", "duration_s": 1.5,
          "message": "permitted: effect submitted, then killed; it came back: once the lease lapsed a claim took it, "
                     "with no other call; the step's effect ran 2x at a provider without a deduplicating key, allowed by "
                     "at-least-once"}


def _doc(factory, *extra):
    """A certified run's windows, where the lease campaign's windows replace the exploration's of
    the same point and class (a run has one or the other)."""
    taken = {(w["point"], w["step_class"]) for w in extra}
    windows = [w for w in factory.windows(bad=()) if (w["point"], w["step_class"]) not in taken]
    return factory.build(tests=factory.tests(known_bugs=(), failing=()), windows=windows + list(extra),
                         adapter=factory.adapter(known_bugs={}))


def test_a_permitted_window_fails_nothing_and_is_shown_as_permitted(factory):
    doc = _doc(factory, dict(EFFECT))
    validate_results(doc)
    w = next(w for w in doc["crash_windows"] if w.get("delivery"))
    assert w["verdict"] == "permitted" and (w["effects_min"], w["effects_max"]) == (1, None)
    assert doc["verdict"] == "CERTIFIED"  # permitted by the declaration: no clause fails
    clause = next(c for c in doc["clauses"] if c["id"] == "core.running.renew_or_leave")
    assert clause["outcome"] == "pass" and clause["failed"] == 0
    md = render_markdown(doc)
    assert "1 permitted by the adapter's declaration (not passes)" in md
    n = len(doc["crash_windows"])
    assert f"Crash windows: {n} run, {n - 1} passed, 1 permitted" in md
    assert "permitted by the adapter's declaration" in summary_text(doc, "results.json", "0" * 64)
    page = render_html(doc)
    assert "Permitted by the adapter&#x27;s declaration (1)" in page or "Permitted by the adapter's declaration (1)" in page
    assert 'data-verdict="permitted"' in page and "o-permitted" in page and "some-permitted" in page
    assert f"{n - 1} of {n} windows recovered as the contract requires, 1 as the adapter declares it may" in page
    junit = render_junit(doc)
    case = junit.split('name="crash-window::after_submit_before_record[non_idempotent_without_lookup]#1"')[1].split("</testcase>")[0]
    assert "<failure" not in case and "<error" not in case and "allowed by at-least-once" in case


@pytest.mark.parametrize("change, why", [
    ({"verdict": "pass"}, "a repeat is never a pass"),
    ({"delivery": "effectively-once", "effects_expected": "exactly_once"}, "no declaration that permits"),
    ({"effects_observed": 1}, "no declaration that permits"),
    ({"delivery": "twice"}, "delivery 'twice' is not one of"),
])
def test_a_document_cannot_call_a_repeat_a_pass_or_permit_without_a_declaration(factory, change, why):
    with pytest.raises(ResultsError, match=why):
        _doc(factory, {**copy.deepcopy(EFFECT), **change})


def test_an_item_brought_back_by_the_operator_is_permitted_only_under_an_operator_declaration(factory):
    kill = {"point": "after_claim", "mode": "kill", "step_class": None, "occurrence": 1,
            "clauses": ["recovery.scan"], "verdict": "permitted", "came_back_by": ["recover"], "duration_s": 1.0,
            "message": "permitted: killed holding the lease; it came back only through the operator's recover"}
    validate_results(_doc(factory, {**kill, "reclaim": "operator"}))
    with pytest.raises(ResultsError, match="no declaration that permits"):
        _doc(factory, {**kill, "reclaim": "lease"})
