"""Semantic checks of a merged contract document (after it passed the JSON Schema).

Each check returns problems that point at the value that is wrong.  The checks are what keep
a contract internally consistent: every name it uses is defined, every status is reachable,
terminal statuses only leave through requeue, the recovery matrix is complete and agrees with
the scanner rule, and timings make sense.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from .contract import parse_duration
from .problems import Positions, Problem
from .rules import judgement_problem

ARG_TYPES = {
    "string", "nonempty_string", "time", "duration", "object", "any", "boolean", "positive_int",
    "nonnegative_int", "source_system", "priority", "retry_policy", "status", "terminal_status",
    "waiting_kind", "error_class", "step_class", "receipt_state", "effect_key",
    "wakeup_kind",
}
GUARDS = {"cancel_requested"}
FIELD_TYPES = {"string", "integer", "boolean", "time", "status", "any"}

# ---- bounds: every count, timing and range is limited to what a run can exercise --------------
# (docs/contract.md, "Bounds", says why each is what it is).  The JSON Schema holds the integer
# bounds; these constants are the same numbers, for the checks below, the clause tests and the
# tests that keep both in step.
MAX_DURATION = 3650 * 86400.0       # ten years: epoch + every wait of a test stays exact (see the docs)
MIN_ATTEMPTS, MAX_ATTEMPTS = 2, 25  # the default policy retries at least once; a test fails every attempt
MIN_NACKS, MAX_NACKS = 2, 25         # at least one redelivery; a test nacks a message max_nacks times
MIN_BATCH, MAX_BATCH = 10, 1000      # drain_max / pending_max: one batch holds a test's racing messages; tests fill one and more
MIN_FIRST_SEQ, MAX_FIRST_SEQ = 1, 1_000_000  # an empty stream's expected_seq (first_seq - 1) is a nonnegative argument
PRIORITY_LIMIT = 1_000_000           # |priority| for min, max and default
MAX_PRIORITY_SPAN = 1000             # max - min: a test creates and claims work at every priority
MAX_MULTIPLIER = 100.0
MAX_RENEWALS = 2000                  # execution timeout / renew_interval: tests renew through a whole stint


class _Ctx:
    def __init__(self, doc: Mapping[str, Any], pos: Positions) -> None:
        self.doc = doc
        self.pos = pos
        self.problems: list[Problem] = []
        self.current = ""

    def add(self, path: tuple[Any, ...], message: str) -> None:
        """A problem with the value at ``path``."""
        self.problems.append(Problem(self.pos.at(path), message, check=self.current))

    def whole(self, path: tuple[Any, ...], message: str) -> None:
        """A problem with the mapping at ``path`` as a whole, blamed on the last file that changed it."""
        self.problems.append(Problem(self.pos.latest(path), message, check=self.current))


CHECKS: list[Callable[[_Ctx], None]] = []


def check(fn: Callable[[_Ctx], None]) -> Callable[[_Ctx], None]:
    CHECKS.append(fn)
    return fn


def semantic_problems(doc: Mapping[str, Any], pos: Positions) -> list[Problem]:
    """Every semantic problem of a merged document that passed the JSON Schema.

    Each problem's ``check`` names the check function that found it.
    """
    ctx = _Ctx(doc, pos)
    for fn in CHECKS:
        ctx.current = fn.__name__
        fn(ctx)
    return ctx.problems


@check
def _finite_numbers(c: _Ctx) -> None:
    """NaN and infinity pass the schema's number type but have no place in a contract."""

    def walk(value: Any, path: tuple[Any, ...]) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            c.add(path, f"{value!r} is not a finite number")
        elif isinstance(value, Mapping):
            for k, v in value.items():
                walk(v, path + (k,))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, path + (i,))

    walk(c.doc, ())


@check
def _statuses(c: _Ctx) -> None:
    st = c.doc["statuses"]
    initial = [n for n, s in st.items() if s.get("initial")]
    if not initial:
        c.whole(("statuses",), "exactly one status must be initial, found none")
    for n in initial[1:]:
        c.add(("statuses", n, "initial"), f"exactly one status must be initial, but {n!r} is marked initial besides {initial[0]!r}")
    for n, s in st.items():
        if s.get("initial") and s["terminal"]:
            c.add(("statuses", n, "initial"), f"initial status {n!r} cannot be terminal")
    success = [n for n, s in st.items() if s.get("success")]
    if not success:
        c.whole(("statuses",), "exactly one status must be the success status (success: true), found none")
    for n in success[1:]:
        c.add(("statuses", n, "success"), f"exactly one status must be the success status, but {n!r} is marked besides {success[0]!r}")
    for n in success:
        if not st[n]["terminal"]:
            c.add(("statuses", n, "success"), f"success status {n!r} must be terminal")
    owner: dict[str, str] = {}
    for n, s in st.items():
        k = s.get("waiting_kind")
        if k and k in owner:
            c.add(("statuses", n, "waiting_kind"), f"waiting kind {k!r} of {n!r} is already the kind of {owner[k]!r}")
        elif k:
            owner[k] = n
    if not any(s["terminal"] for s in st.values()):
        c.whole(("statuses",), "the contract needs at least one terminal status")


