"""ledgercheck.chaos: crash injection with real SIGKILL at named points, recovery checking,
exhaustive crash-window exploration and kill storms.  See docs/chaos.md.

The public names are imported on first use, so ``ledgercheck --help`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "explore": "exploration", "run_one": "exploration", "Explorer": "exploration",
    "storm": "storms",
    "replay": "rerun", "load_replay": "replays",
    "ChaosError": "points",
    "EffectSink": "sink",
    "Workload": "workload", "default_workload": "workload", "generate_workload": "workload",
    "Worker": "worker",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'ledgercheck.chaos' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
