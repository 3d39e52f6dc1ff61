"""Fail fast: the run's order (conformance/order.py) and a run stopped by -x/--maxfail."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from ledgercheck.conformance.order import order_items
from ledgercheck.reports.results import load_results, merged_incomplete

BROKEN = "python:ledgercheck.fixtures.testkit.broken:PromotesEarly"  # breaks retry.promote, a clause of a later profile


def _item(kind: str, profile: str = "", clause: str = "", param: str = "") -> SimpleNamespace:
    return SimpleNamespace(kind=kind, profile=profile, clause=clause, name=f"{profile}::{clause}[{param}]")


def test_order_puts_one_case_of_every_clause_first_then_each_family_then_the_rest_in_rounds() -> None:
    other = SimpleNamespace(name="test_not_a_ledger_test")  # no kind: keeps its place, first
    items = [_item("clause", "core", "core.a", "1"), _item("clause", "core", "core.a", "2"), _item("clause", "core", "core.a", "3"),
             _item("clause", "core", "core.a", "instant:lapse:1"), _item("clause", "core", "core.a", "instant:lapse:2"),
             _item("clause", "core", "core.b", "1"), _item("clause", "core", "core.b", "fence:x"), _item("clause", "core", "core.b", "2"),
             _item("clause", "core", "core.c", "1"), _item("clause", "spawn", "spawn.a", "1"), _item("clause", "spawn", "spawn.a", "2"),
             _item("stateful", "", "", "m"), _item("chaos", "recovery", "", "p"), _item("clause", "ask", "ask.a", "1"), other,
             _item("stateful", "", "", "n")]
    out = order_items(items)
    assert sorted(map(id, out)) == sorted(map(id, items))  # a permutation
    assert [it.name for it in out] == [
        "test_not_a_ledger_test",
        # phase 1: the first case of each clause, in the order generated
        "core::core.a[1]", "core::core.b[1]", "core::core.c[1]", "spawn::spawn.a[1]", "ask::ask.a[1]",
        # phase 2: the first case of every other family of a clause
        "core::core.a[instant:lapse:1]", "core::core.b[fence:x]",
        # phase 3: the rest in rounds (a clause's second remaining case after every clause's first)
        "core::core.a[2]", "core::core.b[2]", "spawn::spawn.a[2]", "core::core.a[3]", "core::core.a[instant:lapse:2]",
        # 4: the machines; 5: crash windows
        "::[m]", "::[n]", "recovery::[p]"]
    assert [it.name for it in order_items(items)] == [it.name for it in out]  # deterministic
    assert [it.name for it in order_items(out)] == [it.name for it in out]  # ordering an ordered run changes nothing


def _collected(tmp_path: Path, *args: str) -> list[str]:
    work = tmp_path / "collect"
    work.mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "pytest", str(work), "--rootdir", str(work), "-p", "no:cacheprovider", "-q",
                           "--collect-only", "--ledger-only", "--ledger-adapter", "reference", *args],
                          cwd=work, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [ln for ln in proc.stdout.splitlines() if ln.startswith("ledgercheck::")]


def test_a_collected_run_reaches_every_clause_before_any_second_case(tmp_path: Path) -> None:
    ids = _collected(tmp_path)
    kinds = ["chaos" if re.search(r"::(chaos|crash)\[|safety::campaign", n) else "stateful" if "::stateful::" in n else "clause"
             for n in ids]
    clause_of = [re.sub(r"\[.*$", "", n.split("::")[2]) if k == "clause" else None for n, k in zip(ids, kinds, strict=True)]
    clauses = {c for c in clause_of if c}
    head = clause_of[: len(clauses)]
    assert set(head) == clauses and len(set(head)) == len(head)  # one case of every clause, before any second case
    assert kinds == sorted(kinds, key=["clause", "stateful", "chaos"].index)  # machines after clauses, crash windows last
    generated = _collected(tmp_path, "--ledger-order", "generated")
    assert sorted(generated) == sorted(ids) and generated != ids  # the same tests, in another order


def _suite_x(suite, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "results.json"
    proc = suite(tmp_path, "--ledger-adapter", BROKEN, "--ledger-results", str(out), *args)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, load_results(str(out))


def _stopped_not_certified(proc: subprocess.CompletedProcess, doc: dict) -> None:
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]  # a failure found: 1, never 2
    assert doc["verdict"] == "NOT CERTIFIED" and doc["exit_code"] == 1 and doc["certified_profiles"] == []
    inc = doc["run"]["incomplete"]
    assert inc["reason"] == "stopped_after_failure"
    assert inc["tests"]["unfinished"] and inc["tests"]["finished"] < inc["tests"]["planned"]
    assert "retry.promote" in doc["verdict_line"]
    assert f"ran {inc['tests']['finished']} of {inc['tests']['planned']} tests" in doc["verdict_line"]
    failed = [t for t in doc["tests"] if t["outcome"] == "failed"]
    assert failed and {t["clause"] for t in failed} == {"retry.promote"}


def test_pytest_x_stops_at_the_failure_exits_1_and_says_what_was_not_run(tmp_path: Path, suite) -> None:
    proc, doc = _suite_x(suite, tmp_path, "-x")
    _stopped_not_certified(proc, doc)


def test_pytest_maxfail_under_xdist_also_exits_1(tmp_path: Path, suite) -> None:
    proc, doc = _suite_x(suite, tmp_path, "--maxfail", "1", "-p", "xdist", "-n", "2")
    _stopped_not_certified(proc, doc)


def test_certify_x_exits_1_not_certified(tmp_path: Path, cli) -> None:
    proc = cli("certify", "--adapter", BROKEN, "-x", "--json", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["verdict"] == "NOT CERTIFIED" and summary["exit_code"] == 1
    assert "(-x/--maxfail): ran" in summary["line"]
    bad = cli("certify", "--adapter", BROKEN, "--maxfail", "-3", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "--maxfail -3" in bad.stderr


def test_x_on_a_correct_ledger_stops_nothing(tmp_path: Path, suite) -> None:
    out = tmp_path / "results.json"
    proc = suite(tmp_path, "--ledger-adapter", "reference", "--ledger-results", str(out), "-x", "--ledger-clauses-only",
                 "--ledger-profile", "core")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = load_results(str(out))
    assert doc["run"]["incomplete"] is None and doc["verdict"] != "NOT CERTIFIED"


def test_merged_parts_name_an_interruption_before_a_stop_after_failure() -> None:
    def part(reason: str) -> dict:
        return {"reason": reason, "message": reason, "signal": None, "tests": {"planned": 2, "finished": 1, "unfinished": ["t"]},
                "crash_windows": {"points_planned": 0, "points_finished": 0, "finished": 0, "planned": 0}}

    assert merged_incomplete([{"incomplete": part("stopped_after_failure")}, {"incomplete": part("interrupted")}])["reason"] == "interrupted"
    assert merged_incomplete([{"incomplete": part("stopped_after_failure")}, {"incomplete": part("stopped_after_failure")}])["reason"] \
        == "stopped_after_failure"
