"""What talking to the adapter costs this process: adapter processes started, wire round trips,
chaos worker processes started, each counted with the time it took.

The counters are plain module-level numbers (one process, one harness thread at a time; a thread
starting an adapter process ahead counts aside, :func:`set_aside`);
:func:`snapshot` and :func:`since` give the cost of a stretch of work (one test: the plugin
records it in the test's ``cost``, and the results' ``timings`` add them up by phase).  A
chaos worker's own counters come back with its replies (``chaos/crash/pool.py``) and are added here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

FIELDS = ("starts", "start_s", "stop_s", "round_trips", "round_trip_s", "workers", "worker_start_s")

_totals: dict[str, float] = dict.fromkeys(FIELDS, 0)
_aside = threading.local()  # a thread that starts an adapter ahead counts into its own (set_aside)


def add_start(seconds: float) -> None:
    """One adapter process started and greeted (``seconds`` from spawn to the hello's answer)."""
    totals = _here()
    totals["starts"] += 1
    totals["start_s"] += seconds


def _here() -> dict[str, float]:
    return getattr(_aside, "totals", None) or _totals


@contextmanager
def set_aside() -> Iterator[dict[str, float]]:
    """What this thread counts inside the block goes into the dict it yields instead of the
    process's counters; the harness thread adds it (:func:`add`) when it uses what was made (an
    adapter process started ahead on another thread counts where it is used, not where the
    harness happened to be when it became ready)."""
    mine: dict[str, float] = dict.fromkeys(FIELDS, 0)
    _aside.totals = mine
    try:
        yield mine
    finally:
        _aside.totals = None


def add_stop(seconds: float) -> None:
    """Time spent ending an adapter process (closing its input, waiting for it to exit, reaping)."""
    _here()["stop_s"] += seconds


def add_round_trips(n: int, seconds: float) -> None:
    totals = _here()
    totals["round_trips"] += n
    totals["round_trip_s"] += seconds


def add_worker(seconds: float) -> None:
    """One chaos worker process forked and ready (``seconds`` from the request to its ready)."""
    totals = _here()
    totals["workers"] += 1
    totals["worker_start_s"] += seconds


def add(other: dict[str, Any]) -> None:
    """Add counts measured elsewhere (a chaos worker's, sent back with its replies)."""
    totals = _here()
    for k in FIELDS:
        v = other.get(k)
        if isinstance(v, int | float) and not isinstance(v, bool) and v >= 0:
            totals[k] += v


def snapshot() -> dict[str, float]:
    return dict(_totals)


def since(before: dict[str, float]) -> dict[str, Any]:
    """The costs counted after ``before`` (a :func:`snapshot`): counts as ints, seconds rounded."""
    out: dict[str, Any] = {}
    for k in FIELDS:
        d = _totals[k] - before.get(k, 0)
        out[k] = round(max(0.0, d), 6) if k.endswith("_s") else int(max(0, d))
    return out


__all__ = ["FIELDS", "add", "add_round_trips", "add_start", "add_stop", "add_worker", "set_aside", "since", "snapshot"]
