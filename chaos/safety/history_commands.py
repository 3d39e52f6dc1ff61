"""`ledgercheck history check FILE [--json]`: the safety checker on a recorded history.

Exit status: 0 when the history shows no anomaly and reached every situation a verdict needs, 1 when
it shows at least one anomaly, 2 when the file cannot be read as a history (one line naming
file:line and the problem) or when the verdict is INCONCLUSIVE (no anomaly, but something required
was not reached: the verdict line names what).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ledgercheck.reports.text import shown, shown_line

from .anomalies import Anomaly, Verdict, check, fmt_num
from .history import History, HistoryError, Record, load_history


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("history", help="check a recorded safety history for anomalies")
    hs = p.add_subparsers(dest="history_command", required=True, metavar="SUBCOMMAND")
    q = hs.add_parser("check", help="find lost work, duplicate effects, split ownership, stale writes, "
                                    "changed terminal records and stuck work, each with its proof")
    q.add_argument("file", help="history file (JSON lines, ledgercheck-history/1)")
    q.add_argument("--json", action="store_true", help="print the verdict as JSON on stdout")
    q.add_argument("--max-excerpts", type=int, default=3,
                   help="excerpts printed per anomaly class (default 3; --json has them all)")
    q.add_argument("--spec", action="append", default=[],
                   help="contract file the campaign ran under (repeat for overlays; default: the shipped one)")
    q.add_argument("--html", metavar="OUT",
                   help="also write an HTML page of timelines (docs/safety.md, \"Timelines\"): one per failing item")
    q.add_argument("--item", action="append", default=[], metavar="ITEM",
                   help="with --html: a timeline of this item too (repeat for more)")
    q.add_argument("--whole", action="store_true",
                   help="with --html: a timeline of the whole history too (refused over "
                        "reports/timeline.py's MAX_WHOLE_OPS operations)")
    q.add_argument("--linearizability", metavar="FILE",
                   help="with --html: a per-item linearizability result (JSON, or the output of history check "
                        "--json holding one) whose order or failing excerpt the timelines show")
    q.add_argument("--explain", metavar="ITEM", default=None,
                   help="print one item's story: its operations, and the linearization found or where every order fails")
    q.add_argument("--classes-only", action="store_true",
                   help="only the anomaly classes: no per-item linearizability nor cross-item checks "
                        "(for histories of ledgers that do not follow the contract's model)")
    q.add_argument("--budget", type=int, default=None,
                   help="model states one item's linearizability search may visit (default: chaos.linearize.BUDGET)")
    q.set_defaults(func=cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    from ledgercheck.chaos.crash.commands import _spec
    from ledgercheck.chaos.crash.points import ChaosError

    try:
        spec = _spec(args.spec) if args.spec else None
        history = load_history(args.file)
    except (HistoryError, ChaosError) as exc:
        print(shown_line(f"ledgercheck history: {exc}"), file=sys.stderr)
        return 2
    try:
        verdict = check(history, spec)
    except HistoryError as exc:  # an identifier no ledger hands out (a list, an object)
        print(shown_line(f"ledgercheck history: {exc}"), file=sys.stderr)
        return 2
    from .crossitem import check_cross, cross_coverage
    from .linearize import BUDGET, check_linearizable

    budget = args.budget if args.budget is not None else BUDGET
    if budget < 1:
        print(shown_line(f"ledgercheck history: --budget must be at least 1, not {budget}"), file=sys.stderr)
        return 2
    if args.explain is not None:
        return explain(history, args.explain, spec, budget)
    if args.classes_only:
        lin = None
    else:
        lin = check_linearizable(history, spec, budget=budget)
        lin.cross = check_cross(history, spec)
        lin.cross_coverage, lin.cross_missing = cross_coverage(history, spec)
    final = combined_verdict(verdict, lin) if lin is not None else verdict.verdict
    if getattr(args, "html", None) or getattr(args, "item", None) or getattr(args, "whole", False) \
            or getattr(args, "linearizability", None):
        problem = write_timelines(args, history, verdict,
                                  lin.to_json() if lin is not None and not args.linearizability else None)
        if problem:
            print(shown_line(f"ledgercheck history: {problem}"), file=sys.stderr)
            return 2
    if args.json:
        out = {"file": args.file, "adapter": history.meta.adapter, "declared": history.meta.declared,
               **verdict.to_json()}
        if lin is not None:
            out["verdict"] = final
            out["ok"] = final != "anomalies"
            out["missing"] = list(verdict.missing) + unchecked_missing(lin)
            out["linearizability"] = lin.to_json()
        print(json.dumps(out, indent=2, default=str))
    else:
        text = render(history, verdict, max_excerpts=args.max_excerpts, lin=lin)
        print(shown(text, max_lines=None))  # a history holds adapter text
    return EXIT[final]


def combined_verdict(verdict: Verdict, lin: Any) -> str:
    """The class rules' verdict joined with the linearizability and cross-item checks: any
    violation or cross-item finding is an anomaly; an item whose search passed its budget hides
    whether it is one, so with no anomaly the verdict is INCONCLUSIVE."""
    if verdict.anomalies or lin.violations or lin.cross:
        return "anomalies"
    if verdict.missing or lin.unchecked or lin.cross_missing:
        return "inconclusive"
    return "no anomaly"


def unchecked_missing(lin: Any) -> list[str]:
    """The lines of what the linearizability and cross-item checks could not judge."""
    out = list(getattr(lin, "cross_missing", []))
    if not lin.unchecked:
        return out
    first = lin.unchecked[0]
    return [f"{_items(len(lin.unchecked))} not checked for linearizability (first {first}: {lin.items[first].reason})", *out]


def _op_records(history: History) -> dict[int, list[Record]]:
    rows = history.op_rows()
    out: dict[int, list[Record]] = {}
    for i in rows.invokes:
        rec = history.record(i)
        out[rec.id] = [rec]  # type: ignore[union-attr]
        c = rows.completes.get(rec.id)  # type: ignore[union-attr]
        if c is not None:
            out[rec.id].append(history.record(c))  # type: ignore[union-attr]
    return out


def _op_lines(history: History, ids: list[int], recs: dict[int, list[Record]]) -> list[str]:
    out = []
    for i in ids:
        if i in recs:
            out.extend(describe(r) for r in recs[i])
        elif history.final is not None:
            out.append(describe(history.final))
    return out


def render_linearizability(history: History, lin: Any, *, max_excerpts: int = 3) -> list[str]:
    st = lin.stats()
    lines = ["", f"linearizability: {st['items']} items searched against the contract model: {st['linearizable']} "
                 f"linearizable, {st['violations']} violations, {st['unchecked']} unchecked "
                 f"({st['states_explored']} model states, at most {st['max_states_item']} for one item)"]
    recs = _op_records(history) if lin.violations or lin.cross else {}
    for wid in lin.violations[:max_excerpts]:
        r = lin.items[wid]
        at = "the final read" if r.at == -1 else f"#{r.at}"
        lines.append(f"not_linearizable {wid}: no order of its operations explains {at}; the model says: {r.expected}")
        lines.extend(f"  {x}" for x in _op_lines(history, [i for i in r.excerpt if i != -1] + ([-1] if -1 in r.excerpt else []), recs))
    if len(lin.violations) > max_excerpts:
        lines.append(f"  ... {len(lin.violations) - max_excerpts} more not_linearizable (--json lists them all)")
    for c in lin.cross[:max_excerpts]:
        lines.append(f"{c['rule']}: {c['text']}")
        lines.extend(f"  {x}" for x in _op_lines(history, c["ops"], recs))
    if len(lin.cross) > max_excerpts:
        lines.append(f"  ... {len(lin.cross) - max_excerpts} more cross-item findings (--json lists them all)")
    for wid in lin.unchecked[:max_excerpts]:
        lines.append(f"unchecked {wid}: {lin.items[wid].reason}")
    reached = {k: v for k, v in getattr(lin, "cross_coverage", {}).items() if v}
    if reached:
        lines.append("cross-item coverage: " + ", ".join(f"{k} {v}" for k, v in reached.items()))
    return lines


def explain(history: History, wid: str, spec: Any, budget: int) -> int:
    """``--explain ITEM``: the item's operations as the search sees them and its result."""
    from ledgercheck.spec import default_spec

    from .linearize import check_item, item_ops

    sp = spec if spec is not None else default_spec()
    ops = item_ops(history, wid, sp)
    if not ops:
        print(shown_line(f"ledgercheck history: {history.path}: no operation of the history touches item {wid!r}"), file=sys.stderr)
        return 2
    wall = (history.meta.adapter or {}).get("clock", "injected") != "injected"
    res = check_item(sp, wid, ops, wall=wall, budget=budget)
    recs = _op_records(history)
    lines = [f"item {wid}: {len(ops)} operations ({sum(o.optional for o in ops)} indefinite: may or may not have happened)"]
    for o in ops:
        tag = {"read": "  (its part of a listing)", "adopt": "  (taken as the item's state: a write on several items)",
               "final": "  (the final read)"}.get(o.kind, "")
        lines.extend(f"  {x}{tag}" for x in _op_lines(history, [o.id], recs))
    if res.result == "linearizable":
        lines.append(f"linearizable: {' -> '.join('final' if i == -1 else f'#{i}' for i in res.order)} ({res.states} model states)")
    elif res.result == "violation":
        at = "the final read" if res.at == -1 else f"#{res.at}"
        lines.append(f"NOT linearizable: every order fails at {at}; the model says: {res.expected}")
        lines.append("shortest excerpt:")
        lines.extend(f"  {x}" for x in _op_lines(history, res.excerpt, recs))
    else:
        lines.append(f"unchecked: {res.reason}")
    print(shown("\n".join(lines), max_lines=None))
    return 1 if res.result == "violation" else (2 if res.result == "unchecked" else 0)


