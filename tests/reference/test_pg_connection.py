"""``--adapter reference-pg`` checks its database once, at the handshake, before any test runs: a
server that is not there, or that refuses the credentials, is one line naming host:port/database
(never the password) and exit 2, not a failure of every test and a traceback at exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from ledgercheck.services.postgres import PostgresServer, PostgresUnavailable, free_port

SECRET = "hunter2-s3cret"


@pytest.fixture(scope="module")
def pg_with_passwords() -> Iterator[PostgresServer]:
    """A real PostgreSQL on 127.0.0.1 whose TCP connections need a password (scram-sha-256)."""
    try:
        server = PostgresServer().start()
    except PostgresUnavailable as exc:
        pytest.fail(f"PostgreSQL is required for the PostgreSQL reference tests: {exc}", pytrace=False)
    try:
        server.execute("CREATE ROLE lc LOGIN PASSWORD 'right-password'")
        server.execute("CREATE DATABASE ledgers OWNER lc")
        assert server.root is not None
        hba = server.root / "data" / "pg_hba.conf"
        hba.write_text("local all all trust\nhost all postgres 127.0.0.1/32 trust\n"
                       "host all all 127.0.0.1/32 scram-sha-256\n", encoding="utf-8")
        server.execute("SELECT pg_reload_conf()")
        yield server
    finally:
        server.stop()


def _certify(dsn: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LEDGERCHECK_PG_DSN": dsn}
    return subprocess.run([sys.executable, "-m", "ledgercheck", "certify", "--adapter", "reference-pg", "--profile", "core",
                           "--no-chaos", "--hypothesis-profile", "smoke", "--out", str(tmp_path / "out"), "--no-history"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def _one_line_refusal(proc: subprocess.CompletedProcess[str], where: str, why: str) -> None:
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr  # no traceback, no "Exception ignored in ... __del__"
    assert lines[0].startswith("ledgercheck certify: adapter reference-pg: ") and where in lines[0] and why in lines[0], lines
    assert proc.stdout == "", proc.stdout  # refused before any test was collected or ran
    assert "password" not in proc.stderr.replace("password authentication failed", "")
    assert SECRET not in proc.stdout + proc.stderr
    assert not (Path(proc.args[proc.args.index("--out") + 1]) / "results.json").exists()


@pytest.mark.parametrize("form", ["url", "keywords"])
def test_a_closed_port_is_one_line_before_any_test(tmp_path: Path, form: str) -> None:
    port = free_port()
    dsn = (f"postgresql://lc:{SECRET}@127.0.0.1:{port}/ledgers" if form == "url"
           else f"host=127.0.0.1 port={port} user=lc password={SECRET} dbname=ledgers")
    _one_line_refusal(_certify(dsn, tmp_path), f"127.0.0.1:{port}/ledgers", "Connection refused")


def test_a_wrong_password_is_one_line_before_any_test(pg_with_passwords: PostgresServer, tmp_path: Path) -> None:
    port = pg_with_passwords.port
    with pytest.raises(psycopg.OperationalError):  # the server does want the password
        psycopg.connect(f"postgresql://lc:{SECRET}@127.0.0.1:{port}/ledgers").close()
    _one_line_refusal(_certify(f"postgresql://lc:{SECRET}@127.0.0.1:{port}/ledgers", tmp_path),
                      f"127.0.0.1:{port}/ledgers", 'password authentication failed for user "lc"')


def test_the_right_password_runs_the_suite(pg_with_passwords: PostgresServer, tmp_path: Path) -> None:
    """The check refuses only what cannot work: with the right password the suite runs (here one
    clause of core, its report written)."""
    env = {**os.environ, "LEDGERCHECK_PG_DSN": f"postgresql://lc:right-password@127.0.0.1:{pg_with_passwords.port}/ledgers"}
    proc = subprocess.run([sys.executable, "-m", "ledgercheck", "certify", "--adapter", "reference-pg", "--profile", "core",
                           "--no-chaos", "-k", "core.status.enum", "--out", str(tmp_path / "out"), "--no-history", "-q"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert (tmp_path / "out" / "results.json").is_file(), proc.stderr[-3000:]
    tests = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))["tests"]
    assert len(tests) == 9 and {t["outcome"] for t in tests} == {"passed"}, tests
    assert "right-password" not in proc.stdout + proc.stderr + (tmp_path / "out" / "results.json").read_text("utf-8")
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]


def test_the_pytest_plugin_refuses_in_one_line_too(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "LEDGERCHECK_PG_DSN": f"postgresql://lc:{SECRET}@127.0.0.1:{port}/ledgers"}
    proc = subprocess.run([sys.executable, "-m", "pytest", str(tmp_path), "--rootdir", str(tmp_path), "-p", "no:cacheprovider",
                           "--ledger-adapter", "reference-pg", "--ledger-only", "-q"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"ERROR: ledgercheck: adapter reference-pg: handshake failed: internal: postgresql 127.0.0.1:{port}/ledgers: "
        f"cannot connect: connection failed: connection to server at \"127.0.0.1\", port {port} failed: Connection "
        "refused Is the server running on that host and accepting TCP/IP connections?"]
    assert SECRET not in proc.stdout + proc.stderr
