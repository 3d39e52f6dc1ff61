"""Crash-harness speed: scenarios per second with real SIGKILL, and the wall time of a full
exhaustive exploration of the default workload.

    python bench/bench_chaos.py [--adapter reference] [--jobs 2] [--tmp-dir DIR] [--no-disk]

What it prints, all measured in this one run:

* worker start: a warm fork-server worker vs a cold interpreter that imports the harness and
  connects to the adapter (what every scenario would pay without the pool) - and the ratio;
* the full exploration of the default workload (every crash point x occurrence, plus the
  takeover windows) with ``--jobs`` lanes: windows, wall time, scenarios/s, and the ratio to
  the 10 scenarios/s floor;
* the same with one lane, and (unless --no-disk) with scenario files on the system temp
  directory instead of a RAM disk, so the price of fsync on this machine shows.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

FLOOR = 10.0  # scenarios per second on 2 cores


def cold_start(address: str, n: int) -> float:
    """Seconds for a fresh interpreter to import the harness and greet the adapter."""
    code = ("from ledgercheck.transport.client import connect; from ledgercheck.chaos.crash import worker; "
            f"c = connect({address!r}); c.close()")
    t = time.perf_counter()
    for _ in range(n):
        subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL)
    return (time.perf_counter() - t) / n


def warm_start(address: str, n: int) -> float:
    """Seconds from asking the fork server for a worker to the worker being ready."""
    from ledgercheck.chaos.crash.forkserver import fork_server
    from ledgercheck.chaos.crash.pool import WorkerPool

    fork_server()  # started once per harness process; not part of a scenario
    with WorkerPool(address, spare=1) as pool:
        pool.get().kill()  # the first one pays for the fork server's own start
        t = time.perf_counter()
        for _ in range(n):
            pool._spawn()
            h = pool._starting.pop()
            h.wait_ready(60)
            h.kill()
        return (time.perf_counter() - t) / n


def exploration(address: str, jobs: int, tmp_root: str | None) -> tuple[int, float, int]:
    from ledgercheck.chaos.crash.exploration import explore
    from ledgercheck.spec import default_spec

    t = time.perf_counter()
    windows = explore(address, default_spec(), seed=0, jobs=jobs, tmp_root=tmp_root,
                      replay_dir=tempfile.mkdtemp(prefix="bench-replays-"))
    wall = time.perf_counter() - t
    bad = sum(w["verdict"] != "pass" for w in windows)
    return len(windows), wall, bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adapter", default="reference")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--tmp-dir", default=None, help="scenario files (default: /dev/shm when present)")
    ap.add_argument("--no-disk", action="store_true", help="skip the run with scenario files on disk")
    ap.add_argument("--starts", type=int, default=5, help="worker starts to time")
    args = ap.parse_args()

    ram = args.tmp_dir
    made = None
    if ram is None and os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        ram = made = tempfile.mkdtemp(prefix="bench-chaos-", dir="/dev/shm")
    try:
        print(f"load average at start: {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
        cold = cold_start(args.adapter, args.starts)
        warm = warm_start(args.adapter, args.starts)
        print(f"worker start: cold interpreter {cold * 1000:.0f} ms, fork server {warm * 1000:.0f} ms "
              f"(cold/warm = {cold / warm:.1f}x)")

        n, wall, bad = exploration(args.adapter, args.jobs, ram)
        rate = n / wall
        print(f"full exploration, {args.jobs} lanes, scenario files on {ram or tempfile.gettempdir()}: "
              f"{n} windows in {wall:.1f}s = {rate:.1f} scenarios/s ({rate / FLOOR:.2f}x the {FLOOR:g}/s floor), "
              f"{bad} not passing")
        n1, wall1, bad1 = exploration(args.adapter, 1, ram)
        print(f"full exploration, 1 lane: {n1} windows in {wall1:.1f}s = {n1 / wall1:.1f} scenarios/s "
              f"({args.jobs} lanes / 1 lane = {wall1 / wall:.2f}x), {bad1} not passing")
        if not args.no_disk:
            nd, walld, badd = exploration(args.adapter, args.jobs, None)
            print(f"full exploration, {args.jobs} lanes, scenario files on {tempfile.gettempdir()} (fsync to disk): "
                  f"{nd} windows in {walld:.1f}s = {nd / walld:.1f} scenarios/s (disk/RAM time = {walld / wall:.2f}x), "
                  f"{badd} not passing")
        print(f"load average at end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        if made:
            shutil.rmtree(made, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
