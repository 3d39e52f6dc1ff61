"""Per-item linearizability checker speed and memory on a 100,000-operation history.

    python bench/bench_linearize.py [--ops 100000] [--keep FILE] [--history FILE]

The history is recorded from the reference ledger itself (fixtures/testkit/broken_linear.py's recorder:
a producer, four workers and a monitor on one ledger directory), with operations overlapping in
real time (several invokes before their completions, which run in turn), lapsed leases taken over,
retries scheduled and promoted, renewals, late refused writes and reads; every answer is a full
snapshot, as in a campaign.  With --history, a recorded campaign history is measured instead.

Printed, all measured in this run (CPU time of this process):

* the baseline: load_history + the class checker (chaos/anomalies.check) on the same file;
* the linearizability checker (project + search per item), its operations/s (operations of
  the history, as the class checker counts them), the ratios against the baseline and against the
  100,000 operations/s goal;
* the per-item search statistics (operations per item, model states explored: mean, max, the
  distribution), the items linearizable / violations / unchecked;
* memory: the checker's peak allocation (tracemalloc) over the history file's size (goal <= 2).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from ledgercheck.chaos.safety.anomalies import check
from ledgercheck.chaos.safety.history import load_history
from ledgercheck.chaos.safety.linearize import check_linearizable
from ledgercheck.fixtures.testkit.broken_linear import T0, Recorder
from ledgercheck.reference.adapter import ReferenceAdapter
from ledgercheck.transport.protocol import LedgerError

GOAL = 100_000.0
WORKERS = ("w1", "w2", "w3", "w4")


def build(ops: int, where: Path, seed: int = 0) -> Path:
    """A history of about ``ops`` operations from the reference ledger."""
    rnd = random.Random(seed)
    r = Recorder(ReferenceAdapter, where / "ledger", ("producer", *WORKERS, "monitor", "reader"))
    now = T0
    held: dict[str, tuple[str, str]] = {}  # worker -> (item, token)
    made = 0
    while r.next_id < ops:
        now += rnd.uniform(0.5, 3.0)
        if made < 20 or rnd.random() < 0.12:
            r.call("producer", "create", source_system="manual", source_id=f"b{made}", now=now)
            made += 1
        # two or three calls in flight at once: invoked together, answered in turn
        batch = []
        for w in rnd.sample(WORKERS, rnd.choice((2, 3))):
            if w in held:
                wid, tok = held[w]
                x = rnd.random()
                if x < 0.15:
                    batch.append((w, "renew", {"work_id": wid, "token": tok, "now": now}))
                elif x < 0.25:
                    batch.append((w, "fail", {"work_id": wid, "token": tok, "error_class": "transient_network", "now": now}))
                    held.pop(w)
                elif x < 0.32:
                    held.pop(w)  # stalls: its lease lapses and the monitor takes it back
                else:
                    batch.append((w, "close_out", {"work_id": wid, "token": tok, "status": "done", "now": now}))
                    held.pop(w)
            else:
                batch.append((w, "claim", {"owner": w, "now": now}))
        if rnd.random() < 0.2 and made:
            batch.append(("reader", "get", {"work_id": _wid_of(r, rnd)}))
        ids = [r.begin(p, op, **a) for p, op, a in batch]
        for i, (p, op, a) in zip(ids, batch, strict=True):
            got = r.end(i, p, op, lambda p=p, op=op, a=a: getattr(r.adapters[p], op)(**a))
            if op == "claim" and isinstance(got, dict):
                held[p] = (got["work_id"], got["lease_token"])
        if rnd.random() < 0.1:
            for op in ("expire", "recover", "promote_due"):
                r.call("monitor", op, now=now)
    return r.finish(where / "history.jsonl")


def _wid_of(r: Recorder, rnd: random.Random) -> str:
    creates = [x for x in r.lines[-400:] if x["type"] == "complete" and x["op"] == "create" and x["outcome"] == "ok"]
    if not creates:
        creates = [x for x in r.lines if x["type"] == "complete" and x["op"] == "create" and x["outcome"] == "ok"]
    return rnd.choice(creates)["result"]["work"]["work_id"]  # type: ignore[no-any-return]


def cpu(fn):  # type: ignore[no-untyped-def]
    t = time.process_time()
    out = fn()
    return out, time.process_time() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--keep", help="write the generated history here")
    ap.add_argument("--history", help="measure this history instead of generating one")
    a = ap.parse_args()
    if a.history:
        path = Path(a.history)
    else:
        tmp = Path(a.keep).parent if a.keep else Path(tempfile.mkdtemp(prefix="bench-linearize-"))
        tmp.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        path = build(a.ops, tmp)
        if a.keep:
            path = path.rename(a.keep)
        print(f"recorded {path} from the reference ledger in {time.perf_counter() - t:.1f}s wall")
    size = path.stat().st_size
    h, t_load = cpu(lambda: load_history(path))
    nops = len(h.op_rows().invokes)
    v, t_class = cpu(lambda: check(h))
    base = t_load + t_class
    lin, t_lin = cpu(lambda: check_linearizable(h))
    st = lin.stats()
    print(f"history: {nops} operations, {st['items']} items, {size / 1e6:.1f} MB")
    print(f"baseline  load_history + class checker: {base:.2f}s CPU ({nops / base:,.0f} ops/s; {len(v.anomalies)} anomalies)")
    print(f"linearizability (project + search):     {t_lin:.2f}s CPU ({nops / t_lin:,.0f} ops/s)")
    print(f"  ratio to the baseline: {t_lin / base:.2f}x its time; to the goal of {GOAL:,.0f} ops/s: {nops / t_lin / GOAL:.2f}")
    per = [r.ops for r in lin.items.values()]
    states = [r.states for r in lin.items.values()]
    print(f"  items: {st['linearizable']} linearizable, {st['violations']} violations, {st['unchecked']} unchecked")
    if per:
        print(f"  operations per item: mean {statistics.mean(per):.1f}, max {max(per)}")
        qs = statistics.quantiles(states, n=10) if len(states) > 1 else states
        print(f"  model states per item: total {st['states_explored']}, mean {statistics.mean(states):.1f}, "
              f"max {st['max_states_item']}, deciles {[round(q) for q in qs]}")
        print(f"  states per operation: {st['states_explored'] / max(1, sum(per)):.2f} (1.00: no branching at all); "
              f"branch points: {st['branch_points']} (each a copy of the model)")
    tracemalloc.start()
    lin2 = check_linearizable(h)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert lin2.stats() == st
    print(f"memory: checker peak {peak / 1e6:.1f} MB = {peak / size:.2f}x the history file (goal <= 2.00)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except LedgerError as exc:
        print(f"bench_linearize: {exc}", file=sys.stderr)
        sys.exit(2)
