"""Throughput of the reference ledger on PostgreSQL against raw psycopg, side by side in one run.

Workload: the lifecycle create -> claim -> renew -> close-out, four committed transactions per
item, as in ``bench_reference.py``.  The baseline does the same four transactions with plain
psycopg 3 on tables of the same columns (each ``BEGIN``, write the work row, insert one event
row with the same JSON data, ``COMMIT``), with no checks, no triggers, no reads and no lock.
Both use one autocommit connection with explicit transactions to the same server (a private one
started here, or ``--dsn``).  Rounds alternate (the order flips every round) so that other load
on the machine hits both alike.

    python bench/bench_reference_pg.py                  # ~5 s per kind
    python bench/bench_reference_pg.py --seconds 20 --json

The floor is a ratio of 0.5 (reference items/s over baseline items/s); ``--strict`` exits 1 below it.
The baseline runs each statement through psycopg's ordinary ``Connection.execute`` (one round
trip each, prepared by psycopg after five uses); the reference sends each transaction's
statements in two round trips through libpq's pipeline mode, prepared once per connection
(``reference/pg.py``, ``_Wire``), and evaluates the two hot tables' CHECKs in its guard
triggers.  Both write the same rows and events, one transaction per operation.

Measured 2026-11-25 on a 2-cpu machine shared with four other sessions, ``--seconds 10``, the
previous ``reference/pg.py`` (psycopg cursors in pipeline mode, CHECK constraints) and this one
run alternately:

    before  02:29  load 4.0   ratio 0.40
            03:00  load 11.7  ratio 0.45      03:01  load 12.6  ratio 0.48
            03:01  load 14.3  ratio 0.41                              median 0.43
    after   02:56  load 9.7   ratio 0.83      02:56  load 8.7   ratio 0.98
            02:57  load 7.8   ratio 0.84      03:00  load 12.2  ratio 1.23
            03:01  load 13.4  ratio 0.85      03:02  load 15.0  ratio 0.76   median 0.85

CPU per item (4 commits) of the client process and of the server backend serving it (from
/proc), the three run alternately in one process at 03:03 (load 14-15), two runs: raw psycopg
1.4-1.5 ms client + 1.0 ms server; the reference before 2.4-3.3 ms + 2.4-3.2 ms, after
1.0-1.2 ms + 1.5-1.8 ms (ratios before 0.36 and 0.54, after 0.83 and 1.01).  Under load the
ratio follows the CPU per item; on an idle machine it follows the round trips (16 per item for
the baseline, 9 for the reference).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_reference import RAW_EVENT, RAW_WORK  # noqa: E402  (same tables as the SQLite baseline)

FLOOR = 0.5


def _pg(sql: str) -> str:
    return sql.replace("REAL", "DOUBLE PRECISION").replace("?", "%s")


class Raw:
    """Four transactions per item with plain psycopg: write the row, append the event."""

    def __init__(self, dsn: str, schema: str) -> None:
        import psycopg

        self.c = psycopg.connect(dsn, autocommit=True)
        self.c.execute(f'CREATE SCHEMA "{schema}"')
        self.c.execute(f'SET search_path TO "{schema}"')
        self.c.execute(_pg(RAW_WORK))
        self.c.execute(_pg(RAW_EVENT))
        self.ev = "INSERT INTO work_event VALUES (%s, %s, %s, %s, %s, %s, 'raw', %s)"

    def item(self, i: int, tag: str) -> None:
        c, dumps, now, ev = self.c, json.dumps, float(i), self.ev
        w = uuid.uuid4().hex
        c.execute("BEGIN")
        c.execute("INSERT INTO work VALUES (%s, 'manual', %s, NULL, 'queued', NULL, 3, 0, NULL, NULL, 0, NULL, NULL, NULL, "
                  "NULL, NULL, NULL, 0, 0, NULL, %s, NULL, NULL, 1, NULL, NULL, %s)", (w, f"{tag}-{i}", now, now))
        c.execute(ev, (w, 1, "work_created", None, "queued", now, dumps({
            "source_system": "manual", "source_id": f"{tag}-{i}", "source_run_id": None, "priority": 3, "attempt": 0,
            "lease_version": 0, "cancel_requested": False, "quarantined": False})))
        c.execute("COMMIT")
        tok = os.urandom(12).hex()
        c.execute("BEGIN")
        c.execute("UPDATE work SET status = 'running', owner = %s, lease_token = %s, lease_version = 1, lease_expires_at = %s, "
                  "attempt = 1, started_at = %s, event_count = 2, updated_at = %s WHERE work_id = %s",
                  (tag, tok, now + 45, now, now, w))
        c.execute(ev, (w, 2, "claimed", "queued", "running", now, dumps({
            "owner": tag, "lease_token": tok, "lease_version": 1, "lease_expires_at": now + 45, "attempt": 1, "started_at": now})))
        c.execute("COMMIT")
        c.execute("BEGIN")
        c.execute("UPDATE work SET lease_expires_at = %s, event_count = 3, updated_at = %s WHERE work_id = %s", (now + 46, now + 1, w))
        c.execute(ev, (w, 3, "lease_renewed", None, None, now + 1, dumps({"lease_expires_at": now + 46})))
        c.execute("COMMIT")
        c.execute("BEGIN")
        c.execute("UPDATE work SET status = 'done', result = %s, finished_at = %s, status_reason = NULL, owner = NULL, "
                  "lease_token = NULL, lease_expires_at = NULL, event_count = 4, updated_at = %s WHERE work_id = %s",
                  (dumps({"ok": True}), now + 2, now + 2, w))
        c.execute(ev, (w, 4, "closed_out", "running", "done", now + 2, dumps({
            "owner": None, "lease_token": None, "lease_expires_at": None, "result": {"ok": True}, "finished_at": now + 2,
            "error_class": None})))
        c.execute("COMMIT")

    def close(self) -> None:
        self.c.close()


class Reference:
    """The same lifecycle through the PostgreSQL reference ledger's operations."""

    def __init__(self, dsn: str, schema: str) -> None:
        from ledgercheck.reference.pg import PgLedger

        self.ledger = PgLedger(dsn, schema)

    def item(self, i: int, tag: str) -> None:
        led, now = self.ledger, float(i)
        w = led.create(source_system="manual", source_id=f"{tag}-{i}", now=now)["work"]["work_id"]
        tok = led.claim(owner=tag, work_id=w, now=now)["lease_token"]
        led.renew(work_id=w, token=tok, now=now + 1)
        led.close_out(work_id=w, token=tok, status="done", result={"ok": True}, now=now + 2)

    def close(self) -> None:
        self.ledger.close()


