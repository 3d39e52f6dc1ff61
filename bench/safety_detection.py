"""What certify's safety campaign finds, seed by seed, and what it costs.

    python bench/safety_detection.py [--seeds 0-5] [--only NAME,...] [--standalone] [--jsonl FILE]
    python bench/safety_detection.py --cost 3 [--seeds 0-5]     # the reference's campaign, now and before

certify runs one short safety campaign (conformance/safety_item.py: ``CAMPAIGN``) at the run's
seed.  It must find, at every seed, what the standalone campaign (``ledgercheck safety``: 100
items, its own duration) finds.  This runs certify's campaign (the same function certify calls)
at each seed against:

* the broken ledgers of fixtures/testkit/broken_safety.py (``ALL``: each must show its ``ANOMALIES``),
  and CloseOutIgnoresToken declared ``reclaim: operator`` and ``never`` (a stale write or a split);
* the published libraries, on a PostgreSQL server and a redis-server started here (so they are
  durable and shared by the worker processes): each must show what its standalone campaign
  shows (``EXPECTED``; ``--standalone`` runs the standalone campaign too, at the same seeds,
  and prints what it found);
* the reference and the correct ledgers declared each way: no anomaly (a false alarm is a miss).

It prints one row per ledger: the seeds caught (``✓``), missed (``MISS``, with what was found),
the detection rate, and the campaign's wall time (median, max); then the detection rate per seed
over every ledger, and the reference's campaign time beside the time budget.  ``--cost N`` times
the reference's campaign now and as it was before (16 items, 2 s, each fault once), alternating in
the same run, so the machine's load weighs on both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

BS = "python:ledgercheck.fixtures.testkit.broken_safety"
BUDGET_S = 8.0  # the reference's campaign inside certify, wall seconds (certify of the reference: ~25 s)


def targets() -> list[tuple[str, str, set[str] | None, set[str]]]:
    """(name, address, what it must find (None: nothing), what it may find besides)."""
    from ledgercheck.fixtures.libraries import ADAPTERS
    from ledgercheck.fixtures.testkit import broken_safety as bs

    out: list[tuple[str, str, set[str] | None, set[str]]] = []
    for cls in bs.ALL:
        out.append((cls.__name__, f"{BS}:{cls.__name__}", set(cls.ANOMALIES), set(cls.MAY_ALSO)))
    for name in ("CloseOutIgnoresTokenOperator", "CloseOutIgnoresTokenNever"):
        out.append((name, f"{BS}:{name}", {"stale_write_accepted|split_ownership"}, {"duplicate_effect"}))
    for lib, classes in EXPECTED.items():
        out.append((lib, ADAPTERS[lib], set(classes), set(MAY[lib])))
    # (ReferenceNever is not among them: under reclaim never a killed worker's item stays where it
    # was, and the checker reports it as lost work, as docs/protocol.md says)
    for lib in CLEAN_LIBRARIES:
        out.append((lib, ADAPTERS[lib], None, set()))
    for name in ("reference", "ReferenceOperator", "SmallQueue", "SmallQueueOperator"):
        out.append((name, "reference" if name == "reference" else f"{BS}:{name}", None, set()))
    return out


# What the standalone campaign (ledgercheck safety, 100 items) finds in each library, seeds 0-5
# (--standalone measures it again); "a|b": either class.  rq's stale close-out shows as a split
# when the takeover came before the lease's reported expiry + grace: the rq adapter reports rq's
# StartedJobRegistry score, which already holds the grace (ceil(ttl + grace)), as lease_expires_at,
# so the checker adds a second grace; the late writes of that holder are then part of the split.
EXPECTED = {
    "pgqueuer": {"stale_write_accepted"},
    "procrastinate": {"stale_write_accepted"},
    "rq": {"stale_write_accepted|split_ownership"},
    "persist-queue": {"split_ownership"},
}
MAY = {"pgqueuer": set(), "procrastinate": set(), "rq": set(), "persist-queue": {"stale_write_accepted"}}
# DBOS, deployed as its docs ask (an executor id per process), hands a workflow to one executor:
# its campaign finds nothing (and is INCONCLUSIVE where no live holder could be displaced).  Its
# former "stale writes" were the adapter reporting one execution to two claims
# (tests/fixtures/confirm_dbos_stale_execution.py refutes them with DBOS alone).
CLEAN_LIBRARIES = ("dbos",)


def caught(want: set[str] | None, may: set[str], found: set[str]) -> bool:
    if want is None:
        return not found
    for w in want:
        if not set(w.split("|")) & found:
            return False
    return True


def seeds_of(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b) + 1)) if b else [int(a)]
    return out


KEEP: str | None = None


def run_one(name: str, address: str, seed: int, standalone: bool, check: Any) -> dict[str, Any]:
    from ledgercheck.chaos.safety.campaign import run_campaign
    from ledgercheck.conformance.safety_item import certify_campaign
    from ledgercheck.spec import default_spec

    with tempfile.TemporaryDirectory(prefix="bench-detect-") as out:
        t = time.monotonic()
        if standalone:
            r = run_campaign(address, seed=seed, items=100, out_dir=out)
        else:
            r = certify_campaign(address, default_spec(), seed, out)
        wall = time.monotonic() - t
        found: dict[str, int] = {}
        for a in r.anomalies or []:
            found[a["class"]] = found.get(a["class"], 0) + 1
        if KEEP and not check(set(found)) and r.history:
            import shutil

            shutil.copy(r.history, os.path.join(KEEP, f"{name}-seed{seed}-{'standalone' if standalone else 'certify'}.jsonl"))
    return {"found": found, "wall_s": round(wall, 2), "verdict": r.verdict, "takeovers": r.takeovers,
            "nemesis": r.nemesis, "missing": r.missing, "final": r.final}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0-5", help="seeds, e.g. 0-5 or 0,3,7 (default 0-5)")
    ap.add_argument("--only", default="", help="comma-separated ledger names (default: all)")
    ap.add_argument("--standalone", action="store_true", help="also run the standalone campaign at each seed")
    ap.add_argument("--jsonl", default=None, help="append one JSON line per campaign to this file")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="try another campaign: override one of certify's CAMPAIGN settings (repeatable)")
    ap.add_argument("--keep", default=None, metavar="DIR", help="keep the history of every miss under DIR")
    ap.add_argument("--cost", type=int, default=0, metavar="ROUNDS",
                    help="only the cost: certify's campaign against the reference, and the campaign it replaced "
                         "(16 items, 2 s, each fault once), alternating for ROUNDS rounds at the seeds given")
    args = ap.parse_args()
    from ledgercheck.conformance import safety_item

    for kv in args.set:
        k, _, v = kv.partition("=")
        if k not in safety_item.CAMPAIGN:
            print(f"--set {kv}: not one of {', '.join(safety_item.CAMPAIGN)}", file=sys.stderr)
            return 2
        safety_item.CAMPAIGN[k] = type(safety_item.CAMPAIGN[k])(v)
    global KEEP
    KEEP = args.keep
    seeds = seeds_of(args.seeds)
    if args.cost:
        return cost(args.cost, seeds)
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    todo = [t for t in targets() if not only or t[0] in only]
    if not todo:
        print(f"nothing to run: --only {args.only!r} names no ledger", file=sys.stderr)
        return 2
    servers = _servers(any(addr.startswith("python:ledgercheck.fixtures.libraries") for _, addr, _, _ in todo))
    if KEEP:
        os.makedirs(KEEP, exist_ok=True)
    from ledgercheck.conformance.safety_item import CAMPAIGN

    print(f"certify's campaign: {', '.join(f'{k} {v}' for k, v in CAMPAIGN.items())}; seeds {args.seeds}", flush=True)
    per_seed: dict[int, list[bool]] = {s: [] for s in seeds}
    ref_walls: list[float] = []
    rows = []
    try:
        for name, address, want, may in todo:
            marks, walls = [], []
            for seed in seeds:
                kinds = ["certify"] + (["standalone"] if args.standalone else [])
                for kind in kinds:
                    res = run_one(name, address, seed, kind == "standalone",
                                  lambda found, want=want, may=may: caught(want, may, found))
                    ok = caught(want, may, set(res["found"]))
                    if args.jsonl:
                        with open(args.jsonl, "a", encoding="utf-8") as f:
                            f.write(json.dumps({"ledger": name, "seed": seed, "campaign": kind, "caught": ok, **res}) + "\n")
                    if kind == "standalone":
                        print(f"  {name} seed {seed} standalone: {res['found'] or 'no anomaly'} ({res['wall_s']}s)", flush=True)
                        continue
                    walls.append(res["wall_s"])
                    per_seed[seed].append(ok)
                    if name == "reference":
                        ref_walls.append(res["wall_s"])
                    shown = "ok" if ok else f"MISS {res['found'] or 'nothing'}"
                    marks.append(f"{seed}:{'✓' if ok else 'MISS'}")
                    print(f"  {name} seed {seed}: {shown}; takeovers {res['takeovers']}; {res['wall_s']}s"
                          + (f"; missing {res['missing']}" if res["missing"] else ""), flush=True)
            hit = sum(1 for m in marks if m.endswith("✓"))
            rows.append((name, want, marks, hit, len(marks), statistics.median(walls), max(walls)))
    finally:
        for s in servers:
            s.stop()
    print()
    print(f"{'ledger':32} {'must find':42} {'caught':>7}  {'wall median/max':>16}  seeds")
    for name, want, marks, hit, n, med, mx in rows:
        need = "no anomaly" if want is None else ", ".join(sorted(want))
        print(f"{name:32} {need:42} {hit:>3}/{n:<3}  {med:>7.1f}s/{mx:<6.1f}s  {' '.join(marks)}")
    print()
    for seed, oks in per_seed.items():
        print(f"seed {seed}: {sum(oks)}/{len(oks)} ledgers as they must be")
    if ref_walls:
        print(f"the reference's campaign: median {statistics.median(ref_walls):.1f}s, max {max(ref_walls):.1f}s "
              f"(budget {BUDGET_S:g}s)")
    return 0


BEFORE = {"workers": 4, "items": 16, "duration": 2.0, "lapse": 0.6, "min_each": 1}  # certify's campaign until now


def cost(rounds: int, seeds: list[int]) -> int:
    """certify's campaign against the reference beside the one it replaced, alternating, same run."""
    from ledgercheck.conformance import safety_item

    now = dict(safety_item.CAMPAIGN)
    walls: dict[str, list[float]] = {"now": [], "before": []}
    for k in range(rounds):
        for seed in seeds:
            for which in (("now", "before") if k % 2 == 0 else ("before", "now")):
                safety_item.CAMPAIGN.clear()
                safety_item.CAMPAIGN.update(now if which == "now" else BEFORE)
                res = run_one("reference", "reference", seed, False, lambda found: not found)
                walls[which].append(res["wall_s"])
                print(f"  round {k + 1} seed {seed} {which:6}: {res['wall_s']:.2f}s {res['found'] or 'no anomaly'}; "
                      f"takeovers {res['takeovers']}", flush=True)
    safety_item.CAMPAIGN.clear()
    safety_item.CAMPAIGN.update(now)
    a, b = statistics.median(walls["now"]), statistics.median(walls["before"])
    print(f"the reference's campaign inside certify, median of {len(walls['now'])}: {a:.2f}s now "
          f"({', '.join(f'{k} {v}' for k, v in now.items())}), {b:.2f}s before "
          f"({', '.join(f'{k} {v}' for k, v in BEFORE.items())}): +{a - b:.2f}s, {a / b:.2f}x; budget {BUDGET_S:g}s")
    return 0


def _servers(libraries: bool) -> list[Any]:
    if not libraries:
        return []
    from ledgercheck.services.postgres import PostgresServer
    from ledgercheck.services.redis import RedisServer

    pg = PostgresServer().start()
    rs = RedisServer().start()
    os.environ["LEDGERCHECK_PG_DSN"] = pg.dsn()  # the library adapters then declare a shared, durable ledger
    os.environ["LEDGERCHECK_REDIS_URL"] = rs.url()
    return [pg, rs]


if __name__ == "__main__":
    sys.exit(main())
