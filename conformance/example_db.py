"""Where the stateful tests keep hypothesis' examples: a directory, or a store shared by shards.

Hypothesis saves every failing example (and a corpus of interesting ones) in its example
database, and replays what it finds there before generating anything new.  Without the option
the stateful tests run without one (see :func:`example_database`), so nothing is remembered.  ``--ledger-example-db`` (``certify --example-db``) gives it a store, shared by the shards
and runs of a campaign, so a failure one shard found is the first thing every later run of that
machine tries, on any shard and any host:

- ``DIR``: a directory (a network file system, or one a CI cache restores and saves);
- ``redis://HOST:PORT/DB`` (or ``rediss://``): a Redis server, through hypothesis'
  ``RedisExampleDatabase`` (needs the ``redis`` package: ``pip install 'hypothesis[redis]'``).

Examples are kept apart per adapter (its name and the hash of its address), as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase
from ledgercheck.reports.text import terminal, without_secrets

__all__ = ["ExampleStore", "StoreError", "check_store", "example_database", "parse_store"]

REDIS_SCHEMES = ("redis", "rediss")
KEY_PREFIX = "ledgercheck-example:"


class StoreError(ValueError):
    """The example store named on the command line cannot be used.  The message is one line."""


@dataclass(frozen=True)
class ExampleStore:
    kind: str  # "directory" or "redis"
    location: str  # the directory, or the redis URL as given


MAX_DB = 2**31 - 1  # the largest Redis database index a URL may name


def shown(value: str) -> str:
    """A store as messages show it: its password (if any) as ``***``, control characters escaped."""
    return terminal(without_secrets(value))


def parse_store(value: str) -> ExampleStore:
    """``DIR`` or ``redis://HOST:PORT/DB``; refuses (StoreError) anything else that looks like a URL."""
    text = value.strip()
    if not text:
        raise StoreError("--ledger-example-db: empty; give a directory or redis://HOST:PORT/DB")
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if not scheme:
        return ExampleStore("directory", text)
    name = shown(text)
    if scheme not in REDIS_SCHEMES:
        raise StoreError(f"--ledger-example-db '{name}': unknown scheme '{terminal(scheme)[:20]}'; give a directory or "
                         "redis://HOST:PORT/DB")
    try:
        parts = urlsplit(text)
    except ValueError as exc:  # "Invalid IPv6 URL" and the like
        raise StoreError(f"--ledger-example-db '{name}': not a valid URL ({exc}); write redis://HOST:PORT/DB") from None
    try:
        port = parts.port
    except ValueError:
        raise StoreError(f"--ledger-example-db '{name}': the port is not a number from 1 to 65535") from None
    if not parts.hostname:
        raise StoreError(f"--ledger-example-db '{name}': no host; write redis://HOST:PORT/DB")
    db = parts.path.strip("/")
    if db and not (db.isascii() and db.isdigit() and len(db) <= 10 and int(db) <= MAX_DB):
        raise StoreError(f"--ledger-example-db '{name}': the database must be a number from 0 to {MAX_DB} "
                         f"(redis://HOST:PORT/0), not '{terminal(db)[:40]}'")
    if port == 0:
        raise StoreError(f"--ledger-example-db '{name}': the port is not a number from 1 to 65535")
    _redis_client(ExampleStore("redis", text)).close()  # its query settings (?socket_timeout=...) are checked now
    return ExampleStore("redis", text)


def _redis_client(store: ExampleStore):  # type: ignore[no-untyped-def]
    try:
        import redis
    except ImportError:
        raise StoreError(f"--ledger-example-db {shown(store.location)}: a Redis store needs the redis package "
                         "(pip install 'hypothesis[redis]')") from None
    try:
        return redis.Redis.from_url(store.location, socket_connect_timeout=5.0, socket_timeout=30.0)
    except (ValueError, TypeError) as exc:  # a setting in the query string it cannot read
        raise StoreError(f"--ledger-example-db {shown(store.location)}: {terminal(without_secrets(exc))}") from None


def check_store(store: ExampleStore) -> None:
    """Fail now, in one line, on a store that cannot be used: a directory that cannot be made, a Redis
    server that does not answer.  The messages never show the store's password."""
    if store.kind == "directory":
        try:
            Path(store.location).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"--ledger-example-db {terminal(store.location)}: cannot use the directory: "
                             f"{exc.strerror or exc}") from None
        return
    client = _redis_client(store)
    try:
        client.ping()
    except Exception as exc:  # redis raises its own ConnectionError/ResponseError/AuthenticationError
        why = " ".join(without_secrets(exc).split())
        raise StoreError(f"--ledger-example-db {shown(store.location)}: the Redis server does not answer: "
                         f"{terminal(why)}") from None
    finally:
        client.close()


def example_database(store: ExampleStore | None, namespace: str) -> ExampleDatabase | None:
    """The example database for one adapter (``namespace``) in ``store``; None without a store.

    Without a store the stateful tests keep no examples: with a database hypothesis also keeps a
    pareto front of its targets there, which costs a failing run several times its CPU time (one
    broken ledger, one seed: 9.8 s without a database, 47.6 s with an in-memory one and the target
    phase off, far more with it on), so only a campaign that asks to share what it finds pays it."""
    if store is None:
        return None
    if store.kind == "directory":
        return DirectoryBasedExampleDatabase(str(Path(store.location) / namespace))
    from hypothesis.extra.redis import RedisExampleDatabase

    return RedisExampleDatabase(_redis_client(store), key_prefix=f"{KEY_PREFIX}{namespace}:".encode())
