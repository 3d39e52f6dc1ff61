"""A snapshot is compared with the model's item, and with the fold of its trail, in one step when
every field is the same object or equal and of the same type (``model.base._all_same``); only
otherwise field by field.  The verdicts must be the field-by-field ones: a value, a type (a
boolean for a number), a missing field is reported as before, and what the field-by-field
comparison lets through (an integral float for an integer, a time within tolerance) still passes."""

from __future__ import annotations

from typing import Any

import pytest
from ledgercheck.conformance.harness import Harness
from ledgercheck.conformance.model import base
from ledgercheck.reference.adapter import ReferenceAdapter
from ledgercheck.spec import Spec
from ledgercheck.transport.client import InProcessClient


def _item(spec: Spec) -> tuple[Harness, str, dict[str, Any], list[dict[str, Any]]]:
    client = InProcessClient(ReferenceAdapter(spec), "python:test_compare_fastpath:ReferenceAdapter", spec)
    h = Harness(client, spec, client.profiles)
    h.fresh()
    wid = h.create(source_system="manual", source_id="fast-0")
    h.claim(wid)
    return h, wid, h.raw("get", work_id=wid).value, h.raw("events", work_id=wid).value


def _without(snap: dict[str, Any], name: str) -> dict[str, Any]:
    return {k: v for k, v in snap.items() if k != name}


VARIANTS = {
    "same": lambda s: dict(s),
    "value": lambda s: dict(s, owner="someone-else"),
    "bool for int": lambda s: dict(s, attempt=True),
    "int for bool": lambda s: dict(s, quarantined=0),
    "missing": lambda s: _without(s, "lease_version"),
    "string for null": lambda s: dict(s, error_class="transient"),
    "float for int": lambda s: dict(s, priority=float(s["priority"])),
    "time within tolerance": lambda s: dict(s, lease_expires_at=s["lease_expires_at"] + 1e-9),
    "time beyond it": lambda s: dict(s, lease_expires_at=s["lease_expires_at"] + 1.0),
}


def _clauses(h: Harness, wid: str, snap: dict[str, Any], trail: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    return sorted(v.clause for v in h.model.check_work(snap, wid)), sorted(v.clause for v in h.model.check_fold(snap, trail))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_one_step_comparison_gives_the_field_by_field_verdicts(spec, variant, monkeypatch):
    h, wid, snap, trail = _item(spec)
    h.model.tol = 1e-6  # as on a wall clock: instants within it are the same
    seen = VARIANTS[variant](snap)
    fast = _clauses(h, wid, dict(seen), trail)
    monkeypatch.setattr(base, "_all_same", lambda pick, a, b: False)  # field by field only
    slow = _clauses(h, wid, dict(seen), trail)
    assert fast == slow
    assert bool(fast[0]) == (variant in ("value", "bool for int", "int for bool", "missing", "string for null",
                                         "time beyond it")), fast


def test_all_same_is_exact_about_types():
    pick = base._picker(["a", "b"])
    assert base._all_same(pick, {"a": 1, "b": None}, {"b": None, "a": 1, "c": 2})
    assert not base._all_same(pick, {"a": 1, "b": None}, {"a": True, "b": None})
    assert not base._all_same(pick, {"a": 1, "b": None}, {"a": 1.0, "b": None})
    assert not base._all_same(pick, {"a": 1, "b": None}, {"a": 1})
    assert not base._all_same(pick, {"a": {"x": 1}, "b": None}, {"a": {"x": 2}, "b": None})
    one = base._picker(["a"])
    assert base._all_same(one, {"a": "x"}, {"a": "x"}) and not base._all_same(one, {"a": "x"}, {"a": "y"})


def _all_same_as_tuples(names: list[str], a: Any, b: Any) -> bool:
    """_all_same as it was: the fields' values as tuples, compared, then their types."""
    from operator import itemgetter

    pick = itemgetter(*names) if len(names) > 1 else (lambda m: (m[names[0]],))
    try:
        x, y = pick(a), pick(b)
    except (KeyError, TypeError):
        return False
    return x == y and tuple(map(type, x)) == tuple(map(type, y))


def test_the_compiled_one_step_comparison_is_the_tuple_comparison():
    nan = float("nan")
    values = [None, True, False, 0, 1, 1.0, 2, "", "x", "1", nan, float("nan"), [], [1], [1.0], {"k": 1}, {"k": True}, (1,)]
    names = ["a", "b"]
    pick = base._picker(names)
    for x, y in [(x, y) for x in values for y in values]:
        for a, b in [({"a": x, "b": None}, {"a": y, "b": None}), ({"b": x, "a": 1}, {"a": 1, "b": y, "c": 0}),
                     ({"a": x}, {"a": y, "b": None}), ({"a": x, "b": y}, [x, y]), ({"a": x, "b": x}, {"a": y, "b": y})]:
            assert base._all_same(pick, a, b) == _all_same_as_tuples(names, a, b), (a, b)
    assert base._all_same(pick, {"a": nan, "b": None}, {"a": nan, "b": None})  # the same object
    assert not base._all_same(pick, {"a": nan, "b": None}, {"a": float("nan"), "b": None})
    assert base._picker(names).same is pick.same  # compiled once per tuple of names
