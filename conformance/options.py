"""The run options of ``certify`` and of the pytest plugin (``--ledger-*``), checked before anything
starts: a value no run can use is one line naming the option, never a traceback or a run that
fails later for a reason it does not name (docs/inputs.md, "Command-line options")."""

from __future__ import annotations

import math
import re
from typing import Any

MAX_SEED = 2**32  # a seed is in [0, 2**32), as a reset's and a trace's are
MAX_SHARDS = 100_000
MAX_WALL_SCALE = 100.0
MAX_SECONDS = 7 * 86_400.0  # the longest per-call timeout (before scaling) and the largest scale's effect
MAX_FACTOR = 1_000.0
MAX_WORKERS = 1_024
_SHARD = re.compile(r"([0-9]{1,6})/([0-9]{1,6})")
_WORKERS = re.compile(r"auto|logical|[0-9]{1,4}")


def _number(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) else None


def shard_of(text: str | None) -> tuple[int, int] | None:
    """``K/N`` as (K, N), or None when it is not ASCII digits with 1 <= K <= N <= MAX_SHARDS."""
    m = _SHARD.fullmatch(text or "")
    if not m:
        return None
    k, n = int(m.group(1)), int(m.group(2))
    return (k, n) if 1 <= k <= n <= MAX_SHARDS else None


def option_problem(*, timeout: Any = 10.0, timeout_scale: Any = 1.0, wall_scale: Any = 0.01, seed: Any = None,
                   shard: str | None = None, breaker: Any = 3, workers: str | None = None,
                   prefix: str = "--") -> str | None:
    """The first option that cannot be used, as one line; None when all can.  ``prefix`` is how
    the options are spelled (``--`` for certify, ``--ledger-`` for the plugin)."""
    for name, value, hi in (("timeout", timeout, MAX_SECONDS), ("timeout-scale", timeout_scale, MAX_FACTOR),
                            ("wall-scale", wall_scale, MAX_WALL_SCALE)):
        x = _number(value)
        if x is None or not 0 < x <= hi:
            return f"{prefix}{name} must be a number above 0 and at most {hi:g}, not {_shown(value)}"
    if seed is not None and not (isinstance(seed, int) and 0 <= seed < MAX_SEED):
        return f"{prefix}seed must be an integer from 0 to 2**32 - 1, not {_shown(seed)}"
    if shard is not None and shard_of(shard) is None:
        return f"{prefix}shard must be K/N with 1 <= K <= N <= {MAX_SHARDS:,}, not {_shown(shard)}"
    if not isinstance(breaker, int) or breaker < 0:
        return f"{prefix}breaker must be 0 (never) or more"
    if workers is not None and not (_WORKERS.fullmatch(workers) and (not workers.isdigit() or int(workers) <= MAX_WORKERS)):
        return f"-n must be auto, logical or a number of processes from 0 to {MAX_WORKERS}, not {_shown(workers)}"
    return None


def _shown(value: Any, limit: int = 40) -> str:
    """A value as a message shows it: escaped, one line, cut; an integer too long to print is named by its size."""
    from ledgercheck.reports.text import one_line, terminal

    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of {value.bit_length():,} bits"
    text = terminal(one_line(repr(value) if not isinstance(value, str) else f"'{value}'"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def keyword_problem(expression: str | None) -> str | None:
    """Why ``-k EXPRESSION`` is not a pytest keyword expression (one line), or None."""
    if expression is None:
        return None
    try:
        from _pytest.mark.expression import Expression
    except ImportError:  # a pytest without it: pytest itself refuses a bad expression
        return None
    try:
        Expression.compile(expression)
    except (SyntaxError, ValueError) as exc:  # pytest's ParseError (older) or SyntaxError (newer)
        why = getattr(exc, "msg", None) or str(exc)
        return f"-k {_shown(expression, 80)}: not a keyword expression ({_shown(why, 160)[1:-1]})"
    return None
