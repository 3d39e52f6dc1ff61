"""``ledgercheck selfcheck``: list, serve and mutate."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .generate import generate, parse_mutant
from .report import campaign, figures_text, floors_hold, markdown
from .server import serve_mutant

# ---------------------------------------------------------------------------------------------
# Command line


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("selfcheck", help="mutation testing of the reference through the wire: does the harness catch it?")
    ps = p.add_subparsers(dest="selfcheck_command", required=True, metavar="WHAT")
    s = ps.add_parser("serve", help="serve the reference over the wire protocol with one mutant's rewrites")
    s.add_argument("--mutant", required=True, help="a mutant name (`ledgercheck selfcheck list`), none or observe")
    s.add_argument("--target", default="reference", help="an in-process adapter address (default: reference)")
    s.add_argument("--log", default=None, help="append a line here when the mutant first fires (observe: every site)")
    s.set_defaults(func=cmd_serve)
    ls = ps.add_parser("list", help="list the mutants the contract gives rise to")
    ls.set_defaults(func=cmd_list)
    m = ps.add_parser("mutate", help="judge mutants with the clause tests; print the figures (exit 1 below the floors)")
    m.add_argument("--mutant", action="append", default=None, help="judge only this mutant (repeatable)")
    m.add_argument("--jobs", type=int, default=1, help="mutants judged at once (processes)")
    m.add_argument("--exhaustive", action="store_true", help="run every clause test on every mutant (slow)")
    m.add_argument("--json", default=None, help="write the per-mutant table as JSON here")
    m.add_argument("--markdown", default=None, help="write the figures and the per-mutant table as Markdown here")
    m.add_argument("--resume", default=None, metavar="JSON",
                   help="keep the verdicts of mutants an earlier campaign (its --json) saw caught by an own clause")
    m.add_argument("--quiet", action="store_true", help="no progress lines")
    m.set_defaults(func=cmd_mutate)


def load_rows(path: str) -> dict[str, dict[str, Any]]:
    """The per-mutant rows of an earlier campaign's JSON, by mutant name (ValueError naming the
    file when it is not one)."""
    from ledgercheck.bounded import InputError, Limits, load_limited

    try:
        doc = load_limited(path, Limits("mutation campaign file", 64 << 20))
    except InputError as exc:
        raise ValueError(str(exc)) from None
    rows = doc.get("mutants") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and isinstance(r.get("mutant"), str) for r in rows):
        raise ValueError(f"{path}: not the JSON of `ledgercheck selfcheck mutate --json` (no list of mutants)")
    return {r["mutant"]: r for r in rows}


def cmd_serve(args: argparse.Namespace) -> int:
    from ledgercheck.spec import default_spec
    from ledgercheck.transport.client import AdapterError, load_inprocess, parse_address

    spec = default_spec()
    try:
        mutant = parse_mutant(spec, args.mutant)
    except ValueError as exc:
        print(f"ledgercheck selfcheck serve: {exc}", file=sys.stderr)
        return 2
    kind, target = parse_address(args.target)
    if kind == "exec":
        print("ledgercheck selfcheck serve: the target must be an in-process adapter (reference, python:MODULE:FACTORY)",
              file=sys.stderr)
        return 2
    try:
        adapter = load_inprocess(kind, target)
    except AdapterError as exc:
        print(f"ledgercheck selfcheck serve: {exc}", file=sys.stderr)
        return 2
    return serve_mutant(adapter, spec, mutant, sys.stdin.buffer, sys.stdout.buffer, args.log)


def cmd_list(args: argparse.Namespace) -> int:
    from ledgercheck.spec import default_spec

    for m in generate(default_spec()):
        print(f"{m.name}\t{'benign' if m.benign else 'own: ' + ','.join(m.own)}\t{m.what}\tclass: {m.klass}")
    return 0


def cmd_mutate(args: argparse.Namespace) -> int:
    from ledgercheck.spec import default_spec

    if args.jobs < 1:
        print("ledgercheck selfcheck mutate: --jobs must be 1 or more", file=sys.stderr)
        return 2
    spec = default_spec()
    say = None if args.quiet else (lambda s: print(s, flush=True))
    keep = None
    if args.resume:
        try:
            keep = load_rows(args.resume)
        except ValueError as exc:
            print(f"ledgercheck selfcheck mutate: {exc}", file=sys.stderr)
            return 2
    try:
        figs, rows = campaign(spec, names=args.mutant, jobs=args.jobs, exhaustive=args.exhaustive, progress=say, keep=keep)
    except ValueError as exc:
        print(f"ledgercheck selfcheck mutate: {exc}", file=sys.stderr)
        return 2
    try:
        if args.json:
            Path(args.json).write_text(json.dumps({"figures": asdict(figs), "mutants": rows}, indent=1) + "\n")
        if args.markdown:
            Path(args.markdown).write_text(markdown(figs, rows))
    except OSError as exc:
        print(f"ledgercheck selfcheck mutate: cannot write: {exc}", file=sys.stderr)
        return 2
    print(figures_text(figs))
    return 0 if floors_hold(figs) else 1
