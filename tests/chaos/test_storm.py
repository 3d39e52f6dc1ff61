"""Kill storms: a correct ledger loses and duplicates nothing; a broken one is caught."""

from __future__ import annotations

import json
import os

import pytest
from chaos_support import FULL
from ledgercheck.chaos.crash.replays import load_replay
from ledgercheck.chaos.crash.rerun import replay
from ledgercheck.chaos.crash.storms import storm
from ledgercheck.spec import Spec


def test_storm_against_the_reference(spec: Spec, scratch: str | None) -> None:
    # three items per worker between two kills, and more items than 61 cycles of that can take
    # (61 x 3 x 3 = 549): the workload cannot run out before the last kill, however the machine's
    # speed shares the time between the workers and the kill schedule, so every planned kill happens
    s = storm("reference", spec, seed=11, workers=3, kills=60, items=600, per_cycle=3, tmp_root=scratch)
    assert s["verdict"] == "pass", s["violations"][:5]
    assert s["kills"] == 60 and len(s["schedule"]) == s["kills"], s["notes"]
    assert s["final"].get("done", 0) + s["final"].get("quarantined", 0) == s["items"]
    assert sum(s["victims"].values()) >= s["kills"] // 2
    assert s["acquisitions"] >= s["items"]
    assert {"recovery.no_loss", "recovery.effects_allowed", "eventlog.fold", "lease.single_holder"} <= set(s["clauses"])
    first = s["schedule"][0]
    assert {"n", "at", "slot", "pid", "pids", "now"} <= set(first)


def test_storm_catches_receipts_recorded_before_the_effect(spec: Spec, scratch: str | None, tmp_path) -> None:
    s = storm("python:broken_ledgers:EagerReceipt", spec, seed=5, workers=3, kills=30, tmp_root=scratch,
              replay_dir=str(tmp_path))
    assert s["verdict"] == "fail"
    assert "recovery.effects_allowed" in {v["clause"] for v in s["violations"]}
    doc = load_replay(s["replay_file"])
    assert doc["kind"] == "storm" and doc["storm"]["seed"] == 5 and len(doc["schedule"]) == s["kills"]
    again = replay(s["replay_file"], address="python:broken_ledgers:EagerReceipt")
    assert again["verdict"] == "fail" and again["params"] == s["params"]


@pytest.mark.skipif(not FULL, reason="the 1,000-kill campaign: set LEDGERCHECK_CHAOS_FULL=1")
def test_thousand_kill_storm(spec: Spec, scratch: str | None) -> None:
    kills = int(os.environ.get("LEDGERCHECK_STORM_KILLS", "1000"))
    s = storm("reference", spec, seed=2024, workers=4, kills=kills, items=10 * kills, tmp_root=scratch,
              time_limit=3600.0)
    print(json.dumps({k: v for k, v in s.items() if k != "schedule"}, indent=1))
    assert s["verdict"] == "pass", s["violations"][:5]
    assert s["kills"] == kills
