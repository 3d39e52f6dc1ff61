"""Hosts for the safety campaign: Linux network namespaces joined to the database by veth pairs.

A :class:`HostNet` makes ``n`` network namespaces (``<prefix><run>h<i>``), a bridge in the root
namespace holding the database side's address (``10.231.<net>.1/24``), and for each host a veth
pair: one end on the bridge, the other inside the namespace with address ``10.231.<net>.<10+i>``.
A database server that listens on :attr:`HostNet.db_address` is then reachable from every host,
and from the root namespace (the campaign's controller, producer and monitor).

* :meth:`HostNet.enter` moves the calling process into a host's namespace (``setns``); the
  campaign calls it in a freshly forked worker before the worker opens any connection.
* :meth:`HostNet.partition` sets the host's end of its link down: the host loses its route to
  the database at once (new connections fail, established ones hear nothing back);
  :meth:`HostNet.heal` sets it up again, and TCP delivers whatever was waiting.
* :meth:`HostNet.close` deletes the namespaces, the links and the bridge.  It runs at
  interpreter exit as well, and :func:`cleanup_stale` removes what a killed run left behind
  (every name carries the prefix and the pid of the run that made it; a name whose pid is gone is
  stale).

Namespaces need root and the ``ip`` tool.  :func:`unavailable` says in one line why they cannot
be made here (None when they can); ``LEDGERCHECK_ALLOW_NO_NETNS=1`` (:func:`allowed_to_skip`) lets
the tests skip and the command line run every worker on this host instead of failing.

:func:`hosts_with_postgres` makes ``n`` hosts and starts a throwaway PostgreSQL server
(services/postgres.py) that listens on loopback and on :attr:`HostNet.db_address` and trusts the
hosts' /24: what the partition tests, the benchmark and ``ledgercheck safety --hosts`` use.
"""

from __future__ import annotations

import atexit
import ctypes
import fcntl
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ledgercheck.chaos.crash.points import ChaosError
from ledgercheck.services.reaper import gone

PREFIX = "lcn"  # every namespace, link and bridge this module makes starts with it
NET = "10.231"  # the private /16 the per-run /24s come from
CLONE_NEWNET = 0x40000000
LOCK = "/run/ledgercheck-netns.lock"
ALLOW_ENV = "LEDGERCHECK_ALLOW_NO_NETNS"
_LIVE: dict[int, bool] = {}  # pids with a HostNet made and not yet closed
_NAME = re.compile(rf"^{PREFIX}(\d+)[hbv]")


class HostsUnavailable(ChaosError):
    """Network namespaces cannot be made here (not root, or no ``ip``); the message says which."""


