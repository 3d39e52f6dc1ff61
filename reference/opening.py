"""Opening a ledger file: refuse anything that is not a usable ledger with one clear line.

Checks run before SQLite is trusted with the file: the directory exists, the path is a file,
its header is a SQLite header, and the file is as long as its header says (a truncated copy of
a ledger is caught here instead of failing later in the middle of an operation).  After that
the database must carry the ledger's application id and schema version and have been created
for a contract of the same shape.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ledgercheck.spec import Spec
from ledgercheck.transport.protocol import LedgerError

from .schema import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    TABLES,
    contract_shape,
    create_schema,
    rules_out_of_date,
    sync_rules,
)

SQLITE_MAGIC = b"SQLite format 3\x00"
T = TypeVar("T")


class LedgerOpenError(Exception):
    """The file is not a usable ledger; the message is one line and names the file."""


def check_file(path: Path, create: bool) -> None:
    """Refuse paths that cannot hold a ledger, before SQLite touches them."""
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise LedgerOpenError(f"{path}: directory {parent} does not exist")
    if path.is_dir():
        raise LedgerOpenError(f"{path}: is a directory, not a ledger file")
    if not path.exists():
        if not create:
            raise LedgerOpenError(f"{path}: no such ledger file")
        return
    try:
        with open(path, "rb") as fh:
            head = fh.read(100)
        size = path.stat().st_size
    except OSError as exc:
        raise LedgerOpenError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not head:
        if not create:
            raise LedgerOpenError(f"{path}: empty file, not a ledger")
        return
    if not head.startswith(SQLITE_MAGIC):
        raise LedgerOpenError(f"{path}: not a SQLite database (bad header)")
    if len(head) < 100:
        raise LedgerOpenError(f"{path}: truncated SQLite file ({size} bytes, shorter than its header)")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        raise LedgerOpenError(f"{path}: corrupt SQLite header (page size {page_size})")
    if size % page_size:
        raise LedgerOpenError(f"{path}: truncated or corrupt ({size} bytes is not a whole number of {page_size}-byte pages)")
    pages = int.from_bytes(head[28:32], "big")
    header_valid = head[24:28] == head[92:96]
    wal = Path(str(path) + "-wal")
    wal_frames = wal.exists() and wal.stat().st_size > 32
    if header_valid and pages and size < pages * page_size and not wal_frames:
        raise LedgerOpenError(f"{path}: truncated ({size} bytes, the header records {pages} pages of {page_size} bytes)")


def classify(exc: sqlite3.Error) -> str:
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        return "busy"
    return "other"


FIRST_PAUSE = 0.0005  # seconds before the first retry of a locked database (see while_busy)
LONGEST_PAUSE = 0.002
_jitter = random.SystemRandom().random  # (from the OS: processes forked from one parent draw apart)


def while_busy(fn: Callable[[], T], timeout: float) -> T:
    """``fn()``, retried while the database is locked, until ``timeout`` seconds have passed.

    The first retry comes after about half a millisecond and the pause doubles up to 2 ms, each
    drawn between half and one and a half times its step (so contenders do not retry in step).
    A writer's transaction lasts about a hundred microseconds, and its next one follows within
    tens: a contender that retried sooner (from 50 us, as this once did) took the lock in those
    gaps, the writers then took turns transaction by transaction, and every turn made SQLite
    reload what the other process had changed -- two processes wrote 0.4-0.5x as fast as raw
    sqlite3 with its own busy handler (bench/bench_reference.py), which lets the holder run on.
    Waiting half a millisecond lets the holder finish a few transactions in a row (0.7-0.9x).
    SQLite's own handler sleeps up to 100 ms between tries, and a connection waiting that way
    loses every race against writers that retry every few milliseconds: opening a ledger beside
    busy workers starved on it for the whole busy timeout (tests/reference/test_concurrency.py).
    """
    try:
        return fn()
    except sqlite3.OperationalError as exc:
        if classify(exc) != "busy":
            raise
    return busy_retries(fn, timeout)


def busy_retries(fn: Callable[[], T], timeout: float) -> T:
    """:func:`while_busy` after its first try of ``fn()`` met a locked database: the retries."""
    deadline = time.monotonic() + timeout
    step = FIRST_PAUSE
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise sqlite3.OperationalError("database is locked")
        time.sleep(min(step * (0.5 + _jitter()), left))
        step = min(step * 2, LONGEST_PAUSE)
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if classify(exc) != "busy":
                raise


def _in_transaction(conn: sqlite3.Connection, body: Callable[[], None]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        body()
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def prepare(conn: sqlite3.Connection, path: Path, spec: Spec, synchronous: str, busy_ms: int) -> None:
    """Set the connection up, create the schema in a new file, and validate an existing one.

    Every step that may meet a lock waits in short steps (``while_busy``), never in SQLite's
    own busy handler.
    """
    timeout = busy_ms / 1000
    conn.execute("PRAGMA busy_timeout = 0")

    def wait(fn: Callable[[], T]) -> T:
        return while_busy(fn, timeout)

    mode = wait(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
    if str(mode).lower() != "wal":
        raise LedgerOpenError(f"{path}: cannot switch to WAL mode (got {mode})")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("PRAGMA foreign_keys = ON")

    def create() -> None:
        if _is_blank(conn):
            create_schema(conn, spec)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    if wait(lambda: _is_blank(conn)):
        wait(lambda: _in_transaction(conn, create))
    wait(lambda: _validate(conn, path, spec))
    contract = _contract_text(spec)

    def sync() -> None:
        sync_rules(conn, spec)
        conn.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", [
            ("contract_digest", spec.digest), ("contract", contract), ("contract_version", spec.version)])

    stored = wait(lambda: conn.execute("SELECT value FROM meta WHERE key = 'contract_digest'").fetchone())
    if stored is None or stored[0] != spec.digest or wait(lambda: rules_out_of_date(conn, spec)):
        wait(lambda: _in_transaction(conn, sync))


def _is_blank(conn: sqlite3.Connection) -> bool:
    app = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    return app == 0 and version == 0 and tables == 0


def _validate(conn: sqlite3.Connection, path: Path, spec: Spec) -> None:
    app = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if app != APPLICATION_ID:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name LIMIT 4")]
        what = f"tables {', '.join(names)}" if names else "no tables"
        raise LedgerOpenError(f"{path}: a SQLite database but not a ledgercheck ledger (application_id {app:#x}, {what})")
    if version != SCHEMA_VERSION:
        raise LedgerOpenError(f"{path}: ledger schema version {version}, this ledgercheck reads version {SCHEMA_VERSION}")
    have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    missing = [t for t in TABLES if t not in have]
    if missing:
        raise LedgerOpenError(f"{path}: damaged ledger, table(s) {', '.join(missing)} missing")
    row = conn.execute("SELECT value FROM meta WHERE key = 'contract_shape'").fetchone()
    if row is None:
        raise LedgerOpenError(f"{path}: damaged ledger, no contract shape recorded")
    stored, want = json.loads(row[0]), contract_shape(spec)
    if stored != want:
        diff = [k for k in want if stored.get(k) != want[k]]
        detail = ""
        if "statuses" in diff:
            detail = f": it has statuses {', '.join(stored.get('statuses', {}))}, the contract has {', '.join(want['statuses'])}"
        raise LedgerOpenError(f"{path}: created for a contract with different {', '.join(diff)}{detail}")


_TEXT: dict[str, str] = {}


def _contract_text(spec: Spec) -> str:
    # keys keep the contract's order (canonical JSON would sort them, and the order of mappings
    # such as statuses and source systems is part of how a Spec is read back); cached per digest
    text = _TEXT.get(spec.digest)
    if text is None:
        if len(_TEXT) > 16:
            _TEXT.clear()
        text = _TEXT[spec.digest] = json.dumps(_plain(spec.document), ensure_ascii=False, separators=(",", ":"))
    return text


def _plain(value: object) -> object:
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}  # type: ignore[attr-defined]
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def stored_contract(path: str | os.PathLike[str], busy_timeout: float = 5.0) -> dict[str, object] | None:
    """The contract document a ledger file was last opened with (the file is only read), or None."""
    p = Path(path)
    check_file(p, create=False)
    try:
        conn = sqlite3.connect(str(p), timeout=busy_timeout)
        try:
            if conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
                return None
            row = conn.execute("SELECT value FROM meta WHERE key = 'contract'").fetchone()
        finally:
            conn.close()
        return None if row is None else json.loads(row[0])
    except sqlite3.DatabaseError as exc:
        if classify(exc) == "busy":
            raise LedgerError("busy", f"{p}: database stayed locked past the busy timeout") from None
        raise LedgerOpenError(f"{p}: not a usable ledger database ({exc})") from None
    except ValueError as exc:  # undecodable text or JSON: the file is damaged
        raise LedgerOpenError(f"{p}: damaged ledger database ({type(exc).__name__}: {exc})") from None
