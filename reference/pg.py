"""The reference ledger on PostgreSQL: the same ``Ledger``, a second backend under it.

Every operation, every rule it applies (through ``ledgercheck.spec.rules``) and every crash point
is ``ledger.py``'s; this module replaces only what touches the database:

- **the connection**: one psycopg 3 connection per ledger in autocommit mode, so that the
  ledger's own ``BEGIN``/``COMMIT`` delimit its transactions exactly as on SQLite (no pool: a
  ledger holds one connection the way the SQLite ledger holds one file handle).  Its
  statements go through libpq's pipeline mode, prepared once per connection (``_Wire``), a
  transaction's in two round trips (``_Cursor``);
- **where a ledger lives**: a schema of a database (``dsn`` + ``schema``), so one server holds
  any number of ledgers and a scratch ledger is dropped with its schema;
- **the writing transaction**: SQLite's ``BEGIN IMMEDIATE`` admits one writer at a time and
  every statement of the transaction sees every earlier commit.  Here ``BEGIN`` (READ COMMITTED)
  is followed by ``pg_advisory_xact_lock`` on the ledger's key: writers of one ledger queue on
  the lock, and since READ COMMITTED takes a fresh snapshot per statement, every read after the
  lock sees every commit that preceded it.  The result is the same serial order SQLite gives,
  without serialization failures to retry (two processes claiming the same item: the second
  waits, then sees the first's lease).  The lock is the transaction's, so a client killed
  mid-transaction (SIGKILL) loses its connection, the server rolls the transaction back and the
  lock goes with it;
- **SQL**: the ledger's statements are written for SQLite; ``translate`` rewrites the few
  dialect differences once per statement text (``?`` placeholders, ``ifnull``, ``INDEXED BY``
  hints, the identity lookup), and the DDL is the SQLite schema's with PostgreSQL types plus
  PL/pgSQL versions of its guard triggers (same rules, same messages), which also test the
  work and event tables' CHECKs (``row_checks``);
- **errors**: SQLSTATE classes become the same ``LedgerError`` codes the SQLite ledger gives
  (a guard trigger or CHECK refusing a write, a lock wait past the busy timeout, a lost server).

The driver is optional (``pip install 'ledgercheck[postgres]'``); without it, opening a
PostgreSQL ledger fails with one line naming the extra.
"""

from __future__ import annotations

import hashlib
import json
import re
import select
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

from ledgercheck.reports.text import without_secrets
from ledgercheck.spec import Spec

from .ledger import Ledger, LedgerOpenError
from .pointer import ActivePointer
from .schema import (
    FIXED_INDEXES,
    FROZEN_WHEN_TERMINAL,
    SCHEMA_VERSION,
    TABLES,
    _event_table,
    _journal_tables,
    _work_table,
    contract_shape,
    one_of,
    rule_indexes,
)

__all__ = ["EXTRA", "PgLedger", "drop_ledger", "is_pg_address", "pg_stored_contract", "require_driver", "translate"]

EXTRA = "pip install 'ledgercheck[postgres]'"
APPLICATION = "ledgercheck-ledger"
_NAME_OK = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def require_driver() -> Any:
    """The psycopg module, or one line saying which extra installs it."""
    try:
        import psycopg
    except ImportError:
        raise LedgerOpenError(f"the PostgreSQL reference ledger needs the psycopg driver: {EXTRA}") from None
    return psycopg


def is_pg_address(text: str) -> bool:
    """Whether ``text`` is a PostgreSQL connection string (URL or ``key=value`` form) rather than a file."""
    return text.startswith(("postgresql://", "postgres://")) or bool(re.match(r"^\s*\w+\s*=", text))


def check_schema_name(name: str) -> str:
    if not _NAME_OK.match(name):
        raise LedgerOpenError(f"schema {name!r}: not a usable ledger schema name (lower-case letters, digits, _; at most 63)")
    return name


