"""A throwaway PostgreSQL server for tests, benchmarks, the PostgreSQL-backed adapters and the
reference ledger's PostgreSQL backend (``ledgercheck.services.postgres`` re-exports it).

``PostgresServer`` runs ``initdb`` in a fresh temporary directory and starts the server on
127.0.0.1 only, on a free port, with a private Unix-socket directory and durability settings
relaxed for speed (``fsync=off``).  ``stop()`` shuts it down and removes the directory.

The server refuses to run as root, so when the current process is root the binaries run as an
unprivileged account (``postgres`` when it exists, else ``nobody``) that owns the directory.

Binaries are looked up in ``$LEDGERCHECK_PG_BIN``, then on ``PATH``, then in
``/usr/lib/postgresql/<version>/bin`` (Debian's layout, newest first).  When none is found,
:class:`PostgresUnavailable` says exactly that; tests treat it as a failure, never as a skip.

A shared server for a whole process is available through :func:`shared_server` (started on
first use, stopped at interpreter exit); the adapters use it when ``reset`` gets no DSN.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .reaper import gone
from .servers import WATCHDOG_WAIT, SharedServer

__all__ = [
    "PostgresServer", "PostgresUnavailable", "find_pg_bin", "free_port", "shared_server", "stop_shared_server",
]

PG_BINARIES = ("initdb", "pg_ctl", "postgres")
_NAME_OK = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class PostgresUnavailable(RuntimeError):
    """PostgreSQL binaries are missing or the server would not start; the message says which."""


def find_pg_bin() -> Path:
    """The directory holding initdb, pg_ctl and postgres."""
    candidates: list[Path] = []
    env = os.environ.get("LEDGERCHECK_PG_BIN")
    if env:
        candidates.append(Path(env))
    found = shutil.which("initdb")
    if found:
        candidates.append(Path(os.path.realpath(found)).parent)
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    candidates.extend(Path(v) for v in versions)
    for c in candidates:
        if all((c / b).is_file() and os.access(c / b, os.X_OK) for b in PG_BINARIES):
            return c
    looked = ", ".join(str(c) for c in candidates) or "PATH and /usr/lib/postgresql/*/bin"
    raise PostgresUnavailable(
        "PostgreSQL server binaries (initdb, pg_ctl, postgres) were not found "
        f"(looked in: {looked}); install PostgreSQL (Debian: apt-get install postgresql) "
        "or set LEDGERCHECK_PG_BIN to their directory")


def _version_key(path: str) -> tuple[int, ...]:
    part = Path(path).parent.name
    return tuple(int(x) for x in re.findall(r"\d+", part)) or (0,)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _unprivileged_account() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise PostgresUnavailable("running as root and neither a 'postgres' nor a 'nobody' account exists to run PostgreSQL")


@dataclass
class PostgresServer:
    """One PostgreSQL cluster in a temporary directory.  Use as a context manager or call
    ``start()`` and ``stop()``."""

    host: str = "127.0.0.1"
    port: int = 0
    user: str = "postgres"
    settings: dict[str, str] = field(default_factory=lambda: {
        "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
        "max_connections": "200", "shared_buffers": "32MB",
    })
    start_timeout: float = 60.0
    watchdog: bool = True
    root: Path | None = None
    pid: int | None = None
    bindir: Path | None = None
    owner_pid: int | None = None
    _account: pwd.struct_passwd | None = None
    _watcher: subprocess.Popen[bytes] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> PostgresServer:
        if self.pid is not None:
            return self
        self.bindir = find_pg_bin()
        self._account = _unprivileged_account()
        self.root = Path(tempfile.mkdtemp(prefix="ledgercheck-pg-"))
        data, sockdir, log = self.root / "data", self.root / "sock", self.root / "server.log"
        sockdir.mkdir()
        if self._account is not None:
            for p in (self.root, sockdir):
                os.chown(p, self._account.pw_uid, self._account.pw_gid)
        try:
            self._run(["initdb", "-D", str(data), "-U", self.user, "-A", "trust", "-E", "UTF8", "--no-sync",
                       "--locale=C"], timeout=self.start_timeout)
            last_error = ""
            for _attempt in range(3):  # a free port can be taken between the pick and the bind
                self.port = self.port or free_port(self.host)
                opts = [f"-c listen_addresses={self.host}", f"-p {self.port}", f"-k {sockdir}"]
                opts += [f"-c {k}={v}" for k, v in self.settings.items()]
                proc = self._run(["pg_ctl", "start", "-D", str(data), "-l", str(log), "-w",
                                  "-t", str(int(self.start_timeout)), "-o", " ".join(opts)],
                                 timeout=self.start_timeout + 10, check=False)
                if proc.returncode == 0:
                    break
                last_error = self._log_tail(log) or proc.stderr
                self.port = 0
            else:
                raise PostgresUnavailable(f"PostgreSQL did not start: {last_error.strip()[-800:]}")
            self.pid = self._read_pid(data)
            self.owner_pid = os.getpid()
            if self.watchdog:
                self._start_watchdog()
        except BaseException:
            if self.pid is not None:
                self._run(["pg_ctl", "stop", "-D", str(data), "-m", "immediate", "-w"], timeout=30, check=False)
                self.pid = None
            self._cleanup_dir()
            raise
        return self

    def _start_watchdog(self) -> None:
        """A detached process that stops the server and removes its directory once this process
        is gone, however it ended (a SIGKILL, or a forked worker leaving through ``os._exit``,
        skips ``stop()`` and every atexit handler)."""
        assert self.root is not None and self.bindir is not None
        argv = [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(self.root), str(self.bindir)]
        if self._account is not None:
            argv += [str(self._account.pw_uid), str(self._account.pw_gid)]
        self._watcher = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)

    def stop(self) -> None:
        """Stop the server (fast shutdown), wait for its processes, remove its directory."""
        with self._lock:
            if self.root is None:
                return
            data = self.root / "data"
            if self.pid is not None:
                if data.is_dir():
                    self._run(["pg_ctl", "stop", "-D", str(data), "-m", "fast", "-w", "-t", "30"], timeout=40, check=False)
                else:  # its directory was removed under it (a scratch parent cleaned first): stop it by signal
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(self.pid, signal.SIGQUIT)
                deadline = time.monotonic() + 15
                while not gone(self.pid) and time.monotonic() < deadline:
                    time.sleep(0.05)
                if not gone(self.pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(self.pid, 9)
                self.pid = None
            self._cleanup_dir()
            if self._watcher is not None:  # it sees the directory gone and exits
                try:
                    self._watcher.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._watcher.kill()
                    self._watcher.wait(timeout=5)
                self._watcher = None

    @property
    def watchdog_pid(self) -> int | None:
        return self._watcher.pid if self._watcher is not None else None

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self.pid is not None and not gone(self.pid)

    # ------------------------------------------------------------------ databases
    def dsn(self, dbname: str = "postgres") -> str:
        """A libpq connection string for a database of this server."""
        if self.pid is None:
            raise PostgresUnavailable("the PostgreSQL server is not running")
        return f"host={self.host} port={self.port} user={self.user} dbname={dbname}"

    def url(self, dbname: str = "postgres", driver: str = "postgresql") -> str:
        return f"{driver}://{self.user}@{self.host}:{self.port}/{dbname}"

    def create_database(self, name: str, template: str | None = None) -> str:
        """Create a database (optionally as a copy of ``template``); returns its DSN."""
        _check_name(name)
        if template is not None:
            _check_name(template)
        tmpl = f" TEMPLATE {template}" if template else ""
        self.execute(f"CREATE DATABASE {name}{tmpl}")
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        _check_name(name)
        self.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def execute(self, sql: str, dbname: str = "postgres") -> None:
        """Run one statement in autocommit mode (CREATE/DROP DATABASE need it)."""
        import psycopg

        with psycopg.connect(self.dsn(dbname), autocommit=True) as conn:
            conn.execute(sql)

    def processes(self) -> list[int]:
        """PIDs of the postmaster and its children (empty once stopped)."""
        if self.pid is None:
            return []
        import psutil

        try:
            main = psutil.Process(self.pid)
            return [self.pid] + [c.pid for c in main.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    # ------------------------------------------------------------------ helpers
    def _run(self, argv: list[str], *, timeout: float, check: bool = True) -> subprocess.CompletedProcess[str]:
        assert self.bindir is not None
        exe = [str(self.bindir / argv[0]), *argv[1:]]
        kwargs: dict[str, Any] = {}
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        if self._account is not None:
            kwargs.update(user=self._account.pw_uid, group=self._account.pw_gid, extra_groups=[])
            env["HOME"] = str(self.root)
        proc = subprocess.run(exe, capture_output=True, text=True, timeout=timeout, env=env, cwd=str(self.root),
                              start_new_session=True, **kwargs)
        if check and proc.returncode != 0:
            raise PostgresUnavailable(f"{argv[0]} failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-800:]}")
        return proc

    @staticmethod
    def _read_pid(data: Path) -> int:
        text = (data / "postmaster.pid").read_text()
        return int(text.splitlines()[0])

    @staticmethod
    def _log_tail(log: Path) -> str:
        try:
            return "\n".join(log.read_text(errors="replace").splitlines()[-10:])
        except OSError:
            return ""

    def _cleanup_dir(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None


def _check_name(name: str) -> None:
    if not _NAME_OK.match(name):
        raise ValueError(f"not a safe database name: {name!r}")


_SHARED: SharedServer[PostgresServer] = SharedServer(lambda: PostgresServer().start())


def shared_server() -> PostgresServer:
    """One server per process, started on first use and stopped when the interpreter exits."""
    return _SHARED.get()


def stop_shared_server() -> None:
    """Stop the shared server, from the process that started it only."""
    _SHARED.stop()


# Run by the watchdog process: argv = owner pid, server directory, bin directory[, uid, gid].
_WATCHDOG = WATCHDOG_WAIT + """
bindir = sys.argv[3]
if os.path.isdir(os.path.join(root, "data")):
    kw = {}
    if len(sys.argv) > 5:
        kw = dict(user=int(sys.argv[4]), group=int(sys.argv[5]), extra_groups=[])
    subprocess.run([os.path.join(bindir, "pg_ctl"), "stop", "-D", os.path.join(root, "data"), "-m", "immediate", "-w"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=root, timeout=60, **kw)
    shutil.rmtree(root, ignore_errors=True)
"""