def measure(dsn: str, seconds: float, chunk: int) -> dict[str, Any]:
    tag = f"b{os.getpid()}"
    stores = {"raw": Raw(dsn, f"bench_raw_{tag}"), "reference": Reference(dsn, f"bench_ref_{tag}")}
    spent = dict.fromkeys(stores, 0.0)
    done = dict.fromkeys(stores, 0)
    order = list(stores)
    i = 0
    try:
        while min(spent.values()) < seconds / 2 or i == 0:
            for kind in order:
                t = time.perf_counter()
                for k in range(i, i + chunk):
                    stores[kind].item(k, tag)
                spent[kind] += time.perf_counter() - t
                done[kind] += chunk
            order.reverse()
            i += chunk
    finally:
        for s in stores.values():
            s.close()
    rate = {k: done[k] / spent[k] for k in stores}
    return {"items": done["reference"], "raw_items_per_s": rate["raw"], "reference_items_per_s": rate["reference"],
            "ratio": rate["reference"] / rate["raw"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dsn", help="a PostgreSQL database to use (default: a private server started here)")
    p.add_argument("--seconds", type=float, default=10.0, help="total measuring time, both kinds together")
    p.add_argument("--chunk", type=int, default=50, help="items per round")
    p.add_argument("--json", action="store_true")
    p.add_argument("--strict", action="store_true", help=f"exit 1 when the ratio is below {FLOOR}")
    args = p.parse_args(argv)
    server = None
    dsn = args.dsn
    if dsn is None:
        from ledgercheck.services.postgres import PostgresServer, PostgresUnavailable

        try:
            server = PostgresServer().start()
        except PostgresUnavailable as exc:
            print(f"bench: {exc}", file=sys.stderr)
            return 2
        dsn = server.dsn()
    try:
        result = measure(dsn, args.seconds, args.chunk)
    finally:
        if server is not None:
            server.stop()
    result.update(floor=FLOOR, python=platform.python_version(), cpus=os.cpu_count(), load_average=os.getloadavg()[0])
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"lifecycle items/s (4 commits each): raw psycopg {result['raw_items_per_s']:.0f}, "
              f"reference on PostgreSQL {result['reference_items_per_s']:.0f}; ratio {result['ratio']:.2f} "
              f"(floor {FLOOR}) over {result['items']} items each; load average {result['load_average']:.2f}")
    return 1 if args.strict and result["ratio"] < FLOOR else 0


if __name__ == "__main__":
    raise SystemExit(main())
