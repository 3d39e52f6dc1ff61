"""The safety campaign's settings, results and shared layout: what a campaign is run with
(SafetyParams), what it returns (SafetyResult), the declarations it reads from the handshake, the
shared flag map the controller and workers meet in, and the controller's record of each process and
planned takeover. chaos/safety/campaign.py re-exports what callers use."""

from __future__ import annotations

import hashlib
import re
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ledgercheck.chaos.crash.points import ChaosError
from ledgercheck.transport.clock import VIRTUAL_EPOCH

from . import nemesis

ENTRY = "ledgercheck.chaos.safety.campaign:process_main"
DELIVERIES = ("at-most-once", "at-least-once", "effectively-once")
RECLAIMS = ("lease", "operator", "never")
SOURCE = "manual"  # every item's source system (no run id needed)
STEP_ID, TOOL = "effect", "sink"
STEP_CLASS = {"effectively-once": "non_idempotent_with_lookup"}  # the provider can be asked what happened
PLAIN_CLASS = "non_idempotent_without_lookup"  # every submission applies: a second run shows
MONITOR_OPS = ("expire", "recover", "promote_due")
IDLE = 0.003  # seconds an idle process waits for a message before it looks again
BUSY_RETRIES = 40
HOLDER_WAIT = 0.6  # seconds a due fault may wait for a worker that holds work
MAX_NOTES = 30
# A campaign's time limit is a limit on time WITHOUT progress: a phase past its planned length (or
# the campaign past --time-limit, counted from the moment its processes were told to go, not from
# their start-up) goes on while it still makes progress (an item created, a fault done, a holder
# taken over, an item finished) within the last MOVING_S of its own pace, up to STALL_CAP times its
# planned length, so a machine whose cores are busy slows a run down but does not cut it short.
MOVING_S = 2.0
STALL_CAP = 10.0
NO_GRANT = "no worker ever got an item"  # the campaign's line when no claim handed out an item
_GONE = object()  # the worker's lease was gone when it came to the effect

# The shared map (one file, mapped by every campaign process), slot = a process's number:
#   state     1 byte a slot: what the nemesis may see of a worker (FREE, HOLDING, IN_EFFECT, EFFECT_DONE)
#   ops       8 bytes a slot: the process's operation counter
#   held      KEY_BYTES a slot: the key of the item the worker holds (length byte, then the bytes)
#   claims    16 bytes a slot: claims asked, claims that handed the worker an item
#   watches   WATCHES entries: a paused holder's item the controller waits to see taken over: the
#             slot + 1 of the worker whose claim got it (int32, 0: not yet), then the item's key
#   calls     1 byte a slot: 1 while the worker is inside a call to the adapter
#   expiry    8 bytes a slot: the lease_expires_at (ledger time) of the item the worker holds, NaN if none
FLAG_SLOTS = 4096
FREE, HOLDING, IN_EFFECT, EFFECT_DONE = 0, 1, 2, 3  # a worker's byte in the shared map
KEY_BYTES = 128
WATCHES = 64
WATCH_BYTES = 4 + KEY_BYTES
OPS0 = FLAG_SLOTS
HELD0 = OPS0 + FLAG_SLOTS * 8
CLAIMS0 = HELD0 + FLAG_SLOTS * KEY_BYTES
WATCH0 = CLAIMS0 + FLAG_SLOTS * 16
CALL0 = WATCH0 + WATCHES * WATCH_BYTES
EXP0 = CALL0 + FLAG_SLOTS
FLAG_BYTES = EXP0 + FLAG_SLOTS * 8

_PART = re.compile(r"history\.(nemesis|producer|monitor|operator|census|w\d+)\.jsonl")  # one process's part of a history
Progress = Callable[[int, int | None, dict[str, Any]], None]


# ------------------------------------------------------------------------------- the shared map
def item_key(work_id: str) -> bytes:
    """An item's key in the shared map: a length byte, then its id (a digest of a long id)."""
    raw = work_id.encode("utf-8", "surrogatepass")
    if len(raw) > KEY_BYTES - 1:
        raw = b"#" + hashlib.blake2b(raw, digest_size=24).hexdigest().encode()
    return bytes((len(raw),)) + raw


def key_text(key: bytes) -> str:
    """The item id a key stands for (a digest of a long id is shown as ``#<hex>``)."""
    return key[1:1 + key[0]].decode("utf-8", "surrogatepass") if key else ""


def held_key(flags: Any, slot: int) -> bytes:
    off = HELD0 + slot * KEY_BYTES
    n = flags[off]
    return bytes(flags[off:off + 1 + n]) if n else b""


def claim_counts(flags: Any, slots: int) -> tuple[int, int]:
    """Claims asked and claims that handed out an item, over slots 0..slots."""
    asked = granted = 0
    for i in range(slots + 1):
        a, g = struct.unpack_from("<QQ", flags, CLAIMS0 + 16 * i)
        asked, granted = asked + a, granted + g
    return asked, granted


# ------------------------------------------------------------------------------- declarations
@dataclass(frozen=True)
class Declared:
    """What the implementation promises (handshake ``capabilities``; docs/protocol.md)."""

    delivery: str
    reclaim: str

    @classmethod
    def of(cls, handshake: Mapping[str, Any], address: str = "adapter") -> Declared:
        caps = handshake.get("capabilities") or {}
        profiles = handshake.get("profiles") or []
        delivery = caps.get("delivery") or "at-least-once"
        reclaim = caps.get("reclaim") or ("lease" if "lease" in profiles else "operator")
        if delivery not in DELIVERIES:
            raise ChaosError(f"adapter {address}: capability delivery {delivery!r} is not one of {', '.join(DELIVERIES)}")
        if reclaim not in RECLAIMS:
            raise ChaosError(f"adapter {address}: capability reclaim {reclaim!r} is not one of {', '.join(RECLAIMS)}")
        return cls(str(delivery), str(reclaim))


