"""Language-neutral operation traces: save a failing program, replay it on any adapter.

A trace is JSON::

    {"format": "ledgercheck-trace", "version": 2, "spec": {"name", "version", "digest"},
     "adapter": "<address it failed on>", "profiles": [...], "violations": [{"clause", "message"}],
     "seed": <the reset config's seed the run sent>, "epoch": <the clock at the reset>,
     "steps": [{"op": "create", "args": {...}, "outcome": {"ok": true, "result": "object"}}, ...]}

Arguments that name things the implementation chose are symbolic: ``{"$item": i}`` is the i-th
work item created in the run, ``{"$token": [i, k]}`` the k-th lease token issued for item i,
``{"$key": [i, step_id, tool]}`` the effect key of that step of item i, and ``{"$t": s}`` the
instant ``s`` seconds after the run's start, stored exactly (``"$at"``, the absolute instant,
joins it where epoch + s would not give the instant back exactly; see Harness.time_ref).
Replaying resolves them through the model as it goes, so the same program runs against any
adapter, with no hypothesis involved; it sends the recorded ``seed`` in its reset, and compares
every answer with the recorded ``outcome`` (accepted or refused with a code, and the result's
shape) to say where a replay that cannot go on left the recorded run.

Version 1 traces (times rounded to 6 decimals, no seed, no outcomes) are still read; their
seed is 0, which is what runs of that time sent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ledgercheck.spec import Spec

from .harness import AdapterFailure, ClauseFailure, Harness, NotApplicable, outcome_summary
from .model import Violation

FORMAT = "ledgercheck-trace"
VERSION = 2
READS = (1, 2)  # trace versions this ledgercheck replays


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
        "seed": h.sent_seed,
        "epoch": h.epoch,
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
    if doc.get("version") not in READS:
        raise TraceError(f"{p}: trace version {doc.get('version')!r}, this ledgercheck reads "
                         f"{', '.join(map(str, READS))}")
    seed = doc.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TraceError(f"{p}: seed must be an integer, not {seed!r}")
    steps = doc.get("steps")
    if not isinstance(steps, list) or not all(isinstance(s, dict) and isinstance(s.get("op"), str) and isinstance(s.get("args"), dict) for s in steps):
        raise TraceError(f"{p}: steps must be a list of {{op, args}} objects")
    return doc


def resolve(h: Harness, args: dict[str, Any], where: str, epoch: float | None = None,
            diverged: str | None = None) -> dict[str, Any]:
    """Symbolic arguments made concrete.  ``epoch`` is the recorded run's (an exact ``"$at"``
    instant is used when the replay's epoch is the same); ``diverged`` describes the first step
    whose answer differed from the recorded one, for the message when a reference dangles."""
    m = h.model
    by_index = {i: wid for wid, i in m.order.items()}
    why = (f"; the replay left the recorded run earlier: {diverged}" if diverged else
           "; the recorded run had it by this step, so an earlier operation must have answered differently "
           "than it did then (the trace records no answers to compare: an old trace?)")
    out: dict[str, Any] = {}
    for k, v in args.items():
        if isinstance(v, dict) and set(v) in ({"$t"}, {"$t", "$at"}):
            if "$at" in v and epoch is not None and epoch == h.epoch:
                out[k] = float(v["$at"])
            else:
                out[k] = h.epoch + float(v["$t"])
            continue
        if isinstance(v, dict) and len(v) == 1:
            (tag, ref), = v.items()
            if tag == "$item":
                if ref not in by_index:
                    raise TraceError(f"{where}: refers to item {ref}, but only {len(by_index)} exist{why}")
                out[k] = by_index[ref]
                continue
            if tag == "$token":
                i, n = ref
                toks = m.tokens.get(by_index.get(i, ""), [])
                if n >= len(toks):
                    raise TraceError(f"{where}: refers to token {n} of item {i}, which was never issued on replay "
                                     f"({len(toks)} issued){why}")
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
    h.fresh(seed=doc.get("seed", 0))
    epoch = doc.get("epoch")
    epoch = float(epoch) if isinstance(epoch, int | float) and not isinstance(epoch, bool) else None
    diverged: str | None = None
    for i, step in enumerate(doc["steps"]):
        where = f"{source}: step {i + 1} ({step['op']})"
        if step["op"] not in h.spec.operations:
            raise TraceError(f"{where}: unknown operation")
        args = resolve(h, step["args"], where, epoch, diverged)
        if args.get("now") is not None and args["now"] > h.now():
            h.advance_to(args["now"])
        try:
            out = h.do(step["op"], **args)
        except ClauseFailure as exc:
            return exc.violations
        except NotApplicable as exc:
            raise TraceError(f"{where}: {exc}") from None
        want = step.get("outcome")
        got = outcome_summary(out)
        if diverged is None and isinstance(want, dict) and want != got:
            diverged = (f"step {i + 1} ({step['op']}) answered {_said(got)} on replay, {_said(want)} when recorded "
                        f"(the adapter chose differently, e.g. a random draw not seeded from the reset's seed, or the "
                        f"time of a step is not the recorded one)")
    try:
        h.verify_all()
    except ClauseFailure as exc:
        return exc.violations
    return []


def _said(o: dict[str, Any]) -> str:
    return f"ok ({o.get('result')})" if o.get("ok") else f"refused ({o.get('code')})"


def check_spec(doc: dict[str, Any], spec: Spec, source: str) -> str | None:
    """A warning when the trace was recorded against another contract."""
    digest = (doc.get("spec") or {}).get("digest")
    if digest and digest != spec.digest:
        return f"{source}: recorded against contract {digest[:12]}, replaying against {spec.digest[:12]}"
    return None


__all__ = ["AdapterFailure", "TraceError", "dump_trace", "load_trace", "replay", "resolve"]
