"""Runs in one folder never overwrite each other: certify runs started together each get a report
folder of their own (made atomically, named by time plus a unique suffix), each run's row reaches
the shared history, and a folder named with --out that another run is writing to is refused
before anything runs (reports/outdirs.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from ledgercheck.reports import outdirs
from ledgercheck.reports.history import open_history
from ledgercheck.reports.results import load_results

HERE = Path(__file__).resolve().parent
RUNS = 4
# one clause test of core: cheap, and still a whole run (report files and a history row)
ONE_CLAUSE = ("--profile", "core", "--no-chaos", "--hypothesis-profile", "smoke", "-k", "core.status.enum",
              "--seed", "7", "--json", "--quiet")


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def test_runs_started_together_keep_their_own_reports_and_rows(tmp_path: Path) -> None:
    """Four certify runs pass their adapter's handshake together and ask for report folders in the
    same second (the adapter stops the folder clock): four folders, four intact reports, four rows."""
    gate = tmp_path / "gate"
    gate.mkdir()
    env = _env(LEDGERCHECK_TOGETHER_DIR=str(gate), LEDGERCHECK_TOGETHER_N=str(RUNS))
    procs = [subprocess.Popen([sys.executable, "-m", "ledgercheck", "certify", "--adapter",
                               "python:adapters_together:Together", *ONE_CLAUSE],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(RUNS)]
    summaries = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 2, err[-3000:]  # ERROR: the clauses -k left out are undecided
        assert "not recorded in the history" not in err, err
        summaries.append(json.loads(out))
    folders = {Path(s["files"]["results"]).parent for s in summaries}
    assert len(folders) == RUNS, folders
    assert all(f.parent == Path("reports/out/ledgercheck-reference") for f in folders), folders
    assert all(f.name.startswith("20250101T000000Z-") for f in folders), folders  # sortable by start time
    run_ids = set()
    for f in folders:
        files = {p.name for p in (tmp_path / f).iterdir()}
        assert files == {"results.json", "results.json.sha256", "report.html", "summary.md", "junit.xml"}, files
        doc = load_results(tmp_path / f / "results.json")  # intact: its integrity hash and sidecar hold
        assert doc["verdict"] == "ERROR" and [t["outcome"] for t in doc["tests"]] == ["passed"] * len(doc["tests"])
        assert doc["run"]["id"] in (tmp_path / f / "report.html").read_text(encoding="utf-8")
        run_ids.add(doc["run"]["id"])
    assert len(run_ids) == RUNS
    h = open_history(tmp_path / "reports" / "out" / "history.db", create=False)
    rows = h.runs("ledgercheck-reference")
    h.close()
    assert sorted(r["run_id"] for r in rows) == sorted(run_ids)  # exactly one row per run
    assert {Path(r["results_path"]).parent for r in rows} == folders


def test_a_named_folder_in_use_is_refused_before_the_run(tmp_path: Path) -> None:
    out = tmp_path / "shared"
    cmd = [sys.executable, "-m", "ledgercheck", "certify", "--adapter", "reference", *ONE_CLAUSE, "--out", str(out)]
    with outdirs.held(out, "certify run"):  # another run is writing there
        busy = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    assert busy.returncode == 2, busy.stderr
    assert busy.stderr.splitlines() == [
        f"ledgercheck certify: --out {out}: another certify run is writing to this folder now; name another "
        "folder (or leave the default, a new folder per run)"]
    assert list(out.iterdir()) == [] and not (tmp_path / "history.db").exists()
    done = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and "ledgercheck certify" not in done.stderr, done.stderr[-3000:]  # once it is free, the folder is used as named
    assert (out / "report.html").is_file() and len(open_history(tmp_path / "history.db").runs("ledgercheck-reference")) == 1


def test_new_run_folders_are_unique_within_one_second(tmp_path: Path, monkeypatch) -> None:
    """Many threads ask for a folder under one stopped clock: each gets its own, made by one mkdir."""
    monkeypatch.setattr(outdirs, "stamp", lambda t=None: "20250101T000000Z")
    made: list[Path] = []
    start = threading.Barrier(32)

    def one() -> None:
        start.wait()
        made.append(outdirs.new_run_folder(tmp_path / "out"))

    threads = [threading.Thread(target=one) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(made)) == 32 and all(p.is_dir() and not any(p.iterdir()) for p in made)
    # a name already taken is never reused: with the suffixes drawn to collide, the next draw is used
    draws = iter(["aaaaaa", "aaaaaa", "bbbbbb"])
    monkeypatch.setattr(outdirs.secrets, "token_hex", lambda n: next(draws))
    first, second = outdirs.new_run_folder(tmp_path / "o2"), outdirs.new_run_folder(tmp_path / "o2")
    assert (first.name, second.name) == ("20250101T000000Z-aaaaaa", "20250101T000000Z-bbbbbb")
    # names sort by start time
    monkeypatch.setattr(outdirs, "stamp", lambda t=None: "20250101T000001Z")
    monkeypatch.setattr(outdirs.secrets, "token_hex", lambda n: "000000")
    later = outdirs.new_run_folder(tmp_path / "o2")
    assert sorted(p.name for p in (tmp_path / "o2").iterdir())[-1] == later.name


def test_a_held_folder_is_refused_in_process_too(tmp_path: Path) -> None:
    import pytest

    with outdirs.held(tmp_path / "d", "safety campaign"):
        with pytest.raises(outdirs.FolderBusy, match="another safety campaign is writing to this folder"):
            with outdirs.held(tmp_path / "d", "safety campaign"):
                pass
    with outdirs.held(tmp_path / "d"):  # released
        pass
    (tmp_path / "f").write_text("x")
    with pytest.raises(outdirs.FolderBusy, match="not a folder"):
        with outdirs.held(tmp_path / "f"):
            pass


def test_a_safety_campaign_refuses_a_folder_another_campaign_writes(tmp_path: Path, capsys) -> None:
    """Two campaigns in one --out folder would mix their processes' history files: the second is
    refused in one line before anything starts."""
    from ledgercheck.cli import main

    out = tmp_path / "camp"
    with outdirs.held(out, "safety campaign"):
        rc = main(["safety", "--adapter", "reference", "--items", "4", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and err.splitlines() == [
        f"ledgercheck safety: --out {out}: another safety campaign is writing to this folder now; name another "
        "folder (or leave the default, a new folder per run)"], err
    assert list(out.iterdir()) == []