def applicable(handshake: Mapping[str, Any]) -> str | None:
    """None if the campaign can run against this adapter, else why not (one line)."""
    if "core" not in (handshake.get("profiles") or []):
        return "the adapter does not claim profile core (create, claim and close_out)"
    return None


# ------------------------------------------------------------------------------- parameters
@dataclass
class SafetyParams:
    workers: int = 4
    items: int = 40
    seed: int = 0
    faults: tuple[str, ...] = nemesis.FAULTS
    min_each: int = 1  # every fault at least this many times (nemesis.plan), when the duration allows
    duration: float | None = None  # the nemesis phase, seconds (default: from the item count)
    time_limit: float = 120.0  # the whole campaign, seconds
    lapse: float = 0.8  # real seconds a lease takes to lapse (ttl + grace) under an injected clock
    wall_scale: float = 0.01  # contract timings x this for a wall-clock adapter
    latency: tuple[float, float] = (0.01, 0.08)  # seconds a worker works on an item (half again after the effect)
    renew_p: float = 0.3
    fail_p: float = 0.1
    record: bool = True
    op_timeout: float = 30.0
    hosts: Any = None  # a chaos.hosts.HostNet: workers run in its namespaces (None: all on this host)
    workload: str = "plain"  # "profiles": workers drive spawn, inbox and outbox too (chaos/workload.ProfileSteps)
    reset_extra: dict[str, Any] = field(default_factory=dict)  # more keys for every process's reset

    def active_s(self) -> float:
        if self.duration is not None:
            return max(0.2, float(self.duration))
        return min(max(2.0, self.items * 0.06), max(1.0, self.time_limit * 0.4))


@dataclass(frozen=True)
class TimeBase:
    """The ledger time every process of the campaign uses."""

    wall: bool
    t0: float
    speedup: float

    def now(self) -> float:
        if self.wall:
            return time.time()
        return round(VIRTUAL_EPOCH + (time.monotonic() - self.t0) * self.speedup, 6)


@dataclass
class SafetyResult:
    address: str
    adapter: dict[str, Any]
    declared: dict[str, str]
    mode: str  # "processes" | "one process"
    seed: int
    workers: int
    items: int
    faults: list[str]
    history: str | None
    out_dir: str | None
    elapsed: float
    ops: int
    ops_per_s: float
    created: int
    nemesis: dict[str, int]
    schedule: list[dict[str, Any]]
    final: dict[str, int]
    notes: list[str] = field(default_factory=list)
    anomalies: list[dict[str, Any]] | None = None
    observations: dict[str, Any] = field(default_factory=dict)
    checked: bool = False
    timings: dict[str, float] = field(default_factory=dict)
    # what was reached (the checker's coverage, from the history) and what was not: the checker's
    # lines and the campaign's own (no item ever handed out, a takeover that never happened, work
    # left after the quiet period); verdict "pass", "fail" or "inconclusive" once checked
    coverage: dict[str, int] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    verdict: str | None = None
    workload: str = "plain"  # SafetyParams.workload
    takeovers: dict[str, int] = field(default_factory=dict)  # planned, by path (operator, time), missed

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def ok(self) -> bool:
        return not self.anomalies


# =========================================================================== controller side
@dataclass
class _Proc:
    name: str
    role: str
    pid: int
    conn: Any
    slot: int = -1
    dead: bool = False
    paused: bool = False
    armed: tuple[str, int, float] | None = None  # point, occurrence, disarm at
    stopped: bool = False
    starting: bool = False  # spawned, not ready yet
    start_by: float = 0.0  # when a process still starting is given up on
    on_ready: str | None = None  # what it is told once ready: "go" (a replacement)
    opened: bool = False  # a reopen process told to open the ledger
    replies: dict[str, Any] = field(default_factory=dict)
    spared_until: float = 0.0  # a holder let go after a takeover: no fault until it has written late


@dataclass
class _Takeover:
    """A paused holder whose item another worker is to take over before it goes on."""

    victim: _Proc | str  # the paused process (a logical worker's name in one-process mode)
    name: str
    key: bytes  # the item it holds (item_key)
    path: str  # "operator": the operator's recovery moves the item; "time": its lease lapsing does
    paused_at: float
    lapsed_at: float  # real time by which the holder's lease has lapsed (ttl + grace after the pause)
    deadline: float  # the safety net: let the holder go even if nobody took the item by then
    watch: int  # its entry among the shared map's watches
    seq: int = 0  # its number among the campaign's takeovers
    moved_by: str | None = None  # the operator action that named the item, once one did
    next_op: float = 0.0  # when the operator acts again (until an action names the item)

    @property
    def work_id(self) -> str:
        return key_text(self.key)


def _resolved(address: str) -> str:
    """An installed adapter's name as ``python:module:Factory``, so each campaign process imports
    it directly instead of scanning every installed distribution's entry points again."""
    if address.startswith(("python:", "exec:")):
        return address
    import importlib.metadata

    from ledgercheck.transport.client import ENTRY_POINT_GROUP

    eps = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == address.strip()]
    if len(eps) == 1 and ":" in eps[0].value and "[" not in eps[0].value:
        return f"python:{eps[0].value.strip()}"
    return address
