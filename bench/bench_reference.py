"""Throughput of the reference ledger against raw sqlite3, measured side by side in one run.

Workload: the lifecycle create -> claim -> renew -> close-out, i.e. four committed transactions
per item.  The baseline does the same four transactions with plain ``sqlite3`` on a table of
the same columns: each inserts or updates the work row and inserts one event row carrying the
same JSON data, with no checks, no triggers and no reads.  Both run in WAL mode with the same
``synchronous`` setting and the same busy timeout, once in one process and once with two
processes contending for one file.  Rounds of baseline and reference alternate (the order
flips every round) so that noise from other load on the machine hits both alike.

    python bench/bench_reference.py                 # up to 2000 items or ~5 s per measurement
    python bench/bench_reference.py --items 20000 --seconds 0 --json

The floor is a ratio of 0.5 (reference items/s over baseline items/s) at NORMAL and FULL.
``--strict`` exits 1 when a ratio is below it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

FLOOR = 0.5
BUSY_TIMEOUT = 30.0
RAW_WORK = """CREATE TABLE work (
  work_id TEXT PRIMARY KEY, source_system TEXT, source_id TEXT, source_run_id TEXT, status TEXT, status_reason TEXT,
  priority INTEGER, attempt INTEGER, owner TEXT, lease_token TEXT, lease_version INTEGER, lease_expires_at REAL,
  waiting_kind TEXT, waiting_ref TEXT, waiting_deadline REAL, next_retry_at REAL, error_class TEXT,
  cancel_requested INTEGER, quarantined INTEGER, result TEXT, created_at REAL, started_at REAL, finished_at REAL,
  event_count INTEGER, retry_policy TEXT, payload TEXT, updated_at REAL)"""
RAW_EVENT = """CREATE TABLE work_event (work_id TEXT, seq INTEGER, type TEXT, from_status TEXT, to_status TEXT, at REAL,
  actor TEXT, data TEXT, PRIMARY KEY (work_id, seq))"""
RAW_INSERT_EVENT = "INSERT INTO work_event VALUES (?, ?, ?, ?, ?, ?, 'raw', ?)"


# ---------------------------------------------------------------------- the two workloads
class Raw:
    """Four transactions per item with plain sqlite3: write the row, append the event."""

    def __init__(self, path: str, synchronous: str) -> None:
        self.c = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT)
        # both workers open a new file at once: switching it to WAL needs it alone, and SQLite
        # answers "locked" at once rather than waiting on that lock, so ask again
        deadline = time.monotonic() + BUSY_TIMEOUT
        while True:
            try:
                self.c.execute("PRAGMA journal_mode = WAL")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.001)
        self.c.execute(f"PRAGMA synchronous = {synchronous}")
        self.c.execute("BEGIN IMMEDIATE")
        if not self.c.execute("SELECT 1 FROM sqlite_master WHERE name = 'work'").fetchone():
            self.c.execute(RAW_WORK)
            self.c.execute(RAW_EVENT)
        self.c.execute("COMMIT")
        self.dumps = json.dumps

    def item(self, i: int, tag: str) -> None:
        c, dumps, now = self.c, self.dumps, float(i)
        w = uuid.uuid4().hex
        c.execute("BEGIN IMMEDIATE")
        c.execute("INSERT INTO work VALUES (?, 'manual', ?, NULL, 'queued', NULL, 3, 0, NULL, NULL, 0, NULL, NULL, NULL, NULL, "
                  "NULL, NULL, 0, 0, NULL, ?, NULL, NULL, 1, NULL, NULL, ?)", (w, f"{tag}-{i}", now, now))
        c.execute(RAW_INSERT_EVENT, (w, 1, "work_created", None, "queued", now, dumps({
            "source_system": "manual", "source_id": f"{tag}-{i}", "source_run_id": None, "priority": 3, "attempt": 0,
            "lease_version": 0, "cancel_requested": False, "quarantined": False})))
        c.execute("COMMIT")
        tok = os.urandom(12).hex()
        c.execute("BEGIN IMMEDIATE")
        c.execute("UPDATE work SET status = 'running', owner = ?, lease_token = ?, lease_version = 1, lease_expires_at = ?, "
                  "attempt = 1, started_at = ?, event_count = 2, updated_at = ? WHERE work_id = ?", (tag, tok, now + 45, now, now, w))
        c.execute(RAW_INSERT_EVENT, (w, 2, "claimed", "queued", "running", now, dumps({
            "owner": tag, "lease_token": tok, "lease_version": 1, "lease_expires_at": now + 45, "attempt": 1, "started_at": now})))
        c.execute("COMMIT")
        c.execute("BEGIN IMMEDIATE")
        c.execute("UPDATE work SET lease_expires_at = ?, event_count = 3, updated_at = ? WHERE work_id = ?", (now + 46, now + 1, w))
        c.execute(RAW_INSERT_EVENT, (w, 3, "lease_renewed", None, None, now + 1, dumps({"lease_expires_at": now + 46})))
        c.execute("COMMIT")
        c.execute("BEGIN IMMEDIATE")
        c.execute("UPDATE work SET status = 'done', result = ?, finished_at = ?, status_reason = NULL, owner = NULL, lease_token = NULL, "
                  "lease_expires_at = NULL, event_count = 4, updated_at = ? WHERE work_id = ?", (dumps({"ok": True}), now + 2, now + 2, w))
        c.execute(RAW_INSERT_EVENT, (w, 4, "closed_out", "running", "done", now + 2, dumps({
            "owner": None, "lease_token": None, "lease_expires_at": None, "result": {"ok": True}, "finished_at": now + 2,
            "error_class": None})))
        c.execute("COMMIT")

    def close(self) -> None:
        self.c.close()


class Reference:
    """The same lifecycle through the reference ledger's operations."""

    def __init__(self, path: str, synchronous: str) -> None:
        from ledgercheck.reference.ledger import Ledger

        self.ledger = Ledger(path, synchronous=synchronous, busy_timeout=BUSY_TIMEOUT)

    def item(self, i: int, tag: str) -> None:
        led, now = self.ledger, float(i)
        w = led.create(source_system="manual", source_id=f"{tag}-{i}", now=now)["work"]["work_id"]
        tok = led.claim(owner=tag, work_id=w, now=now)["lease_token"]
        led.renew(work_id=w, token=tok, now=now + 1)
        led.close_out(work_id=w, token=tok, status="done", result={"ok": True}, now=now + 2)

    def close(self) -> None:
        self.ledger.close()


