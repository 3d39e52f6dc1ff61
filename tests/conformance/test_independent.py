"""A correct ledger the harness was not written against is certified, every profile.

``ledgercheck.fixtures.testkit.independent`` was written from the documentation alone (not from the
reference or the model), so it makes its own choices wherever the contract leaves room.  Any
change to the harness that fails it is a false alarm until shown otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ADDRESS = "python:ledgercheck.fixtures.testkit.independent:SharedMemLedger"


@pytest.mark.budgeted
def test_the_independent_ledger_is_certified(tmp_path, certify_budget) -> None:
    out = tmp_path / "out"
    seed = os.environ.get("LEDGERCHECK_INDEPENDENT_SEED", "3")
    proc = subprocess.run([sys.executable, "-m", "ledgercheck", "certify", "--adapter", ADDRESS, "--seed", seed, "--out", str(out),
                           "--artifacts", str(tmp_path / "artifacts"), "--quiet", *certify_budget],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    problems = [f"{t['nodeid']}: {(t.get('message') or '')[:400]}" for t in doc["tests"] if t["outcome"] in ("failed", "error", "fail")]
    assert not problems, "\n".join(problems)
    assert doc["verdict"] == "CERTIFIED", proc.stdout[-1500:] + proc.stderr[-1500:]
    assert set(doc["certified_profiles"]) == set(doc["adapter"]["profiles"]) and len(doc["certified_profiles"]) == 16  # 11 of contract 1.0; lanes, wakeups, spawn, ask, logread (issue 17)
    assert doc["verdict_line"].endswith("(the whole contract: full)"), doc["verdict_line"]
    # with full coverage: every transition of the contract reached, a case of every clause run
    assert {r["state"] for r in doc["coverage"]["transitions"]} == {"reached"}, doc["coverage"]["transitions"]
    assert all(c > 0 for c in doc["coverage"]["clause_cases"].values())
    assert proc.returncode == 0
    # its crash windows were explored (it is durable and shares one ledger across processes)
    windows = doc["crash_windows"]
    assert len(windows) >= 50 and {w["verdict"] for w in windows} == {"pass"}
    assert {w["mode"] for w in windows} >= {"kill"}
