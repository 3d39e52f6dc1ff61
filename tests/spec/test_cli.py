"""`ledgercheck spec validate|show|graph`, in-process and as a real process."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ledgercheck.spec import Spec, default_spec
from ledgercheck.spec.commands import clause_table

from ledgercheck.cli import main

BROKEN = Path(__file__).resolve().parent / "broken"
LOCATED = re.compile(r"(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): (?P<message>.+)")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def run_process(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ledgercheck", *argv], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def spec() -> Spec:
    return default_spec()


# ---- a small parser for the DOT language (the subset graphviz documents for plain graphs) -------

_DOT_TOKEN = re.compile(r'\s+|//[^\n]*|/\*.*?\*/|(?P<tok>->|--|[{}\[\];,=]|"(?:[^"\\]|\\.)*"|-?(?:\.\d+|\d+(?:\.\d*)?)|[A-Za-z_\x80-\uffff][\w\x80-\uffff]*)',
                        re.S)


def _dot_tokens(text: str) -> list[str]:
    tokens, i = [], 0
    while i < len(text):
        m = _DOT_TOKEN.match(text, i)
        assert m, f"DOT: cannot read {text[i:i + 20]!r}"
        if m["tok"]:
            tokens.append(m["tok"])
        i = m.end()
    return tokens


def _dot_id(tok: str) -> str:
    assert tok not in "{}[];,=" and tok not in ("->", "--"), f"DOT: expected an id, found {tok!r}"
    return tok[1:-1].replace('\\"', '"') if tok.startswith('"') else tok


def parse_dot(text: str) -> tuple[str, set[str], list[tuple[str, str, dict[str, str]]], dict[str, dict[str, str]]]:
    """(kind, nodes, edges with attributes, node attributes); AssertionError if not valid DOT."""
    toks = _dot_tokens(text)
    i = 0

    def peek() -> str | None:
        return toks[i] if i < len(toks) else None

    def take(expected: str | None = None) -> str:
        nonlocal i
        assert i < len(toks), "DOT: unexpected end"
        tok = toks[i]
        assert expected is None or tok == expected, f"DOT: expected {expected!r}, found {tok!r}"
        i += 1
        return tok

    def attrs() -> dict[str, str]:
        out: dict[str, str] = {}
        while peek() == "[":
            take("[")
            while peek() != "]":
                key = _dot_id(take())
                take("=")
                out[key] = _dot_id(take())
                if peek() in (",", ";"):
                    take()
            take("]")
        return out

    if peek() == "strict":
        take()
    kind = take()
    assert kind in ("graph", "digraph"), kind
    if peek() != "{":
        _dot_id(take())
    take("{")
    nodes: set[str] = set()
    node_attrs: dict[str, dict[str, str]] = {}
    edges: list[tuple[str, str, dict[str, str]]] = []
    while peek() != "}":
        first = take()
        if first in ("graph", "node", "edge"):
            attrs()
        elif peek() == "=":
            take("=")
            _dot_id(take())
        else:
            chain = [_dot_id(first)]
            while peek() in ("->", "--"):
                assert take() == ("->" if kind == "digraph" else "--"), "DOT: wrong edge operator for the graph kind"
                chain.append(_dot_id(take()))
            a = attrs()
            nodes.update(chain)
            if len(chain) == 1:
                node_attrs.setdefault(chain[0], {}).update(a)
            edges += [(s, d, a) for s, d in zip(chain, chain[1:], strict=False)]
        if peek() == ";":
            take()
    take("}")
    assert i == len(toks), "DOT: text after the closing brace"
    return kind, nodes, edges, node_attrs


def test_dot_parser_rejects_broken_text() -> None:
    for bad in ["digraph {", "digraph { a -> }", "digraph { a [x] }", 'digraph { "a }', "graph { a -> b }", "digraph {} x"]:
        with pytest.raises(AssertionError):
            parse_dot(bad)


# ---- validate --------------------------------------------------------------------------------


def test_validate_shipped(capsys: pytest.CaptureFixture[str], spec: Spec) -> None:
    rc, out, err = run(capsys, "spec", "validate")
    assert rc == 0 and err == ""
    assert out.startswith("ok: ") and f"{len(spec.clauses)} clauses" in out and spec.digest[:16] in out


def test_validate_json(capsys: pytest.CaptureFixture[str], spec: Spec) -> None:
    rc, out, _ = run(capsys, "spec", "validate", "--json")
    assert rc == 0
    [entry] = json.loads(out)
    assert entry["ok"] is True and entry["clauses"] == len(spec.clauses) and entry["digest"] == spec.digest


def test_validate_several_files_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("extends: default\nlease: {ttl: 1m}\n", encoding="utf-8")
    files = [str(good), str(BROKEN / "duplicate_key.yaml"), str(BROKEN / "profile_cycle.yaml")]
    rc, out, err = run(capsys, "spec", "validate", "--json", *files)
    assert rc == 1
    summary = json.loads(out)
    assert [e["ok"] for e in summary] == [True, False, False]
    for entry in summary[1:]:
        for p in entry["problems"]:
            assert p["text"] == f"{p['file']}:{p['line']}:{p['col']}: {p['message']}"
            assert p["text"] in err.splitlines()


def test_validate_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, err = run(capsys, "spec", "validate", str(tmp_path / "nope.yaml"))
    assert rc == 1 and out == ""
    assert err.strip().endswith("nope.yaml: file not found") and len(err.splitlines()) == 1


# ---- show ----------------------------------------------------------------------------------------


def test_show_text_lists_everything(capsys: pytest.CaptureFixture[str], spec: Spec) -> None:
    rc, out, _ = run(capsys, "spec", "show")
    assert rc == 0
    assert spec.digest in out
    for c in spec.clauses:
        assert re.search(rf"^  {re.escape(c.id)}\s+{c.level}\s+{c.profile}\s+{re.escape(c.statement)}$", out, re.M), c.id
    for t in spec.transitions:
        assert re.search(rf"^\s+{t.src} -> {t.dst}\s+via {re.escape(', '.join(t.ops))}", out, re.M)
    assert "Lease: ttl 45s, renew every 15s, grace 30s" in out


def test_show_json(capsys: pytest.CaptureFixture[str], spec: Spec) -> None:
    rc, out, _ = run(capsys, "spec", "show", "--json")
    assert rc == 0
    data = json.loads(out)
    assert [c["id"] for c in data["clauses"]] == [c.id for c in spec.clauses]
    assert data["clauses"][0] == {"id": spec.clauses[0].id, "level": spec.clauses[0].level, "profile": spec.clauses[0].profile,
                                  "source": spec.clauses[0].source, "statement": spec.clauses[0].statement}
    assert len(data["transitions"]) == len(spec.transitions) and data["digest"] == spec.digest
    rc, again, _ = run(capsys, "spec", "show", "--format", "json")
    assert again == out


def test_show_markdown_is_one_row_per_clause(capsys: pytest.CaptureFixture[str], spec: Spec) -> None:
    rc, out, _ = run(capsys, "spec", "show", "--format", "markdown")
    assert rc == 0
    lines = out.strip().splitlines()
    assert lines[0] == "| Clause | Level | Profile | Source | Statement |" and lines[1] == "|---|---|---|---|---|"
    rows = [re.split(r"(?<!\\)\|", line)[1:-1] for line in lines[2:]]
    assert len(rows) == len(spec.clauses)
    for cells, c in zip(rows, spec.clauses, strict=True):
        assert [x.strip() for x in cells] == [f"`{c.id}`", c.level, c.profile, c.source, c.statement]


def test_show_markdown_escapes_pipes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "o.yaml"
    path.write_text("extends: default\nclauses:\n  - {id: outbox.pipe, level: SHOULD, impact: behaviour, headline: pipes, profile: outbox, "
                    "source: 004_4626d6c492bfd4fc.txt, statement: 'a | b'}\n", encoding="utf-8")
    rc, out, _ = run(capsys, "spec", "show", "--format", "markdown", "--spec", str(path))
    assert rc == 0
    assert out.strip().splitlines()[-1] == "| `outbox.pipe` | SHOULD | outbox | 004_4626d6c492bfd4fc.txt | a \\| b |"


def test_show_with_overlay_and_with_a_broken_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "o.yaml"
    path.write_text("extends: default\nlease: {ttl: 2m}\n", encoding="utf-8")
    rc, out, _ = run(capsys, "spec", "show", "--spec", str(path))
    assert rc == 0 and "Lease: ttl 120s" in out
    rc, out, err = run(capsys, "spec", "show", "--spec", str(BROKEN / "renew_not_below_ttl.yaml"))
    assert rc == 1 and out == ""
    assert all(LOCATED.fullmatch(line) for line in err.splitlines()) and "renew_not_below_ttl.yaml:7:7:" in err


# ---- graph ----------------------------------------------------------------------------------------


def test_graph_mermaid(capsys: pytest.CaptureFixture[str], spec: Spec) -> None:
    rc, out, _ = run(capsys, "spec", "graph", "--format", "mermaid")
    assert rc == 0
    lines = out.strip().splitlines()
    assert lines[0] == "stateDiagram-v2" and lines[1].strip() == "[*] --> queued"
    edges = set()
    for line in lines[2:]:
        m = re.fullmatch(r"    (\w+) --> (\w+) : (.+)", line)
        if m:
            edges.add((m[1], m[2], m[3]))
        else:
            assert re.fullmatch(r"    class \w+ terminal|    classDef terminal .+", line), line
    for t in spec.transitions:
        label = ", ".join(t.ops) + (f" [{t.guard}]" if t.guard else "")
        assert (t.src, t.dst, label) in edges
    assert len(edges) == len(spec.transitions)
    for name in spec.terminal_statuses:
        assert f"    class {name} terminal" in lines


def test_graph_dot_is_a_digraph_with_every_transition(capsys: pytest.CaptureFixture[str], spec: Spec) -> None:
    rc, out, _ = run(capsys, "spec", "graph", "--format", "dot")
    assert rc == 0
    kind, nodes, edges, node_attrs = parse_dot(out)
    assert kind == "digraph"
    assert set(spec.statuses) <= nodes
    pairs = {(s, d): a for s, d, a in edges}
    for t in spec.transitions:
        assert (t.src, t.dst) in pairs
        assert pairs[(t.src, t.dst)]["label"].startswith(", ".join(t.ops))
        assert (pairs[(t.src, t.dst)].get("style") == "dashed") == t.requeue
    assert ("__start", spec.initial_status) in pairs
    assert len(edges) == len(spec.transitions) + 1
    assert {n for n, a in node_attrs.items() if a.get("peripheries") == "2"} == set(spec.terminal_statuses)


def test_graph_with_a_broken_spec(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "spec", "graph", "--spec", str(BROKEN / "unreachable_status.yaml"))
    assert rc == 1 and out == "" and "unreachable_status.yaml:5:3:" in err


# ---- as a real process ---------------------------------------------------------------------------


def test_process_show_and_graph(spec: Spec) -> None:
    proc = run_process("spec", "show", "--format", "markdown")
    assert proc.returncode == 0 and proc.stdout.strip() == clause_table(spec)
    proc = run_process("spec", "graph", "--format", "dot")
    assert proc.returncode == 0 and parse_dot(proc.stdout)[0] == "digraph"
