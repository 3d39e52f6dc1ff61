"""What the throwaway servers (services/postgres.py, services/redis.py) share: one server per
process, and the watchdog's wait for its owner to die."""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class _Server(Protocol):
    owner_pid: int

    @property
    def running(self) -> bool: ...

    def stop(self) -> None: ...


S = TypeVar("S", bound=_Server)


class SharedServer(Generic[S]):
    """One server per process, started on first use and stopped when the interpreter exits, by
    the process that started it only (a forked child that inherited it, and the atexit handler
    with it, leaves it alone)."""

    def __init__(self, start: Callable[[], S]) -> None:
        self._start = start
        self._server: S | None = None
        self._lock = threading.Lock()

    def get(self) -> S:
        with self._lock:
            if self._server is None or not self._server.running:
                self._server = self._start()
                atexit.register(self.stop)
            return self._server

    def stop(self) -> None:
        with self._lock:
            if self._server is not None and self._server.owner_pid == os.getpid():
                self._server.stop()
                self._server = None


# The start of a watchdog script (run as ``python -c``; argv[1] the owner's pid, argv[2] the
# server's directory): it returns once the owner is dead (a zombie counts) or the directory gone.
WATCHDOG_WAIT = """
import os, shutil, signal, subprocess, sys, time
owner, root = int(sys.argv[1]), sys.argv[2]
def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True
while alive(owner) and os.path.isdir(root):
    time.sleep(0.2)
"""