@check
def _transitions(c: _Ctx) -> None:
    st = c.doc["statuses"]
    ops = c.doc["operations"]
    seen: dict[tuple[str, str], int] = {}
    for i, t in enumerate(c.doc["transitions"]):
        for end in ("from", "to"):
            if t[end] not in st:
                c.add(("transitions", i, end), f"transition {end} unknown status {t[end]!r}")
        pair = (t["from"], t["to"])
        if pair[0] == pair[1]:
            c.add(("transitions", i), f"a status cannot transition to itself ({pair[0]})")
        if pair in seen:
            c.add(("transitions", i), f"duplicate transition {pair[0]} -> {pair[1]} (first at transitions[{seen[pair]}])")
        seen.setdefault(pair, i)
        for j, op in enumerate(t["ops"]):
            if op not in ops:
                c.add(("transitions", i, "ops", j), f"transition {pair[0]} -> {pair[1]} names unknown operation {op!r}")
            elif ops[op]["kind"] not in ("transition", "monitor"):
                c.add(("transitions", i, "ops", j), f"operation {op!r} of kind {ops[op]['kind']!r} cannot perform transitions")
        if t.get("guard") is not None and t["guard"] not in GUARDS:
            c.add(("transitions", i, "guard"), f"unknown guard {t['guard']!r} (known: {', '.join(sorted(GUARDS))})")
        if t.get("requeue") and not (t["from"] in st and st[t["from"]]["terminal"]):
            c.add(("transitions", i, "requeue"), f"requeue edges must leave a terminal status, not {t['from']!r}")


@check
def _terminal_edges(c: _Ctx) -> None:
    st = c.doc["statuses"]
    initial = next((n for n, s in st.items() if s.get("initial")), None)
    for i, t in enumerate(c.doc["transitions"]):
        if t["from"] in st and st[t["from"]]["terminal"]:
            if not t.get("requeue"):
                c.add(("transitions", i), f"terminal status {t['from']!r} has an outgoing edge to {t['to']!r} that is not a requeue")
            elif t["to"] != initial:
                c.add(("transitions", i, "to"), f"requeue from {t['from']!r} must return to the initial status {initial!r}")


@check
def _reachability(c: _Ctx) -> None:
    st = c.doc["statuses"]
    initial = next((n for n, s in st.items() if s.get("initial")), None)
    if initial is None:
        return
    succ: dict[str, set[str]] = {n: set() for n in st}
    for t in c.doc["transitions"]:
        if t["from"] in succ and t["to"] in st:
            succ[t["from"]].add(t["to"])
    seen, stack = {initial}, [initial]
    while stack:
        for n in succ[stack.pop()]:
            if n not in seen:
                seen.add(n)
                stack.append(n)
    for n in st:
        if n not in seen:
            c.add(("statuses", n), f"status {n!r} is unreachable from the initial status {initial!r}")
        elif not st[n]["terminal"] and not succ[n]:
            c.add(("statuses", n), f"non-terminal status {n!r} has no way out")


@check
def _forbidden_examples(c: _Ctx) -> None:
    allowed = {(t["from"], t["to"]) for t in c.doc["transitions"]}
    for i, f in enumerate(c.doc["forbidden_examples"]):
        for end in ("from", "to"):
            if f[end] not in c.doc["statuses"]:
                c.add(("forbidden_examples", i, end), f"unknown status {f[end]!r}")
        if (f["from"], f["to"]) in allowed:
            c.add(("forbidden_examples", i), f"{f['from']} -> {f['to']} is named as corruption but the transition table allows it")


