"""Language-neutral operation traces: save a failing program, replay it on any adapter.

A trace is JSON::

    {"format": "ledgercheck-trace", "version": 2, "spec": {"name", "version", "digest"},
     "adapter": "<address it failed on>", "profiles": [...], "violations": [{"clause", "message"}],
     "seed": <the reset config's seed the run sent>, "epoch": <the clock at the reset>,
     "steps": [{"op": "create", "args": {...}, "outcome": {"ok": true, "result": "object"}}, ...]}

Arguments that name things the implementation chose are symbolic: ``{"$item": i}`` is the i-th
work item created in the run, ``{"$token": [i, k]}`` the k-th lease token issued for item i,
``{"$key": [i, step_id, tool]}`` the effect key of that step of item i, ``{"$handout": k}`` the
k-th distinct token an answer handed out that is no work item's lease (a run's or a lane's
hand-out, counted in the order the answers first showed them; version 4), and ``{"$t": s}`` the
instant ``s`` seconds after the run's start, stored exactly (``"$at"``, the absolute instant,
joins it where epoch + s would not give the instant back exactly; see Harness.time_ref).
Replaying resolves them through the model as it goes, so the same program runs against any
adapter, with no hypothesis involved; it sends the recorded ``seed`` in its reset, and compares
every answer with the recorded ``outcome`` (accepted or refused with a code, and the result's
shape) to say where a replay that cannot go on left the recorded run.

A trace of a clause test also says which clause the test judged (``"focus"``: the replay, like
the test, sets aside divergences of *other* clauses where the item is still where the model
has it, so it fails the clause the test failed and not an earlier, incidental one), which case
it was (``"case"``, ``"lease.fencing[close_out]"``) and whether the failure was found by the
model or by the test's own check of the answers (``"judged_by"``: ``"model"`` or ``"check"``).

Two steps are the harness's own (version 3): ``{"op": "reopen", "args": {}}`` closes the ledger
and opens it again from its directory in a new process (the old one's connection is closed, a
new one is started and reset with the same ``dir``, docs/protocol.md); ``{"op": "reopen_here",
"args": {}}`` resets the process that holds the ledger a second time with the same ``dir``.  A
trace with either step is replayed on a ledger in a new, empty directory of its own, opened by a
new process from the first step, as the recorded run's was.

:func:`run_replay` is what ``ledgercheck replay`` runs: the case itself when the trace names a
case this ledgercheck has (its program is the recorded steps, and its own checks judge the
answers as they did in the run; the steps it performs are compared with the recorded ones),
else the bare steps (:func:`replay`, judged by the model).  It says whether the failure was
reproduced, and, against an adapter with its own (wall) clock, that the replay is inexact:
the steps ran at new instants, so only what the clause is about can come back, not the run.

Version 1 traces (times rounded to 6 decimals, no seed, no outcomes) are still read; their
seed is 0, which is what runs of that time sent.  Version 1 and 2 traces name no focus: their
replay takes the clause of the first recorded violation as the one judged.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledgercheck.spec import Spec
from ledgercheck.transport.client import Client

from ledgercheck import bounded
from ledgercheck.bounded import TRACE, InputError, load_limited

from .harness import AdapterFailure, ClauseFailure, Harness, NotApplicable, NotOffered, outcome_summary
from .model import Outcome, Violation

FORMAT = "ledgercheck-trace"
VERSION = 4
READS = (1, 2, 3, 4)  # trace versions this ledgercheck replays
JUDGES = ("model", "check")  # what found a recorded failure: the model, or the clause test's own check


class TraceError(Exception):
    """A trace file is unreadable or malformed; the message names the file."""


def dump_trace(h: Harness, path: str | Path, violations: list[Violation], adapter: str, *,
               case: str | None = None, judged_by: str = "model") -> Path:
    """Save the harness's trace.  ``case`` names the clause test that failed (None for a
    stateful run); ``judged_by`` says whether the model or that test's own check found it."""
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "spec": {"name": h.spec.name, "version": h.spec.version, "digest": h.spec.digest},
        "adapter": adapter,
        "profiles": sorted(h.profiles),
        "violations": [{"clause": v.clause, "message": v.message, "op": v.op} for v in violations],
        "focus": h.focus,
        "case": case,
        "judged_by": judged_by,
        "wall_scale": h.wall_scale if h.wall else None,
        "seed": h.sent_seed,
        "epoch": h.epoch,
        "steps": h.trace,
    }
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    return p


