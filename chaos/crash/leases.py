"""Lease campaigns: real processes killed or paused while they hold a lease.

The crash-window exploration (exploration.py) needs an adapter with an effect journal, a
recovery scan and an injected clock.  Queues and durable-execution libraries often have none of
these, yet the questions that matter most for them are the same:

* **kill while holding a lease** — a worker process claims an item and is killed with SIGKILL.
  Once the lease has lapsed (ttl + grace, at the run's time scale), does the item come back
  (claimable again, or marked timeout and visible), or is it stuck with a dead owner or gone?
  And what brought it back: the ledger by itself (time alone, its monitor, or opening the ledger
  again) or only an operator's call?
* **kill right after a renewal** — the same, but the worker renews its lease first (the
  contract's ``during_renew`` point): the renewed lease must lapse as well, at its new expiry.
  Adapters without ``renew`` are not asked.
* **a stale worker finishing after another took over** — a worker claims an item and is paused
  with SIGSTOP; the lease lapses, another worker takes the item over and closes it out; the
  first worker is let go with SIGCONT and tries to renew and close out with its old token.  Every
  one of those writes must be refused, and the new holder's close-out must stand.
* **kill after submit, before record** — a worker claims an item, submits its step's effect to
  the harness's effect sink and is killed before it can record anything.  The item must come
  back, and a rescuing worker finishes it the way a deployed runtime would with what the ledger
  offers: under ``delivery: effectively-once`` through the ledger's effect journal (a receipt
  it did not create is looked up at the provider first), otherwise by running the step again.
  The provider has no key to deduplicate by (every submission applies), so the window counts
  how many times the effect really ran, and judges that by the declared ``delivery``.

Each scenario runs against the adapter's durable state in a fresh directory (capability
``durable``; the takeover scenario also needs ``concurrent``).  Time is the adapter's: an
injected clock is moved, a wall clock is waited for (a deadline for what must happen, polled;
both scaled by the run's factor).  Results are crash-window records (``mode`` kill or takeover at
the contract's ``after_claim`` point), so they join a conformance run's report.

Verdicts (docs/chaos.md, "Lease campaigns"): ``pass``; ``fail``; ``error``; and ``permitted``:
what happened is not what the contract asks for, but the adapter's declaration allows it (an
effect run again under ``at-least-once``; an item brought back only by the operator's call under
``reclaim: operator`` or ``never``).  A permitted window does not fail its clauses, and it is
never shown as a pass.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psutil
from ledgercheck.spec import Spec, default_spec
from ledgercheck.spec.rules import crash_points_at
from ledgercheck.transport.client import connect
from ledgercheck.transport.clock import (
    VIRTUAL_EPOCH,
    deadline,
    plain,
    quiet_window,
    scaled_document,
    scaled_spec,
)

from .points import DONE, ChaosError

SCENARIOS = ("kill_holding_lease", "kill_after_renew", "stale_worker_after_takeover", "kill_after_submit_before_record")
MODES = {"kill_holding_lease": "kill", "kill_after_renew": "kill", "stale_worker_after_takeover": "takeover",
         "kill_after_submit_before_record": "kill"}

def _point(stage: str) -> str:
    """The contract's crash point for a kill at ``stage`` of the worker's protocol (chaos/crash/points.py)."""
    return crash_points_at(default_spec(), stage)[0]


RENEW_POINT = _point("renewed")
POINT = _point("acquired")
SUBMIT_POINT = _point("submitted")
POINTS = {"kill_after_renew": RENEW_POINT, "kill_after_submit_before_record": SUBMIT_POINT}
VERDICTS = ("pass", "permitted", "fail", "error")  # a window's verdict, best first


class NotApplicable(Exception):
    """The scenario needs an operation the adapter does not offer (the message says which)."""
_FACTOR = 1.0  # the run's timeout scale (set by run_campaign)
# a terminal status other than the success one: what a stale worker's refused close-out asks for
OTHER_END = next(s for s in default_spec().terminal_statuses if s != DONE)
STEP_ID, TOOL = "step-1", "provider"
# what an item coming back through each act is evidence of, in the contract's words: the monitor's
# expire (or a claim once the lease lapsed) is core.running.renew_or_leave ("once its lease lapses
# the monitor marks it timeout"), the recovery scan is recovery.scan, the operator's requeue of
# finished work is core.requeue.terminal.  A reopen is nothing the contract promises: such a
# window is evidence only that the item was not lost (recovery.no_loss, named for every act)
ACT_CLAUSES = {"time": ("core.running.renew_or_leave",), "expire": ("core.running.renew_or_leave",),
               "recover": ("recovery.scan",), "requeue": ("core.requeue.terminal",), "reopen": ()}
# the clauses certify blames a duplicate_effect anomaly of the safety campaign on, most specific
# first, the last a core clause (conformance/safety_item.py CLAUSES; tests/chaos/test_leases.py
# keeps them equal): an effect run more often than the declaration allows is the same finding here
DUPLICATE_CLAUSES = ("idem.duplicate_returns_stored", "recovery.effects_allowed", "core.close_out.explicit")
# fields that say where an item is and who may write to it (the owner's name is a label: what a
# write is checked against is the token)
_STATE = ("status", "lease_token", "lease_version", "quarantined")


@dataclass(frozen=True)
class Declared:
    """What the adapter declares (handshake ``capabilities``, docs/protocol.md "Safety declarations")."""

    delivery: str
    reclaim: str

    @classmethod
    def of(cls, handshake: Mapping[str, Any], address: str) -> Declared:
        from ledgercheck.chaos.safety.campaign import Declared as Safety

        d = Safety.of(handshake, address)
        return cls(d.delivery, d.reclaim)

    def operator(self, act: str, spec: Spec) -> bool:
        """Whether ``act`` is an operator's call under this declaration: the operator's requeue
        always; the monitor operations too unless the ledger declares ``reclaim: lease``, where
        they are its own scheduler's (docs/protocol.md); a reopen or time never."""
        if act in ("time", "reopen"):
            return False
        if spec.operations[act].kind == "monitor":
            return self.reclaim != "lease"
        return True