@check
def _operations(c: _Ctx) -> None:
    d = c.doc
    ev = d["events"]
    for name, o in d["operations"].items():
        base = ("operations", name)
        if o.get("profile") is not None and o["profile"] not in d["profiles"]:
            c.add(base + ("profile",), f"operation {name!r} names unknown profile {o['profile']!r}")
        for a, spec in o.get("args", {}).items():
            if spec["type"] not in ARG_TYPES:
                c.add(base + ("args", a, "type"), f"argument {a!r} of {name!r} has unknown type {spec['type']!r}")
        events = o.get("event")
        names = list(events.values()) if isinstance(events, dict) else ([events] if events else [])
        if isinstance(events, dict):
            for tgt in events:
                if tgt not in d["statuses"]:
                    c.add(base + ("event", tgt), f"operation {name!r} maps unknown status {tgt!r} to an event")
        for e in names + [o.get("intent_event")] * bool(o.get("intent_event")):
            if e not in ev:
                c.add(base + ("event",), f"operation {name!r} appends unknown event type {e!r}")
        for s in list(o.get("statuses", [])) + list(o.get("intent_from", [])):
            if s not in d["statuses"]:
                c.add(base, f"operation {name!r} names unknown status {s!r}")
        if o["kind"] in ("create", "transition", "lease", "monitor") and not names and o["kind"] != "monitor":
            c.add(base, f"operation {name!r} changes items but appends no event")
        edges = [t for t in d["transitions"] if name in t["ops"]]
        if o["kind"] == "transition" and not edges:
            c.add(base, f"transition operation {name!r} performs no transition of the table")
        for t in edges:
            target_event = events.get(t["to"]) if isinstance(events, dict) else events
            if target_event in ev and not ev[target_event]["transition"]:
                c.add(base + ("event",), f"operation {name!r} moves {t['from']} -> {t['to']} but its event {target_event!r} is not a transition event")
            if isinstance(events, dict) and t["to"] not in events:
                c.add(base + ("event",), f"operation {name!r} moves to {t['to']!r} but names no event for it")
        if o.get("requires_lease") and "token" not in o.get("args", {}):
            c.add(base, f"operation {name!r} requires a lease but takes no token argument")


@check
def _events(c: _Ctx) -> None:
    fields = c.doc["work_fields"]
    for name, e in c.doc["events"].items():
        for i, f in enumerate(e["data"]):
            if f not in fields:
                c.add(("events", name, "data", i), f"event {name!r} carries unknown work field {f!r}")
            elif not fields[f].get("fold"):
                c.add(("events", name, "data", i), f"event {name!r} carries {f!r}, which is not a fold field")
    for name, f in fields.items():
        if f["type"] not in FIELD_TYPES:
            c.add(("work_fields", name, "type"), f"work field {name!r} has unknown type {f['type']!r}")
    for required in ("work_id", "status", "attempt", "owner", "lease_token", "lease_version", "lease_expires_at"):
        if required not in fields:
            c.whole(("work_fields",), f"work field {required!r} is required by the contract's operations")


@check
def _identity(c: _Ctx) -> None:
    d = c.doc
    for i, s in enumerate(d["identity"]["run_id_required_for"]):
        if s not in d["source_systems"]:
            c.add(("identity", "run_id_required_for", i), f"unknown source system {s!r}")
    for i, k in enumerate(d["identity"]["key"]):
        if k not in d["work_fields"]:
            c.add(("identity", "key", i), f"identity key names unknown work field {k!r}")
    p = d["priority"]
    if not p["min"] <= p["default"] <= p["max"]:
        at = c.pos.newest([("priority", k) for k in ("default", "min", "max")])
        c.add(at, f"priority default {p['default']} is outside [{p['min']}, {p['max']}]")
    if p["max"] - p["min"] > MAX_PRIORITY_SPAN:
        at = c.pos.newest([("priority", k) for k in ("min", "max")])
        c.add(at, f"priority range [{p['min']}, {p['max']}] spans {p['max'] - p['min']} levels, more than {MAX_PRIORITY_SPAN}")


def _dur(c: _Ctx, path: tuple[Any, ...], value: Any) -> float | None:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        if not (isinstance(value, float) and not math.isfinite(value)):  # _finite_numbers reports those
            c.add(path, str(exc))
        return None
    if seconds > MAX_DURATION:
        c.add(path, f"duration {value!r} ({seconds:.4g}s) is longer than ten years ({MAX_DURATION:g}s), the longest a run can exercise")
        return None
    return seconds


def _quiet_dur(value: Any) -> float | None:
    """Seconds of a valid duration, else None (``_dur`` reports the problem where it was written)."""
    try:
        seconds = parse_duration(value)
    except ValueError:
        return None
    return seconds if seconds <= MAX_DURATION else None


@check
def _lease(c: _Ctx) -> None:
    d = c.doc["lease"]

    def one(path: tuple[Any, ...], ttl: Any, renew: Any, grace: Any) -> None:
        t, r = _dur(c, path + ("ttl",), ttl), _dur(c, path + ("renew_interval",), renew)
        _dur(c, path + ("grace",), grace)
        if t is not None and t <= 0:
            c.add(path + ("ttl",), "lease ttl must be greater than 0")
        if t is not None and r is not None and r >= t:
            at = c.pos.newest([path + ("renew_interval",), path + ("ttl",)])
            c.add(at, f"renew_interval ({r:g}s) must be shorter than ttl ({t:g}s)")
        if r is not None and r <= 0:
            c.add(path + ("renew_interval",), "renew_interval must be greater than 0")

    one(("lease",), d["ttl"], d["renew_interval"], d["grace"])
    for src, o in d["by_source"].items():
        if src not in c.doc["source_systems"]:
            c.add(("lease", "by_source", src), f"lease override for unknown source system {src!r}")
        one(("lease", "by_source", src), o.get("ttl", d["ttl"]), o.get("renew_interval", d["renew_interval"]), o.get("grace", d["grace"]))
    _lease_within_execution(c)


