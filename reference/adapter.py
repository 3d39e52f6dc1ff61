"""The reference ledger as an adapter: registered under the ``ledgercheck.adapters`` entry point
exactly as a vendor's package would register its own."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ledgercheck.spec import Spec, SpecError, default_spec
from ledgercheck.spec.load import spec_from_document
from ledgercheck.transport.protocol import Handshake, LedgerError

from ledgercheck import PROTOCOL_VERSION, __version__

from .ledger import CRASH_POINTS, Ledger, LedgerOpenError


def _remove_scratch(path: str, owner: int) -> None:
    """Remove an adapter's scratch directory, in the process that made it only (a forked child
    inherits the finalizer, not the directory)."""
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


class ReferenceAdapter:
    """Serves the contract from a fresh SQLite ledger per reset.

    ``reset(config)`` understands:
      ``dir``          keep the database in this directory (state survives a new process)
      ``contract``     the merged contract document the harness tests against
      ``synchronous``  NORMAL (default) or FULL
      ``pointer``      also maintain active-work.json next to the database
      ``seed``         seed the jitter draws, so a replayed run makes the same choices
    """

    def __init__(self, spec: Spec | None = None, synchronous: str = "NORMAL") -> None:
        self.spec = spec or default_spec()
        self.synchronous = synchronous
        self.ledger: Ledger | None = None
        self._tmp: str | None = None
        self._scratch: Path | None = None
        self._serial = 0
        self._cleanup: weakref.finalize | None = None
        self.crash_hook: Callable[[str], None] | None = None

    # ------------------------------------------------------------------ session
    def hello(self, protocol: str = PROTOCOL_VERSION) -> Handshake:
        return {
            "name": "ledgercheck-reference",
            "version": __version__,
            "protocol": PROTOCOL_VERSION,
            "profiles": list(self.spec.profiles),
            "capabilities": {"clock": "injected", "durable": True, "concurrent": True,
                             "delivery": "effectively-once", "reclaim": "lease"},
            "crash_points": list(CRASH_POINTS),
            "known_bugs": {},
        }

    def reset(self, config: dict[str, Any] | None = None) -> None:
        config = config or {}
        self.close()
        if config.get("contract") is not None:
            try:
                self.spec = spec_from_document(config["contract"])
            except SpecError as exc:
                raise LedgerError("invalid_argument", f"reset: the contract does not validate: {exc.problems[0]}") from None
        sync = str(config.get("synchronous", self.synchronous)).upper()
        if sync not in ("NORMAL", "FULL"):
            raise LedgerError("invalid_argument", f"reset: synchronous must be NORMAL or FULL, not {sync!r}")
        if config.get("dir"):
            root = Path(config["dir"])
            root.mkdir(parents=True, exist_ok=True)
            path = root / "ledger.db"
        else:
            # a fresh file in this adapter's scratch directory, copied from an empty ledger made
            # once per contract: a reset costs a file copy, not a schema build
            if self._tmp is None:
                self._tmp = tempfile.mkdtemp(prefix="ledgercheck-ref-")
                # removed when the adapter is collected or, at the latest, when the interpreter
                # exits normally (a killed process leaves it to the run's scratch parent)
                self._cleanup = weakref.finalize(self, _remove_scratch, self._tmp, os.getpid())
            root = Path(self._tmp)
            self._serial += 1
            path = root / f"ledger-{self._serial}.db"
            self._scratch = path
            try:
                shutil.copyfile(self._template(root), path)
            except OSError as exc:
                raise LedgerError("internal", f"reset: cannot prepare {path}: {exc.strerror}") from None
        try:
            self.ledger = Ledger(
                path,
                self.spec,
                synchronous=sync,
                pointer_file=(root / "active-work.json") if config.get("pointer") else None,
                crash_hook=self.crash_hook,
                seed=config.get("seed") if isinstance(config.get("seed"), int) else None,
            )
        except LedgerOpenError as exc:
            raise LedgerError("invalid_argument", f"reset: {exc}") from None

    def _template(self, root: Path, spec: Spec | None = None, tag: str = "") -> Path:
        """An empty ledger for ``spec`` (default: the current contract), checkpointed into a single
        file; ``tag`` names a contract its digest does not tell apart (one changed in code)."""
        spec = spec or self.spec
        tpl = root / f"template-{tag}{spec.digest[:16]}.db"
        if not tpl.exists():
            tmp = root / f"{tpl.name}.building"
            led = Ledger(tmp, spec)
            led.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            led.close()
            for suffix in ("-wal", "-shm"):
                Path(str(tmp) + suffix).unlink(missing_ok=True)
            tmp.replace(tpl)
        return tpl

    def close(self) -> None:
        if self.ledger is not None:
            if self._scratch is not None:
                self.ledger.discard()
            else:
                self.ledger.close()
            self.ledger = None
        if self._scratch is not None:
            for suffix in ("", "-wal", "-shm"):
                Path(str(self._scratch) + suffix).unlink(missing_ok=True)
            self._scratch = None

    def set_crash_hook(self, hook: Callable[[str], None] | None) -> None:
        """Called with a point name at each of the ledger's own crash points (chaos runs)."""
        self.crash_hook = hook
        if self.ledger is not None:
            self.ledger.crash_hook = hook

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        d = self.__dict__
        ledger = d.get("ledger")
        if ledger is None:
            raise LedgerError("invalid_argument", f"{name}: the adapter has no open ledger; call reset first")
        got = getattr(ledger, name)
        if callable(got) and type(self).__getattr__ is ReferenceAdapter.__getattr__:
            # the ledger's operation, kept until another ledger is set (__setattr__): the next
            # call of it finds it without coming here (not in a subclass with a __getattr__ of
            # its own, which may hand out something else than what it gets from here)
            d[name] = got
            d.setdefault("_forwarded", []).append(name)
        return got

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "ledger":
            d = self.__dict__
            for forwarded in d.pop("_forwarded", ()):
                d.pop(forwarded, None)
        object.__setattr__(self, name, value)


