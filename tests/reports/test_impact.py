"""Findings by severity: every clause of the contract says what a violation does to a user's work
(``impact``) and names it in plain words (``headline``); findings, the verdict line and every report
lead with the worst (docs/contract.md, "Impact"; docs/results.md, "The verdict line")."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from ledgercheck.reports.markdown_report import render_markdown
from ledgercheck.reports.summary import blocking_clauses
from ledgercheck.reports.terminal import summary_text
from ledgercheck.spec import SpecError, default_spec, load_spec
from ledgercheck.spec.contract import IMPACTS

# a failing clause of each impact, the least severe first
WORST_LAST = ["core.status.enum", "core.invalid_argument", "core.transition.allowed", "core.terminal.immutable",
              "lease.fencing"]


def test_every_clause_says_what_a_violation_does() -> None:
    spec = default_spec()
    assert {c.impact for c in spec.clauses} == set(IMPACTS)  # every class is used
    for c in spec.clauses:
        assert c.impact in IMPACTS, c.id
        assert c.headline and c.headline == c.headline.strip() and c.headline[0].islower(), c.id
        assert c.id not in c.headline and not c.headline.endswith("."), c.id
    # fencing and finished work come first: the judgements that lose or duplicate work
    by_id = {c.id: c.impact for c in spec.clauses}
    assert by_id["lease.fencing"] == by_id["lease.single_holder"] == by_id["recovery.fencing_after_takeover"] == "ownership"
    assert by_id["core.terminal.immutable"] == by_id["recovery.no_loss"] == "integrity"
    assert by_id["core.create.source_system"] == by_id["core.invalid_argument"] == "validation"


def test_the_schemas_know_the_impacts_in_their_order() -> None:
    root = Path(__file__).resolve().parents[2]
    contract = json.loads((root / "spec" / "schema" / "ledger-spec.schema.json").read_text())
    assert tuple(contract["properties"]["clauses"]["items"]["properties"]["impact"]["enum"]) == IMPACTS
    assert {"impact", "headline"} <= set(contract["properties"]["clauses"]["items"]["required"])
    results = json.loads(resources.files("ledgercheck.reports").joinpath("schema/results.schema.json").read_text())
    assert tuple(results["$defs"]["impact"]["enum"]) == IMPACTS


@pytest.mark.parametrize("missing", ["impact", "headline"])
def test_a_clause_without_its_impact_is_refused(tmp_path: Path, missing: str) -> None:
    fields = {"id": "core.vendor.audit", "level": "MUST", "impact": "reporting", "headline": "keeps no audit trail",
              "profile": "core", "source": "000_c0acfc2210694ce4.txt", "statement": "Every record keeps an audit trail."}
    del fields[missing]
    overlay = tmp_path / "vendor.yaml"
    overlay.write_text("extends: default\nclauses:\n  - " + "\n    ".join(f"{k}: {v}" for k, v in fields.items()) + "\n")
    with pytest.raises(SpecError, match=missing):
        load_spec([str(overlay)])
    bad = {**fields, missing: "x", "impact": "catastrophic"}  # an impact the contract does not define
    overlay.write_text("extends: default\nclauses:\n  - " + "\n    ".join(f"{k}: {v}" for k, v in bad.items()) + "\n")
    with pytest.raises(SpecError, match="impact"):
        load_spec([str(overlay)])


def test_findings_and_the_verdict_line_lead_with_the_worst(factory) -> None:
    doc = factory.build(tests=factory.tests(known_bugs=(), failing=WORST_LAST), windows=factory.windows(bad=()),
                        adapter=factory.adapter(known_bugs={}))
    found = [f for f in doc["findings"] if f["severity"] == "violation"]
    assert [f["what"] for f in found] == list(reversed(WORST_LAST))
    assert [f["impact"] for f in found] == list(IMPACTS)
    assert doc["verdict_line"] == (
        "NOT CERTIFIED: accepts a stale holder's writes (lease.fencing), changes finished work "
        "(core.terminal.immutable), refuses or misroutes a move the contract allows (core.transition.allowed); "
        "2 more contract violations (1 input validation, 1 reporting)")
    assert [c["id"] for c in blocking_clauses(doc)] == list(reversed(WORST_LAST))
    text = summary_text(doc, "results.json", "0" * 64)
    assert text.index("lease.fencing") < text.index("core.terminal.immutable") < text.index("core.status.enum  ")
    md = render_markdown(doc)
    assert md.index("| `lease.fencing` | MUST | ownership |") < md.index("| `core.status.enum` | MUST | reporting |")


def test_the_same_findings_in_contract_order_would_bury_the_worst(factory) -> None:
    """What the ordering is for: in contract order the first three named would be the reporting,
    validation and behaviour findings, and the stale holder's writes would not be named at all."""
    doc = factory.build(tests=factory.tests(known_bugs=(), failing=WORST_LAST), windows=factory.windows(bad=()),
                        adapter=factory.adapter(known_bugs={}))
    contract_order = [c.id for c in default_spec().clauses if c.id in WORST_LAST]
    assert contract_order[-1] == "lease.fencing"
    assert doc["verdict_line"].startswith("NOT CERTIFIED: accepts a stale holder's writes (lease.fencing)")
    assert "core.status.enum" not in doc["verdict_line"]
