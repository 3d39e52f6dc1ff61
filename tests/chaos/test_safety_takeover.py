"""Takeovers whatever an adapter declares, and runs where nothing happened (chaos/safety/campaign.py).

The declared ``reclaim`` chooses which path moves a paused holder's item (the operator's recovery
under ``operator`` and ``never``), never whether a live holder is displaced: a ledger without
fencing (CloseOutIgnoresToken) is caught declared each way, and the correct ledgers declared each
way show nothing.  Runs that never hand out work, or whose takeovers never happen, are
INCONCLUSIVE (exit 2), never a pass.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.chaos.safety.campaign import run_campaign
from ledgercheck.chaos.safety.history import load_history

BS = "python:ledgercheck.fixtures.testkit.broken_safety"
DL = "python:declared_ledgers"
SETTINGS: dict[str, Any] = {"workers": 4, "items": 40, "seed": 1, "duration": 2.0}
WRITES = {"close_out", "renew", "fail", "set_waiting"}  # what a holder writes with its lease token


def _why(r: Any) -> tuple[Any, ...]:
    return ([a["explanation"] for a in r.anomalies or []][:4], r.nemesis, r.takeovers, r.final, r.notes[:6], r.missing)


def _takeovers(history: Any) -> list[Any]:
    return [x for x in history.records if x.type == "nemesis" and x.fault == "takeover"]


# ------------------------------------------------------------------ a ledger without fencing
@pytest.mark.parametrize(("ledger", "faults"), [
    ("CloseOutIgnoresTokenOperator", "kill,pause,reopen"),
    ("CloseOutIgnoresTokenNever", "pause"),  # under never a dead worker's item stays: kills would be findings of their own
])
def test_a_ledger_without_fencing_is_caught_whatever_reclaim_it_declares(ledger: str, faults: str, tmp_path: Path,
                                                                          scratch: str | None) -> None:
    r = run_campaign(f"{BS}:{ledger}", faults=faults, out_dir=str(tmp_path), tmp_root=scratch, **SETTINGS)
    assert r.declared["reclaim"] in ("operator", "never") and r.mode == "processes"
    found = {a["class"] for a in r.anomalies or []}
    assert found & {"stale_write_accepted", "split_ownership"}, _why(r)
    assert found <= {"stale_write_accepted", "split_ownership", "duplicate_effect"}, _why(r)  # duplicate: its journal ignores tokens too
    assert r.verdict == "fail" and r.takeovers.get("operator", 0) >= 1, _why(r)
    # the proof is a takeover the nemesis made: the paused holder's grant, the operator's recovery
    # naming the item, the taker's grant, the takeover record, then the holder's late write accepted
    h = load_history(r.history)
    recs = h.records
    taken = {(x.process, x.point["work_id"]): x for x in _takeovers(h)}
    proven = 0
    for a in r.anomalies:
        if a["class"] != "stale_write_accepted":
            continue
        write = [x for x in a["excerpt"] if x["type"] == "invoke" and x["op"] in WRITES][-1]
        holder, wid = write["process"], a["work_id"]
        t = taken.get((holder, wid))
        if t is None:
            continue
        assert t.point["path"] == "operator" and t.point["action"] in ("recover", "expire + requeue", "requeue")
        moved = [x for x in recs if x.type == "complete" and x.process == "operator" and x.op in ("recover", "expire", "requeue")
                 and x.outcome == "ok" and x.t < t.t and wid in json.dumps(x.result)]
        granted = [x for x in recs if x.type == "complete" and x.process == t.point["by"] and x.op == "claim"
                   and x.outcome == "ok" and isinstance(x.result, dict) and x.result.get("work_id") == wid and x.t < t.t]
        paused = [x for x in recs if x.type == "nemesis" and x.fault == "pause" and x.process == holder and x.t < moved[0].t]
        assert moved and granted and paused and write["t"] > t.t, (t, write)
        proven += 1
    assert proven >= 1, _why(r)


# ------------------------------------------------------------------ correct ledgers, each declaration
CORRECT = [
    pytest.param(f"{BS}:ReferenceOperator", "kill,pause,reopen", id="reference-operator"),
    pytest.param(f"{BS}:ReferenceNever", "pause", id="reference-never"),
    pytest.param(f"{DL}:SharedMemOperator", "kill,pause,reopen", id="sharedmem-operator"),
    pytest.param(f"{DL}:SharedMemNever", "pause", id="sharedmem-never", marks=pytest.mark.thorough),
    pytest.param(f"{BS}:SmallQueueOperator", "kill,pause", id="smallqueue-operator"),  # no operator path: by time
    pytest.param(f"{DL}:MemOperator", "kill,pause", id="mem-operator-one-process"),  # logical pauses
]


@pytest.mark.parametrize(("address", "faults"), CORRECT)
def test_correct_ledgers_declared_each_way_show_no_anomaly(address: str, faults: str, tmp_path: Path,
                                                          scratch: str | None) -> None:
    r = run_campaign(address, faults=faults, out_dir=str(tmp_path), tmp_root=scratch, **SETTINGS)
    assert r.anomalies == [], _why(r)
    assert set(r.final) <= {"done", "quarantined"} and sum(r.final.values()) == SETTINGS["items"], _why(r)
    # live holders were displaced, and each went on writing with its old token, refused
    h = load_history(r.history)
    takeovers = _takeovers(h)
    assert takeovers and r.nemesis["takeover"] == len(takeovers), _why(r)
    # the reference takes nothing back by itself (no monitor runs under operator or never), SmallQueue
    # has no operator recovery (its claims take a lapsed lease); the others may do either
    paths = {t.point["path"] for t in takeovers}
    want = {"time"} if "SmallQueue" in address else {"operator"} if "Reference" in address else {"operator", "time"}
    assert paths <= want, [t.point for t in takeovers]
    late = [x for x in h.records if x.type == "invoke" and x.op in WRITES | {"effect_begin", "effect_record"}
            and any(x.process == t.process and x.args.get("work_id") == t.point["work_id"] and x.t > t.t for t in takeovers)]
    assert late, _why(r)


def test_under_lease_the_takeovers_go_by_time_and_the_operator_comes_too(tmp_path: Path, scratch: str | None) -> None:
    r = run_campaign("reference", faults="pause", out_dir=str(tmp_path), tmp_root=scratch, **SETTINGS)
    assert r.anomalies == [] and r.declared["reclaim"] == "lease", _why(r)
    h = load_history(r.history)
    takeovers = _takeovers(h)
    assert len(takeovers) >= 2 and r.takeovers["missed"] == 0, _why(r)
    # the monitor runs as ever (it may move the item before the operator comes: path "time")
    assert any(x.type == "invoke" and x.process == "monitor" and x.op == "recover" for x in h.records)
    # every other takeover sends the operator's recovery once the holder's lease has lapsed; the
    # ledger's own monitor may move the item first (how soon depends on the machine), and the
    # result says so: the operator's recovery ran, or each takeover planned for it was preempted
    operator = any(x.type == "invoke" and x.process == "operator" and x.op == "recover" for x in h.records)
    assert operator or r.takeovers.get("operator_preempted", 0) >= 1, _why(r)
    assert r.takeovers.get("operator", 0) + r.takeovers.get("time", 0) == len(takeovers), _why(r)


# ------------------------------------------------------------------ nothing to displace, nothing handed out
def test_a_takeover_that_never_happens_is_not_a_pass(tmp_path: Path, scratch: str | None) -> None:
    # a holder keeps its item until it releases it, and nothing moves a running item: no paused
    # holder can lose its item (correct under reclaim: never), so nothing was exercised
    r = run_campaign(f"{DL}:HeldUntilReleasedNever", faults="pause", out_dir=str(tmp_path), tmp_root=scratch,
                     **{**SETTINGS, "items": 16, "duration": 1.0})
    assert r.anomalies == [] and r.nemesis["takeover"] == 0 and r.takeovers["missed"] >= 1, _why(r)
    assert r.verdict == "inconclusive", _why(r)
    assert any(m.startswith("none of the") and "planned takeover" in m for m in r.missing), r.missing
    assert any("did not happen" in n for n in r.notes), r.notes


def test_a_ledger_that_hangs_on_every_claim_is_inconclusive(tmp_path: Path, scratch: str | None) -> None:
    address = f"exec:{sys.executable} -m ledgercheck serve {BS}:HangsOnClaim"
    r = run_campaign(address, faults="kill,pause", items=8, seed=1, duration=1.0, lapse=0.4, op_timeout=1.0,
                     out_dir=str(tmp_path), tmp_root=scratch)
    assert r.anomalies == [] and r.verdict == "inconclusive", _why(r)
    # the checker says no claim completed ok; the campaign, how many were asked (when the checker does not)
    assert any("no worker ever got an item" in m or "no claim ever completed ok" in m for m in r.missing), r.missing
    assert any("not finished (queued 8)" in m for m in r.missing), r.missing


# GarbageOnClaim is the long tier's (16 s): CrashesOnClaim stays in the default run
@pytest.mark.parametrize("ledger", ["CrashesOnClaim", pytest.param("GarbageOnClaim", marks=pytest.mark.thorough)])
def test_the_command_says_inconclusive_and_exits_2_when_no_claim_hands_out_work(ledger: str, tmp_path: Path) -> None:
    address = f"exec:{sys.executable} -m ledgercheck serve {BS}:{ledger}"
    out = subprocess.run([sys.executable, "-m", "ledgercheck", "safety", "--adapter", address, "--items", "8",
                          "--nemesis", "kill,pause", "--seed", "1", "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 2, out.stdout[-3000:] + out.stderr[-2000:]
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("verdict: INCONCLUSIVE: "), last
    assert "no worker ever got an item" in last or "no claim ever completed ok" in last, last
    doc = json.loads((tmp_path / "out" / "safety.json").read_text())
    assert doc["verdict"] == "inconclusive" and doc["anomalies"] == [] and doc["missing"], doc["missing"]
    assert doc["final"] == {"queued": 8}


# ------------------------------------------------------------------ inside certify
def test_an_inconclusive_campaign_inside_certify_is_skipped_not_passed(tmp_path: Path) -> None:
    work = tmp_path / "run"
    work.mkdir()
    out = tmp_path / "results.json"
    address = f"exec:{sys.executable} -m ledgercheck serve {BS}:GarbageOnClaim"
    cmd = [sys.executable, "-m", "pytest", str(work), "--rootdir", str(work), "-p", "no:cacheprovider", "-q",
           "--ledger-only", "--ledger-adapter", address, "--ledger-seed", "1", "-k", "safety",
           "--ledger-artifacts", str(tmp_path / "artifacts"), "--ledger-results", str(out)]
    subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=600)
    doc = json.loads(out.read_text())
    (t,) = [t for t in doc["tests"] if t["nodeid"] == "ledgercheck::safety::campaign"]
    assert t["outcome"] == "skipped" and t["message"].startswith("inconclusive: "), t
    assert "no worker ever got an item" in t["message"] or "no claim ever completed ok" in t["message"], t
    (camp,) = doc["safety"]
    assert camp["verdict"] == "inconclusive" and camp["anomalies"] == [] and camp["missing"], camp
    assert isinstance(camp["coverage"], dict) and camp["takeovers"]["planned"] == 0
    from ledgercheck.reports.results import ResultsError, validate_results

    validate_results(doc)  # the schema allows the campaign's verdict, coverage and missing
    broken = json.loads(json.dumps(doc))
    broken["safety"][0]["missing"] = "everything"
    broken.pop("integrity")
    with pytest.raises(ResultsError, match="safety"):
        validate_results(broken)
