"""The safety tier and the transport read statuses and crash points from the contract.

No status name and no crash point of the contract may appear as a string literal in chaos/ or
transport/ source (docstrings aside): such code restates the contract and goes wrong when the
contract changes.  The scan parses each module (ast), so comments and docstrings never count.
The allowlist is per file, each entry with the reason the literal is not the contract's name."""

from __future__ import annotations

import ast
from pathlib import Path

from ledgercheck.spec import default_spec

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("chaos", "transport")
ALLOWED: dict[str, tuple[frozenset[str], str]] = {
    "transport/client.py": (frozenset({"timeout"}), "the harness's error code timeout (errors.yaml), not the status"),
    "transport/clock.py": (frozenset({"timeout"}), "a phase's timeout field (policy.yaml phases), not the status"),
    "transport/protocol.py": (frozenset({"queued", "running"}), "states of a lane task and a wake run, not work statuses"),
    "transport/wire.py": (frozenset({"queued", "running"}), "states of a lane task and a wake run, not work statuses"),
    "transport/server.py": (frozenset({"done", "waiting_user", "cancelled", "timeout"}),
                            "the sample session the protocol docs print, call by call, as a reader types it"),
}


def contract_names() -> frozenset[str]:
    spec = default_spec()
    return frozenset(spec.statuses) | frozenset(spec.crash_points)


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def literals(source: str, names: frozenset[str]) -> list[tuple[int, str]]:
    """(line, literal) of every string constant in ``source`` that is one of ``names``."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return sorted((n.lineno, n.value) for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names and id(n) not in docs)


def offenders(root: Path) -> list[str]:
    names = contract_names()
    out = []
    for d in SCANNED:
        for p in sorted((root / d).rglob("*.py")):
            rel = p.relative_to(root).as_posix()
            allowed = ALLOWED.get(rel, (frozenset(), ""))[0]
            out += [f"{rel}:{line}: {lit!r}" for line, lit in literals(p.read_text(encoding="utf-8"), names)
                    if lit not in allowed]
    return out


def test_no_status_or_crash_point_literal_in_chaos_or_transport() -> None:
    found = offenders(ROOT)
    assert not found, "read these from the contract (spec/rules.py):\n" + "\n".join(found)


def test_every_allowlisted_literal_is_still_there_and_has_a_reason() -> None:
    names = contract_names()
    for rel, (lits, why) in ALLOWED.items():
        assert why and lits <= names, rel
        seen = {lit for _, lit in literals((ROOT / rel).read_text(encoding="utf-8"), names)}
        assert lits <= seen, f"{rel}: allowlisted {sorted(lits - seen)} no longer appear; drop them"


def test_a_planted_literal_is_found(tmp_path: Path) -> None:
    """The scan fails on a status or crash point written out, and not on one in a docstring."""
    spec = default_spec()
    status, point = next(iter(spec.statuses)), next(iter(spec.crash_points))
    for d in SCANNED:
        (tmp_path / d).mkdir()
    (tmp_path / "chaos" / "planted.py").write_text(
        f'"""Mentions {status!r} in a docstring only."""\n\nSTATUS = "{status}"\n\n\ndef f(w):\n'
        f'    """{point}"""\n    return w.hit("{point}")\n', encoding="utf-8")
    (tmp_path / "transport" / "clean.py").write_text(f'"""{status}"""\nX = "not-a-status"\n', encoding="utf-8")
    assert offenders(tmp_path) == [f"chaos/planted.py:3: {status!r}", f"chaos/planted.py:8: {point!r}"]