def _where(dsn: str) -> str:
    """The server and database of a DSN for messages (no password)."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001 - a malformed DSN is reported when connecting
        return "postgresql"
    host = parts.get("host") or "localhost"
    return f"postgresql {host}:{parts.get('port') or 5432}/{parts.get('dbname') or parts.get('user') or ''}"


# ---------------------------------------------------------------------- SQL dialect
_TRANSLATED: dict[str, str] = {}
_INDEXED_BY = re.compile(r"\s+INDEXED BY \w+")
_FALSE = re.compile(r"\((0)\) = \(|WHERE 0\b(?!\s*[=<>])")


def translate(sql: str) -> str:
    """A statement of the SQLite ledger in PostgreSQL's dialect (cached per statement text)."""
    out = _TRANSLATED.get(sql)
    if out is None:
        s = sql.replace("ifnull(source_run_id, char(0)) = ifnull(?, char(0))", "source_run_id IS NOT DISTINCT FROM ?")
        s = _INDEXED_BY.sub("", s).replace("ifnull(", "coalesce(")
        s = _FALSE.sub(lambda m: "(false) = (" if m.group(1) else "WHERE false", s)
        s = s.replace("%", "%%").replace("?", "%s")
        if len(_TRANSLATED) > 4096:
            _TRANSLATED.clear()
        out = _TRANSLATED[sql] = s
    return out


def _ddl(sql: str) -> str:
    """A CREATE statement of the SQLite schema with PostgreSQL's types."""
    s = sql.replace(") STRICT, WITHOUT ROWID", ")").replace(") STRICT", ")")
    s = re.sub(r"\bINTEGER\b", "BIGINT", s)
    s = re.sub(r"\bREAL\b", "DOUBLE PRECISION", s)
    s = s.replace("ifnull(source_run_id, char(0))", "coalesce(source_run_id, '')")
    return _FALSE.sub(lambda m: "(false) = (" if m.group(1) else "WHERE false", s)


_LIT = r"'(?:[^']|'')*'"
_CHAIN = re.compile(rf"\((\w+) = ({_LIT})((?: OR \1 = {_LIT})+)\)")


def _any_lists(sql: str) -> str:
    """A table's CHECK constraints with each chain ``(c = 'a' OR c = 'b' ...)`` written as
    ``(c = ANY ('{a,b,...}'::text[]))``: the same test (a NULL passes both), but PostgreSQL
    prepares a table's CHECK expressions again for every statement that writes it, and a chain
    costs one node per value there (a constant array is one node, already folded): the chains
    took about a third of the server's time per operation.  Only CREATE TABLE: partial index
    predicates keep the form the queries use, so the planner still proves them."""
    if not sql.lstrip().startswith("CREATE TABLE"):
        return sql
    return _arrays(sql)


def _arrays(text: str) -> str:
    """``text`` with each comparison chain ``(c = 'a' OR c = 'b' ...)`` as ``(c = ANY (...))``."""

    def element(literal: str) -> str:
        value = literal[1:-1].replace("''", "'")
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    def one(m: re.Match[str]) -> str:
        array = "{" + ",".join(element(x) for x in [m.group(2), *re.findall(_LIT, m.group(3))]) + "}"
        return f"({m.group(1)} = ANY ('{array.replace(chr(39), chr(39) * 2)}'::text[]))"
    return _CHAIN.sub(one, text)


def split_table(sql: str) -> tuple[str, list[str], list[str]]:
    """A CREATE TABLE statement as its head (up to the opening parenthesis), its column and key
    definitions, and its CHECK expressions (each with its parentheses)."""
    head, _, rest = sql.partition("(")
    body = rest[:rest.rindex(")")]
    items, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(body):
        if ch == "'":
            quoted = not quoted  # a doubled quote inside a literal toggles twice
        elif quoted:
            continue
        elif ch in "()":
            depth += 1 if ch == "(" else -1
        elif ch == "," and depth == 0:
            items.append(body[start:i].strip())
            start = i + 1
    items.append(body[start:].strip())
    checks = [it[len("CHECK"):].strip() for it in items if it.startswith("CHECK")]
    return head, [it for it in items if not it.startswith("CHECK")], checks


_KEY_ITEM = ("PRIMARY KEY", "UNIQUE", "FOREIGN KEY", "CONSTRAINT")


def _of_row(expr: str, columns: list[str]) -> str:
    """``expr`` with its column references as ``NEW.column`` (string literals left alone)."""
    name = re.compile(r"(?<![\w.:])(" + "|".join(columns) + r")\b(?!\s*\()")
    parts = re.split(f"({_LIT})", expr)
    return "".join(p if i % 2 else name.sub(r"NEW.\1", p) for i, p in enumerate(parts))


