"""certify records its run in the history, shows what changed since the previous one, and loses
nothing when the history file cannot be used."""

from __future__ import annotations

import json
from pathlib import Path

from ledgercheck.reports.history import open_history
from ledgercheck.reports.results import load_results

# selects no test: a quick run (every clause undecided, verdict ERROR) that still writes everything
QUICK = ("--adapter", "reference", "-k", "zzz_selects_nothing", "--no-chaos", "--quiet", "--seed", "5")


def test_certify_records_and_compares(cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"SQLite format 2\x00" + b"\xff" * 2000)
    r1 = cli("certify", *QUICK, "--out", str(tmp_path / "r1"), "--history", str(bad), cwd=tmp_path)
    assert r1.returncode == 2, r1.stderr  # the verdict's code (ERROR: nothing selected), not the history's
    assert r1.stderr.strip().splitlines() == [
        f"ledgercheck certify: the run is not recorded in the history: {bad}: not a readable SQLite history "
        "(file is not a database)"]
    doc1 = load_results(tmp_path / "r1" / "results.json")
    assert (tmp_path / "r1" / "report.html").exists() and bad.read_bytes().startswith(b"SQLite format 2")
    assert not (tmp_path / "history.db").exists()

    # a history whose last run of the reference is run 1 with one clause passing
    history = tmp_path / "history.db"
    doc1["clauses"][0]["outcome"] = "pass"
    h = open_history(history)
    h.append(doc1)
    h.close()
    r2 = cli("certify", *QUICK, "--out", str(tmp_path / "r2"), "--json", cwd=tmp_path)
    assert r2.returncode == 2, r2.stderr
    assert json.loads(r2.stdout)["files"]["history"] == str(history)
    md = (tmp_path / "r2" / "summary.md").read_text()
    first = doc1["clauses"][0]["id"]
    assert f"**Since the previous run** (run `{doc1['run']['id']}`" in md
    assert f"| `{first}` | regressed | `pass` | `error` |" in md
    assert 'id="since"' in (tmp_path / "r2" / "report.html").read_text()
    h = open_history(history, create=False)
    assert len(h.runs("ledgercheck-reference")) == 2

