"""The model is split by profile: which module answers an operation comes from the contract.

``conformance/model/`` holds a shared base and one class per profile (its ``PROFILE``); the
handler for an operation is looked up through the profile the contract gives that operation,
not through a hand-written list.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from ledgercheck.conformance.model import PROFILE_OPS, Accept, Model, ModelBase, dispatch_table
from ledgercheck.spec import Spec

T = 1000.0


def test_one_class_per_contract_profile(spec: Spec) -> None:
    names = [c.PROFILE for c in PROFILE_OPS]
    assert sorted(names) == sorted(spec.profiles)
    assert len(set(names)) == len(names)
    assert all(issubclass(c, ModelBase) for c in PROFILE_OPS)


def test_every_operation_is_answered_by_its_profiles_module(spec: Spec) -> None:
    table = dispatch_table(spec, Model)
    by_profile = {c.PROFILE: c for c in PROFILE_OPS}
    for name, op in spec.operations.items():
        if op.profile is None:
            assert name not in table  # the session's own operations (hello, reset)
            continue
        owner = by_profile[op.profile]
        assert table[name] is owner.__dict__[f"_op_{name}"], name
        # and the module of that profile is the only place that defines it
        assert inspect.getmodule(table[name]).__name__.endswith(f".model.{op.profile}")
        assert [c.PROFILE for c in PROFILE_OPS if f"_op_{name}" in c.__dict__] == [op.profile]


def test_an_operation_moved_to_another_profile_is_no_longer_answered(spec: Spec) -> None:
    # the dispatch reads the contract: give "renew" to the retry profile and the model, whose
    # retry module has no renew, refuses it instead of finding the lease module's by name
    ops = dict(spec.operations)
    ops["renew"] = dataclasses.replace(ops["renew"], profile="retry")
    moved = dataclasses.replace(spec, operations=ops)
    with pytest.raises(KeyError, match=r"no operation 'renew' \(profile 'retry'\)"):
        Model(moved).expect("renew", {"work_id": "w", "token": "t", "now": T})
    assert isinstance(Model(spec).expect("list", {}), Accept)


def test_session_and_unknown_operations_raise(spec: Spec) -> None:
    m = Model(spec)
    with pytest.raises(KeyError, match="no operation 'hello'"):
        m.expect("hello", {})
    with pytest.raises(KeyError, match="no operation 'nope'"):
        m.expect("nope", {})