def row_checks(table_sql: str) -> tuple[str, str]:
    """A hot table's CHECK constraints moved into its guard trigger: the CREATE TABLE without
    them, and the PL/pgSQL that refuses the same rows (a CHECK fails only when its expression
    is false, not null) with SQLite's message, ``CHECK constraint failed: <expression>``.

    PostgreSQL reads back, plans and compiles a table's CHECK expressions for every statement
    that writes it; PL/pgSQL plans a trigger's expressions once per connection.  On the work
    and event tables, written by every operation, that was about a third of the server's time.
    """
    sql = _ddl(table_sql)
    head, items, checks = split_table(sql)
    columns = [it.split()[0] for it in items if not it.startswith(_KEY_ITEM)]
    body = []
    for expr in checks:
        message = f"CHECK constraint failed: {expr[1:-1]}".replace("'", "''").replace("%", "%%")
        body.append(f"  IF {_of_row(_arrays(expr), columns)} IS FALSE THEN\n"
                    f"    RAISE EXCEPTION '{message}' USING ERRCODE = '23514';\n  END IF;")
    return head + "(\n  " + ",\n  ".join(items) + "\n)", "\n".join(body)


def _raise(message: str) -> str:
    # SQLSTATE 23000 (integrity_constraint_violation): mapped like SQLite's RAISE(ABORT) in a trigger
    return f"RAISE EXCEPTION '{message}' USING ERRCODE = '23000';"


def guard_functions(spec: Spec, schema: str) -> dict[str, str]:
    """The PL/pgSQL bodies of the guard triggers, by trigger name: the rules of ``schema.py``'s
    SQLite triggers, with the same messages."""
    terminal = one_of("OLD.status", spec.terminal_statuses)
    frozen = " OR ".join(f"NEW.{c} IS DISTINCT FROM OLD.{c}" for c in FROZEN_WHEN_TERMINAL)
    identity = " OR ".join(f"NEW.{c} IS DISTINCT FROM OLD.{c}"
                           for c in ("seq", "work_id", "source_system", "source_id", "source_run_id", "created_at"))
    q = f'"{schema}"'
    work_checks = row_checks(_work_table(spec))[1]
    event_checks = row_checks(_event_table(spec))[1]
    guard = f"""
IF NEW.status <> OLD.status AND NOT EXISTS (SELECT 1 FROM {q}.allowed_transition WHERE src = OLD.status AND dst = NEW.status) THEN
  {_raise('invalid_transition: forbidden status change')}
END IF;
IF NEW.status <> OLD.status AND NEW.event_count <= OLD.event_count THEN
  {_raise('invalid_transition: a status change must append its event')}
END IF;
IF NEW.lease_version < OLD.lease_version THEN {_raise('invalid_transition: lease_version decreased')} END IF;
IF NEW.event_count <= OLD.event_count THEN
  {_raise('invalid_transition: every change of a work record appends an event')}
END IF;
IF {identity} THEN {_raise('invalid_transition: the identity of a work record never changes')} END IF;
IF ({terminal}) AND NEW.status = OLD.status AND ({frozen}) THEN
  {_raise('invalid_transition: a terminal record changes only by requeue')}
END IF;"""
    # an update passes the transition guard, then (as an insert does) the table's CHECKs
    work_guard = f"""
BEGIN
  IF TG_OP = 'UPDATE' THEN{textwrap.indent(guard, "    ")}
  END IF;
{work_checks}
  RETURN NEW;
END"""
    event_matches = f"""
BEGIN
  IF NOT EXISTS (SELECT 1 FROM {q}.work WHERE work_id = NEW.work_id AND NEW.seq < {spec.first_seq} + event_count
                 AND (NEW.to_status IS NULL OR NEW.to_status = status)) THEN
    {_raise('invalid_transition: event does not match its work record')}
  END IF;
{event_checks}
  RETURN NEW;
END"""
    out = {"work_guard": work_guard, "work_no_delete": f"\nBEGIN\n  {_raise('work records are never deleted')}\nEND",
           "work_event_matches": event_matches}
    for table in ("work_event", "log_entry"):
        out[f"{table}_append_only"] = f"\nBEGIN\n  {_raise(f'{table} is append-only')}\nEND"
    return out


_TRIGGER_ON = {
    "work_guard": "BEFORE INSERT OR UPDATE ON work", "work_no_delete": "BEFORE DELETE ON work",
    "work_event_matches": "BEFORE INSERT ON work_event",
    "work_event_append_only": "BEFORE UPDATE OR DELETE ON work_event",
    "log_entry_append_only": "BEFORE UPDATE OR DELETE ON log_entry",
}


WORK_FILLFACTOR = 70


