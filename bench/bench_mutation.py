"""The mutation self-check as a figure: what fraction of the reference's generated mutants the
clause tests catch, how many by their own clause, and that no benign one is flagged.

Mutants are generated from the contract (conformance/mutation/, docs/selfcheck.md) and served
through the wire around the reference; the baseline is the control run in the same campaign
(the unmutated reference through the observing proxy), which must pass every clause test.

Floors: >= 95% of the non-benign mutants that fire are caught; >= 90% of those caught are caught
by (a failure naming) one of their own clauses; 0 benign mutants flagged.  Exit status 1 when a
floor is missed.

    python bench/bench_mutation.py --jobs 2                   # every mutant: tens of minutes
    python bench/bench_mutation.py --family timing --family skip_fence
    python bench/bench_mutation.py --profile lanes --profile spawn   # the operations of these profiles
    python bench/bench_mutation.py --json out/mutation.json --markdown out/mutation.md
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

from ledgercheck.conformance import mutation as M
from ledgercheck.spec import Spec, default_spec
from ledgercheck.transport.wire import result_types


def _own_shapes(spec: Spec, ops: set[str]) -> set[str]:
    """The result shapes only ``ops`` answer with (a lane lease, a wake run: not the work snapshot
    that spawn answers with too, whose dropped fields are core's mutants)."""
    types = result_types(spec)

    def within(names: Iterable[str]) -> set[str]:
        return {n for o in names for n, _ in M._shapes_within(types[spec.operations[o].returns], types, spec.operations[o].returns)}

    return within(ops) - within(set(spec.operations) - ops)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2, help="mutants judged at once (processes)")
    ap.add_argument("--family", action="append", default=None, help="only mutants of this family (repeatable)")
    ap.add_argument("--profile", action="append", default=None,
                    help="only mutants of the operations of this contract profile (repeatable)")
    ap.add_argument("--exhaustive", action="store_true", help="run every clause test on every mutant")
    ap.add_argument("--json", default=None, help="write the figures and the per-mutant rows here")
    ap.add_argument("--markdown", default=None, help="write the figures and the per-mutant table here")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        print("bench_mutation: --jobs must be 1 or more", file=sys.stderr)
        return 2
    spec = default_spec()
    names = None
    if args.family:
        known = {m.family for m in M.generate(spec)}
        unknown = sorted(set(args.family) - known)
        if unknown:
            print(f"bench_mutation: unknown family {', '.join(unknown)} (known: {', '.join(sorted(known))})", file=sys.stderr)
            return 2
        names = [m.name for m in M.generate(spec) if m.family in args.family]
    if args.profile:
        unknown = sorted(set(args.profile) - set(spec.profiles))
        if unknown:
            print(f"bench_mutation: unknown profile {', '.join(unknown)} (known: {', '.join(spec.profiles)})", file=sys.stderr)
            return 2
        ops = {o for o, d in spec.operations.items() if d.profile in args.profile}
        shapes = _own_shapes(spec, ops)
        # a mutant names its operation second (family:operation:...), a dropped field its result
        # shape (drop_field:shape:field); benign ones touch every operation
        names = [m.name for m in M.generate(spec) if (names is None or m.name in names)
                 and (m.benign or m.name.split(":")[1:2] and m.name.split(":")[1] in ops
                      or m.family == "drop_field" and m.params[0] in shapes)]
    t0 = time.monotonic()
    figs, rows = M.campaign(spec, names=names, jobs=args.jobs, exhaustive=args.exhaustive,
                            progress=None if args.quiet else (lambda s: print(s, flush=True)))
    wall = time.monotonic() - t0
    judged = [r for r in rows if r["exercised"]]
    per = sum(r["seconds"] for r in judged) / len(judged) if judged else 0.0
    print()
    print(M.figures_text(figs))
    print(f"judging: {len(judged)} mutants in {wall:.0f}s wall with {args.jobs} job(s), {per:.1f}s each on average")
    survivors = [r for r in rows if r["fired"] and not r["benign"] and not r["caught"]]
    elsewhere = [r for r in rows if r["fired"] and not r["benign"] and r["caught"] and not r["own_caught"]]
    flagged = [r for r in rows if r["fired"] and r["benign"] and r["caught"]]
    for title, group in (("survived", survivors), ("caught by another clause", elsewhere), ("benign but flagged", flagged)):
        if group:
            print(f"{title}:")
            for r in group:
                first = f" -> {', '.join(r['catches'][0]['clauses'])}" if r["catches"] else ""
                print(f"  {r['mutant']}{first}  (own: {', '.join(r['own']) or '-'})")
    if args.json:
        Path(args.json).write_text(json.dumps({"figures": asdict(figs), "mutants": rows}, indent=1) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(M.markdown(figs, rows))
    return 0 if M.floors_hold(figs) else 1


if __name__ == "__main__":
    sys.exit(main())