MAX_STEPS = 100_000  # a virtual-clock run records a few hundred; a wall-clock one that waits out a budget, ten thousand and more
MAX_SECONDS = 1e9  # how far from the run's start a "$t" instant may be (about 31 years)
HARNESS_OPS = ("hello", "reset")  # sent by the harness itself; a trace step may not name them
HARNESS_STEPS = ("reopen", "reopen_here")
WALL_SCALE = 0.01  # the contract's timings under a wall clock, when a trace does not record its run's (--ledger-wall-scale)
MAX_WALL_SCALE = 100.0  # steps the harness performs itself (version 3), not operations of the contract


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
    for key in ("focus", "case"):
        if doc.get(key) is not None and not isinstance(doc[key], str):
            return f"{key} must be a string or null, not {_brief(doc[key])}"
    scale = doc.get("wall_scale")
    if scale is not None and not (_is_number(scale) and 0 < scale <= MAX_WALL_SCALE):
        return f"wall_scale must be a number in (0, {MAX_WALL_SCALE:g}], not {_brief(scale)}"
    vs = doc.get("violations")
    if vs is not None and not (isinstance(vs, list) and all(isinstance(v, dict) for v in vs)):
        return "violations must be a list of {clause, message} objects"
    if doc.get("judged_by", "model") not in JUDGES:
        return f"judged_by must be one of {', '.join(JUDGES)}, not {_brief(doc.get('judged_by'))}"
    return None


def _step_problem(step: Any) -> str | None:
    """What is wrong with one step's shape (the contract is checked by :func:`check_steps`)."""
    if not (isinstance(step, dict) and isinstance(step.get("op"), str) and isinstance(step.get("args"), dict)):
        return "not an {op, args} object"
    if step["op"] in HARNESS_OPS:
        return f"names {step['op']!r}, which the harness sends itself, not a step of a trace"
    if step["op"] in HARNESS_STEPS and step["args"]:
        return f"{step['op']} takes no arguments"
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
    if tag == "$handout" and not _is_int(ref, 0):
        return f"$handout must be the index of a hand-out's token (an integer >= 0), not {_brief(ref)}"
    if tag == "$key" and not (isinstance(ref, list) and len(ref) == 3 and _is_int(ref[0], -1)
                              and isinstance(ref[1], str) and isinstance(ref[2], str)):
        return f"$key must be [item index, step id, tool], not {_brief(ref)}"
    return None


def check_steps(doc: dict[str, Any], spec: Spec, source: str) -> None:
    """Every step names an operation of ``spec`` and only arguments it declares (the harness sends
    no others): checked before an adapter is started."""
    for i, step in enumerate(doc["steps"]):
        if step["op"] in HARNESS_STEPS:
            if step["op"] in spec.operations:
                raise TraceError(f"{source}: step {i + 1}: the contract {spec.name} {spec.version} has an operation named "
                                 f"{step['op']!r}, which a trace reserves for the harness's own step")
            continue
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
            if tag == "$handout":
                if ref >= len(h.handouts):
                    raise TraceError(f"{where}: refers to hand-out token {ref}, but the replay's answers handed out "
                                     f"{len(h.handouts)}{why}")
                out[k] = h.handouts[ref]
                continue
            if tag == "$key":
                i, step_id, tool = ref
                out[k] = h.spec.effect_key(work_id=by_index.get(i, f"missing-{i}"), step_id=step_id, tool=tool)
                continue
        out[k] = v
    return out


def focus_of(doc: dict[str, Any]) -> str | None:
    """The clause a trace's test judged: the recorded focus (version 3; None for a stateful run,
    which judges every clause alike), else the clause of the first recorded violation."""
    if doc.get("version", 1) >= 3:
        return doc.get("focus")
    return _first_clause(doc)


def _first_clause(doc: dict[str, Any]) -> str | None:
    vs = doc.get("violations")
    if isinstance(vs, list) and vs and isinstance(vs[0], dict) and isinstance(vs[0].get("clause"), str):
        return vs[0]["clause"]
    return None


def reopens(doc: dict[str, Any]) -> bool:
    return any(step["op"] in HARNESS_STEPS for step in doc["steps"])


@contextmanager
def _ledger(h: Harness, doc: dict[str, Any]) -> Iterator[None]:
    """A fresh ledger for the replay: in a new, empty directory of its own (opened by a new
    process) when the trace reopens it, as the recorded run's was."""
    seed = doc.get("seed", 0)
    if not reopens(doc):
        h.fresh(seed=seed)
        yield
        return
    with tempfile.TemporaryDirectory(prefix="ledgercheck-replay-") as tmp:
        h.fresh(seed=seed, directory=tmp)
        try:
            yield
        finally:
            h.leave_directory()


def replay(h: Harness, doc: dict[str, Any], source: str = "trace", time_limit: float | None = None) -> list[Violation]:
    """Run a trace's steps on a fresh ledger; return the violations found (empty when it passes).

    Adapter failures propagate as AdapterFailure.  A replay still running after ``time_limit``
    seconds stops with a TraceError (a trace of a few thousand steps can ask for work that grows
    with the square of its length: listing every item after each create).
    """
    return _replay_steps(h, doc, source, time_limit)[0]