def _schema_ddl(spec: Spec, schema: str) -> list[str]:
    journal = _journal_tables(spec)
    # the work and event tables' CHECK constraints are in their guard triggers (see row_checks)
    tables = [*FIXED_INDEXES, *journal, *rule_indexes(spec).values()]
    out = [row_checks(_work_table(spec))[0], row_checks(_event_table(spec))[0], *(_any_lists(_ddl(s)) for s in tables)]
    # room on each page for a row's next version: an update that changes no indexed column (a
    # renew) then stays on its page and writes no index entry (a heap-only tuple)
    out.insert(1, f"ALTER TABLE work SET (fillfactor = {WORK_FILLFACTOR})")
    for name, body in guard_functions(spec, schema).items():
        out.append(f"CREATE FUNCTION lc_{name}() RETURNS trigger LANGUAGE plpgsql AS $lc${body}$lc$")
        out.append(f"CREATE TRIGGER {name} {_TRIGGER_ON[name]} FOR EACH ROW EXECUTE FUNCTION lc_{name}()")
    return out


def _lock_key(schema: str) -> int:
    return int.from_bytes(hashlib.sha256(f"ledgercheck:{schema}".encode()).digest()[:8], "big", signed=True)


# ---------------------------------------------------------------------- connection wrappers
_DEFERRED = ("UPDATE ", "INSERT INTO ")
_PLACEHOLDER = re.compile(r"%([s%])")
_NUMBERED: dict[str, bytes] = {}
PREPARED_MAX = 256
_POLL = getattr(select, "poll", None)  # named statements per connection; further statement texts go unnamed


def numbered(sql: str) -> bytes:
    """A translated statement with libpq's numbered placeholders (``$1``, ``$2`` ...)."""
    out = _NUMBERED.get(sql)
    if out is None:
        n = iter(range(1, 1 << 16))
        out = _PLACEHOLDER.sub(lambda m: f"${next(n)}" if m.group(1) == "s" else "%", sql).encode()
        if len(_NUMBERED) > 4096:
            _NUMBERED.clear()
        _NUMBERED[sql] = out
    return out


class _Rows:
    """What one statement returned: its rows (loaded by psycopg's loaders) and its row count."""

    __slots__ = ("rowcount", "rows")

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self.rows = rows
        self.rowcount = rowcount

    def fetchone(self) -> Any:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[Any]:
        return self.rows

    def __iter__(self) -> Iterator[Any]:
        return iter(self.rows)


