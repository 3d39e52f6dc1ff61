"""Kill storms: many workers on one durable ledger, random SIGKILLs, the same end checks.

N worker processes claim work competitively from one ledger (thousands of items, a mix of
step classes and waits).  A seeded schedule says when (a random gap) and which worker slot to
kill; each kill is a real SIGKILL of the worker's process tree, wherever it happens to be,
inside a ledger transaction or a provider call included.  After each kill the harness pauses
the live workers between items (they hold no lease there), moves the shared virtual clock past
every lease's ttl + grace, and runs recovery through one of them; every item still leased at
that moment belonged to a dead worker, so the scan must report each of them with the decision
its journal calls for.  A replacement worker joins and everyone goes on.

When the kills are done the workers drain the workload and the checker looks at the end
state: no work lost, every step's applied effects within what the matrix allows for its class
(a storm does not know where its kills landed, so any point of the class's row counts), the
fold of each item's events equals its snapshot, and no two workers were ever granted the same
lease.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ledgercheck.chaos.safety.sink import EffectSink
from ledgercheck.chaos.safety.workload import Item, ItemIndex, Workload, generate_workload
from ledgercheck.spec import Spec, rules

from .checker import Violation, fold_problems, storm_step_allowed
from .exploration import check_adapter
from .limits import HARD_MAX_WORKERS, MAX_WORKERS, is_number, storm_problem
from .points import DONE, ChaosError
from .pool import WorkerDied, WorkerHandle, WorkerPool, WorkerTimeout
from .replays import (
    FORMAT,
    VERSION,
    _contract,
    default_replay_dir,
    replay_command,
    replay_workload,
    write_replay,
)
from .scenario import T0

StormProgress = Callable[[int, int | None, dict[str, Any]], None]
MAX_VIOLATIONS = 50

# What a storm may ask for: one table (chaos/crash/limits.py) for `crash storm` and replay files.


@dataclass
class StormParams:
    seed: int = 0
    workers: int = 4
    kills: int = 150
    items: int = 600
    max_steps: int = 3
    wait_ratio: float = 0.15
    gap_min: float = 0.002
    gap_max: float = 0.03
    latency: float = 0.003
    time_limit: float = 600.0
    # at most this many items each worker takes between two kills (0: no limit).  With
    # items > (kills + 1) x workers x per_cycle the workload cannot run out before the last kill,
    # however fast the workers run next to the kill schedule: every planned kill happens.
    per_cycle: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class _Slot:
    h: WorkerHandle
    idle: bool = False
    log: str = ""


@dataclass
class _Run:
    violations: list[Violation] = field(default_factory=list)
    victims: dict[str, int] = field(default_factory=dict)
    schedule: list[dict[str, Any]] = field(default_factory=list)
    barriers: int = 0
    notes: list[str] = field(default_factory=list)


class StormError(Exception):
    pass


def check_storm_params(params: StormParams, *, max_workers: int = MAX_WORKERS) -> None:
    """Refuse parameters no storm should run with, before any process starts: one ChaosError line
    naming the first bad parameter."""
    problem = storm_problem(params.as_dict(), max_workers=max_workers)
    if problem:
        raise ChaosError(problem)


def _check_max_workers(max_workers: int) -> None:
    if not is_number(max_workers, integer=True) or not 2 <= max_workers <= HARD_MAX_WORKERS:
        raise ChaosError(f"--max-workers must be an integer in 2..{HARD_MAX_WORKERS}, not {max_workers!r}")


def _plan(params: StormParams) -> list[tuple[float, int]]:
    rng = random.Random(params.seed)
    return [(rng.uniform(params.gap_min, params.gap_max), rng.randrange(params.workers)) for _ in range(params.kills)]


class Storm:
    def __init__(self, address: str, spec: Spec, params: StormParams, *, workload: Workload | None = None,
                 worker: str | None = None, timeout: float = 60.0, tmp_root: str | None = None,
                 progress: StormProgress | None = None) -> None:
        self.address, self.spec, self.p = address, spec, params
        self.timeout = timeout
        self.progress = progress
        self.workload = workload or generate_workload(spec, params.seed, items=params.items, max_steps=params.max_steps,
                                                      wait_ratio=params.wait_ratio)
        self.pool = WorkerPool(address, spec, spare=2, worker=worker)
        self.base = tempfile.mkdtemp(prefix="ledgercheck-storm-", dir=tmp_root)
        self.ledger = os.path.join(self.base, "ledger")
        self.sink = os.path.join(self.base, "effects.db")
        self.wl_file = os.path.join(self.base, "workload.db")
        self.now = T0
        self.lapse = max(self.spec.lease_for(s).ttl + self.spec.lease_for(s).grace for s in spec.source_systems) + 1.0
        self.slots: list[_Slot] = []
        self.run = _Run()
        self.n_logs = 0
        self._by_source: dict[tuple[Any, ...], Item] | None = None

    def close(self) -> None:
        for s in self.slots:
            if not s.h.dead:
                s.h.kill()
        self.pool.close()
        shutil.rmtree(self.base, ignore_errors=True)

    # ------------------------------------------------------------------ messaging
    def _recv(self, s: _Slot, what: str) -> dict[str, Any]:
        try:
            msg = s.h.recv(self.timeout)
        except (WorkerDied, WorkerTimeout) as exc:
            raise StormError(f"{what}: {exc}") from None
        if msg.get("ok") is False:
            raise StormError(f"{what}: worker {s.h.name}: {msg.get('error')}")
        return msg

    def _until(self, s: _Slot, event: str | None, what: str) -> dict[str, Any]:
        """Read a worker's messages until ``event`` (or a reply, for None); note idles on the way."""
        while True:
            msg = self._recv(s, what)
            ev = msg.get("event")
            if ev in ("tick", "budget"):  # working, or waiting for the next cycle's budget
                continue
            if ev == "idle":
                s.idle = True
                if event == "idle":
                    return msg
                continue
            if ev == event and ev is not None:
                return msg
            if event is None and ev is None:
                return msg
            raise StormError(f"{what}: worker {s.h.name} sent {str(msg)[:120]}")

    def _start(self, s: _Slot) -> None:
        self.n_logs += 1
        s.log = os.path.join(self.base, f"acquired-{self.n_logs}.jsonl")
        msg = {"cmd": "open", "dir": self.ledger, "sink": self.sink, "workload_index": self.wl_file, "now": self.now,
               "acq_log": s.log, "session": s.h.name, "latency": self.p.latency}
        reply = s.h.request(msg, self.timeout)
        if not reply.get("ok"):
            raise StormError(f"open the ledger: {reply.get('error')}")
        s.h.send({"cmd": "storm", "seed": self.p.seed * 7919 + self.n_logs, "now": self.now, "per_cycle": self.p.per_cycle})

    def _new_slot(self) -> _Slot:
        s = _Slot(self.pool.get())
        self._start(s)
        return s

    # ------------------------------------------------------------------ barriers
    def barrier(self, final: bool = False) -> list[Mapping[str, Any]]:
        """Pause everyone between items, jump the clock past every lease, recover, check, go on."""
        for s in self.slots:
            s.h.send({"cmd": "pause"})
        for s in self.slots:
            self._until(s, "paused", "pause")
        self.now += self.lapse
        self.run.barriers += 1
        rep = self.slots[0].h.request({"cmd": "check_stale", "now": self.now}, self.timeout)
        if not rep.get("ok"):
            raise StormError(f"recovery: {rep.get('error')}")
        self._check_barrier(rep)
        return rep["victims"]

    def go(self, per_cycle: int | None = None) -> None:
        """Let the workers go on; ``per_cycle`` (after a kill, and 0 before the drain) starts a
        new cycle with that budget (StormParams.per_cycle)."""
        msg: dict[str, Any] = {"cmd": "go", "now": self.now}
        if per_cycle is not None:
            msg["per_cycle"] = per_cycle
        for s in self.slots:
            s.idle = False
            s.h.send(msg)

    def _item_of(self, work: Mapping[str, Any]) -> Item | None:
        """The workload item a ledger record was created for (by its source triple)."""
        if self._by_source is None:
            self._by_source = {(it.source_system, it.source_id, it.source_run_id): it for it in self.workload.items}
        return self._by_source.get((work.get("source_system"), work.get("source_id"), work.get("source_run_id")))

    def _check_barrier(self, rep: Mapping[str, Any]) -> None:
        spec = self.spec
        V = self.run.violations
        when = f"recovery #{self.run.barriers}"
        before, after, waiting = rep["before"], rep["after"], rep["waiting"]
        got = {v["work_id"]: v for v in rep["victims"]}
        for v in rep["victims"]:
            self.run.victims[v["decision"]] = self.run.victims.get(v["decision"], 0) + 1
        for wid, e in before.items():
            w, recs = e["work"], e["receipts"]
            open_ = [(r["state"], r["step_class"]) for r in recs if r["state"] != "completed"]
            own = self._item_of(w)
            dec_ = rules.recovery_decision(spec, w, [(r["state"], r["step_class"]) for r in recs],
                                           own.retry_policy if own is not None else None)
            d = dec_.name
            rule = "recovery.attempts_exhausted" if dec_.by_attempts else "recovery.matrix"
            if wid not in got:
                V.append(Violation("recovery.scan", f"{when}: {wid} was leased by a killed worker and not reported"))
                continue
            if got[wid]["decision"] != d:
                V.append(Violation(rule, f"{when}: {wid} decision {got[wid]['decision']!r}, its journal "
                                   f"({', '.join(f'{a} {b}' for a, b in open_) or 'no open receipts'}) calls for {d!r}"))
            a = after.get(wid) or {}
            aw = a.get("work") or {}
            if rules.requeues(spec, d) and aw.get("status") != spec.initial_status:
                V.append(Violation(rule, f"{when}: {wid} decided {d}, but it is {aw.get('status')} after recovery"))
            if rules.quarantines(spec, d) and not aw.get("quarantined"):
                V.append(Violation("recovery.quarantine.visible", f"{when}: {wid} decided {d} but is not quarantined"))
            want = rules.receipt_marking(spec, d) or "pending"
            states = {r["key"]: r["state"] for r in a.get("receipts") or []}
            for r in recs:
                # attempts turned a requeue into quarantine: marking a receipt whose own class did
                # not call for quarantine is the implementation's choice (docs/protocol.md)
                free = rule == "recovery.attempts_exhausted" and spec.receipt_decision("pending", r["step_class"]) != d
                if r["state"] == "pending" and states.get(r["key"]) != want and not (free and states.get(r["key"]) == "pending"):
                    V.append(Violation("recovery.receipt_marking", f"{when}: {wid} receipt {r['step_id']} is "
                                       f"{states.get(r['key'])} after {d}, expected {want}"))
        for wid, v in got.items():
            if wid in before:
                continue
            if wid in waiting:
                V.append(Violation("recovery.waiting_untouched", f"{when}: recovery took waiting work {wid} ({v['decision']})"))
            else:
                V.append(Violation("recovery.scan", f"{when}: recovery took {wid}, which no killed worker held"))

    # ------------------------------------------------------------------ the storm
    def execute(self) -> dict[str, Any]:
        started = time.monotonic()
        EffectSink(self.sink, self.spec, create=True).close()
        ItemIndex.write(self.workload, self.wl_file)
        first = self.pool.get()
        check_adapter(first.handshake, self.address)
        caps = first.handshake.get("capabilities") or {}
        if not caps.get("concurrent"):
            first.kill()
            raise ChaosError(f"adapter {self.address}: a storm needs several processes on one ledger (concurrent: true)")
        setup = first.request({"cmd": "open", "dir": self.ledger, "sink": self.sink, "workload_index": self.wl_file,
                               "now": self.now, "session": "setup"}, self.timeout)
        if not setup.get("ok"):
            raise StormError(f"open the ledger: {setup.get('error')}")
        created = first.request({"cmd": "setup"}, max(self.timeout, 600.0))
        if not created.get("ok"):
            raise StormError(f"create the workload: {created.get('error')}")
        first_slot = _Slot(first)
        self._start(first_slot)
        self.slots = [first_slot] + [self._new_slot() for _ in range(self.p.workers - 1)]
        plan = _plan(self.p)
        deadline = started + self.p.time_limit
        for n, (gap, slot) in enumerate(plan, 1):
            if time.monotonic() > deadline:
                self.run.notes.append(f"time limit reached after {n - 1} kills")
                break
            time.sleep(gap)
            self._drain_idle()
            if all(s.idle for s in self.slots) and self._left() == 0:
                self.run.notes.append(f"workload finished after {n - 1} kills")
                break
            s = self.slots[slot]
            pid = s.h.pid
            killed = s.h.kill()
            self.run.schedule.append({"n": n, "at": round(time.monotonic() - started, 4), "gap": round(gap, 4),
                                      "slot": slot, "pid": pid, "pids": killed, "now": self.now})
            self.slots.pop(slot)
            self.barrier()
            fresh = _Slot(self.pool.get())
            self._start(fresh)
            self.go(self.p.per_cycle)
            self.slots.insert(slot, fresh)
            if self.progress is not None:
                self.progress(n, len(plan), {"now": self.now, "victims": dict(self.run.victims)})
        if self.p.per_cycle:
            self.go(0)  # the kills are done: no more budget, the workers drain what is left
        self._drain(started)
        return self._finish(started)

    def _drain_idle(self) -> None:
        for s in self.slots:
            while s.h.conn.poll(0):
                msg = self._recv(s, "storm")
                if msg.get("event") == "idle":
                    s.idle = True
                elif msg.get("event") not in ("tick", "budget"):
                    raise StormError(f"storm: worker {s.h.name} sent {str(msg)[:120]}")

    def _left(self) -> int:
        """Items neither done nor quarantined (asked of a paused worker)."""
        for s in self.slots:
            s.h.send({"cmd": "pause"})
        for s in self.slots:
            self._until(s, "paused", "pause")
        rep = self.slots[0].h.request({"cmd": "summary"}, self.timeout)
        if not rep.get("ok"):
            raise StormError(f"summary: {rep.get('error')}")
        counts = rep["counts"]
        left = sum(n for k, n in counts.items() if k not in (DONE, "quarantined"))
        idle = [s.idle for s in self.slots]
        self.go()
        for s, was in zip(self.slots, idle, strict=True):
            s.idle = was and left == 0
        return left

    def _drain(self, started: float) -> None:
        """Let the workers finish everything; recover whatever is left stale; stop them."""
        limit = time.monotonic() + max(120.0, self.p.time_limit)
        while True:
            if time.monotonic() > limit:
                raise StormError("the workload did not drain within the time limit after the kills")
            for s in self.slots:
                if not s.idle:
                    self._until(s, "idle", "drain")
            self.barrier()
            rep = self.slots[0].h.request({"cmd": "summary"}, self.timeout)
            counts = rep.get("counts") or {}
            left = sum(n for k, n in counts.items() if k not in (DONE, "quarantined"))
            if left == 0:
                break
            self.go()
        for s in self.slots:
            s.h.send({"cmd": "stop"})
        for s in self.slots:
            rep = self._until(s, None, "stop")
            self.run.notes.extend(rep.get("notes") or [])

    # ------------------------------------------------------------------ end checks
    def _finish(self, started: float) -> dict[str, Any]:
        dump = self.slots[0].h.request({"cmd": "dump"}, max(self.timeout, 600.0))
        if not dump.get("ok"):
            raise StormError(f"read the ledger: {dump.get('error')}")
        sink = EffectSink(self.sink, self.spec)
        try:
            applied = sink.applied_counts()
            totals = sink.summary()
        finally:
            sink.close()
        V = self.run.violations
        listed = set(dump["quarantined"])
        final: dict[str, int] = {}
        steps = 0
        for w in dump["items"]:
            wid = w["work_id"]
            status = "quarantined" if w.get("quarantined") else w["status"]
            final[status] = final.get(status, 0) + 1
            it = self._item_of(w)
            if it is None:
                V.append(Violation("recovery.no_loss", f"{wid} is not an item of the workload"))
                continue
            if w.get("quarantined"):
                if wid not in listed:
                    V.append(Violation("recovery.quarantine.visible", f"quarantined {it.key} is missing from list(quarantined=true)"))
            elif w["status"] != DONE:
                V.append(Violation("recovery.no_loss", f"{it.key} ends {w['status']}, neither {DONE} nor quarantined"))
            for prob in fold_problems(self.spec, w, dump["events"].get(wid) or []):
                V.append(Violation("eventlog.fold", f"{it.key}: {prob}"))
            states = {r["step_id"]: r["state"] for r in dump["receipts"].get(wid) or []}
            for s in it.steps:
                if not s.is_effect:
                    continue
                steps += 1
                key = self.spec.effect_key(work_id=wid, step_id=s.step_id, tool=s.tool)
                n, st = applied.get(key, 0), states.get(s.step_id)
                if w["status"] == DONE and not w.get("quarantined") and st != "completed":
                    V.append(Violation("recovery.no_loss", f"{it.key} was closed out, but step {s.step_id}'s receipt is {st}"))
                if not storm_step_allowed(self.spec, s.step_class or "", st, n):
                    V.append(Violation("recovery.effects_allowed", f"{it.key} step {s.step_id} ({s.step_class}) applied "
                                       f"{n} time(s) with its receipt {st}; no crash point of the class allows that"))
        if len(dump["items"]) != len(self.workload.items):
            V.append(Violation("recovery.no_loss", f"the ledger lists {len(dump['items'])} items, the workload has "
                               f"{len(self.workload.items)}"))
        acquisitions = self._check_holders(dump)
        elapsed = time.monotonic() - started
        kills = len(self.run.schedule)
        clauses = sorted({"recovery.scan", "recovery.matrix", "recovery.receipt_marking", "recovery.no_loss",
                          "recovery.effects_allowed", "recovery.quarantine.visible", "recovery.waiting_untouched",
                          "lease.single_holder", "eventlog.fold"} | {v.clause for v in V})
        return {
            "adapter": self.address, "seed": self.p.seed, "workers": self.p.workers, "items": len(self.workload.items),
            "steps": steps, "kills": kills, "kills_planned": self.p.kills, "barriers": self.run.barriers,
            "elapsed": round(elapsed, 3), "kills_per_s": round(kills / elapsed, 2) if elapsed else None,
            "virtual_time": self.now - T0, "victims": dict(sorted(self.run.victims.items())),
            "final": dict(sorted(final.items())), "quarantined": final.get("quarantined", 0),
            "effects": {"submissions": totals["submissions"], "applied": totals["applied"]},
            "acquisitions": acquisitions, "verdict": "fail" if V else "pass", "clauses": clauses,
            "violation_count": len(V), "violations": [{"clause": v.clause, "message": v.message} for v in V[:MAX_VIOLATIONS]],
            "notes": self.run.notes[:20], "params": self.p.as_dict(), "schedule": self.run.schedule,
            "replay": None, "replay_file": None,
        }

    def _check_holders(self, dump: Mapping[str, Any]) -> int:
        """Every lease a worker was granted is one acquisition in the item's events; none twice."""
        acquire = {self.spec.operations["claim"].event_for(), self.spec.operations["resume"].event_for()}
        tokens: dict[str, dict[int, str]] = {}
        for wid, evs in dump["events"].items():
            per: dict[int, str] = {}
            for e in evs:
                if e.get("type") in acquire:
                    data = e.get("data") or {}
                    per[data.get("lease_version")] = data.get("lease_token")
            tokens[wid] = per
        granted: dict[tuple[str, int], set[str]] = {}
        n = 0
        for name in sorted(os.listdir(self.base)):
            if not name.startswith("acquired-"):
                continue
            with open(os.path.join(self.base, name), encoding="utf-8") as f:
                for line in f:
                    try:
                        a = json.loads(line)
                    except ValueError:
                        continue  # a line cut by the kill
                    n += 1
                    granted.setdefault((a["work_id"], a["lease_version"]), set()).add(a["token"])
        V = self.run.violations
        for (wid, ver), toks in sorted(granted.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
            if len(toks) > 1:
                V.append(Violation("lease.single_holder", f"{wid}: {len(toks)} workers were granted lease version {ver}"))
            ev_tok = tokens.get(wid, {}).get(ver)
            if ev_tok is None:
                V.append(Violation("lease.single_holder", f"{wid}: a worker was granted lease version {ver}, which "
                                   "the item's events do not record"))
            elif ev_tok not in toks:
                V.append(Violation("lease.single_holder", f"{wid}: lease version {ver} went to a token the events do not show"))
        return n


def storm(address: str, spec: Spec, *, seed: int = 0, workers: int = 4, kills: int = 150, items: int | None = None,
          time_limit: float = 600.0, workload: Workload | None = None, replay_dir: str | None = None,
          progress: StormProgress | None = None, worker: str | None = None, timeout: float = 60.0,
          tmp_root: str | None = None, gap: tuple[float, float] = (0.002, 0.03), latency: float = 0.003,
          max_workers: int = MAX_WORKERS, per_cycle: int = 0) -> dict[str, Any]:
    """Run a kill storm and return its summary (see docs/chaos.md).  ``per_cycle``: each worker
    takes at most that many items between two kills (StormParams.per_cycle; 0: no limit)."""
    _check_max_workers(max_workers)
    if workers < 2:
        raise ChaosError("a storm needs at least 2 workers")
    if kills < 0:
        raise ChaosError("kills must be >= 0")
    params = StormParams(seed=seed, workers=workers, kills=kills,
                         items=items or (max(200, 4 * kills) if is_number(kills, integer=True) else 0),
                         gap_min=gap[0], gap_max=gap[1], latency=latency, time_limit=time_limit, per_cycle=per_cycle)
    check_storm_params(params, max_workers=max_workers)
    return _run_storm(address, spec, params, workload=workload, replay_dir=replay_dir, progress=progress,
                      worker=worker, timeout=timeout, tmp_root=tmp_root)


def _run_storm(address: str, spec: Spec, params: StormParams, *, workload: Workload | None, replay_dir: str | None,
               progress: StormProgress | None, worker: str | None, timeout: float, tmp_root: str | None,
               save: bool = True) -> dict[str, Any]:
    st = Storm(address, spec, params, workload=workload, worker=worker, timeout=timeout, tmp_root=tmp_root,
               progress=progress)
    try:
        try:
            summary = st.execute()
        except StormError as exc:
            summary = {"adapter": address, "seed": params.seed, "verdict": "error", "message": str(exc),
                       "kills": len(st.run.schedule), "schedule": st.run.schedule, "params": params.as_dict(),
                       "violations": [{"clause": v.clause, "message": v.message} for v in st.run.violations[:MAX_VIOLATIONS]],
                       "replay": None, "replay_file": None}
    finally:
        st.close()
    if summary["verdict"] != "pass" and save:
        doc = {"format": FORMAT, "version": VERSION, "kind": "storm", "spec_digest": spec.digest,
               "spec_version": spec.version, "contract": _contract(spec), "adapter": address, "seed": params.seed,
               "worker": worker, "storm": params.as_dict(),
               "workload": workload.to_dict() if workload is not None else None,
               "schedule": summary.get("schedule"),
               "recorded": {"verdict": summary["verdict"], "violations": summary.get("violations", [])[:5]}}
        path = write_replay(replay_dir or default_replay_dir(), doc, f"storm-{params.seed}")
        summary["replay_file"], summary["replay"] = path, replay_command(path, address, worker)
    return summary


def storm_from_replay(doc: Mapping[str, Any], spec: Spec, path: str, *, address: str | None = None,
                      max_workers: int = MAX_WORKERS) -> dict[str, Any]:
    _check_max_workers(max_workers)
    raw = doc["storm"]
    if not isinstance(raw, Mapping):
        raise ChaosError(f"{path}: 'storm' must be an object of storm parameters")
    try:
        params = StormParams(**{k: raw[k] for k in StormParams().as_dict() if k in raw})
    except TypeError as exc:
        raise ChaosError(f"{path}: bad storm parameters: {exc}") from None
    try:
        check_storm_params(params, max_workers=max_workers)
    except ChaosError as exc:
        raise ChaosError(f"{path}: {exc}") from None
    workload = None
    if doc.get("workload") is not None:
        workload = replay_workload(doc, spec, path)
    summary = _run_storm(address or doc["adapter"], spec, params, workload=workload, replay_dir=None, progress=None,
                         worker=doc.get("worker"), timeout=60.0, tmp_root=None, save=False)
    if summary["verdict"] != "pass":
        summary["replay_file"] = os.path.abspath(path)
        summary["replay"] = replay_command(summary["replay_file"], address or doc["adapter"], doc.get("worker"))
    return summary