def _lease_within_execution(c: _Ctx) -> None:
    """A lease lapses (ttl + grace) inside the execution budget: otherwise every stint of a dead holder
    is ended by the execution timeout first, and the heartbeat phase and the grace window never act."""
    d = c.doc["lease"]
    execution = c.doc["phases"].get("execution", {})
    limit = _quiet_dur(execution.get("timeout")) if "timeout" in execution else None
    if limit is None or execution.get("action") != "timeout":
        return
    for path, o in [(("lease",), {}), *((("lease", "by_source", s), o) for s, o in d["by_source"].items())]:
        ttl, grace = _quiet_dur(o.get("ttl", d["ttl"])), _quiet_dur(o.get("grace", d["grace"]))
        renew = _quiet_dur(o.get("renew_interval", d["renew_interval"]))
        which = f" for {path[-1]}" if len(path) > 1 else ""
        if ttl is not None and grace is not None and ttl + grace >= limit:
            at = c.pos.newest([path + ("ttl",), path + ("grace",), ("phases", "execution", "timeout")])
            c.add(at, f"lease ttl + grace ({ttl + grace:g}s{which}) must be shorter "
                      f"than the execution timeout ({limit:g}s), or the heartbeat phase never ends a stint")
        if renew and limit / renew > MAX_RENEWALS:
            at = c.pos.newest([path + ("renew_interval",), ("phases", "execution", "timeout")])
            c.add(at, f"the execution timeout ({limit:g}s) is {limit / renew:.0f} renew intervals ({renew:g}s{which}), "
                      f"more than {MAX_RENEWALS}: a stint kept alive by renewals must end within that many")


@check
def _ask(c: _Ctx) -> None:
    """Every terminal status has an ask outcome, and only terminal statuses; the outcome of
    unfinished work is none of a finished one's (timed_out is never collapsed into another)."""
    a = c.doc["ask"]
    terminal = [n for n, s in c.doc["statuses"].items() if s.get("terminal")]
    for n in terminal:
        if n not in a["outcomes"]:
            c.whole(("ask", "outcomes"), f"no ask outcome for terminal status {n!r}")
    for n in a["outcomes"]:
        if n not in terminal:
            c.add(("ask", "outcomes", n), f"ask outcome for {n!r}, which is not a terminal status")
    if a["unfinished"] in a["outcomes"].values():
        c.add(("ask", "unfinished"), f"the outcome of unfinished work ({a['unfinished']!r}) is also a finished target's outcome")


@check
def _waiting(c: _Ctx) -> None:
    kinds = {s["waiting_kind"] for s in c.doc["statuses"].values() if s.get("waiting_kind")}
    w = c.doc["waiting"]
    for k in kinds - set(w["timeouts"]):
        c.whole(("waiting", "timeouts"), f"no default timeout for waiting kind {k!r}")
    for k, v in w["timeouts"].items():
        if k not in kinds:
            c.add(("waiting", "timeouts", k), f"timeout for unknown waiting kind {k!r}")
        dv = _dur(c, ("waiting", "timeouts", k), v)
        if dv is not None and dv <= 0:
            c.add(("waiting", "timeouts", k), "waiting timeout must be greater than 0")
    for src, o in w["by_source"].items():
        if src not in c.doc["source_systems"]:
            c.add(("waiting", "by_source", src), f"waiting override for unknown source system {src!r}")
        for k, v in o.get("timeouts", {}).items():
            path = ("waiting", "by_source", src, "timeouts", k)
            if k not in kinds:
                c.add(path, f"timeout for unknown waiting kind {k!r}")
            dv = _dur(c, path, v)
            if dv is not None and dv <= 0:
                c.add(path, "waiting timeout must be greater than 0")


