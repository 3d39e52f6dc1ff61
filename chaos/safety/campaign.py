"""The safety campaign: real concurrent clients of one ledger under faults, recorded as a history.

Whatever an implementation declares, the campaign asks its ledger the questions a runtime cares
about most (does it lose work, run work twice, let two workers own one item, accept a stale
worker's write?) by doing what a runtime does and writing down everything that happened:

* a **producer** creates the items (spread over the campaign, in small bursts, so several are in
  flight at any moment);
* N **workers** loop claim -> work -> apply the item's effect to the harness's effect sink (the
  ground truth, chaos/safety/sink.py) -> close out; sometimes they renew first (``renew`` offered),
  sometimes they fail with a retryable error before the effect (``fail`` offered).  If the
  implementation declares ``delivery: effectively-once`` a worker goes through the ledger's effect
  journal (effect_begin, then a lookup at the provider for a receipt it did not create, then
  effect_record) around the effect;
* a **monitor** (the runtime's scheduler) runs the ledger's own monitor operations (``expire``,
  ``recover``, ``promote_due``, those offered) every few ticks when the declared reclaim path is
  ``lease``; ``promote_due`` only otherwise;
* the **nemesis** (chaos/safety/nemesis.py) kills workers (at random moments and at named crash points),
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

Each process writes its own history file (chaos/safety/history.py, one ``write`` per record, so a
SIGKILL loses nothing recorded); the controller merges them into ``history.jsonl`` and hands it
to the offline checker (chaos/safety/anomalies.py).  ``record=False`` runs the same workload without
writing anything (for the benchmark).

Where things are: this module holds the worker side (each process's actors and its command
loop), the controller's state and main loop (``_Campaign``) and :func:`run_campaign`; the
controller's other parts are ``campaign_setup.py`` (probe, processes started),
``campaign_faults.py`` (kills, pauses and takeovers, partitions, reopens, armed points) and
``campaign_end.py`` (events, quiet period, stop, final read, merged history), over
``campaign_model.py`` (settings, results, the shared flag map's layout, process records).  The
workers hit crash points through chaos/crash/worker.py's ``Worker.reach`` (the points the contract
names for each stage), as the crash-window workers do.
"""

from __future__ import annotations

import math
import mmap
import os
import random
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ledgercheck.chaos.crash.points import DONE, ChaosError, leased_status
from ledgercheck.spec import Spec, default_spec
from ledgercheck.transport.client import AdapterError, Client, connect
from ledgercheck.transport.protocol import Outcome

