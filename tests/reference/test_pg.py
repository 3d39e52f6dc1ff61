"""The reference ledger on PostgreSQL (reference/pg.py): the backend seam with real processes on
a real server, the operator CLI against a connection string, one-line errors, and a certification.

The certification under the ``smoke`` budget (every profile, crash recovery included) takes
minutes; it runs when ``LEDGERCHECK_PG_CERTIFY=1`` (CI sets it; the default run leaves it out):
``LEDGERCHECK_PG_CERTIFY=1 python -m pytest -p no:xdist -q tests/reference/test_pg.py -k certified``.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from ledgercheck.reference.adapter import PgReferenceAdapter
from ledgercheck.reference.pg import PgLedger, _any_lists, _ddl, row_checks, split_table, translate
from ledgercheck.reference.schema import _event_table, _work_table
from ledgercheck.reference.verify import verify
from ledgercheck.services.postgres import PostgresServer, PostgresUnavailable, free_port
from ledgercheck.spec import default_spec
from ledgercheck.transport.protocol import LedgerError
from patience import SAFETY_NET

from ledgercheck.cli import main

PROCS = [sys.executable, str(Path(__file__).resolve().parent / "pg_procs.py")]
SOURCE = next(iter(default_spec().source_systems))


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    """A real PostgreSQL on 127.0.0.1; missing binaries are a failure with the reason, never a skip."""
    try:
        server = PostgresServer().start()
    except PostgresUnavailable as exc:
        pytest.fail(f"PostgreSQL is required for the PostgreSQL reference tests: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


_n = iter(range(10**6))


@pytest.fixture
def schema() -> str:
    return f"t_{os.getpid()}_{next(_n)}"


def _queued(pg: PostgresServer, schema: str, n: int = 1) -> list[str]:
    led = PgLedger(pg.dsn(), schema)
    try:
        return [led.create(source_system=SOURCE, source_id=f"item-{i}", now=1.0)["work"]["work_id"] for i in range(n)]
    finally:
        led.close()


def _race(pg: PostgresServer, schema: str, wid: str, tmp_path: Path, mode: str = "") -> tuple[dict, dict]:
    """Two claim processes on one item: the second, loaded and waiting, starts its claim the
    moment the first holds its transaction open before COMMIT."""
    hold, out_a, out_b = tmp_path / "hold", tmp_path / "a.json", tmp_path / "b.json"
    b = subprocess.Popen([*PROCS, "claim", pg.dsn(), schema, wid, str(hold), str(out_b), "second", mode],
                         stdout=subprocess.PIPE, text=True)
    assert b.stdout is not None and b.stdout.readline().strip() == "ready"
    a = subprocess.Popen([*PROCS, "claim", pg.dsn(), schema, wid, str(hold), str(out_a), "first", mode])
    assert a.wait(timeout=SAFETY_NET) == 0 and b.wait(timeout=SAFETY_NET) == 0
    return json.loads(out_a.read_text()), json.loads(out_b.read_text())


# ---------------------------------------------------------------------- the seam
def test_translation_covers_the_sqlite_dialect():
    assert translate("SELECT ifnull(max(seq), 0) + 1 FROM work WHERE a = ? AND b LIKE '5%'") == \
        "SELECT coalesce(max(seq), 0) + 1 FROM work WHERE a = %s AND b LIKE '5%%'"
    assert translate("SELECT x FROM work INDEXED BY work_lease WHERE lease_token IS NOT NULL") == \
        "SELECT x FROM work WHERE lease_token IS NOT NULL"
    assert translate("SELECT 1 WHERE ifnull(source_run_id, char(0)) = ifnull(?, char(0))") == \
        "SELECT 1 WHERE source_run_id IS NOT DISTINCT FROM %s"


def test_check_chains_become_constant_arrays_that_admit_and_refuse_the_same_values(pg, schema):
    chain = "(kind = 'a' OR kind = 'it''s' OR kind = 'q\"u\\o' OR kind = 'b,c')"
    ddl = f"CREATE TABLE t (kind TEXT, CHECK {chain}, CHECK (kind = 'a' OR kind IS NULL))"
    fast = _any_lists(ddl)
    assert "OR kind =" not in fast and fast.count("::text[]") == 1  # a lone comparison is left alone
    assert _any_lists("CREATE INDEX i ON t(kind) WHERE (kind = 'a' OR kind = 'b')").endswith("(kind = 'a' OR kind = 'b')")
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'SET search_path TO "{schema}"')
        conn.execute(fast.replace("CHECK (kind = 'a' OR kind IS NULL)", "CHECK (true)"))
        for ok in ("a", "it's", 'q"u\\o', "b,c", None):
            conn.execute("INSERT INTO t VALUES (%s)", (ok,))
        for bad in ("b", "c", "it", "A", 'q"u\\\\o', ""):
            with pytest.raises(psycopg.errors.CheckViolation, match='"t_kind_check"'):
                conn.execute("INSERT INTO t VALUES (%s)", (bad,))
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


_OUTCOMES = """CREATE FUNCTION outcomes_{t}() RETURNS SETOF text LANGUAGE plpgsql AS $f$
DECLARE r bigint;
BEGIN
  FOR r IN SELECT n FROM cand ORDER BY n LOOP
    BEGIN
      INSERT INTO {t} SELECT {cols} FROM cand WHERE n = r;
      RAISE EXCEPTION USING ERRCODE = 'P0001';  -- taken: undo it, the next row may share its key
    EXCEPTION
      WHEN raise_exception THEN RETURN NEXT 'ok';
      WHEN check_violation THEN RETURN NEXT 'check: ' || SQLERRM;
      WHEN not_null_violation THEN RETURN NEXT 'not null';
    END;
  END LOOP;
