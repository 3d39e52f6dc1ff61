"""Clocks for the harness.

Time is an argument of the contract: every time-dependent operation receives ``now``.  An
adapter with an *injected* clock uses exactly the ``now`` it is given, so the harness moves a
virtual clock and never sleeps.  An adapter with a *wall* clock decides by its own clock; the
harness then runs the contract at a reduced time scale (every timing multiplied by ``scale``),
sends that scaled contract to the adapter, sleeps for real when it moves time, and compares
timestamps with a tolerance.  Both waits the harness needs are explicit and scaled by the same
factor: a *deadline* for things that must happen, and a *quiet window* for things that must not.

The contract is scaled once, where a run starts (``scaled_spec``, ``scaled_document``): from then
on every duration the harness handles is in *clock seconds*, the unit of the scaled spec it checks
with (``Harness.advance``, the duration arguments it sends, the model's instants).  A duration
written in the contract's own seconds is converted once, by ``Harness.contract_seconds``.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

from ledgercheck.spec import Spec
from ledgercheck.spec.contract import parse_duration
from ledgercheck.spec.load import build_spec

# Virtual time starts at a round instant; every step the harness takes is a multiple of 1/8 s,
# so sums like expiry + grace are exact in binary floating point and boundaries are sharp.
VIRTUAL_EPOCH = 1_000_000.0
QUANTUM = 0.125


class InjectedClock:
    kind = "injected"
    tolerance = 0.0

    def __init__(self, start: float = VIRTUAL_EPOCH) -> None:
        self.t = float(start)

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("time never runs backwards")
        self.t += seconds
        return self.t

    def set(self, t: float) -> float:
        if t < self.t:
            raise ValueError("time never runs backwards")
        self.t = t
        return self.t


@dataclass
class WallClock:
    """Real time for adapters that decide by their own clock; ``scale`` shrinks the contract."""

    scale: float = 0.01
    tolerance: float = 0.05
    kind: str = "wall"

    def now(self) -> float:
        return time.time()

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("time never runs backwards")
        time.sleep(seconds)
        return time.time()

    def set(self, t: float) -> float:
        delay = t - time.time()
        if delay > 0:
            time.sleep(delay)
        return time.time()


def deadline(seconds: float, factor: float) -> float:
    """How long to wait for something that must happen."""
    return seconds * factor


def quiet_window(seconds: float, factor: float) -> float:
    """How long to watch for something that must not happen."""
    return seconds * factor


_TIMING_PATHS = [
    ("lease", "ttl"), ("lease", "renew_interval"), ("lease", "grace"),
    ("retry", "policy", "initial_backoff"), ("retry", "policy", "max_backoff"),
    ("idempotency", "retention"),
]


def scaled_document(doc: dict[str, Any], scale: float) -> dict[str, Any]:
    """A copy of a merged contract document with every duration multiplied by ``scale``."""
    out = copy.deepcopy(dict(doc))

    def mul(d: dict[str, Any], key: str) -> None:
        if key in d and d[key] is not None:
            d[key] = parse_duration(d[key]) * scale

    for path in _TIMING_PATHS:
        node = out
        for p in path[:-1]:
            node = node.get(p, {})
        mul(node, path[-1])
    for src in out["lease"].get("by_source", {}).values():
        for k in ("ttl", "renew_interval", "grace"):
            mul(src, k)
    for k in list(out["waiting"]["timeouts"]):
        mul(out["waiting"]["timeouts"], k)
    for src in out["waiting"].get("by_source", {}).values():
        for k in list(src.get("timeouts", {})):
            mul(src["timeouts"], k)
    for src in out["retry"].get("by_source", {}).values():
        for k in ("initial_backoff", "max_backoff"):
            mul(src.get("policy", {}), k)
    for ph in out["phases"].values():
        mul(ph, "timeout")
    return out


def scaled_spec(spec: Spec, scale: float) -> Spec:
    if scale == 1.0:
        return spec
    return build_spec(scaled_document(plain(spec.document), scale), dict(spec.files))


def plain(value: Any) -> Any:
    """The contract document as plain JSON-able dicts and lists (for the wire and for copies)."""
    if hasattr(value, "items"):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def wall_tolerance(handshake: dict[str, Any], timeout_scale: float = 1.0) -> float:
    """How far apart a wall-clock adapter's and the harness's timestamps may be: 0.05 s (times
    the run's timeout scale), widened to twice the ``time_resolution`` the adapter declares."""
    res = (handshake.get("capabilities") or {}).get("time_resolution")
    base = 0.05 * timeout_scale
    return max(base, 2.0 * float(res)) if isinstance(res, int | float) and not isinstance(res, bool) else base
