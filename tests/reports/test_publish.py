"""The published library page (``python -m ledgercheck.fixtures.libraries.publish``), rendered from the
published results in docs/libraries without certifying anything again: verdicts worst first in
the contract's words, and every finding either confirmed by a script that uses the library alone
(linked) or marked as possibly the adapter's mapping."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ledgercheck.fixtures.libraries.publish import (
    UNCONFIRMED,
    ConfirmationsError,
    _page,
    main,
    published_rows,
    read_confirmations,
)
from ledgercheck.reports.verdicts import ANOMALY_WORDS, anomaly_counts
from ledgercheck.spec import default_spec

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "libraries"
REGISTRY = ROOT / "tests" / "fixtures" / "confirmations.yaml"


@pytest.fixture(scope="module")
def page() -> str:
    rows = published_rows(OUT)
    assert rows is not None
    return _page(OUT, rows, read_confirmations(REGISTRY))


def _row(page: str, title: str) -> list[str]:
    line = next(x for x in page.splitlines() if x.startswith(f"| [{title}]("))
    return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]


def _named(verdict: str) -> list[str]:
    """The clause ids a verdict line names in words, in order (before the count of the rest)."""
    return re.findall(r"\(([a-z_]+(?:\.[a-z_]+)+)(?:, known bug)?\)", verdict.split("; ")[1 if verdict.startswith("UNSAFE") else 0])


def _published(name: str) -> dict:
    return json.loads((OUT / name / "results.json").read_text(encoding="utf-8"))


def test_the_libraries_that_accept_stale_writes_lead_with_it(page: str) -> None:
    """pgqueuer, procrastinate and rq accept a stale holder's close-out (each confirmed with the
    library alone): their verdicts lead with what their own published results show worst, never
    with field validation."""
    contract = {c.id: c for c in default_spec().clauses}
    for title in ("pgqueuer", "procrastinate", "rq"):
        verdict = _row(page, title)[2]
        counts = anomaly_counts(_published(title))
        if counts:  # the campaign's anomalies lead, in the verdict's words, each with its count
            assert verdict.startswith("UNSAFE: "), verdict
            head = verdict.split("; ", 1)[0].removeprefix("UNSAFE: ")
            for kind, n in counts.items():
                assert f"{ANOMALY_WORDS[kind]} ({n})" in head, verdict
        else:
            assert verdict.startswith("NOT CERTIFIED: "), verdict
        named = _named(verdict)
        assert len(named) == 3, verdict
        assert "lease.fencing" in named and "accepts a stale holder's writes (lease.fencing)" in verdict, verdict
        assert {contract[c].impact for c in named} == {"ownership"}, verdict
        # field validation is counted, not named first
        assert "core.create.source_system" not in verdict and "input validation" in verdict, verdict


def test_the_published_verdicts_follow_from_the_published_facts(page: str) -> None:
    reference = _row(page, "the reference ledger (for comparison)")
    assert reference[2].startswith("CERTIFIED for profiles core, trail") and reference[3] == "0"
    reg = read_confirmations(REGISTRY)
    for name, title in (("dbos", "DBOS"), ("persist-queue", "persist-queue"), ("pgqueuer", "pgqueuer"),
                        ("procrastinate", "procrastinate"), ("rq", "rq")):
        row = _row(page, title)
        counts = anomaly_counts(_published(name))
        if not counts:
            assert row[3] == "0", row
            continue
        assert row[2].startswith("UNSAFE: "), row
        cells = row[3].split(", ")
        assert len(cells) == len(counts), row
        for (kind, n), cell in zip(counts.items(), cells, strict=True):
            assert cell.startswith(f"{kind} {n} ("), cell
            if reg.script(name, kind) is not None:
                assert "[confirmed](../../tests/fixtures/" in cell, cell
            elif reg.refuted_by(name, kind) is not None:
                # the library alone shows it is the adapter's mapping, and the verdict says so
                assert "[refuted](../../tests/fixtures/" in cell and cell.endswith(": the adapter's mapping)"), cell
                assert f"refuted with the library alone, the adapter's mapping: {kind}" in row[2], row
            else:
                assert cell.endswith("(unconfirmed)"), cell
    # DBOS cannot displace a live holder: when no takeover happened its verdict says so
    dbos = _published("dbos")
    if not anomaly_counts(dbos):
        assert "no live holder was displaced" in _row(page, "DBOS")[2]


def test_every_finding_is_confirmed_or_marked(page: str) -> None:
    findings = page.split("## Findings", 1)[1].split("## Under partitions", 1)[0]
    lines = [x for x in findings.splitlines() if x.startswith("- **unsafe**") or re.match(r"- `[a-z_.]+` \(MUST, (fail|xfail)\)", x)]
    assert len(lines) > 80
    confirmed = [x for x in lines if "confirmed with " in x and UNCONFIRMED not in x]
    unconfirmed = [x for x in lines if UNCONFIRMED in x]
    refuted = [x for x in lines if "refuted with " in x]
    assert len(confirmed) + len(unconfirmed) + len(refuted) == len(lines)
    # only DBOS's stale writes are refuted (the adapter's mapping), and only when its run found them
    n_dbos = anomaly_counts(_published("dbos")).get("stale_write_accepted")
    assert [x.split(";")[0] for x in refuted] == ([f"- **unsafe**: accepts stale writes ({n_dbos}"] if n_dbos else [])
    assert len(confirmed) >= 8 and len(unconfirmed) > len(confirmed)
    for line in confirmed:
        for link in re.findall(r"\]\(([^)]+\.py)\)", line):
            assert (OUT / link).resolve().is_file(), link
    fencing = next(x for x in lines if x.startswith("- `lease.fencing`") and "pgqueuer" in x)
    assert "**accepts a stale holder's writes** (ownership; confirmed with pgqueuer alone: " \
           "[`confirm_pgqueuer_stale_write.py`](../../tests/fixtures/confirm_pgqueuer_stale_write.py))" in fencing
    validation = next(x for x in lines if x.startswith("- `core.create.source_system`"))
    assert f"(input validation; {UNCONFIRMED})" in validation
    # a library's findings come worst first: its ownership lines before its validation lines
    pg = findings.split("### pgqueuer", 1)[1].split("###", 1)[0]
    assert pg.index("`lease.fencing`") < pg.index("`core.terminal.immutable`") < pg.index("`core.create.source_system`")


def test_the_committed_page_is_what_publish_renders(page: str) -> None:
    assert (OUT / "README.md").read_text(encoding="utf-8") == page


def test_the_registry_names_real_scripts_and_every_script_is_registered() -> None:
    reg = read_confirmations(REGISTRY)
    scripts = {p.name for p in (ROOT / "tests" / "fixtures").glob("confirm_*") if p.suffix in (".py", ".js", ".rb")}
    assert reg.named() == scripts
    assert reg.holds["bullmq"]["lease.fencing"] == "confirm_bullmq.js" and reg.script("bullmq", "lease.fencing") is None
    assert reg.script("pgqueuer", "stale_write_accepted") == REGISTRY.parent / "confirm_pgqueuer_stale_write.py"
    assert reg.script("dbos", "stale_write_accepted") is None
    assert reg.not_reached["celery-acks-late"] == ["confirm_celery_acks_late_child_killed.py"]
    assert not reg.scripts("celery-acks-late", "lost_work")  # not reached: never counted as a finding
    assert reg.script("celery-visibility", "stale_write_accepted") == \
        REGISTRY.parent / "confirm_celery_visibility_redelivery.py"
    assert reg.refuted_by("dbos", "stale_write_accepted") == REGISTRY.parent / "confirm_dbos_stale_execution.py"
    assert [p.name for p in reg.scripts("persist-queue", "split_ownership")] == [
        "confirm_persistqueue_reopen.py", "confirm_persistqueue_concurrent_get.py"]


@pytest.mark.parametrize(("text", "message"), [
    ("sqlite-queue:\n  lost_work: confirm_rq_intermediate.py\n", "unknown library 'sqlite-queue'"),
    ("rq:\n  lost_work_twice: confirm_rq_intermediate.py\n", "'lost_work_twice' is neither a safety anomaly class nor a clause"),
    ("rq:\n  stuck_work: confirm_rq_gone.py\n", "rq: stuck_work: no script 'confirm_rq_gone.py' beside the registry"),
    ("rq: [stuck_work]\n", "rq: must map finding -> script"),
    ("rq:\n  stuck_work: {confirmed_by: confirm_rq_intermediate.py}\n", "rq: stuck_work: a refutation is {refuted_by: script}"),
    ("rq:\n  stuck_work: {holds: confirm_rq_gone.py}\n", "rq: stuck_work: no script 'confirm_rq_gone.py' beside the registry"),
    ("rq:\n  stuck_work: [confirm_rq_intermediate.py, gone.py]\n", "rq: stuck_work: no script 'gone.py' beside the registry"),
    ("rq:\n  stuck_work: [\n", "not YAML"),
    ("rq:\n  not_reached: confirm_rq_intermediate.py\n", "rq: not_reached: must be a list of scripts"),
    ("rq:\n  not_reached: [gone.py]\n", "rq: not_reached: no script 'gone.py' beside the registry"),
])
def test_a_bad_registry_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                               message: str) -> None:
    reg = tmp_path / "confirmations.yaml"
    reg.write_text(text, encoding="utf-8")
    (tmp_path / "confirm_rq_intermediate.py").write_text("", encoding="utf-8")
    with pytest.raises(ConfirmationsError, match=re.escape(message)):
        read_confirmations(reg)
    assert main(["--render-only", "--confirmations", str(reg), "--out", str(tmp_path / "out"), "--readme", ""]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(reg) in err and message in err


def test_render_only_needs_the_published_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--render-only", "--confirmations", str(REGISTRY), "--out", str(tmp_path), "--readme", ""]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "reference/results.json: cannot read the published results" in err
