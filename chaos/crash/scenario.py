"""One crash window, end to end: kill (or pause) a worker at a named point, recover, finish, check.

A window runs on a fresh ledger directory and a fresh effect sink:

1. worker A creates the workload's items, arms the point and runs the workload in order;
   when it reaches the point it announces itself and blocks;
2. the harness SIGKILLs A with its whole process tree (or, in a takeover window, SIGSTOPs it);
3. worker B opens the same ledger and records what the kill left;
4. the clock moves to just before the lapse of the crashed item's lease (ttl + grace of its
   source system; recovery must take nothing) and then just past it, and B runs recovery;
5. B finishes the workload (claims what was requeued, resumes waiting items);
   in a takeover window B stops right after claiming the crashed item, A is let go with SIGCONT
   and every write it tries must be refused; then B finishes;
6. the checker compares everything with the contract.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ledgercheck.chaos.safety.sink import EffectSink
from ledgercheck.chaos.safety.workload import Workload
from ledgercheck.spec import Spec

from .checker import Observation, Verdict, allowance_text, check_window
from .points import ChaosError, fresh_point
from .pool import WorkerDied, WorkerHandle, WorkerPool, WorkerTimeout

T0 = 1_000_000.0  # the virtual clock at the start of every window
STALE_SESSION = "stale"


class NotReached(Exception):
    """The armed point was not reached: the run has fewer occurrences of it."""

    def __init__(self, counts: Mapping[str, int]) -> None:
        super().__init__("point not reached")
        self.counts = dict(counts)


class WindowError(Exception):
    """The window could not be evaluated (adapter died, hung, or the worker broke)."""


@dataclass
class WindowResult:
    point: str
    occurrence: int
    mode: str
    verdict: str
    verdict_detail: Verdict | None = None
    step_class: str | None = None
    final_status: str | None = None
    message: str | None = None
    ctx: Mapping[str, Any] = field(default_factory=dict)
    elapsed: float = 0.0
    recovery_kill: tuple[str, int] | None = None

    def as_dict(self) -> dict[str, Any]:
        v = self.verdict_detail
        # a passing window vouches for every clause it checked; a failing one names only the
        # clauses it found broken, so reports blame precisely; a window that could not be judged
        # (no verdict) names the clause it was there to decide, so the error reaches that clause
        clauses = (sorted({x.clause for x in v.violations}) if v and v.violations and self.verdict == "fail"
                   else list(v.clauses) if v else [])
        if not clauses:
            clauses = ["recovery.fencing_after_takeover" if self.mode == "pause" else "recovery.no_loss"]
        return {
            "point": self.point,
            "mode": "takeover" if self.mode == "pause" else "scan-kill" if self.recovery_kill else "kill",
            "scan_kill": list(self.recovery_kill) if self.recovery_kill else None,
            "step_class": self.step_class,
            "occurrence": self.occurrence,
            "decision_expected": v.decision_expected if v else None,
            "decision_observed": v.decision_observed if v else None,
            "effects_expected": allowance_text(v.allowance) if v else None,
            "effects_observed": v.effects_observed if v else None,
            "final_status": self.final_status,
            "verdict": self.verdict,
            "clauses": clauses,
            "message": self.message,
            "replay": None,
            "replay_file": None,
        }


class Harness:
    """Runs windows and baselines for one adapter, spec and workload, with a pool of workers."""

    def __init__(self, address: str, spec: Spec, workload: Workload, *, pool: WorkerPool | None = None,
                 worker: str | None = None, timeout: float = 60.0, spare: int = 2, tmp_root: str | None = None) -> None:
        self.address = address
        self.spec = spec
        self.workload = workload
        self.timeout = timeout
        self._own_pool = pool is None
        self.pool = pool or WorkerPool(address, spec, spare=spare, worker=worker)
        self.tmp_root = tmp_root
        self.wl_doc = workload.to_dict()
        self.handshake: dict[str, Any] = {}
        self.kind = ""

    def close(self) -> None:
        if self._own_pool:
            self.pool.close()

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ helpers
    def _req(self, h: WorkerHandle, msg: dict[str, Any], what: str) -> dict[str, Any]:
        try:
            reply = h.request(msg, self.timeout)
        except (WorkerDied, WorkerTimeout) as exc:
            raise WindowError(f"{what}: {exc}") from None
        if reply.get("event") == "crash_point":
            raise WindowError(f"{what}: unexpected crash point {reply.get('point')} reached")
        if not reply.get("ok"):
            raise WindowError(f"{what}: {reply.get('error')}")
        return reply

    def _recv(self, h: WorkerHandle, what: str) -> dict[str, Any]:
        try:
            return h.recv(self.timeout)
        except (WorkerDied, WorkerTimeout) as exc:
            raise WindowError(f"{what}: {exc}") from None

    def worker(self) -> WorkerHandle:
        h = self.pool.get()
        if not self.handshake:
            self.handshake, self.kind = h.handshake, h.kind
        return h

    def lapse(self, source_system: str | None) -> float:
        lt = self.spec.lease_for(source_system)
        return lt.ttl + lt.grace

    def _dirs(self) -> tuple[str, str, str]:
        base = tempfile.mkdtemp(prefix="ledgercheck-crash-", dir=self.tmp_root)
        sink = os.path.join(base, "effects.db")
        EffectSink(sink, self.spec, create=True).close()
        return base, os.path.join(base, "ledger"), sink

    def _open(self, h: WorkerHandle, ledger: str, sink: str, now: float, session: str,
              ids: Mapping[str, str] | None = None) -> None:
        self._req(h, {"cmd": "open", "dir": ledger, "sink": sink, "workload": self.wl_doc, "ids": dict(ids or {}),
                      "now": now, "session": session}, "open the ledger")

    # ------------------------------------------------------------------ baseline
    def baseline(self) -> dict[str, Any]:
        """Run the workload once with no crash; returns point counts and the trace of contexts."""
        base, ledger, sink = self._dirs()
        h: WorkerHandle | None = None
        try:
            h = self.worker()
            self._open(h, ledger, sink, T0, "A")
            ids = self._req(h, {"cmd": "setup"}, "create the workload")["ids"]
            self._req(h, {"cmd": "arm", "point": None}, "reset the point counts")
            h.send({"cmd": "run", "trace": True})
            run = self._recv(h, "baseline run")
            if run.get("event") == "crash_point" or not run.get("ok"):
                raise ChaosError(f"the workload does not run without crashes: {run.get('error') or run}")
            final = self._req(h, {"cmd": "inspect", "events": True}, "inspect")
            obs = Observation(ids, None, final["items"], [], [], final["items"], final["items"], final["quarantined"],
                              EffectSink(sink, self.spec).applied_counts(), notes=run.get("notes") or [])
            verdict = check_window(self.spec, self.workload, "(no crash)", obs)
            self.pool.put(h)
        except WindowError as exc:
            if h is not None:
                h.kill()
            raise ChaosError(f"baseline run failed: {exc}") from None
        finally:
            shutil.rmtree(base, ignore_errors=True)
        if verdict.violations:
            raise ChaosError("the workload does not pass without crashes: " + "; ".join(map(str, verdict.violations[:3])))
        return {"counts": run.get("counts") or {}, "trace": run.get("trace") or []}

    # ------------------------------------------------------------------ one window
    def run_window(self, point: str, occurrence: int, mode: str = "kill",
                   recovery_kill: tuple[str, int] | None = None) -> WindowResult:
        """``recovery_kill`` = (adapter point, occurrence): the worker running the recovery scan is
        SIGKILLed there too (a kill inside the scan), and a third worker scans again."""
        started = time.monotonic()
        res = WindowResult(point, occurrence, mode, "error")
        res.recovery_kill = recovery_kill
        base, ledger, sink_path = self._dirs()
        a: WorkerHandle | None = None
        b: WorkerHandle | None = None
        try:
            a = self.worker()
            self._open(a, ledger, sink_path, T0, "A")
            ids = self._req(a, {"cmd": "setup"}, "create the workload")["ids"]
            self._req(a, {"cmd": "arm", "point": point, "occurrence": occurrence}, f"arm {point}")
            a.dirty = True
            a.send({"cmd": "run"})
            msg = self._recv(a, f"run to {point} #{occurrence}")
            if msg.get("event") != "crash_point":
                if msg.get("ok"):
                    a.retire()
                    a = None
                    raise NotReached(msg.get("counts") or {})
                raise WindowError(f"run to {point} #{occurrence}: {msg.get('error')}")
            if msg.get("point") != point:
                raise WindowError(f"armed {point} #{occurrence}, but the worker stopped at {msg.get('point')}")
            res.ctx = ctx = dict(msg.get("ctx") or {})
            crashed_key = ctx.get("item")
            if mode == "kill":
                a.kill()
                a = None
            else:
                a.suspend()
            item = self.workload.item(crashed_key) if crashed_key else None
            lapse = self.lapse(item.source_system) if item else max(self.lapse(s) for s in self.spec.source_systems)
            t1 = T0 + lapse + 1.0

            b = self.worker()
            self._open(b, ledger, sink_path, t1, "B", ids)
            pre = self._req(b, {"cmd": "inspect"}, "inspect before recovery")["items"]
            early = self._req(b, {"cmd": "recover", "now": t1 - 2.0}, "recover before the lapse")["victims"]
            if recovery_kill is not None:
                rp, rk = recovery_kill
                self._req(b, {"cmd": "arm", "point": rp, "occurrence": rk}, f"arm {rp} in the scan")
                b.dirty = True
                b.send({"cmd": "recover", "now": t1})
                mr = self._recv(b, f"recover to {rp} #{rk}")
                if mr.get("event") != "crash_point":
                    if mr.get("ok"):
                        raise NotReached({})
                    raise WindowError(f"recover to {rp} #{rk}: {mr.get('error')}")
                b.kill()
                b = self.worker()
                self._open(b, ledger, sink_path, t1, "C", ids)
            victims = self._req(b, {"cmd": "recover", "now": t1}, "recover")["victims"]
            post = self._req(b, {"cmd": "inspect"}, "inspect after recovery")["items"]
            stale_writes: list[dict[str, Any]] | None = None
            took_over = False
            notes: list[str] = []
            if mode == "pause":
                wid = ids.get(crashed_key) if crashed_key else None
                self._req(b, {"cmd": "arm", "point": fresh_point(self.spec), "occurrence": 1, "work_id": wid}, "arm takeover")
                b.send({"cmd": "run", "now": t1})
                mb = self._recv(b, "takeover run")
                took_over = mb.get("event") == "crash_point"
                assert a is not None
                a.resume()
                a.send({"cmd": "continue", "now": t1, "probe": True, "session": STALE_SESSION})
                ma = self._recv(a, "stale worker after SIGCONT")
                if not ma.get("ok"):
                    raise WindowError(f"stale worker after SIGCONT: {ma.get('error') or ma}")
                stale_writes = list(ma.get("stale_writes") or [])
                a.kill()
                a = None
                if took_over:
                    b.send({"cmd": "continue", "now": t1})
                    mb = self._recv(b, "finish after takeover")
                if not mb.get("ok"):
                    raise WindowError(f"finish after takeover: {mb.get('error') or mb}")
                notes = list(mb.get("notes") or [])
            else:
                notes = list(self._req(b, {"cmd": "run", "now": t1}, "finish the workload").get("notes") or [])
            final = self._req(b, {"cmd": "inspect", "events": True}, "inspect at the end")
            self.pool.put(b)
            b = None
            sink = EffectSink(sink_path, self.spec)
            try:
                applied = sink.applied_counts(exclude_sessions=(STALE_SESSION,))
                stale_applied = {k: n - applied.get(k, 0) for k, n in sink.applied_counts().items()
                                 if n != applied.get(k, 0)}
            finally:
                sink.close()
            obs = Observation(ids, msg, pre, early, victims, post, final["items"], final["quarantined"], applied,
                              stale_applied, stale_writes, took_over, notes, scan_killed=recovery_kill is not None)
            verdict = check_window(self.spec, self.workload, point, obs)
            res.verdict_detail = verdict
            res.verdict = "fail" if verdict.violations else "pass"
            if verdict.alt is not None and verdict.alt.crashed is not None and item is not None:
                res.step_class = item.steps[verdict.alt.crashed].step_class
            if item is not None:
                fw = (final["items"].get(item.key) or {}).get("work") or {}
                res.final_status = str(fw.get("status")) + (" (quarantined)" if fw.get("quarantined") else "")
            msgs = [str(v) for v in verdict.violations]
            if mode == "pause":
                n = len(stale_writes or [])
                refused = sum(1 for w in stale_writes or [] if not w.get("ok"))
                msgs.append(f"paused with SIGSTOP, taken over, let go with SIGCONT: {refused}/{n} stale writes refused")
            res.message = "; ".join(msgs) if msgs else None
        except WindowError as exc:
            res.verdict, res.message = "error", str(exc)
        finally:
            for h in (a, b):
                if h is not None:
                    h.kill()
            shutil.rmtree(base, ignore_errors=True)
        res.elapsed = time.monotonic() - started
        return res
