"""`ledgercheck report render|merge|show`."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from ledgercheck.reports import commands
from ledgercheck.reports.render import verdict_line
from ledgercheck.reports.results import load_results, write_results


def run(argv: list[str]) -> int:
    """Our subcommands through a parser of their own, so this file tests them even while other parts of
    the command line are being changed; test_cli_entry_point covers the real `ledgercheck` program."""
    parser = argparse.ArgumentParser(prog="ledgercheck")
    commands.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.fixture
def results(realistic, tmp_path: Path) -> Path:
    path = tmp_path / "run" / "results.json"
    write_results(realistic, path)
    return path


def one_line_error(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"ledgercheck report: {path}: "), err
    return err


def test_render_writes_all_formats_next_to_the_results(results: Path, capsys) -> None:
    assert run(["report", "render", str(results)]) == 0
    out = results.parent
    assert capsys.readouterr().out.split() == [str(out / "report.html"), str(out / "summary.md"), str(out / "junit.xml")]
    sha = results.with_name("results.json.sha256").read_text().split()[0]
    assert sha in (out / "report.html").read_text()
    ET.parse(out / "junit.xml")


def test_render_chosen_formats_elsewhere(results: Path, tmp_path: Path) -> None:
    out = tmp_path / "site"
    assert run(["report", "render", str(results), "--out", str(out), "--format", "md,junit"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["junit.xml", "summary.md"]


def test_render_refuses_a_truncated_file(results: Path, capsys) -> None:
    data = results.read_bytes()
    results.write_bytes(data[:-200])
    assert run(["report", "render", str(results)]) == 2
    assert "not valid JSON (the file looks truncated)" in one_line_error(capsys, results)
    assert not (results.parent / "report.html").exists()


def test_render_refuses_an_edited_file(results: Path, capsys) -> None:
    results.write_text(results.read_text().replace('"verdict": "NOT CERTIFIED"', '"verdict": "CERTIFIED"', 1))
    assert run(["report", "render", str(results)]) == 2
    assert "does not match its integrity hash" in one_line_error(capsys, results)


def test_render_refuses_an_unknown_format(results: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        run(["report", "render", str(results), "--format", "html,pdf"])
    assert exc.value.code == 2 and "unknown format(s) pdf" in capsys.readouterr().err


def test_merge(factory, tmp_path: Path, capsys) -> None:
    tests = factory.tests()
    parts = []
    for k in (1, 2):
        doc = factory.build(tests=tests[k - 1::2], windows=factory.windows()[k - 1::2],
                            run=factory.run(id=f"s{k}", shard={"index": k, "count": 2}))
        parts.append(tmp_path / f"part{k}.json")
        write_results(doc, parts[-1])
    out = tmp_path / "merged.json"
    assert run(["report", "merge", *map(str, parts), "-o", str(out)]) == 0
    merged = load_results(out)
    assert capsys.readouterr().out.startswith(f"{out}: {verdict_line(merged)} (sha256 ")
    assert merged["verdict"] == "NOT CERTIFIED" and len(merged["run"]["parts"]) == 2
    assert run(["report", "merge", str(parts[0]), str(parts[0]), "-o", str(tmp_path / "x.json")]) == 2
    assert "appears twice" in capsys.readouterr().err
    parts[1].write_text("{")
    assert run(["report", "merge", *map(str, parts), "-o", str(tmp_path / "y.json")]) == 2
    assert one_line_error(capsys, parts[1])


def test_show(results: Path, realistic, capsys) -> None:
    assert run(["report", "show", str(results)]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0] == verdict_line(realistic)
    assert "lease         failed               12    11     1      0      0    0" in text
    assert "replay: ledgercheck replay --adapter exec:./bin/acme-ledger --clause lease.fencing --seed 1234" in text
    assert run(["report", "show", str(results), "--json", "--exit-code"]) == 1
    summary = json.loads(capsys.readouterr().out)
    assert summary["verdict"] == "NOT CERTIFIED" and summary["exit_code"] == 1
    # worst first: ownership (lease.fencing), integrity (the recovery clauses), behaviour (retry.cap)
    assert [f["id"] for f in summary["failures"]] == ["lease.fencing", "recovery.matrix", "recovery.effects_allowed",
                                                      "retry.cap"]
    assert summary["warnings"][0]["id"] == "core.claim.order" and summary["profiles"]["inbox"] == "not_claimed"


def test_cli_entry_point(results: Path, realistic, capsys) -> None:
    from ledgercheck.cli import main

    assert main(["report", "show", str(results), "--exit-code"]) == 1  # the verdict's exit code reaches the shell
    assert capsys.readouterr().out.splitlines()[0] == verdict_line(realistic)
    results.write_text('{"format": "ledgercheck-results", "format_version": 1')
    proc = subprocess.run([sys.executable, "-m", "ledgercheck", "report", "render", str(results)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and str(results) in proc.stderr and "Traceback" not in proc.stderr
