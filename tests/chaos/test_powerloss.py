"""Power loss (chaos/crash/powerloss.py): unsynced writes dropped, the reference reopened on what survived.

The recording VFS must reproduce the files exactly (every pending write kept = the live files;
none kept = the files as of their last syncs); a ledger that acknowledges before its data is
durable (the reference at synchronous=OFF, and at NORMAL, which in WAL mode syncs only at
checkpoints) must show acknowledged work lost; the reference at FULL must not, over ten seeds
(three in the default run).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from ledgercheck.chaos.crash.powerloss import CrashState, describe, materialise, recording, run_power_loss

DEFAULT_SEEDS = (0, 1, 2)
ALL_SEEDS = tuple(range(10))


def _seeds():
    return [pytest.param(s, marks=[] if s in DEFAULT_SEEDS else [pytest.mark.thorough]) for s in ALL_SEEDS]


def test_crash_states_rebuild_the_files_exactly(tmp_path: Path) -> None:
    live = tmp_path / "live"
    live.mkdir()
    with recording(live) as rec:
        conn = sqlite3.connect(str(live / "t.db"), isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("CREATE TABLE t(x)")
        conn.execute("PRAGMA synchronous = OFF")  # the next commits stay pending
        for i in range(50):
            conn.execute("INSERT INTO t VALUES (?)", (str(i) * 300,))
        rec.cut("ack")
    # the base VFS names the -shm file from the name pointer it was given: it must be SQLite's own
    assert sorted(p.name for p in live.iterdir()) == ["t.db", "t.db-shm", "t.db-wal"]
    cut = rec.cuts[-1]
    assert cut.pending, "commits at synchronous=OFF must leave unsynced writes"
    everything = materialise(rec, CrashState(len(rec.cuts) - 1, len(cut.pending), 0), tmp_path / "all")
    for src, copy in everything.items():
        assert copy.read_bytes() == Path(src).read_bytes(), f"{src}: every write kept must give the live file"
    nothing = materialise(rec, CrashState(len(rec.cuts) - 1, 0, 0), tmp_path / "none")
    for src, copy in nothing.items():
        assert copy.read_bytes() == cut.durable[src]
    conn.close()
    back = sqlite3.connect(str(tmp_path / "none" / "t.db"))
    assert back.execute("SELECT count(*) FROM t").fetchone()[0] == 0, "the unsynced inserts must be gone"
    back.close()
    back = sqlite3.connect(str(tmp_path / "all" / "t.db"))
    assert back.execute("SELECT count(*) FROM t").fetchone()[0] == 50
    back.close()


@pytest.mark.parametrize("seed", _seeds())
def test_reference_at_full_keeps_acknowledged_work(tmp_path: Path, seed: int) -> None:
    result = run_power_loss(tmp_path, seed=seed, synchronous="FULL")
    assert result.states > result.cuts > result.operations
    assert result.ok, describe(result)


@pytest.mark.parametrize("synchronous", ["OFF", "NORMAL"])
def test_acknowledging_before_durable_loses_work(tmp_path: Path, synchronous: str) -> None:
    result = run_power_loss(tmp_path, seed=0, synchronous=synchronous)
    problems = [f.problem for f in result.findings]
    assert any("acknowledged close_out" in p for p in problems), describe(result)
    assert any("acknowledged claim" in p or "acknowledged create" in p for p in problems), describe(result)


# PostgreSQL: a server crash (pg_ctl stop -m immediate), the data directory reused as it stands
SYNC_ON = [{"fsync": "on", "synchronous_commit": "on"}, {"fsync": "off", "synchronous_commit": "on"}]
ASYNC = {"fsync": "on", "synchronous_commit": "off", "wal_writer_delay": "10s", "wal_writer_flush_after": "1GB"}


def _pg(settings):
    from ledgercheck.chaos.crash.powerloss import pg_immediate_stop
    from ledgercheck.services.postgres import PostgresUnavailable

    try:
        return pg_immediate_stop(settings, commits=200)
    except PostgresUnavailable as exc:
        pytest.skip(f"no PostgreSQL server here: {exc}")


@pytest.mark.parametrize("settings", SYNC_ON, ids=lambda s: f"fsync={s['fsync']}")
def test_postgres_synchronous_commit_keeps_every_acknowledged_commit_across_a_server_crash(settings) -> None:
    # the commit returns after its WAL reached the operating system (and, with fsync on, the
    # disk): a server crash loses nothing, whatever fsync says (a power cut would differ)
    result = _pg(settings)
    assert result.survived == result.committed, result.summary()


def test_postgres_asynchronous_commit_loses_only_a_suffix() -> None:
    # how many of the last commits are lost depends on when the WAL writer last ran (measured:
    # 22 of 200 here); that whatever survives is a prefix of the commit order does not
    result = _pg(ASYNC)
    assert result.prefix, result.summary()
    assert result.survived <= result.committed


def test_close_out_acknowledged_before_its_sync_is_lost(tmp_path: Path) -> None:
    from ledgercheck.fixtures.testkit.broken_power import FastCloseOut

    result = run_power_loss(tmp_path, seed=0, synchronous="FULL", opener=FastCloseOut.open)
    problems = {f.problem.split(" of ")[0] for f in result.findings}
    assert problems == {"acknowledged close_out"}, describe(result)  # every other operation is synced


def test_ledger_without_a_journal_loses_work(tmp_path: Path) -> None:
    from ledgercheck.fixtures.testkit.broken_power import JournalOff

    result = run_power_loss(tmp_path, seed=0, synchronous="FULL", opener=JournalOff.open)
    problems = [f.problem for f in result.findings]
    assert any(p.startswith("acknowledged") for p in problems), describe(result)
    # a prefix of the in-place page writes (not only none or all of them) leaves a damaged file
    assert any(p.startswith(("integrity check", "the reopened ledger fails")) for p in problems), describe(result)


def test_command_line(capsys, tmp_path: Path) -> None:
    from ledgercheck.cli import main

    assert main(["crash", "power-loss", "--tmp-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "1 of 1 run(s) kept every acknowledged operation" in out
    assert main(["crash", "power-loss", "--synchronous", "OFF", "--json", "--tmp-dir", str(tmp_path)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "fail" and doc["runs"][0]["findings"]
    assert main(["crash", "power-loss", "--runs", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["ledgercheck crash power-loss: --runs must be at least 1, not 0"]
