"""The typed, frozen view of a merged contract document.

Everything the reference ledger, the harness model, the chaos checker and the reports need to
know about the rules comes from here.  Helper methods answer questions that follow directly
from the data (which operation moves which status where, what the lease timings are for a
source system, the bounds of a retry delay); they never add rules of their own.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


def frozen_map(d: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return MappingProxyType(dict(d or {}))


@dataclass(frozen=True)
class Status:
    name: str
    terminal: bool
    initial: bool = False
    leased: bool = False
    waiting_kind: str | None = None
    description: str = ""
    success: bool = False  # the terminal status finished work is closed out with


@dataclass(frozen=True)
class Transition:
    src: str
    dst: str
    ops: tuple[str, ...]
    guard: str | None = None
    requeue: bool = False


@dataclass(frozen=True)
class EventType:
    name: str
    transition: bool
    data: tuple[str, ...]


@dataclass(frozen=True)
class WorkField:
    name: str
    type: str
    nullable: bool
    compare: str
    fold: bool
    blame: str | None = None  # the clause that owns the field (work_fields' `blame`)


@dataclass(frozen=True)
class Arg:
    name: str
    type: str
    required: bool
    blame: str | None = None  # the clause blamed when the argument is missing or out of range
    blame_waiting: str | None = None  # ... when its value is a waiting status (close_out's status)


@dataclass(frozen=True)
class Operation:
    name: str
    profile: str | None
    kind: str
    args: Mapping[str, Arg]
    returns: str = "none"
    event: str | Mapping[str, str] | None = None
    intent_event: str | None = None
    intent_from: tuple[str, ...] = ()
    requires_lease: bool = False
    lease: str | None = None
    attempt: str | None = None
    statuses: tuple[str, ...] = ()
    blame: str | None = None  # the clause that says what the answer holds (lifecycle.yaml)

    def event_for(self, target: str | None = None) -> str | None:
        if type(self.event) is str or self.event is None:  # (no Mapping: answered without the ABC)
            return self.event
        if isinstance(self.event, Mapping):
            return self.event.get(target) if target is not None else None
        return self.event


@dataclass(frozen=True)
class LeaseTimings:
    ttl: float
    renew_interval: float
    grace: float


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int
    initial_backoff: float
    multiplier: float
    max_backoff: float
    jitter: str

    def merged(self, override: Mapping[str, Any] | None) -> RetryPolicy:
        if not override:
            return self
        vals = {f: getattr(self, f) for f in ("max_attempts", "initial_backoff", "multiplier", "max_backoff", "jitter")}
        for k, v in override.items():
            if k in vals and v is not None:
                vals[k] = parse_duration(v) if k in ("initial_backoff", "max_backoff") else v
        return RetryPolicy(**vals)

    def as_dict(self) -> dict[str, Any]:
        return {
            "max_attempts": self.max_attempts,
            "initial_backoff": self.initial_backoff,
            "multiplier": self.multiplier,
            "max_backoff": self.max_backoff,
            "jitter": self.jitter,
        }


@dataclass(frozen=True)
class Clause:
    id: str
    level: str
    profile: str
    source: str
    statement: str
    judge: str = "harness"  # "chaos": only the chaos exploration's crash windows judge it
    judges: tuple[str, ...] = ()  # named judgements of the model this clause takes the blame for
    impact: str = "behaviour"  # what a violation does to a user's work (IMPACTS; the loader always sets it)
    headline: str = ""  # a violation in a few plain words ("accepts a stale holder's writes")


# What a violated clause does to a user's work (a clause's ``impact``), most severe first; verdict
# lines and reports order findings by it (docs/contract.md, "Impact").
IMPACTS = ("ownership", "integrity", "behaviour", "validation", "reporting")


class UnknownClause(KeyError):
    """A clause id the harness names that the contract does not define: a bug in the harness (a
    misspelt id would otherwise drop or misfile its violation without a word)."""

    def __init__(self, clause: str, spec: Spec) -> None:
        super().__init__(clause)
        self.clause = clause
        self.contract = f"{spec.name} {spec.version}"

    def __str__(self) -> str:
        return f"clause id {self.clause!r} is not in the contract ({self.contract}): a harness bug"


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    requires: tuple[str, ...]


@dataclass(frozen=True)
class ProfileSet:
    """A named set of profiles (``profile_sets`` of the manifest); one set is the whole contract."""

    name: str
    description: str
    profiles: tuple[str, ...]


@dataclass(frozen=True)
class CrashPoint:
    name: str
    journal: str
    waiting: bool
    description: str
    stage: str | None = None  # the stage of the worker's protocol a kill here stands for (chaos/crash/points.py)


@dataclass(frozen=True)
class MatrixEntry:
    decision: str
    effects: str


@dataclass(frozen=True)
class Allowance:
    name: str
    min: int
    max: int | None
    quarantined: bool = False

    def allows(self, count: int) -> bool:
        return count >= self.min and (self.max is None or count <= self.max)


@dataclass(frozen=True)
class EffectValue:
    """One value an effect writes: ``kind`` is const (``param`` is the value), now, arg (the
    operation's input named ``param``) or text (``param`` is a template over the inputs)."""

    kind: str
    param: Any = None


@dataclass(frozen=True)
class EffectStep:
    """What one step of an operation writes on a snapshot (``effects`` in the contract), with
    ``like`` already resolved: ``writes`` field -> value in contract order (clears are const
    None), and the fields whose value after the step the contract leaves open."""

    writes: tuple[tuple[str, EffectValue], ...]
    may_keep: tuple[str, ...] = ()
    may_clear: tuple[str, ...] = ()


@dataclass(frozen=True)
class MonitorMarked:
    by: str
    reason: str  # the timeout reason's text (not its name)
    unless: tuple[str, ...] = ()


@dataclass(frozen=True)
class StaleRule:
    """Which items a recovery scan must classify (``stale`` in the contract)."""

    lease_lapsed: bool
    monitor_marked: MonitorMarked | None


@dataclass(frozen=True)
class HandoutRule:
    """How a lapsed hand-out of a profile is recovered (``handouts`` in the contract)."""

    operation: str  # the operation that hands out under the lease
    timings: str  # the policy section whose ttl and grace the lease lives by
    state: str  # the state a lapsed hand-out's run is in again
    keep: str  # the lost hand-out's field whose wakeups are merged into the run's pending ones
    cycle: str  # "same": the redelivery hands out the same wake cycle; "next": a new one
    fence: str  # the error a stale token's write gets


@dataclass(frozen=True)
class PromiseWindow:
    """A step whose two records a crash must not split (``promise_windows`` in the contract)."""

    name: str
    operation: str
    keeps: tuple[str, ...]
    after: str  # replay, handout_lapse or none: what mends what a crash leaves
    clause: str


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")


def parse_duration(value: Any) -> float:
    """Seconds from a number or a string like '45s', '5m', '2h', '7d', '250ms'.

    The string form is exactly what the JSON Schema's duration pattern admits; numbers must be
    finite and not negative.  Anything else raises ValueError.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"duration must be a finite number of seconds: {value!r}")
        if value < 0:
            raise ValueError(f"duration must be >= 0: {value!r}")
        return float(value)
    if isinstance(value, str):
        m = _DURATION.fullmatch(value)
        if m:
            return float(m.group(1)) * _UNITS[m.group(2)]
    raise ValueError(f"not a duration: {value!r} (use seconds, or a string such as 45s, 5m, 2h, 7d, 250ms)")


def canonical_json(value: Any) -> str:
    """The contract's canonical JSON: sorted keys, no spaces, UTF-8 text (no ASCII escaping)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Spec:
    name: str
    version: str
    title: str
    profiles: Mapping[str, Profile]
    seeds: Mapping[str, str]
    source_systems: tuple[str, ...]
    identity_key: tuple[str, ...]
    run_id_required_for: tuple[str, ...]
    priority_default: int
    priority_min: int
    priority_max: int
    statuses: Mapping[str, Status]
    work_fields: Mapping[str, WorkField]
    events: Mapping[str, EventType]
    transitions: tuple[Transition, ...]
    forbidden_examples: tuple[tuple[str, str], ...]
    operations: Mapping[str, Operation]
    lease_default: LeaseTimings
    lease_by_source: Mapping[str, LeaseTimings]
    waiting_timeouts: Mapping[str, float]
    waiting_by_source: Mapping[str, Mapping[str, float]]
    retry_default: RetryPolicy
    retry_by_source: Mapping[str, RetryPolicy]
    jitter_modes: Mapping[str, tuple[float, float]]
    error_classes: Mapping[str, bool]  # name -> retryable
    phases: Mapping[str, Mapping[str, Any]]
    timeout_reasons: Mapping[str, str]
    idem_scope: tuple[str, ...]
    receipt_states: tuple[str, ...]
    receipt_transitions: frozenset[tuple[str, str]]
    retention: float
    inbox_max_nacks: int
    inbox_drain_max: int
    outbox_pending_max: int
    first_seq: int
    errors: Mapping[str, bool]  # code -> definite
    error_blame: Mapping[str, str]  # code -> the clause blamed for that refusal when nothing more particular applies
    crash_points: Mapping[str, CrashPoint]
    step_classes: Mapping[str, str]  # name -> effect kind
    decisions: Mapping[str, Mapping[str, Any]]
    allowances: Mapping[str, Allowance]
    matrix: Mapping[str, Mapping[str, MatrixEntry]]
    scanner: Mapping[str, str]
    clauses: tuple[Clause, ...]
    wakeup_kinds: tuple[str, ...] = ()  # what may wake a suspended run (profile wakeups)
    attempts_exhausted: str = "quarantine"  # the decision a requeueing one becomes at the attempt limit
    stale: StaleRule = StaleRule(True, None)
    effects: Mapping[str, Mapping[str, EffectStep]] = field(default_factory=dict)  # operation -> step -> effect
    files: Mapping[str, str] = field(default_factory=dict)  # display path -> sha256 of the file
    document: Mapping[str, Any] = field(default_factory=dict, repr=False)  # the merged raw document
    profile_sets: Mapping[str, ProfileSet] = field(default_factory=dict)
    spawn_budget: int = 4  # descendants one root may have (spawn profile)
    spawn_wakeup: str | None = None  # the wakeup a finished child fires on its parent's run (spawn with wakeups)
    ask_outcomes: Mapping[str, str] = field(default_factory=dict)  # terminal status -> ask outcome
    ask_unfinished: str = "timed_out"  # the outcome of an ask whose target is not terminal
    handouts: Mapping[str, HandoutRule] = field(default_factory=dict)  # profile -> its hand-out lease rule
    promise_windows: Mapping[str, PromiseWindow] = field(default_factory=dict)

    # ---- identity -------------------------------------------------------------------------
    @functools.cached_property
    def digest(self) -> str:
        """SHA-256 of the merged document in canonical JSON: two specs with equal digests are the same contract.

        Computed once per Spec (the document is frozen); ``dataclasses.replace`` makes a new Spec
        with its own cache.
        """
        return sha256_hex(canonical_json(_plain(self.document)))

    # ---- statuses and transitions -----------------------------------------------------------
    @property
    def initial_status(self) -> str:
        return next(s.name for s in self.statuses.values() if s.initial)

    def terminal(self, status: str) -> bool:
        return self.statuses[status].terminal

    @property
    def terminal_statuses(self) -> tuple[str, ...]:
        return tuple(s for s, st in self.statuses.items() if st.terminal)

    @property
    def waiting_statuses(self) -> Mapping[str, str]:
        """waiting kind -> status name."""
        return {st.waiting_kind: s for s, st in self.statuses.items() if st.waiting_kind}

    @functools.cached_property
    def _edges(self) -> dict[tuple[str, str], Transition]:
        """(src, dst) -> the table's first transition between them (the model and the reference
        ask on every operation; the table is frozen, so it is indexed once per Spec)."""
        index: dict[tuple[str, str], Transition] = {}
        for t in self.transitions:
            index.setdefault((t.src, t.dst), t)
        return index

    @functools.cached_property
    def _targets(self) -> dict[tuple[str, str], tuple[str, ...]]:
        """(operation, src) -> the statuses the operation may move an item in ``src`` to."""
        index: dict[tuple[str, str], list[str]] = {}
        for t in self.transitions:
            for op in dict.fromkeys(t.ops):
                index.setdefault((op, t.src), []).append(t.dst)
        return {k: tuple(v) for k, v in index.items()}

    def edge(self, src: str, dst: str) -> Transition | None:
        return self._edges.get((src, dst))

    def allowed(self, src: str, dst: str) -> bool:
        return (src, dst) in self._edges

    def edges_of(self, op: str) -> tuple[Transition, ...]:
        return tuple(t for t in self.transitions if op in t.ops)

    def targets(self, op: str, src: str) -> tuple[str, ...]:
        return self._targets.get((op, src), ())

    def forbidden_pairs(self) -> list[tuple[str, str]]:
        names = list(self.statuses)
        return [(a, b) for a in names for b in names if a != b and not self.allowed(a, b)]

    # ---- timings ----------------------------------------------------------------------------
    def lease_for(self, source_system: str | None) -> LeaseTimings:
        return self.lease_by_source.get(source_system or "", self.lease_default)

    def waiting_timeout(self, kind: str, source_system: str | None) -> float:
        per = self.waiting_by_source.get(source_system or "", {})
        return per.get(kind, self.waiting_timeouts[kind])

    def retry_policy_for(self, source_system: str | None, override: Mapping[str, Any] | None = None) -> RetryPolicy:
        return self.retry_by_source.get(source_system or "", self.retry_default).merged(override)

    def backoff_base(self, policy: RetryPolicy, attempt: int) -> float:
        """Delay before jitter for the retry after attempt ``attempt`` (1-based)."""
        n = max(1, attempt)
        try:
            raw = policy.initial_backoff * (policy.multiplier ** (n - 1))
        except OverflowError:
            raw = math.inf
        return min(policy.max_backoff, raw)

    def backoff_range(self, policy: RetryPolicy, attempt: int) -> tuple[float, float]:
        lo, hi = self.jitter_modes[policy.jitter]
        base = self.backoff_base(policy, attempt)
        return (lo * base, hi * base)

    def phase_timeout(self, phase: str) -> float | None:
        p = self.phases.get(phase)
        return None if p is None or p.get("timeout") is None else float(p["timeout"])

    # ---- idempotency --------------------------------------------------------------------------
    def effect_key(self, **scope: Any) -> str:
        missing = [k for k in self.idem_scope if k not in scope]
        if missing:
            raise ValueError(f"effect key needs {', '.join(missing)}")
        return sha256_hex(canonical_json({k: scope[k] for k in self.idem_scope}))

    @staticmethod
    def input_hash(value: Any) -> str:
        return sha256_hex(canonical_json(value))

    # ---- recovery ----------------------------------------------------------------------------
    def receipt_decision(self, state: str, step_class: str) -> str:
        """Decision an open receipt asks for: a pending one by its class, one already in a
        decision's receipt_state by that decision."""
        if state == "pending":
            pend = next(p for p, cp in self.crash_points.items() if cp.journal == "pending")
            return self.matrix[step_class][pend].decision
        for name, d in self.decisions.items():
            if d.get("receipt_state") == state:
                return name
        raise ValueError(f"receipt state {state!r} is not open")

    def scanner_decision(self, open_receipts: Iterable[tuple[str, str]], has_completed: bool) -> str:
        """The recovery decision for a stale item from its journal.

        ``open_receipts`` are (state, step_class) of receipts that are not completed.
        """
        picks = [self.receipt_decision(st, cls) for st, cls in open_receipts]
        if picks:
            return max(picks, key=lambda d: self.decisions[d]["rank"])
        return self.scanner["completed"] if has_completed else self.scanner["none"]

    # ---- clauses ----------------------------------------------------------------------------
    def clause(self, clause_id: str) -> Clause:
        """The clause with this id; an id the contract lacks raises :class:`UnknownClause`."""
        found = self._clause_index.get(clause_id)
        if found is None:
            raise UnknownClause(clause_id, self)
        return found

    @functools.cached_property
    def _clause_index(self) -> dict[str, Clause]:
        return {c.id: c for c in self.clauses}

    def clauses_for(self, profiles: Iterable[str] | None = None) -> tuple[Clause, ...]:
        if profiles is None:
            return self.clauses
        want = set(profiles)
        return tuple(c for c in self.clauses if c.profile in want)

    @property
    def whole_set(self) -> str | None:
        """The name of the profile set that lists every profile (the whole contract), if any."""
        every = set(self.profiles)
        return next((n for n, s in self.profile_sets.items() if set(s.profiles) == every), None)

    def expand_profiles(self, names: Iterable[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Profile names with every set name replaced by its members, in contract order, and
        the names that are neither a profile nor a set (in the order given)."""
        want: set[str] = set()
        unknown: list[str] = []
        for n in names:
            if n in self.profiles:
                want.add(n)
            elif n in self.profile_sets:
                want.update(self.profile_sets[n].profiles)
            elif n not in unknown:
                unknown.append(n)
        return tuple(p for p in self.profiles if p in want), tuple(unknown)

    def profile_closure(self, names: Iterable[str]) -> tuple[str, ...]:
        """The named profiles plus everything they require, in contract order."""
        seen: set[str] = set()
        stack = list(names)
        while stack:
            p = stack.pop()
            if p in seen:
                continue
            seen.add(p)
            stack.extend(self.profiles[p].requires)
        return tuple(p for p in self.profiles if p in seen)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
