"""Safety campaign speed: operations per second with 4 worker processes, recording vs not.

    python bench/bench_safety.py [--adapter reference] [--items 1200] [--rounds 2]

What it prints, all measured in this one run:

* the campaign as ``ledgercheck safety`` runs it (kills, pauses, reopens; recorded and checked):
  operations/s, how long the checker took over the history;
* the same workload twice per round, without faults so the workers stay busy (the producer
  creates items faster than four workers finish them): once recording every operation to the
  per-process history files, once not recording at all.  Operations/s of each (median over the
  rounds, runs interleaved), and the ratio recorded / not recorded against the floor: recording
  may cost at most 20% (ratio >= 0.80);
* with ``--hosts N`` (default 3; 0 leaves it out; needs root and ``ip``): the same saturated
  workload against the small PostgreSQL ledger (fixtures/testkit/pg_ledger.py) on a server started for the
  run, once with all four workers on this host and once with them spread over N hosts (network
  namespaces joined by veth links, chaos/safety/hosts.py), interleaved, recorded; operations/s side by
  side and their ratio; then one campaign with partitions on those hosts.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

FLOOR = 0.80  # recorded ops/s over unrecorded ops/s


def _run(address: str, items: int, record: bool, seed: int, **kw: object) -> tuple[float, int]:
    from ledgercheck.chaos.safety.campaign import run_campaign

    with tempfile.TemporaryDirectory(prefix="bench-safety-") as out:
        r = run_campaign(address, seed=seed, items=items, workers=4, faults="none", duration=items / 400,
                         latency=(0.0, 0.0), record=record, check=False, out_dir=out, time_limit=600, **kw)
    return r.ops_per_s, r.ops


def _hosts(n: int, items: int, rounds: int) -> None:
    """Single host against N hosts, same PostgreSQL ledger, same workload, same run."""
    from ledgercheck.chaos.safety.campaign import run_campaign
    from ledgercheck.fixtures.testkit.netns import hosts_with_postgres, skip_reason

    why = skip_reason()
    if why:
        print(f"hosts: not measured: {why}")
        return
    address = "python:ledgercheck.fixtures.testkit.pg_ledger:PgLedger"
    with hosts_with_postgres(n) as ph:
        reset = {"server_dsn": ph.server_dsn}
        one: list[float] = []
        many: list[float] = []
        for k in range(rounds):
            for on_hosts in ((False, True) if k % 2 == 0 else (True, False)):
                ops_s, ops = _run(address, items, True, 200 + k, reset=reset, hosts=ph.net if on_hosts else None)
                (many if on_hosts else one).append(ops_s)
                print(f"  round {k + 1}: pg-ledger, workers on {f'{n} hosts' if on_hosts else 'one host '} "
                      f"{ops} operations, {ops_s:.0f} ops/s", flush=True)
        a, b = statistics.median(many), statistics.median(one)
        print(f"pg-ledger saturated ({items} items, no faults, recorded), median of {rounds}: workers on {n} hosts "
              f"{a:.0f} ops/s, on one host {b:.0f} ops/s; ratio {a / b if b else 0.0:.2f}")
        with tempfile.TemporaryDirectory(prefix="bench-safety-") as out:
            r = run_campaign(address, seed=1, items=100, workers=4, faults="partition", hosts=ph.net, reset=reset,
                             out_dir=out, time_limit=300)
            cuts = _count(r.history, "partition")
        print(f"campaign (pg-ledger, 4 workers on {n} hosts, 100 items, partitions): {r.ops} operations, "
              f"{r.ops_per_s:.0f} ops/s; {cuts} workers cut off; {len(r.anomalies or [])} anomalies")


def _count(path: str | None, fault: str) -> int:
    if not path:
        return 0
    with open(path, "rb") as f:
        return sum(1 for line in f if b'"nemesis"' in line and f'"fault":"{fault}"'.encode() in line.replace(b" ", b""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adapter", default="reference")
    ap.add_argument("--items", type=int, default=1200)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--hosts", type=int, default=3, help="hosts for the multi-host figure (0: leave it out)")
    args = ap.parse_args()

    from ledgercheck.chaos.crash.forkserver import fork_server
    from ledgercheck.chaos.safety.campaign import check_history, run_campaign

    fork_server()  # started once per harness process; not part of any campaign
    with tempfile.TemporaryDirectory(prefix="bench-safety-") as out:
        r = run_campaign(args.adapter, seed=1, items=100, out_dir=out, check=False)
        t = time.perf_counter()
        verdict = check_history(r.history)
        check_s = time.perf_counter() - t
    print(f"campaign ({args.adapter}, 4 workers, 100 items, kill/pause/reopen): {r.ops} operations, "
          f"{r.ops_per_s:.0f} ops/s; {r.nemesis['kill']} kills, {r.nemesis['pause']} pauses, "
          f"{r.nemesis['reopen']} reopens; {len(verdict.anomalies)} anomalies; checker {check_s:.2f}s "
          f"({r.ops / check_s:.0f} operations/s)")
    rec: list[float] = []
    bare: list[float] = []
    for k in range(args.rounds):
        for record in ((False, True) if k % 2 == 0 else (True, False)):
            ops_s, ops = _run(args.adapter, args.items, record, seed=100 + k)
            (rec if record else bare).append(ops_s)
            print(f"  round {k + 1}: {'recorded    ' if record else 'not recorded'} {ops} operations, {ops_s:.0f} ops/s",
                  flush=True)
    if args.hosts:
        _hosts(args.hosts, min(args.items, 600), args.rounds)
    a, b = statistics.median(rec), statistics.median(bare)
    ratio = a / b if b else 0.0
    print(f"saturated workload ({args.items} items, no faults), median of {args.rounds}: recorded {a:.0f} ops/s, "
          f"not recorded {b:.0f} ops/s; ratio {ratio:.2f} (floor {FLOOR:.2f}: recording costs "
          f"{max(0.0, 1 - ratio) * 100:.0f}%) {'OK' if ratio >= FLOOR else 'BELOW FLOOR'}")
    return 0 if ratio >= FLOOR else 1


if __name__ == "__main__":
    sys.exit(main())
