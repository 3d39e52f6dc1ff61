"""Time faults per process, with libfaketime: skew a worker's clock, bump it, strobe it, run it fast.

Every real library keeps its own clock, and lease and visibility bugs live there.  libfaketime (the
Debian packages ``faketime`` and ``libfaketime``) is a shared library loaded with ``LD_PRELOAD``
that answers a process's ``clock_gettime``/``gettimeofday``/``time`` (the monotonic clock
included) and scales its sleeps and timed waits.  Pointed at a *clock file*
(``FAKETIME_TIMESTAMP_FILE``) and told not to cache it (``FAKETIME_NO_CACHE=1``), it re-reads the
file on every call, so rewriting the file moves the running process's time at once:

``+12.5``        12.5 s ahead of real time (``-3`` behind)
``+12.5 x10``    ... and running ten times as fast, counted from the process's start

Because the library is loaded when a program is *executed*, only a process started after the
environment was set is faked: a forked child keeps its parent's clock.  So the campaign's
clock-faulted workers run their adapter as an exec'd process (``exec:`` addresses as they are; a
``python:`` or installed adapter is served through ``ledgercheck serve`` in a subprocess), each
with its own clock file, and the harness's own processes keep the real clock: what the history
records (``t``, and the ``now`` each call was given) never comes from a faked clock, so the
checker judges leases against the ledger's time (the injected clock, or the wall clock of the
machine the database runs on), never the skewed worker's.

The reusable part, for anything that needs a process on another clock (a database server run
fast so that an hour-long sweep passes in seconds)::

    with FakeClock(offset=0.0, rate=60) as clock:       # a clock file of its own
        proc = clock.popen(["postgres", ...])           # or subprocess.Popen(argv, env=clock.env())
        clock.set(offset=3600)                          # one hour ahead, from now on
    argv, env = faked_command(["redis-server"], clock_file=path)   # without the context manager

The fault kinds (chaos/safety/nemesis.py's ``CLOCK_FAULTS``; none is in the default set):

``skew``    a constant offset (ahead or behind, 1.5 to 4 times the lease's lapse) held for 2 to 4
            lapses, then back to the real clock
``bump``    a jump of 2 to 6 lapses (forward, or backward), held 1 to 2 lapses, then the jump back
``strobe``  4 to 8 flips between the real clock and an offset of 1 to 3 lapses (either sign), each
            held 0.05 to 0.2 of a lapse
``fast``    the clock runs 5, 10 or 20 times as fast for 2 to 4 lapses (from where it stood: the
            offset is adjusted so the clock does not jump), then at the normal rate again, keeping
            the time it gained until the nemesis phase ends

Each is drawn from ``random.Random(f"clock/{seed}/{at}/{pick}")`` (a seed names the same faults
with the same parameters) and recorded in the history as ``nemesis`` records naming the worker:
the fault's name with its parameters when it starts, ``clock_step`` for each change of its clock
after that, ``clock_end`` when the worker's clock is real again (at the end of the fault, or when
the nemesis phase ends).  :func:`skewed_workers` reads a history back and says what each
clock-faulted worker did, judged by the ledger's own time.
"""

from __future__ import annotations

import math
import os
import random
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ledgercheck.chaos.crash.points import ChaosError

from .nemesis import CLOCK_FAULTS  # the fault names live in the nemesis table

STEP, END = "clock_step", "clock_end"  # the records after a clock fault's first: a change of its clock, its end
FAST_RATES = (5, 10, 20)
LIB_NAMES = ("libfaketime.so.1",)
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu/faketime", "/usr/lib/aarch64-linux-gnu/faketime", "/usr/lib/faketime",
            "/usr/local/lib/faketime", "/usr/lib64/faketime")


# ------------------------------------------------------------------------------ libfaketime
def libfaketime() -> str | None:
    """The path of libfaketime's shared library (``$LEDGERCHECK_LIBFAKETIME`` first), or None."""
    env = os.environ.get("LEDGERCHECK_LIBFAKETIME")
    if env:
        return env if os.path.isfile(env) else None
    for d in LIB_DIRS:
        for n in LIB_NAMES:
            p = os.path.join(d, n)
            if os.path.isfile(p):
                return p
    return None


