"""The safety campaign: real concurrent clients of one ledger under faults, recorded as a history.

Whatever an implementation declares, the campaign asks its ledger the questions a runtime cares
about most (does it lose work, run work twice, let two workers own one item, accept a stale
worker's write?) by doing what a runtime does and writing down everything that happened:

* a **producer** creates the items (spread over the campaign, in small bursts, so several are in
  flight at any moment);
* N **workers** loop claim -> work -> apply the item's effect to the harness's effect sink (the
  ground truth, chaos/sink.py) -> close out; sometimes they renew first (``renew`` offered),
  sometimes they fail with a retryable error before the effect (``fail`` offered).  If the
  implementation declares ``delivery: effectively-once`` a worker goes through the ledger's effect
  journal (effect_begin, then a lookup at the provider for a receipt it did not create, then
  effect_record) around the effect;
* a **monitor** (the runtime's scheduler) runs the ledger's own monitor operations (``expire``,
  ``recover``, ``promote_due``, those offered) every few ticks when the declared reclaim path is
  ``lease``; ``promote_due`` only otherwise;
* the **nemesis** (chaos/nemesis.py) kills workers (at random moments and at named crash points),
  pauses them past their lease's ttl + grace and lets them go, and reopens the ledger from a new
  process while others hold work.  Killed workers are replaced.

After the nemesis stops comes a quiet period in which recovery has its chance by the declared
path (``operator``: the campaign runs ``recover`` if offered, else ``expire`` and a ``requeue`` of
every timed-out item, once the leases of the dead have lapsed), then the final read: a ``get`` of
every created item, recorded as the ``final`` record.

For a ``durable`` adapter every actor is its own OS process on the same ledger ``dir`` (forked
from the fork server, each with its own adapter client: an ``exec:`` adapter's subprocess, or
the in-process adapter loaded in that process).  A non-durable adapter shares no state across
processes, so the campaign runs all actors in one process, interleaved, with logical kills and
pauses (no reopen), and says so.

Time: an injected-clock adapter gets the harness's clock, shared by every process through
CLOCK_MONOTONIC: ``now = VIRTUAL_EPOCH + (monotonic() - t0) * speedup``, the speedup chosen so a
lease's ttl + grace lapses in ``lapse`` real seconds.  A wall-clock adapter gets real time and
the contract's timings scaled by ``wall_scale`` (as certify does).

Each process writes its own history file (chaos/history.py, one ``write`` per record, so a
SIGKILL loses nothing recorded); the controller merges them into ``history.jsonl`` and hands it
to the offline checker (chaos/anomalies.py).  ``record=False`` runs the same workload without
writing anything (for the benchmark).
"""

from __future__ import annotations

import hashlib
import math
import mmap
import os
import random
import re
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import wait as wait_conns
from typing import Any

from ledgercheck.spec import Spec, default_spec
from ledgercheck.spec.rules import crash_points_at
from ledgercheck.transport.client import AdapterError, Client, connect
from ledgercheck.transport.clock import VIRTUAL_EPOCH, plain, scaled_document
from ledgercheck.transport.protocol import Outcome
from ledgercheck.transport.reaper import gone

from . import nemesis
from .forkserver import ForkServerError, fork_server
from .history import HistoryWriter, merge_histories, process_path
from .points import DONE, ChaosError, leased_status, worker_points
from .sink import EffectSink

ENTRY = "ledgercheck.chaos.safety:process_main"
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
    takeovers: dict[str, int] = field(default_factory=dict)  # planned, by path (operator, time), missed

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def ok(self) -> bool:
        return not self.anomalies


# =============================================================================== worker side
class _Recorder:
    """One actor's ledger calls, each recorded as invoke + complete (when recording)."""

    def __init__(self, ctx: _Ctx, name: str, slot: int = -1) -> None:
        self.ctx = ctx
        self.name = name
        self.w = HistoryWriter(process_path(ctx.out, name), name, t0=ctx.tb.t0) if ctx.record else None
        self.in_call = CALL0 + slot if 0 <= slot < FLAG_SLOTS else -1  # a worker's "inside a call" byte

    def call(self, op: str, **args: Any) -> Outcome:
        ctx = self.ctx
        if op in ctx.unsupported:
            return Outcome.error("unsupported", f"the adapter has no {op}() operation")
        args = {k: v for k, v in args.items() if v is not None}
        for attempt in range(BUSY_RETRIES):
            w = self.w
            if self.in_call >= 0:  # set before the invoke is recorded: a pause after it sees the call
                ctx.flags[self.in_call] = 1
            try:
                i = w.invoke(op, args) if w is not None else 0
                out = ctx.client.call(op, **args)
            finally:
                if self.in_call >= 0:
                    ctx.flags[self.in_call] = 0
            ctx.ops += 1
            struct.pack_into("<Q", ctx.flags, ctx.counter, ctx.ops)
            if w is not None:
                if out.ok:
                    w.complete(i, op, "ok", result=out.value)
                else:
                    w.complete(i, op, "refused" if out.definite else "indefinite",
                               error={"code": out.code, "message": out.message[:300]})
            if out.ok or out.code != "busy" or attempt + 1 == BUSY_RETRIES:
                break
            time.sleep(0.002 * (attempt + 1))
        if not out.ok and out.code == "unsupported":
            ctx.unsupported.add(op)
        return out

    def effect(self, work_id: str, key: str, seq: int, now: float, token: str) -> None:
        applied, count = self.ctx.sink_row(seq)
        if self.w is not None:
            self.w.write({"type": "effect", "process": self.name, "work_id": work_id, "key": key, "applied": applied,
                          "count": count, "t": self.w.t(), "seq": seq, "now": now, "token": token})

    def close(self) -> None:
        if self.w is not None:
            self.w.close()


class _Actor:
    def __init__(self, name: str, role: str, gen: Iterator[bool], rec: _Recorder, slot: int = -1,
                 hooks: Any = None) -> None:
        self.name, self.role, self.gen, self.rec, self.slot, self.hooks = name, role, gen, rec, slot, hooks
        self.paused_until = 0.0


