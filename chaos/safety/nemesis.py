"""The safety campaign's nemesis: a seeded schedule of faults, and the faults themselves.

Three faults, each done to real processes:

``kill``    SIGKILL of a worker process and everything below it (an ``exec:`` adapter's
            subprocess included), either at a random moment or at a named crash point: the
            contract's points the worker passes (``after_claim``, ``during_renew``, ...) and the
            adapter's own points (``ledger.after_commit``, ...).  For a named point the worker is
            armed and killed when it announces the point (chaos/crash/worker.py's mechanism).
``pause``   SIGSTOP of a worker that holds work, kept stopped past its lease's ttl + grace, then
            SIGCONT: the worker is alive, remembers its old lease token and writes again.
``reopen``  a new process opens the same ledger (a ``reset`` with the same ``dir``) while others
            hold work; a reopen must not disturb live holders.
``partition`` (only with hosts, chaos/safety/hosts.py; not in the default set) the host of a worker that
            holds work is cut off from the database (its link set down) past the lease's ttl +
            grace, so another host can take the item over, then healed: what the cut-off worker
            wrote meanwhile arrives late, and a write cut off before its answer came has an
            indefinite outcome.

``skew``, ``bump``, ``strobe``, ``fast`` (clock faults, chaos/safety/clockfaults.py; not in the default
            set; they need libfaketime) a worker's clock, as its adapter process sees it, set off
            by a constant offset, jumped forward or back and returned, flipped back and forth, or
            run N times as fast; the harness's own clock (the history's) stays real.

Lost replies and slow links (chaos/safety/replies.py) are not in this schedule: a relay between the
workers and the ledger's server (TCP), or between the harness and an ``exec:`` adapter (its JSON
lines), loses the answers to committed writes, delays, duplicates and reorders with its own seeded
draws on every request; what it did shows as indefinite completions in the history.

The schedule is drawn from ``random.Random(seed)`` before the campaign starts, so a seed names
the same sequence of faults (which worker is hit depends on who is alive and holding work at
that moment, chosen with the schedule's own draws).  Every fault is recorded in the history as a
``nemesis`` record when it happens.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import psutil
from ledgercheck.chaos.crash.points import ChaosError
from ledgercheck.chaos.crash.pool import descendants, kill_tree

FAULTS = ("kill", "pause", "reopen")  # the default set
HOST_FAULTS = ("partition",)  # need workers on hosts (chaos/safety/hosts.py)
CLOCK_FAULTS = ("skew", "bump", "strobe", "fast")  # need libfaketime (chaos/safety/clockfaults.py)
KNOWN = FAULTS + HOST_FAULTS + CLOCK_FAULTS
GAP = (0.15, 0.45)  # seconds between two faults (uniform), before scaling to the lease's lapse


@dataclass(frozen=True)
class Fault:
    """One planned fault: when (seconds into the campaign), what, and the draws that pick its target."""

    at: float
    fault: str
    pick: float  # in [0, 1): which of the candidate workers is hit
    point: str | None = None  # kill at this named crash point (None: at a random moment)
    occurrence: int = 1
    aim: float = 1.0  # in [0, 1): below 0.5, prefer a worker whose effect is done (not yet closed out)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_faults(text: str | Iterable[str] | None) -> tuple[str, ...]:
    """``"kill,pause,reopen"`` (or a list) -> the faults, checked; ``""``/``none`` -> no faults."""
    if text is None:
        return FAULTS
    names = [p.strip() for p in (text.split(",") if isinstance(text, str) else text) if p and p.strip()]
    if names in ([], ["none"]):
        return ()
    unknown = [n for n in names if n not in KNOWN]
    if unknown:
        raise ChaosError(f"unknown fault(s) {', '.join(map(repr, unknown))}: use a comma-separated subset of "
                         f"{','.join(KNOWN)} (or none)")
    return tuple(dict.fromkeys(names))


def plan(seed: int, faults: Sequence[str], duration: float, *, points: Sequence[str] = (),
         gap: tuple[float, float] = GAP, min_each: int = 1) -> list[Fault]:
    """The fault schedule for ``duration`` seconds: faults drawn in turn from ``faults`` at
    uniform random gaps; half the kills at a named crash point (when there are any), at its 1st to
    3rd passage.  The first faults go in ``min_each`` rounds, each listed fault once a round in a
    shuffled order, so every listed fault appears ``min_each`` times when the duration allows;
    then at random.  With ``min_each`` above 1, the faults of those rounds aim in turn at a
    worker whose effect is done and at any holder (``aim``), so both are certain to come."""
    rng = random.Random(f"nemesis/{seed}")
    out: list[Fault] = []
    if not faults:
        return out
    t = rng.uniform(*gap)
    order: list[str] = []
    for _ in range(max(1, min_each)):
        one = list(faults)
        rng.shuffle(one)
        order = one + order  # popped from the end: the first round first
    seen: dict[str, int] = {}
    while t < duration:
        rounds = bool(order)
        kind = order.pop() if order else rng.choice(list(faults))
        point, occ = None, 1
        if kind == "kill" and points and rng.random() < 0.5:
            point, occ = rng.choice(list(points)), rng.randint(1, 3)
        pick, aim = rng.random(), rng.random()
        if rounds and min_each > 1:
            n = seen[kind] = seen.get(kind, -1) + 1
            aim = aim / 2 if n % 2 == 0 else 0.5 + aim / 2  # below 0.5: a worker whose effect is done
        out.append(Fault(round(t, 4), kind, pick, point, occ, aim))
        t += rng.uniform(*gap)
    return out


def _tree(pid: int) -> list[psutil.Process]:
    procs = []
    for p in [pid, *descendants(pid)]:
        try:
            procs.append(psutil.Process(p))
        except psutil.NoSuchProcess:
            pass
    return procs


def kill(pid: int) -> list[int]:
    """SIGKILL a process and its descendants; returns the pids killed."""
    return kill_tree(pid)


def pause(pid: int, settle: float = 1.0) -> None:
    """SIGSTOP a process and its descendants (an exec adapter's subprocess stops with its worker),
    then wait until each has stopped (at most ``settle`` seconds): a signal is delivered
    asynchronously, and what the caller reads next about the process (which item it holds, whether
    it is inside its effect) must be what it stopped with."""
    procs = _tree(pid)
    for p in procs:
        try:
            p.suspend()
        except psutil.NoSuchProcess:
            pass
    end = time.monotonic() + settle
    for p in procs:
        while time.monotonic() < end:
            try:
                if p.status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP, psutil.STATUS_ZOMBIE,
                                  psutil.STATUS_DEAD):
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.0005)


def resume(pid: int) -> None:
    """SIGCONT a paused process tree."""
    for p in _tree(pid):
        try:
            p.resume()
        except psutil.NoSuchProcess:
            pass