INJECTED_SAFETY_NET = 600.0  # wall seconds a take-back under an injected clock may take before it is a hang


class _Clock:
    def __init__(self, wall: bool) -> None:
        self.wall = wall
        self.t = VIRTUAL_EPOCH

    def now(self) -> float:
        return time.time() if self.wall else self.t

    def until(self, t: float) -> None:
        if self.wall:
            delay = t - time.time()
            if delay > 0:
                time.sleep(delay)
        else:
            self.t = max(self.t, t)


class _Worker:
    """A separate process holding its own connection to the adapter (chaos/crash/lease_worker.py)."""

    def __init__(self, address: str, config: dict[str, Any], timeout: float) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "ledgercheck.chaos.crash.lease_worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.timeout = timeout
        self.ps = psutil.Process(self.proc.pid)
        self.send({"cmd": "open", "address": address, "config": config})

    def send(self, msg: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout)
        if not ready:
            self.kill()
            raise ChaosError(f"lease worker did not answer {msg.get('cmd')} {msg.get('op', '')} within {self.timeout:g}s")
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise ChaosError(f"lease worker died: {err.strip()[-300:]}")
        reply = json.loads(line)
        if not reply.get("ok", False) and "error" in reply and reply.get("fatal"):
            raise ChaosError(f"lease worker: {reply['error']}")
        return reply

    def op(self, op: str, **args: Any) -> dict[str, Any]:
        return self.send({"cmd": "op", "op": op, "args": args})

    def claim(self, owner: str, now: float, work_id: str) -> dict[str, Any]:
        """Claim this item (or, where claiming by id is unsupported, the next one); its snapshot."""
        r = self.op("claim", owner=owner, now=now, work_id=work_id)
        if not r.get("ok") and r.get("code") == "unsupported":
            r = self.op("claim", owner=owner, now=now)
        if not r.get("ok") or not r.get("value"):
            raise ChaosError(f"the worker could not claim the item: {r}")
        return r["value"]

    def kill(self) -> None:
        for p in [*self.ps.children(recursive=True), self.ps]:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        for p in [self.ps, *self.ps.children(recursive=True)]:
            p.suspend()

    def cont(self) -> None:
        for p in [self.ps, *self.ps.children(recursive=True)]:
            p.resume()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.cont()  # a paused worker cannot answer; let it go first
            except psutil.Error:
                pass
            try:
                self.send({"cmd": "close"})
            except (ChaosError, OSError, ValueError):
                pass
            if self.proc.poll() is None:
                self.kill()


def _window(mode: str, verdict: str, clauses: Iterable[str], message: str, status: str | None, *,
            point: str = POINT, **effects: Any) -> dict[str, Any]:
    out = {"point": point, "mode": mode, "step_class": None, "occurrence": 1, "decision_expected": None,
           "decision_observed": None, "effects_expected": None, "effects_observed": None, "final_status": status,
           "verdict": verdict, "clauses": list(dict.fromkeys(clauses)), "message": message, "replay": None,
           "replay_file": None}
    out.update(effects)
    return out


