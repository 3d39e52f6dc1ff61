"""`ledgercheck spec ...`: validate, show and draw the contract."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .contract import Spec
from .load import DEFAULT_MANIFEST, SpecError, load_spec


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("spec", help="validate, show or draw the work-ledger contract")
    ssub = p.add_subparsers(dest="spec_cmd", required=True)
    v = ssub.add_parser("validate", help="check contract files; exit 1 with file:line:col lines on problems")
    v.add_argument("files", nargs="*", help="manifests or overlays (extends: default), each checked on its own; "
                                            "default: the shipped contract")
    v.add_argument("--json", action="store_true", help="print a JSON summary on stdout (problems still go to stderr)")
    v.set_defaults(func=cmd_validate)
    s = ssub.add_parser("show", help="print statuses, transitions, timings and clauses")
    s.add_argument("--spec", action="append", default=[], help="contract file (repeat for overlays)")
    s.add_argument("--format", choices=["text", "markdown", "json"], default="text",
                   help="text: everything, for people; markdown: the clause table; json: a summary")
    s.add_argument("--json", action="store_const", const="json", dest="format", help="same as --format json")
    s.set_defaults(func=cmd_show)
    g = ssub.add_parser("graph", help="print the state machine as a diagram")
    g.add_argument("--spec", action="append", default=[], help="contract file (repeat for overlays)")
    g.add_argument("--format", choices=["mermaid", "dot"], default="mermaid")
    g.set_defaults(func=cmd_graph)


def _load(files: list[str]) -> Spec | None:
    """The contract, or None after printing its problems to stderr."""
    try:
        return load_spec(files or None)
    except SpecError as exc:
        for p in exc.problems:
            print(p, file=sys.stderr)
        return None


def cmd_validate(args: argparse.Namespace) -> int:
    targets = args.files or [str(DEFAULT_MANIFEST)]
    failed = 0
    summary: list[dict[str, Any]] = []
    for f in targets:
        try:
            spec = load_spec([f])
        except SpecError as exc:
            failed += 1
            for p in exc.problems:
                print(p, file=sys.stderr)
            summary.append({"file": f, "ok": False, "problems": [{**p.as_dict(), "text": str(p)} for p in exc.problems]})
            continue
        summary.append({"file": f, "ok": True, "spec": spec.name, "version": spec.version,
                        "clauses": len(spec.clauses), "transitions": len(spec.transitions), "digest": spec.digest})
        if not args.json:
            print(f"ok: {f}: {spec.name} {spec.version}, {len(spec.clauses)} clauses, "
                  f"{len(spec.transitions)} transitions, sha256 {spec.digest[:16]}")
    if args.json:
        print(json.dumps(summary, indent=2))
    return 1 if failed else 0


def spec_summary(spec: Spec) -> dict[str, Any]:
    return {
        "spec": spec.name,
        "version": spec.version,
        "digest": spec.digest,
        "files": dict(spec.files),
        "statuses": {n: {"terminal": s.terminal, "initial": s.initial} for n, s in spec.statuses.items()},
        "transitions": [{"from": t.src, "to": t.dst, "ops": list(t.ops), "guard": t.guard, "requeue": t.requeue}
                        for t in spec.transitions],
        "lease": {"ttl": spec.lease_default.ttl, "renew_interval": spec.lease_default.renew_interval,
                  "grace": spec.lease_default.grace,
                  "by_source": {k: vars(v) for k, v in spec.lease_by_source.items()}},
        "waiting_timeouts": dict(spec.waiting_timeouts),
        "retry": spec.retry_default.as_dict(),
        "profiles": {n: list(p.requires) for n, p in spec.profiles.items()},
        "profile_sets": {n: list(s.profiles) for n, s in spec.profile_sets.items()},
        "clauses": [{"id": c.id, "level": c.level, "profile": c.profile, "source": c.source,
                     "statement": c.statement} for c in spec.clauses],
    }


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("\\", "\\\\").replace("|", "\\|")


def clause_table(spec: Spec) -> str:
    """Every clause as a Markdown table (docs/contract.md names this command rather than copy it)."""
    lines = ["| Clause | Level | Profile | Source | Statement |", "|---|---|---|---|---|"]
    for c in spec.clauses:
        lines.append(f"| `{c.id}` | {c.level} | {c.profile} | {_cell(c.source)} | {_cell(c.statement)} |")
    return "\n".join(lines)


def render_text(spec: Spec) -> str:
    out = [f"{spec.title}", f"{spec.name} {spec.version}  sha256 {spec.digest}", ""]
    names = list(spec.statuses)
    width = max(len(n) for n in names)
    out.append("Statuses (T = terminal) and transitions, by operation:")
    out.append(" " * (width + 3) + " ".join(f"{n[:4]:>4}" for n in names))
    for a in names:
        cells = [f"{'x' if spec.edge(a, b) else '.':>4}" for b in names]
        flag = "T" if spec.terminal(a) else " "
        out.append(f"{a:<{width}} {flag} " + " ".join(cells))
    out.append("")
    for t in spec.transitions:
        extra = f"  [guard: {t.guard}]" if t.guard else ("  [requeue]" if t.requeue else "")
        out.append(f"  {t.src:>16} -> {t.dst:<16} via {', '.join(t.ops)}{extra}")
    ld = spec.lease_default
    out += ["", f"Lease: ttl {ld.ttl:g}s, renew every {ld.renew_interval:g}s, grace {ld.grace:g}s"]
    for src, lt in spec.lease_by_source.items():
        out.append(f"  {src}: ttl {lt.ttl:g}s, renew every {lt.renew_interval:g}s, grace {lt.grace:g}s")
    out.append("Waiting budgets: " + ", ".join(f"{k} {v:g}s" for k, v in spec.waiting_timeouts.items()))
    rp = spec.retry_default
    out.append(f"Retry: {rp.max_attempts} attempts, {rp.initial_backoff:g}s x{rp.multiplier:g}, cap {rp.max_backoff:g}s, jitter {rp.jitter}")
    out += ["", "Profiles (requires):"]
    for n, p in spec.profiles.items():
        out.append(f"  {n:<11} {', '.join(p.requires) or '-'}")
    for n, s in spec.profile_sets.items():
        whole = "  (the whole contract)" if n == spec.whole_set else ""
        out.append(f"  set {n}: {', '.join(s.profiles)}{whole}")
    out += ["", f"Clauses ({len(spec.clauses)}):"]
    for c in spec.clauses:
        out.append(f"  {c.id:<34} {c.level:<6} {c.profile:<11} {c.statement}")
    return "\n".join(out)


def cmd_show(args: argparse.Namespace) -> int:
    spec = _load(args.spec)
    if spec is None:
        return 1
    if args.format == "json":
        print(json.dumps(spec_summary(spec), indent=2))
    elif args.format == "markdown":
        print(clause_table(spec))
    else:
        print(render_text(spec))
    return 0


def _dot_id(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_graph(spec: Spec, fmt: str = "mermaid") -> str:
    if fmt == "dot":
        lines = ["digraph ledger {", "  rankdir=LR;", '  node [shape=box, style=rounded, fontname="sans-serif"];']
        for n, s in spec.statuses.items():
            shape = ", peripheries=2" if s.terminal else ""
            lines.append(f"  {_dot_id(n)} [label={_dot_id(n)}{shape}];")
        lines.append(f"  __start [shape=point]; __start -> {_dot_id(spec.initial_status)};")
        for t in spec.transitions:
            label = ", ".join(t.ops) + (f" [{t.guard}]" if t.guard else "")
            style = ", style=dashed" if t.requeue else ""
            lines.append(f"  {_dot_id(t.src)} -> {_dot_id(t.dst)} [label={_dot_id(label)}{style}];")
        lines.append("}")
        return "\n".join(lines)
    lines = ["stateDiagram-v2", f"    [*] --> {spec.initial_status}"]
    for t in spec.transitions:
        label = ", ".join(t.ops) + (f" [{t.guard}]" if t.guard else "")
        lines.append(f"    {t.src} --> {t.dst} : {label}")
    for n, s in spec.statuses.items():
        if s.terminal:
            lines.append(f"    class {n} terminal")
    lines.append("    classDef terminal font-weight:bold")
    return "\n".join(lines)


def cmd_graph(args: argparse.Namespace) -> int:
    spec = _load(args.spec)
    if spec is None:
        return 1
    print(render_graph(spec, args.format))
    return 0
