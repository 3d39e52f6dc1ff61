"""Every clause id the harness names in code is one the contract defines.

A misspelt id in a blame table or a clause test would otherwise drop its violation without a
word (the model reports only clauses of claimed profiles, and an unknown id has no profile).
Two guards: a static scan of every string constant in the project's Python code that has the
shape of a clause id, and ``Model.claimed`` raising on an id the contract lacks.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest
from ledgercheck.conformance.model import Model, UnknownClause, Violation
from ledgercheck.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
# the folders whose code names clauses; tests are left out (they name unknown ids on purpose)
CODE = ["spec", "reference", "conformance", "chaos", "fixtures", "reports", "ledgercheck"]


def clause_shaped(text: str, profiles: list[str]) -> bool:
    """A string that looks like a clause id: ``<profile>.<word>[.<word>...]``, nothing else."""
    return _shape(tuple(profiles)).fullmatch(text) is not None and not text.endswith((".yaml", ".py", ".json"))


@functools.cache
def _shape(profiles: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(rf"(?:{'|'.join(map(re.escape, profiles))})(?:\.[a-z][a-z0-9_]*)+")


def named_ids(source: str, profiles: list[str]) -> list[tuple[int, str]]:
    """(line, id) for every string constant in ``source`` shaped like a clause id."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and clause_shaped(node.value, profiles):
            out.append((node.lineno, node.value))
    return out


def unknown_ids(spec, files: list[Path], named: dict[Path, list[tuple[int, str]]] | None = None) -> list[str]:
    """Clause-shaped strings of ``files`` the contract lacks (``named``: each file's named_ids, when
    the caller has them already)."""
    known = {c.id for c in spec.clauses}
    profiles = list(spec.profiles)
    return [f"{f.relative_to(ROOT) if f.is_relative_to(ROOT) else f}:{line}: {cid}"
            for f in files for line, cid in (named[f] if named is not None else named_ids(f.read_text(encoding="utf-8"), profiles))
            if cid not in known]


def test_every_clause_id_named_in_code_is_in_the_contract() -> None:
    spec = load_spec(None)
    files = sorted(p for d in CODE for p in (ROOT / d).rglob("*.py"))
    assert len(files) > 50  # the scan really covers the code
    named = {f: named_ids(f.read_text(encoding="utf-8"), list(spec.profiles)) for f in files}
    found = [cid for f in files for _, cid in named[f]]
    assert len(set(found)) > 60, "the scan finds the clause ids the harness names"
    assert unknown_ids(spec, files, named) == []


def test_the_scan_catches_a_misspelt_id(tmp_path: Path) -> None:
    spec = load_spec(None)
    bad = tmp_path / "blame.py"
    bad.write_text('OWNER = {"attempt": "retry.exhausted", "owner": "lease.aquire"}\nPATH = "recovery.yaml"\n')
    assert unknown_ids(spec, [bad]) == [f"{bad}:1: lease.aquire"]


def test_model_refuses_an_unknown_clause_id() -> None:
    spec = load_spec(None)
    m = Model(spec)
    assert m.claimed("lease.acquire") is True
    with pytest.raises(UnknownClause, match="lease.aquire"):
        m.keep([Violation("lease.aquire", "a misspelt id must not be dropped silently")])


# ---- every path a clause id takes into a verdict raises on an id the contract lacks
def test_the_contract_raises_on_an_unknown_id() -> None:
    spec = load_spec(None)
    assert spec.clause("lease.acquire").profile == "lease"
    with pytest.raises(UnknownClause, match="lease.aquire"):
        spec.clause("lease.aquire")


def test_a_clause_check_failing_with_an_unknown_id_raises() -> None:
    from ledgercheck.conformance.clauses import check
    from ledgercheck.conformance.harness import ClauseFailure, Harness
    from ledgercheck.transport.client import connect

    spec = load_spec(None)
    client = connect("reference", spec)
    try:
        h = Harness(client, spec, client.profiles)
        h.fresh()
        with pytest.raises(ClauseFailure):  # a known id fails the check as it should
            check(False, "lease.acquire", "the check's own failure", h)
        with pytest.raises(UnknownClause, match="lease.aquire"):
            check(False, "lease.aquire", "a misspelt id in a clause test", h)
    finally:
        client.close()


def test_a_check_registered_under_an_unknown_id_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    from ledgercheck.conformance import clauses

    spec = load_spec(None)
    assert any(c.clause == "lease.acquire" for c in clauses.all_cases(spec))
    monkeypatch.setitem(clauses.REGISTRY, "lease.aquire", [lambda spec: []])
    with pytest.raises(UnknownClause, match="lease.aquire"):
        list(clauses.all_cases(spec))


def test_chaos_and_campaign_findings_with_an_unknown_id_raise() -> None:
    from ledgercheck.chaos.crash.checker import Violation as ChaosViolation
    from ledgercheck.conformance.items import blamed

    spec = load_spec(None)
    assert ChaosViolation("recovery.no_loss", "lost").clause == "recovery.no_loss"
    with pytest.raises(UnknownClause, match="recovery.no_lost"):
        ChaosViolation("recovery.no_lost", "a misspelt id in the crash-window checker")
    assert blamed(spec, "recovery.no_loss", "lost") == Violation("recovery.no_loss", "lost")
    with pytest.raises(UnknownClause, match="lease.single_holdr"):
        blamed(spec, "lease.single_holdr", "a misspelt id in a campaign's finding")