class _Ctx:
    """One OS process's share of the campaign."""

    def __init__(self, conn: Any, cfg: Mapping[str, Any], client: Client, spec: Spec) -> None:
        self.conn = conn
        self.cfg = cfg
        self.client = client
        self.spec = spec
        # where the monitor's expire moves a lapsed leased item (what the operator requeues)
        self.expired = next(iter(spec.targets("expire", leased_status(spec))), None)
        self.tb = TimeBase(**cfg["time"])
        self.out = cfg["out"]
        self.record = bool(cfg["record"])
        self.sink = EffectSink(cfg["sink"], spec)
        self.step_class = cfg["step_class"]
        self.journal = cfg["delivery"] == "effectively-once"
        self.latency = tuple(cfg["latency"])
        self.renew_p, self.fail_p = float(cfg["renew_p"]), float(cfg["fail_p"])
        self.retryable = next((c for c, r in spec.error_classes.items() if r), None)
        self.unsupported: set[str] = set()
        self.census: _Recorder | None = None  # the quiet period's recorded reads (counts())
        self.operator_rec: _Recorder | None = None  # the operator's recorded calls (operator())
        self.ops = 0
        self.stopping = False
        self.started = 0.0
        self.n_spawned = 0
        self.counter = OPS0 + 8 * int(cfg["slot"])  # where this process counts its operations
        fd = os.open(cfg["flags"], os.O_RDWR)
        try:
            self.flags = mmap.mmap(fd, FLAG_BYTES)
        finally:
            os.close(fd)

    def now(self) -> float:
        return self.tb.now()

    def hold(self, slot: int, state: int) -> None:
        """FREE, HOLDING or IN_EFFECT: what the nemesis may see of this worker."""
        if 0 <= slot < FLAG_SLOTS:
            self.flags[slot] = state

    def expires(self, slot: int, value: Any) -> None:
        """The lease expiry of the item this worker holds, as the ledger said it (claim, renew)."""
        if 0 <= slot < FLAG_SLOTS:
            struct.pack_into("<d", self.flags, EXP0 + 8 * slot,
                             float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan)

    def claimed(self, slot: int, work_id: str | None) -> None:
        """After a claim (recorded): count it; for one that handed out an item, note which item
        this worker holds, and mark every watch on that item as taken by this worker (the
        controller waits for that to let a paused holder go on)."""
        if not 0 <= slot < FLAG_SLOTS:
            return
        f = self.flags
        off = CLAIMS0 + 16 * slot
        asked, granted = struct.unpack_from("<QQ", f, off)
        struct.pack_into("<QQ", f, off, asked + 1, granted + (work_id is not None))
        if work_id is None:
            return
        key = item_key(work_id)
        held = HELD0 + slot * KEY_BYTES
        f[held:held + len(key)] = key
        n = len(key)
        for i in range(WATCHES):
            w = WATCH0 + i * WATCH_BYTES + 4
            if f[w] == key[0] and f[w:w + n] == key:
                struct.pack_into("<i", f, w - 4, slot + 1)

    def sink_row(self, seq: int) -> tuple[bool, int]:
        r = self.sink.conn.execute(
            "SELECT s.applied, (SELECT count(*) FROM submission t WHERE t.key = s.key AND t.applied = 1 AND t.seq <= s.seq) "
            "FROM submission s WHERE s.seq = ?", (seq,)).fetchone()
        return (bool(r[0]), int(r[1])) if r else (True, 1)

    def idle_for(self, seconds: float) -> Iterator[bool]:
        end = time.monotonic() + seconds
        while time.monotonic() < end and not (self.stopping and seconds > 0.5):
            yield False

    # -- actors --------------------------------------------------------------------------------
    def worker(self, name: str, slot: int, seed: int) -> _Actor:
        from .worker import Worker

        rec = _Recorder(self, name, slot)
        hooks = Worker(self.client, self.spec, name, self.conn)  # crash points: arm, hit, announce
        gen = self._work(rec, hooks, slot, random.Random(seed))
        return _Actor(name, "worker", gen, rec, slot, hooks)

    def _work(self, rec: _Recorder, hooks: Any, slot: int, rng: random.Random) -> Iterator[bool]:
        while not self.stopping:
            out = rec.call("claim", owner=rec.name, now=self.now())
            if not out.ok or not isinstance(out.value, Mapping) or not out.value.get("work_id"):
                self.claimed(slot, None)
                yield False
                continue
            self.claimed(slot, str(out.value["work_id"]))
            self.expires(slot, out.value.get("lease_expires_at"))
            self.hold(slot, HOLDING)
            try:
                yield from self._item(rec, hooks, rng, out.value, slot)
            finally:
                self.hold(slot, FREE)
                hooks.mark(None, None, None, "unclaimed")
            yield True

    def _item(self, rec: _Recorder, hooks: Any, rng: random.Random, held: Mapping[str, Any],
              slot: int) -> Iterator[bool]:
        wid = str(held["work_id"])
        token = str(held.get("lease_token") or "")
        lease = {"expires": held.get("lease_expires_at")}
        hooks.mark(wid, None, 0, "acquired")
        hooks.reach("acquired")
        if self.retryable and "fail" not in self.unsupported and rng.random() < self.fail_p and (held.get("attempt") or 1) <= 1:
            out = rec.call("fail", work_id=wid, token=token, error_class=self.retryable,
                           message="a transient failure before the effect", now=self.now())
            if out.code != "unsupported":
                return
        yield from self.idle_for(rng.uniform(*self.latency))  # the work itself
        if "renew" not in self.unsupported and rng.random() < self.renew_p:
            out = rec.call("renew", work_id=wid, token=token, now=self.now())
            if not out.ok and out.code != "unsupported":
                return  # the lease is gone (or nobody can tell): leave the item to recovery
            if out.ok and isinstance(out.value, Mapping):
                lease["expires"] = out.value.get("lease_expires_at")
                self.expires(slot, lease["expires"])
            hooks.mark(wid, None, 0, "renewed")
            hooks.reach("renewed")
        if self.journal and "effect_begin" not in self.unsupported:
            if not (yield from self._journaled(rec, hooks, wid, token, lease, slot)):
                return
        else:
            if self._effect(rec, slot, wid, f"{wid}/{STEP_ID}", token, lease, lookup=False) is _GONE:
                return  # the ledger refused to renew the lapsed lease: leave the item to recovery
            hooks.mark(wid, None, 0, "submitted")
            hooks.reach("submitted")
        yield from self.idle_for(rng.uniform(*self.latency) / 2)  # the rest of the work, the effect done
        hooks.reach("recorded")
        rec.call("close_out", work_id=wid, token=token, status=DONE, result={"by": rec.name}, now=self.now())

    def _effect(self, rec: _Recorder, slot: int, wid: str, key: str, token: str, lease: dict[str, Any],
                lookup: bool) -> Any:
        """The item's effect, done only while the worker's lease is live: a runtime that finds its
        lease past its expiry by the clock renews before acting and leaves the item if refused
        (returns _GONE).  The nemesis never leaves a worker paused inside this section (it sees
        IN_EFFECT and lets go at once): no ledger can stop a process that was stopped after its
        last check from reaching an outside provider late, so such a pause would test nothing
        about the ledger."""
        self.hold(slot, IN_EFFECT)
        try:
            exp = lease.get("expires")
            if isinstance(exp, int | float) and self.now() > exp:
                out = rec.call("renew", work_id=wid, token=token, now=self.now())
                if not out.ok or not isinstance(out.value, Mapping):
                    self.hold(slot, HOLDING)
                    return _GONE
                lease["expires"] = out.value.get("lease_expires_at")
                self.expires(slot, lease["expires"])
            result = self.sink.lookup(key) if lookup else None
            result = result if result is not None else self._apply(rec, wid, key, token)
            self.hold(slot, EFFECT_DONE)
            return result
        except BaseException:
            self.hold(slot, HOLDING)
            raise

    def _journaled(self, rec: _Recorder, hooks: Any, wid: str, token: str, lease: dict[str, Any],
                   slot: int) -> Iterator[bool]:
        out = rec.call("effect_begin", work_id=wid, step_id=STEP_ID, tool=TOOL, input={"work": wid},
                       step_class=self.step_class, token=token, now=self.now())
        if not out.ok or not isinstance(out.value, Mapping):
            return False
        receipt = out.value.get("receipt") or {}
        state, key = receipt.get("state"), str(receipt.get("key") or "")
        if state == "completed":
            return True  # done before: the effect must not run again
        if state not in ("pending", "unknown") or not key:
            return False  # needs a person
        hooks.mark(wid, None, 0, "begun")
        hooks.reach("begun")
        result = self._effect(rec, slot, wid, key, token, lease, lookup=not out.value.get("created"))
        if result is _GONE:
            return False
        hooks.mark(wid, None, 0, "submitted")
        hooks.reach("submitted")
        yield True
        out = rec.call("effect_record", key=key, input_hash=receipt.get("input_hash"), result={"provider": result},
                       token=token, now=self.now())
        if not out.ok:
            return False
        hooks.mark(wid, None, 0, "recorded")
        return True

    def _apply(self, rec: _Recorder, wid: str, key: str, token: str) -> Any:
        res = self.sink.submit(key=key, work_id=wid, step_id=STEP_ID, tool=TOOL, step_class=self.step_class,
                               input={"work": wid}, worker=rec.name, session=rec.name)
        rec.effect(wid, key, int(res.get("sub") or 0), self.now(), token)
        return res

    def producer(self, name: str, schedule: Sequence[tuple[float, int]], seed: int) -> _Actor:
        rec = _Recorder(self, name)
        return _Actor(name, "producer", self._produce(rec, schedule, seed), rec)

    def _produce(self, rec: _Recorder, schedule: Sequence[tuple[float, int]], seed: int) -> Iterator[bool]:
        for offset, i in schedule:
            while time.monotonic() - self.started < offset:
                if self.stopping:
                    return
                yield False
            sid = f"safety-{seed}-{i}"
            for _ in range(5):  # an indefinite create is retried with the same identity
                out = rec.call("create", source_system=SOURCE, source_id=sid, now=self.now())
                if out.ok and isinstance(out.value, Mapping):
                    work = out.value.get("work") or {}
                    self.conn.send({"event": "created", "work_id": work.get("work_id"), "source_id": sid})
                    break
                if out.definite:
                    self.conn.send({"event": "note", "message": f"create {sid} refused: {out.code}: {out.message[:120]}"})
                    break
            yield True
        self.conn.send({"event": "produced"})

    def monitor(self, name: str, ops: Sequence[str], period: float) -> _Actor:
        rec = _Recorder(self, name)
        return _Actor(name, "monitor", self._watch(rec, ops, period), rec)

    def _watch(self, rec: _Recorder, ops: Sequence[str], period: float) -> Iterator[bool]:
        while not self.stopping:
            for op in ops:
                if op not in self.unsupported:
                    rec.call(op, now=self.now())
            yield True
            yield from self.idle_for(period)

    # -- commands from the controller ----------------------------------------------------------
    def operator(self) -> list[dict[str, Any]] | None:
        """The operator path: recover if offered, else expire then requeue every timed-out item.
        Each action names the items it moved; None when the adapter offers neither recover nor
        expire (there is no operator path).  Recorded as process ``operator``."""
        if self.operator_rec is None:
            self.operator_rec = _Recorder(self, "operator")
        rec = self.operator_rec
        now = self.now()
        out = rec.call("recover", now=now)
        if out.ok:
            return [{"op": "recover", "now": now, "work_ids": _moved(out.value)}]
        actions: list[dict[str, Any]] = []
        out = rec.call("expire", now=now)
        if out.ok:
            actions.append({"op": "expire", "now": now, "work_ids": _moved(out.value)})
        elif out.code == "unsupported" and "recover" in self.unsupported:
            return None
        listed = rec.call("list", status=self.expired)
        back = []
        for w in listed.value or [] if listed.ok and isinstance(listed.value, list) else []:
            if isinstance(w, Mapping) and w.get("work_id") is not None and \
                    rec.call("requeue", work_id=w["work_id"], reason="operator takes the work back", now=self.now()).ok:
                back.append(str(w["work_id"]))
        actions.append({"op": "requeue", "now": now, "work_ids": back})
        return actions

    def takeover(self, recover: bool, ids: Sequence[str]) -> dict[str, Any]:
        """For paused holders' items: the operator's recovery (when ``recover``), then a read of
        each item (recorded as the operator's), so the controller sees one that was finished
        meanwhile and can no longer be taken over."""
        actions = self.operator() if recover else []
        if self.operator_rec is None:
            self.operator_rec = _Recorder(self, "operator")
        status: dict[str, Any] = {}
        for wid in ids:
            out = self.operator_rec.call("get", work_id=wid)
            status[wid] = out.value.get("status") if out.ok and isinstance(out.value, Mapping) else None
        return {"actions": actions, "status": status}

    def counts(self) -> dict[str, int]:
        """What is left, by status: the quiet period's census.  The read is recorded (process
        ``census``): a claimable item it lists that claims then never hand out is lost work."""
        if self.census is None:
            self.census = _Recorder(self, "census")
        out = self.census.call("list")
        counts: dict[str, int] = {}
        for w in out.value or [] if out.ok else []:
            k = "quarantined" if w.get("quarantined") else str(w.get("status"))
            counts[k] = counts.get(k, 0) + 1
        return counts

    def final(self, ids: Sequence[str]) -> dict[str, Any]:
        items: dict[str, Any] = {}
        for wid in ids:
            out = self.client.call("get", work_id=wid)
            items[wid] = out.value if out.ok else None
        listed = self.client.call("list")
        for w in listed.value or [] if listed.ok else []:
            items.setdefault(str(w.get("work_id")), w)
        return items


