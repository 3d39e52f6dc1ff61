"""A broken ledger is broken in one clause and answers everything else as the reference does.

An override that forwards ``**kw`` to the reference's own method turns a call missing a required
argument (what the in-process client sends for an argument given as null) into a TypeError, which
the adapter reports as ``internal``: a failure of another clause, found before the ledger's own
bug, in every machine that sends null there.  Every operation a catalogue ledger overrides must
refuse such a call as the reference does.
"""

from __future__ import annotations

import pytest
from ledgercheck.fixtures.testkit import (
    broken,
    broken_edges,
    broken_inputs,
    broken_instants,
    broken_journal,
    broken_lanes,
    broken_paths,
    broken_recovery,
    broken_refused,
    broken_safety,
    broken_spawn,
    broken_timing,
    broken_trees,
)
from ledgercheck.spec import default_spec
from ledgercheck.transport.client import connect

MODULES = (broken, broken_edges, broken_instants, broken_inputs, broken_journal, broken_lanes, broken_paths, broken_recovery,
           broken_refused, broken_safety, broken_spawn, broken_timing, broken_trees)
SPEC = default_spec()


def _overrides() -> list[tuple[str, str, str]]:
    """(module, ledger, operation) for every contract operation with a required argument that a
    catalogue ledger defines itself."""
    out, seen = [], set()
    for m in MODULES:
        for name in dir(m):
            cls = getattr(m, name)
            if not isinstance(cls, type) or name.startswith("_") or getattr(cls, "BREAKS", None) in (None, "") \
                    or cls.__module__ != m.__name__ or name in seen:
                continue
            seen.add(name)
            for op, o in SPEC.operations.items():
                if op in vars(cls) and any(a.required and n != "now" for n, a in o.args.items()):
                    out.append((m.__name__, name, op))
    return out


OVERRIDES = _overrides()


def test_the_catalogue_overrides_operations():
    assert len(OVERRIDES) > 50


@pytest.mark.parametrize("module, ledger, op", OVERRIDES, ids=[f"{c}.{op}" for _, c, op in OVERRIDES])
def test_a_call_missing_its_arguments_is_refused_as_the_reference_does(module, ledger, op):
    ref = connect("reference", SPEC)
    ref.reset()
    args = {"now": 1_000_000.0} if "now" in SPEC.operations[op].args else {}
    want = ref.call(op, **args)
    client = connect(f"python:{module}:{ledger}", SPEC)
    client.reset()
    got = client.call(op, **args)
    assert not want.ok and want.code == "invalid_argument", (op, want)
    assert (got.ok, got.code) == (want.ok, want.code), f"{ledger}.{op} without its arguments: {got.code}: {got.message}"