class _Wire:
    """Statements sent to the server in one round trip through libpq's pipeline mode, by
    psycopg's libpq layer (``psycopg.pq``) rather than its cursors.

    Each statement text (with the types psycopg gives its parameters) is prepared once per
    connection, in the same round trip as its first use, and executed by name after that, so
    the server neither parses nor plans it again.  Parameters are dumped and rows loaded by the
    connection's own psycopg adapters (``Transformer``), so values go and come back exactly as
    through a cursor.  The first statement that fails raises psycopg's exception for its
    SQLSTATE (the statements after it in the round trip are skipped by the server).  A cursor
    costs the client several times more per statement than the server spends running it; this
    path costs it a few microseconds.
    """

    __slots__ = ("_fmt", "_n", "errors", "names", "pgconn", "pq", "raw", "tx")

    def __init__(self, raw: Any) -> None:
        from psycopg import errors, pq
        from psycopg.adapt import PyFormat, Transformer

        self.raw = raw
        self.pgconn = raw.pgconn
        self.pq = pq
        self.errors = errors
        self.tx = Transformer.from_context(raw)
        self.names: dict[tuple[bytes, tuple[int, ...]], bytes] = {}
        self._n = 0
        self._fmt = [[PyFormat.TEXT] * n for n in range(64)]

    def run(self, stmts: list[tuple[str, Any]]) -> list[_Rows]:
        """Send ``stmts`` (translated SQL, parameters) in one round trip; their results in order."""
        pg, pq = self.pgconn, self.pq
        if pg.status != pq.ConnStatus.OK:
            raise self.errors.OperationalError("the connection is lost")
        fresh: dict[tuple[bytes, tuple[int, ...]], bytes] = {}
        kinds: list[tuple[bytes, tuple[int, ...]] | None] = []  # a prepare (its key) or a statement (None)
        pg.enter_pipeline_mode()
        synced = False
        try:
            for sql, params in stmts:
                self._send(sql, params, fresh, kinds)
            pg.pipeline_sync()
            synced = True
            self._flush()
            results = self._receive()
        except BaseException:  # a parameter psycopg cannot adapt, or an interruption while waiting
            self._abandon(synced)
            raise
        pg.exit_pipeline_mode()
        return self._unpack(results, kinds, fresh)

    def _send(self, sql: str, params: Any, fresh: dict[tuple[bytes, tuple[int, ...]], bytes],
              kinds: list[tuple[bytes, tuple[int, ...]] | None]) -> None:
        pg, tx = self.pgconn, self.tx
        q = numbered(sql)
        if params:
            n = len(params)
            values = tx.dump_sequence(params, self._fmt[n] if n < 64 else [self._fmt[1][0]] * n)
            types = tuple(tx.types)
        else:
            values, types = None, ()
        key = (q, types)
        name = self.names.get(key) or fresh.get(key)
        if name is None and len(self.names) + len(fresh) < PREPARED_MAX:
            self._n += 1
            name = fresh[key] = b"lc_%d" % self._n
            pg.send_prepare(name, q, param_types=types or None)
            kinds.append(key)
        if name is not None:
            pg.send_query_prepared(name, values)
        else:
            pg.send_query_params(q, values, param_types=types or None)
        kinds.append(None)

    def _wait(self, write: bool) -> None:
        fd = self.pgconn.socket
        if _POLL is None:  # no poll(2) (Windows)
            select.select([fd], [fd] if write else [], [])
            return
        p = _POLL()
        p.register(fd, select.POLLIN | select.POLLOUT if write else select.POLLIN)
        p.poll()

    def _flush(self) -> None:
        pg = self.pgconn
        while pg.flush():
            self._wait(True)
            pg.consume_input()

    def _receive(self) -> list[Any]:
        """Every result up to the pipeline's sync point."""
        pg, sync = self.pgconn, self.pq.ExecStatus.PIPELINE_SYNC
        bad = self.pq.ConnStatus.BAD
        out = []
        while True:
            while pg.is_busy():
                self._wait(False)
                pg.consume_input()
            r = pg.get_result()
            if r is None:  # the end of one statement's results
                if pg.status == bad:
                    raise self.errors.OperationalError("the connection is lost")
                continue
            if r.status == sync:
                return out
            out.append(r)

    def _unpack(self, results: list[Any], kinds: list[tuple[bytes, tuple[int, ...]] | None],
                fresh: dict[tuple[bytes, tuple[int, ...]], bytes]) -> list[_Rows]:
        ok = (self.pq.ExecStatus.COMMAND_OK, self.pq.ExecStatus.TUPLES_OK, self.pq.ExecStatus.EMPTY_QUERY)
        tx = self.tx
        out, error = [], None
        for kind, r in zip(kinds, results, strict=True):
            if r.status not in ok:
                if error is None and r.status != self.pq.ExecStatus.PIPELINE_ABORTED:
                    error = r
                continue
            if kind is not None:  # a statement prepared in this round trip, ready from now on
                self.names[kind] = fresh[kind]
            elif r.ntuples:
                tx.set_pgresult(r)
                out.append(_Rows(tx.load_rows(0, r.ntuples, tuple), r.command_tuples or 0))
            else:
                out.append(_Rows([], r.command_tuples or 0))
        if error is not None:
            raise self.errors.error_from_result(error, encoding=self.raw.info.encoding)
        return out

    def _abandon(self, synced: bool) -> None:
        """After a round trip broken off on the client: close it with its sync point (or cancel
        what the server runs, as psycopg does when interrupted), read up to that point and leave
        pipeline mode, so the connection can roll back; or close the connection if that fails."""
        pg = self.pgconn
        try:
            if synced:
                pg.get_cancel().cancel()
            else:
                pg.pipeline_sync()
            self._flush()
            self._receive()
            pg.exit_pipeline_mode()
        except BaseException:  # noqa: BLE001 - the connection is unusable; the caller's error goes on
            pg.finish()


