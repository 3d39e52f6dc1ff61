"""What ledgercheck's pytest plugin adds to an unrelated pytest run in the same environment.

A one-test project (outside the source tree) is run with ``python -m pytest`` in this Python's
environment, where ledgercheck is installed, in four lanes, alternating in rotating order round
after round so every lane sees the same machine load:

* ``without``: ``-p no:ledgercheck`` (the entry point blocked: the baseline);
* ``without-again``: the same command again, so the spread between two identical lanes shows
  what noise alone looks like on this machine right now;
* ``installed``: plain ``pytest``: pytest loads the ``pytest11`` entry point (conformance/entry.py);
* ``suite``: ``-p ledgercheck.conformance.plugin``: the suite loaded into the session, which is
  what every session paid when the entry point named the plugin itself (for scale).

For each lane: the median wall time and the median CPU time of the pytest process, and how many
modules the test's process had imported.  Ratios are medians of the per-round ratios against
``without``.  The target is that ``installed`` is indistinguishable from noise: its median CPU
ratio lies within the interquartile range of ``without-again``'s ratios (or within 1% of 1.0);
the exit status is 1 when it does not.

    python bench/bench_plugin.py                 # 30 rounds, about a minute
    python bench/bench_plugin.py --rounds 60 --json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

LANES = {
    "without": ["-p", "no:ledgercheck"],
    "without-again": ["-p", "no:ledgercheck"],
    "installed": [],
    "suite": ["-p", "ledgercheck.conformance.plugin"],
}
TEST = """\
import os
import sys


def test_one():
    with open(os.environ["BENCH_PLUGIN_MODULES"], "w") as f:
        f.write(str(len(sys.modules)))
"""


def one_run(project: Path, args: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the pytest process, modules its test saw)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=project, env=env,
                       capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit(f"bench_plugin: pytest {' '.join(args)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, int(Path(env["BENCH_PLUGIN_MODULES"]).read_text())


def quartiles(xs: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(xs, n=4)
    return q[0], q[2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args(argv)
    if args.rounds < 4:
        ap.error("--rounds must be 4 or more (quartiles need them)")
    with tempfile.TemporaryDirectory(prefix="bench-plugin-") as tmp:
        project = Path(tmp) / "project"
        project.mkdir()
        (project / "test_one.py").write_text(TEST)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")}
        env["BENCH_PLUGIN_MODULES"] = str(Path(tmp) / "modules")
        names = list(LANES)
        for name in names:  # warm the caches (bytecode, the page cache) once per lane
            one_run(project, LANES[name], env)
        runs: dict[str, list[tuple[float, float, int]]] = {n: [] for n in names}
        for i in range(args.rounds):
            order = names[i % len(names):] + names[: i % len(names)]
            for name in order:
                runs[name].append(one_run(project, LANES[name], env))
    base = runs["without"]
    out: dict[str, Any] = {"rounds": args.rounds, "load_average": os.getloadavg(), "lanes": {}}
    for name in names:
        rs = runs[name]
        wall_ratios = [r[0] / b[0] for r, b in zip(rs, base, strict=True)]
        cpu_ratios = [r[1] / b[1] for r, b in zip(rs, base, strict=True)]
        out["lanes"][name] = {
            "wall_ms": round(1000 * statistics.median(r[0] for r in rs), 1),
            "cpu_ms": round(1000 * statistics.median(r[1] for r in rs), 1),
            "modules": statistics.median(r[2] for r in rs),
            "wall_ratio": round(statistics.median(wall_ratios), 4),
            "cpu_ratio": round(statistics.median(cpu_ratios), 4),
            "cpu_ratio_iqr": [round(q, 4) for q in quartiles(cpu_ratios)],
            "added_cpu_ms": round(1000 * statistics.median(r[1] - b[1] for r, b in zip(rs, base, strict=True)), 1),
        }
    lanes = out["lanes"]
    lo, hi = lanes["without-again"]["cpu_ratio_iqr"]
    ratio = lanes["installed"]["cpu_ratio"]
    out["noise_band"] = [min(lo, 0.99), max(hi, 1.01)]
    out["indistinguishable"] = out["noise_band"][0] <= ratio <= out["noise_band"][1]
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"one-test pytest run, {args.rounds} alternating rounds, load average {out['load_average'][0]:.2f}")
        print(f"{'lane':14} {'wall ms':>8} {'cpu ms':>8} {'modules':>8} {'wall x':>7} {'cpu x':>7}  cpu x IQR        added cpu ms")
        for name, f in lanes.items():
            print(f"{name:14} {f['wall_ms']:8.1f} {f['cpu_ms']:8.1f} {f['modules']:8.0f} {f['wall_ratio']:7.3f} "
                  f"{f['cpu_ratio']:7.3f}  {f['cpu_ratio_iqr'][0]:.3f}-{f['cpu_ratio_iqr'][1]:.3f}  {f['added_cpu_ms']:+8.1f}")
        print(f"installed / without: {ratio:.3f}x CPU, noise band {out['noise_band'][0]:.3f}-{out['noise_band'][1]:.3f} "
              f"(without-again's IQR): {'indistinguishable from noise' if out['indistinguishable'] else 'ABOVE NOISE'}")
        print(f"the suite loaded into every session (the former entry point) would cost {lanes['suite']['cpu_ratio']:.2f}x "
              f"CPU, {lanes['suite']['modules'] - lanes['without']['modules']:.0f} more modules")
    return 0 if out["indistinguishable"] else 1


if __name__ == "__main__":
    sys.exit(main())
