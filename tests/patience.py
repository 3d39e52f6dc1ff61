"""Waiting in tests without betting on the machine's speed.

A test never sleeps a fixed time hoping something has happened by then, and never fails because
something took longer than a few seconds: it polls for the condition it needs (:func:`until`).
The only clock limit is SAFETY_NET, minutes long, which turns a real hang into a clear failure
naming what never happened; on a correct implementation it is never reached, however busy the
machine is (the tests pass with a CPU hog on every core: scripts/stress-run.sh).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# seconds: how long a test waits for something that must happen before it calls it a hang
SAFETY_NET = 600.0


def until(condition: Callable[[], T], what: str, *, limit: float = SAFETY_NET, every: float = 0.01) -> T:
    """Poll ``condition`` until it returns something true and return that; AssertionError naming
    ``what`` when it is still false after ``limit`` seconds (the safety net, not a verdict)."""
    end = time.monotonic() + limit
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() > end:
            raise AssertionError(f"{what}: still not so after {limit:g}s (a hang)")
        time.sleep(every)
