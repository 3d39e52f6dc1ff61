"""Exhaustive exploration: every crash point x every occurrence of it in a workload's run.

A run of the workload without any crash first counts how often the worker (and, for an
in-process adapter, the adapter) passes each point and records where it is each time; then
every (point, occurrence) is a window of its own, run with a real kill.  For an adapter behind
the wire protocol its own points cannot be counted from outside: ``explore`` runs their windows
1, 2, ... on every lane until the first occurrence the run does not reach, and ``crash run``
counts them by probing (the workload is run armed at occurrence k, no kill, no recovery, and the
adapter announces the point or finishes; a doubling then a bisection finds the last occurrence
it reaches).  Only reached occurrences are windows: an occurrence past the last one is never
reported (and never as a pass), and a counted occurrence a window does not reach is an error.  Windows where a second worker takes the
item over while the first is only paused (fencing) are added for every worker point and step
class where recovery requeues the item.

Every window is reported, passing or not; a window that does not pass leaves a replay file.
"""

from __future__ import annotations

import concurrent.futures
import shutil
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ledgercheck.chaos.safety.workload import Workload, WorkloadError, default_workload
from ledgercheck.spec import Spec, default_spec
from ledgercheck.spec.rules import crash_points_at

from .checker import alternatives, expected_decision
from .points import ChaosError, check_contract, unknown_points, worker_points
from .pool import WorkerPool
from .replays import attach_replay, default_replay_dir
from .scenario import T0, Harness, NotReached, WindowError, WindowResult

Progress = Callable[[int, int | None, dict[str, Any]], None]
# the workers read each item's event trail (a waiting step already taken, the fold of the end state)
REQUIRED_PROFILES = ("core", "trail", "lease", "idempotency", "recovery")
PROBE_CAP = 10_000  # occurrences tried at most for a point that cannot be counted
FENCE_SKIP = crash_points_at(default_spec(), "waiting")  # nothing is leased there, so nothing can be taken over


def check_adapter(handshake: Mapping[str, Any], address: str) -> None:
    """Refuse, with one line, an adapter the crash harness cannot drive."""
    profiles = set(handshake.get("profiles") or [])
    missing = [p for p in REQUIRED_PROFILES if p not in profiles]
    if missing:
        raise ChaosError(f"adapter {address}: crash testing needs profile(s) {', '.join(missing)}, "
                         f"the adapter claims {', '.join(sorted(profiles)) or 'none'}")
    caps = handshake.get("capabilities") or {}
    if caps.get("clock", "injected") != "injected":
        raise ChaosError(f"adapter {address}: crash testing moves the clock past lease expiry, which needs "
                         f"clock 'injected' (the adapter declares {caps.get('clock')!r})")
    if not caps.get("durable"):
        raise ChaosError(f"adapter {address}: crash testing needs state that survives a process kill "
                         "(capability durable: true, with reset config 'dir')")


