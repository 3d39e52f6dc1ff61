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
    r.set_defaults(func=cmd_render)
    m = rsub.add_parser("merge", help="merge results of shards or runs of one adapter and contract")
    m.add_argument("parts", nargs="+", help="results.json files to merge")
    m.add_argument("-o", "--output", required=True, help="where to write the merged results.json")
    m.set_defaults(func=cmd_merge)
    s = rsub.add_parser("show", help="print a summary of a results.json")
    s.add_argument("results")
    s.add_argument("--json", action="store_true", help="print the summary as JSON")
    s.add_argument("--exit-code", action="store_true",
                   help="exit with the verdict's code (0 certified, 1 not certified, 2 error)")
    s.set_defaults(func=cmd_show)


def _fail(exc: Exception) -> int:
    print(f"ledgercheck report: {exc}", file=sys.stderr)
    return 2


def cmd_render(args: argparse.Namespace) -> int:
    from .render import render_formats

    try:
        loaded = read_results(args.results)
        out = Path(args.out) if args.out else Path(args.results).resolve().parent
        written = render_formats(loaded.doc, out, args.format, loaded.sha256)
    except (ResultsError, OSError) as exc:
        return _fail(exc)
    for path in written.values():
        print(path)
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    try:
        docs = [read_results(p).doc for p in args.parts]
        merged = merge_results(docs)
        sha = write_results(merged, args.output)
    except (ResultsError, OSError) as exc:
        return _fail(exc)
    print(f"{args.output}: {verdict_line(merged)} (sha256 {sha})")
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
