"""Workloads: seeded, JSON round trip, the default one covers the matrix, bad documents are refused."""

from __future__ import annotations

import pytest
from ledgercheck.chaos.safety.workload import (
    ItemIndex,
    Workload,
    WorkloadError,
    default_workload,
    generate_workload,
)
from ledgercheck.spec import Spec


def test_generation_is_seeded(spec: Spec) -> None:
    a = generate_workload(spec, 7, items=30).to_dict()
    assert a == generate_workload(spec, 7, items=30).to_dict()
    assert a != generate_workload(spec, 8, items=30).to_dict()


def test_json_round_trip(spec: Spec) -> None:
    wl = generate_workload(spec, 3, items=25, wait_ratio=0.5)
    assert Workload.from_dict(wl.to_dict(), spec).to_dict() == wl.to_dict()


def test_default_workload_covers_every_step_class_wait_kind_and_source(spec: Spec) -> None:
    wl = default_workload(spec, 0)
    firsts = {it.steps[0].step_class for it in wl.items}
    after_wait = {it.steps[i + 1].step_class for it in wl.items for i, s in enumerate(it.steps) if not s.is_effect}
    assert firsts == set(spec.step_classes) == after_wait
    assert {s.wait_kind for it in wl.items for s in it.steps if not s.is_effect} == set(spec.waiting_statuses)
    assert {it.source_system for it in wl.items} == set(spec.source_systems)
    for it in wl.items:
        if it.source_system in spec.run_id_required_for:
            assert it.source_run_id


def test_no_waits_when_the_adapter_cannot_wait(spec: Spec) -> None:
    wl = default_workload(spec, 0, waiting=False)
    assert all(s.is_effect for it in wl.items for s in it.steps)


@pytest.mark.parametrize("doc, message", [
    ([], "expected an object"),
    ({"items": []}, "non-empty list"),
    ({"items": [{"key": "a", "source_system": "manual", "source_id": "x", "steps": []}]}, "'steps'"),
    ({"items": [{"key": "a", "source_system": "mars", "source_id": "x",
                 "steps": [{"step_id": "s", "kind": "effect", "step_class": "pure", "tool": "t"}]}]}, "source system"),
    ({"items": [{"key": "a", "source_system": "manual", "source_id": "x",
                 "steps": [{"step_id": "s", "kind": "effect", "step_class": "magic", "tool": "t"}]}]}, "step class"),
    ({"items": [{"key": "a", "source_system": "manual", "source_id": "x",
                 "steps": [{"step_id": "s", "kind": "wait", "wait_kind": "user"}]}]}, "wait_ref"),
])
def test_malformed_workloads_are_refused_with_one_line(spec: Spec, doc: object, message: str) -> None:
    with pytest.raises(WorkloadError, match=message) as exc:
        Workload.from_dict(doc, spec)
    assert "\n" not in str(exc.value)


def test_item_index_finds_items_by_source(tmp_path, spec: Spec) -> None:
    wl = generate_workload(spec, 5, items=40)
    path = str(tmp_path / "wl.db")
    ItemIndex.write(wl, path)
    idx = ItemIndex(path, spec)
    for it in wl.items[::7]:
        assert idx.get(it.source_system, it.source_id, it.source_run_id) == it
    assert idx.get("manual", "nobody", None) is None
    assert idx.workload().to_dict()["items"] == wl.to_dict()["items"]
    idx.close()