class _Cursor:
    """The ledger's cursor: statements are translated and sent through ``_Wire``.

    Writes whose result the ledger never reads (``UPDATE``s and ``INSERT``s other than the work
    row's, whose row count tells a duplicate) are held back and sent together with the next
    statement that needs an answer's round trip, or with ``COMMIT``: an operation's row update,
    event and commit then cost one round trip instead of three.  They run in the one
    transaction, so the server refuses them exactly as it would one by one; before a crash
    point fires they are flushed, so a process killed there has sent what the SQLite ledger
    would have written.
    """

    __slots__ = ("last", "pending", "prefix", "wire")

    def __init__(self, wire: _Wire) -> None:
        self.wire = wire
        self.last = _Rows([], 0)
        self.pending: list[tuple[str, Any]] = []
        self.prefix: list[tuple[str, Any]] = []  # the transaction's BEGIN and lock, sent with the first statement

    def execute(self, sql: str, params: Any = ()) -> Any:
        if sql.startswith(_DEFERRED) and not sql.startswith("INSERT INTO work("):
            self.pending.append((translate(sql), params))
            return self
        self.last = self.flush((translate(sql), params))
        return self.last

    def executemany(self, sql: str, seq: Any) -> None:
        q = translate(sql)
        self.pending.extend((q, params) for params in seq)

    def flush(self, last: tuple[str, Any] | None = None) -> _Rows:
        """Send the transaction's prefix, the held-back writes and ``last`` in one round trip;
        ``last``'s result."""
        stmts = self.prefix + self.pending
        if last is not None:
            stmts.append(last)
        self.prefix, self.pending = [], []
        out = self.wire.run(stmts)
        return out[-1] if last is not None else self.last

    @property
    def rowcount(self) -> int:
        return self.last.rowcount


class _Conn:
    """The ledger's connection: statements outside a writing transaction go through the wire too."""

    __slots__ = ("raw", "wire")

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.wire = _Wire(raw)

    def execute(self, sql: str, params: Any = ()) -> _Rows:
        return self.wire.run([(translate(sql), params)])[0]

    def cursor(self) -> _Cursor:
        return _Cursor(self.wire)

    def close(self) -> None:
        self.raw.close()


