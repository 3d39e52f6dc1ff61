"""Argument checking for contract operations, driven by the argument types in the contract.

Both the harness model and the reference ledger use this, so the meaning of each argument type
(``priority``, ``effect_key``, ``retry_policy``, ...) is written down once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from .contract import Spec

HEX = frozenset("0123456789abcdef")


def is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)  # (tuples: no union built per call)


def is_json(v: Any, depth: int = 0) -> bool:
    if depth > 64:
        return False
    if v is None or isinstance(v, (bool, str)):
        return True
    if isinstance(v, (int, float)):
        return math.isfinite(v)
    if isinstance(v, list):
        return all(is_json(x, depth + 1) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and is_json(x, depth + 1) for k, x in v.items())
    return False


def retry_policy_problem(spec: Spec, v: Any) -> str | None:
    if not isinstance(v, dict):
        return "must be an object"
    for k, x in v.items():
        if k not in ("max_attempts", "initial_backoff", "multiplier", "max_backoff", "jitter"):
            return f"unknown retry policy field {k!r}"
        if k == "max_attempts" and not (isinstance(x, int) and not isinstance(x, bool) and x >= 1):
            return "max_attempts must be an integer >= 1"
        if k in ("initial_backoff", "max_backoff") and not (is_num(x) and x >= 0):
            return f"{k} must be a number of seconds >= 0"
        if k == "multiplier" and not (is_num(x) and x >= 1):
            return "multiplier must be a number >= 1"
        if k == "jitter" and x not in spec.jitter_modes:
            return f"jitter must be one of {', '.join(spec.jitter_modes)}"
    ib = v.get("initial_backoff", spec.retry_default.initial_backoff)
    mb = v.get("max_backoff", spec.retry_default.max_backoff)
    if mb < ib:
        return "max_backoff must not be below initial_backoff"
    return None


def type_problem(spec: Spec, typ: str, v: Any) -> str | None:
    """Why ``v`` is not a valid value of argument type ``typ``, or None."""
    if typ == "string":
        return None if isinstance(v, str) else "must be a string"
    if typ == "nonempty_string":
        return None if isinstance(v, str) and v.strip() else "must be a non-empty string"
    if typ == "time":
        return None if is_num(v) else "must be a number of seconds"
    if typ == "duration":
        return None if is_num(v) and v > 0 else "must be a positive number of seconds"
    if typ == "object":
        return None if isinstance(v, dict) and is_json(v) else "must be a JSON object"
    if typ == "any":
        return None if is_json(v) else "must be JSON"
    if typ == "boolean":
        return None if isinstance(v, bool) else "must be true or false"
    if typ == "positive_int":
        return None if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else "must be an integer >= 1"
    if typ == "nonnegative_int":
        return None if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else "must be an integer >= 0"
    if typ == "source_system":
        return None if v in spec.source_systems else f"must be one of {', '.join(spec.source_systems)}"
    if typ == "priority":
        ok = isinstance(v, int) and not isinstance(v, bool) and spec.priority_min <= v <= spec.priority_max
        return None if ok else f"must be an integer in [{spec.priority_min}, {spec.priority_max}]"
    if typ == "status":
        return None if v in spec.statuses else "must be a contract status"
    if typ == "terminal_status":
        return None if v in spec.terminal_statuses else f"must be a terminal status ({', '.join(spec.terminal_statuses)})"
    if typ == "waiting_kind":
        kinds = spec.waiting_statuses
        return None if v in kinds else f"must be one of {', '.join(kinds)}"
    if typ == "wakeup_kind":
        return None if v in spec.wakeup_kinds else f"must be one of {', '.join(spec.wakeup_kinds)}"
    if typ == "error_class":
        return None if v in spec.error_classes else "must be an error class of the contract"
    if typ == "step_class":
        return None if v in spec.step_classes else "must be a step class of the contract"
    if typ == "receipt_state":
        return None if v in spec.receipt_states else "must be a receipt state"
    if typ == "effect_key":
        return None if isinstance(v, str) and len(v) == 64 and set(v) <= HEX else "must be 64 lowercase hex digits"
    if typ == "retry_policy":
        return retry_policy_problem(spec, v)
    return f"unknown argument type {typ!r}"


def arg_problem(spec: Spec, op: str, args: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first (argument name, problem) of a call, or None when the arguments are valid.

    A missing optional argument and an explicit null are the same.  Scheduler-style sources
    without a run id are reported against ``source_run_id``.
    """
    spec_op = spec.operations[op]
    for name, arg in spec_op.args.items():
        v = args.get(name)
        if v is None:
            if arg.required:
                return name, "is required"
            continue
        problem = type_problem(spec, arg.type, v)
        if problem:
            return name, problem
    if op == "create" and args.get("source_system") in spec.run_id_required_for and not args.get("source_run_id"):
        return "source_run_id", f"{args['source_system']} work needs a source_run_id"
    return None


# ---------------------------------------------------------------------- compiled checks
# arg_problem made cheap for the hot paths (the reference ledger's operations, the model's
# expectations): for common types a fast predicate that implies validity lets a value through
# at once; any value it does not accept outright is handed to type_problem itself, so a compiled
# check accepts and refuses exactly what arg_problem does, with the same first problem
# (tests/reference/test_argcheck.py pins that equivalence).

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


_COMPILED: dict[int, tuple[Spec, dict[str, Check]]] = {}


def compiled(spec: Spec) -> dict[str, Check]:
    """The compiled checks of every operation of ``spec`` (made once per Spec object)."""
    held = _COMPILED.get(id(spec))
    if held is None or held[0] is not spec:
        if len(_COMPILED) > 16:
            _COMPILED.clear()
        held = _COMPILED[id(spec)] = (spec, compile_all(spec))
    return held[1]