def _replay_steps(h: Harness, doc: dict[str, Any], source: str, time_limit: float | None) -> tuple[list[Violation], str | None]:
    """The steps replayed, judged by the model with the trace's focus; the violations and the
    first step whose answer differed from the recorded one (None when every answer matched)."""
    deadline = None if time_limit is None else time.monotonic() + time_limit
    h.focus = focus_of(doc)
    # an operation the implementation does not offer answers unsupported as it did in the run; the
    # replay goes on with that answer (a refusal with the wrong code of an offered one still fails)
    h.note_unoffered = True
    epoch = doc.get("epoch")
    epoch = float(epoch) if isinstance(epoch, int | float) and not isinstance(epoch, bool) else None
    diverged: str | None = None
    with _ledger(h, doc):
        for i, step in enumerate(doc["steps"]):
            where = f"{source}: step {i + 1} ({step['op']})"
            if deadline is not None and time.monotonic() > deadline:
                raise TraceError(f"{where}: the replay ran past {time_limit:g}s, the limit for a replay (--time-limit)")
            try:
                out = _perform(h, step, where, epoch, diverged)
            except ClauseFailure as exc:
                return exc.violations, diverged
            want = step.get("outcome")
            got = outcome_summary(out)
            if diverged is None and isinstance(want, dict) and want != got:
                diverged = (f"step {i + 1} ({step['op']}) answered {_said(got)} on replay, {_said(want)} when recorded "
                            f"(the adapter chose differently, e.g. a random draw not seeded from the reset's seed, or the "
                            f"time of a step is not the recorded one)")
        try:
            h.verify_all()
        except ClauseFailure as exc:
            return exc.violations, diverged
    return [], diverged


def _perform(h: Harness, step: dict[str, Any], where: str, epoch: float | None, diverged: str | None) -> Outcome:
    if step["op"] == "reopen":
        h.reopen()
        return Outcome.success(None)
    if step["op"] == "reopen_here":
        try:
            h.reopen_here()
        except NotOffered as exc:
            raise TraceError(f"{where}: {exc}") from None
        return Outcome.success(None)
    if step["op"] not in h.spec.operations:
        raise TraceError(f"{where}: unknown operation")
    args = resolve(h, step["args"], where, epoch, diverged)
    if _is_number(args.get("now")) and args["now"] > h.now():  # a malformed one is the adapter's to refuse
        h.advance_to(args["now"])
    try:
        return h.do(step["op"], **args)
    except NotApplicable as exc:
        raise TraceError(f"{where}: {exc}") from None


@dataclass
class Replayed:
    """What a replay found, and whether that is the failure the trace was saved for."""

    violations: list[Violation]
    mode: str  # "case": the clause test's own program and checks; "steps": the bare steps, judged by the model
    listed: str | None  # the clause the recorded failure is listed under (the clause its test judges)
    steps: int  # recorded steps
    diverged: str | None = None  # where the replay first left the recorded run
    inexact: str | None = None  # why the replay cannot repeat the recorded run exactly
    case: str | None = None
    recorded: list[str] = field(default_factory=list)  # the clauses the recorded failure named
    judged_by: str = "model"  # what found the recorded failure: the model, or the test's own check
    stopped: str | None = None  # a wall-clock replay that ended before a verdict, and why
    found: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.found = sorted({v.clause for v in self.violations})

    @property
    def again(self) -> list[str]:
        """The recorded failure's clauses that the replay found again."""
        want = set(self.recorded) or ({self.listed} if self.listed else set(self.found))
        return sorted(want & set(self.found))

    @property
    def reproduced(self) -> bool:
        """The replay failed with (one of) the clauses the recorded failure named."""
        return bool(self.again)

    def headline(self, source: str, against: str) -> str:
        how = (f"the clause test {self.case} (its program, {self.steps} recorded steps, and its own checks)"
               if self.mode == "case" else f"{self.steps} recorded steps")
        under = "" if self.listed is None or self.listed in self.again else f" (the failure of the {self.listed} test)"
        if self.reproduced:
            return f"{source}: reproduced {', '.join(self.again)}{under} against {against} with {how}"
        what = ", ".join(self.recorded) or self.listed or "the recorded failure"
        if self.mode == "steps" and self.judged_by == "check":
            what += (f" (the recorded failure was found by the clause test {self.case or self.listed}'s own check of the "
                     f"answers, which bare steps do not run; replay without --steps)")
        if self.stopped:
            return f"{source}: did not reproduce {what} against {against}: {how} stopped before a verdict ({self.stopped})"
        if self.violations:
            return f"{source}: did not reproduce {what}; found {', '.join(self.found)} instead against {against} with {how}"
        return f"{source}: did not reproduce {what}: all {self.steps} steps conform against {against} ({how})"


