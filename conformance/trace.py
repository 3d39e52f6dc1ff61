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
import math
import time
from pathlib import Path
from typing import Any

from ledgercheck.spec import Spec

from ledgercheck import bounded
from ledgercheck.bounded import TRACE, InputError, load_limited

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


MAX_STEPS = 10_000  # a recorded run has at most a few hundred (a stateful example: 100 steps)
MAX_SECONDS = 1e9  # how far from the run's start a "$t" instant may be (about 31 years)
HARNESS_OPS = ("hello", "reset")  # sent by the harness itself; a trace step may not name them


def load_trace(path: str | Path) -> dict[str, Any]:
    """Read and check a trace file (within the bounds in :data:`ledgercheck.bounded.TRACE`); any
    problem is a one-line TraceError naming the file (and the step)."""
    p = Path(path)
    try:
        doc = load_limited(p, TRACE)
    except InputError as exc:
        raise TraceError(str(exc)) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise TraceError(f"{p}: not a ledgercheck trace (format must be {FORMAT!r})")
    if doc.get("version") not in READS:
        raise TraceError(f"{p}: trace version {_brief(doc.get('version'))}, this ledgercheck reads "
                         f"{', '.join(map(str, READS))}")
    problem = _header_problem(doc)
    if problem:
        raise TraceError(f"{p}: {problem}")
    steps = doc.get("steps")
    if not isinstance(steps, list):
        raise TraceError(f"{p}: steps must be a list of {{op, args}} objects")
    if len(steps) > MAX_STEPS:
        raise TraceError(f"{p}: {len(steps):,} steps, more than {MAX_STEPS:,}, the limit for a trace")
    for i, step in enumerate(steps):
        problem = _step_problem(step)
        if problem:
            raise TraceError(f"{p}: step {i + 1}: {problem}")
    return doc


def _brief(value: Any, limit: int = 40) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_int(v: Any, lo: int, hi: int | None = None) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= lo and (hi is None or v <= hi)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _is_time(v: Any) -> bool:
    return _is_number(v) and abs(v) <= MAX_SECONDS


def _header_problem(doc: dict[str, Any]) -> str | None:
    seed = doc.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        return f"seed must be an integer, not {_brief(seed)}"
    if not _is_int(seed, 0, (1 << 32) - 1):
        return f"seed {_brief(seed)} is out of range (a reset's seed is in [0, 2**32))"
    epoch = doc.get("epoch")
    if epoch is not None and not _is_number(epoch):
        return f"epoch must be a number of seconds, not {_brief(epoch)}"
    adapter = doc.get("adapter")
    if adapter is not None and not isinstance(adapter, str):
        return f"adapter must be an adapter address, not {_brief(adapter)}"
    profiles = doc.get("profiles")
    if profiles is not None and not (isinstance(profiles, list) and all(isinstance(x, str) for x in profiles)):
        return "profiles must be a list of profile names"
    spec = doc.get("spec")
    if spec is not None and not (isinstance(spec, dict) and isinstance(spec.get("digest", ""), str | None)):
        return "spec must be an object with a digest string"
    return None


def _step_problem(step: Any) -> str | None:
    """What is wrong with one step's shape (the contract is checked by :func:`check_steps`)."""
    if not (isinstance(step, dict) and isinstance(step.get("op"), str) and isinstance(step.get("args"), dict)):
        return "not an {op, args} object"
    if step["op"] in HARNESS_OPS:
        return f"names {step['op']!r}, which the harness sends itself, not a step of a trace"
    outcome = step.get("outcome")
    if outcome is not None and not isinstance(outcome, dict):
        return "outcome must be an object"
    for name, v in step["args"].items():
        problem = _ref_problem(v)
        if problem:
            return f"argument {name!r}: {problem}"
    return None


def _ref_problem(v: Any) -> str | None:
    """What is wrong with a symbolic argument (``{"$item": ...}`` and the others), or None."""
    if not isinstance(v, dict):
        return None
    if set(v) in ({"$t"}, {"$t", "$at"}):
        if not _is_time(v["$t"]) or ("$at" in v and not _is_number(v["$at"])):
            return f"$t must be a number of seconds within {MAX_SECONDS:g} of the run's start, not {_brief(v)}"
        return None
    if len(v) != 1:
        return None
    (tag, ref), = v.items()
    if tag == "$item" and not _is_int(ref, 0):
        return f"$item must be the index of a work item (an integer >= 0), not {_brief(ref)}"
    if tag == "$token" and not (isinstance(ref, list) and len(ref) == 2 and _is_int(ref[0], 0) and _is_int(ref[1], 0)):
        return f"$token must be [item index, token index], two integers >= 0, not {_brief(ref)}"
    if tag == "$key" and not (isinstance(ref, list) and len(ref) == 3 and _is_int(ref[0], -1)
                              and isinstance(ref[1], str) and isinstance(ref[2], str)):
        return f"$key must be [item index, step id, tool], not {_brief(ref)}"
    return None


def check_steps(doc: dict[str, Any], spec: Spec, source: str) -> None:
    """Every step names an operation of ``spec`` and only arguments it declares (the harness sends
    no others): checked before an adapter is started."""
    for i, step in enumerate(doc["steps"]):
        op = spec.operations.get(step["op"])
        if op is None:
            raise TraceError(f"{source}: step {i + 1}: unknown operation {_brief(step['op'])} "
                             f"(the contract {spec.name} {spec.version} has no such operation)")
        unknown = [name for name in step["args"] if name not in op.args]
        if unknown:
            raise TraceError(f"{source}: step {i + 1} ({op.name}): {_brief(unknown[0])} is not an argument of "
                             f"{op.name} (it takes {', '.join(op.args) or 'none'})")


def adapter_to_run(recorded: Any, given: str | None, source: str) -> str:
    """The adapter a replay of this trace runs against (see :func:`ledgercheck.bounded.adapter_to_run`)."""
    try:
        return bounded.adapter_to_run(recorded, given, source)
    except InputError as exc:
        raise TraceError(str(exc)) from None


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


def replay(h: Harness, doc: dict[str, Any], source: str = "trace", time_limit: float | None = None) -> list[Violation]:
    """Run a trace's steps on a fresh ledger; return the violations found (empty when it passes).

    Adapter failures propagate as AdapterFailure.  A replay still running after ``time_limit``
    seconds stops with a TraceError (a trace of a few thousand steps can ask for work that grows
    with the square of its length: listing every item after each create).
    """
    deadline = None if time_limit is None else time.monotonic() + time_limit
    h.fresh(seed=doc.get("seed", 0))
    # an operation the implementation does not offer answers unsupported as it did in the run; the
    # replay goes on with that answer (a refusal with the wrong code of an offered one still fails)
    h.note_unoffered = True
    epoch = doc.get("epoch")
    epoch = float(epoch) if isinstance(epoch, int | float) and not isinstance(epoch, bool) else None
    diverged: str | None = None
    for i, step in enumerate(doc["steps"]):
        where = f"{source}: step {i + 1} ({step['op']})"
        if deadline is not None and time.monotonic() > deadline:
            raise TraceError(f"{where}: the replay ran past {time_limit:g}s, the limit for a replay (--time-limit)")
        if step["op"] not in h.spec.operations:
            raise TraceError(f"{where}: unknown operation")
        args = resolve(h, step["args"], where, epoch, diverged)
        if _is_number(args.get("now")) and args["now"] > h.now():  # a malformed one is the adapter's to refuse
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


__all__ = ["AdapterFailure", "TraceError", "adapter_to_run", "check_steps", "dump_trace", "load_trace", "replay", "resolve"]
