"""The pytest plugin end to end: real pytest runs (subprocesses) against small adapters."""

from __future__ import annotations

import json
from pathlib import Path

from ledgercheck.reports.results import load_results, merge_results


def _results(suite, tmp_path: Path, *args: str) -> tuple[dict, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "results.json"
    proc = suite(tmp_path, *args, "--ledger-results", str(out))
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return load_results(str(out)), proc.stdout + proc.stderr


def _clause(doc: dict, cid: str) -> dict:
    return next(c for c in doc["clauses"] if c["id"] == cid)


def test_not_claimed_profiles_are_reported_apart(tmp_path, suite, cli):
    doc, out = _results(suite, tmp_path, "--ledger-adapter", "python:adapters:CoreOnly", "--ledger-profile", "core,lease",
                        "--ledger-clauses-only", "-k", "core.claim or lease.acquire")
    v = doc["profiles"]["verdicts"]
    assert v["lease"]["verdict"] == "not_claimed", v
    assert _clause(doc, "lease.acquire")["outcome"] == "not_claimed"
    assert all(t["not_claimed"] for t in doc["tests"] if t["clause"] == "lease.acquire")
    assert _clause(doc, "core.claim.order")["outcome"] == "pass"


def test_known_bug_is_a_strict_expected_failure_that_blocks_certification(tmp_path, suite, cli):
    doc, _ = _results(suite, tmp_path, "--ledger-adapter", "python:adapters:DeclaresClaimOrderBug", "--ledger-profile", "core",
                      "--ledger-clauses-only", "-k", "core.claim")
    assert _clause(doc, "core.claim.order")["outcome"] == "xfail"
    assert _clause(doc, "core.claim.empty")["outcome"] == "pass"
    # a -k run leaves no case run for the other core clauses: the profile is inconclusive (and a
    # declared known bug of a SHOULD clause is a warning, which does not block)
    assert doc["profiles"]["verdicts"]["core"]["verdict"] == "inconclusive"
    assert "core" not in doc["certified_profiles"]


def test_declared_bug_that_is_absent_is_reported(tmp_path, suite, cli):
    doc, _ = _results(suite, tmp_path, "--ledger-adapter", "python:adapters:DeclaresBugItDoesNotHave", "--ledger-profile", "core",
                      "--ledger-clauses-only", "-k", "core.claim.order")
    tests = [t for t in doc["tests"] if t["clause"] == "core.claim.order"]
    assert tests and all(t["outcome"] == "xpassed" for t in tests)
    assert _clause(doc, "core.claim.order")["outcome"] == "fail"


def test_an_adapter_that_crashes_gives_errors_not_passes(tmp_path, suite, cli):
    doc, out = _results(suite, tmp_path, "--ledger-adapter", "python:adapters:CancelExplodes", "--ledger-profile", "cancel",
                        "--ledger-clauses-only", "-k", "cancel.immediate")
    assert _clause(doc, "cancel.immediate")["outcome"] == "error"
    assert doc["verdict"] == "ERROR" and doc["exit_code"] == 2
    assert "ADAPTER ERROR" in out


def test_a_clause_without_a_check_is_an_error(tmp_path, suite, cli):
    overlay = tmp_path / "vendor.yaml"
    overlay.write_text(
        "extends: default\n"
        "clauses:\n"
        "  - id: core.vendor.audit_trail\n"
        "    level: MUST\n"
        "    impact: reporting\n"
        "    headline: keeps no audit trail\n"
        "    profile: core\n"
        "    source: 000_c0acfc2210694ce4.txt\n"
        "    statement: Every record keeps an audit trail the vendor defines.\n", encoding="utf-8")
    doc, out = _results(suite, tmp_path, "--ledger-adapter", "reference", "--ledger-spec", str(overlay), "--ledger-profile", "core",
                        "--ledger-clauses-only", "-k", "vendor or core.claim.empty")
    c = _clause(doc, "core.vendor.audit_trail")
    assert c["outcome"] == "error", c
    assert "not checked" in out


def test_shards_merge_into_the_whole(tmp_path, suite, cli):
    args = ("--ledger-adapter", "reference", "--ledger-profile", "core", "--ledger-clauses-only", "-k", "core.requeue or core.claim")
    whole, _ = _results(suite, tmp_path / "all", *args)
    a, _ = _results(suite, tmp_path / "s1", *args, "--ledger-shard", "1/2")
    b, _ = _results(suite, tmp_path / "s2", *args, "--ledger-shard", "2/2")
    assert len(a["tests"]) and len(b["tests"])
    merged = merge_results([a, b])
    assert sorted(t["nodeid"] for t in merged["tests"]) == sorted(t["nodeid"] for t in whole["tests"])
    assert [(c["id"], c["outcome"]) for c in merged["clauses"]] == [(c["id"], c["outcome"]) for c in whole["clauses"]]


def test_node_ids_name_the_clause(tmp_path, suite, cli):
    proc = suite(tmp_path, "--ledger-adapter", "python:ledgercheck.fixtures.testkit.broken:AcceptsDoneToRunning",
                     "--ledger-profile", "core", "--ledger-clauses-only", "-k", "corruption", "-rf")
    assert proc.returncode == 1
    assert "FAILED ledgercheck::core::core.transition.corruption[done->running]" in proc.stdout


def test_bad_adapter_address_is_one_line_and_exit_2(tmp_path, suite, cli):
    proc = cli("certify", "--adapter", "no-such-adapter", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "no-such-adapter" in lines[0], proc.stderr
    proc = cli("certify", "--adapter", "exec:/nonexistent/adapter --flag", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "command not found" in proc.stderr


def test_hostile_adapter_strings_are_escaped(tmp_path, suite, cli):
    out = tmp_path / "bundle"
    proc = cli("certify", "--adapter", "python:adapters:HostileStrings", "--profile", "cancel", "--no-chaos",
                           "-k", "cancel.immediate", "--out", str(out))
    assert proc.returncode in (1, 2), proc.stderr
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "<script>alert('x')</script>" not in html and "&lt;script&gt;" in html
    assert "<img src=x" not in html
    md = (out / "summary.md").read_text(encoding="utf-8")
    # Markdown shows adapter strings only inside code spans, where HTML is not interpreted
    for line in md.splitlines():
        if "<script>" in line:
            assert "`` <script>" in line, line
    json.loads((out / "results.json").read_text(encoding="utf-8"))


def test_results_that_cannot_be_written_fail_the_run_in_one_line(tmp_path, suite, cli):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x", encoding="utf-8")
    target = blocker / "results.json"
    proc = suite(tmp_path, "--ledger-adapter", "reference", "--ledger-profile", "core", "--ledger-clauses-only",
                 "-k", "core.claim.empty", "--ledger-results", str(target))
    assert proc.returncode != 0, proc.stdout[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("ledgercheck: ")]
    assert len(lines) == 1 and str(target) in lines[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_a_violation_seen_while_judging_another_clause_fails_its_own_clause(tmp_path, suite, cli):
    """A clause test sets aside a divergence that belongs to another clause (so it can judge its
    own); the divergence is still a finding: a failure of its own clause and a failed run."""
    doc, out = _results(suite, tmp_path / "plain", "--ledger-adapter", "python:adapters:SeqGapAfterRefusedCloseOut",
                        "--ledger-profile", "cancel,trail", "--ledger-clauses-only", "-k", "cancel.immediate or cancel.intent_first")
    seen = [t for t in doc["tests"] if t["nodeid"].endswith("::seen[trail.append_only]")]
    assert seen and all(t["outcome"] == "failed" and t["clause"] == "trail.append_only" for t in seen), doc["tests"]
    assert "seen while testing ledgercheck::cancel::cancel." in seen[0]["message"] and "expected" in seen[0]["message"]
    assert _clause(doc, "trail.append_only")["outcome"] == "fail" and doc["verdict"] != "CERTIFIED"
    assert all(c["outcome"] == "pass" for c in doc["clauses"] if c["id"].startswith("cancel."))
    assert "violations seen while testing other clauses" in out and "FAILED trail.append_only" in out
    # declared as a known bug: an expected failure, and pytest's exit status follows the tests
    doc, out = _results(suite, tmp_path / "declared", "--ledger-adapter", "python:adapters:DeclaresSeqGap",
                        "--ledger-profile", "cancel,trail", "--ledger-clauses-only", "-k", "cancel.immediate or cancel.intent_first")
    seen = [t for t in doc["tests"] if t["nodeid"].endswith("::seen[trail.append_only]")]
    assert seen and all(t["outcome"] == "xfailed" for t in seen)
    assert _clause(doc, "trail.append_only")["outcome"] in ("xfail", "error")
    # the reference sees nothing of the kind
    doc, out = _results(suite, tmp_path / "ref", "--ledger-adapter", "reference", "--ledger-profile", "cancel,trail",
                        "--ledger-clauses-only", "-k", "cancel.immediate or cancel.intent_first")
    assert not [t for t in doc["tests"] if "::seen[" in t["nodeid"]] and "violations seen" not in out


def test_a_should_violation_does_not_cut_the_stateful_exploration_short(tmp_path, suite, cli):
    doc, out = _results(suite, tmp_path, "--ledger-adapter", "python:adapters:OutboxNewestFirst", "--ledger-profile", "outbox",
                        "--ledger-stateful-only", "--ledger-seed", "3")
    stateful = [t for t in doc["tests"] if t["kind"] == "stateful" and not t["not_claimed"]]
    assert stateful and all(t["outcome"] == "passed" for t in stateful), stateful  # explored to the end
    seen = [t for t in doc["tests"] if t["nodeid"].endswith("::seen[outbox.order]")]
    assert seen and seen[0]["outcome"] == "failed" and "pending messages in order" in seen[0]["message"], doc["tests"]
    assert _clause(doc, "outbox.order")["outcome"] == "fail"
    assert doc["profiles"]["verdicts"]["outbox"]["verdict"] != "failed"  # a SHOULD warns, it does not fail the profile
