"""The results history (ledgercheck.reports.history): a real SQLite file made and read with
sqlite-utils, comparisons of synthetic runs, files that are not a history, and the commands."""

from __future__ import annotations

import copy
import json
import sqlite3
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import sqlite_utils
from ledgercheck.reports.history import (
    HistoryError,
    beside,
    compare,
    open_history,
    record_run,
    since_previous,
    summary,
)
from ledgercheck.reports.html_report import render_html
from ledgercheck.reports.markdown_report import render_markdown
from ledgercheck.reports.results import write_results

from ledgercheck.cli import main

DAY1 = {"id": "run-day1", "started_at": "2025-03-14T09:00:00.000Z", "finished_at": "2025-03-14T09:05:00.000Z"}
DAY2 = {"id": "run-day2", "started_at": "2025-03-15T09:00:00.000Z", "finished_at": "2025-03-15T09:05:00.000Z"}
DAY3 = {"id": "run-day3", "started_at": "2025-03-16T09:00:00.000Z", "finished_at": "2025-03-16T09:05:00.000Z"}


def _doc(factory, run: dict[str, Any], outcomes: dict[str, list[str]] | None = None, **adapter: Any) -> dict[str, Any]:
    """A whole run of acme-ledger 2.4.1 with no known bugs: every claimed clause passes except ``outcomes``."""
    return factory.build(tests=factory.tests(outcomes=outcomes, known_bugs=(), failing=()), windows=factory.windows(bad=()),
                         run=factory.run(**run), adapter=factory.adapter(known_bugs={}, **adapter))


def _outcome(doc: dict[str, Any], clause: str) -> str:
    return next(c["outcome"] for c in doc["clauses"] if c["id"] == clause)


def _schema() -> dict[str, Any]:
    return json.loads(resources.files("ledgercheck.reports").joinpath("schema/history.schema.json").read_text("utf-8"))


# ---- the file ------------------------------------------------------------------------------------


def test_round_trip_plain_tables(factory, tmp_path: Path) -> None:
    doc = copy.deepcopy(factory.build(run=factory.run(**DAY1)))
    # fields other producers add later: recorded when present
    doc["run"]["incomplete"] = {"reason": "budget spent", "remaining": 3}
    doc["safety"] = {"anomalies": [{"class": "duplicate_effect", "clause": "idem.fenced", "excerpt": [17, 18]}],
                     "observations": {"kills": 4}}
    path = tmp_path / "h" / "history.db"
    h = open_history(path)
    rid = h.append(doc, "out/results.json")
    assert h.append(doc) is None, "the same document twice is recorded once"
    h.close()

    db = sqlite_utils.Database(path)
    assert set(db.table_names()) == {"meta", "runs", "clause_outcomes", "crash_windows", "safety_anomalies"}
    run = db["runs"].get(rid)
    a, s = doc["adapter"], doc["spec"]
    assert (run["adapter_name"], run["adapter_version"], run["build_digest"]) == (a["name"], a["version"], a["artifact_sha256"])
    assert (run["contract_digest"], run["contract_version"], run["seed"]) == (s["digest"], s["version"], 1234)
    assert run["verdict"] == doc["verdict"] == "NOT CERTIFIED" and run["exit_code"] == 1
    assert json.loads(run["environment"]) == doc["environment"]
    assert json.loads(run["incomplete"]) == {"reason": "budget spent", "remaining": 3}
    assert run["results_path"] == "out/results.json" and run["shard"] is None
    stored = {r["clause"]: r["outcome"] for r in db["clause_outcomes"].rows_where("run = ?", [rid])}
    assert stored == {c["id"]: c["outcome"] for c in doc["clauses"]}
    assert db["crash_windows"].count == len(doc["crash_windows"])
    assert [r["verdict"] for r in db["crash_windows"].rows_where("verdict != 'pass'")] == ["fail"]
    anomaly = next(db["safety_anomalies"].rows)
    assert (anomaly["kind"], anomaly["clause"]) == ("duplicate_effect", "idem.fenced")
    assert json.loads(anomaly["detail"])["excerpt"] == [17, 18]
    # plain tables: foreign keys and indexes a tool can see and use
    assert {(fk.column, fk.other_table, fk.other_column) for fk in db["clause_outcomes"].foreign_keys} == {("run", "runs", "id")}
    assert {(fk.column, fk.other_table) for fk in db["safety_anomalies"].foreign_keys} == {("run", "runs")}
    assert any(ix.columns == ["clause"] for ix in db["clause_outcomes"].indexes)
    with pytest.raises(sqlite3.IntegrityError):
        db.conn.execute("PRAGMA foreign_keys = ON")
        db.conn.execute("INSERT INTO clause_outcomes (run, clause, outcome) VALUES (999, 'x', 'pass')")


