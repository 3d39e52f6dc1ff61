"""What a kill storm may ask for: one table for ``crash storm`` and for storm replay files.

Every storm worker is a process (with its adapter) and every kill starts a replacement, so the
worker count is capped: ``MAX_WORKERS`` by default, raised with ``--max-workers`` up to
``HARD_MAX_WORKERS``.  Kills, items and timings are capped at what one run on one machine can
do.  A replay file is held to the same table (a run never writes more than it allows), checked
before anything starts (docs/inputs.md).  This module imports nothing of the package, so the
storms and the replay reader can both use it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

MAX_WORKERS = 64
HARD_MAX_WORKERS = 1024
MAX_KILLS = 10_000
MAX_ITEMS = 100_000
MAX_STEPS = 20
MAX_GAP = 60.0
MAX_LATENCY = 10.0
MAX_TIME_LIMIT = 7 * 86400.0
SEED_RANGE = (-(2**63), 2**63 - 1)

# parameter: (integer?, lowest, highest); the workers' highest is the cap in force
STORM_LIMITS: dict[str, tuple[bool, float, float]] = {
    "seed": (True, *SEED_RANGE),
    "workers": (True, 2, HARD_MAX_WORKERS),
    "kills": (True, 0, MAX_KILLS),
    "items": (True, 1, MAX_ITEMS),
    "max_steps": (True, 1, MAX_STEPS),
    "wait_ratio": (False, 0.0, 1.0),
    "gap_min": (False, 0.0, MAX_GAP),
    "gap_max": (False, 0.0, MAX_GAP),
    "latency": (False, 0.0, MAX_LATENCY),
    "time_limit": (False, 0.0, MAX_TIME_LIMIT),
    "per_cycle": (True, 0, MAX_ITEMS),
}


def is_number(v: Any, *, integer: bool = False) -> bool:
    """An int (never a bool), or for ``integer=False`` also a finite float."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return False
    return isinstance(v, int) if integer else math.isfinite(v)


def _brief(value: Any, limit: int = 40) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def storm_problem(params: Mapping[str, Any], *, max_workers: int = MAX_WORKERS) -> str | None:
    """The first thing wrong with storm parameters (all of them or a subset), as one sentence,
    or None.  ``max_workers`` is the worker cap in force."""
    for name in params:
        if name not in STORM_LIMITS:
            return f"storm has an unknown parameter {_brief(name)}"
    for name, value in params.items():
        integer, lo, hi = STORM_LIMITS[name]
        if name == "workers":
            hi = max_workers
        if not is_number(value, integer=integer):
            return f"storm {name} must be {'an integer' if integer else 'a finite number'}, not {_brief(value)}"
        if not lo <= value <= hi:
            more = (f" (at most {max_workers} worker processes; --max-workers raises the cap up to {HARD_MAX_WORKERS})"
                    if name == "workers" and value > hi else "")
            return f"storm {name} {_brief(value)} is outside {lo:g}..{hi:g}{more}"
    if "gap_min" in params and "gap_max" in params and params["gap_min"] > params["gap_max"]:
        return f"storm gap_min {params['gap_min']:g} is above gap_max {params['gap_max']:g}"
    return None
