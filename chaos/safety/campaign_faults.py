"""The safety campaign's controller, injecting faults: kills, pauses with planned takeovers (by the
operator or by time), partitions, reopens, armed crash points."""

from __future__ import annotations

import math
import struct
import time
from collections.abc import Mapping
from typing import Any

from . import nemesis
from .campaign_model import (
    CALL0,
    EFFECT_DONE,
    EXP0,
    FLAG_SLOTS,
    HOLDING,
    IN_EFFECT,
    WATCH0,
    WATCH_BYTES,
    WATCHES,
    _Proc,
    _Takeover,
    held_key,
    item_key,
)


class _Faults:
    """Part of the campaign's controller (chaos/safety/campaign.py ``_Campaign``)."""

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
        if f.fault in nemesis.CLOCK_FAULTS and self.clocks is not None:
            return self.clocks.strike(f, holders, cands, may_wait, may_wait_long, self.notes)
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
