"""Argument checks compiled once per Spec.

``ledgercheck.spec.args.arg_problem`` is the one written-down meaning of each argument type.
This module only makes it cheap on the hot path: for common types a fast predicate that implies
validity lets a value through at once; any value it does not accept outright is handed to
``type_problem`` itself, so a compiled check accepts and refuses exactly what ``arg_problem``
does, with the same first problem (``tests/reference`` pins that equivalence).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from ledgercheck.spec import Spec
from ledgercheck.spec.args import type_problem

Problem = tuple[str, str]
Check = Callable[[Mapping[str, Any]], Problem | None]

_isfinite = math.isfinite


def _string(v: Any) -> bool:
    return type(v) is str


def _nonempty(v: Any) -> bool:
    return type(v) is str and not v.isspace() and v != ""


def _time(v: Any) -> bool:
    t = type(v)
    return (t is float or t is int) and _isfinite(v)


def _duration(v: Any) -> bool:
    t = type(v)
    return (t is float or t is int) and _isfinite(v) and v > 0


def _boolean(v: Any) -> bool:
    return type(v) is bool


def _plain_object(v: Any) -> bool:
    """A dict of str keys whose values are str, finite numbers, bools or None (a common payload)."""
    if type(v) is not dict:
        return False
    for k, x in v.items():
        if type(k) is not str:
            return False
        t = type(x)
        if t is str or t is bool or x is None or t is int:
            continue
        if t is float and _isfinite(x):
            continue
        return False
    return True


def _plain_any(v: Any) -> bool:
    t = type(v)
    if v is None or t is str or t is bool or t is int:
        return True
    if t is float:
        return _isfinite(v)
    return _plain_object(v)


_FAST: dict[str, Callable[[Any], bool]] = {
    "string": _string,
    "nonempty_string": _nonempty,
    "time": _time,
    "duration": _duration,
    "boolean": _boolean,
    "object": _plain_object,
    "any": _plain_any,
}


def _member(values: Any) -> Callable[[Any], bool]:
    allowed = frozenset(values)
    return lambda v: type(v) is str and v in allowed


def _fast_for(spec: Spec, typ: str) -> Callable[[Any], bool] | None:
    if typ in _FAST:
        return _FAST[typ]
    if typ == "source_system":
        return _member(spec.source_systems)
    if typ == "status":
        return _member(spec.statuses)
    if typ == "terminal_status":
        return _member(spec.terminal_statuses)
    if typ == "waiting_kind":
        return _member(spec.waiting_statuses)
    if typ == "error_class":
        return _member(spec.error_classes)
    if typ == "step_class":
        return _member(spec.step_classes)
    if typ == "priority":
        lo, hi = spec.priority_min, spec.priority_max
        return lambda v: type(v) is int and lo <= v <= hi
    return None


def compile_check(spec: Spec, op: str) -> Check:
    """A function of an argument mapping returning the first (name, problem), or None."""
    plan = [(name, arg.required, _fast_for(spec, arg.type), arg.type) for name, arg in spec.operations[op].args.items()]
    needs_run = frozenset(spec.run_id_required_for) if op == "create" else frozenset()

    def check(args: Mapping[str, Any]) -> Problem | None:
        for name, required, fast, typ in plan:
            v = args.get(name)
            if v is None:
                if required:
                    return name, "is required"
                continue
            if fast is not None and fast(v):
                continue
            problem = type_problem(spec, typ, v)
            if problem:
                return name, problem
        if needs_run and args.get("source_system") in needs_run and not args.get("source_run_id"):
            return "source_run_id", f"{args['source_system']} work needs a source_run_id"
        return None

    return check


def compile_all(spec: Spec) -> dict[str, Check]:
    return {op: compile_check(spec, op) for op in spec.operations}