def test_an_outcome_kind_added_later_needs_no_schema_change(factory, tmp_path: Path) -> None:
    doc = copy.deepcopy(_doc(factory, DAY1))
    doc["clauses"][0]["outcome"] = "not_offered"
    h = open_history(tmp_path / "history.db")
    rid = h.append(doc)
    assert h.outcomes(rid)[doc["clauses"][0]["id"]] == "not_offered"
    assert h.outcome_counts(rid)["not_offered"] == 1


def test_run_error_and_shard_are_recorded(factory, tmp_path: Path) -> None:
    shard = _doc(factory, {**DAY1, "shard": {"index": 2, "count": 3}, "error": "adapter died"})
    h = open_history(tmp_path / "history.db")
    rid = h.append(shard)
    row = h.db["runs"].get(rid)
    assert (row["shard"], row["error"], row["verdict"]) == ("2/3", "adapter died", "ERROR")


# ---- comparisons ---------------------------------------------------------------------------------


def test_regressions_and_fixes_since_the_previous_run(factory, tmp_path: Path) -> None:
    day1 = _doc(factory, DAY1, {"lease.fencing": ["passed"], "retry.cap": ["failed"], "core.claim.order": ["failed"]})
    day2 = _doc(factory, DAY2, {"lease.fencing": ["failed"], "retry.cap": ["passed"], "core.claim.order": ["error"]},
                version="2.5.0")
    assert compare({"a": "pass", "b": "fail", "c": "not_claimed", "d": "fail"},
                   {"a": "fail", "b": "pass", "c": "pass", "d": "fail"}).regressed == [("a", "pass", "fail")]
    h = open_history(tmp_path / "history.db")
    h.append(day1)
    since = since_previous(h, day2)
    assert since is not None and since["previous"]["run_id"] == "run-day1" and since["same_contract"]
    assert since["regressed"] == [{"clause": "lease.fencing", "before": "pass", "after": "fail"}]
    assert since["fixed"] == [{"clause": "retry.cap", "before": "fail", "after": "pass"}]
    assert since["changed"] == [{"clause": "core.claim.order", "before": "fail", "after": "error"}]
    assert since["flaky"] == [], "another version is another build: a change is not flakiness"
    h.append(day2)
    s = summary(h)
    (a,) = s["adapters"]
    assert a["adapter"] == "acme-ledger" and a["runs"] == 2
    assert [r["run_id"] for r in a["trend"]] == ["run-day1", "run-day2"]
    assert a["trend"][1]["outcomes"]["fail"] == 1 and a["trend"][1]["outcomes"]["error"] == 1
    assert a["since_previous"]["regressed"] == since["regressed"] and a["flaky"] == []
    jsonschema.validate(s, _schema())


def test_flaky_clauses_within_one_build_and_contract(factory, tmp_path: Path) -> None:
    h = open_history(tmp_path / "history.db")
    h.append(_doc(factory, DAY1))
    h.append(_doc(factory, DAY2, {"lease.fencing": ["failed"]}))
    h.append(_doc(factory, DAY3))
    # not flakiness: another build, a shard, and a profile that was not claimed
    h.append(_doc(factory, {**DAY3, "id": "run-other-build"}, {"retry.cap": ["failed"]}, artifact_sha256="ab" * 32))
    h.append(_doc(factory, {**DAY2, "id": "run-shard", "shard": {"index": 1, "count": 2}}, {"retry.cap": ["failed"]}))
    s = summary(h)
    (a,) = s["adapters"]
    assert a["shard_runs"] == 1
    flaky = [(f["clause"], f["runs"], f["outcomes"], f["build"]["build_digest"]) for f in a["flaky"]]
    assert flaky == [("lease.fencing", 3, {"fail": 1, "pass": 2}, "5f" * 32)]
    # the latest whole run is the other build; it is compared with day 3 (the shard is skipped)
    assert a["since_previous"]["previous"]["run_id"] == "run-day3"
    assert a["since_previous"]["regressed"] == [{"clause": "retry.cap", "before": "pass", "after": "fail"}]
    jsonschema.validate(s, _schema())
    # a report of a fourth run of the first build names the flaky clause too
    since = since_previous(h, _doc(factory, {**DAY3, "id": "run-day4", "started_at": "2025-03-17T09:00:00.000Z"}))
    assert since is not None and [f["clause"] for f in since["flaky"]] == ["lease.fencing"]


def test_schema_refuses_what_the_summary_never_says(factory, tmp_path: Path) -> None:
    h = open_history(tmp_path / "history.db")
    h.append(_doc(factory, DAY1))
    s = summary(h)
    jsonschema.validate(s, _schema())
    bad = copy.deepcopy(s)
    bad["adapters"][0]["since_previous"] = {"regressed": []}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, _schema())
    bad = copy.deepcopy(s)
    bad["adapters"][0]["trend"][0]["outcomes"]["pass"] = "77"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, _schema())