@check
def _retry(c: _Ctx) -> None:
    r = c.doc["retry"]
    for mode, (lo, hi) in r["jitter_modes"].items():
        if not 0 <= lo <= hi <= 1:
            c.add(("retry", "jitter_modes", mode), f"jitter mode {mode!r} range must satisfy 0 <= lo <= hi <= 1")

    def one(path: tuple[Any, ...], p: Mapping[str, Any]) -> None:
        if "jitter" in p and p["jitter"] not in r["jitter_modes"]:
            c.add(path + ("jitter",), f"unknown jitter mode {p['jitter']!r}")
        if "multiplier" in p and p["multiplier"] < 1:
            c.add(path + ("multiplier",), f"backoff multiplier {p['multiplier']} must be at least 1")
        ib = _quiet_dur(p["initial_backoff"] if "initial_backoff" in p else r["policy"]["initial_backoff"])
        mb = _quiet_dur(p["max_backoff"] if "max_backoff" in p else r["policy"]["max_backoff"])
        for k in ("initial_backoff", "max_backoff"):
            if k in p:
                _dur(c, path + (k,), p[k])
        written = [path + (k,) for k in ("max_backoff", "initial_backoff") if k in p]
        if ib is not None and mb is not None and mb < ib and written:
            c.add(c.pos.newest(written), f"max_backoff ({mb:g}s) is below initial_backoff ({ib:g}s)")

    one(("retry", "policy"), r["policy"])
    for src, o in r["by_source"].items():
        if src not in c.doc["source_systems"]:
            c.add(("retry", "by_source", src), f"retry override for unknown source system {src!r}")
        one(("retry", "by_source", src, "policy"), o.get("policy", {}))
    if not any(v["retryable"] for v in r["error_classes"].values()):
        c.whole(("retry", "error_classes"), "at least one error class must be retryable")
    if all(v["retryable"] for v in r["error_classes"].values()):
        c.whole(("retry", "error_classes"), "at least one error class must be non-retryable")


@check
def _phases(c: _Ctx) -> None:
    for name in ("claim", "execution", "waiting", "heartbeat"):
        if name not in c.doc["phases"]:
            c.whole(("phases",), f"phase {name!r} is missing")
    for name, p in c.doc["phases"].items():
        if name in ("claim", "execution") and "timeout" not in p:
            c.add(("phases", name), f"phase {name!r} needs a timeout")
        if "timeout" in p:
            v = _dur(c, ("phases", name, "timeout"), p["timeout"])
            if v is not None and v <= 0:
                c.add(("phases", name, "timeout"), "phase timeout must be greater than 0")
    for name in ("heartbeat", "execution", "waiting"):
        if name not in c.doc["timeout_reasons"]:
            c.whole(("timeout_reasons",), f"no status_reason for phase {name!r}")


@check
def _idempotency(c: _Ctx) -> None:
    idem = c.doc["idempotency"]
    states = idem["receipt_states"]
    for s in ("pending", "completed", "unknown", "needs_inspection"):
        if s not in states:
            c.whole(("idempotency", "receipt_states"), f"receipt state {s!r} is required")
    for i, (a, b) in enumerate(idem["receipt_transitions"]):
        for j, s in enumerate((a, b)):
            if s not in states:
                c.add(("idempotency", "receipt_transitions", i, j), f"unknown receipt state {s!r}")
    for i, k in enumerate(idem["scope"]):
        if k not in ("work_id", "step_id", "tool"):
            c.add(("idempotency", "scope", i), f"effect key scope may use work_id, step_id and tool, not {k!r}")
        elif k in idem["scope"][:i]:
            c.add(("idempotency", "scope", i), f"effect key scope names {k!r} twice")
    retention = _dur(c, ("idempotency", "retention"), idem["retention"])
    if retention is not None and retention <= 0:
        c.add(("idempotency", "retention"), "receipt retention must be greater than 0")


@check
def _errors(c: _Ctx) -> None:
    for code in ("invalid_argument", "not_found", "invalid_transition", "stale_lease", "idempotency_conflict",
                 "concurrent_append", "unsupported", "timeout", "adapter_crashed", "protocol_error"):
        if code not in c.doc["errors"]:
            c.whole(("errors",), f"error code {code!r} is required")


