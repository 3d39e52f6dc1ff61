"""docs/contract.md must say what the contract says.

The clauses are not copied into the page (it links the contract's clause files and names the
command that prints them as a table); the hand-written tables are checked against the Spec.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ledgercheck.spec import Spec, canonical_json, default_spec
from ledgercheck.spec.contract import EffectValue

from ledgercheck.cli import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "contract.md"


@pytest.fixture(scope="module")
def text() -> str:
    return DOC.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def spec() -> Spec:
    return default_spec()


def table_after(text: str, marker: str) -> list[list[str]]:
    """Body rows (cells stripped) of the first Markdown table after the line containing ``marker``."""
    lines = text[text.index(marker):].splitlines()[1:]
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


def names(cell: str, spec: Spec) -> list[str]:
    out = []
    for part in cell.replace("`", "").split(","):
        part = part.strip()
        out += [s for s in spec.statuses if s.startswith(part[:-1])] if part.endswith("*") else [part]
    return out


def test_every_clause_file_is_linked_and_the_command_prints_every_clause(text: str, spec: Spec,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The clauses are not copied into the page: it links each profile's clause file, and the
    command it names prints every clause of the contract, once."""
    section = text[text.index("## Every clause"):]
    for profile in spec.profiles:
        assert f"(../spec/contract/clauses/{profile}.yaml)" in section, profile
        assert (DOC.parent / f"../spec/contract/clauses/{profile}.yaml").is_file(), profile
    assert "`ledgercheck spec show --format markdown`" in section
    assert main(["spec", "show", "--format", "markdown"]) == 0
    printed = capsys.readouterr().out
    for c in spec.clauses:
        assert printed.count(f"| `{c.id}` |") == 1, c.id


def test_transition_table(text: str, spec: Spec) -> None:
    documented = set()
    for src, dst, *_ in table_after(text, "The allowed moves"):
        documented |= {(a, b) for a in names(src, spec) for b in names(dst, spec)}
    assert documented == {(t.src, t.dst) for t in spec.transitions}


def test_status_table(text: str, spec: Spec) -> None:
    rows = table_after(text, "## Statuses and transitions")
    assert [r[0].strip("`") for r in rows] == list(spec.statuses)
    for name, terminal, *_ in rows:
        assert terminal.startswith("yes") == spec.terminal(name.strip("`"))


def test_lease_timings(text: str, spec: Spec) -> None:
    rows = {r[0]: tuple(float(x) for x in r[1:4]) for r in table_after(text, "Timings (seconds")}
    for source, lease in [("default", spec.lease_for(None)), ("control", spec.lease_for("control"))]:
        assert rows[source] == (lease.ttl, lease.renew_interval, lease.grace)
    assert set(rows) == {"default", *spec.lease_by_source}


def test_error_codes(text: str, spec: Spec) -> None:
    rows = {r[0].strip("`"): r[1] == "yes" for r in table_after(text, "## Error codes")}
    assert rows == dict(spec.errors)


def test_decisions(text: str, spec: Spec) -> None:
    rows = {r[0]: (int(r[1]), r[2] == "yes") for r in table_after(text, "**Decisions**")}
    assert rows == {n: (d["rank"], d["requeue"]) for n, d in spec.decisions.items()}


def _shown(v: EffectValue) -> str:
    if v.kind == "const":
        return str(v.param).lower() if isinstance(v.param, bool) else f"`{v.param}`" if isinstance(v.param, str) else str(v.param)
    return "now" if v.kind == "now" else f"the {v.param}" if v.kind == "arg" else f"`{v.param}`"


def test_operation_effects(text: str, spec: Spec) -> None:
    rows = [tuple(r) for r in table_after(text, "**What an operation writes.**")]
    want = []
    for op, steps in spec.effects.items():
        for step, e in steps.items():
            sets = ", ".join(f"{f} = {_shown(v)}" for f, v in e.writes if not (v.kind == "const" and v.param is None))
            clears = ", ".join(f for f, v in e.writes if v.kind == "const" and v.param is None)
            may = ", ".join([f"keep {f}" for f in e.may_keep] + [f"clear {f}" for f in e.may_clear])
            want.append((op, step, sets or "–", clears or "–", may or "–"))
    assert rows == want


def test_recovery_matrix(text: str, spec: Spec) -> None:
    effects = {"0": "none", "1": "exactly_once", "≥ 1": "at_least_once", "≤ 1": "at_most_once"}
    lines = text[text.index("**The matrix**"):].splitlines()
    header = next(line for line in lines if line.startswith("| step class"))
    points = [c.strip() for c in header.split("|")[2:-1]]
    assert points == list(spec.crash_points)
    rows = table_after(text, "**The matrix**")
    assert [r[0] for r in rows] == list(spec.step_classes)
    for cls, *cells in rows:
        for point, cell in zip(points, cells, strict=True):
            decision, count = (x.strip() for x in cell.split(","))
            assert (decision, effects[count]) == (spec.matrix[cls][point].decision, spec.matrix[cls][point].effects)


def test_crash_point_and_step_class_names(text: str, spec: Spec) -> None:
    assert [r[0].strip("`") for r in table_after(text, "**Crash points**")] == list(spec.crash_points)
    for name in spec.step_classes:
        assert f"`{name}`" in text


def test_effect_key_example(text: str, spec: Spec) -> None:
    canonical = re.search(r"^canonical:\s+(\{.*\})$", text, re.M)
    key = re.search(r"^effect key:\s+([0-9a-f]{64})$", text, re.M)
    assert canonical and key
    fields = dict(re.findall(r'"(\w+)":"([^"]*)"', canonical[1]))
    assert key[1] == spec.effect_key(**fields)
    assert set(fields) == set(spec.idem_scope) and canonical[1] == canonical_json(fields)


def test_backoff_example(text: str, spec: Spec) -> None:
    m = re.search(r"the upper bounds are ([\d, ]+) seconds and then (\d+) seconds", " ".join(text.split()))
    assert m
    bounds = [float(x) for x in m[1].split(",")]
    policy = spec.retry_default
    assert bounds == [spec.backoff_range(policy, n)[1] for n in range(1, len(bounds) + 1)]
    assert spec.backoff_range(policy, len(bounds) + 1)[1] == float(m[2]) == policy.max_backoff
