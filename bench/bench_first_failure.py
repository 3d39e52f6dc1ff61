"""Time to the first failure: how long a vendor waits, with ``-x``, to learn of a single-clause bug.

Each broken ledger of the catalogues (fixtures/testkit/broken*.py, the campaign-only fixtures/testkit/broken_safety.py
aside) and each sampled generated mutant (conformance/mutation/, non-benign, the classes of bug
taken in turns) is run as a vendor
runs it: a whole ``pytest --ledger-only -x`` process, timed from its start to its exit.  Each is run
twice, back to back, in the fail-fast order (conformance/order.py) and in the generated order that
preceded it (``--ledger-order generated``, the baseline), so both see the same machine load.
Broken ledgers run in process (``python:MODULE:CLASS``) and over the wire (``exec:`` a
``ledgercheck serve`` process); mutants are rewrites of the wire messages, so they run over the
wire only.

Printed: median and worst seconds per order and transport, the ratios new/old, the load average,
and whether the goal (median <= 5 s, worst <= 30 s in the fail-fast order) is met.  A run that
finds no failure within ``--budget`` seconds is stopped and counted at the budget in the table; the
goal is judged over the subjects that fail (a mutant the suite does not catch at all is the
self-check's business, not this bench's: it is listed by name).

    python bench/bench_first_failure.py                     # a sample: 12 ledgers, 6 mutants
    python bench/bench_first_failure.py --ledgers 0 --mutants 40 --json out/first_failure.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_MEDIAN_S = 5.0
GOAL_WORST_S = 30.0
LISTS = ("ALL", "SPAWN_LEDGERS")  # the catalogue lists each fixtures/testkit/broken_*.py module keeps
NOT_CLAUSE_CATALOGUES = ("broken_safety",)  # found by safety campaigns, not by clause tests


def catalogue() -> list[tuple[str, str]]:
    """(module, class name) of every broken ledger of the clause catalogues, in a stable order."""
    out: list[tuple[str, str]] = []
    for path in sorted((ROOT / "fixtures" / "testkit").glob("broken*.py")):
        if path.stem in NOT_CLAUSE_CATALOGUES:
            continue
        mod = importlib.import_module(f"ledgercheck.fixtures.testkit.{path.stem}")
        for name in LISTS:
            for cls in getattr(mod, name, ()) or ():
                key = (mod.__name__, cls.__name__)
                if key not in out:
                    out.append(key)
    return out


def sample(items: list, n: int) -> list:
    """``n`` items spread evenly over ``items`` (all when n is 0 or more than there are)."""
    if n <= 0 or n >= len(items):
        return list(items)
    return [items[(i * len(items)) // n] for i in range(n)]


def mutants(n: int) -> list[str]:
    from ledgercheck.conformance import mutation as M
    from ledgercheck.spec import default_spec

    by_class: dict[str, list[str]] = {}
    for m in M.generate(default_spec()):
        if not m.benign:
            by_class.setdefault(m.klass, []).append(m.name)
    picked: list[str] = []
    depth = 0
    while len(picked) < n and any(depth < len(v) for v in by_class.values()):  # the classes in turns
        for names in by_class.values():
            name = names[(depth * 7919) % len(names)] if depth < len(names) else None  # spread over the class
            if name is not None and name not in picked and len(picked) < n:
                picked.append(name)
        depth += 1
    return picked


def first_failure(address: str, order: str, budget: float, work: Path) -> dict:
    """One ``pytest -x`` process: its wall time, the tests it ran and the first failing clause."""
    results = work / f"results-{order}.json"
    if results.exists():
        results.unlink()
    cmd = [sys.executable, "-m", "pytest", str(work), "--rootdir", str(work), "-p", "no:cacheprovider", "-o", "addopts=",
           "--assert=plain", "-p", "ledgercheck", "-q", "--no-header", "-x", "--ledger-only", "--ledger-adapter", address,
           "--ledger-order", order, "--ledger-results", str(results), "--ledger-artifacts", str(work / "artifacts")]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=budget)
        seconds, rc = time.monotonic() - start, proc.returncode
    except subprocess.TimeoutExpired:
        return {"seconds": budget, "rc": None, "found": False, "tests_run": None, "clause": None}
    row: dict = {"seconds": seconds, "rc": rc, "found": rc == 1, "tests_run": None, "clause": None}
    if results.exists():
        doc = json.loads(results.read_text())
        failed = [t for t in doc["tests"] if t["outcome"] in ("failed", "error")]
        row["tests_run"] = len(doc["tests"])
        row["clause"] = failed[0]["clause"] if failed else None
    return row


def summary(rows: list[dict], order: str) -> tuple[float, float]:
    secs = [r[order]["seconds"] for r in rows]
    return statistics.median(secs), max(secs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ledgers", type=int, default=12, help="broken ledgers sampled evenly from the catalogues (0: all)")
    ap.add_argument("--mutants", type=int, default=6, help="non-benign generated mutants sampled evenly (0: none)")
    ap.add_argument("--no-wire", action="store_true", help="broken ledgers in process only")
    ap.add_argument("--budget", type=float, default=300.0, help="seconds after which a run that found nothing is stopped")
    ap.add_argument("--json", default=None, help="write every run here")
    args = ap.parse_args(argv)
    if args.ledgers < 0 or args.mutants < 0 or args.budget <= 0:
        print("bench_first_failure: --ledgers and --mutants must be 0 or more, --budget above 0", file=sys.stderr)
        return 2
    subjects: list[tuple[str, str, str]] = []  # (group, label, address)
    for mod, name in sample(catalogue(), args.ledgers):
        subjects.append(("in process", name, f"python:{mod}:{name}"))
        if not args.no_wire:
            serve = [sys.executable, "-m", "ledgercheck", "serve", f"python:{mod}:{name}"]
            subjects.append(("over the wire", name, "exec:" + " ".join(shlex.quote(a) for a in serve)))
    if args.mutants:
        from ledgercheck.conformance.mutation import address

        subjects += [("mutants (wire)", m, address(m)) for m in mutants(args.mutants)]
    load = os.getloadavg()[0]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="ledgercheck-bench-ff-") as tmp:
        try:
            for i, (group, label, addr) in enumerate(subjects, 1):
                work = Path(tmp) / str(i)
                work.mkdir()
                row = {"group": group, "subject": label}
                for order in ("failfast", "generated"):
                    row[order] = first_failure(addr, order, args.budget, work)
                rows.append(row)
                new, old = row["failfast"], row["generated"]
                print(f"[{i}/{len(subjects)}] {group:14} {label[:48]:48} new {new['seconds']:6.1f}s ({new['tests_run']} tests, "
                      f"{new['clause']})  old {old['seconds']:6.1f}s ({old['tests_run']} tests)", flush=True)
        except KeyboardInterrupt:  # Ctrl-C: the figures of the subjects measured so far
            print(f"interrupted: {len(rows)} of {len(subjects)} subjects measured", flush=True)
            if not rows:
                return 2
    load = (load + os.getloadavg()[0]) / 2
    print(f"\ntime to first failure (pytest -x, whole process), load average {load:.1f} on {os.cpu_count()} cores")
    print(f"{'':16} {'runs':>4} {'median new':>11} {'median old':>11} {'ratio':>6} {'worst new':>10} {'worst old':>10} {'ratio':>6}")
    groups = list(dict.fromkeys(r["group"] for r in rows)) + ["all"]
    for g in groups:
        sel = [r for r in rows if g == "all" or r["group"] == g]
        (mn, wn), (mo, wo) = summary(sel, "failfast"), summary(sel, "generated")
        print(f"{g:16} {len(sel):4} {mn:10.1f}s {mo:10.1f}s {mn / mo:6.2f} {wn:9.1f}s {wo:9.1f}s {wn / wo:6.2f}")
    missed = [r["subject"] for r in rows if not r["failfast"]["found"]]
    if missed:
        print(f"no failure found in the fail-fast order (counted at their time above) for: {', '.join(missed)}")
    found = [r for r in rows if r["failfast"]["found"]]
    if not found:
        print("goal: nothing measured (no subject failed)")
        return 1
    # the goal is about how soon a failure comes: a subject no test fails at all (a self-check
    # survivor, docs/selfcheck.md) has no first failure to wait for, and is listed above instead
    mn, wn = summary(found, "failfast")
    met = mn <= GOAL_MEDIAN_S and wn <= GOAL_WORST_S
    print(f"goal (median <= {GOAL_MEDIAN_S:g}s, worst <= {GOAL_WORST_S:g}s over the {len(found)} subjects that fail): "
          f"median {mn:.1f}s, worst {wn:.1f}s: {'met' if met else 'MISSED'}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"load": load, "rows": rows}, indent=2))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
