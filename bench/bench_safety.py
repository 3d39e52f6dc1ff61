"""Safety campaign speed: operations per second with 4 worker processes, recording vs not.

    python bench/bench_safety.py [--adapter reference] [--items 1200] [--rounds 2]

What it prints, all measured in this one run:

* the campaign as ``ledgercheck safety`` runs it (kills, pauses, reopens; recorded and checked):
  operations/s, how long the checker took over the history;
* the same workload twice per round, without faults so the workers stay busy (the producer
  creates items faster than four workers finish them): once recording every operation to the
  per-process history files, once not recording at all.  Operations/s of each (median over the
  rounds, runs interleaved), and the ratio recorded / not recorded against the floor: recording
  may cost at most 20% (ratio >= 0.80).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

FLOOR = 0.80  # recorded ops/s over unrecorded ops/s


def _run(address: str, items: int, record: bool, seed: int) -> tuple[float, int]:
    from ledgercheck.chaos.safety import run_campaign

    with tempfile.TemporaryDirectory(prefix="bench-safety-") as out:
        r = run_campaign(address, seed=seed, items=items, workers=4, faults="none", duration=items / 400,
                         latency=(0.0, 0.0), record=record, check=False, out_dir=out, time_limit=600)
    return r.ops_per_s, r.ops


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adapter", default="reference")
    ap.add_argument("--items", type=int, default=1200)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()

    from ledgercheck.chaos.forkserver import fork_server
    from ledgercheck.chaos.safety import check_history, run_campaign

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
    a, b = statistics.median(rec), statistics.median(bare)
    ratio = a / b if b else 0.0
    print(f"saturated workload ({args.items} items, no faults), median of {args.rounds}: recorded {a:.0f} ops/s, "
          f"not recorded {b:.0f} ops/s; ratio {ratio:.2f} (floor {FLOOR:.2f}: recording costs "
          f"{max(0.0, 1 - ratio) * 100:.0f}%) {'OK' if ratio >= FLOOR else 'BELOW FLOOR'}")
    return 0 if ratio >= FLOOR else 1


if __name__ == "__main__":
    sys.exit(main())