KINDS = {"raw": Raw, "reference": Reference}


# ---------------------------------------------------------------------- contending processes
def _worker(conn: Connection, barrier: Any, tag: str) -> None:
    """Runs chunks on command: (kind, path, synchronous, start, count) -> seconds, or an error line."""
    stores: dict[tuple[str, str], Any] = {}
    while True:
        msg = conn.recv()
        if msg is None:
            break
        kind, path, sync, start, count = msg
        try:
            store = stores.get((kind, path))
            if store is None:
                store = stores[(kind, path)] = KINDS[kind](path, sync)
        except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
            barrier.abort()
            conn.send(f"{type(exc).__name__}: {exc}")
            continue
        try:
            barrier.wait(timeout=120)
            t = time.perf_counter()
            for i in range(start, start + count):
                store.item(i, tag)
            conn.send(time.perf_counter() - t)
        except Exception as exc:  # noqa: BLE001
            conn.send(f"{type(exc).__name__}: {exc}")
    for store in stores.values():
        store.close()


class Pair:
    """Two worker processes that run the same chunk size at the same instant."""

    def __init__(self) -> None:
        ctx = mp.get_context("fork")
        self.barrier = ctx.Barrier(3)
        self.pipes = []
        self.procs = []
        for n in range(2):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(child, self.barrier, f"p{n}"), daemon=True)
            p.start()
            self.pipes.append(parent)
            self.procs.append(p)

    def run(self, kind: str, path: str, sync: str, start: int, count: int) -> float:
        half = count // 2
        for n, pipe in enumerate(self.pipes):
            pipe.send((kind, path, sync, start + n * half, half))
        try:
            self.barrier.wait(timeout=120)
        except threading.BrokenBarrierError:
            pass  # a worker could not start; its answer says why
        t = time.perf_counter()
        answers = [pipe.recv() for pipe in self.pipes]
        wall = time.perf_counter() - t
        for a in answers:
            if isinstance(a, str):
                raise SystemExit(f"bench: a {kind} worker failed: {a}")
        self.barrier.reset()
        return wall

    def close(self) -> None:
        for pipe in self.pipes:
            pipe.send(None)
        for p in self.procs:
            p.join(timeout=30)


