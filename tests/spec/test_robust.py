"""Whatever a contract document says, validation ends in a Spec or a SpecError, never a crash.

Documents are made by changing, deleting or swapping values of the shipped contract, drawing
replacements from values the contract itself uses (so many mutants pass the JSON Schema and
reach the semantic checks and the Spec builder).
"""

from __future__ import annotations

import copy
import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledgercheck.spec import SpecError, default_spec
from ledgercheck.spec.contract import Spec
from ledgercheck.spec.load import spec_from_document

BASE = copy.deepcopy({k: v for k, v in default_spec().document.items()})


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, prefix + (i,))
    return out


def _scalars(value: Any) -> set[Any]:
    if isinstance(value, dict):
        return set().union(*(_scalars(v) for v in value.values()), set(value)) if value else set()
    if isinstance(value, list):
        return set().union(*(_scalars(v) for v in value)) if value else set()
    return {value}


PATHS = _paths(BASE)
POOL = sorted(_scalars(BASE), key=repr) + [0, -1, 1, 10**9, 0.5, "", "0s", "1ms", None, True, False, [], {}]


def _apply(doc: dict[str, Any], path: tuple[Any, ...], action: str, new: Any) -> None:
    *parents, last = path
    holder: Any = doc
    for p in parents:
        holder = holder[p]
    if action == "delete":
        del holder[last]
    elif action == "set":
        holder[last] = copy.deepcopy(new)
    elif isinstance(holder, dict):  # rename a key
        if isinstance(new, str) and new not in holder:
            holder[new] = holder.pop(last)
    else:
        holder[last] = copy.deepcopy(new)


mutation = st.tuples(st.sampled_from(PATHS), st.sampled_from(["set", "set", "delete", "rename"]), st.sampled_from(POOL))


def _exercise(spec: Spec) -> None:
    assert len(spec.digest) == 64
    spec.forbidden_pairs()
    spec.profile_closure(spec.profiles)
    for src in (None, *spec.source_systems):
        spec.lease_for(src)
        policy = spec.retry_policy_for(src)
        for n in (1, 2, 50):
            lo, hi = spec.backoff_range(policy, n)
            assert 0 <= lo <= hi <= policy.max_backoff and math.isfinite(hi)
        for kind in spec.waiting_statuses:
            spec.waiting_timeout(kind, src)
    for cls in spec.step_classes:
        spec.scanner_decision([("pending", cls)], False)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutation, min_size=1, max_size=3))
def test_mutated_contract_is_a_spec_or_a_spec_error(mutations: list[tuple[tuple[Any, ...], str, Any]]) -> None:
    doc = copy.deepcopy(BASE)
    for path, action, new in mutations:
        try:
            _apply(doc, path, action, new)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or retyped the path
    try:
        spec = spec_from_document(doc)
    except SpecError as exc:
        assert exc.problems
        for p in exc.problems:
            assert "\n" not in str(p)
        return
    _exercise(spec)
