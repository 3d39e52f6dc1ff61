"""Argument checking for contract operations, driven by the argument types in the contract.

Both the harness model and the reference ledger use this, so the meaning of each argument type
(``priority``, ``effect_key``, ``retry_policy``, ...) is written down once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .contract import Spec

HEX = frozenset("0123456789abcdef")


def is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def is_json(v: Any, depth: int = 0) -> bool:
    if depth > 64:
        return False
    if v is None or isinstance(v, bool | str):
        return True
    if isinstance(v, int | float):
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
