"""Language-neutral operation traces: save a failing program, replay it on any adapter.

A trace is JSON::

    {"format": "ledgercheck-trace", "version": 1, "spec": {"name", "version", "digest"},
     "adapter": "<address it failed on>", "profiles": [...], "violations": [{"clause", "message"}],
     "steps": [{"op": "create", "args": {...}}, ...]}

Arguments that name things the implementation chose are symbolic: ``{"$item": i}`` is the i-th
work item created in the run, ``{"$token": [i, k]}`` the k-th lease token issued for item i,
``{"$key": [i, step_id, tool]}`` the effect key of that step of item i, and ``{"$t": s}`` the
instant ``s`` seconds after the run's start.  Replaying resolves them through the model as it
goes, so the same program runs against any adapter, with no hypothesis involved.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ledgercheck.spec import Spec

from .harness import AdapterFailure, ClauseFailure, Harness, NotApplicable
from .model import Violation

FORMAT = "ledgercheck-trace"
VERSION = 1


class TraceError(Exception):
    """A trace file is unreadable or malformed; the message names the file."""


def dump_trace(h: Harness, path: str | Path, violations: list[Violation], adapter: str) -> Path:
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "spec": {"name": h.spec.name, "version": h.spec.version, "digest": h.spec.digest},
        "adapter": adapter,
        "profiles": sorted(h.profiles),
        "violations": [{"clause": v.clause, "message": v.message, "op": v.op} for v in violations],
        "steps": h.trace,
    }
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    return p


def load_trace(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TraceError(f"{p}: no such trace file") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise TraceError(f"{p}: not a JSON trace ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise TraceError(f"{p}: not a ledgercheck trace (format must be {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise TraceError(f"{p}: trace version {doc.get('version')!r}, this ledgercheck reads {VERSION}")
    steps = doc.get("steps")
    if not isinstance(steps, list) or not all(isinstance(s, dict) and isinstance(s.get("op"), str) and isinstance(s.get("args"), dict) for s in steps):
        raise TraceError(f"{p}: steps must be a list of {{op, args}} objects")
    return doc


def resolve(h: Harness, args: dict[str, Any], where: str) -> dict[str, Any]:
    m = h.model
    by_index = {i: wid for wid, i in m.order.items()}
    out: dict[str, Any] = {}
    for k, v in args.items():
        if isinstance(v, dict) and len(v) == 1:
            (tag, ref), = v.items()
            if tag == "$t":
                out[k] = h.epoch + float(ref)
                continue
            if tag == "$item":
                if ref not in by_index:
                    raise TraceError(f"{where}: refers to item {ref}, but only {len(by_index)} exist")
                out[k] = by_index[ref]
                continue
            if tag == "$token":
                i, n = ref
                toks = m.tokens.get(by_index.get(i, ""), [])
                if n >= len(toks):
                    raise TraceError(f"{where}: refers to token {n} of item {i}, which was never issued")
                out[k] = toks[n]
                continue
            if tag == "$key":
                i, step_id, tool = ref
                out[k] = h.spec.effect_key(work_id=by_index.get(i, f"missing-{i}"), step_id=step_id, tool=tool)
                continue
        out[k] = v
    return out


def replay(h: Harness, doc: dict[str, Any], source: str = "trace") -> list[Violation]:
    """Run a trace's steps on a fresh ledger; return the violations found (empty when it passes).

    Adapter failures propagate as AdapterFailure.
    """
    h.fresh()
    for i, step in enumerate(doc["steps"]):
        where = f"{source}: step {i + 1} ({step['op']})"
        if step["op"] not in h.spec.operations:
            raise TraceError(f"{where}: unknown operation")
        args = resolve(h, step["args"], where)
        if args.get("now") is not None and args["now"] > h.now():
            h.advance_to(args["now"])
        try:
            h.do(step["op"], **args)
        except ClauseFailure as exc:
            return exc.violations
        except NotApplicable as exc:
            raise TraceError(f"{where}: {exc}") from None
    try:
        h.verify_all()
    except ClauseFailure as exc:
        return exc.violations
    return []


def check_spec(doc: dict[str, Any], spec: Spec, source: str) -> str | None:
    """A warning when the trace was recorded against another contract."""
    digest = (doc.get("spec") or {}).get("digest")
    if digest and digest != spec.digest:
        return f"{source}: recorded against contract {digest[:12]}, replaying against {spec.digest[:12]}"
    return None


__all__ = ["AdapterFailure", "TraceError", "dump_trace", "load_trace", "replay", "resolve"]