from . import clockfaults, nemesis
from .campaign_end import _Ending
from .campaign_faults import _Faults
from .campaign_model import (  # re-exported: callers import these from here  # noqa: F401 - re-exported: callers import these from here
    _GONE,
    _PART,
    BUSY_RETRIES,
    CALL0,
    CLAIMS0,
    DELIVERIES,
    EFFECT_DONE,
    ENTRY,
    EXP0,
    FLAG_BYTES,
    FLAG_SLOTS,
    FREE,
    HELD0,
    HOLDER_WAIT,
    HOLDING,
    IDLE,
    IN_EFFECT,
    KEY_BYTES,
    MAX_NOTES,
    MONITOR_OPS,
    MOVING_S,
    NO_GRANT,
    OPS0,
    PLAIN_CLASS,
    RECLAIMS,
    SOURCE,
    STALL_CAP,
    STEP_CLASS,
    STEP_ID,
    TOOL,
    WATCH0,
    WATCH_BYTES,
    WATCHES,
    Declared,
    Progress,
    SafetyParams,
    SafetyResult,
    TimeBase,
    _Proc,
    _Takeover,
    applicable,
    claim_counts,
    held_key,
    item_key,
    key_text,
)
from .campaign_setup import _Setup
from .history import HistoryWriter, process_path
from .sink import EffectSink
from .workload import SAFETY_WORKLOADS, ProfileSteps


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
        self.steps = ProfileSteps(spec) if cfg.get("workload") == "profiles" else None
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
        from ledgercheck.chaos.crash.worker import Worker

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
        if self.steps is not None:
            self.steps.begin(rec.call, rec.name, held, self.now, rng)
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
        status = self.steps.holding(rec.call, rec.name, held, self.now, rng) if self.steps is not None else None
        hooks.reach("recorded")
        rec.call("close_out", work_id=wid, token=token, status=status or DONE, result={"by": rec.name}, now=self.now())

    def _effect(self, rec: _Recorder, slot: int, wid: str, key: str, token: str, lease: dict[str, Any],
                lookup: bool) -> Any:
        """The item's effect, done only while the worker's lease is live: a runtime that finds its
        lease past its expiry by the clock renews before acting and leaves the item if refused
        (returns _GONE).  A ledger that offers no renewal (``unsupported``) gives its holder no way
        to learn that its lease lapsed: the holder carries on with its effect and its close-out,
        as a job queue's worker whose run never hears of a timeout does.  The nemesis never leaves a worker paused inside this section (it sees
        IN_EFFECT and lets go at once): no ledger can stop a process that was stopped after its
        last check from reaching an outside provider late, so such a pause would test nothing
        about the ledger."""
        self.hold(slot, IN_EFFECT)
        try:
            exp = lease.get("expires")
            if isinstance(exp, int | float) and self.now() > exp:
                out = rec.call("renew", work_id=wid, token=token, now=self.now())
                if out.code != "unsupported":
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
            if self.steps is not None:
                self.steps.relay(rec.call, self.now)
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
        client = self.client
        for wid in ids:
            out = client.call("get", work_id=wid)
            if not out.ok and not out.definite and client is self.client:  # no answer (a connection a lost
                client = _reconnected(client, self.cfg)  # reply cut, chaos/safety/replies.py): read on a new one
                out = client.call("get", work_id=wid)
            items[wid] = out.value if out.ok else None
        listed = client.call("list")
        for w in listed.value or [] if listed.ok else []:
            items.setdefault(str(w.get("work_id")), w)
        if client is not self.client:
            client.close()
        return items


def _reconnected(client: Client, cfg: Mapping[str, Any]) -> Client:
    """A new client of the same ledger (the campaign's ``reset``), or ``client`` when none opens."""
    try:
        fresh = connect(cfg["address"], client.spec, timeout=float(cfg["op_timeout"]))
    except AdapterError:
        return client
    if fresh.reset(cfg["reset"]).ok:
        return fresh
    fresh.close()
    return client


def _moved(value: Any) -> list[str]:
    """The items a monitor operation's answer names (a list of snapshots or moves)."""
    return [str(v.get("work_id")) for v in value or [] if isinstance(v, Mapping)] if isinstance(value, list) else []


