"""`ledgercheck crash ...`: crash points, single windows, exhaustive exploration, storms, replays.

Exit status: 0 when everything passed, 1 when a window (or the storm) failed or could not be
evaluated, 2 for bad input (unknown point, unusable adapter, corrupt replay file, bad contract).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ledgercheck.reports.text import shown
from ledgercheck.spec import Spec, SpecError, load_spec

from .points import ChaosError
from .storms import HARD_MAX_WORKERS, MAX_WORKERS


def terminal(text: object) -> str:
    """What a crash command prints of an adapter's words: escaped, each line cut (reports/text.py)."""
    return shown(text, max_lines=None)


DEFAULT_ADAPTER = "reference"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("crash", help="kill workers at named crash points and check recovery against the contract")
    cs = p.add_subparsers(dest="crash_command", required=True, metavar="SUBCOMMAND")

    def common(q: argparse.ArgumentParser, seed: bool = True) -> None:
        q.add_argument("--adapter", default=DEFAULT_ADAPTER,
                       help="adapter address: reference, python:MODULE:FACTORY or exec:COMMAND (default: reference)")
        q.add_argument("--spec", action="append", default=[], help="contract file (repeat for overlays)")
        if seed:
            q.add_argument("--seed", type=int, default=0, help="seed for the workload (and the kill schedule)")
        q.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")
        q.add_argument("--tmp-dir", default=None, help="where scenario ledgers and sinks are created (default: system temp)")
        q.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for any one worker step")
        q.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # module:Class of a worker variant (tests)

    q = cs.add_parser("points", help="list the crash points of the worker and the adapter, with the matrix")
    common(q, seed=False)
    q.set_defaults(func=cmd_points)

    q = cs.add_parser("run", help="run one crash window")
    common(q)
    q.add_argument("--point", required=True, help="crash point name (see `ledgercheck crash points`)")
    q.add_argument("--occurrence", type=int, default=1, help="which passage of the point to stop at (default 1)")
    q.add_argument("--mode", choices=["kill", "pause"], default="kill",
                   help="kill: SIGKILL the worker; pause: SIGSTOP it, let another take over, SIGCONT it (fencing)")
    q.add_argument("--replay-dir", default=None, help="where replay files of failing windows go")
    q.set_defaults(func=cmd_run)

    q = cs.add_parser("explore", help="run every crash point x occurrence of a workload and report every window")
    common(q)
    q.add_argument("--points", default=None, help="comma-separated crash points (default: all)")
    q.add_argument("--max-occurrence", type=int, default=None, help="stop at this occurrence of each point")
    q.add_argument("--jobs", type=int, default=1, help="windows run side by side (default 1)")
    q.add_argument("--no-fencing", action="store_true", help="skip the pause-and-takeover windows")
    q.add_argument("--workload", default=None, help="workload JSON file (default: the built-in default workload)")
    q.add_argument("--replay-dir", default=None, help="where replay files of failing windows go")
    q.set_defaults(func=cmd_explore)

    q = cs.add_parser("storm", help="N workers on one ledger, random SIGKILLs, end checks")
    common(q)
    q.add_argument("--workers", type=int, default=4, help="worker processes (default 4, at most --max-workers)")
    q.add_argument("--max-workers", type=int, default=MAX_WORKERS,
                   help=f"refuse more workers than this (default {MAX_WORKERS}, at most {HARD_MAX_WORKERS})")
    q.add_argument("--kills", type=int, default=150)
    q.add_argument("--items", type=int, default=None, help="items in the generated workload (default max(200, 4 x kills))")
    q.add_argument("--time-limit", type=float, default=600.0, help="stop killing after this many seconds")
    q.add_argument("--replay-dir", default=None, help="where the replay file of a failing storm goes")
    q.set_defaults(func=cmd_storm)

    q = cs.add_parser("power-loss", help="cut power at every sync and acknowledgement of a workload on the reference "
                                         "SQLite ledger; reopen on what survived (docs/chaos.md)")
    q.add_argument("--synchronous", choices=["OFF", "NORMAL", "FULL", "EXTRA"], default="FULL",
                   help="the reference ledger's synchronous setting (default FULL)")
    q.add_argument("--seed", type=int, default=0, help="first seed (workload interleaving and prefixes tried)")
    q.add_argument("--runs", type=int, default=1, help="seeds run, from --seed on (default 1)")
    q.add_argument("--items", type=int, default=4, help="items created, claimed and closed out per run (default 4)")
    q.add_argument("--budget", type=int, default=3, help="prefixes tried per cut besides none and all (default 3)")
    q.add_argument("--spec", action="append", default=[], help="contract file (repeat for overlays)")
    q.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")
    q.add_argument("--tmp-dir", default=None, help="where the ledgers and crash states are written (default: system temp)")
    q.set_defaults(func=cmd_power_loss)

    q = cs.add_parser("replay", help="re-create the kill a replay file describes and check it again")
    q.add_argument("file", help="replay file written by a failing window or storm")
    q.add_argument("--max-workers", type=int, default=MAX_WORKERS,
                   help=f"refuse a storm file asking for more workers than this (default {MAX_WORKERS})")
    q.add_argument("--adapter", default=None,
                   help="run against this adapter (needed when the file records an exec: or python: address: "
                        "a replay file never starts a command or imports a module on its own)")
    q.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")
    q.add_argument("--tmp-dir", default=None)
    q.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # the worker variant the file records (tests)
    q.set_defaults(func=cmd_replay)