# ---------------------------------------------------------------------- the ledger
class PgLedger(Ledger):
    """A work ledger in schema ``schema`` of the PostgreSQL database ``dsn``.

    ``create=False`` refuses a schema that holds no ledger yet (the operator CLI opens that way).
    """

    def __init__(
        self,
        dsn: str,
        schema: str = "ledger",
        spec: Spec | None = None,
        *,
        synchronous: str = "NORMAL",
        busy_timeout: float = 5.0,
        pointer_file: str | None = None,
        crash_hook: Callable[[str], None] | None = None,
        actor: str = "ledger",
        create: bool = True,
        seed: int | None = None,
        connect_timeout: float = 10.0,
    ) -> None:
        psycopg = require_driver()
        self.dsn = dsn
        self.schema = check_schema_name(schema)
        self.path = f"{_where(dsn)} schema {schema}"  # type: ignore[assignment]  # names the ledger in messages
        self._setup(spec, crash_hook=crash_hook, actor=actor, busy_timeout=busy_timeout, synchronous=synchronous, seed=seed)
        self.DB_ERRORS = (psycopg.Error,)
        self._CAUGHT = (psycopg.Error, ValueError, KeyError, TypeError)
        self._psycopg = psycopg
        self._key = _lock_key(schema)
        try:
            raw = psycopg.connect(dsn, autocommit=True, connect_timeout=max(1, int(connect_timeout)),
                                  application_name=APPLICATION)
        except psycopg.Error as exc:
            raise LedgerOpenError(f"{self.path}: cannot connect: {_first_line(exc)}") from None
        raw.adapters.register_dumper(bool, _bool_dumper(psycopg))
        # the ledger's statements are prepared by _Wire under its own names; psycopg's cache,
        # which answers a ROLLBACK or DROP with DEALLOCATE ALL, stays off on this connection
        raw.prepare_threshold = None
        self.conn = _Conn(raw)  # type: ignore[assignment]
        try:
            raw.execute(f'SET search_path TO "{schema}"')
            raw.execute(f"SET lock_timeout = {int(self.busy_timeout * 1000)}")
            if self.synchronous in ("FULL", "EXTRA"):
                raw.execute("SET synchronous_commit = on")
            self._prepare_schema(create)
        except LedgerOpenError:
            raw.close()
            raise
        except psycopg.Error as exc:
            raw.close()
            raise LedgerOpenError(f"{self.path}: not a usable ledger ({_first_line(exc)})") from None
        self._cur: _Cursor = self.conn.cursor()  # type: ignore[assignment]
        self.pointer = None
        if pointer_file is not None:
            self.pointer = ActivePointer(pointer_file, self.path, durable=self.synchronous in ("FULL", "EXTRA"))
            try:
                self.pointer.reconcile(self.active_leases)
            except OSError as exc:
                raw.close()
                raise LedgerOpenError(f"{self.pointer.path}: cannot write the active pointer ({exc.strerror or exc})") from None

    # ------------------------------------------------------------------ schema
    def _prepare_schema(self, create: bool) -> None:
        """Create the schema of a new ledger and validate an existing one, under a session lock
        on the ledger's key (processes opening the same ledger at once create it once)."""
        raw = self.conn.raw
        spec = self.spec
        raw.execute("SELECT pg_advisory_lock(%s)", (self._key,))
        try:
            exists = raw.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)).fetchone() is not None
            if not exists:
                if not create:
                    raise LedgerOpenError(f"{self.path}: no such ledger (the database has no schema {self.schema!r})")
                with raw.transaction():
                    raw.execute(f'CREATE SCHEMA "{self.schema}"')
                    for sql in _schema_ddl(spec, self.schema):
                        raw.execute(sql)
                    raw.cursor().executemany("INSERT INTO meta(key, value) VALUES (%s, %s)", [
                        ("application", APPLICATION), ("schema_version", str(SCHEMA_VERSION)),
                        ("contract_shape", json.dumps(contract_shape(spec), sort_keys=True))])
            self._validate()
            stored = dict(raw.execute("SELECT key, value FROM meta WHERE key IN ('contract_digest', 'rule_indexes')").fetchall())
            indexes = json.dumps({k: _ddl(v) for k, v in rule_indexes(spec).items()}, sort_keys=True)
            have = set(raw.execute("SELECT src, dst FROM allowed_transition").fetchall())
            if (stored.get("contract_digest") != spec.digest or stored.get("rule_indexes") != indexes
                    or have != {(t.src, t.dst) for t in spec.transitions}):
                self._sync_rules(stored.get("rule_indexes"), indexes)
        finally:
            raw.execute("SELECT pg_advisory_unlock(%s)", (self._key,))

    def _validate(self) -> None:
        raw = self.conn.raw
        have = {r[0] for r in raw.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                                          (self.schema,)).fetchall()}
        if "meta" not in have:
            what = ", ".join(sorted(have)[:4]) or "no tables"
            raise LedgerOpenError(f"{self.path}: schema {self.schema!r} is not a ledgercheck ledger ({what})")
        meta = dict(raw.execute("SELECT key, value FROM meta WHERE key IN ('application', 'schema_version', "
                                "'contract_shape')").fetchall())
        if meta.get("application") != APPLICATION:
            raise LedgerOpenError(f"{self.path}: schema {self.schema!r} is not a ledgercheck ledger (no application mark)")
        if meta.get("schema_version") != str(SCHEMA_VERSION):
            raise LedgerOpenError(f"{self.path}: ledger schema version {meta.get('schema_version')}, "
                                  f"this ledgercheck reads version {SCHEMA_VERSION}")
        missing = [t for t in TABLES if t not in have]
        if missing:
            raise LedgerOpenError(f"{self.path}: damaged ledger, table(s) {', '.join(missing)} missing")
        stored, want = json.loads(meta.get("contract_shape") or "{}"), contract_shape(self.spec)
        if stored != want:
            diff = [k for k in want if stored.get(k) != want[k]]
            raise LedgerOpenError(f"{self.path}: created for a contract with different {', '.join(diff)}")

    def _sync_rules(self, old_indexes: str | None, indexes: str) -> None:
        from .opening import _contract_text

        raw, spec = self.conn.raw, self.spec
        with raw.transaction():
            raw.execute("DELETE FROM allowed_transition")
            raw.cursor().executemany("INSERT INTO allowed_transition(src, dst) VALUES (%s, %s)",
                                     [(t.src, t.dst) for t in spec.transitions])
            if old_indexes != indexes:
                for name, sql in json.loads(indexes).items():
                    raw.execute(f"DROP INDEX IF EXISTS {name}")
                    raw.execute(sql)
            raw.cursor().executemany(
                "INSERT INTO meta(key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                [("contract_digest", spec.digest), ("contract", _contract_text(spec)),
                 ("contract_version", spec.version), ("rule_indexes", indexes)])

    # ------------------------------------------------------------------ the backend seam
    def _begin(self) -> None:
        # sent with the transaction's first statement (see _Cursor.flush)
        self._cur.prefix = [("BEGIN", None), ("SELECT pg_advisory_xact_lock(%s)", (self._key,))]

    def _commit(self) -> None:
        self._cur.flush(("COMMIT", None))

    def _flush(self) -> None:
        if self._cur.pending or self._cur.prefix:
            self._cur.flush()

    def _rollback(self) -> None:
        self._cur.pending.clear()
        self._cur.prefix.clear()
        try:
            if self.conn.raw.info.transaction_status != self._psycopg.pq.TransactionStatus.IDLE:
                self.conn.wire.run([("ROLLBACK", None)])
        except self._psycopg.Error:
            pass

    def _waiting(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)  # the server queues lock waits itself, up to lock_timeout

    def _db_error(self, exc: Exception) -> Any:
        from ledgercheck.transport.protocol import LedgerError

        errors = self._psycopg.errors
        msg = _first_line(exc)
        if isinstance(exc, self._psycopg.IntegrityError):
            if msg.startswith("invalid_transition"):
                return LedgerError("invalid_transition", msg)
            return LedgerError("invalid_argument", f"constraint failed: {msg}")
        if isinstance(exc, errors.LockNotAvailable | errors.QueryCanceled):
            return LedgerError("busy", f"{self.path}: the ledger stayed locked past the busy timeout ({self.busy_timeout:g}s)")
        return LedgerError("internal", f"{self.path}: database error: {msg}")

    def close(self) -> None:
        try:
            self.conn.close()
        except self._psycopg.Error:
            pass

    def discard(self) -> None:
        self.close()

    def integrity_check(self) -> list[str]:
        """References the server would refuse to create but an altered schema could hold."""
        out = []
        for table, col in (("work_event", "work_id"), ("effect", "work_id"), ("outbox", "work_id")):
            n = self._read(f"SELECT count(*) FROM {table} t WHERE t.{col} IS NOT NULL "
                           f"AND NOT EXISTS (SELECT 1 FROM work w WHERE w.work_id = t.{col})")[0][0]
            if n:
                out.append(f"{n} row(s) of {table} name a work record that does not exist")
        return out

    def guard_triggers(self) -> tuple[dict[str, str], dict[str, str]]:
        have = dict(self._read(
            "SELECT t.tgname, p.prosrc FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_proc p ON p.oid = t.tgfoid "
            "WHERE n.nspname = ? AND NOT t.tgisinternal", (self.schema,)))
        return have, guard_functions(self.spec, self.schema)