END $f$"""


def _outcomes(conn: psycopg.Connection, table: str, columns: list[str]) -> list[str]:
    """For each candidate row (in order): 'ok' when ``table`` takes it, else the refusal."""
    conn.execute(_OUTCOMES.format(t=table, cols=", ".join(columns)))
    return [r[0] for r in conn.execute(f"SELECT * FROM outcomes_{table}()").fetchall()]


def _candidates(templates: list[tuple], domains: dict[int, list], rng: random.Random, n: int) -> list[tuple]:
    """Sound rows from ``templates`` with each column set to each value of its domain, one at a
    time, then ``n`` more with 2-3 columns changed at once."""
    out = [tuple(t) for t in templates]
    for t in templates:
        for col, values in domains.items():
            out += [tuple(v if i == col else x for i, x in enumerate(t)) for v in values]
    for _ in range(n):
        row = list(rng.choice(templates))
        for col in rng.sample(sorted(domains), rng.randint(2, 3)):
            row[col] = rng.choice(domains[col])
        out.append(tuple(row))
    return out


@pytest.mark.parametrize("table", ["work", "work_event"])
def test_row_checks_in_the_trigger_refuse_exactly_what_the_check_constraints_refuse(pg, schema, table):
    """The work and event tables' CHECKs live in their guard triggers (``row_checks``).  Rows
    taken from real operations, with every column set to every awkward value in turn (and some
    with several at once), go into a table with the schema's CHECK constraints and into one with
    the trigger: both take and refuse the same rows, and the trigger names the failing
    expression.  The same rows tell apart a trigger that lost one of its checks."""
    spec = default_spec()
    led = PgLedger(pg.dsn(), schema)
    try:
        for i in range(3):
            w = led.create(source_system=SOURCE, source_id=f"s{i}", now=1.0)["work"]["work_id"]
            if i:
                c = led.claim(owner="o", work_id=w, now=2.0)
                if i == 2:
                    led.renew(work_id=w, token=c["lease_token"], now=2.5)  # an event that moves no status
                    led.close_out(work_id=w, token=c["lease_token"], status="done", now=3.0, result={"x": 1})
        templates = led.conn.raw.execute(f"SELECT * FROM {table}").fetchall()
    finally:
        led.close()
    source = _work_table(spec) if table == "work" else _event_table(spec)
    columns = [it.split()[:2] for it in split_table(_ddl(source))[1] if not it.startswith("PRIMARY KEY")]
    names = [c[0] for c in columns]
    words = [*spec.statuses, *spec.source_systems, *spec.events, "bogus", "", None]
    domains = {i: (words if kind == "TEXT" else [-1, 0, 1, 2, 9, 10, None]) for i, (_, kind) in enumerate(columns)}
    if table == "work":
        domains[names.index("waiting_kind")] = [*spec.waiting_statuses, "other", None]
    rows = _candidates(templates, domains, random.Random(18), 300)
    create_plain, body = row_checks(source)
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        conn.execute(_any_lists(_ddl(source)).replace(f"CREATE TABLE {table} (", f"CREATE TABLE ref_{table} (", 1))
        conn.execute(f"CREATE TABLE cand AS SELECT 0::bigint AS n, t.* FROM ref_{table} t WITH NO DATA")
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO cand VALUES (%s, {', '.join(['%s'] * len(names))})",
                            [(i, *row) for i, row in enumerate(rows)])
        for name, checks in (("trig", body), ("lost", body.split("  END IF;", 1)[1])):
            conn.execute(create_plain.replace(f"CREATE TABLE {table} (", f"CREATE TABLE {name}_{table} (", 1))
            conn.execute(f"CREATE FUNCTION {name}_{table}() RETURNS trigger LANGUAGE plpgsql AS "
                         f"$f$ BEGIN {checks} RETURN NEW; END $f$")
            conn.execute(f"CREATE TRIGGER c BEFORE INSERT ON {name}_{table} FOR EACH ROW EXECUTE FUNCTION {name}_{table}()")
        want, got, lost = (_outcomes(conn, f"{name}_{table}", names) for name in ("ref", "trig", "lost"))
    assert len(want) == len(rows) and want.count("ok") > 100 and sum(w.startswith("check") for w in want) > 200
    # taken and refused alike (a row breaking a NOT NULL and a check is refused by the one the
    # server tests first: a trigger runs before the column constraints, a CHECK after them)
    assert [g == "ok" for g in got] == [w == "ok" for w in want]
    assert all(g.startswith("check: CHECK constraint failed: ") for g in got if g.startswith("check"))
    assert [x == "ok" for x in lost] != [w == "ok" for w in want]


def test_operations_rules_and_guards_hold_on_postgresql(pg, schema):
    led = PgLedger(pg.dsn(), schema)
    try:
        w = led.create(source_system=SOURCE, source_id="a", now=1.0)
        assert w["created"] and not led.create(source_system=SOURCE, source_id="a", now=2.0)["created"]
        c = led.claim(owner="o", now=2.0)
        assert c["status"] in led.leased and c["lease_version"] == 1
        with pytest.raises(LedgerError) as info:
            led.close_out(work_id=c["work_id"], token="not-the-token", status="done", now=3.0)
        assert info.value.code == "stale_lease"
        assert led.cancel(work_id=c["work_id"], now=3.0)["cancel_requested"] is True
        assert verify(led) == []
        # the database refuses on its own what the operations never do
        with pytest.raises(psycopg.errors.IntegrityError, match="invalid_transition: "):
            led.conn.raw.execute("UPDATE work SET status = %s", (led.spec.initial_status,))
        with pytest.raises(psycopg.errors.IntegrityError, match="work_event is append-only"):
            led.conn.raw.execute("DELETE FROM work_event")
        with pytest.raises(psycopg.errors.CheckViolation, match="CHECK constraint failed: priority BETWEEN"):
            led.conn.raw.execute("UPDATE work SET priority = -1, event_count = event_count + 1")
    finally:
        led.close()


@pytest.mark.parametrize("flush", [True, False])
def test_at_the_crash_point_before_commit_the_writes_are_on_the_server(pg, schema, flush):
    """Writes held back for one round trip are sent before ``ledger.after_event_insert`` fires:
    there the transaction holds its lock and its row, as on SQLite.  A ledger that skipped the
    flush would reach the point with nothing sent (the second case shows the check sees it)."""
    (wid,) = _queued(pg, schema)
    seen: dict[str, object] = {}
    other = psycopg.connect(pg.dsn(), autocommit=True)

    def hook(point: str) -> None:
        if point != "ledger.after_event_insert":
            return
        seen["advisory"] = other.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted").fetchone()[0]
        try:
            other.execute(f'SELECT 1 FROM "{schema}".work WHERE work_id = %s FOR UPDATE NOWAIT', (wid,))
            seen["row_locked"] = False
        except psycopg.errors.LockNotAvailable:
            seen["row_locked"] = True

    led = PgLedger(pg.dsn(), schema, crash_hook=hook)
    if not flush:
        led._flush = lambda: None  # type: ignore[method-assign]
    try:
        led.claim(owner="o", now=2.0, work_id=wid)
    finally:
        led.close()
        other.close()
    assert seen == ({"advisory": 1, "row_locked": True} if flush else {"advisory": 1, "row_locked": False})


def test_a_writer_waiting_past_the_busy_timeout_gets_busy(pg, schema):
    """lock_timeout is the busy timeout: a writer queued behind a transaction that stays open
    gets ``busy`` (as on SQLite), and its own transaction is rolled back cleanly."""
    import threading

    wids = _queued(pg, schema, 2)
    inside, release = threading.Event(), threading.Event()

    def hook(point: str) -> None:
        if point == "ledger.after_event_insert":
            inside.set()
            release.wait(SAFETY_NET)  # open until the waiter has met its busy timeout

    holder = PgLedger(pg.dsn(), schema, crash_hook=hook)
    waiter = PgLedger(pg.dsn(), schema, busy_timeout=0.2)
    t = threading.Thread(target=lambda: holder.claim(owner="a", now=2.0, work_id=wids[0]))
    t.start()
    try:
        assert inside.wait(SAFETY_NET)
        with pytest.raises(LedgerError) as info:
            waiter.claim(owner="b", now=2.0, work_id=wids[1])
        assert info.value.code == "busy" and "busy timeout" in info.value.message
    finally:
        release.set()
        t.join(SAFETY_NET)
    try:
        assert waiter.claim(owner="b", now=3.0, work_id=wids[1])["owner"] == "b"  # usable afterwards
    finally:
        holder.close()
        waiter.close()


def test_two_processes_claiming_one_item_give_exactly_one_lease(pg, schema, tmp_path):
    """The first claimer holds its transaction open at the crash point before COMMIT; the second
    must wait for the write lock and then see the first one's lease."""
    (wid,) = _queued(pg, schema)
    ra, rb = _race(pg, schema, wid, tmp_path)
    assert ra["ok"] and not rb["ok"], (ra, rb)
    assert rb["code"] == "invalid_transition" and "already leased" in rb["message"], rb
    led = PgLedger(pg.dsn(), schema)
    try:
        snap = led.get(work_id=wid)
        assert snap["lease_token"] == ra["token"] and snap["lease_version"] == 1
        assert [e["type"] for e in led.events(work_id=wid)].count(led._ev[("claim", snap["status"])]) == 1
    finally:
        led.close()