def _moved(value: Any) -> list[str]:
    """The items a monitor operation's answer names (a list of snapshots or moves)."""
    return [str(v.get("work_id")) for v in value or [] if isinstance(v, Mapping)] if isinstance(value, list) else []


def process_main(conn: Any, cfg: dict[str, Any]) -> None:
    """Entry point of one campaign process (forked by the fork server)."""
    from .worker import _spec_from

    for p in reversed(cfg.get("sys_path") or []):
        if p not in sys.path:
            sys.path.insert(0, p)
    try:
        if cfg.get("netns"):  # a worker on another host: into its network namespace before any connection
            from .hosts import enter

            enter(str(cfg["netns"]))
        spec = _spec_from(cfg)
        client = connect(cfg["address"], spec, timeout=float(cfg["op_timeout"]))
        if cfg.get("reopen"):
            _reopen_when_told(conn, client, cfg)
            return
        out = client.reset(cfg["reset"])
        if not out.ok:
            conn.send({"event": "error", "message": f"reset on the shared ledger failed: {out.code}: {out.message}"})
            client.close()
            return
        ctx = _Ctx(conn, cfg, client, spec)
    except AdapterError as exc:
        conn.send({"event": "error", "message": str(exc)})
        return
    except Exception as exc:  # noqa: BLE001 - one line to the controller, never a silent death
        conn.send({"event": "error", "message": f"campaign process failed to start: {type(exc).__name__}: {exc}"})
        return
    actors = [_make_actor(ctx, a) for a in cfg.get("actors") or []]
    conn.send({"event": "ready", "pid": os.getpid()})
    try:
        _serve(ctx, actors)
    finally:
        for a in actors:
            a.rec.close()
        for r in (ctx.census, ctx.operator_rec):
            if r is not None:
                r.close()
        client.close()


def _reopen_when_told(conn: Any, client: Client, cfg: Mapping[str, Any]) -> None:
    """A reopen: the adapter is loaded and waiting; on ``open`` it opens the ledger (a reset with
    the campaign's ``dir``) and says how that went.  Told when, the nemesis lands the reopen while
    workers hold work, not whenever a new process happens to have started."""
    try:
        conn.send({"event": "ready", "pid": os.getpid()})
        while True:
            msg = conn.recv()
            if msg.get("cmd") == "open":
                out = client.reset(cfg["reset"])
                conn.send({"event": "opened", "ok": out.ok, "message": "" if out.ok else f"{out.code}: {out.message}"})
            elif msg.get("cmd") == "exit":
                return
    except (EOFError, OSError):
        return
    finally:
        client.close()


def _make_actor(ctx: _Ctx, a: Mapping[str, Any]) -> _Actor:
    role = a["role"]
    if role == "worker":
        return ctx.worker(a["name"], int(a["slot"]), int(a["seed"]))
    if role == "producer":
        return ctx.producer(a["name"], [tuple(x) for x in a["schedule"]], int(a["seed"]))
    if role == "monitor":
        return ctx.monitor(a["name"], a["ops"], float(a["period"]))
    raise ValueError(f"unknown actor role {role!r}")


def _serve(ctx: _Ctx, actors: list[_Actor]) -> None:
    conn = ctx.conn
    live = list(actors)
    go = False
    busy = False
    stopped_sent = False
    while True:
        timeout: float | None = 0.0 if busy else IDLE
        if not go or (not live and (stopped_sent or not ctx.stopping)):
            timeout = None
        try:
            has = conn.poll(timeout)
            msg = conn.recv() if has else None
        except (EOFError, OSError):
            return
        if msg is not None:
            cmd = msg.get("cmd") if isinstance(msg, dict) else None
            if cmd == "exit":
                return
            if cmd == "go":
                go = True
                ctx.started = time.monotonic()
            else:
                _command(ctx, live, msg)
            continue
        busy = False
        now = time.monotonic()
        for a in list(live):
            if a.paused_until > now:
                continue
            try:
                busy = next(a.gen) or busy
            except StopIteration:
                live.remove(a)
                a.rec.close()
        if ctx.stopping and not live and not stopped_sent:
            conn.send({"event": "stopped", "ops": ctx.ops})
            stopped_sent = True


def _command(ctx: _Ctx, live: list[_Actor], msg: Mapping[str, Any]) -> None:
    cmd = msg.get("cmd")
    conn = ctx.conn
    if cmd == "stop":
        ctx.stopping = True
        if not live:
            conn.send({"event": "stopped", "ops": ctx.ops})
    elif cmd == "arm":
        for a in live:
            if a.hooks is not None:
                a.hooks.arm(msg.get("point"), int(msg.get("occurrence") or 1))
    elif cmd == "count":
        conn.send({"reply": "count", "counts": ctx.counts()})
    elif cmd == "operator":
        conn.send({"reply": "operator", "actions": ctx.operator()})
    elif cmd == "takeover":
        conn.send({"reply": "takeover", **ctx.takeover(bool(msg.get("recover")), msg.get("ids") or [])})
    elif cmd == "final":
        conn.send({"reply": "final", "items": ctx.final(msg.get("ids") or []), "now": ctx.now()})
    elif cmd == "resume_actor":
        for a in live:
            if a.name == msg.get("name"):
                a.paused_until = 0.0
    elif cmd in ("kill_actor", "pause_actor"):  # logical faults (one-process mode)
        workers = [a for a in live if a.role == "worker" and a.paused_until <= time.monotonic()]
        if not workers:
            conn.send({"event": "fault_skipped", "fault": cmd})
            return
        holding = [a for a in workers if ctx.flags[a.slot]]
        pool = holding or workers
        victim = pool[min(len(pool) - 1, int(float(msg.get("pick") or 0) * len(pool)))]
        if cmd == "pause_actor":  # until the controller sends resume_actor (or the seconds run out)
            victim.paused_until = time.monotonic() + float(msg["seconds"])
            holding = ctx.flags[victim.slot] in (HOLDING, EFFECT_DONE)
            conn.send({"event": "paused", "process": victim.name, "holding": holding, "slot": victim.slot,
                       "key": held_key(ctx.flags, victim.slot).hex() if holding else None})
            return
        victim.gen.close()  # the worker stops wherever it is: its item is left as a crash leaves it
        ctx.hold(victim.slot, FREE)
        victim.rec.close()
        live.remove(victim)
        spec = dict(msg["replacement"])
        fresh = ctx.worker(spec["name"], int(spec["slot"]), int(spec["seed"]))
        live.append(fresh)
        conn.send({"event": "killed", "process": victim.name, "replacement": fresh.name})


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