class Explorer:
    """Shared set-up for explore/run/replay: pool, handshake checks, workload, baseline."""

    def __init__(self, address: str, spec: Spec, *, seed: int = 0, workload: Workload | Mapping[str, Any] | None = None,
                 worker: str | None = None, jobs: int = 1, timeout: float = 60.0, tmp_root: str | None = None,
                 pool: WorkerPool | None = None) -> None:
        problems = check_contract(spec)
        if problems:
            raise ChaosError(f"the contract does not fit the crash harness: {problems[0]}")
        self.address, self.spec, self.seed, self.worker = address, spec, seed, worker
        self.worker_points = frozenset(worker_points(spec))  # the contract's points the worker stops at
        self.jobs = max(1, jobs)
        if workload is not None and not isinstance(workload, Workload):
            try:
                workload = Workload.from_dict(workload, spec)
            except WorkloadError as exc:
                raise ChaosError(str(exc)) from None
        # a pool given by the caller (one for every point of a run: its workers are clean, never
        # armed, so handing them to the next point is no different from the next window) stays open
        self._own_pool = pool is None
        self.pool = pool if pool is not None else WorkerPool(address, spec, spare=self.jobs + 1, worker=worker)
        try:
            probe = self.pool.get()
            self.handshake, self.kind = probe.handshake, probe.kind
            self.pool.put(probe)
            check_adapter(self.handshake, address)
            waiting = "waiting" in (self.handshake.get("profiles") or [])
            self.workload = workload or default_workload(spec, seed, waiting=waiting)
            if not waiting and any(not s.is_effect for it in self.workload.items for s in it.steps):
                raise ChaosError(f"adapter {address}: the workload has waits, but the adapter does not claim the waiting profile")
            unknown = self.workload.classes() - set(spec.step_classes)
            if unknown:
                raise ChaosError(f"the workload uses step classes the contract does not define: {', '.join(sorted(unknown))}")
            self.harness = Harness(address, spec, self.workload, pool=self.pool, timeout=timeout, tmp_root=tmp_root)
        except BaseException:
            self.close()
            raise
        self.adapter_points = [p for p in self.handshake.get("crash_points") or [] if isinstance(p, str)]
        self._baseline: dict[str, Any] | None = None
        self._probed: dict[tuple[str, int], int] = {}
        self._probe_lock = threading.Lock()

    def close(self) -> None:
        if self._own_pool:
            self.pool.close()

    def __enter__(self) -> Explorer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def all_points(self) -> list[str]:
        return worker_points(self.spec) + [p for p in self.adapter_points if p not in self.worker_points]

    def check_points(self, points: list[str] | None) -> list[str]:
        if points is None:
            return self.all_points
        known = self.all_points
        for p in points:
            if p not in known:
                extra = f"; the worker has no place for {', '.join(unknown_points(self.spec))}" if unknown_points(self.spec) else ""
                raise ChaosError(f"unknown crash point {p!r}; this adapter and contract offer: {', '.join(known)}{extra}")
        return list(points)

    def baseline(self) -> dict[str, Any]:
        if self._baseline is None:
            self._baseline = self.harness.baseline()
        return self._baseline

    def counted(self, point: str) -> int | None:
        """How often the run passes ``point``; None when it cannot be counted from outside."""
        counts = self.baseline()["counts"]
        if point in self.worker_points or self.kind == "in-process":
            return int(counts.get(point, 0))
        return None

    def reaches(self, point: str, occurrence: int) -> bool:
        """Whether a run of the workload armed at ``point`` #``occurrence`` gets there (the
        worker announces it, the harness kills it: no recovery) or finishes without it."""
        h = self.harness
        base, ledger, sink = h._dirs()
        a = None
        try:
            a = h.worker()
            h._open(a, ledger, sink, T0, "A")
            h._req(a, {"cmd": "setup"}, "create the workload")
            h._req(a, {"cmd": "arm", "point": point, "occurrence": occurrence}, f"arm {point}")
            a.dirty = True
            a.send({"cmd": "run"})
            msg = h._recv(a, f"run to {point} #{occurrence}")
            if msg.get("event") == "crash_point":
                if msg.get("point") != point or msg.get("occurrence") not in (None, occurrence):
                    raise WindowError(f"armed {point} #{occurrence}, but the run stopped at {msg.get('point')} "
                                      f"#{msg.get('occurrence')}")
                return True
            if msg.get("ok"):
                a.retire()
                a = None
                return False
            raise WindowError(f"run to {point} #{occurrence}: {msg.get('error')}")
        except WindowError as exc:
            raise ChaosError(f"cannot count the passes through {point}: {exc}") from None
        finally:
            if a is not None:
                a.kill()
            shutil.rmtree(base, ignore_errors=True)

    def occurrences(self, point: str, cap: int = PROBE_CAP) -> int:
        """How often the run passes ``point``: counted by the baseline, or (an adapter's own
        point behind the wire protocol) probed, up to ``cap``."""
        n = self.counted(point)
        if n is not None:
            return n
        with self._probe_lock:
            if (point, cap) in self._probed:
                return self._probed[point, cap]
        if not self.reaches(point, 1):
            n = 0
        else:
            lo, hi = 1, 2  # lo is reached; hi is not known yet
            while hi <= cap and self.reaches(point, hi):
                lo, hi = hi, hi * 2
            if hi > cap:
                n = lo if cap <= lo else cap if self.reaches(point, cap) else self._bisect(point, lo, cap)
            else:
                n = self._bisect(point, lo, hi)
        with self._probe_lock:
            self._probed[point, cap] = n
        return n

    def _bisect(self, point: str, lo: int, hi: int) -> int:
        """The last occurrence reached, knowing ``lo`` is reached and ``hi`` is not."""
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.reaches(point, mid):
                lo = mid
            else:
                hi = mid
        return lo

    def not_reached(self, point: str, occurrence: int) -> str:
        """Why ``crash run`` cannot stop at ``point`` #``occurrence``, with the real count."""
        counted = self.counted(point) is not None
        n = self.occurrences(point)
        how = "the run without crashes passes it" if counted else \
            "the adapter announces it (counted by arming it, the worker cannot count an adapter's own points over the wire)"
        return (f"{point} #{occurrence} is not reached by this workload: {how} {n} time(s)"
                + (f"; try --occurrence 1 to {n}" if n else ""))

    def expected_ctx(self, point: str, occurrence: int) -> Mapping[str, Any] | None:
        for t in self.baseline()["trace"]:
            if t["point"] == point and t["occurrence"] == occurrence:
                return t["ctx"]
        return None

    # ------------------------------------------------------------------ windows
    def window(self, point: str, occurrence: int, mode: str = "kill") -> WindowResult:
        res = self.harness.run_window(point, occurrence, mode)
        want = self.expected_ctx(point, occurrence) if self._baseline is not None else None
        if want is not None and res.ctx and res.verdict != "error":
            fields = ("item", "step", "stage", "op")
            if any(want.get(f) != res.ctx.get(f) for f in fields):
                res.verdict = "error"
                res.message = (f"the run is not deterministic: the baseline passed {point} #{occurrence} at "
                               f"{_where(want)}, this run stopped at {_where(res.ctx)}")
        return res

    def scan_kill_windows(self) -> list[tuple[str, int]]:
        """One kill window per recovery decision that acts (requeue or quarantine): the windows
        whose scan is then killed at each of the adapter's own points inside ``recover``."""
        out, seen = [], set()
        for t in self.baseline()["trace"]:
            p, ctx = t["point"], t["ctx"]
            if p not in self.worker_points or not ctx.get("item"):
                continue
            item = self.workload.item(ctx["item"])
            d, _ = expected_decision(self.spec, item, alternatives(self.spec, item, ctx)[0], 1)
            if d != "none" and d not in seen:
                seen.add(d)
                out.append((p, t["occurrence"]))
        return out

    def fence_occurrences(self, points: list[str]) -> list[tuple[str, int]]:
        """One takeover window per (worker point, step class) where recovery requeues the item."""
        out, seen = [], set()
        for t in self.baseline()["trace"]:
            p, ctx = t["point"], t["ctx"]
            if p not in points or p not in self.worker_points or p in FENCE_SKIP or not ctx.get("item"):
                continue
            item = self.workload.item(ctx["item"])
            alt = alternatives(self.spec, item, ctx)[0]
            d, _ = expected_decision(self.spec, item, alt, 1)
            if not self.spec.decisions.get(d, {}).get("requeue"):
                continue
            cls_ = item.steps[alt.crashed].step_class if alt.crashed is not None else None
            if (p, cls_) not in seen:
                seen.add((p, cls_))
                out.append((p, t["occurrence"]))
        return out