def test_without_the_write_lock_the_second_claimer_acts_on_a_stale_read(pg, schema, tmp_path):
    """The same race against a broken backend whose transactions take no write lock: the second
    claimer decides on the item as it was before the first commit, and only the schema's guard
    stops its write; the check above fails on it."""
    (wid,) = _queued(pg, schema)
    _, rb = _race(pg, schema, wid, tmp_path, "nolock")
    assert not rb["ok"] and "already leased" not in rb["message"], rb


@pytest.mark.parametrize("mode", ["", "autocommit"])
def test_sigkill_mid_transaction_leaves_the_ledger_as_before(pg, schema, mode):
    """A client SIGKILLed after writing its row and event but before COMMIT: the server rolls the
    transaction back and releases its lock.  The broken backend that commits statement by
    statement leaves the claim behind (the check fails on it, as it must)."""
    (wid,) = _queued(pg, schema)
    proc = subprocess.run([*PROCS, "crash", pg.dsn(), schema, "ledger.after_event_insert", mode], timeout=SAFETY_NET)
    assert proc.returncode == -9
    # the server ends the dead client's backend and its transaction when it notices the closed
    # socket: the lock is waited for as long as that takes
    led = PgLedger(pg.dsn(), schema, busy_timeout=SAFETY_NET)
    try:
        snap = led.get(work_id=wid)
        if mode == "autocommit":
            assert snap["status"] != led.spec.initial_status and snap["owner"] == "doomed"
            return
        assert snap["status"] == led.spec.initial_status and snap["owner"] is None
        assert len(led.events(work_id=wid)) == 1 and verify(led) == []
        assert led.claim(owner="next", now=11.0)["work_id"] == wid  # the lock went with the connection
    finally:
        led.close()


