"""Safety-checker speed: load and check a 100,000-operation history.

    python bench/bench_history.py [--ops 100000] [--repeat 3] [--keep FILE]

The history is a realistic mix: many small serial campaigns of a correct ledger (tests/chaos/history_sim.py:
producer, 3 workers, a monitor, kills mid-claim and mid-close-out, pauses past the lease with
refused late writes, renewals, duplicate effects under at-least-once) joined side by side and
sorted by t, so items, processes and faults interleave as in a real multi-process history.

What it prints, all measured in this one run (best CPU time of --repeat runs; the wall time of
one load + check is printed too):

* the baseline: reading the file and parsing every line with orjson into a list (what any
  reader must do at least), nothing else, the way the reader does it (one ``map`` over the
  lines, the cyclic collector paused);
* the same plus pairing each invoke with its completion, one tuple per operation: the least a
  checker that looks at operations must do;
* load_history (parse, validate, note where each operation's records are; record objects are
  built only when asked for) and check (the anomaly checker) apart;
* operations/s of load + check, and the ratios against the 100,000 operations/s floor and
  against both baselines;
* what recording costs a writer: microseconds per operation (invoke + complete, one write each)
  with HistoryWriter, against the same two records formatted and written with the standard json
  module in one write per record.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson
from ledgercheck.chaos.safety.anomalies import check
from ledgercheck.chaos.safety.history import HistoryWriter, load_history, no_gc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "chaos"))  # the tests' synthetic histories
from history_sim import interleave, simulate  # noqa: E402

FLOOR = 100_000.0  # operations per second, load + check


def build(ops: int) -> tuple[list[dict], int]:
    builders = []
    n = 0
    seed = 0
    while n < ops:
        b = simulate(seed, items=8, workers=3, steps=120, prefix=f"s{seed}-")
        n += sum(1 for r in b.records if r["type"] == "invoke")
        builders.append(b)
        seed += 1
    recs = interleave(builders)
    return recs, n


def best(fn: Callable[[], object], repeat: int) -> float:
    """The best CPU time of this process over `repeat` runs: the machine is shared, and CPU time
    is what the checker itself costs (wall time on a busy machine adds other processes' turns)."""
    times = []
    for _ in range(repeat):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return min(times)


def parse_only(path: str) -> list:
    """The least any reader must do: read the file and parse every line into a list it keeps."""
    with open(path, "rb") as fh:
        data = fh.read()
    with no_gc():  # on the same footing as load_history, which pauses the cyclic collector too
        return list(map(orjson.loads, filter(None, data.split(b"\n"))))  # one C-level pass, as the reader


def parse_and_pair(path: str) -> list:
    """The least a checker of operations must do: parse every line, then pair each invoke with
    its completion (one tuple per operation), nothing else."""
    rows = parse_only(path)
    with no_gc():
        comp = {r["id"]: r for r in rows if r.get("type") == "complete"}
        return [(r, comp.get(r["id"])) for r in rows if r.get("type") == "invoke"]


def record_cost(n: int, directory: str) -> tuple[float, float]:
    """Seconds per operation to record invoke + complete: HistoryWriter vs json + os.write."""
    args = {"work_id": "item1", "token": "tok1", "now": 1000012.3}
    result = {"work_id": "item1", "status": "running", "owner": "w1", "lease_token": "tok1", "lease_version": 3,
              "lease_expires_at": 1000057.3, "attempt": 1}
    w = HistoryWriter(os.path.join(directory, "history.w1.jsonl"), "w1")
    t = time.process_time()
    for _ in range(n):
        i = w.invoke("claim", args)
        w.complete(i, "claim", "ok", result)
    ours = (time.process_time() - t) / n
    w.close()
    fd = os.open(os.path.join(directory, "plain.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    t = time.process_time()
    for i in range(n):
        os.write(fd, (json.dumps({"type": "invoke", "id": i, "process": "w1", "op": "claim", "args": args,
                                  "t": time.monotonic(), "now": 1000012.3}) + "\n").encode())
        os.write(fd, (json.dumps({"type": "complete", "id": i, "process": "w1", "op": "claim", "outcome": "ok",
                                  "result": result, "error": None, "t": time.monotonic()}) + "\n").encode())
    plain = (time.process_time() - t) / n
    os.close(fd)
    return ours, plain


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=100_000, help="operations in the history (default 100000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each measurement; the best counts")
    ap.add_argument("--keep", default=None, help="also write the generated history to this file")
    args = ap.parse_args(argv)

    t = time.perf_counter()
    recs, ops = build(args.ops)
    gen = time.perf_counter() - t
    with tempfile.TemporaryDirectory(prefix="ledgercheck-bench-history-") as tmp:
        path = os.path.join(tmp, "history.jsonl")
        with open(path, "wb") as fh:
            for r in recs:
                fh.write(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE))
        if args.keep:
            Path(args.keep).write_bytes(Path(path).read_bytes())
        size = os.path.getsize(path)
        print(f"history: {ops} operations, {len(recs)} records, {size / 1e6:.1f} MB (generated in {gen:.1f}s)")

        base = best(lambda: parse_only(path), args.repeat)
        pair = best(lambda: parse_and_pair(path), args.repeat)
        load = best(lambda: load_history(path), args.repeat)
        h = load_history(path)
        chk = best(lambda: check(h), args.repeat)
        w0 = time.perf_counter()
        verdict = check(load_history(path))
        wall = time.perf_counter() - w0
        total = load + chk
        rate = ops / total
        print(f"baseline  read + orjson.loads into a list   : {base:7.3f}s  ({ops / base:,.0f} operations/s)")
        print(f"parse + pair each invoke with its completion: {pair:7.3f}s  ({ops / pair:,.0f} operations/s)")
        print(f"load_history (parse, validation, op index)  : {load:7.3f}s")
        print(f"check (the anomaly checker)                 : {chk:7.3f}s")
        print(f"load + check                                : {total:7.3f}s  ({rate:,.0f} operations/s; "
              f"wall time of one run {wall:.3f}s)")
        print(f"ratio to the floor ({FLOOR:,.0f} operations/s)     : {rate / FLOOR:.2f}x")
        print(f"ratio to the parse-only baseline            : {total / base:.2f}x the time")
        print(f"ratio to the parse + pair baseline          : {total / pair:.2f}x the time")
        print(f"verdict on the (correct) history: {verdict.verdict} ({len(verdict.anomalies)} anomalies); "
              f"{verdict.counts.get('nemesis_kill', 0)} kills, {verdict.counts.get('nemesis_pause', 0)} pauses, "
              f"{verdict.counts.get('op_indefinite', 0)} indefinite operations, "
              f"{verdict.counts.get('duplicates_permitted', 0)} items with permitted duplicate effects, "
              f"{verdict.coverage.get('holder_displaced', 0)} live holders displaced, "
              f"{verdict.coverage.get('late_write_after_takeover', 0)} late writes after a takeover")

        n = 20_000
        ours, plain = record_cost(n, tmp)
        print(f"recording one operation (invoke + complete): HistoryWriter {ours * 1e6:.1f} us, "
              f"json.dumps + os.write {plain * 1e6:.1f} us (ratio {ours / plain:.2f})")
    return 0 if not verdict.anomalies else 1


if __name__ == "__main__":
    sys.exit(main())
