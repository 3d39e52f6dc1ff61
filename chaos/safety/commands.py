"""`ledgercheck safety`: the safety campaign against any adapter, and its verdict.

``--hosts N`` runs the workers on N hosts (Linux network namespaces, chaos/safety/hosts.py) around a
private PostgreSQL server started for the run, which they reach over their links; its DSN goes to
every process (``reset``'s ``server_dsn``, and ``$LEDGERCHECK_PG_DSN``, which the ``reference-pg``
adapter and the PostgreSQL library adapters read), and the default faults gain ``partition``.
Where namespaces cannot be made the command says why in one line and exits 2, unless
``LEDGERCHECK_ALLOW_NO_NETNS=1``: then every worker runs on this host, without the partition fault,
and a note says so.

Exit status: 0 when the recorded history shows no anomaly and the run reached what it must (a
claim handed out and completed, a live holder displaced, the history complete, ...: the checker's
coverage and the campaign's own), 1 when it shows at least one anomaly, 2 for bad input (an
unknown fault, an unusable adapter or output directory, a bad contract) and for an INCONCLUSIVE
run: no anomaly, but something that must be reached was not ("verdict: INCONCLUSIVE: ..." says
what).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ledgercheck.chaos.crash.commands import Progress, _spec, writable_dir
from ledgercheck.chaos.crash.points import ChaosError
from ledgercheck.reports.text import shown, shown_line

DEFAULT_FAULTS = "kill,pause,reopen"
PG_DSN_ENV = "LEDGERCHECK_PG_DSN"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("safety", help="concurrent workers on one ledger under kills, pauses and reopens; "
                                      "the recorded history checked for lost work, duplicate effects, split "
                                      "ownership and stale writes")
    p.add_argument("--adapter", required=True,
                   help="adapter address: reference, python:MODULE:FACTORY, exec:COMMAND or an installed name")
    p.add_argument("--spec", action="append", default=[], help="contract file (repeat for overlays)")
    p.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    p.add_argument("--items", type=int, default=100, help="items the producer creates (default 100)")
    p.add_argument("--seed", type=int, default=0, help="seed of the workload and the fault schedule (default 0)")
    p.add_argument("--workload", choices=("plain", "profiles"), default="plain",
                   help="profiles: the holders also drive spawn trees, the inbox and the outbox, and the cross-item "
                        "rules judge them (default plain: claim, effect, close-out)")
    p.add_argument("--nemesis", default=None, metavar="FAULTS",
                   help="comma-separated faults: kill, pause, reopen, partition (needs --hosts), or none "
                        f"(default: {DEFAULT_FAULTS}, and partition with --hosts)")
    p.add_argument("--hosts", type=int, default=0, metavar="N",
                   help="run the workers on N hosts (network namespaces; needs root and ip) around a private "
                        "PostgreSQL server they reach over the network (its DSN goes to every process); "
                        "LEDGERCHECK_ALLOW_NO_NETNS=1 runs them on this host where hosts cannot be made")
    p.add_argument("--time-limit", type=float, default=120.0, metavar="S",
                   help="the whole campaign's budget in seconds (default 120)")
    p.add_argument("--wall-scale", type=float, default=0.01, metavar="FACTOR",
                   help="contract timings x FACTOR for a wall-clock adapter (default 0.01, as certify)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="where history.jsonl and safety.json go (default: a new temporary directory)")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.add_argument("--max-excerpts", type=int, default=2, help="excerpts printed per anomaly class (default 2)")
    p.set_defaults(func=cmd_safety)


class _Bar(Progress):
    """The campaign's progress on stderr: faults done of planned, then the quiet period."""

    WIDTH = 20

    def __call__(self, done: int, total: int | None, info: dict[str, Any]) -> None:
        now = self.time()
        elapsed = now - self.start
        if elapsed < self.quiet_for or (not self.tty and now - self.last < 5.0):
            return
        self.last = now
        if info.get("phase") == "nemesis" and total:
            fill = int(self.WIDTH * done / total)
            head = f"nemesis [{'#' * fill}{'.' * (self.WIDTH - fill)}] {done}/{total} faults"
        else:
            head = "quiet: recovery's turn"
        tail = ", ".join(f"{info.get(k, 0)} {k}" for k in ("kill", "pause", "reopen", "cut") if k != "cut" or k in info)
        line = f"[{self.what}] {head}; {info.get('created', 0)} items created; {tail}; {elapsed:.0f}s"
        if self.tty:
            print("\r" + line.ljust(100), end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)
        self.shown = True