class _Campaign:
    def __init__(self, address: str, spec: Spec, p: SafetyParams, out_dir: str | None, progress: Progress | None,
                 tmp_root: str | None) -> None:
        self.address, self.spec, self.p, self.progress = address, spec, p, progress
        self.out = os.path.abspath(out_dir) if out_dir else tempfile.mkdtemp(prefix="ledgercheck-safety-")
        os.makedirs(self.out, exist_ok=True)
        for n in os.listdir(self.out):  # a per-process part left by an earlier campaign in this directory
            if _PART.fullmatch(n):
                os.unlink(os.path.join(self.out, n))
        # the working files go where the caller says, else under $TMPDIR when one is set (a run's
        # scratch parent, removed with it even when this process is killed), else on a RAM disk
        root = tmp_root
        if root is None and not os.environ.get("TMPDIR") and os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
            root = "/dev/shm"
        self.work = tempfile.mkdtemp(prefix="ledgercheck-safety-", dir=root)
        self.procs: list[_Proc] = []
        self.created: dict[str, str] = {}  # work_id -> source id
        self.produced = False
        self.notes: list[str] = []
        self.counts = {"kill": 0, "kill_at_point": 0, "pause": 0, "resume": 0, "reopen": 0, "replaced": 0,
                       "takeover": 0, "takeover_missed": 0, "takeover_void": 0}
        self.missing: list[str] = []  # what the campaign itself knows it did not reach
        self.takeovers: list[_Takeover] = []  # paused holders waiting for another worker to take their item
        self.takeover_paths: dict[str, int] = {}  # how the takeovers that happened came about
        self.n_takeovers = 0  # takeovers planned
        self.operator_offered: bool | None = None  # None: not asked yet
        self.operating: tuple[float, bool, set[int]] | None = None  # the operator's visit awaiting its answer
        if self.p.hosts is not None:
            self.counts.update(cut=0, partition=0, cut_takeover=0)  # hosts cut off; workers cut off with them; cuts healed after a takeover
        self.schedule: list[dict[str, Any]] = []
        self.n_names = 0
        self.n_slots = 0
        self.rng = random.Random(f"campaign/{p.seed}")
        self.writer: HistoryWriter | None = None
        self.recovery: dict[str, Any] = {}
        self.ops_done = 0
        self.slot_names: dict[int, str] = {}  # worker slot -> its name
        self.resumes: list[tuple[float, _Proc | str]] = []  # (when, whom) a pause ends
        self.heals: list[tuple[float, Any]] = []  # (when, which host) a partition ends
        self.cut_watch: dict[int, tuple[int, float]] = {}  # id(host) -> (watch of its holder's item, safety net)
        self.placed: dict[str, str] = {}  # worker -> the namespace it runs in

    # -- setup ---------------------------------------------------------------------------------
    def probe(self) -> None:
        try:
            c = connect(self.address, self.spec, timeout=self.p.op_timeout)
        except AdapterError as exc:
            raise ChaosError(str(exc)) from None
        try:
            hs = dict(c.handshake)
        finally:
            c.close()
        why = applicable(hs)
        if why:
            raise ChaosError(f"adapter {self.address}: the safety campaign cannot run: {why}")
        self.hs = hs
        caps = hs.get("capabilities") or {}
        self.declared = Declared.of(hs, self.address)
        self.wall = caps.get("clock", "injected") == "wall"
        self.durable = bool(caps.get("durable"))
        if self.p.hosts is not None and not self.durable:
            raise ChaosError(f"adapter {self.address}: workers on hosts need a durable ledger they reach over the "
                             "network; this adapter is not durable")
        self.profiles = list(hs.get("profiles") or [])
        lt = self.spec.lease_for(SOURCE)
        self.ttl, self.grace = lt.ttl, lt.grace
        if self.wall:
            self.lapse_real = (lt.ttl + lt.grace) * self.p.wall_scale
            speedup = 1.0
        else:
            self.lapse_real = self.p.lapse
            speedup = (lt.ttl + lt.grace) / self.p.lapse
        self.pause_s = self.lapse_real * 1.4 + 0.2  # a pause of a worker that holds nothing
        # how long a paused holder may wait for another worker to take its item: a generous safety
        # net (a library's own clock may be coarse, its recovery slow); a takeover ends as soon as
        # the other worker's claim got the item
        # (a wall clock's library may keep whole seconds and round its lease up: rq)
        self.takeover_net = 4 * self.lapse_real if not self.wall else max(4 * self.lapse_real, self.lapse_real + 3.0)
        self.t0 = time.monotonic()
        self.tb = TimeBase(self.wall, self.t0, speedup)
        self.wall0 = time.time() - (time.monotonic() - self.t0)  # time.time() at t0
        doc = plain(self.spec.document)
        if self.wall:
            doc = scaled_document(doc, self.p.wall_scale)
        reset: dict[str, Any] = {"dir": os.path.join(self.work, "ledger"), "contract": doc, "seed": self.p.seed % 2**32}
        if self.wall:
            reset["timeout_scale"] = self.p.wall_scale
        reset.update(self.p.reset_extra)
        self.sink_path = os.path.join(self.work, "effects.db")
        EffectSink(self.sink_path, self.spec, create=True).close()
        self.flags_path = os.path.join(self.work, "flags")
        with open(self.flags_path, "wb") as f:
            f.write(b"\0" * FLAG_BYTES)
        fd = os.open(self.flags_path, os.O_RDWR)
        try:
            self.flags = mmap.mmap(fd, FLAG_BYTES)
        finally:
            os.close(fd)
        monitor_ops = list(MONITOR_OPS) if self.declared.reclaim == "lease" else ["promote_due"]
        self.monitor_ops = monitor_ops
        self.base_cfg = {
            "entry": ENTRY, "address": _resolved(self.address), "sys_path": list(sys.path),
            "contract": None if self.spec.digest == default_spec().digest else plain(self.spec.document),
            "op_timeout": self.p.op_timeout, "reset": reset, "out": self.out, "record": self.p.record,
            "sink": self.sink_path, "flags": self.flags_path,
            "time": {"wall": self.wall, "t0": self.t0, "speedup": speedup},
            "step_class": STEP_CLASS.get(self.declared.delivery, PLAIN_CLASS), "delivery": self.declared.delivery,
            "latency": list(self.p.latency), "renew_p": self.p.renew_p, "fail_p": self.p.fail_p,
        }
        own = set(worker_points(self.spec))
        # the campaign's worker has no wait step, and begins a journal entry only for a ledger
        # that declares effectively-once delivery
        passed = own - set(crash_points_at(self.spec, "waiting")) - (
            set() if self.declared.delivery == "effectively-once" else set(crash_points_at(self.spec, "begun")))
        self.points = [] if not self.durable else (
            [pt for pt in self.spec.crash_points if pt in passed]
            + [pt for pt in hs.get("crash_points") or [] if isinstance(pt, str) and pt not in own])

    def _meta(self) -> None:
        if not self.p.record:
            return
        self.writer = HistoryWriter(process_path(self.out, "nemesis"), "nemesis", t0=self.t0)
        hs = self.hs
        caps = hs.get("capabilities") or {}
        self.writer.meta(
            adapter={"address": self.address, "name": hs.get("name"), "version": hs.get("version"),
                     "clock": "wall" if self.wall else "injected", "durable": self.durable,
                     "concurrent": caps.get("concurrent"), "profiles": self.profiles,
                     "mode": self.mode},
            declared={"delivery": self.declared.delivery, "reclaim": self.declared.reclaim},
            timings={"ttl": self.ttl * (self.p.wall_scale if self.wall else 1.0),
                     "grace": self.grace * (self.p.wall_scale if self.wall else 1.0),
                     "speedup": self.tb.speedup, "lapse_s": self.lapse_real, "t0_wall": self.wall0},
            seed=self.p.seed, workers=self.p.workers, items=self.p.items,
            nemesis={"faults": list(self.p.faults), "seed": self.p.seed, "schedule": self.schedule,
                     **({"hosts": len(self.p.hosts.hosts)} if self.p.hosts is not None else {})})

    @property
    def mode(self) -> str:
        return "processes" if self.durable else "one process"

    def _name(self, prefix: str) -> str:
        self.n_names += 1
        return f"{prefix}{self.n_names}"

    def _worker_actor(self) -> dict[str, Any]:
        self.n_slots += 1
        name = self._name("w")
        self.slot_names[self.n_slots] = name
        return {"role": "worker", "name": name, "slot": self.n_slots, "seed": self.rng.randrange(2**31)}

    def _producer_actor(self) -> dict[str, Any]:
        rng = random.Random(f"producer/{self.p.seed}")
        window = self.p.active_s() * 0.8
        sched: list[tuple[float, int]] = []
        i = 0
        while i < self.p.items:
            at = round(rng.uniform(0, window), 4)
            for _ in range(rng.randint(1, 4)):  # a small burst: several items in flight
                if i < self.p.items:
                    sched.append((at, i))
                    i += 1
        sched.sort()
        return {"role": "producer", "name": "producer", "schedule": sched, "seed": self.p.seed}

    def _monitor_actor(self) -> dict[str, Any]:
        return {"role": "monitor", "name": "monitor", "ops": self.monitor_ops, "period": max(0.01, self.lapse_real / 8)}

    def _spawn(self, name: str, role: str, actors: list[dict[str, Any]], slot: int = -1) -> _Proc:
        if slot < 0:
            self.n_slots += 1
            slot = self.n_slots
        try:
            pid, conn = fork_server().spawn()
        except ForkServerError as exc:
            raise ChaosError(str(exc)) from None
        cfg: dict[str, Any] = {**self.base_cfg, "actors": actors, "process": name, "slot": slot,
                               "reopen": role == "reopen"}
        if self.p.hosts is not None and role == "worker":
            cfg["netns"] = self.p.hosts.host_of(slot).path
            self.placed[name] = self.p.hosts.host_of(slot).netns
        conn.send(cfg)
        proc = _Proc(name, role, pid, conn, slot, starting=True, start_by=time.monotonic() + 60.0)
        self.procs.append(proc)
        return proc

    def _ready(self, procs: Sequence[_Proc], timeout: float = 60.0) -> None:
        """Wait until every one of ``procs`` has started (its "ready" is handled by _event)."""
        end = time.monotonic() + timeout
        while any(p.starting and not p.dead for p in procs):
            if time.monotonic() > end:
                slow = next(p for p in procs if p.starting and not p.dead)
                nemesis.kill(slow.pid)
                raise ChaosError(f"campaign process {slow.name} did not start within {timeout:g}s")
            # a paused worker may hold a lock the newcomer's open waits for: its pause ends on
            # time; a worker stopped at a crash point inside a transaction holds the write lock
            # until it is killed, so the others' messages are handled meanwhile too
            now = time.monotonic()
            self._resume_due(now)
            self._takeovers_due(now, act=False)
            self._heal_due(now)
            self._pump(0.05)

    def _started(self, proc: _Proc) -> None:
        proc.starting = False
        if proc.on_ready == "go":
            proc.conn.send({"cmd": "go"})

    def _start_failed(self, proc: _Proc, why: str) -> None:
        """A process that could not start: a reopen is a note; any other ends the campaign."""
        proc.dead = True
        if proc.role == "reopen":
            nemesis.kill(proc.pid)
            self.notes.append(f"reopen: {why}")
            return
        raise ChaosError(why)

    def _starting_due(self, now: float) -> None:
        for proc in self.procs:
            if proc.starting and not proc.dead and now > proc.start_by:
                nemesis.kill(proc.pid)
                self._start_failed(proc, f"campaign process {proc.name} did not start in time")

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> SafetyResult:
        started = time.monotonic()
        self.probe()
        p = self.p
        active = p.active_s()
        if not self.durable and "reopen" in p.faults:
            self.notes.append("reopen not run: the adapter is not durable (a new process would see a fresh ledger)")
        plan = nemesis.plan(p.seed, [f for f in p.faults if self.durable or f != "reopen"], active, points=self.points,
                            min_each=p.min_each,
                            gap=(nemesis.GAP[0] * max(1.0, self.lapse_real), nemesis.GAP[1] * max(1.0, self.lapse_real)))
        self.schedule = [f.as_dict() for f in plan]
        self._meta()
        if self.durable:
            workers = [self._spawn(a["name"], "worker", [a], a["slot"]) for a in (self._worker_actor() for _ in range(p.workers))]
            main = [self._spawn("producer", "producer", [self._producer_actor()]),
                    self._spawn("monitor", "monitor", [self._monitor_actor()])]
            self.monitor = main[1]
            if "reopen" in p.faults:
                self._spare_reopen()
            self._ready(workers + main + [x for x in self.procs if x.role == "reopen"])
        else:
            actors = [self._worker_actor() for _ in range(p.workers)] + [self._producer_actor(), self._monitor_actor()]
            self.monitor = self._spawn("solo", "solo", actors)
            self._ready([self.monitor])
            self.notes.append(f"the adapter is not durable: {p.workers} logical workers, the producer and the monitor "
                              "ran interleaved in one process (kills and pauses are logical)")
        if self.placed:
            self.notes.append(f"{len(self.placed)} workers on {len(self.p.hosts.hosts)} hosts (network namespaces); "
                              "producer and monitor on the database's host")
        for proc in self.procs:
            proc.conn.send({"cmd": "go"})
        t_setup = time.monotonic() - started
        a0 = time.monotonic()
        self._active(plan, a0, started)
        t_active = time.monotonic() - a0
        q0 = time.monotonic()
        self._quiet(started)
        t_quiet = time.monotonic() - q0
        self._stop()
        final = self._final()
        elapsed = time.monotonic() - started
        history = self._finish_history()
        self._unreached()
        work_s = t_active + t_quiet
        result = SafetyResult(
            address=self.address, adapter={"name": self.hs.get("name"), "version": self.hs.get("version"),
                                           "clock": "wall" if self.wall else "injected", "durable": self.durable},
            declared={"delivery": self.declared.delivery, "reclaim": self.declared.reclaim}, mode=self.mode,
            seed=p.seed, workers=p.workers, items=p.items, faults=list(p.faults), history=history,
            out_dir=self.out if p.record else None, elapsed=round(elapsed, 3), ops=self.ops_done,
            ops_per_s=round(self.ops_done / work_s, 1) if work_s > 0 else 0.0, created=len(self.created),
            nemesis=dict(self.counts), schedule=self.schedule, final=final, notes=self.notes[:MAX_NOTES],
            timings={"setup_s": round(t_setup, 3), "active_s": round(t_active, 3), "quiet_s": round(t_quiet, 3)},
            missing=list(self.missing), takeovers={"planned": self.n_takeovers, **self.takeover_paths,
                                                   "missed": self.counts["takeover_missed"],
                                                   "void": self.counts["takeover_void"]})
        return result

    def _unreached(self) -> None:
        """What the campaign itself knows it did not reach (the checker finds more in the history)."""
        asked, granted = claim_counts(self.flags, self.n_slots)
        if not self.created:
            self.missing.insert(0, "no item was created: every create was refused or had no answer")
        elif not granted:
            self.missing.insert(0, f"{NO_GRANT}: {asked} claim{'s' if asked != 1 else ''} asked, none handed one out")
        n = self.n_takeovers - self.counts["takeover_void"]
        if n and not self.counts["takeover"]:
            self.missing.append(f"none of the {n} planned takeover{'s' if n != 1 else ''} happened: no other worker "
                                f"took a paused holder's item within {self.takeover_net:.1f}s of its pause")

    def _heal_due(self, now: float) -> None:
        for item in [h for h in self.heals if h[0] <= now]:
            self.heals.remove(item)
            watched = self.cut_watch.get(id(item[1]))
            if watched is not None and not self._taken(watched[0]) and now < watched[1]:
                # the cut-off holder's item is not taken over yet: the cut lasts (polled), so the
                # late writes waiting in TCP reach the ledger after a takeover, however busy the machine
                self.heals.append((min(now + 0.02, watched[1]), item[1]))
                continue
            self._heal(item[1])

    def _heal(self, host: Any) -> None:
        watched = self.cut_watch.pop(id(host), None)
        if watched is not None:
            if self._taken(watched[0]):
                self.counts["cut_takeover"] += 1
            self.flags[WATCH0 + watched[0] * WATCH_BYTES + 4] = 0
        self.p.hosts.heal(host)
        self._record("heal", None, host.netns)
        spare = time.monotonic() + max(0.3, self.lapse_real / 2)
        for p in self._workers():  # their late writes come next: no fault takes them before they do
            if self.p.hosts.host_of(p.slot) is host:
                p.spared_until = spare

    def _resume_due(self, now: float) -> None:
        for item in [r for r in self.resumes if r[0] <= now]:
            self.resumes.remove(item)
            self._resume(item[1])

    def _active(self, plan: list[nemesis.Fault], a0: float, started: float) -> None:
        todo = list(plan)
        resumes = self.resumes
        active = self.p.active_s()
        pause_s = self.pause_s
        last_progress = 0.0
        while True:
            now = time.monotonic()
            el = now - a0
            # the phase ends once its time is up, every planned fault was done (one that waited for
            # a holder may come late), every pause has lasted its full length and every takeover
            # happened (or its safety net ran out)
            if el >= active and ((self.produced and not todo and not resumes and not self.heals and not self.takeovers)
                                 or el >= active * 3):
                if not self.produced:
                    self.notes.append("the producer had not created every item when the nemesis stopped")
                if todo:
                    self.notes.append(f"{len(todo)} planned fault(s) not done: the nemesis ran out of time")
                break
            if now - started > self.p.time_limit * 0.7:
                self.notes.append(f"time limit: the nemesis stopped after {el:.1f}s")
                break
            # a takeover waits for another worker's claim: look at the shared map often
            watching = [now + 0.005] if self.takeovers else []
            nxt = min([max(a0 + f.at, now + 0.01) for f in todo[:1]] + [t for t, _ in resumes]
                      + [t for t, _ in self.heals] + watching + [now + 0.05])
            self._pump(max(0.0, nxt - time.monotonic()))
            now = time.monotonic()
            self._starting_due(now)
            self._takeovers_due(now)
            self._resume_due(now)
            self._heal_due(now)
            self._disarm_due(now)
            while todo and a0 + todo[0].at <= now:
                f = todo[0]
                late = now - (a0 + f.at)
                # a pause and a reopen wait longer for a holder: it is what they take from
                wait = max(HOLDER_WAIT, 2 * self.lapse_real) if f.fault in ("pause", "reopen") else HOLDER_WAIT
                # a fault with no worker to do it to at all (each one starting, paused, cut off or
                # just let go) waits for one until twice the phase's length: on a loaded machine a
                # killed worker's replacement may take seconds to open the ledger
                if not self._fault(f, pause_s, resumes, may_wait=late < wait, may_wait_long=el < 2 * active):
                    break  # nobody holds work yet: this fault waits a little for a holder
                todo.pop(0)
            if self.progress is not None and now - last_progress > 0.25:
                last_progress = now
                self.progress(len(plan) - len(todo), len(plan), {"phase": "nemesis", "created": len(self.created),
                                                                  **self.counts})
        for t in list(self.takeovers):
            self._no_takeover(t, "the nemesis phase ended first")
        for _, who in list(resumes):
            self._resume(who)
        resumes.clear()
        for _, host in list(self.heals):
            self._heal(host)
        self.heals.clear()
        for proc in self._workers():
            if proc.armed:
                self._disarm(proc)

    def _workers(self) -> list[_Proc]:
        return [p for p in self.procs if p.role == "worker" and not p.dead]

    def _record(self, fault: str, process: str | None, point: Any = None) -> None:
        if fault in self.counts:
            self.counts[fault] += 1
        if self.writer is not None:
            self.writer.nemesis(fault, process, point)

    def _fault(self, f: nemesis.Fault, pause_s: float, resumes: list[tuple[float, _Proc | str]], *,
               may_wait: bool = False, may_wait_long: bool = False) -> bool:
        """Do one fault; False (nothing done) when it should wait for a worker to hold work."""
        if not self.durable:
            self._logical_fault(f, pause_s, resumes)
            return True
        now = time.monotonic()
        net = self.p.hosts
        cut = set(net.cut) if net is not None else set()
        # a worker cut off by a partition is in the middle of a fault already: its late writes come at the heal
        cands = [p for p in self._workers() if not p.paused and p.armed is None and not p.starting
                 and p.spared_until <= now and (not cut or net.host_of(p.slot).index not in cut)]
        holders = [p for p in cands if self.flags[p.slot]]
        if f.fault == "pause":  # a holder it can stop outside its effect and outside a call (see below)
            holders = [p for p in holders if self.flags[p.slot] != IN_EFFECT and not self.flags[CALL0 + p.slot]]
        if may_wait and not holders and not (f.fault == "kill" and f.point):
            return False
        if f.fault == "reopen":
            return self._reopen()
        if f.fault == "partition":
            return self._partition(f, holders, may_wait)
        if f.fault == "pause" and len(cands) < 2 and may_wait:
            return False  # another worker must be free to take the item over: wait for a pause to end
        if not cands or (f.fault == "pause" and len(cands) < 2):
            if may_wait_long:
                return False  # wait for a worker to be there
            self.notes.append(f"{f.fault} at {f.at:g}s skipped: no worker to do it to")
            return True
        done = [p for p in holders if self.flags[p.slot] == EFFECT_DONE]
        # half the faults aim at a worker whose effect is done and not yet closed out (waiting a
        # little for one): what comes back after its kill or pause runs the effect again unless
        # the ledger remembers it
        if f.aim < 0.5 and not done and may_wait:
            return False
        pool = done if done and f.aim < 0.5 else holders or cands
        victim = pool[min(len(pool) - 1, int(f.pick * len(pool)))]
        if f.fault == "kill" and f.point:
            victim.conn.send({"cmd": "arm", "point": f.point, "occurrence": f.occurrence})
            victim.armed = (f.point, f.occurrence, time.monotonic() + max(1.0, self.lapse_real))
        elif f.fault == "kill":
            self._kill(victim, None)
        elif f.fault == "pause":
            nemesis.pause(victim.pid)
            state = self.flags[victim.slot]
            # stopped inside the effect section, or holding work inside a call to the adapter
            # (which may hold a lock the takeover would wait on): let go, try again
            if state == IN_EFFECT or (state in (HOLDING, EFFECT_DONE) and self.flags[CALL0 + victim.slot]):
                nemesis.resume(victim.pid)
                return False
            victim.paused = True
            self._record("pause", victim.name)
            key = held_key(self.flags, victim.slot) if state in (HOLDING, EFFECT_DONE) else b""
            if not (key and self._plan_takeover(victim, victim.name, key, victim.slot)):
                resumes.append((time.monotonic() + pause_s, victim))
        return True

    # -- takeovers: a paused holder's item goes to another worker before the holder goes on
    def _plan_takeover(self, victim: _Proc | str, name: str, key: bytes, slot: int) -> bool:
        """Watch the paused holder's item; the holder stays paused until another worker's claim
        got it (or the safety net runs out).  Which path moves the item: see _takeover_path."""
        watch = self._watch_item(key)
        if watch is None:
            return False
        now = time.monotonic()
        self.n_takeovers += 1
        lapsed = now + self._lapses_in(slot)
        self.takeovers.append(_Takeover(victim, name, key, self._takeover_path(), now, lapsed,
                                        now + self.takeover_net, watch, seq=self.n_takeovers, next_op=lapsed))
        return True

    def _watch_item(self, key: bytes) -> int | None:
        """A free entry of the shared map's watches, set to ``key``: the first worker whose claim
        is handed that item writes its slot there.  None when every entry is taken."""
        f = self.flags
        watch = next((i for i in range(WATCHES) if not f[WATCH0 + i * WATCH_BYTES + 4]), None)
        if watch is None:
            return None
        off = WATCH0 + watch * WATCH_BYTES
        struct.pack_into("<i", f, off, 0)
        f[off + 5:off + 4 + len(key)] = key[1:]
        f[off + 4] = key[0]  # the length byte last: a worker never matches a half-written key
        return watch

    def _taken(self, watch: int) -> bool:
        return struct.unpack_from("<i", self.flags, WATCH0 + watch * WATCH_BYTES)[0] != 0

    def _lapses_in(self, slot: int) -> float:
        """Real seconds until the lease of the item a paused worker holds has lapsed (its expiry
        + grace, by the ledger's time), and a little more; at most ttl + grace from now (it was
        last extended before the pause), the same when the ledger gave no expiry."""
        most = self.lapse_real * 1.05 + 0.02
        exp = struct.unpack_from("<d", self.flags, EXP0 + 8 * slot)[0] if 0 <= slot < FLAG_SLOTS else math.nan
        if math.isnan(exp):
            return most
        grace = self.grace * (self.p.wall_scale if self.wall else 1.0)
        left = (exp + grace - self.tb.now()) / self.tb.speedup
        return min(most, max(0.0, left) + self.lapse_real * 0.02 + 0.005)

    def _takeover_path(self) -> str:
        """The declared reclaim chooses the path, never whether a holder is displaced: under
        ``operator`` and ``never`` the operator's recovery moves the item (recover if offered,
        else expire + requeue); under ``lease`` the lease's lapse does (the monitor's operations
        and the claims), and every other takeover the operator's recovery when the adapter has
        one.  An adapter with no operator recovery leaves every item to time."""
        if self.operator_offered is False:
            return "time"
        if self.declared.reclaim != "lease":
            return "operator"
        return "operator" if self.n_takeovers % 2 == 0 else "time"

    def _takeovers_due(self, now: float, act: bool = True) -> None:
        if self.operating is not None and "takeover" in self.monitor.replies:
            self._operated(self.monitor.replies.pop("takeover"))
        if not self.takeovers:
            return
        for t in list(self.takeovers):
            taker = struct.unpack_from("<i", self.flags, WATCH0 + t.watch * WATCH_BYTES)[0]
            if taker and (self.operating is None or not self.operating[1] or now >= t.deadline):
                self._took_over(t, taker - 1)
            elif taker:
                continue  # the operator's answer is on its way: it says whether its recovery moved the item
            elif now >= t.deadline:
                self._no_takeover(t, f"no other worker took it within {self.takeover_net:.1f}s of the pause")
        if act and self.operating is None and any(now >= t.next_op for t in self.takeovers):
            self._operate(now)

    def _operate(self, now: float) -> None:
        """Send the operator to the paused holders due a visit: its recovery, when one waits on it
        (operator path, item not moved yet), then a read of every due item (an item finished
        meanwhile, by a write a broken ledger let through, can no longer be taken over).  The
        answer is awaited in the loop, never here: the operator's call may wait on a lock the
        paused holder keeps (a ledger that locks an item while it is worked on), and only the
        safety net, letting the holder go, ends that wait."""
        due = [t for t in self.takeovers if now >= t.next_op]
        recover = any(t.path == "operator" and t.moved_by is None for t in due)
        self.monitor.replies.pop("takeover", None)
        self.monitor.conn.send({"cmd": "takeover", "recover": recover, "ids": sorted({t.work_id for t in due})})
        self.operating = (now, recover, {t.seq for t in due})

    def _operated(self, reply: Mapping[str, Any]) -> None:
        assert self.operating is not None
        _sent, recover, visited = self.operating
        self.operating = None
        actions, status = reply.get("actions"), reply.get("status") or {}
        if actions is None:
            self.operator_offered = False
            self.notes.append("the adapter offers no operator recovery (neither recover nor expire): paused "
                              "holders' items were left to their leases' lapse")
            for t in self.takeovers:
                t.path = "time"
            actions = []
        elif recover:
            self.operator_offered = True
        named: dict[bytes, list[str]] = {}
        for a in actions:
            for wid in a.get("work_ids") or []:
                named.setdefault(item_key(wid), []).append(str(a.get("op")))
        terminal = set(self.spec.terminal_statuses)
        later = time.monotonic()
        for t in list(self.takeovers):
            if t.path == "operator" and t.moved_by is None and t.key in named:
                t.moved_by = " + ".join(dict.fromkeys(named[t.key]))
            if t.seq not in visited:
                continue
            if status.get(t.work_id) in terminal:
                self._void_takeover(t, str(status[t.work_id]))
                continue
            # the operator comes back until its recovery names the item (the ledger's own clock
            # may not have let the lease lapse yet); on the time path it only looks now and then
            waiting = t.path == "operator" and t.moved_by is None
            t.next_op = later + (max(0.02, self.lapse_real / 8) if waiting else max(0.1, self.lapse_real / 2))

    def _took_over(self, t: _Takeover, slot: int) -> None:
        path = "operator" if t.moved_by else "time"
        by = self.slot_names.get(slot, f"slot {slot}")
        point: dict[str, Any] = {"work_id": t.work_id, "by": by, "path": path}
        if t.moved_by:
            point["action"] = t.moved_by
        self._record("takeover", t.name, point)
        self.takeover_paths[path] = self.takeover_paths.get(path, 0) + 1
        if t.path == "operator" and not t.moved_by:  # sent for the operator, the lease's lapse came first
            self.takeover_paths["operator_preempted"] = self.takeover_paths.get("operator_preempted", 0) + 1
        self._end_takeover(t)

    def _void_takeover(self, t: _Takeover, status: str) -> None:
        """The paused holder's item was finished by another write while it was paused: there is
        nothing left to take over (the holder's late writes still reach the ledger)."""
        self.counts["takeover_void"] += 1
        self.notes.append(f"takeover of {t.work_id} from {t.name} not possible: the item was already {status} "
                          "(another write finished it while its holder was paused)")
        self._end_takeover(t)

    def _no_takeover(self, t: _Takeover, why: str) -> None:
        self.counts["takeover_missed"] += 1
        moved = f"; the operator's {t.moved_by} had moved it" if t.moved_by else ""
        self.notes.append(f"takeover of {t.work_id} from {t.name} did not happen ({t.path} path{moved}): {why}")
        self._end_takeover(t)

    def _end_takeover(self, t: _Takeover) -> None:
        self.flags[WATCH0 + t.watch * WATCH_BYTES + 4] = 0
        self.takeovers.remove(t)
        self._resume(t.victim)
        if isinstance(t.victim, _Proc):  # its late writes come next: no fault takes it before they do
            t.victim.spared_until = time.monotonic() + max(0.3, self.lapse_real / 2)

    def _partition(self, f: nemesis.Fault, holders: list[_Proc], may_wait: bool) -> bool:
        """Cut off the host of a worker that holds work, preferring one whose effect is done (its
        close-out comes next, so it writes while cut off); the heal comes after the lease lapsed and
        another host had the time to take the item over."""
        net = self.p.hosts
        cut = set(net.cut)
        # another host must stay connected, with a worker on it, to take the cut-off holder's item over
        live = {net.host_of(p.slot).index for p in self._workers()} - cut
        # nor is a host cut while a newcomer on it still opens the ledger (its reset would fail, not wait)
        opening = {net.host_of(p.slot).index for p in self._workers() if p.starting}
        # and the holder is cut between its calls, never inside one: a request the server already
        # has would hold the ledger's write lock through the cut, and nobody could take over
        pool = [p for p in holders if net.host_of(p.slot).index not in cut | opening
                and live - {net.host_of(p.slot).index} and not self.flags[CALL0 + p.slot]]
        done = [p for p in pool if self.flags[p.slot] == EFFECT_DONE]
        if not done and may_wait:
            return False
        pool = done or pool
        if not pool and may_wait:
            return False  # wait a little for a heal, or for a holder on a host whose cut leaves another connected
        if not pool:
            self.notes.append(f"partition at {f.at:g}s skipped: no worker holding work on a host whose cut leaves "
                              "another host connected")
            return True
        victim = pool[min(len(pool) - 1, int(f.pick * len(pool)))]
        host = net.host_of(victim.slot)
        net.partition(host)
        self.counts["cut"] += 1
        for p in self._workers():
            if net.host_of(p.slot) is host:
                self._record("partition", p.name, host.netns)
        now = time.monotonic()
        state = self.flags[victim.slot]
        key = held_key(self.flags, victim.slot) if state in (HOLDING, EFFECT_DONE) else b""
        watch = self._watch_item(key) if key else None
        if watch is not None:  # healed once another host's worker was handed the item (or the net ran out)
            self.cut_watch[id(host)] = (watch, now + self.lapse_real * 1.15 + 0.25 + self.takeover_net)
        self.heals.append((now + self.lapse_real * 1.15 + 0.25, host))
        return True

    def _logical_fault(self, f: nemesis.Fault, pause_s: float, resumes: list[tuple[float, _Proc | str]]) -> None:
        solo = self.monitor
        if f.fault == "kill":
            solo.conn.send({"cmd": "kill_actor", "pick": f.pick, "replacement": self._worker_actor()})
        elif f.fault == "pause":  # the controller ends it (see the "paused" event); the seconds are a backstop
            solo.conn.send({"cmd": "pause_actor", "pick": f.pick, "seconds": pause_s + self.takeover_net + 5.0})

    def _kill(self, victim: _Proc, point: str | None) -> None:
        nemesis.kill(victim.pid)
        victim.dead = True
        if victim.slot >= 0:
            self.flags[victim.slot] = 0
        self._record("kill", victim.name, point)
        if point:
            self.counts["kill_at_point"] += 1
        try:
            victim.conn.close()
        except OSError:
            pass
        self._replace()

    def _replace(self) -> None:
        a = self._worker_actor()
        net = self.p.hosts
        if net is not None:  # a newcomer starts on a host still connected: on a cut one its reset cannot reach the ledger
            for _ in range(len(net.hosts) - 1):
                if net.host_of(a["slot"]).index not in net.cut:
                    break
                self.n_slots += 1
                a["slot"] = self.n_slots
        self.slot_names[a["slot"]] = a["name"]
        proc = self._spawn(a["name"], "worker", [a], a["slot"])
        proc.on_ready = "go"  # the campaign goes on meanwhile: a newcomer's start may take a second
        self.counts["replaced"] += 1

    def _resume(self, who: _Proc | str) -> None:
        if isinstance(who, str):  # a logical worker in the one process
            self.monitor.conn.send({"cmd": "resume_actor", "name": who})
            self._record("resume", who)
            return
        if who.dead:
            return
        nemesis.resume(who.pid)
        who.paused = False
        self._record("resume", who.name)

    def _spare_reopen(self) -> None:
        """Start the process the next reopen uses: loaded and waiting, so the reopen lands when due."""
        name = self._name("reopen")
        proc = self._spawn(name, "reopen", [], slot=0)  # slot 0: it makes no counted operation
        proc.start_by = time.monotonic() + 30.0

    def _reopen(self) -> bool:
        """A new process opens the ledger now (False: its process is still starting; try again)."""
        spare = next((p for p in self.procs if p.role == "reopen" and not p.dead and not p.opened), None)
        if spare is None:
            self._spare_reopen()
            return False
        if spare.starting:
            return False
        spare.opened = True
        spare.conn.send({"cmd": "open"})
        self._record("reopen", spare.name)
        self._spare_reopen()  # the next one, loaded meanwhile
        return True

    def _disarm(self, proc: _Proc) -> None:
        proc.armed = None
        try:
            proc.conn.send({"cmd": "arm", "point": None})
        except OSError:
            pass

    def _disarm_due(self, now: float) -> None:
        for proc in self._workers():
            if proc.armed and proc.armed[2] <= now:
                self._disarm(proc)

    def _pump(self, timeout: float) -> None:
        live = [p for p in self.procs if not p.dead]
        by_conn = {id(p.conn): p for p in live}
        try:
            ready = wait_conns([p.conn for p in live], timeout)
        except OSError:
            ready = []
        for c in ready:
            proc = by_conn.get(id(c))
            if proc is None or proc.dead:
                continue
            try:
                # handling an earlier message may have read this one already: never block here
                if not c.poll():
                    continue
                msg = c.recv()
            except (EOFError, OSError):
                if proc.starting:
                    self._start_failed(proc, f"campaign process {proc.name} died while starting")
                else:
                    self._died(proc)
                continue
            if proc.starting:
                if msg.get("event") == "ready":
                    self._started(proc)
                    continue
                if msg.get("event") == "error":
                    self._start_failed(proc, f"{proc.name}: {msg.get('message')}")
                    continue
            self._event(proc, msg)

    def _died(self, proc: _Proc) -> None:
        proc.dead = True
        if proc.role == "reopen":
            return
        self.notes.append(f"{proc.name} exited without being killed")
        if proc.slot >= 0:
            self.flags[proc.slot] = 0
        if proc.role == "worker":
            self._replace()

    def _event(self, proc: _Proc, msg: Mapping[str, Any]) -> None:
        ev = msg.get("event")
        if ev == "created":
            if msg.get("work_id"):
                self.created[str(msg["work_id"])] = str(msg.get("source_id"))
        elif ev == "produced":
            self.produced = True
        elif ev == "crash_point":
            proc.armed = None  # it stopped at the point and waits there: a real crash follows
            self._kill(proc, str(msg.get("point")))
        elif ev == "note" or ev == "error":
            self.notes.append(f"{proc.name}: {msg.get('message')}")
        elif ev == "stopped":
            proc.stopped = True
        elif ev == "opened":  # a reopen process opened the ledger: it leaves
            if not msg.get("ok"):
                self.notes.append(f"reopen: {proc.name}: reset on the shared ledger failed: {msg.get('message')}")
            proc.conn.send({"cmd": "exit"})
            proc.dead = True
        elif ev == "killed":
            self._record("kill", msg.get("process"))
            self.counts["replaced"] += 1
        elif ev == "paused":
            name = str(msg.get("process"))
            self._record("pause", name)
            key = bytes.fromhex(msg["key"]) if msg.get("key") else b""
            if not (key and self._plan_takeover(name, name, key, int(msg.get("slot", -1)))):
                self.resumes.append((time.monotonic() + self.pause_s, name))
        elif ev == "fault_skipped":
            self.notes.append(f"{msg.get('fault')} skipped: no worker to do it to")
        elif "reply" in msg:
            proc.replies[str(msg["reply"])] = msg

    def _ask(self, proc: _Proc, cmd: str, timeout: float = 60.0, **args: Any) -> Mapping[str, Any]:
        proc.replies.pop(cmd, None)
        proc.conn.send({"cmd": cmd, **args})
        end = time.monotonic() + timeout
        while cmd not in proc.replies:
            if proc.dead or time.monotonic() > end:
                raise ChaosError(f"{proc.name} did not answer {cmd} within {timeout:g}s")
            self._pump(0.05)
        return proc.replies.pop(cmd)

    def _left(self) -> dict[str, int]:
        """The census: items by status that are neither terminal nor quarantined."""
        counts = self._ask(self.monitor, "count")["counts"]
        terminal = set(self.spec.terminal_statuses) | {"quarantined"}
        return {k: n for k, n in sorted(counts.items()) if k not in terminal and n}

    def _quiet(self, started: float) -> None:
        q0 = time.monotonic()
        min_q = self.lapse_real * 1.3 + 0.2
        max_q = min_q + 3 * self.lapse_real + 3.0
        operator_done = self.declared.reclaim != "operator"
        self.recovery = {"path": self.declared.reclaim, "actions": [],
                         "monitor": self.monitor_ops if self.declared.reclaim == "lease" else []}
        last = 0.0
        left: dict[str, int] | None = None
        while True:
            self._pump(0.05)
            el = time.monotonic() - q0
            if not operator_done and el >= self.lapse_real * 1.2:
                self.recovery["actions"] = list(self._ask(self.monitor, "operator")["actions"] or [])
                operator_done = True
            if el >= max_q or time.monotonic() - started > self.p.time_limit:
                left = self._left() if left is None or el >= max_q else left
                if not left:
                    return
                what = ", ".join(f"{k} {n}" for k, n in left.items())
                n = sum(left.values())
                self.notes.append(f"quiet period ended after {el:.1f}s with work left ({what})")
                self.missing.append(f"the quiet period ended after {el:.1f}s with {n} item{'s' if n != 1 else ''} "
                                    f"not finished ({what}): the run did not reach its end state")
                return
            if operator_done and el >= min_q and time.monotonic() - last > 0.15:
                last = time.monotonic()
                left = self._left()
                if not left:
                    return
            if self.progress is not None:
                self.progress(0, None, {"phase": "quiet", "created": len(self.created), **self.counts})

    def _stop(self) -> None:
        self._ready([p for p in self.procs if p.starting and not p.dead])  # a late newcomer: told to go first
        for p in self.procs:
            if p.role == "reopen" and not p.dead:  # a spare that was not needed (or one opening still)
                p.conn.send({"cmd": "exit"})
                p.dead = True
        order = [p for p in self.procs if not p.dead and p is not self.monitor] + [self.monitor]
        for proc in order:
            proc.conn.send({"cmd": "stop"})
        end = time.monotonic() + 30.0
        while any(not p.stopped for p in order if not p.dead):
            if time.monotonic() > end:
                for p in order:
                    if not p.stopped and not p.dead and p is not self.monitor:
                        self.notes.append(f"{p.name} did not stop; killed")
                        nemesis.kill(p.pid)
                        p.dead = True
                break
            self._pump(0.05)
        self.ops_done = sum(struct.unpack_from("<Q", self.flags, OPS0 + 8 * i)[0] for i in range(self.n_slots + 1))

    def _final(self) -> dict[str, int]:
        reply = self._ask(self.monitor, "final", ids=sorted(self.created))
        items = reply["items"]
        if self.writer is not None:
            self.recovery["now"] = reply.get("now")
            self.writer.write({"type": "final", "t": self.writer.t(), "items": items, "recovery": self.recovery})
        out: dict[str, int] = {}
        for w in items.values():
            k = "missing" if w is None else ("quarantined" if w.get("quarantined") else str(w.get("status")))
            out[k] = out.get(k, 0) + 1
        return dict(sorted(out.items()))

    def _finish_history(self) -> str | None:
        for proc in self.procs:
            if not proc.dead:
                try:
                    proc.conn.send({"cmd": "exit"})
                except OSError:
                    pass
        if self.writer is None:
            return None
        self._missing_effects()
        self.writer.close()
        files = [str(process_path(self.out, "nemesis"))] + [
            os.path.join(self.out, n) for n in sorted(os.listdir(self.out))
            if _PART.fullmatch(n) and n != "history.nemesis.jsonl"]
        path = os.path.join(self.out, "history.jsonl")
        merge_histories(files, path)
        for f in files:
            os.unlink(f)
        return path

    def _missing_effects(self) -> None:
        """Effects a killed worker applied but could not record (killed between the provider's
        answer and its own history write): the sink knows them; recorded here, at their time."""
        import orjson

        seen: set[int] = set()
        for n in os.listdir(self.out):
            if not _PART.fullmatch(n):
                continue
            with open(os.path.join(self.out, n), "rb") as fh:
                for raw in fh:
                    if b'"effect"' in raw:
                        try:
                            obj = orjson.loads(raw)
                        except orjson.JSONDecodeError:
                            continue
                        if obj.get("type") == "effect" and isinstance(obj.get("seq"), int):
                            seen.add(obj["seq"])
        sink = EffectSink(self.sink_path, self.spec)
        try:
            rows = sink.conn.execute("SELECT seq, key, work_id, applied, worker, wall FROM submission ORDER BY seq").fetchall()
        finally:
            sink.close()
        counts: dict[str, int] = {}
        assert self.writer is not None
        for seq, key, wid, applied, worker, wall in rows:
            if applied:
                counts[key] = counts.get(key, 0) + 1
            if seq in seen:
                continue
            self.writer.write({"type": "effect", "process": worker, "work_id": wid, "key": key, "applied": bool(applied),
                               "count": counts.get(key, 0), "t": round(wall - self.wall0, 6), "seq": seq,
                               "from_sink": True})

    def close(self) -> None:
        for _, host in self.heals:  # an error in the middle of a partition: leave the hosts connected
            self.p.hosts.heal(host)
        self.heals.clear()
        for proc in self.procs:
            if not proc.dead:
                try:
                    if proc.paused:
                        nemesis.resume(proc.pid)
                    proc.conn.send({"cmd": "exit"})
                except OSError:
                    pass
        end = time.monotonic() + 3.0
        for proc in self.procs:
            if proc.dead:
                continue
            while time.monotonic() < end:
                try:
                    os.kill(proc.pid, 0)
                except ProcessLookupError:
                    break
                if gone(proc.pid):
                    break
                time.sleep(0.01)
            else:
                nemesis.kill(proc.pid)
            proc.dead = True
        if self.writer is not None:
            self.writer.close()
        try:
            self.flags.close()
        except (AttributeError, ValueError):
            pass
        shutil.rmtree(self.work, ignore_errors=True)


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