# ---------------------------------------------------------------------------------- helpers
def _spec(files: list[str]) -> Spec:
    try:
        return load_spec(files or None)
    except SpecError as exc:
        raise ChaosError(str(exc.problems[0]) if exc.problems else str(exc)) from None


def writable_dir(option: str, path: str | None) -> None:
    """``path`` (given as ``option``) is a directory this process can write, created if missing;
    else one ChaosError line.  None: nothing to check."""
    if path is None:
        return
    if os.path.exists(path) and not os.path.isdir(path):
        raise ChaosError(f"{option} {path}: not a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise ChaosError(f"{option} {path}: cannot create it ({exc.strerror})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ChaosError(f"{option} {path}: not writable")


def _check_paths(args: argparse.Namespace) -> None:
    """The path options, checked before anything runs, so a bad one is a one-line exit 2."""
    tmp = getattr(args, "tmp_dir", None)
    if tmp is not None:
        if not os.path.isdir(tmp):
            raise ChaosError(f"--tmp-dir {tmp}: {'not a directory' if os.path.exists(tmp) else 'no such directory'}")
        if not os.access(tmp, os.W_OK | os.X_OK):
            raise ChaosError(f"--tmp-dir {tmp}: not writable")
    writable_dir("--replay-dir", getattr(args, "replay_dir", None))
    wl = getattr(args, "workload", None)
    if wl is not None and not os.path.isfile(wl):
        raise ChaosError(f"--workload {wl}: {'not a file' if os.path.exists(wl) else 'no such file'}")


def _fail(cmd: str, exc: BaseException) -> int:
    if isinstance(exc, OSError) and not isinstance(exc, ChaosError):
        exc = ChaosError(f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}")
    print(terminal(f"ledgercheck crash {cmd}: {exc}"), file=sys.stderr)
    return 2


class Progress:
    """A status line on stderr for anything that runs longer than a couple of seconds."""

    def __init__(self, what: str, quiet_for: float = 2.0) -> None:
        import time

        self.time = time.monotonic
        self.what = what
        self.start = self.time()
        self.quiet_for = quiet_for
        self.last = 0.0
        self.tty = sys.stderr.isatty()
        self.shown = False
        self.bad = 0

    def __call__(self, done: int, total: int | None, info: dict[str, Any]) -> None:
        if info.get("verdict") not in (None, "pass"):
            self.bad += 1
        now = self.time()
        elapsed = now - self.start
        if elapsed < self.quiet_for or (not self.tty and now - self.last < 5.0):
            return
        self.last = now
        of = f"/{total}" if total else ""
        bad = f", {self.bad} not passing" if "verdict" in info else ""
        line = f"[{self.what}] {done}{of}{bad}, {elapsed:.0f}s"
        if self.tty:
            print("\r" + line.ljust(60), end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)
        self.shown = True

    def close(self) -> None:
        if self.shown and self.tty:
            print(file=sys.stderr)


def _cell(v: Any) -> str:
    return "-" if v is None else str(v)


def window_table(windows: list[dict[str, Any]]) -> str:
    head = ["point", "class", "occ", "decision exp/obs", "effects exp/obs", "final", "verdict"]
    rows = []
    for w in windows:
        point = w["point"] + (" [takeover]" if "recovery.fencing_after_takeover" in w["clauses"] else "")
        rows.append([point, _cell(w["step_class"]), str(w["occurrence"]),
                     f"{_cell(w['decision_expected'])}/{_cell(w['decision_observed'])}",
                     f"{_cell(w['effects_expected'])}/{_cell(w['effects_observed'])}", _cell(w["final_status"]),
                     w["verdict"].upper()])
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in [head] + rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _print_failures(windows: list[dict[str, Any]]) -> None:
    for w in windows:
        if w["verdict"] == "pass":
            continue
        sk = w.get("scan_kill")
        scan = f", recovery scan killed at {sk[0]} #{sk[1]}" if sk else ""
        print(terminal(f"\n{w['verdict'].upper()} {w['point']} #{w['occurrence']}{scan} ({_cell(w['step_class'])}): {w['message']}"))
        if w.get("replay"):
            print(f"  reproduce: {w['replay']}")


# ---------------------------------------------------------------------------------- commands
def cmd_points(args: argparse.Namespace) -> int:
    from .exploration import Explorer
    from .points import unknown_points, worker_points

    try:
        _check_paths(args)
        spec = _spec(args.spec)
        with Explorer(args.adapter, spec, timeout=args.timeout, tmp_root=args.tmp_dir, worker=args.worker) as ex:
            adapter_points = [p for p in ex.adapter_points if p not in ex.worker_points]
            caps = ex.handshake.get("capabilities") or {}
    except (ChaosError, OSError) as exc:
        return _fail("points", exc)
    out = {"adapter": args.adapter, "worker_points": [], "adapter_points": adapter_points,
           "not_implemented": unknown_points(spec), "capabilities": caps}
    for p in worker_points(spec):
        cp = spec.crash_points[p]
        out["worker_points"].append({"point": p, "journal": cp.journal, "description": cp.description,
                                     "matrix": {c: {"decision": row[p].decision, "effects": row[p].effects}
                                                for c, row in spec.matrix.items() if p in row}})
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"worker crash points (contract {spec.name} {spec.version}):")
    for wp in out["worker_points"]:
        print(f"  {wp['point']:<32} journal {wp['journal']:<9} {wp['description']}")
        for c, m in wp["matrix"].items():
            print(f"      {c:<32} {m['decision']:<10} {m['effects']}")
    print(terminal(f"adapter crash points ({args.adapter}): {', '.join(adapter_points) or 'none declared'}"))
    if out["not_implemented"]:
        print(f"contract points the worker has no place for: {', '.join(out['not_implemented'])}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from .exploration import run_one

    try:
        _check_paths(args)
        spec = _spec(args.spec)
        w = run_one(args.adapter, spec, args.point, args.occurrence, seed=args.seed, mode=args.mode,
                    replay_dir=args.replay_dir, worker=args.worker, timeout=args.timeout, tmp_root=args.tmp_dir)
    except (ChaosError, OSError) as exc:
        return _fail("run", exc)
    if args.json:
        print(json.dumps(w, indent=1))
    else:
        print(terminal(window_table([w])))
        _print_failures([w])
    return 0 if w["verdict"] == "pass" else 1


def cmd_explore(args: argparse.Namespace) -> int:
    from ledgercheck.chaos.safety.workload import Workload, WorkloadError

    from .exploration import explore

    progress = Progress("crash explore")
    try:
        _check_paths(args)
        spec = _spec(args.spec)
        workload = None
        if args.workload:
            from ledgercheck.bounded import WORKLOAD, InputError, load_limited

            from .replays import MAX_ITEMS

            try:  # bounded as a replay file's workload is (docs/inputs.md)
                raw = load_limited(args.workload, WORKLOAD)
                if isinstance(raw, dict) and isinstance(raw.get("items"), list) and len(raw["items"]) > MAX_ITEMS:
                    raise WorkloadError(f"{len(raw['items']):,} items, more than {MAX_ITEMS:,}, the bound for a workload")
                workload = Workload.from_dict(raw, spec)
            except InputError as exc:
                raise ChaosError(str(exc)) from None
            except WorkloadError as exc:
                raise ChaosError(f"{args.workload}: {exc}") from None
        points = [p.strip() for p in args.points.split(",") if p.strip()] if args.points else None
        windows = explore(args.adapter, spec, seed=args.seed, points=points, workload=workload,
                          max_occurrence=args.max_occurrence, replay_dir=args.replay_dir, progress=progress,
                          jobs=args.jobs, fencing=not args.no_fencing, worker=args.worker, timeout=args.timeout,
                          tmp_root=args.tmp_dir)
    except (ChaosError, OSError) as exc:
        progress.close()
        return _fail("explore", exc)
    progress.close()
    bad = [w for w in windows if w["verdict"] != "pass"]
    if args.json:
        print(json.dumps({"adapter": args.adapter, "seed": args.seed, "windows": windows,
                          "passed": len(windows) - len(bad), "not_passed": len(bad)}, indent=1))
    else:
        print(terminal(window_table(windows)))
        _print_failures(windows)
        print(f"\n{len(windows)} windows: {len(windows) - len(bad)} passed, "
              f"{sum(w['verdict'] == 'fail' for w in windows)} failed, {sum(w['verdict'] == 'error' for w in windows)} errors")
    return 1 if bad else 0


def cmd_storm(args: argparse.Namespace) -> int:
    from .storms import storm

    progress = Progress("crash storm")
    try:
        _check_paths(args)
        spec = _spec(args.spec)
        s = storm(args.adapter, spec, seed=args.seed, workers=args.workers, kills=args.kills, items=args.items,
                  time_limit=args.time_limit, replay_dir=args.replay_dir, progress=progress, worker=args.worker,
                  timeout=args.timeout, tmp_root=args.tmp_dir, max_workers=args.max_workers)
    except (ChaosError, OSError) as exc:
        progress.close()
        return _fail("storm", exc)
    progress.close()
    print_storm(s, args.json)
    return 0 if s["verdict"] == "pass" else 1


def print_storm(s: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(s, indent=1))
        return
    if s["verdict"] == "error":
        print(terminal(f"ERROR: {s.get('message')}"))
    else:
        print(f"{s['kills']} kills of {s['workers']} workers over {s['items']} items ({s['steps']} effect steps) "
              f"in {s['elapsed']:.1f}s ({s['kills_per_s']} kills/s), {s['barriers']} recoveries")
        print(f"recovery decisions: {', '.join(f'{k} {v}' for k, v in s['victims'].items()) or 'none'}")
        print(f"final: {', '.join(f'{k} {v}' for k, v in s['final'].items())}")
        print(f"effects: {s['effects']['applied']} applied of {s['effects']['submissions']} submissions; "
              f"{s['acquisitions']} lease grants checked")
        print(f"verdict: {s['verdict'].upper()} ({s['violation_count']} violation(s))")
    for v in s.get("violations") or []:
        print(terminal(f"  [{v['clause']}] {v['message']}"))
    if s.get("replay"):
        print(f"reproduce: {s['replay']}")


def cmd_replay(args: argparse.Namespace) -> int:
    from .rerun import replay

    try:
        _check_paths(args)
        res = replay(args.file, address=args.adapter, worker=args.worker, tmp_root=args.tmp_dir, max_workers=args.max_workers)
    except (ChaosError, OSError) as exc:
        return _fail("replay", exc)
    if res.get("recorded_adapter") not in (None, res.get("adapter")):
        print(f"ledgercheck crash replay: replayed against {res['adapter']}; the file records {res['recorded_adapter']}",
              file=sys.stderr)
    if "point" in res:
        if args.json:
            print(json.dumps(res, indent=1))
        else:
            print(terminal(window_table([res])))
            _print_failures([res])
            if res.get("reproduced") is not None:
                print("reproduced: the window ended as recorded" if res["reproduced"] else
                      "not reproduced: the window did not end as the file records")
    else:
        print_storm(res, args.json)
    return 0 if res["verdict"] == "pass" else 1


def cmd_power_loss(args: argparse.Namespace) -> int:
    import dataclasses
    import tempfile

    from .powerloss import PowerLossError, describe, run_power_loss

    for name in ("runs", "items"):
        if getattr(args, name) < 1:
            return _fail("power-loss", ChaosError(f"--{name} must be at least 1, not {getattr(args, name)}"))
    if args.budget < 0:
        return _fail("power-loss", ChaosError(f"--budget must be at least 0, not {args.budget}"))
    results = []
    try:
        writable_dir("--tmp-dir", args.tmp_dir)
        spec = _spec(args.spec)
        for seed in range(args.seed, args.seed + args.runs):
            with tempfile.TemporaryDirectory(prefix="ledgercheck-power-", dir=args.tmp_dir) as work:
                results.append(run_power_loss(work, seed=seed, synchronous=args.synchronous, items=args.items,
                                              budget=args.budget, spec=spec))
    except (ChaosError, PowerLossError, OSError) as exc:
        return _fail("power-loss", exc)
    bad = [r for r in results if not r.ok]
    if args.json:
        print(json.dumps({"verdict": "fail" if bad else "pass",
                          "runs": [dataclasses.asdict(r) for r in results]}, indent=1))
    else:
        for r in results:
            print(terminal(describe(r)))
        print(f"{len(results) - len(bad)} of {len(results)} run(s) kept every acknowledged operation")
    return 1 if bad else 0