def write_timelines(args: argparse.Namespace, history: History, verdict: Verdict,
                    lin: Mapping[str, Any] | None = None) -> str | None:
    """``--html OUT``: the timelines page (reports/timeline.py) of each failing item, the items asked
    for (``--item``) and, with ``--whole``, the whole history.  ``lin``: the per-item linearizability
    result, else the one ``--linearizability FILE`` holds.  Returns a one-line problem, or None."""
    from ledgercheck.reports.results import atomic_write
    from ledgercheck.reports.timeline import TimelineError, render_page

    if not args.html:
        return "--item, --whole and --linearizability go with --html OUT"
    if lin is None and args.linearizability:
        try:
            with open(args.linearizability, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as exc:
            return f"{args.linearizability}: cannot read a linearizability result ({exc})"
        lin = doc.get("linearizability", doc) if isinstance(doc, dict) else None
        if not isinstance(lin, dict) or not isinstance(lin.get("items"), dict):
            return f"{args.linearizability}: not a linearizability result (no \"items\" object)"
    try:
        page = render_page(history, verdict, lin, items=args.item, whole=args.whole, verdict_text=verdict_line(verdict))
        atomic_write(Path(args.html), page.encode("utf-8"))
    except TimelineError as exc:
        return f"{history.path}: {exc}"
    except OSError as exc:
        return f"{args.html}: cannot write: {exc.strerror or exc}"
    print(f"timelines: {args.html}", file=sys.stderr)
    return None


EXIT = {"no anomaly": 0, "anomalies": 1, "inconclusive": 2}


# ---------------------------------------------------------------------------------- rendering
def render(history: History, verdict: Verdict, *, max_excerpts: int = 3, lin: Any = None) -> str:
    meta = history.meta
    name = meta.adapter.get("name") or meta.adapter.get("address") or "?"
    c = verdict.counts
    lines = [f"history {history.path}: {c.get('operations', 0)} operations on {_items(c.get('items', 0))}, "
             f"adapter {name} (delivery {meta.delivery}, reclaim {meta.reclaim}, ttl {meta.ttl:g}s, "
             f"grace {meta.grace:g}s)"]
    groups = verdict.by_class()
    if groups:
        width = max(len(k) for k in groups)
        lines.append("")
        lines.append(f"  {'anomaly':<{width}}  count  first item")
        for kind, items in groups.items():
            lines.append(f"  {kind:<{width}}  {len(items):>5}  {items[0].work_id}")
        for kind, items in groups.items():
            for a in items[:max_excerpts]:
                lines.append("")
                lines.extend(render_anomaly(a))
            if len(items) > max_excerpts:
                lines.append(f"  ... {len(items) - max_excerpts} more {kind} (--json lists them all)")
    if verdict.observations:
        lines.append("")
        lines.append("observations:")
        lines.extend(f"  - {o}" for o in verdict.observations)
    if verdict.coverage:
        lines.append("")
        lines.append("exercised:")
        lines.extend(f"  {x}" for x in exercised(verdict.coverage, c))
    if lin is not None:
        lines.extend(render_linearizability(history, lin, max_excerpts=max_excerpts))
    lines.append("")
    lines.append(verdict_line(verdict, lin))
    return "\n".join(lines)


def verdict_line(verdict: Verdict, lin: Any = None) -> str:
    """``verdict: N anomalies`` (and what was not reached, if anything), ``verdict: INCONCLUSIVE:
    <what was not reached>``, or ``verdict: no anomaly``.  With ``lin`` (the linearizability and
    cross-item results), their violations count as anomalies and unchecked items as not reached."""
    n = len(verdict.anomalies) + (len(lin.violations) + len(lin.cross) if lin is not None else 0)
    missing = list(verdict.missing) + (unchecked_missing(lin) if lin is not None else [])
    if n:
        line = f"verdict: {n} anomal{'y' if n == 1 else 'ies'}"
        return line + (f" (not reached: {'; '.join(missing)})" if missing else "")
    if missing:
        return f"verdict: INCONCLUSIVE: {'; '.join(missing)}"
    return "verdict: no anomaly"


def exercised(cov: Mapping[str, int], counts: Mapping[str, int]) -> list[str]:
    """The coverage in three short lines: the work done, the faults, the takeovers."""
    def n(k: str) -> int:
        return int(cov.get(k, 0))

    items = counts.get("items", 0)
    final = "final read present" if n("final_read") else "NO final read"
    points = {k.partition(":")[2]: v for k, v in cov.items() if k.startswith("kill_at:")}
    at = f" ({sum(points.values())} at named points: {', '.join(f'{p} {k}' for p, k in points.items())})" if points else ""
    k = counts.get("takeovers_refused", 0)
    refused = f"; {_count(k, 'takeover')} refused by the ledger (the item handed to nobody)" if k else ""
    return [
        f"work: {_count(n('claim_ok'), 'claim')} ok, {_count(n('close_out_ok'), 'close-out')} ok, "
        f"{n('finished')} of {_items(items)} finished; {final}",
        f"faults: {_count(n('kill'), 'kill')}{at}, {_count(n('pause'), 'pause')}, {_count(n('reopen'), 'reopen')}; "
        f"{_count(n('effect_then_kill'), 'effect')} then killed before the close-out",
        f"takeovers: {_count(n('holder_displaced'), 'live holder')} displaced (time {n('displaced_by_time')}, "
        f"operator {n('displaced_by_operator')}, reopen {n('displaced_by_reopen')}), "
        f"{_count(n('late_write_after_takeover'), 'late write')} with the old token after a takeover{refused}",
    ]


def _count(k: int, word: str) -> str:
    return f"{k} {word}{'' if k == 1 else 's'}"


def render_anomaly(a: Anomaly) -> list[str]:
    out = [f"{a.kind} {a.work_id}: {a.explanation}"]
    cause = {id(r) for r in a.cause}
    out.extend(f"  {describe(r)}{'  <- cause' if id(r) in cause else ''}" for r in a.excerpt)
    if a.context:
        out.append("  context (not needed for the proof):")
        out.extend(f"    {describe(r)}" for r in a.context)
    return out


def describe(rec: Record) -> str:
    """One compact line for a record: where it is, when, and what it says."""
    where = f"L{rec.line:<6}" if rec.line else "       "
    kind = rec.type
    if kind == "invoke":
        args = {k: v for k, v in rec.args.items() if k != "now"}  # type: ignore[union-attr]
        now = "" if rec.now is None else f" now={fmt_num(rec.now)}"  # type: ignore[union-attr]
        return f"{where} t={rec.t:<10.4f} {rec.process:>8} invoke   #{rec.id} {rec.op} {_short(args)}{now}"  # type: ignore[union-attr]
    if kind == "complete":
        r = rec.result if rec.outcome == "ok" else rec.error  # type: ignore[union-attr]
        return (f"{where} t={rec.t:<10.4f} {rec.process:>8} complete #{rec.id} {rec.op} "  # type: ignore[union-attr]
                f"{rec.outcome}: {_work(r) if rec.outcome == 'ok' else _short(r)}")  # type: ignore[union-attr]
    if kind == "effect":
        return (f"{where} t={rec.t:<10.4f} {rec.process:>8} effect   {rec.work_id} key={rec.key[:24]} "  # type: ignore[union-attr]
                f"{'applied' if rec.applied else 'deduplicated'}")  # type: ignore[union-attr]
    if kind == "nemesis":
        return f"{where} t={rec.t:<10.4f} {'nemesis':>8} {rec.fault} {rec.process or ''}"  # type: ignore[union-attr]
    if kind == "final":
        items = rec.items  # type: ignore[union-attr]
        rec_ = {k: v for k, v in rec.recovery.items() if v not in (None, [], {})}  # type: ignore[union-attr]
        shown = "; ".join(f"{wid}: {_work(w)}" for wid, w in items.items()) or "the item is absent"
        return f"{where} t={rec.t:<10.4f} {'final':>8} {shown}  recovery {_short(rec_)}"  # type: ignore[union-attr]
    return f"{where} {kind}"


def _items(n: int) -> str:
    return f"{n} item{'' if n == 1 else 's'}"


_WORK_FIELDS = ("status", "owner", "lease_version", "lease_expires_at", "lease_token", "next_retry_at", "waiting_deadline",
                "finished_at", "result")


def _work(r: Any) -> str:
    """A work snapshot in a few fields (or a create result, a move list, null)."""
    if isinstance(r, Mapping) and "work" in r and isinstance(r["work"], Mapping):
        r = r["work"]
    if isinstance(r, Mapping) and "status" in r:
        parts = [f"{k}={_short(r[k], 24)}" for k in _WORK_FIELDS if r.get(k) is not None]
        return f"{r.get('work_id', '?')} " + " ".join(parts)
    return _short(r)


def _short(v: Any, limit: int = 80) -> str:
    s = v if isinstance(v, str) else json.dumps(v, default=str, separators=(",", ":"))
    return s if len(s) <= limit else s[: limit - 3] + "..."