# ---- files that are not a history -------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["garbage", "foreign", "newer", "truncated"])
def test_not_a_history_is_one_line_and_left_alone(factory, tmp_path: Path, kind: str) -> None:
    path = tmp_path / "history.db"
    if kind == "garbage":
        path.write_bytes(b"this is not a database\n" * 50)
    elif kind == "foreign":
        sqlite_utils.Database(path)["users"].insert({"id": 1, "name": "ada"}, pk="id")
    elif kind == "newer":
        open_history(path).close()
        sqlite_utils.Database(path).execute("UPDATE meta SET value = '9' WHERE key = 'version'").connection.commit()
    else:
        h = open_history(path)
        h.append(_doc(factory, DAY1))
        h.close()
        path.write_bytes(path.read_bytes()[:3000])
    before = path.read_bytes()
    with pytest.raises(HistoryError) as info:
        open_history(path)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(str(path))
    assert {"garbage": "not a readable SQLite", "foreign": "not a ledgercheck history", "newer": "version '9'",
            "truncated": "history"}[kind] in msg
    # the run still gets its files; the history problem comes back as one line; the file is untouched
    doc = _doc(factory, DAY2)
    out = tmp_path / "out"
    paths, problem = record_run(path, doc, lambda since: {"results": (out.mkdir() or str(out / "results.json"))})
    assert paths == {"results": str(out / "results.json")} and problem == msg
    assert path.read_bytes() == before