def _where(ctx: Mapping[str, Any]) -> str:
    return f"{ctx.get('item')} step {ctx.get('step')} ({ctx.get('stage')}, in {ctx.get('op') or 'no operation'})"


def explore(address: str, spec: Spec, *, seed: int = 0, points: list[str] | None = None,
            workload: Workload | Mapping[str, Any] | None = None,
            max_occurrence: int | None = None, replay_dir: str | None = None, progress: Progress | None = None,
            jobs: int = 1, fencing: bool = True, worker: str | None = None, timeout: float = 60.0,
            tmp_root: str | None = None, scan_kills: bool = True, pool: WorkerPool | None = None) -> list[dict[str, Any]]:
    """Run every crash window of a workload against an adapter; see docs/chaos.md.

    With ``scan_kills`` the worker running the recovery scan is killed too, at every occurrence of
    the adapter's own points inside ``recover``, for one window per recovery decision.  ``pool``:
    workers for ``address`` and ``spec`` shared with other explorations (left open: its owner
    closes it; certify keeps one for all its crash points), instead of a pool of this
    exploration's own."""
    replay_dir = replay_dir or default_replay_dir()
    with Explorer(address, spec, seed=seed, workload=workload, worker=worker, jobs=jobs, timeout=timeout,
                  tmp_root=tmp_root, pool=pool) as ex:
        pts = ex.check_points(points)
        ex.baseline()
        fixed: list[tuple[str, int, str]] = []
        probes: list[str] = []
        for p in pts:
            n = ex.counted(p)
            if n is None:  # an adapter's own point over the wire: counted by probing, in its lane
                probes.append(p)
                continue
            top = n if max_occurrence is None else min(n, max_occurrence)
            fixed += [(p, k, "kill") for k in range(1, top + 1)]
        caps = ex.handshake.get("capabilities") or {}
        if fencing and caps.get("concurrent"):
            fixed += [(p, k, "pause") for p, k in ex.fence_occurrences(pts)
                      if max_occurrence is None or k <= max_occurrence]
        results: list[tuple[tuple[int, int, int], dict[str, Any]]] = []
        lock = threading.Lock()
        total: int | None = len(fixed) if not probes else None
        order = {p: i for i, p in enumerate(pts)}

        def record(point: str, occ: int, mode: str, res: WindowResult, scan_kill: tuple[str, int] | None = None,
                   shown: bool = False) -> None:
            d = res.as_dict()
            if d["verdict"] != "pass":
                attach_replay(d, replay_dir, spec=spec, address=address, seed=seed, workload=ex.workload,
                              point=point, occurrence=occ, mode=mode, worker=worker, scan_kill=scan_kill)
            rank = 2 if scan_kill else 0 if mode == "kill" else 1
            with lock:
                results.append(((rank, order.get(scan_kill[0] if scan_kill else point, len(order)), point, occ,
                                 *(scan_kill or ("", 0))), d))
                done = len(results)
            if progress is not None and not shown:  # (a point's lanes show each window as it ends)
                progress(done, total, d)

        def one(task: tuple[str, int, str], why: str = "the run without crashes passed it") -> WindowResult:
            p, k, mode = task
            try:
                res = ex.window(p, k, mode)
            except NotReached:
                # a counted occurrence the window did not get to: never a pass
                res = WindowResult(p, k, mode, "error", message=f"{p} #{k} was not reached, though {why}")
            record(p, k, mode, res)
            return res

        cap = max_occurrence or PROBE_CAP

        def scan_chain(rp: str, base: tuple[str, int]) -> None:
            # a kill inside the recovery scan, at each occurrence of the adapter's point the scan
            # passes (the first one it does not reach ends the chain: never a window)
            for k in range(1, cap + 1):
                try:
                    res = ex.harness.run_window(base[0], base[1], "kill", recovery_kill=(rp, k))
                except NotReached:
                    return
                record(base[0], base[1], "kill", res, (rp, k))
                if res.verdict == "error":
                    return

        class Chain:
            """The windows of one of the adapter's own points over the wire, occurrence 1, 2, ...
            on every lane until the first one the run does not reach (or three errors in a row):
            each occurrence is a window of its own, so nothing is spent on counting apart, and
            the windows come out the same however the lanes shared them (a window past the end
            that one lane ran while another found the end is dropped; one reached past an
            occurrence that was not is reported: the run is not deterministic)."""

            def __init__(self, point: str) -> None:
                self.point = point
                self.lock = threading.Lock()
                self.next = 1
                self.end = cap + 1  # the first occurrence not to run
                self.missed: int | None = None  # the first occurrence found not reached
                self.done: dict[int, WindowResult] = {}

            def lane(self) -> None:
                while True:
                    with self.lock:
                        k = self.next
                        if k >= self.end:
                            return
                        self.next += 1
                    try:
                        res: WindowResult | None = ex.window(self.point, k, "kill")
                    except NotReached:
                        res = None
                    with self.lock:
                        if res is None:
                            self.missed = k if self.missed is None else min(self.missed, k)
                            self.end = min(self.end, k)
                            continue
                        self.done[k] = res
                        # three errors in a row end the point (an adapter that broke or hangs)
                        run = 0
                        for j in range(1, self.end):
                            r = self.done.get(j)
                            if r is None:
                                break
                            run = run + 1 if r.verdict == "error" else 0
                            if run >= 3:
                                self.end = min(self.end, j + 1)
                                break
                    if progress is not None:
                        progress(len(results) + len(self.done), total, res.as_dict())

            def finish(self) -> None:
                for k in range(1, self.end):
                    record(self.point, k, "kill", self.done[k], shown=True)
                later = sorted(k for k in self.done if k > (self.missed or self.end))
                if self.missed is not None and later:
                    record(self.point, self.missed, "kill", WindowResult(
                        self.point, self.missed, "kill", "error",
                        message=f"{self.point} #{self.missed} was not reached, though #{later[-1]} was: "
                                "the run is not deterministic"))

        tp = concurrent.futures.ThreadPoolExecutor(max_workers=ex.jobs)
        try:
            chains = [Chain(p) for p in probes]
            # the scan-kill chains first: each runs one window after another, while the lanes of
            # a point's windows and the fixed windows fill in beside them
            futs = [tp.submit(scan_chain, rp, base) for rp in pts if scan_kills and rp in ex.adapter_points
                    and rp not in ex.worker_points for base in ex.scan_kill_windows()]
            futs += [tp.submit(c.lane) for c in chains for _ in range(ex.jobs)] + [tp.submit(one, t) for t in fixed]
            for f in futs:
                f.result()
            for c in chains:
                c.finish()
        except BaseException:
            # an interrupt (or a failure) in this thread: drop the windows not started and kill
            # the workers of those running, so the lanes end now instead of finishing the point
            tp.shutdown(wait=False, cancel_futures=True)
            ex.pool.abort("the crash-window exploration was stopped")
            raise
        finally:
            tp.shutdown(wait=True)
        results.sort(key=lambda r: r[0])
        return [d for _, d in results]


