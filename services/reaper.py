"""Finding and ending the processes a run started, however they tried to get away.

A process the harness starts (an adapter subprocess, a crash-exploration worker, a pytest-xdist
worker) can leave others behind: a child still in its process group after the parent exited,
or one that called ``setsid`` and so has a session and group of its own.  Three nets catch them:

* the process group, signalled whether or not its leader is still alive;
* the descendants by parent links (psutil), taken while the parent is alive;
* a tag: an environment variable (``NAME=VALUE``) the harness puts into the environment of what
  it starts.  Children inherit it, so a process that left its group and lost its parent still
  carries it, and :func:`tagged` finds it in ``/proc/<pid>/environ``.

A process that both escapes its group and clears its environment before its parent dies is out
of reach; docs/protocol.md says so.

What those processes leave on disk goes the same way: :func:`scratch_parent` gives a run one
temporary directory that every process it starts inherits as ``TMPDIR`` (Python's ``tempfile``,
Node.js's ``os.tmpdir()`` and most C libraries honour it) and removes it when the run is over, so
the scratch files of an adapter killed with SIGKILL, which no cleanup of its own can remove, go too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterable, Iterator

import psutil

ADAPTER_TAG = "LEDGERCHECK_ADAPTER_TAG"  # one value per adapter process the harness starts
RUN_TAG = "LEDGERCHECK_RUN_TAG"  # one value per `ledgercheck certify` run


def children(pid: int) -> list[int]:
    """Direct children of a process (Linux exposes them per thread; elsewhere ask psutil)."""
    task = f"/proc/{pid}/task"
    try:
        out = []
        for tid in os.listdir(task):
            with open(f"{task}/{tid}/children", encoding="ascii") as f:
                out += [int(x) for x in f.read().split()]
        return out
    except (FileNotFoundError, PermissionError, ProcessLookupError):
        try:
            return [c.pid for c in psutil.Process(pid).children()]
        except psutil.NoSuchProcess:
            return []


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` by parent links, parents before their children."""
    out, todo = [], [pid]
    while todo:
        for c in children(todo.pop()):
            out.append(c)
            todo.append(c)
    return out


def tagged(name: str, value: str) -> list[int]:
    """Processes (other than this one) whose environment holds ``name=value``."""
    needle = f"\0{name}={value}\0".encode()
    me = os.getpid()
    out = []
    for pid in psutil.pids():
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = b"\0" + f.read() + b"\0"
        except OSError:
            continue
        if needle in env:
            out.append(pid)
    return out


def gone(pid: int) -> bool:
    """Dead: no such process, or a zombie (it runs no code and holds nothing but its pid)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _dead(p: psutil.Process) -> bool:
    """Like :func:`gone`, for a handle: a later process that reuses the pid does not count."""
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def kill_group(pgid: int) -> None:
    """SIGKILL a process group, whether or not its leader is still alive."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def processes(pids: Iterable[int]) -> list[psutil.Process]:
    """Handles on the processes now alive among ``pids``; a handle never signals a later
    process that reuses the pid (psutil checks the start time)."""
    out = []
    for pid in dict.fromkeys(pids):
        try:
            out.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    return out


def kill_all(targets: Iterable[int | psutil.Process], wait: float = 5.0) -> list[int]:
    """SIGKILL ``targets`` (pids or handles; those still alive) and wait, at most ``wait``
    seconds, until they are gone.  Returns the pids signalled."""
    procs, seen = [], set()
    me = os.getpid()
    for t in targets:
        try:
            p = t if isinstance(t, psutil.Process) else psutil.Process(t)
            if p.pid in seen or p.pid == me:
                continue
            seen.add(p.pid)
            p.kill()
            procs.append(p)
        except psutil.NoSuchProcess:
            pass
    deadline = time.monotonic() + wait
    delay = 0.0005
    for p in procs:
        while not _dead(p) and time.monotonic() < deadline:
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
    return [p.pid for p in procs]


def sweep(name: str, value: str, extra: Iterable[int | psutil.Process] = ()) -> list[int]:
    """SIGKILL every process carrying the tag ``name=value`` and their descendants, plus ``extra``."""
    targets: list[int | psutil.Process] = list(extra)
    for pid in tagged(name, value):
        targets.append(pid)
        targets += descendants(pid)
    return kill_all(targets)


__all__ = ["ADAPTER_TAG", "RUN_TAG", "children", "descendants", "gone", "kill_all", "kill_group", "processes", "sweep", "tagged"]


@contextlib.contextmanager
def scratch_parent(prefix: str = "ledgercheck-run-", under: str | None = None) -> Iterator[str]:
    """A fresh directory under ``under`` (default: the current temporary directory), made the
    temporary directory of this process (``tempfile.tempdir``) and of every process it starts
    (``TMPDIR``) until the block ends; then the previous settings come back and the directory is
    removed with whatever is in it.  End the processes that wrote there first (:func:`sweep`)."""
    root = tempfile.mkdtemp(prefix=prefix, dir=under)
    # /tmp's own permissions: a server that runs as another user (PostgreSQL drops root) still
    # reaches and makes its directory here; what is made inside is as private as its maker says
    os.chmod(root, 0o1777)
    old_env, old_tempdir = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = root
    tempfile.tempdir = root
    try:
        yield root
    finally:
        tempfile.tempdir = old_tempdir
        if old_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old_env
        shutil.rmtree(root, ignore_errors=True)
