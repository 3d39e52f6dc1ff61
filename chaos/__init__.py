"""ledgercheck.chaos: crash injection with real SIGKILL at named points, recovery checking,
exhaustive crash-window exploration and kill storms.  See docs/chaos.md.

The public names are imported on first use, so ``ledgercheck --help`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "explore": "crash.exploration", "run_one": "crash.exploration", "Explorer": "crash.exploration",
    "storm": "crash.storms",
    "replay": "crash.rerun", "load_replay": "crash.replays",
    "ChaosError": "crash.points",
    "EffectSink": "safety.sink",
    "Workload": "safety.workload", "default_workload": "safety.workload", "generate_workload": "safety.workload",
    "Worker": "crash.worker",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'ledgercheck.chaos' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