def _bool_dumper(psycopg: Any) -> type:
    """Booleans go to the database as 0/1 (the flag columns are integers, as on SQLite, where
    the operations' True/False are stored as 1/0)."""
    from psycopg.adapt import Dumper

    class BoolAsInt(Dumper):
        oid = psycopg.adapters.types["int8"].oid

        def dump(self, obj: bool) -> bytes:
            return b"1" if obj else b"0"

    return BoolAsInt


def _first_line(exc: BaseException) -> str:
    diag = getattr(exc, "diag", None)
    text = (getattr(diag, "message_primary", None) if diag is not None else None) or str(exc)
    return " ".join(text.split()) or type(exc).__name__


def server_problem(dsn: str, connect_timeout: float = 10.0) -> str | None:
    """Why the database ``dsn`` names cannot be used (not reachable, credentials refused, a
    malformed DSN), in one line naming host:port/database and never the password; None when a
    connection opens and answers."""
    psycopg = require_driver()
    try:
        with psycopg.connect(dsn, autocommit=True, application_name=APPLICATION,
                             connect_timeout=max(1, int(connect_timeout))) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"{_where(dsn)}: cannot connect: {without_secrets(_first_line(exc))}"
    return None


def drop_ledger(dsn: str, schema: str) -> None:
    """Remove a ledger (its schema and everything in it)."""
    psycopg = require_driver()
    with psycopg.connect(dsn, autocommit=True, application_name=APPLICATION, connect_timeout=5) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{check_schema_name(schema)}" CASCADE')


def pg_stored_contract(dsn: str, schema: str) -> dict[str, object] | None:
    """The contract document a PostgreSQL ledger was last opened with, or None."""
    psycopg = require_driver()
    where = f"{_where(dsn)} schema {schema}"
    try:
        conn = psycopg.connect(dsn, autocommit=True, application_name=APPLICATION, connect_timeout=10)
    except psycopg.Error as exc:
        raise LedgerOpenError(f"{where}: cannot connect: {_first_line(exc)}") from None
    try:
        with conn:
            if conn.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = 'meta'",
                            (check_schema_name(schema),)).fetchone() is None:
                return None
            row = conn.execute(f'SELECT value FROM "{schema}".meta WHERE key = %s', ("contract",)).fetchone()
    except psycopg.Error as exc:
        raise LedgerOpenError(f"{where}: cannot read the ledger: {_first_line(exc)}") from None
    return None if row is None else json.loads(row[0])

