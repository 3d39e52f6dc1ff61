"""A whole certify of the reference, in process and over the wire, serial and with -n 2, in one run.

Runs ``ledgercheck certify`` three times on the same selection and seed: in process serially,
in process with ``-n 2``, and over the wire (``exec:<python> -m ledgercheck serve reference``),
serially.  Prints each run's wall time with the load average before and after it, the ratios,
where the wire run spent its time beside the in-process run's (results.json
``timings.phases``: adapter process starts, round trips; each phase's ratio), whether byte-code
is written (without it every adapter process started compiles its sources) and whether the
three runs decided the same (conformance/results_bridge.py ``decided``: clauses, tests, crash
windows, verdicts).

Floors (issue 33): the wire run <= 2x the in-process run; -n 2 >= 1.5x faster than serial
(on 2 quiet cores); the three runs decide the same.  The time floors are a quiet machine's: a
row missed while the load average was at or above the number of cores says so.  Exit status
1 when a floor is missed (2 when a run failed to produce its report).

    python bench/bench_certify.py                       # the full contract (minutes)
    python bench/bench_certify.py --profile inbox       # one profile
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ledgercheck.conformance.results_bridge import differences

WIRE = f"exec:{sys.executable} -m ledgercheck serve reference"


def certify(tmp: Path, name: str, adapter: str, selection: list[str], *extra: str,
            env: dict[str, str] | None = None) -> dict[str, Any]:
    out = tmp / name
    before = os.getloadavg()[0]
    t = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "ledgercheck", "certify", "--adapter", adapter, *selection, *extra,
                          "--out", str(out), "--artifacts", str(tmp / f"{name}-artifacts"), "--no-history",
                          "--json", "--quiet"], capture_output=True, text=True, cwd=tmp, env=env)
    wall = time.perf_counter() - t
    res = out / "results.json"
    if not res.exists():
        raise SystemExit(f"bench_certify: the {name} run wrote no report (exit {run.returncode}): {run.stderr.strip()[-500:]}")
    return {"wall_s": wall, "load_before": before, "load_after": os.getloadavg()[0],
            "doc": json.loads(res.read_text(encoding="utf-8"))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="full", help="profiles to certify (default: full)")
    ap.add_argument("-k", dest="keyword", default=None, help="a pytest -k selection")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--byte-code", action="store_true",
                    help="cache compiled byte-code for every process of the three runs in the bench's temporary "
                         "directory (PYTHONPYCACHEPREFIX, as the test suite does), where the environment says "
                         "not to write it: what an installed package's processes have")
    a = ap.parse_args(argv)
    selection = ["--profile", a.profile, "--seed", str(a.seed)] + (["-k", a.keyword] if a.keyword else [])
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    with tempfile.TemporaryDirectory(prefix="bench-certify-") as tmp:
        env = None
        if a.byte_code:
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
            subprocess.run([sys.executable, "-m", "ledgercheck", "--version"], env=env, capture_output=True)  # fill it
        runs = {"in-process": certify(Path(tmp), "inproc", "reference", selection, env=env),
                "in-process -n 2": certify(Path(tmp), "n2", "reference", selection, "-n", "2", env=env),
                "wire": certify(Path(tmp), "wire", WIRE, selection, env=env)}
    base = runs["in-process"]
    wire_ratio = runs["wire"]["wall_s"] / base["wall_s"]
    n2_speedup = base["wall_s"] / runs["in-process -n 2"]["wall_s"]
    # the wire run also runs the tests that stop the adapter at its own crash points (not
    # applicable in process): compared on the clauses' outcomes, windows, verdicts and the tests both ran
    diffs = {name: differences(base["doc"], r["doc"], same_transport=name != "wire") for name, r in runs.items() if r is not base}
    busy = max(max(r["load_before"], r["load_after"]) for r in runs.values()) >= cores
    floors = {"wire <= 2x in-process": wire_ratio <= 2.0, "-n 2 >= 1.5x serial": n2_speedup >= 1.5,
              "serial, -n 2 and wire decide the same": not any(diffs.values())}
    result = {"selection": selection, "cores": cores,
              "runs": {n: {k: v for k, v in r.items() if k != "doc"} for n, r in runs.items()},
              "wire_over_in_process": wire_ratio, "n2_speedup": n2_speedup, "differences": diffs,
              "wire_phases": runs["wire"]["doc"]["timings"].get("phases"),
              "in_process_phases": base["doc"]["timings"].get("phases"),
              # a served adapter process compiles the package's sources at every start when no
              # byte-code is written (PYTHONDONTWRITEBYTECODE, an editable install): say which
              "byte_code_written": a.byte_code or not sys.dont_write_bytecode, "floors": floors}
    if a.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"certify {' '.join(selection)}; {cores} cores; byte-code "
              f"{'cached (--byte-code)' if a.byte_code else 'as the environment says'}")
        for name, r in runs.items():
            print(f"  {name:16} {r['wall_s']:7.1f}s  load {r['load_before']:.1f} -> {r['load_after']:.1f}  "
                  f"{r['doc']['verdict']}")
        print(f"wire / in-process: {wire_ratio:.2f}x; -n 2 speed-up over serial: {n2_speedup:.2f}x")
        print("wire run, by phase: tests, time (in process, ratio), adapter starts (their time), round trips (their time)")
        inproc = result["in_process_phases"] or {}
        for ph, p in (result["wire_phases"] or {}).items():
            ip = (inproc.get(ph) or {}).get("duration_s") or 0.0
            ratio = f"{p['duration_s'] / ip:5.2f}x" if ip else "    -"
            print(f"  {ph:15} {p['count']:4} {p['duration_s']:7.1f}s ({ip:6.1f}s, {ratio})  {p['starts']:4} starts "
                  f"{p['start_s']:6.1f}s  {p['round_trips']:6} round trips {p['round_trip_s']:6.1f}s")
        if not result["byte_code_written"]:
            print("  (no byte-code is written here (PYTHONDONTWRITEBYTECODE): every adapter process the wire run "
                  "starts compiles what it imports that has none)")
        for name, d in diffs.items():
            for line in d:
                print(f"  {name} differs: {line}")
        for name, ok in floors.items():
            note = " (measured with the load average at or above the core count: the floor is a quiet machine's)" \
                if not ok and busy and "decide" not in name else ""
            print(f"  {'ok    ' if ok else 'MISSED'} {name}{note}")
    return 0 if all(floors.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