@check
def _recovery(c: _Ctx) -> None:
    d = c.doc
    points, classes, decisions, allow = d["crash_points"], d["step_classes"], d["decisions"], d["effect_allowances"]
    ranks: dict[int, str] = {}
    marks: dict[str, str] = {}
    for dec, v in decisions.items():
        if v.get("receipt_state") is not None and v["receipt_state"] not in d["idempotency"]["receipt_states"]:
            c.add(("decisions", dec, "receipt_state"), f"unknown receipt state {v['receipt_state']!r}")
        elif v.get("receipt_state") in marks:
            c.add(("decisions", dec, "receipt_state"),
                  f"decisions {marks[v['receipt_state']]!r} and {dec!r} both mark receipts {v['receipt_state']!r}")
        elif v.get("receipt_state") is not None:
            marks[v["receipt_state"]] = dec
        if v["rank"] in ranks:
            at = c.pos.newest([("decisions", ranks[v["rank"]], "rank"), ("decisions", dec, "rank")])
            c.add(at, f"decisions {ranks[v['rank']]!r} and {dec!r} share rank {v['rank']}, so neither wins")
        ranks.setdefault(v["rank"], dec)
    if not any(p["journal"] == "pending" for p in points.values()):
        c.whole(("crash_points",), "no crash point has journal 'pending', so the scanner's by_class rule has no matrix entry to use")
    for key in ("completed", "none"):
        if d["scanner"][key] not in decisions:
            c.add(("scanner", key), f"unknown decision {d['scanner'][key]!r}")
    for cls, row in d["matrix"].items():
        if cls not in classes:
            c.add(("matrix", cls), f"matrix row names unknown step class {cls!r}")
            continue
        for pt, e in row.items():
            path = ("matrix", cls, pt)
            if pt not in points:
                c.add(path, f"matrix entry names unknown crash point {pt!r}")
                continue
            if e["decision"] not in decisions:
                c.add(path + ("decision",), f"unknown decision {e['decision']!r}")
            if e["effects"] not in allow:
                c.add(path + ("effects",), f"unknown effect allowance {e['effects']!r}")
            cp = points[pt]
            if cp.get("waiting"):
                expect = "none"
            elif cp["journal"] == "completed":
                expect = d["scanner"]["completed"]
            elif cp["journal"] == "none":
                expect = d["scanner"]["none"]
            else:
                expect = None
            if expect is not None and e["decision"] != expect:
                c.add(path + ("decision",), f"the scanner decides {expect!r} at {pt!r} (journal {cp['journal']}), not {e['decision']!r}")
        for pt in points:
            if pt not in row:
                c.whole(("matrix", cls), f"matrix row {cls!r} has no entry for crash point {pt!r}")
        pend = [(pt, row[pt]["decision"]) for pt in points if pt in row and points[pt]["journal"] == "pending"]
        if len({dec for _, dec in pend}) > 1:
            at = c.pos.newest([("matrix", cls, pt, "decision") for pt, _ in pend])
            said = ", ".join(f"{pt!r} -> {dec!r}" for pt, dec in pend)
            c.add(at, f"crash points that look the same to a scanner (journal pending) must be decided alike, "
                      f"but row {cls!r} decides {said}")
        if classes[cls]["effect"] == "none":
            for pt, e in row.items():
                if e["effects"] in allow and allow[e["effects"]]["max"] != 0:
                    c.add(("matrix", cls, pt, "effects"), f"step class {cls!r} has no effect, so its allowance must be 'none'")
    for cls in classes:
        if cls not in d["matrix"]:
            c.whole(("matrix",), f"matrix has no row for step class {cls!r}")
    for name, a in allow.items():
        if a.get("max") is not None and a["max"] < a["min"]:
            c.add(("effect_allowances", name), f"allowance {name!r} has max below min")


@check
def _handouts(c: _Ctx) -> None:
    d = c.doc
    clauses = {cl["id"] for cl in d["clauses"]}
    for profile, r in (d.get("handouts") or {}).items():
        base = ("handouts", profile)
        if profile not in d.get("profiles", {}):
            c.whole(base, f"unknown profile {profile!r}")
        op = d["operations"].get(r["operation"])
        if op is None or op.get("profile") != profile:
            c.add(base + ("operation",), f"{r['operation']!r} is not an operation of profile {profile!r}")
        if r["fence"] not in d["errors"]:
            c.add(base + ("fence",), f"unknown error code {r['fence']!r}")
    kind = d["spawn"].get("wakes_parent")
    if kind is not None and kind not in (d.get("wakeups") or {}).get("kinds", ()):
        c.add(("spawn", "wakes_parent"), f"{kind!r} is not one of the wakeup kinds (wakeups.kinds)")
    for name, w in (d.get("promise_windows") or {}).items():
        base = ("promise_windows", name)
        if w["operation"] not in d["operations"]:
            c.add(base + ("operation",), f"unknown operation {w['operation']!r}")
        if w["clause"] not in clauses:
            c.add(base + ("clause",), f"unknown clause {w['clause']!r}")


@check
def _recovery_rules(c: _Ctx) -> None:
    d = c.doc
    for name, v in d["decisions"].items():
        if v["requeue"] and v.get("quarantine"):
            c.add(("decisions", name, "quarantine"), f"decision {name!r} both requeues and quarantines the item")
    dec = d["attempts_exhausted"]["decision"]
    if dec not in d["decisions"]:
        c.add(("attempts_exhausted", "decision"), f"unknown decision {dec!r}")
    elif d["decisions"][dec]["requeue"] or not d["decisions"][dec].get("quarantine"):
        c.add(("attempts_exhausted", "decision"), f"decision {dec!r} does not quarantine the item, so a crash loop would not end")
    marked = d["stale"].get("monitor_marked")
    if not marked:
        return
    base = ("stale", "monitor_marked")
    by = d["operations"].get(marked["by"])
    if by is None or by["kind"] != "monitor" or not by.get("event"):
        c.add(base + ("by",), f"{marked['by']!r} is not a monitor operation that appends an event")
    if marked["reason"] not in d["timeout_reasons"]:
        c.add(base + ("reason",), f"unknown timeout reason {marked['reason']!r}")
    for i, f in enumerate(marked.get("unless", ())):
        if d["work_fields"].get(f, {}).get("type") != "boolean":
            c.add(base + ("unless", i), f"{f!r} is not a boolean work field")


