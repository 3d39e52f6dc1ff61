"""A contract at the bounds validation allows is one the reference certifies against: the clause
tests take their examples from the contract, so no accepted value makes them loop for ever or
fail a correct ledger (docs/contract.md, "Bounds")."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from clause_runs import clause_test_failures
from ledgercheck.conformance.harness import Harness
from ledgercheck.reference.adapter import ReferenceAdapter
from ledgercheck.spec import Spec, load_spec
from ledgercheck.transport.client import connect

# the clauses whose tests read the bounded values: priorities, lease and wait timings, attempts,
# backoffs, nacks, batch sizes, seqs
RELEVANT = ("core.invalid_argument", "core.create.", "core.claim.", "core.transition.allowed", "core.running.",
            "lease.", "waiting.", "retry.", "inbox.", "outbox.", "eventlog.", "idem.", "recovery.", "spawn.")
# what each smaller overlay changes is read by fewer of them
FOCUS = {"at-the-maxima": RELEVANT, "at-the-minima": RELEVANT,
         "priority-max-100": ("core.invalid_argument", "core.create.", "core.claim.", "core.transition.allowed"),
         "long-lease": ("core.running.", "lease.", "waiting.not_stale", "retry.execution_timeout")}

# overlays at the bounds validation allows (tests/spec/bounds/: the bounds tests check they validate)
BOUNDS = Path(__file__).resolve().parents[1] / "spec" / "bounds"
OVERLAYS = {p.stem: p.read_text(encoding="utf-8") for p in sorted(BOUNDS.glob("*.yaml"))}


def _spec(tmp_path: Path, body: str) -> Spec:
    path = tmp_path / "overlay.yaml"
    path.write_text("extends: default\n" + textwrap.dedent(body).lstrip("\n"), encoding="utf-8")
    return load_spec([path])


def _failures(spec: Spec, keep: Callable[[Any], bool], address: str = "reference") -> dict[str, list[str]]:
    c = connect(address, spec)
    try:
        h = Harness(c, spec, c.profiles)
        return clause_test_failures(h, spec, keep)
    finally:
        c.close()


@pytest.mark.parametrize("name", sorted(OVERLAYS))
def test_reference_passes_under_an_overlay_at_the_bounds(tmp_path: Path, name: str) -> None:
    spec = _spec(tmp_path, OVERLAYS[name])
    assert _failures(spec, lambda case: case.clause.startswith(FOCUS[name])) == {}


class AcceptsOnePastMax(ReferenceAdapter):
    """Broken: a priority one past the contract's maximum is taken as the maximum."""

    def create(self, **kw: Any) -> Any:
        if kw.get("priority") == self.spec.priority_max + 1:
            kw["priority"] = self.spec.priority_max
        return self.ledger.create(**kw)


def test_an_invalid_priority_comes_from_the_contract(tmp_path: Path) -> None:
    """With priority.max 100 the out-of-range example is 101 (not the literal 99 it once was): the
    reference passes, and a ledger that accepts 101 is caught."""
    spec = _spec(tmp_path, OVERLAYS["priority-max-100"])
    keep = lambda case: case.name == "core.invalid_argument[create.priority]"  # noqa: E731
    assert _failures(spec, keep) == {}
    assert _failures(spec, keep, f"python:{__name__}:AcceptsOnePastMax") == {"core.invalid_argument": ["core.create.source_system"]}