# ---------------------------------------------------------------------- measurement
def measure(root: Path, sync: str, procs: int, items: int, rounds: int, budget: float, pair: Pair | None) -> dict[str, Any]:
    """Alternate rounds of both kinds until ``items`` each, or (after two rounds) ``budget`` seconds.

    With a budget, rounds are sized from the rate seen so far so that about ``rounds`` of them
    fit in it; without one, every round is ``items / rounds`` long.
    """
    paths = {kind: str(root / f"{kind}-{sync.lower()}-{procs}p.db") for kind in KINDS}
    spent = dict.fromkeys(KINDS, 0.0)
    done = dict.fromkeys(KINDS, 0)
    local = {} if procs == 2 else {kind: KINDS[kind](paths[kind], sync) for kind in KINDS}
    chunk = max(2, min(items, 40) if budget else items // rounds)
    start, r = 0, 0
    began = time.perf_counter()
    while done["reference"] < items:
        if r >= 2 and budget and time.perf_counter() - began > budget:
            break
        n = max(2, min(chunk, items - done["reference"]) // 2 * 2)
        for kind in (list(KINDS) if r % 2 == 0 else list(reversed(KINDS))):
            if procs == 2:
                assert pair is not None
                spent[kind] += pair.run(kind, paths[kind], sync, start, n)
            else:
                t = time.perf_counter()
                for i in range(start, start + n):
                    local[kind].item(i, "p0")
                spent[kind] += time.perf_counter() - t
            done[kind] += n
            start += n
        r += 1
        if budget:
            per_item = sum(spent.values()) / sum(done.values())
            chunk = int(budget / rounds / (2 * per_item))
    for store in local.values():
        store.close()
    rate = {kind: done[kind] / spent[kind] for kind in KINDS}
    return {"synchronous": sync, "processes": procs, "items": done["reference"], "rounds": r,
            "raw_items_per_s": round(rate["raw"], 1), "reference_items_per_s": round(rate["reference"], 1),
            "ratio": round(rate["reference"] / rate["raw"], 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=2000, help="items per measurement and kind, at most (default 2000)")
    ap.add_argument("--rounds", type=int, default=8, help="alternating rounds per measurement (default 8)")
    ap.add_argument("--seconds", type=float, default=5.0,
                    help="stop a measurement after the round that passes this many seconds (default 5; 0: no limit)")
    ap.add_argument("--sync", default="NORMAL,FULL", help="synchronous settings, comma-separated")
    ap.add_argument("--procs", default="1,2", help="process counts, comma-separated (1 and/or 2)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--strict", action="store_true", help=f"exit 1 when a ratio is below {FLOOR}")
    args = ap.parse_args(argv)
    if args.items < 4 or args.rounds < 1:
        ap.error("--items must be >= 4 and --rounds >= 1")
    syncs = [s.strip().upper() for s in args.sync.split(",") if s.strip()]
    if any(s not in ("NORMAL", "FULL") for s in syncs):
        ap.error("--sync takes NORMAL and/or FULL")
    procs = [int(p) for p in args.procs.split(",") if p.strip()]
    if any(p not in (1, 2) for p in procs):
        ap.error("--procs takes 1 and/or 2")
    pair = Pair() if 2 in procs else None  # forked before this process opens any database
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="ledgercheck-bench-") as tmp:
            for sync in syncs:
                for n in procs:
                    if not args.json:
                        print(f"  measuring synchronous={sync}, {n} process(es) ...", file=sys.stderr, flush=True)
                    results.append(measure(Path(tmp), sync, n, args.items, args.rounds, args.seconds, pair))
    finally:
        if pair is not None:
            pair.close()
    env = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version, "cpus": os.cpu_count(),
           "machine": platform.machine(), "floor": FLOOR}
    below = [r for r in results if r["ratio"] < FLOOR]
    if args.json:
        print(json.dumps({"environment": env, "results": results}, indent=2))
    else:
        print(f"reference ledger vs raw sqlite3: create -> claim -> renew -> close-out, 4 commits per item "
              f"(python {env['python']}, sqlite {env['sqlite']}, {env['cpus']} cpus)")
        print(f"{'synchronous':<12}{'procs':>6}{'items':>8}{'raw items/s':>14}{'reference items/s':>20}{'ratio':>8}  floor {FLOOR}")
        for r in results:
            verdict = "ok" if r["ratio"] >= FLOOR else "BELOW"
            print(f"{r['synchronous']:<12}{r['processes']:>6}{r['items']:>8}{r['raw_items_per_s']:>14.0f}"
                  f"{r['reference_items_per_s']:>20.0f}{r['ratio']:>8.2f}  {verdict}")
    return 1 if (args.strict and below) else 0


if __name__ == "__main__":
    sys.exit(main())
