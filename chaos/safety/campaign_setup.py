"""The safety campaign's controller, starting up: the adapter probed, the history's meta record, the
processes (workers, producer, monitor) spawned and waited for."""

from __future__ import annotations

import mmap
import os
import random
import sys
import time
from collections.abc import Sequence
from typing import Any

from ledgercheck.chaos.crash.forkserver import ForkServerError, fork_server
from ledgercheck.chaos.crash.points import ChaosError, worker_points
from ledgercheck.spec import default_spec
from ledgercheck.spec.rules import crash_points_at
from ledgercheck.transport.client import AdapterError, connect
from ledgercheck.transport.clock import plain, scaled_document

from . import clockfaults, nemesis
from .campaign_model import (
    ENTRY,
    FLAG_BYTES,
    MONITOR_OPS,
    PLAIN_CLASS,
    SOURCE,
    STEP_CLASS,
    Declared,
    TimeBase,
    _Proc,
    _resolved,
    applicable,
)
from .history import HistoryWriter, process_path
from .sink import EffectSink


class _Setup:
    """Part of the campaign's controller (chaos/safety/campaign.py ``_Campaign``)."""

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
            "workload": self.p.workload,
        }
        self.clocks = clockfaults.CampaignClocks.for_campaign(self.p.faults, self.work, self.p.seed, self.lapse_real,
                                                              self.durable, self._record)
        if self.clocks is not None:
            self.counts.update(dict.fromkeys([f for f in self.p.faults if f in nemesis.CLOCK_FAULTS], 0))
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
                     "mode": self.mode,
                     # the resolution of the ledger's own stamps (a wall clock's), when its handshake says
                     **({"time_resolution": caps["time_resolution"]} if "time_resolution" in caps else {})},
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
        if self.clocks is not None and role == "worker":
            self.clocks.spawned(cfg, slot, name, pid)
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
