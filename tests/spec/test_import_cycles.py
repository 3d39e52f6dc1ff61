"""No import cycles between ledgercheck's modules.

Every ``import`` and ``from ... import`` in the installed packages counts, wherever it is written
(a function-level import only postpones a cycle to the first call; it does not remove it).
Imports under ``if TYPE_CHECKING:`` are never executed and do not count.  An edge goes from a
module to the module it names (``from pkg import name`` names ``pkg.name`` when that is a
module, else ``pkg``).  KNOWN_CYCLES is empty: any cycle fails the test.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# package -> directory, as pyproject.toml's package-dir maps them
PACKAGES = {
    "ledgercheck": "ledgercheck", "ledgercheck.spec": "spec", "ledgercheck.reference": "reference",
    "ledgercheck.conformance": "conformance", "ledgercheck.chaos": "chaos", "ledgercheck.fixtures": "fixtures",
    "ledgercheck.reports": "reports", "ledgercheck.transport": "transport", "ledgercheck.services": "services",
}

# No cycle is allowed.  The ones there were, and how each went: spec.load <-> spec.checks
# (Problem and Positions live in spec/problems.py); clauses <-> clauses.recovery (which clauses
# only chaos judges is contract data, rules.chaos_clauses); chaos exploration <-> replays <->
# storms (running a replay file is chaos/crash/rerun.py; replays only reads and writes the files);
# conformance plugin <-> results_bridge <-> safety_item (the base item, the run folder and the
# artifact hash are conformance/items.py).  The set stays so the test's message keeps its form.
KNOWN_CYCLES: set[frozenset[str]] = set()


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Module name -> file, for every module of the packages (subpackages included)."""
    out: dict[str, Path] = {}
    for pkg, d in PACKAGES.items():
        base = root / d
        for f in sorted(base.rglob("*.py")):
            rel = f.relative_to(base).with_suffix("")
            if any(p.startswith(".") or p == "node_modules" for p in rel.parts):
                continue
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([pkg, *parts])] = f
    return out


def imports_of(name: str, source: str, known: Iterable[str], is_package: bool = False,
               type_checking: bool = False) -> set[str]:
    """The ledgercheck modules that module ``name`` (whose text is ``source``) imports
    (``type_checking``: those under ``if TYPE_CHECKING:`` too)."""
    plain, typing_only = _imports(name, source, frozenset(known), is_package)
    return plain | typing_only if type_checking else set(plain)


@functools.lru_cache(maxsize=4096)
def _imports(name: str, source: str, known: frozenset[str], is_package: bool) -> tuple[frozenset[str], frozenset[str]]:
    """(what the module imports when it runs, what it imports under ``if TYPE_CHECKING:`` only),
    from one walk of its syntax tree; kept, as the tests of this file read every module more
    than once (with and without the type-only imports)."""
    package = name if is_package else name.rpartition(".")[0]
    out: set[str] = set()
    typing_only: set[str] = set()

    def resolve(target: str) -> str | None:
        while target and target not in known:
            target = target.rpartition(".")[0]
        return target or None

    todo: list[tuple[ast.AST, bool]] = [(ast.parse(source), False)]
    while todo:
        node, under = todo.pop()
        found = typing_only if under else out
        if isinstance(node, ast.Import):
            for a in node.names:
                hit = resolve(a.name)
                if hit:
                    found.add(hit)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for a in node.names:
                hit = f"{base}.{a.name}" if f"{base}.{a.name}" in known else resolve(base)
                if hit:
                    found.add(hit)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo += [(sub, True) for sub in node.body]  # (the else branch runs)
            todo += [(sub, under) for sub in node.orelse]
            todo.append((node.test, under))
            continue
        todo += [(child, under) for child in ast.iter_child_nodes(node)]
    out.discard(name)
    typing_only.discard(name)
    return frozenset(out), frozenset(typing_only - out)


def _is_type_checking(t: ast.expr) -> bool:
    name = t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else None
    return name == "TYPE_CHECKING"


def graph(mods: Mapping[str, Path], type_checking: bool = False) -> dict[str, set[str]]:
    return {m: imports_of(m, _text(f), mods, f.name == "__init__.py", type_checking) for m, f in mods.items()}


@functools.lru_cache(maxsize=4096)
def _text(f: Path) -> str:
    return f.read_text(encoding="utf-8")


