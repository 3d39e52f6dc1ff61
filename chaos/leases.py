"""Lease campaigns: real processes killed or paused while they hold a lease.

The crash-window exploration (exploration.py) needs an adapter with an effect journal, a
recovery scan and an injected clock.  Queues and durable-execution libraries often have none of
these, yet the two questions that matter most for them are the same:

* **kill while holding a lease** — a worker process claims an item and is killed with SIGKILL.
  Once the lease has lapsed (ttl + grace, at the run's time scale), does the item come back
  (claimable again, or marked timeout and visible), or is it stuck with a dead owner or gone?
* **kill right after a renewal** — the same, but the worker renews its lease first (the
  contract's ``during_renew`` point): the renewed lease must lapse as well, at its new expiry.
  Adapters without ``renew`` are not asked.
* **a stale worker finishing after another took over** — a worker claims an item and is paused
  with SIGSTOP; the lease lapses, another worker takes the item over and closes it out; the
  first worker is let go with SIGCONT and tries to renew and close out with its old token.  Every
  one of those writes must be refused, and the new holder's close-out must stand.
* **kill after submit, before record** — a worker claims an item, submits its step's effect to
  the harness's effect sink (a provider that deduplicates by the effect key) and is killed before
  it can record the receipt by closing the item out.  The item must come back under the same
  identity, so the rescuing worker's submission carries the same key and the provider applies the
  effect once; the item must end done with the provider's first receipt.  How many times the step
  was submitted is reported: a step that is not idempotent would have applied that many times,
  which only an effect journal and a recovery scan (the recovery profile) can prevent.

Each scenario runs against the adapter's durable state in a fresh directory (capability
``durable``; the takeover scenario also needs ``concurrent``).  Time is the adapter's: an
injected clock is moved, a wall clock is waited for (a deadline for what must happen, polled;
both scaled by the run's factor).  Results are crash-window records (``mode`` kill or takeover at
the contract's ``after_claim`` point), so they join a conformance run's report.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from typing import Any

import psutil
from ledgercheck.spec import Spec
from ledgercheck.transport.client import connect
from ledgercheck.transport.clock import (
    VIRTUAL_EPOCH,
    deadline,
    plain,
    quiet_window,
    scaled_document,
    scaled_spec,
)

from .points import ChaosError

SCENARIOS = ("kill_holding_lease", "kill_after_renew", "stale_worker_after_takeover", "kill_after_submit_before_record")
MODES = {"kill_holding_lease": "kill", "kill_after_renew": "kill", "stale_worker_after_takeover": "takeover",
         "kill_after_submit_before_record": "kill"}
RENEW_POINT = "during_renew"
POINTS = {"kill_after_renew": RENEW_POINT, "kill_after_submit_before_record": "after_submit_before_record"}


class NotApplicable(Exception):
    """The scenario needs an operation the adapter does not offer (the message says which)."""
_FACTOR = 1.0  # the run's timeout scale (set by run_campaign)
POINT = "after_claim"


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
    """A separate process holding its own connection to the adapter (chaos/lease_worker.py)."""

    def __init__(self, address: str, config: dict[str, Any], timeout: float) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "ledgercheck.chaos.lease_worker"], stdin=subprocess.PIPE,
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


SUBMIT_POINT = "after_submit_before_record"
SUBMIT_CLASS = "idempotent_with_key"  # the provider deduplicates; the window asks whether identity survives


def _window(mode: str, verdict: str, clauses: Iterable[str], message: str, status: str | None, *,
            point: str = POINT, **effects: Any) -> dict[str, Any]:
    out = {"point": point, "mode": mode, "step_class": None, "occurrence": 1, "decision_expected": None,
           "decision_observed": None, "effects_expected": None, "effects_observed": None, "final_status": status,
           "verdict": verdict, "clauses": sorted(set(clauses)), "message": message, "replay": None, "replay_file": None}
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
    out = []
    for name in scenarios:
        with tempfile.TemporaryDirectory(prefix="ledgercheck-lease-") as d:
            config = {"dir": d, "contract": doc, "seed": 0}
            if wall:
                config["timeout_scale"] = wall_scale
            try:
                if name in ("kill_holding_lease", "kill_after_renew"):
                    out.append(_kill_holding_lease(address, run_spec, config, wall, claimed, timeout,
                                                   renew=name == "kill_after_renew"))
                elif name == "stale_worker_after_takeover":
                    if not caps.get("concurrent"):
                        raise NotApplicable("two processes cannot share the adapter's ledger (capability concurrent)")
                    out.append(_stale_worker(address, run_spec, config, wall, claimed, timeout))
                elif name == "kill_after_submit_before_record":
                    out.append(_kill_after_submit(address, run_spec, config, wall, claimed, timeout))
                else:
                    raise ChaosError(f"unknown lease scenario {name!r}")
            except NotApplicable as exc:
                if not_applicable is not None:
                    not_applicable.append((name, str(exc)))
            except ChaosError as exc:
                out.append(_window(MODES.get(name, "kill"), "error", _claimed(claimed, ["recovery.no_loss"]), f"{name}: {exc}",
                                   None, point=POINTS.get(name, POINT)))
    return out


def _claimed(claimed: set[str], clauses: list[str]) -> list[str]:
    prof = {"core": "core", "lease": "lease", "recovery": "recovery"}
    keep = [c for c in clauses if prof.get(c.split(".")[0], c.split(".")[0]) in claimed]
    return keep or clauses[:1]


def _harness_client(address: str, spec: Spec, config: dict[str, Any], timeout: float) -> Any:
    c = connect(address, spec, timeout=timeout)
    out = c.reset(config)
    if not out.ok:
        c.close()
        raise ChaosError(f"reset on the shared directory failed: {out.code}: {out.message}")
    return c


def _create(h: Any, clock: _Clock, source_id: str) -> str:
    made = h.call("create", source_system="manual", source_id=source_id, now=clock.now())
    if not made.ok:
        raise ChaosError(f"create failed: {made.code}: {made.message}")
    return made.value["work"]["work_id"]


def _lapse_and_take_back(h: Any, clock: _Clock, spec: Spec, held: dict[str, Any], wid: str,
                         owner: str) -> tuple[str, dict[str, Any] | None]:
    """Let the held lease lapse (ttl + grace, just past), then take the item back (_take_back)."""
    lt = spec.lease_for("manual")
    wall = clock.wall
    clock.until((held.get("lease_expires_at") or clock.now() + lt.ttl) + lt.grace + (0.05 if wall else 0.125))
    # an injected clock is judged by its own time (4 x (ttl + grace) of it, moved a second per
    # try), never by how long the tries took on this machine: the clock's limit there is only a
    # safety net for an adapter that hangs
    return _take_back(h, clock, spec, wid, owner=owner,
                      deadline_s=deadline(max(5.0, 4 * (lt.ttl + lt.grace)) if wall else INJECTED_SAFETY_NET, _FACTOR),
                      virtual_s=None if wall else 4 * (lt.ttl + lt.grace))


def _take_back(c: Any, clock: _Clock, spec: Spec, wid: str, deadline_s: float, owner: str,
               virtual_s: float | None = None) -> tuple[str, dict[str, Any] | None]:
    """After the lease lapsed: run the monitors and try to claim the item until the deadline
    (wall seconds; with an injected clock also ``virtual_s`` of the adapter's time, whichever
    ends first: a virtual clock needs no more than that to bring a lapsed lease back).
    Returns (how it came back, the new holder's snapshot or None)."""
    end = time.monotonic() + deadline_s
    virtual_end = None if virtual_s is None or clock.wall else clock.t + virtual_s
    last = None
    while True:
        now = clock.now()
        for op in ("expire", "recover", "promote_due"):
            c.call(op, now=now)
        got = c.call("get", work_id=wid)
        if not got.ok:
            return f"the item vanished ({got.code}: {got.message})", None
        last = got.value
        if last["status"] in spec.terminal_statuses and last["status"] != "done":
            rq = c.call("requeue", work_id=wid, now=now, reason="operator takes the work back")
            if rq.ok:
                last = rq.value
        # whatever the item's recorded status, try to claim it: some queues hand out a stale
        # job again without ever marking it (the clause tests judge that; here only "is the
        # work lost?" is asked)
        cl = c.call("claim", owner=owner, now=now, work_id=wid)
        if not cl.ok and cl.code == "unsupported":
            cl = c.call("claim", owner=owner, now=now)
        if cl.ok and cl.value and cl.value.get("work_id") == wid:
            return "claimable again" + (f" (still {last['status']} before the claim)" if last["status"] in spec.statuses
                                        and spec.statuses[last["status"]].leased else ""), cl.value
        if time.monotonic() > end or (virtual_end is not None and clock.t > virtual_end):
            return f"still {last['status']}" + (f" under {last.get('owner')!r}" if last.get("owner") else ""), None
        if clock.wall:
            time.sleep(0.05)
        else:
            clock.t += 1.0


def _kill_holding_lease(address: str, spec: Spec, config: dict[str, Any], wall: bool, claimed: set[str],
                        timeout: float, renew: bool = False) -> dict[str, Any]:
    clock = _Clock(wall)
    h = _harness_client(address, spec, config, timeout)
    lt = spec.lease_for("manual")
    point, what = (RENEW_POINT, "killed right after renewing its lease") if renew else (POINT, "killed holding the lease")
    clauses = _claimed(claimed, ["core.running.renew_or_leave", "recovery.no_loss"])
    try:
        wid = _create(h, clock, "lease-campaign")
        h.close()  # the worker must find the item in the durable state, not in a shared object
        w = _Worker(address, {**config}, timeout)
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
                if isinstance(expires, int | float) and expires > at + reach + (1.0 if wall else 1e-6):
                    return _window("kill", "fail", _claimed(claimed, ["lease.renew.extends"]),
                                   f"{what}: the renewal set the lease to expire at {expires:g}, "
                                   f"beyond renewal time + the longest ttl ({at + reach:g})", None, point=point)
        finally:
            w.kill()  # SIGKILL while holding the lease
        h = _harness_client(address, spec, config, timeout)
        how, new = _lapse_and_take_back(h, clock, spec, held, wid, owner="worker-rescue")
        final = h.call("get", work_id=wid)
        status = final.value["status"] if final.ok else None
        if new is not None:
            v0 = held.get("lease_version") or 0
            v1 = new.get("lease_version") or 0
            msg = f"{what}; after ttl + grace the item was {how} (lease_version {v0} -> {v1})"
            return _window("kill", "pass", clauses, msg, status, point=point)
        if status is not None and (status in spec.terminal_statuses or status in spec.waiting_statuses.values()):
            return _window("kill", "pass", clauses, f"{what}; the item ended {status} and visible", status, point=point)
        return _window("kill", "fail", clauses, f"{what}; after ttl + grace and a deadline the item is {how}", status, point=point)
    finally:
        h.close()


def _stale_worker(address: str, spec: Spec, config: dict[str, Any], wall: bool, claimed: set[str],
                  timeout: float) -> dict[str, Any]:
    clock = _Clock(wall)
    h = _harness_client(address, spec, config, timeout)
    w = None
    try:
        wid = _create(h, clock, "lease-campaign")
        w = _Worker(address, {**config}, timeout)
        held = w.claim("worker-stale", clock.now(), wid)
        old_token = held.get("lease_token") or ""
        w.stop()  # SIGSTOP: alive but silent, lease not renewed
        how, new = _lapse_and_take_back(h, clock, spec, held, wid, owner="worker-new")
        clauses = _claimed(claimed, ["lease.fencing", "lease.takeover", "recovery.fencing_after_takeover"])
        if new is None:
            return _window("takeover", "fail", _claimed(claimed, ["core.running.renew_or_leave", "lease.takeover"]),
                           f"paused holder; after ttl + grace nobody could take the item over: {how}", None)
        w.cont()  # SIGCONT: the stale worker wakes up while the new holder works, old token in hand
        accepted = []
        for op, args in (("renew", {"work_id": wid, "token": old_token}),
                         ("close_out", {"work_id": wid, "token": old_token, "status": "failed", "result": {"by": "worker-stale"}})):
            res = w.op(op, now=clock.now(), **args)
            if res.get("ok"):
                accepted.append(op)
        done = h.call("close_out", work_id=wid, token=new.get("lease_token") or "", status="done", now=clock.now(),
                      result={"by": "worker-new"})
        if not done.ok and not accepted:
            raise ChaosError(f"the new holder could not close out: {done.code}: {done.message}")
        # a quiet window: nothing may undo the new holder's close-out afterwards (the stale
        # worker is alive again and its adapter may still be flushing)
        end = time.monotonic() + quiet_window(0.5 if wall else 0.05, _FACTOR)
        while True:
            final = h.call("get", work_id=wid)
            status = final.value["status"] if final.ok else None
            if not (final.ok and status == "done") or time.monotonic() >= end:
                break
            time.sleep(0.05)
        kept = final.ok and final.value.get("result") == {"by": "worker-new"} and status == "done"
        if accepted or not kept:
            what = ", ".join(accepted) or "nothing"
            msg = (f"paused holder let go after another took over: its stale {what} accepted; "
                   f"final status {status}, result {final.value.get('result') if final.ok else None!r}")
            return _window("takeover", "fail", clauses, msg, status)
        return _window("takeover", "pass", clauses,
                       f"paused holder let go after another took over ({how}): its stale renew and close-out were refused", status)
    finally:
        if w is not None:
            w.close()
        h.close()


def _kill_after_submit(address: str, spec: Spec, config: dict[str, Any], wall: bool, claimed: set[str],
                       timeout: float) -> dict[str, Any]:
    from .sink import EffectSink

    clock = _Clock(wall)
    sink_path = os.path.join(config["dir"], "effect-sink.sqlite")
    sink = EffectSink(sink_path, spec, create=True)
    h = _harness_client(address, spec, config, timeout)
    entry = spec.document["matrix"][SUBMIT_CLASS][SUBMIT_POINT]
    decision, allowance_name = entry["decision"], entry["effects"]
    # judged: the work comes back and can be finished.  The effect count is reported, not judged
    # by a clause: with a keyed provider and the item's own identity it cannot go wrong here; the
    # crash-window exploration judges effects against the matrix for ledgers with a journal.
    clauses = _claimed(claimed, ["core.running.renew_or_leave", "recovery.no_loss"])
    try:
        wid = _create(h, clock, "effect-window")
        h.close()
        key = f"{wid}:step-1"
        w = _Worker(address, {**config}, timeout)
        try:
            held = w.claim("worker-doomed", clock.now(), wid)
            sub = w.send({"cmd": "submit", "sink": sink_path, "key": key, "work_id": held["work_id"],
                          "step_class": SUBMIT_CLASS, "worker": "worker-doomed"})
            if not sub.get("ok"):
                raise ChaosError(f"the worker could not submit its effect: {sub.get('error')}")
        finally:
            w.kill()  # SIGKILL: the effect happened, its receipt was never recorded
        h = _harness_client(address, spec, config, timeout)
        how, new = _lapse_and_take_back(h, clock, spec, held, wid, owner="worker-rescue")
        cell = {"point": SUBMIT_POINT, "step_class": SUBMIT_CLASS, "decision_expected": decision,
                "effects_expected": allowance_name}
        if new is None:  # the step must run again: an item that only ended visible leaves the work undone
            final = h.call("get", work_id=wid)
            status = final.value["status"] if final.ok else None
            return _window("kill", "fail", clauses, f"effect submitted, then killed: after ttl + grace and a deadline the item is {how}",
                           status, decision_observed="none", effects_observed=sink.applied_counts().get(key, 0), **cell)
        # the rescuing worker runs the step again: same item, so the same key
        receipt = sink.submit(key=f"{new['work_id']}:step-1", work_id=new["work_id"], step_id="step-1", tool="provider",
                              step_class=SUBMIT_CLASS, input={"work": new["work_id"]}, worker="worker-rescue", session="rescue")
        done = h.call("close_out", work_id=wid, token=new.get("lease_token") or "", status="done", now=clock.now(),
                      result={"receipt": receipt})
        final = h.call("get", work_id=wid)
        status = final.value["status"] if final.ok else None
        applied = sink.applied_counts().get(key, 0)
        submitted = len(sink.submissions(key))
        first = sink.lookup(key)
        problems = []
        if not done.ok:
            problems.append(f"the rescuing worker's close-out was refused ({done.code}: {done.message})")
        if status != "done":
            problems.append(f"the item ended {status}")
        kept = final.ok and final.value.get("result") == {"receipt": first}
        # the receipt is reported, not judged: close-out's result is the clause tests' business
        note = (f"step submitted {submitted}x, applied {applied}x by the keyed provider ({submitted}x without a key); "
                f"the ledger {'kept the first receipt' if kept else 'kept no receipt'}")
        if problems:
            return _window("kill", "fail", clauses, "effect submitted, then killed: " + "; ".join(problems) + f" ({note})",
                           status, decision_observed="retry", effects_observed=applied, **cell)
        return _window("kill", "pass", clauses, f"effect submitted, then killed: the item came back ({how}) and ended done; {note}",
                       status, decision_observed="retry", effects_observed=applied, **cell)
    finally:
        h.close()
        sink.close()


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
                from ledgercheck.spec.load import build_spec

                from .sink import EffectSink

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