# ------------------------------------------------------------------------------------ checking
def check_history(path: str, spec: Spec | None = None) -> Any:
    """Run the offline checker (chaos/anomalies.py) on a history file under the contract the
    campaign ran with (its statuses and operation roles); its Verdict."""
    from .anomalies import check
    from .history import load_history

    return check(load_history(path), spec)


def attach_verdict(result: SafetyResult, verdict: Any) -> SafetyResult:
    """Put the checker's anomalies, observations and coverage into a campaign result.  What the
    campaign itself knows it did not reach (``result.missing`` before this call) joins the
    checker's ``missing``, in the result and in ``verdict`` itself (so a rendering of the verdict
    says it too).  The result's verdict: "fail" with any anomaly, else "inconclusive" when
    anything is missing, else "pass"."""
    result.anomalies = _anomaly_dicts(verdict)
    result.observations = _observations(verdict)
    result.coverage = dict(verdict.coverage)
    # the campaign's own lines, but for what the checker's coverage already says (it counts the
    # claims that completed ok; the campaign, how many were asked, when none handed out an item)
    own = [m for m in result.missing if m not in verdict.missing
           and not (m.startswith(NO_GRANT) and verdict.coverage.get("claim_ok") == 0)]
    verdict.missing.extend(own)
    result.missing = list(verdict.missing)
    result.verdict = "fail" if result.anomalies else "inconclusive" if result.missing else "pass"
    result.checked = True
    return result