def test_report_history_command(factory, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "history.db"
    assert main(["report", "history", "--history", str(path)]) == 2
    assert "no history there" in capsys.readouterr().err
    path.write_bytes(b"\x00" * 4096)
    assert main(["report", "history", "--history", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ledgercheck report: ")
    path.unlink()
    h = open_history(path)
    h.append(_doc(factory, DAY1))
    h.append(_doc(factory, DAY2, {"lease.fencing": ["failed"]}))
    h.close()
    assert main(["report", "history", "--history", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, _schema())
    assert doc["adapters"][0]["since_previous"]["regressed"][0]["clause"] == "lease.fencing"
    assert main(["report", "history", "--history", str(path)]) == 0
    text = capsys.readouterr().out
    assert "acme-ledger: 2 run(s)" in text and "regressed lease.fencing: pass -> fail" in text
    assert main(["report", "history", "--history", str(path), "--adapter", "nope"]) == 2
    assert "no runs of adapter 'nope' (recorded: acme-ledger)" in capsys.readouterr().err
    # re-rendering a run's reports with the history shows what changed since the run before it
    results = tmp_path / "day3" / "results.json"
    write_results(_doc(factory, DAY3), results)
    assert main(["report", "render", str(results), "--history", str(path)]) == 0
    md = (results.parent / "summary.md").read_text()
    assert "**Since the previous run** (run `run-day2`" in md and "| `lease.fencing` | fixed |" in md
    assert main(["report", "render", str(results), "--history", str(tmp_path / "none.db")]) == 2


def test_merge_appends_the_merged_run(factory, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tests = factory.tests(known_bugs=(), failing=())
    parts = []
    for k in (1, 2):
        part = factory.build(tests=tests[k - 1::2], windows=factory.windows(bad=()) if k == 1 else [],
                             run=factory.run(id=f"run-shard{k}", shard={"index": k, "count": 2}),
                             adapter=factory.adapter(known_bugs={}))
        p = tmp_path / f"shard{k}" / "results.json"
        write_results(part, p)
        parts.append(str(p))
    out = tmp_path / "merged" / "results.json"
    assert main(["report", "merge", *parts, "-o", str(out), "--no-history"]) == 0
    assert not (tmp_path / "history.db").exists()
    assert main(["report", "merge", *parts, "-o", str(out)]) == 0
    assert beside(out.parent) == tmp_path / "history.db"
    h = open_history(tmp_path / "history.db", create=False)
    (run,) = h.runs("acme-ledger")
    assert run["shard"] is None and run["parts"] == 2 and run["verdict"] == "CERTIFIED"
    # a history that is not one: the merged file is still written, the problem is one line
    bad = tmp_path / "bad.db"
    bad.write_text("not sqlite")
    out.unlink()
    capsys.readouterr()
    assert main(["report", "merge", *parts, "-o", str(out), "--history", str(bad)]) == 0
    assert out.exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not recorded in the history" in err and str(bad) in err


def test_reports_say_what_changed_since_the_previous_run(factory, tmp_path: Path) -> None:
    h = open_history(tmp_path / "history.db")
    h.append(_doc(factory, DAY1))
    h.append(_doc(factory, DAY2, {"lease.fencing": ["failed"]}))
    day3 = _doc(factory, DAY3, {"core.claim.order": ["failed"]})
    since = since_previous(h, day3)
    assert since is not None
    md = render_markdown(day3, since=since)
    assert "**Since the previous run** (run `run-day2`" in md
    assert "| `lease.fencing` | fixed | `fail` | `pass` |" in md
    assert "| `core.claim.order` | regressed | `pass` | `fail` |" in md
    assert "Flaky across runs of this build and contract (2)" in md
    page = render_html(day3, since=since)
    assert '<section id="since">' in page and '<a href="#since">' in page
    assert '<tr data-change="regressed"><td><code>core.claim.order</code>' in page
    assert '<li data-flaky="lease.fencing">' in page
    assert "Since the previous run" not in render_markdown(day3) and 'id="since"' not in render_html(day3)


def test_record_run_hands_the_comparison_to_the_writer(factory, tmp_path: Path) -> None:
    path = tmp_path / "runs" / "history.db"
    seen: list[Any] = []

    def write(since: Any) -> dict[str, str]:
        seen.append(since)
        return {"results": "r.json"}

    assert record_run(path, _doc(factory, DAY1), write) == ({"results": "r.json", "history": str(path)}, None)
    assert record_run(path, _doc(factory, DAY2, {"lease.fencing": ["failed"]}), write)[1] is None
    assert record_run(None, _doc(factory, DAY3), write) == ({"results": "r.json"}, None)
    assert seen[0] is None and seen[2] is None
    assert seen[1]["regressed"] == [{"clause": "lease.fencing", "before": "pass", "after": "fail"}]
    assert [r["run_id"] for r in open_history(path, create=False).runs("acme-ledger")] == ["run-day1", "run-day2"]


def test_concurrent_runs_all_recorded(factory, tmp_path: Path) -> None:
    """Four processes record their runs in one new history at once: each waits its turn, none is lost."""
    import subprocess
    import sys

    history = tmp_path / "history.db"
    procs = []
    for i in range(4):
        part = tmp_path / f"run{i}" / "results.json"
        write_results(_doc(factory, {**DAY1, "id": f"run-{i}"}), part)
        procs.append(subprocess.Popen([sys.executable, "-m", "ledgercheck", "report", "merge", str(part), "-o",
                                       str(tmp_path / f"merged{i}" / "results.json"), "--history", str(history)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0 and not err, err
    h = open_history(history, create=False)
    runs = h.runs("acme-ledger")
    assert len(runs) == 4 and len({r["results_sha256"] for r in runs}) == 4
    assert h.db["clause_outcomes"].count == 4 * len(_doc(factory, DAY1)["clauses"])


def test_a_writer_waits_out_a_long_lock(factory, tmp_path: Path, monkeypatch) -> None:
    """Another process holds the history's write lock for longer than SQLite's busy timeout: the
    run's row is written once the lock is released, never dropped (and it gives up, in one line,
    only after LOCK_PATIENCE of locked attempts)."""
    import threading

    from ledgercheck.reports import history as hmod

    path = tmp_path / "history.db"
    open_history(path).close()
    monkeypatch.setattr(hmod, "BUSY_TIMEOUT", 0.01)  # each attempt gives up at once ...
    tries: list[int] = []
    real_locked = hmod._locked
    monkeypatch.setattr(hmod, "_locked", lambda exc: tries.append(1) or real_locked(exc))
    holder = sqlite3.connect(str(path), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # ... while this writer keeps the file locked
    outcome: list[Any] = []

    def record() -> None:
        mine = open_history(path)  # reading needs no write lock
        try:
            outcome.append(mine.append(_doc(factory, DAY1), "r1.json"))
        finally:
            mine.close()

    t = threading.Thread(target=record)
    t.start()
    while len(tries) < 5 and t.is_alive():  # it found the file locked, again and again
        threading.Event().wait(0.01)
    assert t.is_alive() and not outcome, outcome
    holder.execute("ROLLBACK")
    t.join()
    assert isinstance(outcome[0], int), outcome
    h = open_history(path)
    assert [r["run_id"] for r in h.runs("acme-ledger")] == ["run-day1"]

    monkeypatch.setattr(hmod, "LOCK_PATIENCE", 0.0)  # no patience: one locked attempt, then one line
    holder.execute("BEGIN IMMEDIATE")
    with pytest.raises(HistoryError) as err:
        h.append(_doc(factory, DAY2))
    holder.execute("ROLLBACK")
    assert "cannot record the run: database is locked (another process kept it locked" in str(err.value)
    assert "\n" not in str(err.value)
    h.close()
    holder.close()
