"""certify records its run in the history, shows what changed since the previous one, and loses
nothing when the history file cannot be used."""

from __future__ import annotations

import json
from pathlib import Path

from ledgercheck.reports.history import open_history
from ledgercheck.reports.results import load_results

# selects one clause's cases: a quick run (no case of every other clause ran, verdict INCONCLUSIVE) that
# still writes everything
QUICK = ("--adapter", "reference", "-k", "core.status.enum", "--no-chaos", "--quiet", "--seed", "5")


def test_certify_records_and_compares(cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"SQLite format 2\x00" + b"\xff" * 2000)
    r1 = cli("certify", *QUICK, "--out", str(tmp_path / "r1"), "--history", str(bad), cwd=tmp_path)
    assert r1.returncode == 2, r1.stderr  # the verdict's code (INCONCLUSIVE: the rest deselected), not the history's
    assert r1.stderr.strip().splitlines() == [
        f"ledgercheck certify: the run is not recorded in the history: {bad}: not a readable SQLite history "
        "(file is not a database)"]
    doc1 = load_results(tmp_path / "r1" / "results.json")
    assert (tmp_path / "r1" / "report.html").exists() and bad.read_bytes().startswith(b"SQLite format 2")
    assert not (tmp_path / "history.db").exists()

    # a history whose last run of the reference is run 1 with that clause failing
    history = tmp_path / "history.db"
    assert doc1["clauses"][0]["id"] == "core.status.enum" and doc1["clauses"][0]["outcome"] == "pass"
    doc1["clauses"][0]["outcome"] = "fail"
    h = open_history(history)
    h.append(doc1)
    h.close()
    r2 = cli("certify", *QUICK, "--out", str(tmp_path / "r2"), "--json", cwd=tmp_path)
    assert r2.returncode == 2, r2.stderr
    assert json.loads(r2.stdout[r2.stdout.index("{"):])["files"]["history"] == str(history)  # (after the progress dots)
    md = (tmp_path / "r2" / "summary.md").read_text()
    first = doc1["clauses"][0]["id"]
    assert f"**Since the previous run** (run `{doc1['run']['id']}`" in md
    assert f"| `{first}` | fixed | `fail` | `pass` |" in md
    assert 'id="since"' in (tmp_path / "r2" / "report.html").read_text()
    h = open_history(history, create=False)
    assert len(h.runs("ledgercheck-reference")) == 2

