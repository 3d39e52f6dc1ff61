"""Same verdicts before and after a change to the safety tier (a tool for refactoring it).

    python scripts/safety_verdicts.py record DIR [SEEDS...]   # run the campaigns, keep histories + verdicts
    python scripts/safety_verdicts.py compare DIR [--rerun]   # check the kept histories again and compare

``record`` runs the safety campaign of the reference, the independent ledgers and every broken
safety ledger (fixtures/testkit/broken_safety.py, each under the faults that exercise its bug) on fixed
seeds, and keeps each history and the checker's full verdict (every anomaly with its class, item,
explanation and excerpt; coverage; missing; verdict).  ``compare`` runs the current checker on
the kept histories and compares each verdict with the kept one clause by clause (exit 1 on any
difference); with ``--rerun`` it also runs every campaign again with the current code and
compares the anomaly classes found (the runs are timed by the machine, so only classes compare).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from ledgercheck.chaos.safety.campaign import check_history, run_campaign
from ledgercheck.fixtures.testkit import broken_safety as bs

SETTINGS: dict[str, Any] = {"workers": 4, "items": 40, "duration": 1.6, "time_limit": 60.0}
CORRECT = {
    "reference": ("reference", "kill,pause,reopen"),
    "mem": ("python:ledgercheck.fixtures.testkit.independent:MemLedger", "kill,pause,reopen"),
    "shared-mem": ("python:ledgercheck.fixtures.testkit.independent:SharedMemLedger", "kill,pause,reopen"),
}
BROKEN_FAULTS = {
    "ClaimReadsThenWrites": "kill,pause,reopen", "DequeueDeletes": "kill", "ReopenRequeuesClaimed": "reopen",
    "CloseOutIgnoresToken": "pause", "JournalInProcessMemory": "pause", "NeverReclaims": "kill",
    "ClaimSkipsRecovered": "kill",
}


def cases() -> dict[str, tuple[str, str]]:
    out = dict(CORRECT)
    for cls in bs.ALL:
        out[cls.__name__] = (f"python:ledgercheck.fixtures.testkit.broken_safety:{cls.__name__}", BROKEN_FAULTS[cls.__name__])
    return out


def verdict_dict(v: Any) -> dict[str, Any]:
    return json.loads(json.dumps(v.to_json(), default=str))


def record(root: Path, seeds: list[int]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name, (addr, faults) in cases().items():
        for seed in seeds:
            out = root / f"{name}-{seed}"
            shutil.rmtree(out, ignore_errors=True)
            r = run_campaign(addr, seed=seed, faults=faults, out_dir=str(out), **SETTINGS)
            classes = sorted({a["class"] for a in r.anomalies or []})
            (out / "verdict.json").write_text(json.dumps(verdict_dict(check_history(r.history)), indent=1, sort_keys=True))
            (out / "classes.json").write_text(json.dumps(classes))
            print(f"{name} seed {seed}: {classes or 'no anomaly'}", flush=True)


def diff(a: Any, b: Any, path: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}.{k}: only {'after' if k not in a else 'before'}")
            else:
                diff(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{path}: {len(a)} entries before, {len(b)} after")
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append(f"{path}: {a!r} before, {b!r} after")


def compare(root: Path, rerun: bool) -> int:
    bad = 0
    kept = sorted(p for p in root.iterdir() if (p / "verdict.json").exists())
    for d in kept:
        before = json.loads((d / "verdict.json").read_text())
        after = verdict_dict(check_history(str(d / "history.jsonl")))
        out: list[str] = []
        diff(before, after, d.name, out)
        n = len(before.get("anomalies") or [])
        print(f"{d.name}: {n} anomalies, {'same verdict' if not out else 'DIFFERENT'}")
        for line in out[:20]:
            print("   ", line)
        bad += bool(out)
    if rerun:
        cs = cases()
        for d in kept:
            name, _, seed = d.name.rpartition("-")
            addr, faults = cs[name]
            tmp = root / "rerun" / d.name
            shutil.rmtree(tmp, ignore_errors=True)
            r = run_campaign(addr, seed=int(seed), faults=faults, out_dir=str(tmp), **SETTINGS)
            now = sorted({a["class"] for a in r.anomalies or []})
            was = json.loads((d / "classes.json").read_text())
            same = now == was
            print(f"rerun {d.name}: before {was or 'no anomaly'}, after {now or 'no anomaly'}"
                  f"{'' if same else '  DIFFERENT (a timed run: read why)'}")
            bad += not same
    print(f"{len(kept)} histories compared, {bad} differences")
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("record", "compare"):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    root = Path(argv[1])
    if argv[0] == "record":
        record(root, [int(s) for s in argv[2:]] or [1, 2, 3])
        return 0
    return compare(root, "--rerun" in argv[2:])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
