"""The safety checker's data: anomaly classes and situations, the verdict, and the records it indexes
a history into (operations, grants, snapshots, items, timelines), with the small helpers its rules
share. chaos/safety/anomalies.py re-exports what callers use."""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import Any

import msgspec
from ledgercheck.spec import Spec, default_spec
from ledgercheck.spec.rules import Roles, roles

from .history import Final, History, Nemesis, Record, to_dict

CLASSES = ("lost_work", "duplicate_effect", "split_ownership", "stale_write_accepted", "terminal_changed",
           "stuck_work", "refused_but_applied")
OPERATOR = "operator"  # the process the campaign records an operator's recovery under
# What the checker reports as reached (Verdict.coverage); kill_at:<point> is added per named crash point.
SITUATIONS = ("claim_ok", "close_out_ok", "finished", "kill", "pause", "reopen", "holder_displaced",
              "displaced_by_time", "displaced_by_operator", "displaced_by_reopen", "late_write_after_takeover",
              "effect_then_kill", "final_read")
INF = math.inf
_PAST = {"kill": "killed", "pause": "paused", "partition": "cut off by a partition"}


# ------------------------------------------------------------------------------ the contract
# What the checker needs of the contract (statuses by kind, operations by role) is read from the
# Spec by spec/rules.py (``Roles``); no status or operation name is written here.
Rules = Roles


def rules_of(spec: Spec | None = None) -> Rules:
    """The Rules of a contract (the shipped one by default), worked out once per Spec."""
    return roles(spec if spec is not None else default_spec())


# ------------------------------------------------------------------------------------ results
@dataclass(frozen=True)
class Anomaly:
    kind: str  # one of CLASSES
    work_id: str
    explanation: str
    excerpt: tuple[Record, ...]
    context: tuple[Record, ...] = ()
    # records of the excerpt that say why rather than prove: the fault that lost an item (and the
    # grant it hit).  The rest of the excerpt is the proof, minimal on its own.
    cause: tuple[Record, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"class": self.kind, "work_id": self.work_id, "explanation": self.explanation,
                "excerpt": [_line_dict(r) for r in self.excerpt],
                "context": [_line_dict(r) for r in self.context],
                "cause": [_line_dict(r) for r in self.cause]}