def _check_out(path: str | None) -> None:
    writable_dir("--out", path)


def cmd_safety(args: argparse.Namespace) -> int:
    """The campaign; a folder named with --out is held for the run, so two campaigns never write
    their processes' history files into one folder (reports/outdirs.py)."""
    if args.out is None:
        return _safety(args)
    from ledgercheck.reports.outdirs import FolderBusy, held

    try:
        _check_out(args.out)
        hold = held(args.out, "safety campaign")
        hold.__enter__()
    except (ChaosError, FolderBusy) as exc:
        print(f"ledgercheck safety: {'' if isinstance(exc, ChaosError) else '--out '}{exc}", file=sys.stderr)
        return 2
    try:
        return _safety(args)
    finally:
        hold.__exit__(None, None, None)


def _safety(args: argparse.Namespace) -> int:
    from . import clockfaults
    from .campaign import attach_verdict, check_history, run_campaign
    from .history import load_history
    from .history_commands import render
    from .nemesis import parse_faults

    progress = _Bar("safety")
    notes: list[str] = []
    try:
        if args.hosts < 0 or args.hosts > 200:
            raise ChaosError("--hosts must be between 0 and 200")
        faults = parse_faults(args.nemesis if args.nemesis is not None
                              else DEFAULT_FAULTS + (",partition" if args.hosts else ""))
        if args.workers < 1 or args.items < 1:
            raise ChaosError("--workers and --items must be at least 1")
        if args.time_limit <= 0 or args.wall_scale <= 0:
            raise ChaosError("--time-limit and --wall-scale must be positive")
        if "partition" in faults and not args.hosts:
            raise ChaosError("the partition fault needs workers on hosts: add --hosts N")
        _check_out(args.out)
        spec = _spec(args.spec)
        with _hosts(args.hosts, notes) as ph:
            if ph is None and "partition" in faults:
                faults = tuple(f for f in faults if f != "partition")
            result = run_campaign(args.adapter, spec, workers=args.workers, items=args.items, seed=args.seed,
                                  faults=faults, out_dir=args.out, time_limit=args.time_limit,
                                  wall_scale=args.wall_scale, check=False, progress=progress,
                                  hosts=ph.net if ph else None, reset={"server_dsn": ph.server_dsn} if ph else None,
                                  workload=args.workload)
        result.notes[:0] = notes
    except (ChaosError, OSError) as exc:
        progress.close()
        if isinstance(exc, OSError) and not isinstance(exc, ChaosError):
            exc = ChaosError(f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}")
        print(shown_line(f"ledgercheck safety: {exc}"), file=sys.stderr)
        return 2
    progress.close()
    assert result.history is not None
    verdict = check_history(result.history, spec)
    attach_verdict(result, verdict)
    clockfaults.attach(result)  # what each clock-faulted worker did (observations "clock", notes)
    doc = result.as_dict()
    with open(os.path.join(os.path.dirname(result.history), "safety.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, default=str)
    if args.json:
        print(json.dumps(doc, indent=1, default=str))
    else:
        # the adapter's name, version and answers are shown escaped, each line cut (reports/text.py)
        print(shown(summary(result), max_lines=None))
        print()
        print(shown(_with_verdict_line(render(load_history(result.history), verdict, max_excerpts=args.max_excerpts),
                                       result), max_lines=None))
    return EXIT[result.verdict or "fail"]


EXIT = {"pass": 0, "fail": 1, "inconclusive": 2}


def verdict_line(r: Any) -> str:
    """The campaign's verdict in one line: its anomalies, else what it did not reach, else none."""
    n = len(r.anomalies or [])
    if n:
        line = f"verdict: {n} anomal{'y' if n == 1 else 'ies'}"
        return line + (f" (and not reached: {'; '.join(r.missing)})" if r.missing else "")
    if r.missing:
        return f"verdict: INCONCLUSIVE: {'; '.join(r.missing)}"
    return "verdict: no anomaly"


def _with_verdict_line(text: str, r: Any) -> str:
    """The checker's rendering ends with its verdict line; the campaign's replaces it (the
    campaign knows what it did not reach besides what the history shows)."""
    lines = text.rstrip("\n").split("\n")
    if lines and lines[-1].startswith("verdict:"):
        lines.pop()
    return "\n".join([*lines, verdict_line(r)])


@contextmanager
def _hosts(n: int, notes: list[str]) -> Iterator[Any]:
    """``n`` hosts and the PostgreSQL server they reach (a ``PgHosts``), with ``$LEDGERCHECK_PG_DSN``
    naming that server for the campaign's processes; None without ``--hosts``, or where hosts cannot
    be made and ``LEDGERCHECK_ALLOW_NO_NETNS`` allows going on without them (a note says so)."""
    if not n:
        yield None
        return
    from ledgercheck.services.postgres import PostgresUnavailable

    from .hosts import HostsUnavailable, allowed_to_skip, hosts_with_postgres

    try:
        ctx = hosts_with_postgres(n)
        ph = ctx.__enter__()
    except (HostsUnavailable, PostgresUnavailable) as exc:
        why = " ".join(str(exc).split())
        if not allowed_to_skip():
            raise ChaosError(f"--hosts {n}: {why}") from None
        notes.append(f"--hosts {n} not used ({why}); LEDGERCHECK_ALLOW_NO_NETNS is set, so every worker ran on "
                     "this host, without the partition fault")
        yield None
        return
    before = os.environ.get(PG_DSN_ENV)
    os.environ[PG_DSN_ENV] = ph.server_dsn
    try:
        yield ph
    finally:
        if before is None:
            os.environ.pop(PG_DSN_ENV, None)
        else:
            os.environ[PG_DSN_ENV] = before
        ctx.__exit__(None, None, None)


def summary(r: Any) -> str:
    """What ran: the adapter, its declarations, the faults done, the final states, the speed."""
    n = r.nemesis
    lines = [
        f"adapter {r.address} ({r.adapter.get('name')} {r.adapter.get('version')}, clock {r.adapter.get('clock')}, "
        f"{'durable' if r.adapter.get('durable') else 'not durable'}): delivery {r.declared['delivery']}, "
        f"reclaim {r.declared['reclaim']}",
        f"campaign: seed {r.seed}, {r.workers} workers ({r.mode}), {r.created}/{r.items} items created, "
        f"{r.ops} operations in {r.timings.get('active_s', 0) + r.timings.get('quiet_s', 0):.1f}s ({r.ops_per_s:g} ops/s)",
        f"nemesis: {_n(n.get('kill', 0), 'kill')} ({n.get('kill_at_point', 0)} at named crash points), "
        f"{_n(n.get('pause', 0), 'pause')}, {_n(n.get('reopen', 0), 'reopen')}"
        + (f", {_n(n['cut'], 'partition')} ({n.get('partition', 0)} worker cut-offs, {n.get('cut_takeover', 0)} healed after another host took the cut-off holder's item)" if n.get("cut") else "")
        + _clock_faults(n) + "; "
        f"{_n(n.get('replaced', 0), 'worker')} replaced",
        f"takeovers: {_takeovers(r)}",
        f"final read: {', '.join(f'{k} {v}' for k, v in r.final.items()) or 'nothing'}",
        f"history: {r.history}",
    ]
    lines += [f"note: {x}" for x in r.notes]
    return "\n".join(lines)


def _takeovers(r: Any) -> str:
    """How many paused holders lost their item to another worker, and by which path."""
    t = r.takeovers or {}
    planned = t.get("planned", 0) - t.get("void", 0)
    done = t.get("operator", 0) + t.get("time", 0)
    paths = ", ".join(f"{t[k]} by {'the operator' if k == 'operator' else 'lease lapse'}"
                      for k in ("operator", "time") if t.get(k))
    line = f"{done} of {planned} planned" + (f" ({paths})" if paths else "")
    return line + (f"; {t['void']} item(s) finished by another write while the holder was paused" if t.get("void") else "")


def _clock_faults(n: Any) -> str:
    """The clock faults done (chaos/safety/clockfaults.py), when the campaign had any."""
    from .nemesis import CLOCK_FAULTS

    done = [f"{k} {n[k]}" for k in CLOCK_FAULTS if k in n]
    return f", clock faults: {', '.join(done)}" if done else ""


def _n(k: int, what: str) -> str:
    return f"{k} {what}{'' if k == 1 else 's'}"