def test_adapter_dir_reopens_the_same_ledger_from_another_process(pg, tmp_path, monkeypatch):
    monkeypatch.setenv("LEDGERCHECK_PG_DSN", pg.dsn())
    a = PgReferenceAdapter()
    a.reset({"dir": str(tmp_path / "d")})
    wid = a.create(source_system=SOURCE, source_id="x", now=1.0)["work"]["work_id"]
    a.close()
    code = ("from ledgercheck.reference.adapter import PgReferenceAdapter as A; a = A(); "
            f"a.reset({{'dir': {str(tmp_path / 'd')!r}}}); print(a.get(work_id={wid!r})['status'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, LEDGERCHECK_PG_DSN=pg.dsn()))
    assert out.returncode == 0 and out.stdout.strip() == default_spec().initial_status, out.stderr
    # scratch resets start empty
    a.reset({})
    assert a.list() == []
    a.create(source_system=SOURCE, source_id="y", now=1.0)
    a.reset({})
    assert a.list() == []
    a.drop_scratch()


# ---------------------------------------------------------------------- operator CLI and errors
def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["ledger", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_operator_cli_by_connection_string(pg, schema, capsys):
    (wid,) = _queued(pg, schema)
    url = pg.url()
    rc, out, err = _cli(capsys, "show", "--db", url, "--schema", schema, wid, "--json")
    assert rc == 0, err
    assert json.loads(out)["work"]["work_id"] == wid
    rc, out, err = _cli(capsys, "list", "--db", pg.dsn(), "--schema", schema)
    assert rc == 0 and wid in out, err
    rc, out, err = _cli(capsys, "verify", "--db", url, "--schema", schema)
    assert rc == 0 and out.startswith("ok:"), out + err
    # a ledger whose guard is gone no longer refuses forbidden writes: verify says so
    pg.execute(f'DROP TRIGGER work_guard ON "{schema}".work')
    rc, out, err = _cli(capsys, "verify", "--db", url, "--schema", schema)
    assert rc == 1 and "trigger work_guard: missing" in out + err
    rc, out, err = _cli(capsys, "show", "--db", url, "--schema", "no_such_ledger", wid)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "no such ledger" in err, err


def test_unreachable_server_is_one_line_and_exit_2(capsys):
    port = free_port()
    rc, out, err = _cli(capsys, "list", "--db", f"postgresql://postgres@127.0.0.1:{port}/postgres")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "cannot connect" in err, err


def test_missing_driver_names_the_extra(pg, tmp_path):
    code = ("import sys; sys.modules['psycopg'] = None\n"
            "from ledgercheck.cli import main\n"
            f"sys.exit(main(['ledger', 'list', '--db', {pg.url()!r}]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "pip install 'ledgercheck[postgres]'" in out.stderr
    code = ("import sys; sys.modules['psycopg'] = None\n"
            "from ledgercheck.cli import main\n"
            "sys.exit(main(['certify', '--adapter', 'reference-pg', '--no-history', '--out', sys.argv[1]]))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "adapter 'reference-pg'" in out.stderr and "pip install 'ledgercheck[postgres]'" in out.stderr
    assert not (tmp_path / "out").exists()  # refused before any test ran


# ---------------------------------------------------------------------- certification
@pytest.mark.skipif(os.environ.get("LEDGERCHECK_PG_CERTIFY") != "1",
                    reason="a few minutes; set LEDGERCHECK_PG_CERTIFY=1 (CI runs it)")
def test_certified_with_the_smoke_budget(pg, tmp_path):
    """Every profile of the contract, crash recovery included (the kill windows at the ledger's and
    the worker's crash points, and the safety campaign), on PostgreSQL."""
    out = subprocess.run([sys.executable, "-m", "ledgercheck", "certify", "--adapter", "reference-pg",
                          "--hypothesis-profile", "smoke", "--seed", "1", "--out", str(tmp_path / "out"), "--no-history",
                          "--quiet", "--artifacts", str(tmp_path / "artifacts")],
                         capture_output=True, text=True, timeout=1200, cwd=tmp_path,
                         env=dict(os.environ, LEDGERCHECK_PG_DSN=pg.dsn()))
    doc = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert out.returncode == 0 and doc["verdict"] == "CERTIFIED", out.stdout[-3000:] + out.stderr[-3000:]
    verdicts = doc["profiles"]["verdicts"]
    assert set(verdicts) == set(default_spec().profiles), sorted(verdicts)
    assert {p: v["verdict"] for p, v in verdicts.items() if v["verdict"] != "certified"} == {}
    assert doc["adapter"]["name"] == "ledgercheck-reference-pg"
    windows = doc["crash_windows"]
    assert len(windows) > 50 and {w["verdict"] for w in windows} == {"pass"}, len(windows)
    assert [s["verdict"] for s in doc["safety"]] == ["pass"] and doc["safety"][0]["ops"] > 0