@dataclass
class Verdict:
    anomalies: list[Anomaly] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    # how often each situation (SITUATIONS, kill_at:<point>) was reached, from the history alone
    coverage: dict[str, int] = field(default_factory=dict)
    # one line, in plain words, per required situation the history did not reach
    missing: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No anomaly was found (which is a pass only when nothing is missing: see verdict)."""
        return not self.anomalies

    @property
    def verdict(self) -> str:
        """``anomalies``, else ``inconclusive`` when a required situation was not reached, else
        ``no anomaly``."""
        if self.anomalies:
            return "anomalies"
        return "inconclusive" if self.missing else "no anomaly"

    def by_class(self) -> dict[str, list[Anomaly]]:
        out: dict[str, list[Anomaly]] = {}
        for a in self.anomalies:
            out.setdefault(a.kind, []).append(a)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "verdict": self.verdict, "anomalies": [a.to_json() for a in self.anomalies],
                "summary": {k: len(v) for k, v in self.by_class().items()},
                "observations": list(self.observations), "counts": dict(self.counts),
                "coverage": dict(self.coverage), "missing": list(self.missing)}


def _line_dict(rec: Record) -> dict[str, Any]:
    d = to_dict(rec)
    if rec.line:
        d["line"] = rec.line
    return d


# ---------------------------------------------------------------------------------- the index
class Op(msgspec.Struct, gc=False, eq=False):
    """One operation: its invoke and (if any) its completion, by their rows in the history.  A
    msgspec struct: the index makes one per operation, and builds it in C (no Python call);
    eq=False keeps identity comparison and hashing, gc=False because an operation refers only to
    JSON values (no cycle can go through it)."""

    inv: int  # the row of the invoke
    comp: int | None  # the row of the completion
    name: str
    process: str
    args: dict[str, Any]
    t0: float
    t1: float  # INF for an operation that never completed: it may have taken effect at any later time
    now: float | None  # the ledger time it was asked at, if known
    outcome: str  # ok | refused | indefinite (also for one that never completed)
    result: Any
    work_id: str | None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    @property
    def maybe(self) -> bool:
        """Did or may have taken effect."""
        return self.outcome != "refused"

    @property
    def token(self) -> Any:
        a = self.args
        return a.get("token", a.get("lease_token"))


class Grant(msgspec.Struct, gc=False, eq=False):
    """One acquisition of an item's lease (claim or resume) that happened.  A msgspec struct, as
    Op: built in C; compared by identity."""

    op: Op | None  # None: seen only in a snapshot, no operation of the history is known to have made it
    owner: Any
    token: Any
    version: int | None
    start: float | None  # ledger time of the acquire
    expires: float | None
    seen: Op | None = None  # for an indefinite grant: the operation whose result showed it
    seen_final: bool = False
    killed: Nemesis | None = None  # its caller was killed then: an in-flight grant was done by that time
    renewals: list[tuple[float, float, Op]] = msgspec.field(default_factory=list)  # (completed t, expires, op)
    releases: list[Op] = msgspec.field(default_factory=list)
    # when the grant is known to have happened (real time): its ok completion, else the earlier of
    # the read that showed it and its caller's kill (set by done())
    t_done: float = INF

    def done(self) -> Grant:
        """Set t_done from what the grant is known by; returns the grant."""
        if self.op is not None and self.op.ok:
            self.t_done = self.op.t1
        else:
            self.t_done = min(self.seen.t1 if self.seen is not None else INF,
                              self.killed.t if self.killed is not None else INF)
        return self

    def proof(self) -> tuple[Op | Record, ...]:
        ops: list[Op | Record] = [] if self.op is None else [self.op]
        if self.seen is not None and (self.op is None or not self.op.ok):
            ops.append(self.seen)
        if self.killed is not None and (self.op is None or not self.op.ok) and \
                (self.seen is None or self.seen.t1 > self.killed.t):
            ops.append(self.killed)
        return tuple(ops)


class Snap(msgspec.Struct, gc=False, eq=False):
    """An item's snapshot as an operation (or the final read) returned it.  A struct: the index
    makes one for nearly every operation, and builds it in C, untracked by the collector."""

    work: Mapping[str, Any]
    op: Op | None  # None: the final read
    t0: float
    t1: float


class _Item(msgspec.Struct, gc=False, eq=False):
    """What the history shows of one item (a struct: built in C)."""

    work_id: str
    final: dict[str, Any] | None = None  # the final read's snapshot
    ops: list[Op] = msgspec.field(default_factory=list)
    snaps: list[Snap] = msgspec.field(default_factory=list)
    creates: list[Op] = msgspec.field(default_factory=list)
    effects: dict[str, list[int]] = msgspec.field(default_factory=dict)  # key -> the rows of its applied effects
    refused_closes: list[Op] | None = None  # its close-outs refused (found by grants())


_T1 = attrgetter("t1")
_FIRST = itemgetter(0)
_INVOKE_FIELDS = attrgetter("op", "process", "args", "t", "id", "now")
_COMPLETE_FIELDS = attrgetter("outcome", "t", "result")


def _num(v: Any) -> float | None:
    t = type(v)
    return float(v) if t is float or t is int else None


class _Timeline:
    """Operations by invoke time, to find those that overlap a stretch of real time without
    looking at the others (the checker asks once per grant or pause)."""

    def __init__(self, ops: Iterable[Op]) -> None:
        self.ops = sorted(ops, key=attrgetter("t0"))
        self.t0s = [op.t0 for op in self.ops]
        self.longest = max((op.t1 - op.t0 for op in self.ops if op.t1 != INF), default=0.0)
        self.open = [op for op in self.ops if op.t1 == INF]  # never answered: they may overlap anything later

    def overlapping(self, after: float, before: float) -> Iterator[Op]:
        """The operations with t1 > after and t0 < before."""
        lo_t = after - self.longest
        ops = self.ops
        for i in range(bisect_left(self.t0s, lo_t), bisect_left(self.t0s, before)):
            if ops[i].t1 > after:
                yield ops[i]
        for op in self.open:
            if op.t0 < lo_t:
                yield op

    def starting(self, after: float, before: float) -> Iterator[Op]:
        """The operations invoked after `after` and before `before`, in order."""
        ops = self.ops
        for i in range(bisect_right(self.t0s, after), bisect_left(self.t0s, before)):
            yield ops[i]


def _code(op: Op, h: History) -> str:
    """The error code of a refused operation, as its completion gives it."""
    if op.comp is None:
        return "no answer"
    err = h.rows[op.comp].error
    code = err.get("code") if isinstance(err, dict) else None
    return str(code) if code else "refused"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def fmt_num(x: float) -> str:
    """A time or duration for a sentence: up to millisecond precision, no trailing zeros."""
    return f"{x:.3f}".rstrip("0").rstrip(".")


def _after(b: Grant, a: Grant) -> bool:
    """Was grant b made after grant a?  By lease_version when the ledger counts them, else by
    ledger time, else by when they were asked for."""
    if isinstance(a.version, int) and isinstance(b.version, int) and a.version != b.version:
        return b.version > a.version
    if a.start is not None and b.start is not None and a.start != b.start:
        return b.start > a.start
    return a.op is not None and b.op is not None and b.op.t0 > a.op.t0


def _retries(ops: list[Op], claims: frozenset[str]) -> int:
    """Operations a process tried again right after a try that did not come back ok."""
    last: dict[str, Op] = {}
    before = last.get
    n = 0
    for op in ops:
        process = op.process
        prev = before(process)
        if prev is not None and prev.outcome != "ok" and prev.name == op.name and \
                (op.name in claims or prev.work_id == op.work_id):
            n += 1
        last[process] = op
    return n


_RANK = {"meta": 0, "invoke": 1, "effect": 1, "nemesis": 1, "complete": 2, "final": 9}


def _ordered(recs: list[Record]) -> list[Record]:
    return sorted(recs, key=lambda r: (r.type == "final", r.line or 0, getattr(r, "t", 0.0), _RANK[r.type]))


def _first_t(a: Anomaly) -> float:
    return min((getattr(r, "t", INF) for r in a.excerpt), default=INF)


def _with_final(a: Anomaly, fin: Final) -> Anomaly:
    return Anomaly(a.kind, a.work_id, a.explanation, (*a.excerpt, fin), a.context)
