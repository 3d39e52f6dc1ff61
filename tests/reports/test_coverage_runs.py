"""Coverage recorded by real runs: the harness records each test's transitions through the
plugin's user properties, ``certify`` turns a run that deselected tests into INCONCLUSIVE (exit 2),
and a transition the implementation does not offer is "not offered", never "never reached".

Real subprocess runs of ``ledgercheck certify`` and of pytest with the plugin, against the
reference (in process) and a variant of it (tests/reports/coverage_adapters.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ledgercheck.reports.results import load_results

HERE = Path(__file__).resolve().parent


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _state(doc: dict, move: str) -> str:
    return next(r["state"] for r in doc["coverage"]["transitions"] if f"{r['from']} {r['operation']} {r['to']}" == move)


def test_a_run_with_tests_deselected_is_inconclusive(tmp_path: Path) -> None:
    """``-k`` keeps the transition clause's cases only: every transition they drive is reached, the
    two only recovery makes are not, and no case ran for the other clauses: INCONCLUSIVE, exit 2
    (deselected tests are not planned, so the run is not INCOMPLETE, and nothing errored)."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "ledgercheck", "certify", "--adapter", "reference", "--no-chaos",
                           "-k", "core.transition", "--out", str(out), "--no-history", "--quiet", "--seed", "3"],
                          capture_output=True, text=True, timeout=600, env=_env(), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = load_results(out / "results.json")
    assert doc["verdict"] == "INCONCLUSIVE" and doc["run"]["incomplete"] is None and doc["exit_code"] == 2
    line = doc["verdict_line"]
    assert line.startswith("INCONCLUSIVE: 2 of 25 transitions never reached (running -recover-> timeout, "
                           "timeout -recover-> queued); no case run for 118 of 121 clauses (core.status.enum, ")
    assert line in proc.stdout
    assert {c["id"] for c in doc["clauses"] if c["outcome"] == "pass"} == {
        "core.transition.allowed", "core.transition.forbidden", "core.transition.corruption"}
    assert all(c["outcome"] == "not_run" for c in doc["clauses"] if c["outcome"] != "pass")
    # the clause tests' own records say what each reached
    case = next(t for t in doc["tests"] if t["nodeid"].endswith("core.transition.allowed[queued->running:claim]"))
    assert case["exercised"]["transitions"] == ["queued claim running"]
    assert "- create accepted" in case["exercised"]["calls"] and "queued claim accepted" in case["exercised"]["calls"]
    requeue = next(t for t in doc["tests"] if t["nodeid"].endswith("core.transition.allowed[timeout->queued:requeue]"))
    assert "timeout requeue queued" in requeue["exercised"]["transitions"]
    assert '<tr data-profile="recovery" data-gaps="12">' in (out / "report.html").read_text()


def test_a_transition_not_offered_is_not_missing(tmp_path: Path) -> None:
    """The implementation answers ``unsupported`` for closing work out as timeout: the harness
    records the move the call would have made as not offered, never as never reached.  Timeout is
    still reached through expire, so what leaves it stays to be judged: the clause cases drive work
    to timeout along the first operation the table lists (close_out) and stop where it is not
    offered, so requeue out of timeout is never reached in this run, and the coverage says so."""
    work = tmp_path / "run"
    work.mkdir()
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", str(work), "--rootdir", str(work), "-p", "no:cacheprovider",
                           "-q", "--ledger-only", "--ledger-artifacts", str(tmp_path / "artifacts"),
                           "--ledger-adapter", "python:coverage_adapters:NoTimeoutCloseOut", "--ledger-profile", "core",
                           "--ledger-clauses-only", "-k", "core.transition.allowed", "--ledger-results", str(out)],
                          capture_output=True, text=True, timeout=600, env=_env(), cwd=work)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = load_results(out)
    case = next(t for t in doc["tests"] if t["nodeid"].endswith("[running->timeout:close_out]"))
    assert case["outcome"] == "not_offered" and case["exercised"]["not_offered"] == ["running close_out timeout"]
    assert _state(doc, "running close_out timeout") == "not_offered"
    assert _state(doc, "running expire timeout") == "reached"
    assert _state(doc, "timeout requeue queued") == "missing"
    assert _state(doc, "queued cancel cancelled") == "out_of_scope"  # cancel is not claimed
    cov = doc["coverage"]["profiles"]["core"]
    assert cov["not_offered"] == 1 and cov["missing"] == ["timeout -requeue-> queued"]
    assert cov["reached"] == cov["transitions"] - 2
    # not offered decides the verdict (NOT CERTIFIED, lacks); the line also says what was never reached
    assert doc["verdict"] == "NOT CERTIFIED" and "lacks: close_out as timeout" in doc["verdict_line"]
    assert "never reached (timeout -requeue-> queued)" in doc["verdict_line"]
    assert "running -close_out-> timeout" not in doc["verdict_line"]


def test_a_transition_made_with_a_wrong_field_is_reached(tmp_path: Path) -> None:
    """Every claim of this adapter reports lease_version 0 (lease.acquire is broken), and moves
    its item from queued to running: the transition was exercised, and coverage says so; the wrong
    field fails its own clause."""
    work = tmp_path / "run"
    work.mkdir()
    out = tmp_path / "results.json"
    subprocess.run([sys.executable, "-m", "pytest", str(work), "--rootdir", str(work), "-p", "no:cacheprovider",
                    "-q", "--ledger-only", "--ledger-artifacts", str(tmp_path / "artifacts"),
                    "--ledger-adapter", "python:coverage_adapters:ClaimKeepsVersionZero", "--ledger-profile", "core,lease",
                    "--ledger-clauses-only", "-k", "core.transition.allowed or lease.acquire", "--ledger-results", str(out)],
                   capture_output=True, text=True, timeout=600, env=_env(), cwd=work)
    doc = load_results(out)
    edge = next(t for t in doc["tests"] if t["nodeid"].endswith("core.transition.allowed[queued->running:claim]"))
    assert edge["exercised"]["transitions"] == ["queued claim running"]
    assert _state(doc, "queued claim running") == "reached"
    assert next(c for c in doc["clauses"] if c["id"] == "lease.acquire")["outcome"] == "fail"
    assert doc["verdict"] == "NOT CERTIFIED"
    assert "queued -claim-> running" not in doc["verdict_line"]
