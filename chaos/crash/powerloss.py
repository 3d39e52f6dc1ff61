"""Power loss for SQLite ledgers: crash states where writes that were never synced are gone.

A killed process leaves everything it wrote in the operating system's page cache, so the next
open sees it; a power cut does not.  This module simulates the page cache of the files one
SQLite ledger writes (the database and its WAL or rollback journal):

* a recording VFS, registered in the very SQLite library the stdlib ``sqlite3`` module uses
  (through ctypes; it wraps that library's default VFS and passes every call through), logs
  each write, truncate and sync of the files under one directory.  Nothing is held back while
  the ledger runs: it reads and writes its real files as always;
* from that log each file has a *durable image* (its contents as of its last completed sync)
  and a list of *pending* writes since then.  A **cut** is a moment at which power fails: just
  before each sync starts (the widest window: everything since the last sync is unsynced) and
  just after each operation returned (its acknowledgement);
* at a cut, ALICE-style, any **prefix** of the pending writes (in the order they were issued,
  across the files) may have reached the disk, and the write after the prefix may be **torn**
  (only its first sectors written).  Each such choice is a crash state: the files are written
  out to a fresh directory (the ``-shm`` index is not: it is rebuilt from the WAL on open) and
  the ledger is reopened there and checked.

Limits (docs/chaos.md): file creation and deletion count as durable at once (no directory
fsync is modelled); within the pending writes only prefixes are tried, not arbitrary subsets or
reorderings (a disk's own cache may reorder); tearing is at 512-byte sectors of the first write
left out; the disk itself never loses synced data.
"""

from __future__ import annotations

import ctypes
import os
import random
import shutil
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SECTOR = 512
VFS_NAME = b"ledgercheck-powerloss"


class PowerLossError(Exception):
    """Power loss cannot be simulated here (one line)."""


# ----------------------------------------------------------------------------- the C structs
_c = ctypes
_P = _c.c_void_p


class _IoMethods(_c.Structure):
    pass


class _File(_c.Structure):
    _fields_ = [("pMethods", _c.POINTER(_IoMethods))]


_xClose = _c.CFUNCTYPE(_c.c_int, _P)
_xRead = _c.CFUNCTYPE(_c.c_int, _P, _P, _c.c_int, _c.c_int64)
_xWrite = _c.CFUNCTYPE(_c.c_int, _P, _P, _c.c_int, _c.c_int64)
_xTruncate = _c.CFUNCTYPE(_c.c_int, _P, _c.c_int64)
_xSync = _c.CFUNCTYPE(_c.c_int, _P, _c.c_int)
_IoMethods._fields_ = [
    ("iVersion", _c.c_int), ("xClose", _xClose), ("xRead", _xRead), ("xWrite", _xWrite),
    ("xTruncate", _xTruncate), ("xSync", _xSync),
    *[(n, _P) for n in ("xFileSize", "xLock", "xUnlock", "xCheckReservedLock", "xFileControl", "xSectorSize",
                        "xDeviceCharacteristics", "xShmMap", "xShmLock", "xShmBarrier", "xShmUnmap", "xFetch",
                        "xUnfetch")],
]


class _Vfs(_c.Structure):
    pass


# file names pass as raw pointers: the base VFS keeps the pointer it is given for the file's
# life (the -shm name is built from it), so it must be SQLite's own string, never a copy
_xOpen = _c.CFUNCTYPE(_c.c_int, _c.POINTER(_Vfs), _P, _P, _c.c_int, _c.POINTER(_c.c_int))
_xDelete = _c.CFUNCTYPE(_c.c_int, _c.POINTER(_Vfs), _P, _c.c_int)
_Vfs._fields_ = [
    ("iVersion", _c.c_int), ("szOsFile", _c.c_int), ("mxPathname", _c.c_int), ("pNext", _P),
    ("zName", _c.c_char_p), ("pAppData", _P), ("xOpen", _xOpen), ("xDelete", _xDelete),
    *[(n, _P) for n in ("xAccess", "xFullPathname", "xDlOpen", "xDlError", "xDlSym", "xDlClose", "xRandomness",
                        "xSleep", "xCurrentTime", "xGetLastError", "xCurrentTimeInt64", "xSetSystemCall",
                        "xGetSystemCall", "xNextSystemCall")],
]