def run_one(address: str, spec: Spec, point: str, occurrence: int = 1, *, seed: int = 0, mode: str = "kill",
            workload: Workload | None = None, replay_dir: str | None = None, worker: str | None = None,
            timeout: float = 60.0, tmp_root: str | None = None, save: bool = True,
            scan_kill: tuple[str, int] | None = None) -> dict[str, Any]:
    """Run a single window (the ``crash run`` command); ``scan_kill`` = (adapter point, occurrence)
    kills the recovery scan's worker there too."""
    if mode not in ("kill", "pause"):
        raise ChaosError(f"mode must be kill or pause, not {mode!r}")
    with Explorer(address, spec, seed=seed, workload=workload, worker=worker, timeout=timeout, tmp_root=tmp_root) as ex:
        ex.check_points([point])
        if mode == "pause" and point not in ex.worker_points:
            raise ChaosError(f"a takeover (pause) window needs a worker point, not the adapter's {point!r}")
        if mode == "pause" and not (ex.handshake.get("capabilities") or {}).get("concurrent"):
            raise ChaosError(f"adapter {address}: a takeover window needs two processes on one ledger (concurrent: true)")
        if occurrence < 1:
            raise ChaosError(f"--occurrence must be 1 or more, not {occurrence}")
        if scan_kill is not None:
            ex.check_points([scan_kill[0]])
            if scan_kill[0] in ex.worker_points or mode != "kill":
                raise ChaosError(f"a scan kill needs the adapter's own point and mode kill, not {scan_kill[0]!r} ({mode})")
        try:
            res = ex.harness.run_window(point, occurrence, mode, recovery_kill=scan_kill)
        except NotReached:
            if scan_kill is not None:
                raise ChaosError(f"the recovery scan never reached {scan_kill[0]} #{scan_kill[1]}") from None
            raise ChaosError(ex.not_reached(point, occurrence)) from None
        d = res.as_dict()
        if d["verdict"] != "pass" and save:
            attach_replay(d, replay_dir or default_replay_dir(), spec=spec, address=address, seed=seed,
                          workload=ex.workload, point=point, occurrence=occurrence, mode=mode, worker=worker,
                          scan_kill=scan_kill)
        return d