def require_libfaketime() -> str:
    lib = libfaketime()
    if lib is None:
        raise ChaosError("clock faults need libfaketime (Debian packages faketime and libfaketime: "
                         "sh scripts/install-test-deps.sh), or LEDGERCHECK_LIBFAKETIME naming libfaketime.so.1")
    return lib


def clock_spec(offset: float = 0.0, rate: float = 1.0) -> str:
    """The clock file's text for an offset (seconds) and a rate."""
    if not (math.isfinite(offset) and math.isfinite(rate)) or rate <= 0:
        raise ValueError(f"a clock needs a finite offset and a positive rate, not {offset!r} x{rate!r}")
    text = f"{offset:+.6f}"
    return text if rate == 1 else f"{text} x{rate:g}"


def write_clock(path: str, offset: float = 0.0, rate: float = 1.0) -> None:
    """Set the clock file at ``path`` (atomically: a reader never sees it half written)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(clock_spec(offset, rate) + "\n")
    os.chmod(tmp, 0o644)  # a server run under another account reads it too
    os.replace(tmp, path)


def faketime_env(clock_file: str, base: Mapping[str, str] | None = None, *, lib: str | None = None) -> dict[str, str]:
    """The environment for a program whose clock ``clock_file`` decides: ``base`` (default: this
    process's) with libfaketime preloaded and told to read the file on every call.  The monotonic
    clock is faked too: with it left real, libfaketime 0.9.10 makes every ``sleep`` fail (EINVAL)."""
    env = dict(os.environ if base is None else base)
    lib = lib or require_libfaketime()
    pre = [p for p in env.get("LD_PRELOAD", "").split() if p and "libfaketime" not in p]
    env["LD_PRELOAD"] = " ".join([lib, *pre])
    env["FAKETIME_TIMESTAMP_FILE"] = os.path.abspath(clock_file)
    env["FAKETIME_NO_CACHE"] = "1"
    env.pop("FAKETIME", None)  # would win over the file
    env.pop("FAKETIME_DONT_FAKE_MONOTONIC", None)
    return env


def faked_command(argv: Sequence[str], *, offset: float = 0.0, rate: float = 1.0, clock_file: str | None = None,
                  env: Mapping[str, str] | None = None) -> tuple[list[str], dict[str, str], str]:
    """``argv`` to run under a fake clock: (argv, env, clock file).  The clock file is made (in a
    new temporary directory) when not given, and set to ``offset``/``rate``; rewrite it with
    :func:`write_clock` to move the process's time while it runs."""
    if clock_file is None:
        clock_file = os.path.join(tempfile.mkdtemp(prefix="ledgercheck-clock-"), "clock")
        os.chmod(os.path.dirname(clock_file), 0o755)
    write_clock(clock_file, offset, rate)
    return list(argv), faketime_env(clock_file, env), clock_file


def process_start(pid: int) -> float:
    """When ``pid`` started, in ``time.time()`` seconds (from /proc: to about 10 ms)."""
    with open(f"/proc/{pid}/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        up = float(f.read().split()[0])
    return time.time() - (up - ticks / os.sysconf("SC_CLK_TCK"))


class FakeClock:
    """One clock file and the processes started on it.  ``set()`` moves their time; ``fast()``
    changes the rate without a jump (for processes whose start it knows: those it started, or
    ``since``).  A context manager: on exit the processes it started are killed and the file
    removed."""

    def __init__(self, offset: float = 0.0, rate: float = 1.0, clock_file: str | None = None) -> None:
        self.owned_dir = None
        if clock_file is None:
            self.owned_dir = tempfile.mkdtemp(prefix="ledgercheck-clock-")
            os.chmod(self.owned_dir, 0o755)
            clock_file = os.path.join(self.owned_dir, "clock")
        self.path = clock_file
        self.offset, self.rate = float(offset), float(rate)
        self.procs: list[subprocess.Popen[Any]] = []
        write_clock(self.path, self.offset, self.rate)

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        return faketime_env(self.path, base)

    def set(self, offset: float | None = None, rate: float | None = None) -> None:
        """Set the offset and/or rate as written (a rate counts from each process's start)."""
        self.offset = self.offset if offset is None else float(offset)
        self.rate = self.rate if rate is None else float(rate)
        write_clock(self.path, self.offset, self.rate)

    def fast(self, rate: float, started: float, gained: float = 0.0) -> None:
        """From now on run ``rate`` times as fast, from the time the process (started at
        ``started``, time.time()) shows now, plus ``gained``: libfaketime counts a rate from the
        process's start, so the offset takes that back."""
        now = time.time()
        self.set(offset=gained - (rate - 1) * (now - started), rate=rate)

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        env = kwargs.pop("env", None)
        proc = subprocess.Popen(list(argv), env=self.env(env), **kwargs)
        self.procs.append(proc)
        return proc

    def run(self, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        env = kwargs.pop("env", None)
        return subprocess.run(list(argv), env=self.env(env), **kwargs)

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.procs.clear()
        if self.owned_dir is not None:
            import shutil

            shutil.rmtree(self.owned_dir, ignore_errors=True)

    def __enter__(self) -> FakeClock:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def postgres_on_clock(clock: FakeClock | str, **kwargs: Any) -> Any:
    """A PostgreSQL server (``transport.pgserver.PostgresServer``, not started; use it as a context
    manager) whose processes run on ``clock`` (a :class:`FakeClock` or a clock file): set its
    rate to run the server fast, so that the database's own time (``now()``,
    ``clock_timestamp()``, its timers) passes N times as fast as the real one.  The clock file
    must be readable by the server's account (FakeClock's is)."""
    from ledgercheck.services.postgres import PostgresServer, PostgresUnavailable

    path = clock.path if isinstance(clock, FakeClock) else str(clock)

    class _OnClock(PostgresServer):
        def _run(self, argv: list[str], *, timeout: float, check: bool = True) -> subprocess.CompletedProcess[str]:
            assert self.bindir is not None
            env = faketime_env(path, {k: v for k, v in os.environ.items() if not k.startswith("PG")})
            env["LC_ALL"] = "C"
            extra: dict[str, Any] = {}
            if self._account is not None:
                extra.update(user=self._account.pw_uid, group=self._account.pw_gid, extra_groups=[])
                env["HOME"] = str(self.root)
            proc = subprocess.run([str(self.bindir / argv[0]), *argv[1:]], capture_output=True, text=True,
                                  timeout=timeout, env=env, cwd=str(self.root), start_new_session=True, **extra)
            if check and proc.returncode != 0:
                raise PostgresUnavailable(f"{argv[0]} failed (exit {proc.returncode}): "
                                          f"{(proc.stderr or proc.stdout).strip()[-800:]}")
            return proc

    return _OnClock(**kwargs)


# ------------------------------------------------------------------------------ fault plans
@dataclass
class ClockPlan:
    """One clock fault drawn: its steps, (seconds after it starts, offset, rate) each, and its end."""

    kind: str
    params: dict[str, Any]
    steps: list[tuple[float, float, float]]  # the first at 0
    end: float  # seconds after the start: the worker's clock is real again


def draw(kind: str, seed: int, at: float, pick: float, lapse: float) -> ClockPlan:
    """The parameters of one clock fault, from the seed and the fault's draws; ``lapse`` is the real
    seconds a lease takes to lapse (ttl + grace) in this campaign."""
    if kind not in CLOCK_FAULTS:
        raise ChaosError(f"unknown clock fault {kind!r}: one of {', '.join(CLOCK_FAULTS)}")
    rng = random.Random(f"clock/{seed}/{at}/{pick}")
    sign = 1.0 if rng.random() < 0.5 else -1.0
    r3 = lambda x: round(x, 3)  # noqa: E731
    if kind == "skew":
        off, hold = r3(sign * rng.uniform(1.5, 4.0) * lapse), r3(rng.uniform(2.0, 4.0) * lapse)
        return ClockPlan(kind, {"offset": off, "hold": hold}, [(0.0, off, 1.0)], hold)
    if kind == "bump":
        off, hold = r3(sign * rng.uniform(2.0, 6.0) * lapse), r3(rng.uniform(1.0, 2.0) * lapse)
        return ClockPlan(kind, {"offset": off, "hold": hold}, [(0.0, off, 1.0)], hold)
    if kind == "strobe":
        off, flips = r3(sign * rng.uniform(1.0, 3.0) * lapse), rng.randint(4, 8)
        steps, t = [], 0.0
        for i in range(flips):
            steps.append((r3(t), off if i % 2 == 0 else 0.0, 1.0))
            t += rng.uniform(0.05, 0.2) * lapse
        return ClockPlan(kind, {"offset": off, "flips": flips, "every": r3(t / flips)}, steps, r3(t))
    rate, hold = float(rng.choice(FAST_RATES)), r3(rng.uniform(2.0, 4.0) * lapse)
    return ClockPlan(kind, {"rate": rate, "hold": hold}, [(0.0, 0.0, rate)], hold)


# ------------------------------------------------------------------------------ in a campaign
def serving_address(address: str) -> str:
    """An address whose adapter runs in an exec'd process (libfaketime is loaded at exec): an
    ``exec:`` address as it is, anything else served by ``ledgercheck serve`` in a subprocess."""
    if address.startswith("exec:"):
        return address
    return f"exec:{shlex.quote(sys.executable)} -m ledgercheck serve {shlex.quote(address)}"


def enter(cfg: Mapping[str, Any]) -> None:
    """In a campaign process, before its adapter starts: put the clock's environment in place, so
    the adapter process it executes reads its time from the worker's clock file."""
    env = cfg.get("clock_env")
    if env:
        os.environ.update(env)


@dataclass
class _Running:
    worker: str
    slot: int
    plan: ClockPlan
    started: float  # monotonic
    next_step: int = 1
    rate_since: float = 0.0  # time.time() a fast rate began


@dataclass
class _Clock:
    path: str
    worker: str
    pid: int = 0  # the worker's process (its adapter is below it)
    offset: float = 0.0  # what the clock shows over real time (the gain of a fast fault included)
    rate: float = 1.0


@dataclass
class CampaignClocks:
    """The clock faults of one safety campaign (chaos/safety/campaign.py calls it): a clock file per worker
    slot, the faults in progress, and their records."""

    directory: str
    seed: int
    lapse: float
    record: Any  # (fault, process, point) -> None
    lib: str = ""
    clocks: dict[int, _Clock] = field(default_factory=dict)
    running: dict[int, _Running] = field(default_factory=dict)

    @classmethod
    def for_campaign(cls, faults: Iterable[str], work: str, seed: int, lapse: float, durable: bool,
                     record: Any) -> CampaignClocks | None:
        if not any(f in CLOCK_FAULTS for f in faults):
            return None
        lib = require_libfaketime()
        if not durable:
            raise ChaosError("clock faults need one process per worker (a durable adapter): a worker's clock is "
                             "its process's")
        d = os.path.join(work, "clocks")
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o755)
        return cls(d, seed, lapse, record, lib)

    def spawned(self, cfg: dict[str, Any], slot: int, worker: str, pid: int) -> None:
        """A worker process ``pid`` is about to start in ``slot``: its clock file, real to begin with,
        and its adapter in a process of its own (libfaketime is loaded at exec)."""
        path = os.path.join(self.directory, f"clock.{slot}")
        write_clock(path)
        self.clocks[slot] = _Clock(path, worker, pid)
        cfg["clock_env"] = faketime_env(path, {}, lib=self.lib)
        cfg["address"] = serving_address(str(cfg["address"]))

    def strike(self, f: Any, holders: Sequence[Any], cands: Sequence[Any], may_wait: bool, may_wait_long: bool,
               notes: list[str]) -> bool:
        """Do the clock fault ``f`` (a nemesis.Fault) to one of the campaign's workers (``_Proc``s:
        ``holders`` hold work, ``cands`` may be hit): a holder whose clock is not already off,
        else (when it may not wait for one) any such worker.  False: wait for one."""
        free = [p for p in cands if p.slot in self.clocks and p.slot not in self.running]
        held = [p for p in holders if p in free]
        if not held and may_wait:
            return False
        pool = held or free
        if not pool:
            if may_wait_long:
                return False
            notes.append(f"{f.fault} at {f.at:g}s skipped: no worker whose clock is not off already")
            return True
        victim = pool[min(len(pool) - 1, int(f.pick * len(pool)))]
        self.fault(f.fault, f.at, f.pick, victim.slot, victim.name)
        return True

    def fault(self, kind: str, at: float, pick: float, slot: int, worker: str) -> None:
        plan = draw(kind, self.seed, at, pick, self.lapse)
        run = _Running(worker, slot, plan, time.monotonic())
        self.running[slot] = run
        self._apply(run, plan.steps[0])
        self.record(kind, worker, {**plan.params, "clock": self._shown(slot)})

    def next_due(self) -> float | None:
        dues = [self._due(r) for r in self.running.values()]
        return min(dues) if dues else None

    def due(self, now: float) -> None:
        for run in list(self.running.values()):
            while run.slot in self.running and self._due(run) <= now:
                if run.next_step < len(run.plan.steps):
                    self._apply(run, run.plan.steps[run.next_step])
                    run.next_step += 1
                    self.record(STEP, run.worker, {"of": run.plan.kind, "clock": self._shown(run.slot)})
                else:
                    self._end(run, "ended")

    def end_all(self, why: str = "the nemesis phase ended") -> None:
        """Every faulted clock back to real time (a fast fault's gain taken back too)."""
        for run in list(self.running.values()):
            self._end(run, why)
        for c in self.clocks.values():
            if c.offset or c.rate != 1:  # a fast fault's gain
                c.offset, c.rate = 0.0, 1.0
                write_clock(c.path)
                self.record(END, c.worker, {"of": "fast", "why": why})

    def _due(self, run: _Running) -> float:
        steps = run.plan.steps
        return run.started + (steps[run.next_step][0] if run.next_step < len(steps) else run.plan.end)

    def _apply(self, run: _Running, step: tuple[float, float, float]) -> None:
        c = self.clocks[run.slot]
        _, off, rate = step
        if run.plan.kind == "fast":
            started = self._adapter_start(c)
            run.rate_since = time.time()
            c.rate = rate
            write_clock(c.path, c.offset - (rate - 1) * (run.rate_since - started), rate)
            return
        c.offset, c.rate = off, 1.0
        write_clock(c.path, off)

    def _end(self, run: _Running, why: str) -> None:
        c = self.clocks[run.slot]
        self.running.pop(run.slot, None)
        if run.plan.kind == "fast" and why == "ended":  # back to the normal rate, keeping what it gained
            c.offset += (c.rate - 1) * (time.time() - run.rate_since)
            c.rate = 1.0
            write_clock(c.path, c.offset)
            self.record(STEP, run.worker, {"of": "fast", "clock": self._shown(run.slot), "why": "rate back to 1"})
            return
        c.offset, c.rate = 0.0, 1.0
        write_clock(c.path)
        self.record(END, run.worker, {"of": run.plan.kind, "why": why})

    def _shown(self, slot: int) -> dict[str, float]:
        c = self.clocks[slot]
        return {"offset": round(c.offset, 3), "rate": c.rate}

    def _adapter_start(self, c: _Clock) -> float:
        """When the worker's adapter process (the faked one, below the worker) started."""
        from ledgercheck.services.reaper import descendants

        for pid in descendants(c.pid) if c.pid else []:
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if b"FAKETIME_TIMESTAMP_FILE=" + c.path.encode() in f.read():
                        return process_start(pid)
            except OSError:
                continue
        return time.time()  # not found (gone): the rate counts from now, near enough


# ------------------------------------------------------------------------------ what skewed workers did
def skewed_workers(records: Iterable[Mapping[str, Any]], grace: float | None = None) -> list[dict[str, Any]]:
    """What each clock-faulted worker did while its clock was off, judged by the ledger's time (the
    ``now`` the history recorded, never a faked clock): per fault, the writes it made with a lease
    token and their outcomes, how many of those came after its lease had lapsed by the ledger's time
    (the ledger must refuse them), how many it had refused while its lease was still live by the
    ledger's time (its ledger believed the lease lost early), and the claims it was granted.

    ``records``: a history's records as dicts (its JSON lines)."""
    recs = list(records)
    meta = next((r for r in recs if r.get("type") == "meta"), {})
    if grace is None:
        grace = float((meta.get("timings") or {}).get("grace") or 0.0)
    windows: dict[str, list[dict[str, Any]]] = {}
    for r in recs:
        if r.get("type") != "nemesis" or not r.get("process"):
            continue
        f, p = r.get("fault"), str(r.get("process"))
        if f in CLOCK_FAULTS:
            if windows.get(p) and windows[p][-1]["to"] is None:  # a fault on a clock still off (a fast one's gain)
                windows[p][-1]["to"] = r.get("t")
            windows.setdefault(p, []).append({"worker": p, "fault": f, "params": r.get("point"), "from": r.get("t"),
                                              "to": None})
        elif f == END and windows.get(p) and windows[p][-1]["to"] is None:
            windows[p][-1]["to"] = r.get("t")
    if not windows:
        return []
    invokes: dict[Any, Mapping[str, Any]] = {}
    lease: dict[str, dict[str, float]] = {}  # process -> work_id -> lease expiry (ledger time)
    out = sorted((w for ws in windows.values() for w in ws), key=lambda w: w["from"])
    for w in out:
        w.update(writes=0, ok=0, refused=0, indefinite=0, ok_after_lapse=0, refused_while_live=0,
                 refused_after_lapse=0, claims=0)
    for r in recs:
        typ = r.get("type")
        if typ == "invoke":
            invokes[r.get("id")] = r
            continue
        if typ != "complete":
            continue
        inv = invokes.get(r.get("id"))
        if inv is None:
            continue
        p = str(inv.get("process"))
        args = inv.get("args") or {}
        res = r.get("result")
        if r.get("outcome") == "ok" and isinstance(res, Mapping) and res.get("owner") == p \
                and isinstance(res.get("lease_expires_at"), int | float):
            lease.setdefault(p, {})[str(res.get("work_id"))] = float(res["lease_expires_at"])
        if p not in windows:
            continue
        t = inv.get("t")
        w = next((w for w in windows[p] if w["from"] <= t and (w["to"] is None or t <= w["to"])), None)
        if w is None:
            continue
        if inv.get("op") == "claim" and r.get("outcome") == "ok" and isinstance(res, Mapping) and res.get("work_id"):
            w["claims"] += 1
        if not args.get("token") or not isinstance(inv.get("now"), int | float):
            continue
        w["writes"] += 1
        outcome = str(r.get("outcome"))
        w[outcome if outcome in ("ok", "refused", "indefinite") else "indefinite"] += 1
        exp = (lease.get(p) or {}).get(str(args.get("work_id")))
        if exp is None:
            continue
        lapsed = float(inv["now"]) > exp + grace
        if outcome == "ok" and lapsed:
            w["ok_after_lapse"] += 1
        elif outcome == "refused":
            w["refused_after_lapse" if lapsed else "refused_while_live"] += 1
    return out


def describe(w: Mapping[str, Any]) -> str:
    """One line for one clock-faulted worker."""
    params = w.get("params") or {}
    what = ", ".join(f"{k} {v}" for k, v in params.items() if k != "clock")
    s = (f"{w['worker']} ({w['fault']}: {what}): {w['writes']} writes with its lease token while its clock was off "
         f"({w['ok']} ok, {w['refused']} refused, {w['indefinite']} indefinite), {w['claims']} claims granted")
    if w["ok_after_lapse"]:
        s += f"; {w['ok_after_lapse']} accepted after its lease had lapsed by the ledger's time"
    if w["refused_after_lapse"]:
        s += f"; {w['refused_after_lapse']} refused after its lease had lapsed (as they must be)"
    if w["refused_while_live"]:
        s += f"; {w['refused_while_live']} refused while its lease was live by the ledger's time"
    return s


def attach(result: Any) -> None:
    """Add what the clock-faulted workers did to a checked campaign result (observations ``clock``
    and one note per fault)."""
    if not result.history or not any(f in CLOCK_FAULTS for f in result.faults):
        return
    import json

    with open(result.history, "rb") as f:  # checked already: one JSON record a line
        rows = skewed_workers(json.loads(line) for line in f if line.strip())
    result.observations["clock"] = rows
    result.notes.extend(describe(w) for w in rows)
