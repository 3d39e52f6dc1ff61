"""Bad files and locked databases: one clear line naming the file, never a traceback or a hang."""

from __future__ import annotations

import contextlib
import io
import random
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ledgercheck.reference.ledger import Ledger, LedgerOpenError
from ledgercheck.reference.verify import verify
from ledgercheck.transport.protocol import LedgerError

from ledgercheck.cli import main

CLI = [sys.executable, "-m", "ledgercheck"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The operator CLI through its real entry point, in this process (an escaping exception fails the test)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(args))
    return subprocess.CompletedProcess(["ledgercheck", *args], rc, out.getvalue(), err.getvalue())


def cli_process(*args: str) -> subprocess.CompletedProcess[str]:
    """The same in a real process (exit status and stderr as a shell sees them); the timeout guards against a hang."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600)


def one_line_error(res: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


def real_ledger(path: Path, items: int = 400) -> None:
    with Ledger(path) as led:
        for i in range(items):
            w = led.create(source_system="manual", source_id=f"s{i}", payload={"blob": "x" * 200}, now=0.0)["work"]
            if i % 2:
                led.claim(owner="w", work_id=w["work_id"], now=1.0)
    assert not Path(str(path) + "-wal").exists()  # closed cleanly: everything is in the main file


def test_random_bytes(tmp_path: Path) -> None:
    bad = tmp_path / "noise.db"
    bad.write_bytes(random.Random(1).randbytes(8192))
    with pytest.raises(LedgerOpenError, match="not a SQLite database") as info:
        Ledger(bad)
    assert str(bad) in str(info.value) and "\n" not in str(info.value)
    one_line_error(cli_process("ledger", "list", "--db", str(bad)), 2, str(bad), "not a SQLite database")


def test_random_bytes_behind_a_sqlite_header(tmp_path: Path) -> None:
    bad = tmp_path / "fake.db"
    bad.write_bytes(b"SQLite format 3\x00" + random.Random(2).randbytes(4096 - 16))
    with pytest.raises(LedgerOpenError) as info:
        Ledger(bad)
    assert str(bad) in str(info.value)
    one_line_error(cli("ledger", "verify", "--db", str(bad)), 2, str(bad))


@pytest.mark.parametrize("keep", [0.5, 0.97, 50 / 8192])
def test_truncated_ledger(tmp_path: Path, keep: float) -> None:
    path = tmp_path / "ledger.db"
    real_ledger(path)
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate(max(20, int(size * keep)))
    with pytest.raises(LedgerOpenError, match="truncated") as info:
        Ledger(path)
    assert str(path) in str(info.value)
    one_line_error(cli("ledger", "list", "--db", str(path)), 2, str(path), "truncated")


def test_truncated_to_a_page_boundary(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    real_ledger(path)
    page = 4096
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size // page // 2 * page)
    with pytest.raises(LedgerOpenError, match="truncated"):
        Ledger(path)


def test_corrupted_pages_never_leak_a_raw_error(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    real_ledger(path, items=200)
    rng = random.Random(3)
    data = bytearray(path.read_bytes())
    for _ in range(40):  # scribble over b-tree pages, leaving the header alone
        at = rng.randrange(4096, len(data) - 64)
        data[at:at + 64] = rng.randbytes(64)
    path.write_bytes(bytes(data))
    try:
        with Ledger(path) as led:
            found = verify(led)
            assert found, "forty scribbled blocks went unnoticed"
    except (LedgerOpenError, LedgerError) as exc:  # the only ways a bad file may surface
        assert str(path) in str(exc)
    res = cli("ledger", "verify", "--db", str(path))
    assert res.returncode in (1, 2) and "Traceback" not in res.stderr


def test_foreign_sqlite_database(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    c = sqlite3.connect(path)
    c.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    c.execute("INSERT INTO users(name) VALUES ('ada')")
    c.commit()
    c.close()
    with pytest.raises(LedgerOpenError, match="not a ledgercheck ledger") as info:
        Ledger(path)
    assert str(path) in str(info.value) and "users" in str(info.value)
    one_line_error(cli("ledger", "list", "--db", str(path)), 2, str(path), "not a ledgercheck ledger")
    c = sqlite3.connect(path)
    assert c.execute("SELECT name FROM users").fetchall() == [("ada",)]  # left untouched
    c.close()


def test_missing_directory_and_file(tmp_path: Path) -> None:
    path = tmp_path / "no" / "such" / "dir" / "ledger.db"
    with pytest.raises(LedgerOpenError, match="does not exist") as info:
        Ledger(path)
    assert str(path) in str(info.value)
    one_line_error(cli("ledger", "list", "--db", str(path)), 2, str(path), "does not exist")
    missing = tmp_path / "typo.db"
    one_line_error(cli("ledger", "recover", "--db", str(missing)), 2, str(missing), "no such ledger file")
    assert not missing.exists()  # the operator CLI never creates a ledger by accident
    with pytest.raises(LedgerOpenError, match="is a directory"):
        Ledger(tmp_path)


def test_locked_database_is_waited_for_then_refused_busy(procs: list[str], tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path) as led:
        w = led.create(source_system="manual", source_id="a", now=0.0)["work"]
    led = Ledger(path, busy_timeout=0.3)
    locker = subprocess.Popen([*procs, "lock", str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout is not None and locker.stdout.readline().strip() == "locked"
        for fn, kw in [(led.create, {"source_system": "manual", "source_id": "b", "now": 1.0}), (led.claim, {"owner": "w", "now": 1.0}),
                       (led.expire, {"now": 1.0}), (led.recover, {"now": 1.0})]:
            with pytest.raises(LedgerError) as info:
                fn(**kw)
            assert info.value.code == "busy" and info.value.definite and str(path) in info.value.message
        assert led.get(work_id=w["work_id"]) == w and [x["work_id"] for x in led.list()] == [w["work_id"]]  # readers go on
        one_line_error(cli_process("ledger", "recover", "--db", str(path), "--busy-timeout", "0.2"), 1, "busy")
        assert cli("ledger", "list", "--db", str(path), "--busy-timeout", "0.2").returncode == 0
    finally:
        locker.kill()
        locker.wait()
    assert led.claim(owner="w", now=2.0)["work_id"] == w["work_id"]  # the lock is gone: business as usual
    led.close()


def test_opening_a_new_ledger_on_a_locked_file_is_refused_busy(procs: list[str], tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    sqlite3.connect(path).close()  # an empty database someone else is about to write
    locker = subprocess.Popen([*procs, "lock", str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout is not None and locker.stdout.readline().strip() == "locked"
        with pytest.raises(LedgerError) as info:
            Ledger(path, busy_timeout=0.2)
        assert info.value.code == "busy" and str(path) in info.value.message
    finally:
        locker.kill()
        locker.wait()
    with Ledger(path) as led:
        assert led.list() == []


@pytest.mark.parametrize("bad", ["1,2", "{\"a\": 1", "]", "", None, 7])
def test_damaged_event_data_is_a_ledger_error(tmp_path: Path, bad: object) -> None:
    """An item's trail is parsed in one go; a data column that is not exactly one JSON value
    (two values, a broken one, not text at all) is reported as damage, never mis-split."""
    with Ledger(tmp_path / "ledger.db") as led:
        wid = led.create(source_system="manual", source_id="a", now=1.0)["work"]["work_id"]
        good = led.events(work_id=wid)
        assert [e["type"] for e in good] == ["work_created"]
    rows = [(wid, 1, "work_created", None, "queued", 1.0, "x", "{}"), (wid, 2, "claimed", "queued", "running", 2.0, "x", bad)]

    class TrailRows:  # the file's rows as a damaged file would give them (the schema keeps such rows out)
        def __init__(self, real: Any) -> None:
            self.real = real

        def execute(self, sql: str, params: Any = ()) -> Any:
            if "FROM work_event" in sql:
                return SimpleNamespace(fetchall=lambda: rows, fetchone=lambda: rows[0])
            return self.real.execute(sql, params)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.real, name)

    with Ledger(tmp_path / "ledger.db") as led:  # a new connection: nothing of the trail is held yet
        led.conn = TrailRows(led.conn)  # type: ignore[assignment]
        with pytest.raises(LedgerError) as info:
            led.events(work_id=wid)
        led.conn = led.conn.real
        assert info.value.code == "internal" and "damaged" in info.value.message and str(tmp_path) in info.value.message