WALL = ("inexact: the adapter keeps its own (wall) clock, so the steps ran at new instants and with new waits, not the "
        "recorded ones; what a replay of it can repeat is the program and the clause's verdict on the answers")


def replay_harness(client: Client, spec: Spec, doc: dict[str, Any]) -> Harness:
    """A harness for replaying ``doc`` as its run had it: the trace's profiles the adapter claims,
    and for a wall-clock adapter the contract's timings scaled by the run's ``wall_scale`` (the
    adapter is sent the scaled contract, as in the run) with the tolerance its handshake asks for."""
    from .harness import run_harness

    profiles = [p for p in doc.get("profiles") or client.profiles if p in client.profiles]
    return run_harness(client, spec, profiles, wall_scale=float(doc.get("wall_scale") or WALL_SCALE))


def find_case(spec: Spec, name: str) -> Any:
    """The clause test named ``name`` (``"lease.fencing[close_out]"``) of this contract, or None."""
    from .clauses import all_cases

    return next((c for c in all_cases(spec) if c.name == name), None)


def run_replay(h: Harness, doc: dict[str, Any], source: str = "trace", time_limit: float | None = None,
               steps_only: bool = False) -> Replayed:
    """Replay a trace as ``ledgercheck replay`` does: the clause test it names when this
    ledgercheck has it (and ``steps_only`` is off), else its bare steps."""
    case = None if steps_only or not isinstance(doc.get("case"), str) else find_case(h.spec, doc["case"])
    inexact = WALL if h.wall else None
    recorded = sorted({v["clause"] for v in doc.get("violations") or [] if isinstance(v, dict) and isinstance(v.get("clause"), str)})
    if case is None:
        found, diverged = _replay_steps(h, doc, source, time_limit)
        return Replayed(found, "steps", focus_of(doc), len(doc["steps"]), diverged, inexact, case=doc.get("case"),
                        recorded=recorded, judged_by=doc.get("judged_by", "model"))
    stopped = None
    try:
        found = _replay_case(h, case, doc, source)
    except _Stopped as exc:
        found, stopped = [], str(exc)
    return Replayed(found, "case", case.clause, len(doc["steps"]), _first_difference(h.trace, doc["steps"]), inexact,
                    case=case.name, recorded=recorded, judged_by=doc.get("judged_by", "model"), stopped=stopped)


def _replay_case(h: Harness, case: Any, doc: dict[str, Any], source: str) -> list[Violation]:
    from .clauses import NoCheck
    from .harness import DriveBlocked

    h.start_case(case.clause, seed=doc.get("seed", 0))
    try:
        case.fn(h)
    except ClauseFailure as exc:
        return exc.violations
    except (NotApplicable, NotOffered, DriveBlocked, NoCheck) as exc:
        if not h.wall:
            raise TraceError(f"{source}: the clause test {case.name} did not reach a verdict on replay: {exc}") from None
        # under a wall clock the answers can differ from the run's (a retry due a little later):
        # the test went on past where it failed and met what it cannot judge; say so
        raise _Stopped(str(exc)) from None
    finally:
        h.leave_directory()
    return []


class _Stopped(Exception):
    """A wall-clock replay of a clause test that stopped before a verdict (not offered, not applicable)."""


def _first_difference(done: list[dict[str, Any]], recorded: list[dict[str, Any]]) -> str | None:
    for i, (a, b) in enumerate(zip(done, recorded, strict=False)):
        want = b.get("outcome")
        if a["op"] != b["op"] or (isinstance(want, dict) and a.get("outcome") != want):
            return (f"step {i + 1}: {a['op']} answered {_said(a.get('outcome') or {})} on replay, "
                    f"{b['op']} {_said(want) if isinstance(want, dict) else ''} when recorded").rstrip()
    if len(done) != len(recorded):
        return f"the replay performed {len(done)} steps, the recorded run {len(recorded)}"
    return None


def _said(o: dict[str, Any]) -> str:
    return f"ok ({o.get('result')})" if o.get("ok") else f"refused ({o.get('code')})"


def check_spec(doc: dict[str, Any], spec: Spec, source: str) -> str | None:
    """A warning when the trace was recorded against another contract."""
    digest = (doc.get("spec") or {}).get("digest")
    if digest and digest != spec.digest:
        return f"{source}: recorded against contract {digest[:12]}, replaying against {spec.digest[:12]}"
    return None


__all__ = ["AdapterFailure", "Replayed", "TraceError", "adapter_to_run", "check_steps", "dump_trace", "find_case", "focus_of",
           "load_trace", "replay", "replay_harness", "resolve", "run_replay"]