def _anomaly_dicts(report: Any) -> list[dict[str, Any]]:
    return [a.to_json() for a in report.anomalies]


def _observations(report: Any) -> dict[str, Any]:
    return {"notes": list(report.observations), "counts": dict(report.counts)}


# ------------------------------------------------------------------------------------ the API
def run_campaign(address: str, spec: Spec | None = None, *, workers: int = 4, items: int = 40, seed: int = 0,
                 faults: Sequence[str] | str | None = nemesis.FAULTS, out_dir: str | None = None,
                 time_limit: float = 120.0, duration: float | None = None, lapse: float = 0.8,
                 wall_scale: float = 0.01, record: bool = True, check: bool = True,
                 latency: tuple[float, float] = (0.01, 0.08), renew_p: float = 0.3, fail_p: float = 0.1,
                 op_timeout: float = 30.0, progress: Progress | None = None, min_each: int = 1,
                 tmp_root: str | None = None, hosts: Any = None,
                 reset: Mapping[str, Any] | None = None) -> SafetyResult:
    """Run one safety campaign against ``address`` and return its result.

    ``faults``: a subset of ("kill", "pause", "reopen", "partition") (or "kill,pause"), each done at
    least ``min_each`` times when the duration allows; ``partition``
    needs ``hosts``, a created :class:`~ledgercheck.chaos.hosts.HostNet` whose namespaces the workers
    run in (round robin); ``reset`` adds keys to every process's ``reset`` (a ``server_dsn`` the
    hosts reach, for a ledger on a database server).  ``out_dir`` receives
    ``history.jsonl`` (a temporary directory when None); ``record=False`` writes no history (the
    benchmark's baseline) and checks nothing.  ``check`` runs the offline checker on the history
    and fills ``anomalies`` and ``observations``.  Raises :class:`ChaosError` (one line) when the
    adapter cannot be used or the campaign cannot proceed.
    """
    if workers < 1:
        raise ChaosError("workers must be >= 1")
    if items < 1:
        raise ChaosError("items must be >= 1")
    if time_limit <= 0:
        raise ChaosError("time limit must be > 0")
    fault_set = nemesis.parse_faults(faults)
    if "partition" in fault_set and (hosts is None or not hosts.hosts):
        raise ChaosError("the partition fault needs workers on hosts (network namespaces): pass hosts, "
                         "or leave partition out of the faults")
    params = SafetyParams(workers=workers, items=items, seed=seed, faults=fault_set, min_each=min_each,
                          duration=duration, time_limit=time_limit, lapse=lapse, wall_scale=wall_scale,
                          latency=latency, renew_p=renew_p, fail_p=fail_p, record=record, op_timeout=op_timeout,
                          hosts=hosts, reset_extra=dict(reset or {}))
    camp = _Campaign(address, spec or default_spec(), params, out_dir if record else None, progress, tmp_root)
    try:
        result = camp.run()
    finally:
        camp.close()
        if not record:
            shutil.rmtree(camp.out, ignore_errors=True)
    if record and check and result.history:
        attach_verdict(result, check_history(result.history, spec))
    return result