def cycles(g: Mapping[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out: set[frozenset[str]] = set()
    counter = 0
    for start in g:
        if start in index:
            continue
        work = [(start, iter(sorted(g.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.add(frozenset(comp))
    return out


def _show(c: frozenset[str]) -> str:
    return " <-> ".join(sorted(c))


def test_no_new_import_cycles() -> None:
    found = cycles(graph(modules()))
    new = found - KNOWN_CYCLES
    gone = KNOWN_CYCLES - found
    assert not new, "new import cycles:\n" + "\n".join(map(_show, sorted(new, key=sorted)))
    assert not gone, "cycles listed in KNOWN_CYCLES no longer exist; take them off:\n" + "\n".join(map(_show, gone))


def test_no_import_cycles_through_type_only_imports() -> None:
    """Not even through an import only a type checker runs: a module that needs another's type
    for its annotations while that one imports it back names a Protocol instead (the plugin's
    session as the items see it is conformance.items.LedgerSessionView)."""
    found = cycles(graph(modules(), type_checking=True))
    assert not found, "import cycles through TYPE_CHECKING imports:\n" + "\n".join(map(_show, sorted(found, key=sorted)))


# ------------------------------------------------------------------ the detector itself
def _tree(tmp_path: Path, files: Mapping[str, str]) -> dict[str, Path]:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    for d in PACKAGES.values():
        (tmp_path / d).mkdir(exist_ok=True)
        (tmp_path / d / "__init__.py").touch()
    return modules(tmp_path)


def test_a_function_level_import_cycle_is_found(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {
        "spec/load.py": "def load():\n    from .checks import run\n    return run()\n",
        "spec/checks.py": "from .load import Problem\n",
    })
    assert cycles(graph(mods)) == {frozenset({"ledgercheck.spec.load", "ledgercheck.spec.checks"})}


def test_a_cycle_across_packages_is_found(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {
        "chaos/crash/checker.py": "from ledgercheck.conformance.model import fold\n",
        "conformance/model.py": "def f():\n    import ledgercheck.chaos.crash.checker\n",
        "conformance/plain.py": "from ledgercheck.spec import rules\n",
        "spec/rules.py": "X = 1\n",
    })
    assert cycles(graph(mods)) == {frozenset({"ledgercheck.chaos.crash.checker", "ledgercheck.conformance.model"})}


def test_type_checking_imports_and_one_way_imports_are_no_cycle(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {
        "spec/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n",
        "spec/b.py": "from . import a\n",
        "reference/c.py": "from ledgercheck.spec import a, b\n",
    })
    g = graph(mods)
    assert g["ledgercheck.spec.b"] == {"ledgercheck.spec.a"}
    assert g["ledgercheck.reference.c"] == {"ledgercheck.spec.a", "ledgercheck.spec.b"}
    assert cycles(g) == set()
    # counted when asked: the type-only cycle test finds it
    assert cycles(graph(mods, type_checking=True)) == {frozenset({"ledgercheck.spec.a", "ledgercheck.spec.b"})}


@pytest.mark.parametrize("known", [True, False])
def test_a_listed_cycle_passes_only_while_it_exists(tmp_path: Path, known: bool) -> None:
    mods = _tree(tmp_path, {"spec/x.py": "from . import y\n", "spec/y.py": "def f():\n    from . import x\n"})
    found = cycles(graph(mods))
    listed = {frozenset({"ledgercheck.spec.x", "ledgercheck.spec.y"})} if known else set()
    assert (found - listed == set()) is known


# ------------------------------------------------------------------ layers
# What each top-level package may import (docs/architecture.md).  spec is the bottom; transport
# (the protocol's types, client, wire, server, clocks) sits on it alone; the reference, chaos and
# reports never import the harness; only fixtures (adapters, broken and independent ledgers) may
# reach everything.  The root package ``ledgercheck`` (the CLI, the version) is outside the layers.
# "model" is conformance/model, the contract's executable model (the oracle every check asks):
# it reads only the contract and the protocol's types, so the history checkers of chaos ask it too
# (chaos/safety/linearize.py) without going through the rest of conformance.  chaos may open the reference
# ledger itself (chaos/crash/powerloss.py: the SQLite ledger whose files a power cut damages).
LAYERS: dict[str, set[str]] = {
    "spec": set(),
    "services": set(),
    "transport": {"spec", "services"},
    "reports": {"spec"},
    "model": {"spec", "transport"},
    "reference": {"spec", "transport", "reports", "services"},
    "chaos": {"spec", "transport", "reports", "model", "reference", "services"},
    "conformance": {"spec", "transport", "reports", "chaos", "model", "services"},
    "fixtures": {"spec", "transport", "reports", "chaos", "conformance", "model", "reference", "services"},
}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[1:3] == ["conformance", "model"]:
        return "model"
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def layer_violations(g: Mapping[str, set[str]]) -> list[str]:
    out = []
    for m, deps in sorted(g.items()):
        src = _layer(m)
        for d in sorted(deps):
            dst = _layer(d)
            if src and dst and dst != src and dst not in LAYERS[src]:
                out.append(f"{m} imports {d}: {src} may import only {sorted(LAYERS[src]) or 'nothing of ours'}")
    return out


def test_packages_import_only_downward() -> None:
    bad = layer_violations(graph(modules()))
    assert not bad, "\n".join(bad)


def test_an_upward_import_is_a_layer_violation(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {
        "reference/ledger.py": "def f():\n    from ledgercheck.conformance.model import fold\n",
        "conformance/model.py": "from ledgercheck.transport.protocol import Outcome\n",
        "transport/protocol.py": "X = 1\n",
    })
    bad = layer_violations(graph(mods))
    assert len(bad) == 1 and bad[0].startswith("ledgercheck.reference.ledger imports ledgercheck.conformance.model"), bad
