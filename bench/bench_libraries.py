"""One lifecycle cycle (create -> claim -> close_out done) through the reference ledger and
through each library adapter, in one run, side by side with the ratio to the reference.

Every adapter is driven the same way: in process, through ``ledgercheck.transport.client``
(the path the harness takes, result shapes checked), after a reset and a short warm-up.  A
private PostgreSQL server is started for pgqueuer and procrastinate and stopped at the end.

    python bench/bench_libraries.py                 # default: up to 300 cycles or 15 s each
    python bench/bench_libraries.py --cycles 1000 --budget 60 --only reference,pgqueuer
    python bench/bench_libraries.py --json

The ratio is (library seconds per cycle) / (reference seconds per cycle) measured in this run:
above 1 means slower than the reference.  Numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from ledgercheck.fixtures.libraries import ADAPTERS
from ledgercheck.services.postgres import PostgresServer, PostgresUnavailable
from ledgercheck.transport.client import AdapterError, Client, connect

REFERENCE = "python:ledgercheck.reference.adapter:ReferenceAdapter"
ORDER = ["reference", "persist-queue", "dbos", "pgqueuer", "procrastinate"]
POSTGRES = {"pgqueuer", "procrastinate"}


@dataclass
class Result:
    name: str
    cycles: int
    seconds: float
    per_cycle_ms: float
    p50_ms: float
    p95_ms: float
    cycles_per_s: float
    ratio: float | None = None
    error: str | None = None


class CycleFailed(RuntimeError):
    pass


def _ok(client: Client, op: str, **args: Any) -> Any:
    out = client.call(op, **args)
    if not out.ok:
        raise CycleFailed(f"{op}: {out.code}: {out.message}")
    return out.value


def cycle(client: Client, n: int) -> None:
    now = time.time()
    work = _ok(client, "create", source_system="manual", source_id=f"bench-{n}", now=now)["work"]
    claimed = _ok(client, "claim", owner="bench", now=time.time())
    if claimed is None:
        raise CycleFailed("claim returned nothing although an item was just created")
    if claimed["work_id"] != work["work_id"]:
        raise CycleFailed(f"claim took {claimed['work_id']}, not the item just created ({work['work_id']})")
    done = _ok(client, "close_out", work_id=claimed["work_id"], token=claimed["lease_token"], status="done",
               now=time.time())
    if done["status"] != "done":
        raise CycleFailed(f"close_out left the item {done['status']}")


def run_one(name: str, address: str, config: dict[str, Any], cycles: int, budget: float, warmup: int) -> Result:
    client = connect(address)
    try:
        out = client.reset(config)
        if not out.ok:
            raise CycleFailed(f"reset: {out.code}: {out.message}")
        for i in range(warmup):
            cycle(client, -1 - i)
        times: list[float] = []
        start = time.perf_counter()
        for i in range(cycles):
            t = time.perf_counter()
            cycle(client, i)
            times.append(time.perf_counter() - t)
            if time.perf_counter() - start > budget:
                break
        total = time.perf_counter() - start
    finally:
        client.close()
    times_sorted = sorted(times)
    return Result(
        name=name, cycles=len(times), seconds=total,
        per_cycle_ms=1000 * total / len(times),
        p50_ms=1000 * statistics.median(times),
        p95_ms=1000 * times_sorted[min(len(times_sorted) - 1, int(0.95 * len(times_sorted)))],
        cycles_per_s=len(times) / total,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=300, help="cycles per adapter (default 300)")
    ap.add_argument("--budget", type=float, default=15.0, help="seconds per adapter at most (default 15)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed cycles first (default 5)")
    ap.add_argument("--only", default=",".join(ORDER), help="comma-separated subset of: " + ", ".join(ORDER))
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in ORDER]
    if unknown:
        ap.error(f"unknown adapter(s): {', '.join(unknown)}")
    if "reference" not in names:
        names.insert(0, "reference")

    server: PostgresServer | None = None
    results: list[Result] = []
    try:
        if POSTGRES & set(names):
            print("starting PostgreSQL ...", file=sys.stderr)
            try:
                server = PostgresServer().start()
            except PostgresUnavailable as exc:
                print(f"bench_libraries: {exc}", file=sys.stderr)
                return 2
        for name in names:
            address = REFERENCE if name == "reference" else ADAPTERS[name]
            config: dict[str, Any] = {"server_dsn": server.dsn()} if name in POSTGRES and server else {}
            print(f"{name} ...", file=sys.stderr, flush=True)
            try:
                results.append(run_one(name, address, config, args.cycles, args.budget, args.warmup))
            except (AdapterError, CycleFailed) as exc:
                results.append(Result(name, 0, 0.0, 0.0, 0.0, 0.0, 0.0, error=str(exc)))
    finally:
        if server is not None:
            server.stop()

    ref = next((r for r in results if r.name == "reference" and r.error is None), None)
    for r in results:
        if ref is not None and r.error is None:
            r.ratio = r.per_cycle_ms / ref.per_cycle_ms
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    else:
        print(f"{'adapter':<15}{'cycles':>8}{'ms/cycle':>11}{'p50 ms':>9}{'p95 ms':>9}{'cycles/s':>10}{'vs reference':>14}")
        for r in results:
            if r.error:
                print(f"{r.name:<15}  failed: {r.error}")
                continue
            ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
            print(f"{r.name:<15}{r.cycles:>8}{r.per_cycle_ms:>11.2f}{r.p50_ms:>9.2f}{r.p95_ms:>9.2f}"
                  f"{r.cycles_per_s:>10.1f}{ratio:>14}")
        print("cycle = create + claim + close_out(done), in process through the harness client; "
              "ratio = ms/cycle over the reference's, this run")
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