def unavailable() -> str | None:
    """Why hosts cannot be made on this machine (one line), or None."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "network namespaces need root (run as root, or skip the host tests with LEDGERCHECK_ALLOW_NO_NETNS=1)"
    if shutil.which("ip") is None:
        return "network namespaces need the 'ip' tool (iproute2), which is not on PATH"
    return None


def allowed_to_skip() -> bool:
    """Whether ``LEDGERCHECK_ALLOW_NO_NETNS`` lets a run go on without hosts where they cannot be made."""
    return os.environ.get(ALLOW_ENV, "") not in ("", "0")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise HostsUnavailable(f"ip {' '.join(args)} failed: {(proc.stderr or proc.stdout).strip()}")
    return proc


def cleanup_stale() -> list[str]:
    """Delete the namespaces and links of runs whose process is gone; returns what was removed."""
    removed: list[str] = []
    for ns in _ip("netns", "list", check=False).stdout.split():
        m = _NAME.match(ns)
        if m and gone(int(m.group(1))):
            _ip("netns", "delete", ns, check=False)
            removed.append(ns)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) < 2:
            continue
        name = parts[1].strip().split("@")[0]
        m = _NAME.match(name)
        if m and gone(int(m.group(1))):
            _ip("link", "delete", name, check=False)
            removed.append(name)
    return removed


def _used_nets() -> set[int]:
    used: set[int] = set()
    for m in re.finditer(rf"inet {re.escape(NET)}\.(\d+)\.", _ip("-4", "-o", "addr", "show", check=False).stdout):
        used.add(int(m.group(1)))
    return used


@dataclass(frozen=True)
class Host:
    """One host: its namespace, its address, and its end of the link (inside the namespace)."""

    index: int
    netns: str
    address: str
    link: str  # the namespace's end of the veth pair
    peer: str  # the bridge's end, in the root namespace

    @property
    def path(self) -> str:
        return f"/run/netns/{self.netns}"


@dataclass
class HostNet:
    """``n`` hosts around one bridge; see the module docstring."""

    n: int = 3
    hosts: list[Host] = field(default_factory=list)
    bridge: str = ""
    net: int = -1
    cut: set[int] = field(default_factory=set)
    _owner: int = 0

    @property
    def db_address(self) -> str:
        return f"{NET}.{self.net}.1"

    @property
    def subnet(self) -> str:
        return f"{NET}.{self.net}.0/24"

    def create(self) -> HostNet:
        why = unavailable()
        if why:
            raise HostsUnavailable(why)
        if self.n < 1 or self.n > 200:
            raise ChaosError("hosts: between 1 and 200 hosts")
        pid = os.getpid()
        if _LIVE.get(pid):  # every name carries the pid: a second HostNet here would collide with the first
            raise HostsUnavailable(f"hosts: this process (pid {pid}) already has hosts; one HostNet per process at a time")
        cleanup_stale()
        self._owner = pid
        _LIVE[pid] = True
        tag = f"{PREFIX}{pid}"
        atexit.register(self.close)
        with open(LOCK, "a") as lock:  # two runs at once must not pick the same /24
            fcntl.flock(lock, fcntl.LOCK_EX)
            used = _used_nets()
            free = [k for k in range(1, 255) if k not in used]
            if not free:
                raise HostsUnavailable(f"hosts: every {NET}.N.0/24 is in use")
            self.net = free[pid % len(free)]
            self.bridge = f"{tag}b"
            try:
                _ip("link", "add", self.bridge, "type", "bridge")
                _ip("addr", "add", f"{self.db_address}/24", "dev", self.bridge)
                _ip("link", "set", self.bridge, "up")
            except BaseException:
                self.close()
                raise
        try:
            for i in range(self.n):
                h = Host(i, f"{tag}h{i}", f"{NET}.{self.net}.{10 + i}", f"{tag}v{i}", f"{tag}v{i}p")
                _ip("netns", "add", h.netns)
                self.hosts.append(h)
                _ip("link", "add", h.peer, "type", "veth", "peer", "name", h.link, "netns", h.netns)
                _ip("link", "set", h.peer, "master", self.bridge)
                _ip("link", "set", h.peer, "up")
                _ip("-n", h.netns, "addr", "add", f"{h.address}/24", "dev", h.link)
                _ip("-n", h.netns, "link", "set", h.link, "up")
                _ip("-n", h.netns, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise
        return self

    def __enter__(self) -> HostNet:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def host_of(self, slot: int) -> Host:
        """The host a worker slot runs on (round robin)."""
        return self.hosts[slot % len(self.hosts)]

    def partition(self, host: Host) -> None:
        """Cut the host off: its end of the link goes down (its route to the database with it)."""
        _ip("-n", host.netns, "link", "set", host.link, "down")
        self.cut.add(host.index)

    def heal(self, host: Host) -> None:
        _ip("-n", host.netns, "link", "set", host.link, "up")
        self.cut.discard(host.index)

    def close(self) -> None:
        """Delete every namespace and link of this run (idempotent; only from the process that made them)."""
        if self._owner != os.getpid():
            return
        _LIVE.pop(self._owner, None)
        for h in self.hosts:
            _ip("link", "delete", h.peer, check=False)
            _ip("netns", "delete", h.netns, check=False)
        self.hosts = []
        if self.bridge:
            _ip("link", "delete", self.bridge, check=False)
            self.bridge = ""
        self.cut.clear()


def enter(path: str) -> None:
    """Move the calling process into the network namespace at ``path`` (``/run/netns/NAME``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise HostsUnavailable(f"setns({path}) failed: {os.strerror(err)}")
    finally:
        os.close(fd)


@dataclass
class PgHosts:
    """Hosts and the PostgreSQL server they reach over their links."""

    net: HostNet
    server: Any  # a ledgercheck.services.postgres.PostgresServer

    @property
    def server_dsn(self) -> str:
        """The server's DSN at the address the hosts reach it at."""
        return f"host={self.net.db_address} port={self.server.port} user={self.server.user} dbname=postgres"


@contextmanager
def hosts_with_postgres(n: int = 3) -> Iterator[PgHosts]:
    """``n`` hosts and a PostgreSQL server they reach over their links; everything is removed on
    exit.  Raises :class:`HostsUnavailable` (hosts) or ``PostgresUnavailable`` (the server)."""
    from ledgercheck.services.postgres import PostgresServer

    with HostNet(n) as net:
        base = PostgresServer()
        settings = {**base.settings, "listen_addresses": f"127.0.0.1,{net.db_address}"}
        server = PostgresServer(settings=settings).start()
        try:
            assert server.root is not None
            hba = server.root / "data" / "pg_hba.conf"
            with open(hba, "a") as f:  # the hosts' /24 may connect, as loopback may
                f.write(f"\nhost all all {net.subnet} trust\n")
            server.execute("SELECT pg_reload_conf()")
            yield PgHosts(net, server)
        finally:
            server.stop()
