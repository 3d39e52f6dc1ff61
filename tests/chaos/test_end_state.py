"""The checker on real campaign histories: the reference reaches every required situation and shows
no anomaly; ledgers that go wrong only in what they leave at the end or in what they say they
refused (fixtures/testkit/broken_safety.py: END_STATE) are reported as exactly that; a ledger whose claims
never answer gives INCONCLUSIVE, never a pass; the reference's own history cut short (no final
record, a torn last line, one process's part) is INCONCLUSIVE or refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.chaos.safety.anomalies import check
from ledgercheck.chaos.safety.campaign import run_campaign
from ledgercheck.chaos.safety.history import load_history
from ledgercheck.fixtures.testkit import broken_safety as bs

SETTINGS: dict[str, Any] = {"workers": 4, "items": 80, "duration": 2.0, "faults": "kill,pause,reopen"}
DISPLACED = "no live holder was displaced (by time, operator or reopen)"


def history_check(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ledgercheck", "history", "check", str(path), *args],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def reference_runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = []
    for seed in (2, 3):
        d = tmp_path_factory.mktemp(f"reference{seed}")
        r = run_campaign("reference", seed=seed, out_dir=str(d), check=False, **SETTINGS)
        assert r.history
        out.append(Path(r.history))
    return out


def test_the_reference_shows_no_anomaly_and_reaches_every_required_situation(reference_runs: list[Path]) -> None:
    verdicts = [check(load_history(p)) for p in reference_runs]
    for v in verdicts:
        assert v.anomalies == [], [(a.kind, a.explanation) for a in v.anomalies]
        cov = v.coverage
        # every item finished: most closed out, some failed for good or quarantined by recovery
        assert cov["claim_ok"] >= SETTINGS["items"] and cov["close_out_ok"] >= SETTINGS["items"] // 2, cov
        assert cov["finished"] == SETTINGS["items"] and cov["final_read"] == 1, (cov, v.missing)
        assert cov["kill"] + cov["pause"] + cov["reopen"] >= 3, cov
        # whether a pause lands on a holder long enough for another worker to take its item over
        # is up to the schedule and the machine's load: a run that missed it says so, and nothing else
        assert set(v.missing) <= {DISPLACED}, v.missing
    full = [v for v in verdicts if v.verdict == "no anomaly"]
    assert full, [(v.missing, v.coverage) for v in verdicts]
    for v in full:
        assert v.coverage["holder_displaced"] >= 1 and v.coverage["late_write_after_takeover"] >= 1
        assert v.coverage["displaced_by_time"] >= 1  # reclaim by lease: the lease's lapse did it
    r = history_check(reference_runs[verdicts.index(full[0])], "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["verdict"] == "no anomaly" and doc["missing"] == []


def test_the_reference_history_cut_short_is_inconclusive_or_refused(reference_runs: list[Path], tmp_path: Path) -> None:
    data = reference_runs[0].read_bytes()
    lines = data.splitlines(keepends=True)
    assert json.loads(lines[-1])["type"] == "final"
    no_final = tmp_path / "no-final.jsonl"
    no_final.write_bytes(b"".join(lines[:-1]))
    r = history_check(no_final)
    assert r.returncode == 2 and "verdict: INCONCLUSIVE: the history has no final record" in r.stdout
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(lines[: len(lines) // 2]) + lines[len(lines) // 2][:25])  # a writer stopped mid-line
    r = history_check(cut)
    assert r.returncode == 2 and r.stdout == "" and "the last line is cut off mid-record" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    # the controller's own part (meta, faults, final read), as an interrupted merge leaves it
    part = tmp_path / "history.nemesis.jsonl"
    part.write_bytes(b"".join(x for x in lines if json.loads(x)["type"] in ("meta", "nemesis", "final")))
    r = history_check(part)
    assert r.returncode == 2 and "verdict: INCONCLUSIVE: the history holds no operation" in r.stdout


# ClaimSkipsSome is the long tier's (10 s; the default run keeps the other two)
@pytest.mark.parametrize("cls", [pytest.param(c, marks=[pytest.mark.thorough] if c is bs.ClaimSkipsSome else [])
                                 for c in bs.END_STATE], ids=lambda c: c.__name__)
def test_a_ledger_that_goes_wrong_at_the_end_or_in_its_refusals_is_reported(cls: type, tmp_path: Path) -> None:
    r = run_campaign(f"python:ledgercheck.fixtures.testkit.broken_safety:{cls.__name__}", seed=1, out_dir=str(tmp_path),
                     check=False, **SETTINGS)
    v = check(load_history(r.history))
    assert {a.kind for a in v.anomalies} == set(cls.ANOMALIES), [(a.kind, a.explanation) for a in v.anomalies][:5]
    assert v.verdict == "anomalies"
    if cls is bs.CreateSaysNotFound:
        # the items its refused creates made count as created: every one is judged at the end
        assert v.counts["items"] == SETTINGS["items"] and v.coverage["finished"] == SETTINGS["items"]
        assert all("refused (not_found)" in a.explanation for a in v.anomalies)
    if cls is bs.NeverPromotes:
        assert all("retry_scheduled" in a.explanation and "promote_due" in a.explanation for a in v.anomalies)


@pytest.mark.thorough  # 11-14 s; test_safety_takeover's hanging claims stay in the default run
def test_a_ledger_whose_claims_never_answer_is_inconclusive(tmp_path: Path) -> None:
    r = run_campaign("python:ledgercheck.fixtures.testkit.broken_safety:ClaimTimesOut", seed=1, out_dir=str(tmp_path),
                     check=False, workers=2, items=8, duration=1.0, faults="kill,pause")
    v = check(load_history(r.history))
    assert v.anomalies == [] and v.verdict == "inconclusive"
    assert v.missing[0] == "no claim ever completed ok (no item was ever handed out)"
    out = history_check(Path(r.history))
    assert out.returncode == 2
    assert out.stdout.strip().splitlines()[-1].startswith("verdict: INCONCLUSIVE: no claim ever completed ok")