def process_main(conn: Any, cfg: dict[str, Any]) -> None:
    """Entry point of one campaign process (forked by the fork server)."""
    from ledgercheck.chaos.crash.worker import _spec_from

    for p in reversed(cfg.get("sys_path") or []):
        if p not in sys.path:
            sys.path.insert(0, p)
    try:
        if cfg.get("netns"):  # a worker on another host: into its network namespace before any connection
            from .hosts import enter

            enter(str(cfg["netns"]))
        clockfaults.enter(cfg)  # a clock-faulted worker: its adapter process reads the worker's clock file
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
class _Campaign(_Setup, _Faults, _Ending):
    """The controller: its state and main loop (here), starting up (campaign_setup), faults
    (campaign_faults), events and the end (campaign_end)."""

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
        self.clocks: clockfaults.CampaignClocks | None = None  # clock faults (chaos/safety/clockfaults.py)

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
        self.moved = a0
        self._active(plan, a0, a0)  # the time limit counts from "go": start-up has its own net (_ready)
        t_active = time.monotonic() - a0
        q0 = time.monotonic()
        self._quiet(a0)
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
        cuts = self.counts.get("cut", 0)
        if cuts and not self.counts.get("cut_takeover"):
            self.missing.append(f"the partitions cut {cuts} host{'s' if cuts != 1 else ''} off, but no cut lasted until "
                                f"another host took a cut-off holder's item over: no write sent while cut off was "
                                f"judged after a takeover")
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
        mark: tuple[int, ...] = ()
        while True:
            now = time.monotonic()
            el = now - a0
            sign = (len(self.created), len(todo), sum(self.counts.values()), self.produced)
            if sign != mark:
                mark, self.moved = sign, now
            # still moving: on a busy machine the phase goes on past its length while faults are done
            # and items created (up to STALL_CAP times its length)
            moving = now - self.moved < max(MOVING_S, active) and el < active * STALL_CAP
            # the phase ends once its time is up, every planned fault was done (one that waited for
            # a holder may come late), every pause has lasted its full length and every takeover
            # happened (or its safety net ran out)
            if el >= active and ((self.produced and not todo and not resumes and not self.heals and not self.takeovers)
                                 or (el >= active * 3 and not moving)):
                if not self.produced:
                    self.notes.append("the producer had not created every item when the nemesis stopped")
                if todo:
                    self.notes.append(f"{len(todo)} planned fault(s) not done: the nemesis ran out of time")
                break
            if now - started > self.p.time_limit * 0.7 and not moving:
                self.notes.append(f"time limit: the nemesis stopped after {el:.1f}s")
                break
            # a takeover waits for another worker's claim: look at the shared map often
            watching = [now + 0.005] if self.takeovers else []
            nxt = min([max(a0 + f.at, now + 0.01) for f in todo[:1]] + [t for t, _ in resumes]
                      + [t for t, _ in self.heals] + watching + [now + 0.05]
                      + ([t for t in [self.clocks.next_due()] if t is not None] if self.clocks else []))
            self._pump(max(0.0, nxt - time.monotonic()))
            now = time.monotonic()
            self._starting_due(now)
            self._takeovers_due(now)
            self._resume_due(now)
            self._heal_due(now)
            if self.clocks is not None:
                self.clocks.due(now)
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
        if self.clocks is not None:
            self.clocks.end_all()
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



# ------------------------------------------------------------------------------------ checking
def check_history(path: str, spec: Spec | None = None) -> Any:
    """Run the offline checker (chaos/safety/anomalies.py) on a history file under the contract the
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
    if result.workload == "profiles" and result.history:  # its cross-item rules and what they need
        from .crossitem import attach_cross

        attach_cross(result, verdict)
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
                 reset: Mapping[str, Any] | None = None, workload: str = "plain") -> SafetyResult:
    """Run one safety campaign against ``address`` and return its result.

    ``faults``: a subset of ("kill", "pause", "reopen", "partition") (or "kill,pause"), each done at
    least ``min_each`` times when the duration allows (and the clock faults ``skew``, ``bump``,
    ``strobe``, ``fast``: chaos/safety/clockfaults.py, they need libfaketime); ``partition``
    needs ``hosts``, a created :class:`~ledgercheck.chaos.safety.hosts.HostNet` whose namespaces the workers
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
    if workload not in SAFETY_WORKLOADS:
        raise ChaosError(f"unknown safety workload {workload!r} (one of {', '.join(SAFETY_WORKLOADS)})")
    if "partition" in fault_set and (hosts is None or not hosts.hosts):
        raise ChaosError("the partition fault needs workers on hosts (network namespaces): pass hosts, "
                         "or leave partition out of the faults")
    params = SafetyParams(workers=workers, items=items, seed=seed, faults=fault_set, min_each=min_each,
                          duration=duration, time_limit=time_limit, lapse=lapse, wall_scale=wall_scale,
                          latency=latency, renew_p=renew_p, fail_p=fail_p, record=record, op_timeout=op_timeout,
                          hosts=hosts, reset_extra=dict(reset or {}), workload=workload)
    camp = _Campaign(address, spec or default_spec(), params, out_dir if record else None, progress, tmp_root)
    try:
        result = camp.run()
        result.workload = workload
    finally:
        camp.close()
        if not record:
            shutil.rmtree(camp.out, ignore_errors=True)
    if record and check and result.history:
        attach_verdict(result, check_history(result.history, spec))
        clockfaults.attach(result)
    return result