PG_DSN_ENV = "LEDGERCHECK_PG_DSN"


def _connection_lost(ledger: Any) -> bool:
    """Whether a PostgreSQL ledger's connection is gone (closed, or broken by the server or network)."""
    raw = getattr(getattr(ledger, "conn", None), "raw", None)
    if raw is None:
        return False
    try:
        from psycopg import pq

        return bool(raw.closed) or raw.pgconn.status != pq.ConnStatus.OK
    except Exception:  # noqa: BLE001 - a connection that cannot even say is gone
        return True


class PgReferenceAdapter(ReferenceAdapter):
    """The reference ledger on PostgreSQL (``--adapter reference-pg``): the same operations and
    rules as ``reference``, each ledger a schema of a PostgreSQL database.

    ``reset(config)`` understands what ``ReferenceAdapter`` does, plus:
      ``dsn``      the PostgreSQL database to keep ledgers in; else ``$LEDGERCHECK_PG_DSN``; else
                   a private server started for this process on 127.0.0.1, whose DSN is then put
                   into ``$LEDGERCHECK_PG_DSN`` so worker processes started later use it too
      ``schema``   the ledger's schema name (kept across resets; the operator CLI's ``--schema``)
      ``dir``      without ``schema``: the ledger's schema is named after this directory, so a new
                   process given the same ``dir`` reopens the same ledger (``active-work.json``,
                   with ``pointer``, is written there)
    Without either, each reset gets an empty scratch ledger (one scratch schema per contract,
    emptied at every reset and dropped when the adapter closes).
    """

    name = "ledgercheck-reference-pg"

    def __init__(self, spec: Spec | None = None, synchronous: str = "NORMAL") -> None:
        from .pg import require_driver

        require_driver()  # without psycopg: one line naming the extra, before any test runs
        super().__init__(spec, synchronous)
        self._scratch_schemas: dict[str, tuple[str, str]] = {}  # contract digest -> (dsn, schema)
        self._dsn: str | None = None
        self._reached = False
        # the scratch schemas are dropped when the adapter goes away or, at the latest, when the
        # interpreter exits (while it can still import and connect: a __del__ at shutdown cannot)
        self._drop_at_exit = weakref.finalize(self, _drop_schemas, self._scratch_schemas, os.getpid())

    def hello(self, protocol: str = PROTOCOL_VERSION) -> Handshake:
        if not self._reached:
            self._check_server()
        return {**super().hello(protocol), "name": self.name}

    def _check_server(self) -> None:
        """Connect to the database once, at the handshake, before any test runs: a server that is
        not there or refuses the credentials is one line naming host:port/database (never the
        password), not a failure of every test that follows."""
        from .pg import LedgerOpenError as _Open
        from .pg import require_driver, server_problem

        try:
            require_driver()
        except _Open as exc:
            raise LedgerError("internal", str(exc)) from None
        problem = server_problem(self._server_dsn({}))
        if problem:
            raise LedgerError("internal", problem)
        self._reached = True

    def _server_dsn(self, config: dict[str, Any]) -> str:
        import os

        if config.get("dsn"):
            return str(config["dsn"])
        if os.environ.get(PG_DSN_ENV):
            return os.environ[PG_DSN_ENV]
        if self._dsn is None:
            from ledgercheck.services.postgres import PostgresUnavailable, shared_server

            try:
                self._dsn = shared_server().dsn()
            except PostgresUnavailable as exc:
                raise LedgerError("internal", f"reset: no PostgreSQL server to keep the ledger in: {exc}") from None
            os.environ[PG_DSN_ENV] = self._dsn  # processes started from here on share it
        return self._dsn

    def reset(self, config: dict[str, Any] | None = None) -> None:
        import hashlib
        import os

        from .pg import LedgerOpenError as _Open
        from .pg import PgLedger, require_driver

        config = config or {}
        self.close()
        try:
            require_driver()
        except _Open as exc:
            raise LedgerError("internal", f"reset: {exc}") from None
        if config.get("contract") is not None:
            try:
                self.spec = spec_from_document(config["contract"])
            except SpecError as exc:
                raise LedgerError("invalid_argument", f"reset: the contract does not validate: {exc.problems[0]}") from None
        sync = str(config.get("synchronous", self.synchronous)).upper()
        if sync not in ("NORMAL", "FULL"):
            raise LedgerError("invalid_argument", f"reset: synchronous must be NORMAL or FULL, not {sync!r}")
        dsn = self._server_dsn(config)
        pointer = None
        scratch = None
        if config.get("schema"):
            schema = str(config["schema"])
        elif config.get("dir"):
            root = Path(config["dir"])
            root.mkdir(parents=True, exist_ok=True)
            schema = "lc_d_" + hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:24]
            pointer = root / "active-work.json"
        else:
            scratch = self._scratch_schemas.get(self.spec.digest)
            if scratch is None or scratch[0] != dsn:
                scratch = (dsn, f"lc_s_{os.getpid()}_{len(self._scratch_schemas)}_{os.urandom(4).hex()}")
                self._scratch_schemas[self.spec.digest] = scratch
            else:
                self._empty(*scratch)
            schema = scratch[1]
            if config.get("pointer"):
                if self._tmp is None:
                    self._tmp = tempfile.mkdtemp(prefix="ledgercheck-ref-")
                pointer = Path(self._tmp) / "active-work.json"
        def open_ledger() -> Any:
            return PgLedger(dsn, schema, self.spec, synchronous=sync,
                            pointer_file=str(pointer) if pointer and config.get("pointer") else None,
                            crash_hook=self.crash_hook,
                            seed=config.get("seed") if isinstance(config.get("seed"), int) else None)

        try:
            self.ledger = open_ledger()
        except _Open as exc:
            raise LedgerError("invalid_argument", f"reset: {exc}") from None
        self._reopen = open_ledger

    def __getattr__(self, name: str) -> Any:
        """The ledger's operation; when the ledger's connection was lost (a reply cut off on the way,
        chaos/safety/replies.py: the call that lost it answered ``internal``, indefinite), the next
        operation opens the same ledger on a new connection first."""
        got = ReferenceAdapter.__getattr__(self, name)
        if not callable(got):
            return got

        @functools.wraps(got)  # its signature: the harness checks arguments against it
        def op(*args: Any, **kwargs: Any) -> Any:
            ledger = self.__dict__.get("ledger")
            if ledger is not None and _connection_lost(ledger) and self.__dict__.get("_reopen") is not None:
                from .pg import LedgerOpenError as _Open

                try:
                    ledger.close()
                except Exception:  # noqa: BLE001 - a dead connection closes as it can
                    pass
                self.ledger = None
                try:
                    self.ledger = self._reopen()
                except _Open as exc:
                    raise LedgerError("busy", f"{name}: the ledger's connection was lost and cannot be opened "
                                              f"again; nothing was done: {exc}") from None
            return getattr(self.ledger, name)(*args, **kwargs)
        d = self.__dict__  # kept until another ledger is set, as ReferenceAdapter keeps its operations
        d[name] = op
        d.setdefault("_forwarded", []).append(name)
        return op

    @staticmethod
    def _empty(dsn: str, schema: str) -> None:
        """Empty a scratch ledger for the next reset (TRUNCATE fires no row triggers: the guards
        that refuse deleting work and events do not apply to throwing the whole ledger away)."""
        import psycopg

        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f'TRUNCATE "{schema}".work, "{schema}".work_event, "{schema}".effect, "{schema}".inbox, '
                             f'"{schema}".outbox, "{schema}".log_entry, "{schema}".lane, "{schema}".lane_task, "{schema}".wake_run')
        except psycopg.errors.UndefinedTable:
            pass  # dropped meanwhile: the open creates it again
        except psycopg.Error as exc:
            raise LedgerError("internal", f"reset: cannot empty the scratch ledger {schema}: {exc}") from None

    def close(self) -> None:
        if self.ledger is not None:
            self.ledger.close()
            self.ledger = None

    def drop_scratch(self) -> None:
        """Drop the scratch schemas this adapter made."""
        self.close()
        _drop_schemas(self._scratch_schemas, os.getpid())


def _drop_schemas(schemas: dict[str, tuple[str, str]], owner: int) -> None:
    """Drop scratch schemas (dsn, schema), in the process that made them only (a forked child
    inherits the finalizer, not the schemas); a server already gone is no error."""
    if os.getpid() != owner or not schemas:
        return
    try:
        from .pg import drop_ledger

        for dsn, schema in list(schemas.values()):
            try:
                drop_ledger(dsn, schema)
            except Exception:  # noqa: BLE001 - the server may be gone already (interpreter exit)
                pass
    except Exception:  # noqa: BLE001 - an interpreter too far into its exit to import the driver
        pass
    schemas.clear()
