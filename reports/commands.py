"""`ledgercheck report ...`: re-render, merge and show results files."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .results import ResultsError, merge_results, read_results, write_results
from .summary import verdict_line
from .terminal import summary_json, summary_text

FORMAT_NAMES = ("html", "md", "junit")


def _formats(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n not in FORMAT_NAMES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown format(s) {', '.join(bad) or '(none)'}; choose from {', '.join(FORMAT_NAMES)}")
    return list(dict.fromkeys(names))


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="render, merge or show results files")
    rsub = p.add_subparsers(dest="report_cmd", required=True, metavar="ACTION")
    r = rsub.add_parser("render", help="write report.html, summary.md and junit.xml from a results.json")
    r.add_argument("results", help="a results.json written by ledgercheck")
    r.add_argument("--out", help="output directory (default: the directory of RESULTS)")
    r.add_argument("--format", type=_formats, default=list(FORMAT_NAMES), metavar="html,md,junit",
                   help="comma-separated formats to write (default: all)")
    r.add_argument("--history", default=None, metavar="PATH",
                   help="show what changed since the adapter's previous run recorded in this history")
    r.set_defaults(func=cmd_render)
    m = rsub.add_parser("merge", help="merge results of shards or runs of one adapter and contract")
    m.add_argument("parts", nargs="+", help="results.json files to merge")
    m.add_argument("-o", "--output", required=True, help="where to write the merged results.json")
    add_history_options(m)
    m.set_defaults(func=cmd_merge)
    s = rsub.add_parser("show", help="print a summary of a results.json")
    s.add_argument("results")
    s.add_argument("--json", action="store_true", help="print the summary as JSON")
    s.add_argument("--exit-code", action="store_true",
                   help="exit with the verdict's code (0 certified, 1 not certified, 2 error)")
    s.set_defaults(func=cmd_show)
    hi = rsub.add_parser("history", help="results over time: trend, regressions and fixes, flaky clauses")
    hi.add_argument("--history", default=None, metavar="PATH",
                    help="the history file (default reports/out/history.db)")
    hi.add_argument("--adapter", default=None, metavar="NAME", help="only this adapter")
    hi.add_argument("--limit", type=int, default=20, metavar="N", help="runs shown per adapter (default 20)")
    hi.add_argument("--json", action="store_true", help="print as JSON (reports/schema/history.schema.json)")
    hi.set_defaults(func=cmd_history)


def add_history_options(p: argparse.ArgumentParser) -> None:
    """--history PATH / --no-history, shared by certify and report merge."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--history", default=None, metavar="PATH",
                   help="append the run to this SQLite history (default: history.db beside the reports; "
                        "reports/out/history.db for reports under reports/out)")
    g.add_argument("--no-history", action="store_true", help="do not record the run in a history")


def history_path(args: argparse.Namespace, report_dir: Path) -> Path | None:
    """The history a run is recorded in, from --history/--no-history; None: not recorded."""
    from .history import beside

    if args.no_history:
        return None
    return Path(args.history) if args.history else beside(report_dir)


def _fail(exc: Exception) -> int:
    print(f"ledgercheck report: {exc}", file=sys.stderr)
    return 2


def cmd_render(args: argparse.Namespace) -> int:
    from .history import HistoryError, open_history, since_previous
    from .render import render_formats

    try:
        loaded = read_results(args.results)
        since = None
        if args.history:
            history = open_history(args.history, create=False)
            try:
                since = since_previous(history, loaded.doc)
            finally:
                history.close()
        out = Path(args.out) if args.out else Path(args.results).resolve().parent
        written = render_formats(loaded.doc, out, args.format, loaded.sha256, since=since)
    except (ResultsError, HistoryError, OSError) as exc:
        return _fail(exc)
    for path in written.values():
        print(path)
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from .history import record_run

    try:
        docs = [read_results(p).doc for p in args.parts]
        merged = merge_results(docs)
        written: dict[str, str] = {}

        def write(since: object) -> dict[str, str]:
            written["sha"] = write_results(merged, args.output)
            return {"results": str(args.output)}

        _, problem = record_run(history_path(args, Path(args.output).resolve().parent), merged, write)
    except (ResultsError, OSError) as exc:
        return _fail(exc)
    print(f"{args.output}: {verdict_line(merged)} (sha256 {written['sha']})")
    if problem:
        print(f"ledgercheck report merge: the run is not recorded in the history: {problem}", file=sys.stderr)
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    from .history import DEFAULT_PATH, HistoryError, open_history, summary, summary_text

    if args.limit < 1:
        return _fail(ValueError(f"--limit must be at least 1, not {args.limit}"))
    try:
        history = open_history(args.history or DEFAULT_PATH, create=False)
        try:
            doc = summary(history, args.adapter, limit=args.limit)
        finally:
            history.close()
    except HistoryError as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps(doc, indent=2, ensure_ascii=False))
    else:
        print(summary_text(doc))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    try:
        loaded = read_results(args.results)
    except ResultsError as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps(summary_json(loaded.doc, loaded.path, loaded.sha256), indent=2, ensure_ascii=False))
    else:
        print(summary_text(loaded.doc, loaded.path, loaded.sha256))
    return int(loaded.doc["exit_code"]) if args.exit_code else 0
