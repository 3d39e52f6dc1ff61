"""A run decides the same whatever the transport and the number of workers (issue 33): the
reference certified serially in process, with ``-n 2``, and over the wire
(``exec:ledgercheck serve reference``) gives the same clauses, tests, crash windows and verdicts
(conformance/results_bridge.py ``decided``).  One profile's clause and stateful tests and one
crash point's windows keep it cheap.  Each run also records where its time went (``--timings``):
the wire run counts the adapter processes it started and its round trips, the in-process run
none; a comparison that could not tell two different runs apart is shown to tell them apart."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
from ledgercheck.conformance.results_bridge import decided, differences

# three whole certifications (serial, -n 2, wire): the long tier
pytestmark = pytest.mark.thorough

SELECTION = ("--profile", "inbox,recovery", "-k", "inbox or after_claim", "--seed", "3",
             "--hypothesis-profile", "smoke", "--json", "--timings", "--quiet", "--no-history")
WIRE = f"exec:{sys.executable} -m ledgercheck serve reference"


def _certify(tmp: Path, name: str, adapter: str, *extra: str) -> dict:
    out = tmp / name
    run = subprocess.run([sys.executable, "-m", "ledgercheck", "certify", "--adapter", adapter, *SELECTION, *extra,
                          "--out", str(out), "--artifacts", str(tmp / f"{name}-artifacts")],
                         capture_output=True, text=True, cwd=tmp)
    summary = json.loads(run.stdout)  # a -k selection is INCONCLUSIVE (exit 2), with its report written
    assert run.returncode == summary["exit_code"] and summary["verdict"] == "INCONCLUSIVE", run.stderr[-3000:]
    assert "phases" in summary["timings"], summary
    return json.loads((out / "results.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("same-results")
    return {"serial": _certify(tmp, "serial", "reference"),
            "n2": _certify(tmp, "n2", "reference", "-n", "2"),
            "wire": _certify(tmp, "wire", WIRE)}


def test_serial_n2_and_wire_runs_decide_the_same(runs: dict[str, dict]) -> None:
    serial = runs["serial"]
    d = decided(serial)
    # the selection ran: inbox's tests and after_claim's windows, all decided
    assert d["profiles"]["inbox"] == "certified"
    assert d["crash_windows"] and all(w[0] == "after_claim" for w in d["crash_windows"])
    assert any(n.startswith("ledgercheck::inbox::") for n in d["tests"])
    assert differences(serial, runs["n2"]) == []
    # over the wire, tests that stop the adapter at its own crash points run too (in process they
    # do not apply): the clauses' outcomes, the windows, the verdicts and every test both ran agree
    assert differences(serial, runs["wire"], same_transport=False) == []
    assert runs["n2"]["run"]["workers"] == 2 and runs["wire"]["adapter"]["transport"] == "wire"


def test_timings_count_what_each_transport_spent(runs: dict[str, dict]) -> None:
    wire = runs["wire"]["timings"]["phases"]
    serial = runs["serial"]["timings"]["phases"]
    assert set(wire) >= {"clause", "reopen", "crash_windows"}
    # over the wire: processes started (a reopen test starts one; every crash window's worker
    # starts its adapter) and round trips; in process: neither
    assert wire["reopen"]["starts"] >= 1 and wire["crash_windows"]["starts"] >= wire["crash_windows"]["workers"] > 0
    assert wire["clause"]["round_trips"] > 0 and wire["crash_windows"]["round_trips"] > 0
    assert all(p["starts"] == 0 and p["round_trips"] == 0 for p in serial.values())
    assert serial["crash_windows"]["workers"] > 0
    # the phases add up to the tests they count
    for doc in runs.values():
        phases = doc["timings"]["phases"]
        assert sum(p["count"] for p in phases.values()) == len(doc["tests"])


def test_the_comparison_tells_different_runs_apart(runs: dict[str, dict]) -> None:
    serial = runs["serial"]
    changed = copy.deepcopy(serial)
    clause = next(c for c in changed["clauses"] if c["outcome"] == "pass")
    clause["outcome"], clause["failed"] = "fail", 1
    assert differences(serial, changed) == [f"clauses.{clause['id']}: " + repr(decided(serial)["clauses"][clause["id"]])
                                             + " != " + repr(decided(changed)["clauses"][clause["id"]])]
    window = copy.deepcopy(serial)
    window["crash_windows"][0]["verdict"] = "fail"
    assert [line.split(":")[0] for line in differences(serial, window)] == ["crash_windows"]
    fewer = copy.deepcopy(serial)
    fewer["tests"].pop()
    assert differences(serial, fewer)
    # across transports a test skipped in one run is no difference, a different outcome is
    ran = copy.deepcopy(serial)
    test = next(t for t in ran["tests"] if t["outcome"] == "passed")
    test["outcome"] = "skipped"
    assert differences(serial, ran, same_transport=False) == [] and differences(serial, ran)
    test["outcome"] = "failed"
    assert differences(serial, ran, same_transport=False) == [f"tests.{test['nodeid']}: 'passed' != 'failed'"]
    verdict = copy.deepcopy(serial)
    verdict["verdict"] = "NOT CERTIFIED"
    assert differences(serial, verdict) == [f"verdict: {serial['verdict']!r} != 'NOT CERTIFIED'"]