# The effect steps the kit's operations act on (the reference ledger and the harness model
# write every snapshot change of these operations from them), and what operations work out
# themselves for an effect's ``arg:`` besides their arguments.
REQUIRED_EFFECTS = {"close_out": ("move",), "cancel": ("move", "intent"), "requeue": ("move",), "expire": ("move",),
                    "recover": ("release", "requeue", "quarantine")}
WORKED_OUT = {"expire": ("reason",), "recover": ("decision",)}
_NOT_WRITTEN = ("work_id", "status")  # the id never changes; the status is the edge's target


def _like_cycle(ops: Mapping[str, Any], start: str) -> bool:
    seen = {start}
    at = start
    while True:
        op, _, step = at.partition(".")
        like = ops.get(op, {}).get("effects", {}).get(step, {}).get("like")
        if not like:
            return False
        if like in seen:
            return True
        seen.add(like)
        at = like


@check
def _effects(c: _Ctx) -> None:
    d = c.doc
    ops, fields = d["operations"], d["work_fields"]
    for name, steps in REQUIRED_EFFECTS.items():
        if name in ops:
            for step in steps:
                if step not in ops[name].get("effects", {}):
                    c.add(("operations", name), f"operation {name!r} has no effects.{step}: what it writes is not said")
    for name, o in ops.items():
        inputs = set(o.get("args", {})) | set(WORKED_OUT.get(name, ()))
        for step, s in o.get("effects", {}).items():
            base = ("operations", name, "effects", step)
            if step == "intent" and not o.get("intent_event"):
                c.add(base, f"operation {name!r} has an intent step but no intent_event")
            like = s.get("like")
            if like:
                lop, _, lstep = like.partition(".")
                if lstep not in ops.get(lop, {}).get("effects", {}):
                    c.add(base + ("like",), f"{like!r} is not an effect step of the contract")
                elif _like_cycle(ops, f"{name}.{step}"):
                    c.add(base + ("like",), f"effect steps are like each other in a cycle through {like!r}")
            named = [(("set", f), f) for f in s.get("set", {})]
            named += [((key, i), f) for key in ("clear", "may_keep", "may_clear") for i, f in enumerate(s.get(key, ()))]
            for sub, f in named:
                if f not in fields:
                    c.add(base + sub, f"unknown work field {f!r}")
                elif f in _NOT_WRITTEN:
                    c.add(base + sub, f"an effect cannot write {f!r}")
            for f in set(s.get("set", {})) & set(s.get("clear", ())):
                c.add(base + ("set", f), f"{f!r} is both set and cleared")
            for f, v in s.get("set", {}).items():
                if isinstance(v, str) and v != "now":
                    kind, _, param = v.partition(":")
                    wanted = [param] if kind == "arg" else re.findall(r"\{([a-z][a-z0-9_]*)\}", param) if kind == "text" else []
                    for w in wanted:
                        if w not in inputs:
                            c.add(base + ("set", f), f"{name!r} has no argument or worked-out value {w!r}")
                    if kind == "reason" and param not in d["timeout_reasons"]:
                        c.add(base + ("set", f), f"unknown timeout reason {param!r}")
            written = set(s.get("set", {})) | set(s.get("clear", ()))
            for i, f in enumerate(s.get("may_keep", ())):
                if f in fields and not like and f not in written:
                    c.add(base + ("may_keep", i), f"{f!r} may be kept, but the step does not write it")
            for i, f in enumerate(s.get("may_clear", ())):
                if f in written:
                    c.add(base + ("may_clear", i), f"{f!r} may be cleared, but the step writes it anyway")


