"""The compiled argument checks accept and refuse exactly what spec.args.arg_problem does."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from ledgercheck.reference.argcheck import compile_all
from ledgercheck.spec import default_spec
from ledgercheck.spec.args import arg_problem, compiled

SPEC = default_spec()
CHECKS = compile_all(SPEC)

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.floats(allow_nan=True, allow_infinity=True),
                      st.text(max_size=6))
json_like = st.recursive(json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3),
                                                           st.tuples(inner), st.dictionaries(st.integers(0, 3), inner, max_size=2)),
                         max_leaves=8)
names = st.sampled_from(sorted({*SPEC.statuses, *SPEC.source_systems, *SPEC.error_classes, *SPEC.step_classes, *SPEC.receipt_states,
                                *SPEC.wakeup_kinds,
                                *SPEC.waiting_statuses, *SPEC.jitter_modes, "", " ", "bogus"}))
values = st.one_of(json_like, names, st.text(alphabet="0123456789abcdefABCDEF", min_size=63, max_size=65),
                   st.integers(SPEC.priority_min - 2, SPEC.priority_max + 2), st.just(" \t"),
                   st.fixed_dictionaries({}, optional={"max_attempts": st.integers(-1, 5), "jitter": names,
                                                       "initial_backoff": st.floats(-1, 10), "max_backoff": st.floats(-1, 400),
                                                       "multiplier": st.floats(0, 3)}))


@st.composite
def calls(draw: Any) -> tuple[str, dict[str, Any]]:
    op = draw(st.sampled_from(sorted(CHECKS)))
    args = {}
    for name in SPEC.operations[op].args:
        if draw(st.booleans()) or SPEC.operations[op].args[name].required and draw(st.integers(0, 9)) > 0:
            args[name] = draw(values)
    return op, args


@settings(max_examples=int(os.environ.get("LEDGERCHECK_ARGCHECK_EXAMPLES", "300")), deadline=None)
@given(calls())
def test_compiled_checks_equal_arg_problem(call: tuple[str, dict[str, Any]]) -> None:
    op, args = call
    try:
        want: Any = arg_problem(SPEC, op, args)
    except Exception as exc:  # noqa: BLE001 - the compiled check must fail the same way
        want = type(exc)
    try:
        got: Any = CHECKS[op](args)
    except Exception as exc:  # noqa: BLE001
        got = type(exc)
    assert got == want
    try:
        shared: Any = compiled(SPEC)[op](args)  # (the model's: spec.args.compiled, made once per Spec)
    except Exception as exc:  # noqa: BLE001
        shared = type(exc)
    assert shared == want


def test_the_compiled_checks_are_made_once_per_spec() -> None:
    assert compiled(SPEC) is compiled(SPEC) and set(compiled(SPEC)) == set(SPEC.operations)


def test_compiled_checks_on_typical_calls() -> None:
    ok = {"source_system": "manual", "source_id": "a", "now": 1.0, "payload": {"x": 1, "y": None}}
    assert CHECKS["create"](ok) is None
    assert CHECKS["create"](ok | {"source_system": "scheduler"}) == ("source_run_id", "scheduler work needs a source_run_id")
    assert CHECKS["create"](ok | {"payload": {"x": float("nan")}}) == arg_problem(SPEC, "create", ok | {"payload": {"x": float("nan")}})
    assert CHECKS["renew"]({"work_id": "w", "token": "t", "now": True})[0] == "now"