def _sqlite_library() -> ctypes.CDLL:
    """The SQLite library the stdlib ``sqlite3`` module runs on (the one the ledger uses)."""
    import _sqlite3  # noqa: F401  (loads the library first, so dlopen below finds the same copy)

    for name in ("libsqlite3.so.0", "libsqlite3.so", "libsqlite3.dylib"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        lib.sqlite3_libversion.restype = ctypes.c_char_p
        if lib.sqlite3_libversion().decode() == sqlite3.sqlite_version:
            return lib
    raise PowerLossError(f"power loss: cannot reach the SQLite library of Python's sqlite3 module "
                         f"(version {sqlite3.sqlite_version}) as a shared library to register a VFS in it")


# ----------------------------------------------------------------------------- the log
@dataclass
class _Write:
    seq: int
    path: str
    offset: int
    data: bytes | None  # None: a truncate to ``offset``


@dataclass
class Cut:
    """A moment power may fail: each file's durable image and the writes pending since."""

    label: str  # "open" / "sync" (just before a sync began, during / after the ledger's open) or
    #             "ack" (just after an operation returned)
    op_index: int  # operations acknowledged before this cut
    durable: dict[str, bytes]
    pending: list[_Write]


@dataclass
class Recording:
    root: str
    durable: dict[str, bytearray] = field(default_factory=dict)
    pending: dict[str, list[_Write]] = field(default_factory=dict)
    cuts: list[Cut] = field(default_factory=list)
    seq: int = 0
    syncs: int = 0
    writes: int = 0
    op_index: int = 0
    opened: bool = False  # the ledger's open returned (cuts before it are labelled "open")

    def watches(self, path: str) -> bool:
        return path.startswith(self.root + os.sep)

    def cut(self, label: str) -> None:
        pend = sorted((w for ws in self.pending.values() for w in ws), key=lambda w: w.seq)
        self.cuts.append(Cut(label, self.op_index, {p: bytes(b) for p, b in self.durable.items()}, pend))


def _apply(image: bytearray, w: _Write, upto: int | None = None) -> None:
    if w.data is None:
        del image[w.offset:]
        return
    data = w.data if upto is None else w.data[:upto]
    end = w.offset + len(data)
    if len(image) < w.offset:
        image.extend(b"\0" * (w.offset - len(image)))
    image[w.offset:end] = data


class _PowerVfs:
    """The recording VFS: one per process, registered once, recording while a Recording is set."""

    _instance: _PowerVfs | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        lib = _sqlite_library()
        lib.sqlite3_vfs_find.restype = ctypes.POINTER(_Vfs)
        lib.sqlite3_vfs_find.argtypes = [ctypes.c_char_p]
        lib.sqlite3_vfs_register.argtypes = [ctypes.POINTER(_Vfs), ctypes.c_int]
        self.lib = lib
        base = lib.sqlite3_vfs_find(None)
        if not base:
            raise PowerLossError("power loss: SQLite has no default VFS to wrap")
        self.base = base
        self.base_name = base.contents.zName
        self.names: dict[int, str] = {}  # sqlite3_file address -> path, for the files being recorded
        self.methods: dict[int, tuple[_IoMethods, _IoMethods]] = {}  # original address -> (original, wrapped)
        self._orig_of: dict[int, _IoMethods] = {}  # sqlite3_file address -> the base's methods for it
        self.rec: Recording | None = None
        self._keep: list[Any] = []
        vfs = _Vfs()
        ctypes.pointer(vfs)[0] = base.contents  # a copy: every call the wrapper does not override goes to the base
        vfs.zName = VFS_NAME
        vfs.pNext = None
        vfs.xOpen = _xOpen(self._open)
        vfs.xDelete = _xDelete(self._delete)
        self.vfs = vfs
        self._cb = (_xClose(self._close), _xWrite(self._write), _xTruncate(self._truncate), _xSync(self._sync))
        if lib.sqlite3_vfs_register(ctypes.byref(vfs), 0) != 0:
            raise PowerLossError("power loss: SQLite refused to register the recording VFS")

    @classmethod
    def get(cls) -> _PowerVfs:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    # --- VFS calls (SQLite's thread; ctypes takes the GIL) ---
    def _open(self, _vfs: Any, zname: int | None, pfile: int, flags: int, pout: Any) -> int:
        rc = self.base.contents.xOpen(self.base, zname, pfile, flags, pout)
        rec = self.rec
        if rc != 0 or not zname or rec is None:
            return rc
        path = os.fsdecode(ctypes.string_at(zname))
        if not rec.watches(path):
            return rc
        f = ctypes.cast(pfile, ctypes.POINTER(_File)).contents
        orig_addr = ctypes.addressof(f.pMethods.contents)
        if orig_addr not in self.methods:
            orig = f.pMethods.contents
            wrapped = _IoMethods()
            ctypes.pointer(wrapped)[0] = orig
            wrapped.xClose, wrapped.xWrite, wrapped.xTruncate, wrapped.xSync = self._cb
            self.methods[orig_addr] = (orig, wrapped)
            self._keep.append(wrapped)
        f.pMethods = ctypes.pointer(self.methods[orig_addr][1])
        self.names[pfile] = path
        self._orig_of[pfile] = self.methods[orig_addr][0]
        if path not in rec.durable:
            try:  # a file that existed before recording began counts as durable as it stands
                rec.durable[path] = bytearray(Path(path).read_bytes())
            except OSError:
                rec.durable[path] = bytearray()
            rec.pending[path] = []
        return rc

    def _delete(self, _vfs: Any, zname: int, syncdir: int) -> int:
        rec = self.rec
        if rec is not None and zname:
            path = os.fsdecode(ctypes.string_at(zname))
            rec.durable.pop(path, None)  # deletion is durable at once (no directory sync modelled)
            rec.pending.pop(path, None)
        return self.base.contents.xDelete(self.base, zname, syncdir)

    def _orig(self, pfile: int) -> _IoMethods:
        return self._orig_of[pfile]

    def _close(self, pfile: int) -> int:
        orig = self._orig(pfile)
        self.names.pop(pfile, None)
        self._orig_of.pop(pfile, None)
        return orig.xClose(pfile)

    def _log(self, pfile: int, offset: int, data: bytes | None) -> None:
        rec, path = self.rec, self.names.get(pfile)
        if rec is None or path is None or path not in rec.pending:
            return
        rec.seq += 1
        rec.writes += 1
        rec.pending[path].append(_Write(rec.seq, path, offset, data))

    def _write(self, pfile: int, buf: int, amt: int, offset: int) -> int:
        rc = self._orig(pfile).xWrite(pfile, buf, amt, offset)
        if rc == 0:
            self._log(pfile, offset, ctypes.string_at(buf, amt))
        return rc

    def _truncate(self, pfile: int, size: int) -> int:
        rc = self._orig(pfile).xTruncate(pfile, size)
        if rc == 0:
            self._log(pfile, size, None)
        return rc

    def _sync(self, pfile: int, flags: int) -> int:
        rec, path = self.rec, self.names.get(pfile)
        if rec is not None and path is not None and path in rec.pending:
            rec.cut("sync" if rec.opened else "open")
        rc = self._orig(pfile).xSync(pfile, flags)
        if rc == 0 and rec is not None and path is not None and path in rec.pending:
            rec.syncs += 1
            image = rec.durable[path]
            for w in rec.pending[path]:
                _apply(image, w)
            rec.pending[path] = []
        return rc


@contextmanager
def recording(root: str | os.PathLike[str]) -> Iterator[Recording]:
    """Record the writes and syncs of SQLite files under ``root`` opened inside the block.

    Connections opened inside the block use the recording VFS for their whole life (SQLite
    binds a connection to its VFS when it opens); those opened elsewhere are untouched.  Only
    what happens inside the block is recorded: run the whole workload in it.
    """
    pv = _PowerVfs.get()
    if pv.rec is not None:
        raise PowerLossError("power loss: a recording is already running in this process")
    rec = Recording(os.path.realpath(os.fspath(root)))
    pv.rec = rec
    pv.lib.sqlite3_vfs_register(ctypes.byref(pv.vfs), 1)  # default while the block runs
    try:
        yield rec
    finally:
        pv.lib.sqlite3_vfs_register(pv.base, 1)
        pv.rec = None


# ----------------------------------------------------------------------------- crash states
@dataclass(frozen=True)
class CrashState:
    cut: int  # index into Recording.cuts
    kept: int  # pending writes that reached the disk (a prefix)
    torn: int  # bytes of the next pending write that reached it as well (0: none)

    def describe(self, rec: Recording) -> str:
        c = rec.cuts[self.cut]
        t = f", write {self.kept + 1} torn after {self.torn} bytes" if self.torn else ""
        return (f"power cut {self.cut} ({c.label}, {c.op_index} operation(s) acknowledged): "
                f"{self.kept} of {len(c.pending)} unsynced write(s) kept{t}")


def states_at(rec: Recording, index: int, rng: random.Random, budget: int) -> list[CrashState]:
    """The crash states tried at cut ``index``: none, all and (up to ``budget``) other prefixes
    of its pending writes, each also with the next write torn at a sector boundary."""
    n = len(rec.cuts[index].pending)
    kept = sorted({0, n, *rng.sample(range(1, n), min(max(n - 1, 0), budget))}) if n else [0]
    out = []
    for k in kept:
        out.append(CrashState(index, k, 0))
        if k < n:
            w = rec.cuts[index].pending[k]
            if w.data is not None and len(w.data) > SECTOR:
                out.append(CrashState(index, k, SECTOR * rng.randrange(1, (len(w.data) - 1) // SECTOR + 1)))
    return out


def materialise(rec: Recording, state: CrashState, dest: Path) -> dict[str, Path]:
    """Write the files of ``state`` under ``dest`` (same names relative to the recorded root)."""
    cut = rec.cuts[state.cut]
    images = {p: bytearray(b) for p, b in cut.durable.items()}
    for i, w in enumerate(cut.pending[:state.kept + (1 if state.torn else 0)]):
        if w.path in images:
            _apply(images[w.path], w, state.torn if i == state.kept else None)
    if dest.exists():
        shutil.rmtree(dest)
    out = {}
    for p, image in images.items():
        target = dest / os.path.relpath(p, rec.root)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(bytes(image))
        out[p] = target
    return out


# ----------------------------------------------------------------------------- the check
Opener = Callable[[Path], Any]  # path of the ledger file -> an open reference-style Ledger


@dataclass
class Finding:
    state: str
    problem: str


@dataclass
class PowerLossResult:
    seed: int
    synchronous: str
    operations: int
    cuts: int
    states: int
    writes: int
    syncs: int
    findings: list[Finding]
    refused: int = 0  # crash states cut while the ledger was being created, refused with one line

    @property
    def ok(self) -> bool:
        return not self.findings

    def summary(self) -> str:
        return (f"power loss seed {self.seed} (synchronous={self.synchronous}): {self.operations} operations, "
                f"{self.writes} writes, {self.syncs} syncs, {self.cuts} cuts, {self.states} crash states, "
                f"{self.refused} half-made file(s) refused, {len(self.findings)} finding(s)")


def _workload(spec: Any, rng: random.Random, items: int) -> list[tuple[str, str]]:
    """A seeded interleaving of create -> claim -> close out, per item."""
    steps: dict[str, list[str]] = {f"w{i}": ["create", "claim", "close_out"] for i in range(items)}
    order: list[tuple[str, str]] = []
    live = list(steps)
    while live:
        item = rng.choice(live)
        order.append((item, steps[item].pop(0)))
        if not steps[item]:
            live.remove(item)
    return order


def run_power_loss(workdir: str | os.PathLike[str], *, seed: int = 0, synchronous: str = "FULL", items: int = 4,
                   budget: int = 3, opener: Callable[[Path, str], Any] | None = None,
                   spec: Any = None) -> PowerLossResult:
    """Run a seeded workload on a fresh reference ledger under the recording VFS, then reopen
    every crash state and check it against what had been acknowledged at its cut.

    At a cut after k acknowledged operations every item must show at least the effect of its
    acknowledged operations; it may also show the one operation in flight, nothing later.  A
    crash state that does not reopen as a ledger, or fails SQLite's integrity check, is a
    finding too.
    """
    from ledgercheck.chaos.safety.campaign import SOURCE
    from ledgercheck.reference.ledger import Ledger
    from ledgercheck.reference.opening import LedgerOpenError
    from ledgercheck.transport.protocol import LedgerError

    from .points import DONE

    def default_open(path: Path, sync: str) -> Any:
        return Ledger(path, spec, synchronous=sync)

    open_ledger = opener or default_open
    work = Path(workdir)
    live_dir, states_dir = work / "live", work / "state"
    live_dir.mkdir(parents=True, exist_ok=True)
    db = live_dir / "ledger.db"
    rng = random.Random(seed)
    now = 1000.0
    with recording(live_dir) as rec:
        led = open_ledger(db, synchronous)
        rec.opened = True
        spec = led.spec
        plan = _workload(spec, rng, items)
        # expected[k][item]: the item's status after k acknowledged operations (None: not created)
        expected: list[dict[str, str | None]] = [{item: None for item, _ in plan}]
        ids: dict[str, str] = {}
        tokens: dict[str, str] = {}
        try:
            rec.cut("ack")
            for item, op in plan:
                now += 1.0
                if op == "create":
                    r = led.create(source_system=SOURCE, source_id=item, now=now)["work"]
                    ids[item] = r["work_id"]
                elif op == "claim":
                    r = led.claim(owner=f"worker-{item}", now=now, work_id=ids[item])
                    tokens[item] = r["lease_token"]
                else:
                    r = led.close_out(work_id=ids[item], token=tokens[item], status=DONE, now=now,
                                      result={"item": item})
                state = dict(expected[-1])
                state[item] = r["status"]
                expected.append(state)
                rec.op_index += 1
                rec.cut("ack")
        finally:
            led.discard()  # the live file is not looked at again: no closing checkpoint needed
    findings: list[Finding] = []
    tried = refused = 0
    for index in range(len(rec.cuts)):
        for cs in states_at(rec, index, rng, budget):
            tried += 1
            k = rec.cuts[index].op_index
            allowed_next = expected[k + 1] if k + 1 < len(expected) else expected[k]
            files = materialise(rec, cs, states_dir)
            path = files.get(str(db.resolve()), states_dir / db.name)
            where = cs.describe(rec)
            try:
                back = open_ledger(path, synchronous)
            except (LedgerOpenError, LedgerError) as exc:
                if rec.cuts[index].label == "open" and isinstance(exc, LedgerOpenError):
                    refused += 1  # power failed while the ledger was being made: nothing was acknowledged yet,
                    continue  # and refusing the half-made file with one line is the right answer
                findings.append(Finding(where, f"the ledger does not reopen: {exc}"))
                continue
            try:
                bad = back.integrity_check()
                rows = [] if bad else back.list()
            except LedgerError as exc:  # a damaged file SQLite only notices when it reads the page
                findings.append(Finding(where, f"the reopened ledger fails: {exc}"))
                continue
            finally:
                back.discard()
            if bad:
                findings.append(Finding(where, f"integrity check: {bad[0]}"))
                continue
            have: dict[str, str | None] = {item: None for item in expected[0]}
            by_id = {wid: item for item, wid in ids.items()}
            for row in rows:
                if row["work_id"] in by_id:
                    have[by_id[row["work_id"]]] = row["status"]
            for item in expected[0]:
                if have[item] not in (expected[k][item], allowed_next[item]):
                    step = next((i for i in range(k, 0, -1) if expected[i][item] != expected[i - 1][item]), 0)
                    op = plan[step - 1][1] if step else "nothing"
                    findings.append(Finding(where, f"acknowledged {op} of {item} lost: status "
                                                   f"{have[item] or 'absent'}, acknowledged {expected[k][item]}"))
    return PowerLossResult(seed, synchronous, len(plan), len(rec.cuts), tried, rec.writes, rec.syncs, findings, refused)


def describe(result: PowerLossResult, limit: int = 5) -> str:
    lines = [result.summary()]
    lines += [f"  {f.state}: {f.problem}" for f in result.findings[:limit]]
    if len(result.findings) > limit:
        lines.append(f"  ... and {len(result.findings) - limit} more")
    return "\n".join(lines)


__all__ = ["recording", "run_power_loss", "PowerLossError", "describe", "materialise",
                                          "states_at", "CrashState", "Recording"]


# ----------------------------------------------------------------------------- PostgreSQL
@dataclass
class PgStopResult:
    settings: dict[str, str]
    committed: int  # commits acknowledged to the client before the stop
    survived: int  # rows found after the restart
    prefix: bool  # the survivors are exactly the first ``survived`` commits

    def summary(self) -> str:
        conf = ", ".join(f"{k}={v}" for k, v in sorted(self.settings.items()))
        return (f"PostgreSQL ({conf}) stopped with -m immediate after {self.committed} acknowledged commits: "
                f"{self.survived} survived ({self.committed - self.survived} lost"
                f"{'' if self.prefix else ', NOT a prefix of the commit order'})")


def pg_immediate_stop(settings: Mapping[str, str], commits: int = 200) -> PgStopResult:
    """Commit ``commits`` one-row transactions (each acknowledged), stop the server with
    ``pg_ctl stop -m immediate`` (every server process exits at once, nothing flushed; the
    operating system keeps what was written to it), start it again on the same data directory
    and count what survived.

    This is a process crash of the server, not a power cut: with ``fsync=off`` the writes the
    server made are still in the page cache and survive; ``synchronous_commit=off`` loses the
    commits whose WAL was still in the server's own buffers (up to ``wal_writer_delay``).
    """
    import psycopg
    from ledgercheck.services.postgres import PostgresServer

    conf = {"max_connections": "20", "shared_buffers": "16MB", **settings}
    server = PostgresServer(settings=dict(conf), watchdog=False)
    server.start()
    try:
        assert server.root is not None
        data = server.root / "data"
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute("CREATE TABLE acked (n integer PRIMARY KEY)")
            for n in range(1, commits + 1):
                conn.execute("INSERT INTO acked VALUES (%s)", (n,))  # autocommit: returned = acknowledged
        server._run(["pg_ctl", "stop", "-D", str(data), "-m", "immediate", "-w"], timeout=60)
        opts = [f"-c listen_addresses={server.host}", f"-p {server.port}", f"-k {server.root / 'sock'}"]
        opts += [f"-c {k}={v}" for k, v in conf.items()]
        server._run(["pg_ctl", "start", "-D", str(data), "-l", str(server.root / "server.log"), "-w",
                     "-t", str(int(server.start_timeout)), "-o", " ".join(opts)], timeout=server.start_timeout + 10)
        server.pid = server._read_pid(data)
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            have = [r[0] for r in conn.execute("SELECT n FROM acked ORDER BY n").fetchall()]
    finally:
        server.stop()
    return PgStopResult(dict(settings), commits, len(have), have == list(range(1, len(have) + 1)))
