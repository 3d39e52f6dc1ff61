"""Warm worker processes, and how the harness kills, pauses and talks to them.

Worker processes come from a fork server (``forkserver.py``) that has already imported the
harness, the contract and the installed adapters, so a new worker costs a fork, not an
interpreter start.  The pool keeps a few workers started ahead (each already connected to its
adapter: for an ``exec:`` address that includes spawning and greeting the adapter subprocess),
so a scenario rarely waits for one.  Kills are real: SIGKILL through psutil to the worker and
every process below it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

import psutil
from ledgercheck.services.reaper import descendants
from ledgercheck.services.reaper import gone as _gone
from ledgercheck.spec import Spec, default_spec
from ledgercheck.transport import costs
from ledgercheck.transport.wire import plain

from .forkserver import ForkServerError, fork_server
from .points import ChaosError


class WorkerDied(Exception):
    pass


class WorkerTimeout(Exception):
    pass


def kill_tree(pid: int, proc: psutil.Process | None = None) -> list[int]:
    """SIGKILL a process and all its descendants (psutil), wait until they are gone; returns the pids."""
    procs = []
    for p in [pid] + descendants(pid):
        try:
            procs.append(proc if (proc is not None and p == pid) else psutil.Process(p))
        except psutil.NoSuchProcess:
            pass
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    deadline = time.monotonic() + 10
    delay = 0.0005
    for p in procs:  # dead means gone or a zombie: a zombie runs no code and holds no locks
        while not _proc_gone(p) and time.monotonic() < deadline:
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
    return [p.pid for p in procs]


def _proc_gone(p: psutil.Process) -> bool:
    try:
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class WorkerHandle:
    """The harness's end of one worker process."""

    def __init__(self, pid: int, conn: Any, name: str) -> None:
        self.pid = pid
        self.conn = conn
        self.name = name
        self.handshake: dict[str, Any] = {}
        self.kind = ""
        self.dirty = False  # armed and not fired: never hand it out again
        self.dead = False
        self.spawned_at = time.perf_counter()
        try:
            self.ps: psutil.Process | None = psutil.Process(pid)
        except psutil.NoSuchProcess:
            self.ps = None

    def wait_ready(self, timeout: float) -> None:
        try:
            msg = self.recv(timeout)
        except WorkerTimeout:
            self.kill()
            raise ChaosError(f"worker {self.name} did not become ready within {timeout:g}s (adapter start hung?)") from None
        except WorkerDied:
            raise ChaosError(f"worker {self.name} died while starting") from None
        if msg.get("event") == "error":
            self.kill()
            raise ChaosError(str(msg.get("message")))
        if msg.get("event") != "ready":
            self.kill()
            raise ChaosError(f"worker {self.name} sent {msg!r} instead of ready")
        self.handshake = dict(msg.get("handshake") or {})
        self.kind = str(msg.get("kind") or "")
        costs.add_worker(time.perf_counter() - self.spawned_at)

    def send(self, msg: dict[str, Any]) -> None:
        try:
            self.conn.send(msg)
        except (OSError, ValueError) as exc:
            raise WorkerDied(f"worker {self.name} (pid {self.pid}): cannot send: {exc}") from None

    def recv(self, timeout: float) -> dict[str, Any]:
        try:
            ready = self.conn.poll(timeout)
        except (OSError, ValueError) as exc:
            raise WorkerDied(f"worker {self.name} (pid {self.pid}): {exc}") from None
        if not ready:
            raise WorkerTimeout(f"worker {self.name} (pid {self.pid}) did not answer within {timeout:g}s")
        try:
            msg = self.conn.recv()
        except (EOFError, OSError):
            self.dead = True
            raise WorkerDied(f"worker {self.name} (pid {self.pid}) died") from None
        if isinstance(msg, dict) and isinstance(msg.get("costs"), dict):
            costs.add(msg.pop("costs"))
        return msg

    def request(self, msg: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.send(msg)
        return self.recv(timeout)

    def alive(self) -> bool:
        return not self.dead and not _gone(self.pid)

    def kill(self) -> list[int]:
        """SIGKILL the worker and everything it started (its adapter subprocess, if any)."""
        pids = kill_tree(self.pid, self.ps)
        self.dead = True
        self._close_conn()
        return pids

    def suspend(self) -> None:
        (self.ps or psutil.Process(self.pid)).suspend()

    def resume(self) -> None:
        (self.ps or psutil.Process(self.pid)).resume()

    def retire(self) -> None:
        """End a worker that is not needed any more (not a crash: it may exit on its own)."""
        try:
            self.conn.send({"cmd": "exit"})
        except (OSError, ValueError):
            pass
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and not _gone(self.pid):
            time.sleep(0.01)
        if not _gone(self.pid):
            kill_tree(self.pid)
        self.dead = True
        self._close_conn()

    def _close_conn(self) -> None:
        try:
            self.conn.close()
        except OSError:
            pass


class WorkerPool:
    """Hands out ready workers for one adapter address; keeps ``spare`` more starting."""

    def __init__(self, address: str, spec: Spec | None = None, *, spare: int = 2, worker: str | None = None,
                 op_timeout: float = 30.0, start_timeout: float = 120.0) -> None:
        spec = spec or default_spec()
        self.address = address
        self.spare = max(1, spare)
        self.start_timeout = start_timeout
        self.cfg: dict[str, Any] = {
            "address": address,
            "contract": None if spec.digest == default_spec().digest else plain(spec.document),
            "worker": worker,
            "sys_path": list(sys.path),
            "op_timeout": op_timeout,
        }
        self._idle: list[WorkerHandle] = []
        self._starting: list[WorkerHandle] = []
        self._all: list[WorkerHandle] = []
        self._lock = threading.Lock()
        self._n = 0
        self._failed: str | None = None
        self.started = 0

    def _spawn(self) -> None:
        self._n += 1
        name = f"worker-{os.getpid()}-{self._n}"
        try:
            pid, conn = fork_server().spawn()
        except ForkServerError as exc:
            raise ChaosError(str(exc)) from None
        h = WorkerHandle(pid, conn, name)
        h.send({**self.cfg, "owner": name})
        self._starting.append(h)
        self._all.append(h)
        self.started += 1

    def _fill(self) -> None:
        if self._failed is None:
            while len(self._idle) + len(self._starting) < self.spare:
                self._spawn()

    def get(self) -> WorkerHandle:
        with self._lock:
            if self._failed is not None:
                raise ChaosError(self._failed)
            if self._idle:
                h = self._idle.pop(0)
                self._fill()
                return h
            if not self._starting:
                self._spawn()
            h = self._starting.pop(0)
            self._fill()
        try:
            h.wait_ready(self.start_timeout)
        except ChaosError as exc:
            with self._lock:
                self._failed = str(exc)
            raise
        return h

    def put(self, h: WorkerHandle) -> None:
        """Return a worker that is alive, unarmed and idle."""
        if h.dirty or not h.alive():
            h.retire()
            return
        with self._lock:
            self._idle.append(h)

    @property
    def failed(self) -> str | None:
        """Why this pool hands out no more workers (stopped, or a worker failed to start), or None."""
        return self._failed

    def abort(self, reason: str) -> None:
        """Stop at once (an interrupt): no more workers are handed out, and every worker is
        SIGKILLed with all it started, so a scenario waiting on one ends now, not at its deadline."""
        with self._lock:
            self._failed = reason
            hs = list(self._all)
        for h in hs:
            if not h.dead:
                h.kill()

    def close(self) -> None:
        with self._lock:
            hs, self._all, self._idle, self._starting = self._all, [], [], []
        for h in hs:
            if not h.dead:
                try:
                    h.conn.send({"cmd": "exit"})
                except (OSError, ValueError):
                    pass
        deadline = time.monotonic() + 3
        for h in hs:
            while not h.dead and time.monotonic() < deadline and not _gone(h.pid):
                time.sleep(0.01)
            if not h.dead and not _gone(h.pid):
                kill_tree(h.pid)
            h.dead = True
            h._close_conn()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