@check
def _profiles_and_clauses(c: _Ctx) -> None:
    d = c.doc
    prof = d["profiles"]
    for name, p in prof.items():
        for i, r in enumerate(p["requires"]):
            if r not in prof:
                c.add(("profiles", name, "requires", i), f"profile {name!r} requires unknown profile {r!r}")
    # cycles
    state: dict[str, int] = {}
    reported: set[tuple[Any, ...]] = set()

    def visit(n: str, trail: list[str]) -> None:
        if state.get(n) == 2 or n not in prof:
            return
        if state.get(n) == 1:
            cycle = trail[trail.index(n):] + [n]
            at = ("profiles", n, "requires", prof[n]["requires"].index(cycle[1]))
            if at not in reported:
                reported.add(at)
                c.add(at, f"profiles require each other in a cycle: {' -> '.join(cycle)}")
            return
        state[n] = 1
        for r in prof[n]["requires"]:
            visit(r, trail + [n])
        state[n] = 2

    for n in prof:
        visit(n, [])
    seen: dict[str, int] = {}
    used_profiles = set()
    for i, cl in enumerate(d["clauses"]):
        if cl["id"] in seen:
            c.add(("clauses", i, "id"), f"duplicate clause id {cl['id']!r} (first at {c.pos.at(('clauses', seen[cl['id']], 'id'))})")
        seen.setdefault(cl["id"], i)
        if cl["profile"] not in prof:
            c.add(("clauses", i, "profile"), f"clause {cl['id']!r} names unknown profile {cl['profile']!r}")
        if cl["source"] not in d["seeds"]:
            c.add(("clauses", i, "source"), f"clause {cl['id']!r} cites {cl['source']!r}, which is not among the contract's seeds")
        if not cl["id"].startswith(_prefix(cl["profile"]) + "."):
            c.add(("clauses", i, "id"), f"clause id {cl['id']!r} must start with its profile's prefix {_prefix(cl['profile'])!r}")
        used_profiles.add(cl["profile"])
    for name in prof:
        if name not in used_profiles:
            c.add(("profiles", name), f"profile {name!r} has no clauses, so nothing could certify it")
    _profile_sets(c)


@check
def _blame_ids(c: _Ctx) -> None:
    """Every clause the contract's blame data names (fields, operations, arguments, error codes) exists, and
    an argument out of range always has a clause to blame."""
    d = c.doc
    known = {cl["id"] for cl in d["clauses"]}

    def need(path: tuple[Any, ...], cid: Any, what: str) -> None:
        if cid not in known:
            c.add(path, f"{what} blames unknown clause {cid!r}")

    for name, f in d["work_fields"].items():
        if f.get("blame") is not None:
            need(("work_fields", name, "blame"), f["blame"], f"work field {name!r}")
    for op, o in d["operations"].items():
        if o.get("blame") is not None:
            need(("operations", op, "blame"), o["blame"], f"operation {op!r}")
        for a, spec in o.get("args", {}).items():
            blame = spec.get("blame")
            pairs = blame.items() if isinstance(blame, dict) else [(None, blame)] if blame is not None else []
            for key, cid in pairs:
                need(("operations", op, "args", a, "blame") + ((key,) if key else ()), cid, f"argument {a!r} of {op!r}")
    for code, e in d["errors"].items():
        if e.get("blame") is not None:
            need(("errors", code, "blame"), e["blame"], f"error {code!r}")
    if "invalid_argument" in d["errors"] and not d["errors"]["invalid_argument"].get("blame"):
        c.add(("errors", "invalid_argument"), "error 'invalid_argument' names no blame clause for arguments without their own")
    judged: dict[str, str] = {}
    for i, cl in enumerate(d["clauses"]):
        for j, name in enumerate(cl.get("judges", ())):
            why = judgement_problem(d.get("operations", {}), d.get("work_fields", {}), name)
            if why is not None:
                c.add(("clauses", i, "judges", j), f"clause {cl['id']!r} takes an unknown judgement: {why}")
            elif name in judged:
                c.add(("clauses", i, "judges", j), f"clause {cl['id']!r} takes judgement {name!r}, which {judged[name]!r} already takes")
            judged.setdefault(name, cl["id"])

def _profile_sets(c: _Ctx) -> None:
    """Each set names known profiles and what they require, no set shadows a profile, and one
    set lists every profile: the whole contract has a name."""
    prof = c.doc["profiles"]
    sets = c.doc.get("profile_sets") or {}
    for name, s in sets.items():
        if name in prof:
            c.add(("profile_sets", name), f"profile set {name!r} has the name of a profile")
        members = s["profiles"]
        for i, p in enumerate(members):
            if p not in prof:
                c.add(("profile_sets", name, "profiles", i), f"profile set {name!r} names unknown profile {p!r}")
                continue
            for r in prof[p]["requires"]:
                if r in prof and r not in members:
                    c.add(("profile_sets", name, "profiles", i),
                          f"profile set {name!r} has {p!r} but not {r!r}, which {p!r} requires")
    if not any(set(s["profiles"]) == set(prof) for s in sets.values()):
        missing = {n: sorted(set(prof) - set(s["profiles"])) for n, s in sets.items()}
        where = ("profile_sets", next(iter(sets)), "profiles") if sets else ("profiles",)
        detail = "; ".join(f"{n} lacks {', '.join(m)}" for n, m in missing.items()) or "there are none"
        c.add(where, f"no profile set lists every profile, so the whole contract has no name ({detail})")


def _prefix(profile: str) -> str:
    return {"idempotency": "idem"}.get(profile, profile)
