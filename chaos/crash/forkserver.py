"""A fork server for worker processes.

Started once per harness process (``python -m ledgercheck.chaos.crash.forkserver FD``), it imports
the harness, the contract and the installed adapters, then waits on a Unix socket.  Each request
carries one file descriptor, the worker's end of a fresh control socket; the server forks, the
child reads its configuration from that socket and becomes a worker, and the server answers
with the child's pid.  A worker therefore starts in a few milliseconds, already warm.

A worker runs in the requester's environment and working directory as they are when it is
spawned, not as they were when the server started: the first message on its control socket
carries them (a harness that points adapters at a server, ``LEDGERCHECK_PG_DSN`` for instance,
after an earlier test started the fork server, must not have its workers reach another one).

The server exits when the harness closes its end of the socket.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from multiprocessing.connection import Connection

_PID = struct.Struct("!i")


class ForkServerError(Exception):
    pass


def _child(sock: socket.socket, fd: int) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    sock.close()
    from .worker import worker_main

    conn = Connection(fd)
    try:
        _adopt(conn.recv())
        cfg = conn.recv()
        entry = cfg.get("entry") if isinstance(cfg, dict) else None
        if entry:  # another kind of process (the safety campaign's): module:function(conn, cfg)
            import importlib

            mod, _, fn = str(entry).partition(":")
            getattr(importlib.import_module(mod), fn)(conn, cfg)
        else:
            worker_main(conn, cfg)
    except (EOFError, OSError, KeyboardInterrupt):
        pass


def _context() -> dict[str, object]:
    """The requester's environment and working directory, for a worker spawned now."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return {"environ": env, "cwd": os.getcwd()}


def _adopt(ctx: object) -> None:
    if not isinstance(ctx, dict) or not isinstance(ctx.get("environ"), dict):
        raise ForkServerError("a worker's first message must carry its environment")
    os.environ.clear()
    os.environ.update(ctx["environ"])
    try:
        os.chdir(str(ctx.get("cwd") or "/"))
    except OSError:  # the requester's directory is gone: the worker keeps the server's
        pass


def serve(sock: socket.socket) -> None:
    from . import _warm  # noqa: F401 - the point of the server: import once, fork many times

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    sock.sendall(b"R")
    while True:
        try:
            msg, fds, _flags, _addr = socket.recv_fds(sock, 1, 1)
        except (OSError, ValueError):
            break
        if not msg or not fds:
            break
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _child(sock, fds[0])
            except BaseException:  # noqa: BLE001 - a worker must never return into the server loop
                code = 1
            finally:
                os._exit(code)
        os.close(fds[0])
        try:
            sock.sendall(_PID.pack(pid))
        except OSError:
            break


class ForkServer:
    """The harness's handle on the fork server (one per harness process)."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = _context()["environ"]
        quiet = not os.environ.get("LEDGERCHECK_CHAOS_DEBUG")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ledgercheck.chaos.crash.forkserver", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL if quiet else None, env=env)
        theirs.close()
        self.sock = ours
        self.lock = threading.Lock()
        self.sock.settimeout(120)
        try:
            ready = self.sock.recv(1)
        except OSError as exc:
            raise ForkServerError(f"the worker fork server did not start: {exc}") from None
        if ready != b"R":
            raise ForkServerError(f"the worker fork server did not start (exit code {self.proc.poll()})")
        self.sock.settimeout(30)

    def spawn(self) -> tuple[int, Connection]:
        """Fork a new worker; returns its pid and the harness's end of its control connection."""
        mine, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with self.lock:
                socket.send_fds(self.sock, [b"F"], [child.fileno()])
                raw = b""
                while len(raw) < _PID.size:
                    chunk = self.sock.recv(_PID.size - len(raw))
                    if not chunk:
                        raise ForkServerError("the worker fork server went away")
                    raw += chunk
        except OSError as exc:
            mine.close()
            raise ForkServerError(f"the worker fork server failed: {exc}") from None
        finally:
            child.close()
        pid = _PID.unpack(raw)[0]
        conn = Connection(mine.detach())
        try:
            conn.send(_context())
        except OSError as exc:
            conn.close()
            raise ForkServerError(f"the worker fork server's child went away: {exc}") from None
        return pid, conn

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


_SERVER: ForkServer | None = None
_SERVER_LOCK = threading.Lock()


def fork_server() -> ForkServer:
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is None or not _SERVER.alive():
            _SERVER = ForkServer()
        return _SERVER


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