def run_campaign(address: str, spec: Spec, *, profiles: Iterable[str] | None = None, wall_scale: float = 0.01,
                 timeout: float = 30.0, scenarios: Iterable[str] = SCENARIOS, factor: float = 1.0,
                 not_applicable: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
    """Run the lease scenarios against an adapter; one crash-window record per scenario.

    A scenario the adapter cannot take part in (no ``renew``; no second process for a takeover)
    leaves no record; it is added to ``not_applicable`` as (scenario, why) when a list is given.

    ``factor`` (the run's timeout scale) stretches both kinds of waiting: the deadline for what
    must happen (the work coming back) and the quiet window for what must not (a stale write
    landing late)."""
    global _FACTOR
    _FACTOR = factor
    probe = connect(address, spec, timeout=timeout)
    hs = dict(probe.handshake)
    probe.close()
    caps = hs.get("capabilities") or {}
    wall = caps.get("clock", "injected") == "wall"
    claimed = set(profiles if profiles is not None else hs.get("profiles") or [])
    run_spec = scaled_spec(spec, wall_scale) if wall else spec
    doc = scaled_document(plain(spec.document), wall_scale) if wall else plain(spec.document)
    if not caps.get("durable"):
        raise ChaosError(f"{address}: lease campaigns need state that survives a process (capability durable)")
    declared = Declared.of(hs, address)
    out = []
    for name in scenarios:
        with tempfile.TemporaryDirectory(prefix="ledgercheck-lease-") as d:
            config = {"dir": d, "contract": doc, "seed": 0}
            if wall:
                config["timeout_scale"] = wall_scale
            run = _Run(address, run_spec, config, wall, claimed, timeout, declared)
            try:
                if name in ("kill_holding_lease", "kill_after_renew"):
                    out.append(_kill_holding_lease(run, renew=name == "kill_after_renew"))
                elif name == "stale_worker_after_takeover":
                    if not caps.get("concurrent"):
                        raise NotApplicable("two processes cannot share the adapter's ledger (capability concurrent)")
                    out.append(_stale_worker(run))
                elif name == "kill_after_submit_before_record":
                    out.append(_kill_after_submit(run))
                else:
                    raise ChaosError(f"unknown lease scenario {name!r}")
            except NotApplicable as exc:
                if not_applicable is not None:
                    not_applicable.append((name, str(exc)))
            except ChaosError as exc:
                out.append(_window(MODES.get(name, "kill"), "error", _claimed(claimed, ["recovery.no_loss"]), f"{name}: {exc}",
                                   None, point=POINTS.get(name, POINT)))
    return out


@dataclass
class _Run:
    """One scenario's settings."""

    address: str
    spec: Spec
    config: dict[str, Any]
    wall: bool
    claimed: set[str]
    timeout: float
    declared: Declared


def _claimed(claimed: set[str], clauses: Iterable[str]) -> list[str]:
    """The clauses of profiles the adapter claims (clause ids name their profile, except
    idempotency's ``idem.``); the first one when none is claimed (the window is evidence about
    that clause all the same: a clause of a profile not claimed decides nothing)."""
    clauses = list(dict.fromkeys(clauses))
    short = {("idem" if p == "idempotency" else p) for p in claimed}
    keep = [c for c in clauses if c.split(".")[0] in short]
    return keep or clauses[:1]


def _harness_client(address: str, spec: Spec, config: dict[str, Any], timeout: float) -> Any:
    c = connect(address, spec, timeout=timeout)
    _open(c, config)
    return c


def _open(c: Any, config: dict[str, Any]) -> None:
    out = c.reset(config)
    if not out.ok:
        c.close()
        raise ChaosError(f"reset on the shared directory failed: {out.code}: {out.message}")


def _create(h: Any, clock: _Clock, source_id: str) -> str:
    made = h.call("create", source_system="manual", source_id=source_id, now=clock.now())
    if not made.ok:
        raise ChaosError(f"create failed: {made.code}: {made.message}")
    return made.value["work"]["work_id"]


def _state(snap: Mapping[str, Any] | None) -> tuple[Any, ...] | None:
    return None if snap is None else tuple(snap.get(k) for k in _STATE)


# ------------------------------------------------------------------------------ coming back
@dataclass
class Comeback:
    """How a dead (or paused) holder's item came back, as observed."""

    new: dict[str, Any] | None  # the new holder's snapshot, or None: nobody could take it
    acts: list[str] = field(default_factory=list)  # what moved it, in order: "reopen", "time", operations
    moves: list[str] = field(default_factory=list)  # for each act, the status move it made ("running -> timeout")
    last: dict[str, Any] | None = None  # the item's last snapshot read
    problem: str | None = None  # the item vanished
    lapsed_at_reopen: bool = False  # the first read after the reopen came after the lease had lapsed
    expiry: bool = True  # the holder's claim had a lease expiry

    def words(self, declared: Declared, spec: Spec) -> str:
        """What brought the item back, in plain words (naming every call that acted)."""
        if self.problem:
            return self.problem
        if not self.acts:
            return "nothing moved it"
        parts = []
        for act, move in zip(self.acts, self.moves + [""] * len(self.acts), strict=False):
            moved = f" ({move})" if move else ""
            if act == "reopen":
                when = ("" if not self.expiry else ", read after the lease had lapsed" if self.lapsed_at_reopen
                        else ", before the lease lapsed")
                parts.append(f"opening the ledger again (a new process's reset{when}) moved it{moved}")
            elif act == "time" and not move:
                parts.append("once the lease lapsed a claim took it, with no other call")
            elif act == "time":
                parts.append(f"it moved with no call{moved}")
            else:
                who = "the operator's" if declared.operator(act, spec) else "the ledger's monitor operation"
                parts.append(f"{who} {act} moved it{moved}")
        return "; ".join(parts)

    def end(self) -> str:
        """Where an item nobody could take is (its last read), with what moved it, if anything did."""
        if self.problem:
            return self.problem
        last = self.last or {}
        return f"still {last.get('status')}" + (f" under {last.get('owner')!r}" if last.get("owner") else "")

    def by_operator_only(self, declared: Declared, spec: Spec) -> bool:
        return bool(self.acts) and all(declared.operator(a, spec) for a in self.acts)

    def clauses(self) -> list[str]:
        """What the observed acts are evidence of (ACT_CLAUSES), and that the item was not lost."""
        return [c for a in self.acts for c in ACT_CLAUSES.get(a, ())] + ["recovery.no_loss"]


def _lapse_and_take_back(h: Any, clock: _Clock, spec: Spec, held: dict[str, Any], wid: str, owner: str,
                         first: dict[str, Any] | None = None, reopened: bool = False, requeue: bool = True) -> Comeback:
    """Let the held lease lapse (ttl + grace, just past), then take the item back (_take_back).
    ``first``: the item as read right after the ledger was opened again by a new process
    (``reopened``): if that changed it from what its holder was handed, the reopen moved it."""
    lt = spec.lease_for("manual")
    wall = clock.wall
    expiry = held.get("lease_expires_at")
    # a lease the ledger set beyond the contract's longest ttl is waited out only to the contract's
    # window (from now, after the grant): past it the contract says the item comes back
    reach = clock.now() + max([lt.ttl] + [spec.lease_for(src).ttl for src in spec.source_systems])
    lapse = (min(expiry, reach) if isinstance(expiry, int | float) else clock.now() + lt.ttl) + lt.grace
    acts, moves = [], []
    lapsed_at_reopen = False
    if reopened and first is not None and _state(first) != _state(held):
        acts.append("reopen")
        moves.append(_move(held, first))
        lapsed_at_reopen = isinstance(held.get("lease_expires_at"), int | float) and first.get("_read_at", 0) > lapse
    clock.until(lapse + (0.05 if wall else 0.125))
    back = _take_back(h, clock, spec, wid, owner=owner, acts=acts, moves=moves, previous=first or held, requeue=requeue,
                      deadline_s=deadline(max(5.0, 4 * (lt.ttl + lt.grace)) if wall else INJECTED_SAFETY_NET, _FACTOR),
                      virtual_s=None if wall else 4 * (lt.ttl + lt.grace))
    back.lapsed_at_reopen = lapsed_at_reopen
    back.expiry = isinstance(held.get("lease_expires_at"), int | float)
    return back


def _monitor_ops(spec: Spec) -> list[str]:
    return [op for op, o in spec.operations.items() if o.kind == "monitor"]


def _operator_requeue(spec: Spec, status: str) -> str | None:
    """The operation (not a monitor) that takes work in ``status`` back to the initial status."""
    return next((op for t in spec.transitions if t.src == status and t.dst == spec.initial_status
                 for op in t.ops if spec.operations[op].kind != "monitor"), None)


def _take_back(c: Any, clock: _Clock, spec: Spec, wid: str, deadline_s: float, owner: str,
               virtual_s: float | None = None, acts: list[str] | None = None, moves: list[str] | None = None,
               previous: Mapping[str, Any] | None = None, requeue: bool = True) -> Comeback:
    """After the lease lapsed: try to claim the item with no other call; then run the ledger's
    monitor operations one at a time, noting each that moved the item (its answer names it, or
    the item reads differently after it), and the operator's requeue of finished work, claiming
    after them; until the deadline (wall seconds; with an injected clock also ``virtual_s`` of
    the adapter's time, whichever ends first: a virtual clock needs no more than that to bring a
    lapsed lease back).  A change seen between two reads with no call in between is time's.
    ``requeue`` off: no operator's requeue (the work is not to be run again by an operator's say-so)."""
    end = time.monotonic() + deadline_s
    virtual_end = None if virtual_s is None or clock.wall else clock.t + virtual_s
    acts, moves = list(acts or []), list(moves or [])
    unoffered: set[str] = set()
    prev = dict(previous) if previous is not None else None
    while True:
        now = clock.now()
        got = c.call("get", work_id=wid)
        if not got.ok:
            return Comeback(None, acts, moves, None, problem=f"the item vanished ({got.code}: {got.message})")
        last = got.value
        if prev is not None and _state(last) != _state(prev):
            acts.append("time")
            moves.append(_move(prev, last))
        # whatever the item's recorded status, try to claim it: some queues hand out a stale
        # job again without ever marking it (the clause tests judge that; here only "is the
        # work lost, and what brought it back?" is asked)
        new = _claim(c, owner, now, wid)
        if new is not None:
            return _back(new, acts, moves, last)
        for op in _monitor_ops(spec):
            if op in unoffered:
                continue
            out = c.call(op, now=now)
            if not out.ok and out.code == "unsupported":
                unoffered.add(op)
                continue
            after = c.call("get", work_id=wid)
            if not after.ok:
                return Comeback(None, acts, moves, last, problem=f"the item vanished after {op} ({after.code}: {after.message})")
            named = out.ok and isinstance(out.value, list) and any(isinstance(x, Mapping) and x.get("work_id") == wid
                                                                   for x in out.value)
            if named or _state(after.value) != _state(last):
                acts.append(op)
                moves.append(_move(last, after.value))
            last = after.value
        if requeue and last["status"] in spec.terminal_statuses and last["status"] != DONE:
            op = _operator_requeue(spec, last["status"])
            if op is not None and op not in unoffered:
                rq = c.call(op, work_id=wid, now=now, reason="operator takes the work back")
                if rq.ok and isinstance(rq.value, Mapping):
                    acts.append(op)
                    moves.append(_move(last, rq.value))
                    last = rq.value
                elif rq.code == "unsupported":
                    unoffered.add(op)
        new = _claim(c, owner, now, wid)
        if new is not None:
            return _back(new, acts, moves, last)
        prev = last
        if time.monotonic() > end or (virtual_end is not None and clock.t > virtual_end):
            return Comeback(None, acts, moves, last)
        if clock.wall:
            time.sleep(0.05)
        else:
            clock.t += 1.0


def _move(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """A status move in words; a change of the lease alone is named by its fields."""
    if a.get("status") != b.get("status"):
        return f"{a.get('status')} -> {b.get('status')}"
    changed = [k for k in _STATE[1:] if a.get(k) != b.get(k)]
    return f"{a.get('status')}, {', '.join(changed)} changed" if changed else ""


def _back(new: dict[str, Any], acts: list[str], moves: list[str], last: dict[str, Any]) -> Comeback:
    """The item was claimed; with no act before, the lapse alone handed it out."""
    if not acts:
        acts, moves = ["time"], [""]
    return Comeback(new, acts, moves, last)


def _claim(c: Any, owner: str, now: float, wid: str) -> dict[str, Any] | None:
    cl = c.call("claim", owner=owner, now=now, work_id=wid)
    if not cl.ok and cl.code == "unsupported":
        cl = c.call("claim", owner=owner, now=now)
    if cl.ok and isinstance(cl.value, Mapping) and cl.value.get("work_id") == wid:
        return dict(cl.value)
    return None


def _came_back(back: Comeback, run: _Run, held: Mapping[str, Any]) -> tuple[str, list[str], str]:
    """The verdict on how the item came back, the clauses that is evidence of, and the words.
    Back by the ledger itself (time, a reopen, its monitor under ``reclaim: lease``): a pass.
    Back only through an operator's call: permitted under ``reclaim: operator`` or ``never``;
    under ``reclaim: lease`` a failure of core.running.renew_or_leave (the item did not come back
    by itself once its lease lapsed, docs/protocol.md)."""
    spec, declared = run.spec, run.declared
    how = back.words(declared, spec)
    versions = f" (lease_version {held.get('lease_version') or 0} -> {(back.new or {}).get('lease_version') or 0})"
    if back.by_operator_only(declared, spec):
        ops = ", ".join(dict.fromkeys(back.acts))
        if declared.reclaim == "lease":
            return ("fail", _claimed(run.claimed, ["core.running.renew_or_leave", "recovery.no_loss"]),
                    f"it came back only through the operator's {ops}: {how}; but the adapter declares reclaim: lease, "
                    f"so a dead holder's item must come back by itself once its lease lapses")
        return ("permitted", _claimed(run.claimed, back.clauses()),
                f"it came back only through the operator's {ops}: {how}{versions}, allowed by reclaim: {declared.reclaim}")
    return "pass", _claimed(run.claimed, back.clauses()), f"it came back: {how}{versions}"


def _said(verdict: str, text: str) -> str:
    return f"permitted: {text}" if verdict == "permitted" else text


def _kill_holding_lease(run: _Run, renew: bool = False) -> dict[str, Any]:
    spec, config, claimed = run.spec, run.config, run.claimed
    clock = _Clock(run.wall)
    h = _harness_client(run.address, spec, config, run.timeout)
    lt = spec.lease_for("manual")
    point, what = (RENEW_POINT, "killed right after renewing its lease") if renew else (POINT, "killed holding the lease")
    clauses = _claimed(claimed, ["core.running.renew_or_leave", "recovery.no_loss"])
    try:
        wid = _create(h, clock, "lease-campaign")
        h.close()  # the worker must find the item in the durable state, not in a shared object
        h = connect(run.address, spec, timeout=run.timeout)  # started now, opens the ledger after the kill
        w = _Worker(run.address, {**config}, run.timeout)
        try:
            held = w.claim("worker-doomed", clock.now(), wid)
            if renew:
                clock.until(clock.now() + lt.renew_interval)
                at = clock.now()
                r = w.op("renew", work_id=wid, token=held.get("lease_token") or "", now=at)
                if not r.get("ok") and r.get("code") == "unsupported":
                    raise NotApplicable("the adapter has no renew operation")
                if not r.get("ok") or not isinstance(r.get("value"), dict):
                    raise ChaosError(f"the worker could not renew its fresh lease: {r.get('code')}: {r.get('error')}")
                held = r["value"]
                expires = held.get("lease_expires_at")
                # how far the renewed lease may reach: the longest ttl of any source from the
                # renewal (per-source differences are lease.per_source's business), plus timestamp
                # slack on a wall clock; further, and the wait below would follow it
                reach = max([spec.lease_for(None).ttl] + [spec.lease_for(src).ttl for src in spec.source_systems])
                if isinstance(expires, int | float) and expires > at + reach + (1.0 if run.wall else 1e-6):
                    return _window("kill", "fail", _claimed(claimed, ["lease.renew.extends"]),
                                   f"{what}: the renewal set the lease to expire at {expires:g}, "
                                   f"beyond renewal time + the longest ttl ({at + reach:g})", None, point=point)
        finally:
            w.kill()  # SIGKILL while holding the lease
        if not isinstance(held.get("lease_expires_at"), int | float):
            what = what.replace("holding the lease", "holding the item (its claim has no lease expiry)")
        first = _reopen_and_read(h, config, wid, clock)
        back = _lapse_and_take_back(h, clock, spec, held, wid, owner="worker-rescue", first=first, reopened=True)
        final = h.call("get", work_id=wid)
        status = final.value["status"] if final.ok else None
        extra = {"came_back_by": back.acts if back.new is not None else None, "reclaim": run.declared.reclaim}
        if back.new is not None:
            verdict, named, text = _came_back(back, run, held)
            return _window("kill", verdict, named, _said(verdict, f"{what}; {text}"), status, point=point, **extra)
        if status is not None and (status in spec.terminal_statuses or status in spec.waiting_statuses.values()):
            return _window("kill", "pass", clauses, f"{what}; the item ended {status} and visible ("
                           + back.words(run.declared, spec) + ")", status,
                           point=point, **extra)
        return _window("kill", "fail", clauses, f"{what}; after ttl + grace and a deadline the item is "
                       f"{back.end()} ({back.words(run.declared, spec)})", status, point=point, **extra)
    finally:
        h.close()


def _reopen_and_read(h: Any, config: dict[str, Any], wid: str, clock: _Clock) -> dict[str, Any] | None:
    """Open the ledger in the harness's (already started) process and read the item at once."""
    _open(h, config)
    got = h.call("get", work_id=wid)
    if not got.ok or not isinstance(got.value, Mapping):
        return None
    return {**got.value, "_read_at": clock.now()}


def _stale_worker(run: _Run) -> dict[str, Any]:
    spec, claimed = run.spec, run.claimed
    clock = _Clock(run.wall)
    h = _harness_client(run.address, spec, run.config, run.timeout)
    w = None
    try:
        wid = _create(h, clock, "lease-campaign")
        w = _Worker(run.address, {**run.config}, run.timeout)
        held = w.claim("worker-stale", clock.now(), wid)
        old_token = held.get("lease_token") or ""
        w.stop()  # SIGSTOP: alive but silent, lease not renewed
        back = _lapse_and_take_back(h, clock, spec, held, wid, owner="worker-new")
        how, new = back.words(run.declared, spec), back.new
        clauses = _claimed(claimed, ["lease.fencing", "lease.takeover", "recovery.fencing_after_takeover"])
        extra = {"came_back_by": back.acts if new is not None else None, "reclaim": run.declared.reclaim}
        if new is None:
            return _window("takeover", "fail", _claimed(claimed, ["core.running.renew_or_leave", "lease.takeover"]),
                           f"paused holder; after ttl + grace nobody could take the item over: it is {back.end()} ({how})",
                           None, **extra)
        w.cont()  # SIGCONT: the stale worker wakes up while the new holder works, old token in hand
        accepted = []
        for op, args in (("renew", {"work_id": wid, "token": old_token}),
                         ("close_out", {"work_id": wid, "token": old_token, "status": OTHER_END, "result": {"by": "worker-stale"}})):
            res = w.op(op, now=clock.now(), **args)
            if res.get("ok"):
                accepted.append(op)
        done = h.call("close_out", work_id=wid, token=new.get("lease_token") or "", status=DONE, now=clock.now(),
                      result={"by": "worker-new"})
        if not done.ok and not accepted:
            raise ChaosError(f"the new holder could not close out: {done.code}: {done.message}")
        # a quiet window: nothing may undo the new holder's close-out afterwards (the stale
        # worker is alive again and its adapter may still be flushing)
        end = time.monotonic() + quiet_window(0.5 if run.wall else 0.05, _FACTOR)
        while True:
            final = h.call("get", work_id=wid)
            status = final.value["status"] if final.ok else None
            if not (final.ok and status == DONE) or time.monotonic() >= end:
                break
            time.sleep(0.05)
        kept = final.ok and final.value.get("result") == {"by": "worker-new"} and status == DONE
        if accepted or not kept:
            what = ", ".join(accepted) or "nothing"
            msg = (f"paused holder let go after another took over: its stale {what} accepted; "
                   f"final status {status}, result {final.value.get('result') if final.ok else None!r}")
            return _window("takeover", "fail", clauses, msg, status, **extra)
        return _window("takeover", "pass", clauses,
                       f"paused holder let go after another took over ({how}): its stale renew and close-out were refused",
                       status, **extra)
    finally:
        if w is not None:
            w.close()
        h.close()


# ------------------------------------------------------------------------------ the effect
def _effect_class(run: _Run) -> str:
    """The provider the window's step talks to: one that can be asked what happened when the
    ledger promises effectively-once through its journal, else one that applies every
    submission (neither deduplicates: how often the effect runs is the ledger's doing)."""
    from ledgercheck.chaos.safety.campaign import PLAIN_CLASS, STEP_CLASS

    return STEP_CLASS.get(run.declared.delivery, PLAIN_CLASS)


def _allowance(spec: Spec, delivery: str) -> str | None:
    """The contract's allowance whose bounds are the declared delivery's: at most once, exactly
    once, at least once (docs/protocol.md, "Safety declarations")."""
    from ledgercheck.reports.results import DELIVERY_BOUNDS  # what reports check such a window against

    want = DELIVERY_BOUNDS[delivery]
    return next((name for name, a in sorted(spec.allowances.items()) if (a.min, a.max) == want), None)


def _effect_verdict(run: _Run, applied: int) -> tuple[str, list[str], str]:
    """How the effect's run count stands against the declared delivery: (verdict, clauses, words)."""
    delivery = run.declared.delivery
    short = {("idem" if p == "idempotency" else p) for p in run.claimed}
    dup = [next((c for c in DUPLICATE_CLAUSES if c.split(".")[0] in short), DUPLICATE_CLAUSES[-1])]
    if applied <= 1:
        return "pass", dup if delivery != "at-least-once" else [], ""
    if delivery == "at-least-once":
        return "permitted", [], ", allowed by at-least-once"
    return "fail", dup, f", which {delivery} does not allow"


def _worst(*verdicts: str) -> str:
    return max(verdicts, key=VERDICTS.index)


def _kill_after_submit(run: _Run) -> dict[str, Any]:
    from ledgercheck.chaos.safety.sink import EffectSink

    spec, config, claimed = run.spec, run.config, run.claimed
    clock = _Clock(run.wall)
    sink_path = os.path.join(config["dir"], "effect-sink.sqlite")
    sink = EffectSink(sink_path, spec, create=True)
    step_class = _effect_class(run)
    journal = run.declared.delivery == "effectively-once"
    h = _harness_client(run.address, spec, config, run.timeout)
    comeback = ["core.running.renew_or_leave", "recovery.no_loss"]
    cell = {"point": SUBMIT_POINT, "step_class": step_class, "delivery": run.declared.delivery,
            "reclaim": run.declared.reclaim, "effects_expected": _allowance(spec, run.declared.delivery)}
    try:
        wid = _create(h, clock, "effect-window")
        h.close()
        h = connect(run.address, spec, timeout=run.timeout)  # started now, opens the ledger after the kill
        w = _Worker(run.address, {**config}, run.timeout)
        key = f"{wid}:{STEP_ID}"
        try:
            held = w.claim("worker-doomed", clock.now(), wid)
            if journal:  # a runtime under effectively-once begins the effect in the journal first
                b = w.op("effect_begin", work_id=wid, step_id=STEP_ID, tool=TOOL, input={"work": wid},
                         step_class=step_class, token=held.get("lease_token") or "", now=clock.now())
                if b.get("ok") and isinstance(b.get("value"), dict):
                    key = str((b["value"].get("receipt") or {}).get("key") or key)
                elif b.get("code") == "unsupported":
                    journal = False  # no journal to go through: the step is simply run
                else:
                    raise ChaosError(f"the worker could not begin its effect: {b.get('code')}: {b.get('error')}")
            sub = w.send({"cmd": "submit", "sink": sink_path, "key": key, "work_id": held["work_id"],
                          "step_class": step_class, "worker": "worker-doomed"})
            if not sub.get("ok"):
                raise ChaosError(f"the worker could not submit its effect: {sub.get('error')}")
        finally:
            w.kill()  # SIGKILL: the effect happened, its outcome was never recorded
        first = _reopen_and_read(h, config, wid, clock)
        # under at-most-once an operator's requeue would be a decision to run the work again, which
        # no ledger can stop: only what the ledger does by itself (and its recovery) is asked
        at_most_once = run.declared.delivery == "at-most-once"
        back = _lapse_and_take_back(h, clock, spec, held, wid, owner="worker-rescue", first=first, reopened=True,
                                    requeue=not at_most_once)
        new = back.new
        came = {"came_back_by": back.acts if new is not None else None}
        if new is None:  # the step must run again: an item that only ended visible leaves the work undone
            final = h.call("get", work_id=wid)
            status = final.value["status"] if final.ok else None
            applied = sink.applied_counts().get(key, 0)
            if at_most_once and applied <= 1 and status is not None and (
                    status in spec.terminal_statuses or status in spec.waiting_statuses.values()):
                _, dup, _ = _effect_verdict(run, applied)
                return _window("kill", "pass", _claimed(claimed, comeback) + dup,
                               f"effect submitted, then killed; the item ended {status} and visible ("
                               + back.words(run.declared, spec)
                               + f"); the step's effect ran {applied}x and was not run again, as at-most-once promises",
                               status, decision_observed="none", effects_observed=applied, **cell, **came)
            return _window("kill", "fail", _claimed(claimed, comeback), "effect submitted, then killed: after ttl + grace "
                           f"and a deadline the item is {back.end()} ({back.words(run.declared, spec)})", status,
                           decision_observed="none",
                           effects_observed=sink.applied_counts().get(key, 0), **cell, **came)
        # the rescuing worker finishes the step as a deployed runtime would with what the ledger offers
        decision, receipt, problems = _rescue(h, sink, spec, new, wid, key, step_class, journal, clock)
        done = h.call("close_out", work_id=wid, token=new.get("lease_token") or "", status=DONE, now=clock.now(),
                      result={"receipt": receipt})
        final = h.call("get", work_id=wid)
        status = final.value["status"] if final.ok else None
        applied = sink.applied_counts().get(key, 0)
        if not done.ok:
            problems.append(f"the rescuing worker's close-out was refused ({done.code}: {done.message})")
        if status != DONE:
            problems.append(f"the item ended {status}")
        back_verdict, back_clauses, back_text = _came_back(back, run, held)
        eff_verdict, eff_clauses, eff_text = _effect_verdict(run, applied)
        how = {"retry": "the rescuing worker ran the step again: nothing told it the effect had happened",
               "reconcile": "the journal held the dead worker's pending receipt and the provider said the effect had happened",
               "resume": "the journal held the effect's completed receipt"}.get(decision, decision)
        note = (f"the step's effect ran {applied}x at a provider without a deduplicating key ({how}; delivery "
                f"{run.declared.delivery}){eff_text}")
        if problems:
            return _window("kill", "fail", _claimed(claimed, comeback), "effect submitted, then killed: " + "; ".join(problems)
                           + f" ({note})", status, decision_observed=decision, effects_observed=applied, **cell, **came)
        verdict = _worst(back_verdict, eff_verdict)
        if verdict == "fail":  # blamed on what failed
            clauses = (back_clauses if back_verdict == "fail" else []) + (eff_clauses if eff_verdict == "fail" else [])
        else:
            clauses = back_clauses + eff_clauses
        return _window("kill", verdict, clauses or _claimed(claimed, comeback),
                       _said(verdict, f"effect submitted, then killed; {back_text}; {note}"), status,
                       decision_observed=decision, effects_observed=applied, **cell, **came)
    finally:
        h.close()
        sink.close()


def _rescue(h: Any, sink: Any, spec: Spec, new: Mapping[str, Any], wid: str, key: str, step_class: str, journal: bool,
            clock: _Clock) -> tuple[str, Any, list[str]]:
    """The rescuing worker's step: through the journal when the ledger promises effectively-once
    (a completed receipt is not run again; one it did not create is looked up at the provider
    first), else run again.  Returns (what decided it, the provider's receipt, problems)."""
    token = new.get("lease_token") or ""
    problems: list[str] = []

    def submit() -> Any:
        return sink.submit(key=key, work_id=wid, step_id=STEP_ID, tool=TOOL, step_class=step_class,
                           input={"work": wid}, worker="worker-rescue", session="rescue")

    if not journal:
        return "retry", submit(), problems
    b = h.call("effect_begin", work_id=wid, step_id=STEP_ID, tool=TOOL, input={"work": wid}, step_class=step_class,
               token=token, now=clock.now())
    if not b.ok or not isinstance(b.value, Mapping):
        problems.append(f"the rescuing worker's effect_begin was refused ({b.code}: {b.message})")
        return "none", None, problems
    rec = b.value.get("receipt") or {}
    if rec.get("state") == "completed":
        return "resume", rec.get("result"), problems
    key = str(rec.get("key") or key)
    found = sink.lookup(key) if not b.value.get("created") else None
    decision, result = ("reconcile", found) if found is not None else ("retry", submit())
    out = h.call("effect_record", key=key, input_hash=rec.get("input_hash"), result={"provider": result}, token=token,
                 now=clock.now())
    if not out.ok:
        problems.append(f"the rescuing worker's effect_record was refused ({out.code}: {out.message})")
    return decision, result, problems


def main_worker() -> None:  # pragma: no cover - exercised through subprocesses
    """The worker process: JSON commands on stdin, one answer per line on stdout."""
    client = None
    for line in sys.stdin:
        msg = json.loads(line)
        try:
            if msg["cmd"] == "open":
                config = msg["config"]
                client = connect(msg["address"], None)
                out = client.reset(msg["config"])
                reply = {"ok": out.ok, "code": out.code, "error": out.message, "fatal": not out.ok}
            elif msg["cmd"] == "submit":  # the step's effect, at the harness's provider
                from ledgercheck.chaos.safety.sink import EffectSink
                from ledgercheck.spec.load import build_spec

                sink = EffectSink(msg["sink"], build_spec(config["contract"]))
                try:
                    got = sink.submit(key=msg["key"], work_id=msg["work_id"], step_id="step-1", tool="provider",
                                      step_class=msg["step_class"], input={"work": msg["work_id"]}, worker=msg["worker"],
                                      session="doomed")
                finally:
                    sink.close()
                reply = {"ok": True, "value": got}
            elif msg["cmd"] == "op":
                assert client is not None
                out = client.call(msg["op"], **msg["args"])
                reply = {"ok": out.ok, "value": out.value, "code": out.code, "error": out.message}
            else:  # close
                print(json.dumps({"ok": True}), flush=True)
                break
        except Exception as exc:  # noqa: BLE001 - reported to the harness
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "fatal": True}
        print(json.dumps(reply, default=str), flush=True)
    if client is not None:
        client.close()
    os._exit(0)
