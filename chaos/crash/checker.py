"""The recovery checker: what must be true after a worker dies at a given moment.

Everything here follows from the contract: the crash point's journal, the matrix (decision
and effect allowance per step class and point), the scanner rule, the decisions' receipt
states and the fold rule.  The checker is handed observations (what the ledger showed before
and after recovery and at the end, what the sink applied) and returns violations, each naming
the clause it breaks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ledgercheck.chaos.safety.workload import Item, Workload
from ledgercheck.spec import Allowance, Spec, default_spec, rules
from ledgercheck.spec.rules import fold

from .points import DONE, OP_AFTER, STAGES, completed_point, fresh_point, leased_status, stage_point

CLAUSE_ORDER = (
    "recovery.marker_kept", "recovery.scan", "recovery.matrix", "recovery.attempts_exhausted",
    "recovery.receipt_marking", "recovery.waiting_untouched", "recovery.quarantine.visible", "recovery.no_loss",
    "recovery.effects_allowed", "recovery.fencing_after_takeover", "eventlog.fold",
)
ZERO = Allowance("zero", 0, 0)
AT_MOST_ONCE = Allowance("at_most_once", 0, 1, quarantined=True)
TIME_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Violation:
    clause: str
    message: str

    def __post_init__(self) -> None:
        default_spec().clause(self.clause)  # an id the contract lacks raises UnknownClause: a checker bug

    def __str__(self) -> str:
        return f"[{self.clause}] {self.message}"


@dataclass(frozen=True)
class Alt:
    """One legitimate state of the crashed item at the moment of the kill."""

    stage: str
    step: int | None
    completed: frozenset[int]
    journal: Mapping[str, str]  # step_id -> pending|completed (absent: no receipt)
    status: str
    crashed: int | None  # the effect step the crash point is about
    point: str | None  # the contract crash point for the crashed step's allowance


@dataclass
class Observation:
    """What a window saw; filled in by the scenario runner."""

    ids: Mapping[str, str]
    crash: Mapping[str, Any] | None
    pre: Mapping[str, Any]
    early_victims: list[Mapping[str, Any]]
    victims: list[Mapping[str, Any]]
    post: Mapping[str, Any]
    final: Mapping[str, Any]
    quarantined_listed: list[str]
    applied: Mapping[str, int]
    stale_applied: Mapping[str, int] = field(default_factory=dict)  # key -> effects the stale worker applied
    stale_writes: list[Mapping[str, Any]] | None = None  # None: not a pause-and-takeover window
    took_over: bool = False
    notes: list[str] = field(default_factory=list)
    stale_session: str = "stale"
    scan_killed: bool = False  # the first scan at the lapse was SIGKILLed inside; ``victims`` is the next scan's


# ---------------------------------------------------------------------------------- states
def _next_effect(item: Item, step: int | None) -> int | None:
    if step is None:
        return None
    return next((j for j in range(step, len(item.steps)) if item.steps[j].is_effect), None)


def make_alt(spec: Spec, item: Item, stage: str, step: int | None, completed: Iterable[int]) -> Alt:
    done = frozenset(completed)
    journal = {item.steps[j].step_id: "completed" for j in done if j < len(item.steps) and item.steps[j].is_effect}
    if step is not None and step < len(item.steps) and item.steps[step].is_effect and STAGES[stage].journal in ("pending", "completed"):
        journal[item.steps[step].step_id] = STAGES[stage].journal
    if stage == "unclaimed":
        status = spec.initial_status
    elif stage == "waiting":
        kind = item.steps[step].wait_kind if step is not None else None
        status = spec.waiting_statuses.get(kind or "", "?")
    elif stage == "closed":
        status = DONE
    else:
        status = leased_status(spec)
    crashed = None if stage == "closed" else _next_effect(item, step)
    return Alt(stage, step, done, journal, status, crashed, stage_point(spec, stage))


def alternatives(spec: Spec, item: Item, ctx: Mapping[str, Any]) -> list[Alt]:
    """The states a kill with this context may leave: the stage before the operation in flight,
    and (if that operation changes anything) the stage after it."""
    stage, step, done = ctx["stage"], ctx.get("step"), set(ctx.get("completed") or ())
    alts = [make_alt(spec, item, stage, step, done)]
    op = ctx.get("op")
    if op in OP_AFTER:
        after, astep = OP_AFTER[op], step
        if op == "resume" and step is not None:
            done = done | {step}
            astep = next((i for i in range(len(item.steps)) if i not in done), None)
        if op == "effect_record" and step is not None:
            done = done | {step}
        alts.append(make_alt(spec, item, after, astep, done))
    return alts


def step_allowance(spec: Spec, item: Item, j: int, alt: Alt | None, quarantined: bool,
                   by_attempts: bool = False) -> Allowance:
    """The allowed number of applied effects of step ``j`` after recovery and completion.
    ``by_attempts``: the item was quarantined because its attempts were used up, so the crashed
    step never runs again: it has what it had at the kill (none when its receipt was not begun,
    at most one when it was pending; a completed step keeps its row's allowance)."""
    cls_ = item.steps[j].step_class or ""
    row = spec.matrix[cls_]
    if alt is None:
        return spec.allowances[row[fresh_point(spec)].effects]
    if alt.stage == "closed" or (j in alt.completed and j != alt.crashed):
        return spec.allowances[row[completed_point(spec)].effects]
    if j == alt.crashed:
        journal = spec.crash_points[alt.point].journal if alt.point else "none"
        if quarantined and by_attempts and journal == "none":
            return ZERO
        if quarantined and by_attempts and journal == "pending":
            return next((a for a in spec.allowances.values() if a.quarantined), AT_MOST_ONCE)
        return spec.allowances[row[alt.point or fresh_point(spec)].effects]
    if quarantined:
        return ZERO
    return spec.allowances[row[fresh_point(spec)].effects]


def expected_decision(spec: Spec, item: Item, alt: Alt, attempt: int | None) -> tuple[str, bool]:
    """The recovery decision for the crashed item, and whether the attempts rule produced it."""
    if alt.status != leased_status(spec):
        return "none", False
    classes = {s.step_id: s.step_class for s in item.steps if s.is_effect}
    d = rules.recovery_decision(spec, {"source_system": item.source_system, "attempt": attempt},
                                [(state, classes[sid]) for sid, state in alt.journal.items()], item.retry_policy)
    return d.name, d.by_attempts


# ---------------------------------------------------------------------------------- fold
def fold_problems(spec: Spec, work: Mapping[str, Any], events: list[Mapping[str, Any]]) -> list[str]:
    folded = fold(spec, events)
    out = []
    for name, wf in spec.work_fields.items():
        if not wf.fold or wf.compare == "none":
            continue
        a, b = work.get(name), folded.get(name)
        if wf.compare == "presence":
            same = (a is None) == (b is None)
        elif wf.compare == "time" and isinstance(a, int | float) and isinstance(b, int | float):
            same = abs(a - b) <= TIME_TOLERANCE
        else:
            same = a == b
        if not same:
            out.append(f"{name}: snapshot {a!r}, events fold to {b!r}")
    return out


# ---------------------------------------------------------------------------------- one window
@dataclass
class Verdict:
    violations: list[Violation]
    clauses: list[str]
    alt: Alt | None
    decision_expected: str
    decision_observed: str
    allowance: Allowance | None
    effects_observed: int | None


def _receipt_states(entry: Mapping[str, Any] | None) -> dict[str, str]:
    if not entry:
        return {}
    return {r.get("step_id"): r.get("state") for r in entry.get("receipts") or [] if isinstance(r, Mapping)}


def _unrecorded(entry: Mapping[str, Any] | None) -> list[str]:
    """Step ids of completed receipts that hold no result.

    The worker always records a result (a mapping naming the provider's answer, the worker and its
    session: ``Worker.receipt_result``), so a completed receipt without one lost the outcome its
    in-flight marker stood for: a receipt completed in one write and given its result in another,
    with a kill in between, say."""
    return [str(r.get("step_id")) for r in (entry or {}).get("receipts") or []
            if isinstance(r, Mapping) and r.get("state") == "completed" and r.get("result") is None]


def check_window(spec: Spec, workload: Workload, point: str, obs: Observation) -> Verdict:
    """Check one crash window; when the kill left an ambiguous state, the best-matching one counts."""
    ctx = (obs.crash or {}).get("ctx") or {}
    crashed_key = ctx.get("item")
    item = workload.item(crashed_key) if crashed_key else None
    if item is None:
        return _check(spec, workload, point, obs, None, None)
    alts = alternatives(spec, item, ctx)
    pre = obs.pre.get(item.key) or {}
    seen_status = (pre.get("work") or {}).get("status")
    seen_journal = {k: v for k, v in _receipt_states(pre).items() if v is not None}
    matching = [a for a in alts if a.status == seen_status and dict(a.journal) == seen_journal]
    results = [_check(spec, workload, point, obs, item, a) for a in (matching or alts)]
    return min(results, key=lambda v: len(v.violations))


@dataclass
class _Case:
    """One crash window being judged: what the rules below share, and what they find."""

    spec: Spec
    workload: Workload
    obs: Observation
    item: Item | None
    alt: Alt | None
    where: str
    wid: str | None
    V: list[Violation] = field(default_factory=list)
    checked: set[str] = field(default_factory=lambda: {
        "recovery.scan", "recovery.matrix", "recovery.no_loss", "recovery.effects_allowed",
        "recovery.quarantine.visible", "eventlog.fold"})
    d_exp: str = "none"  # the decision the contract expects for the crashed item
    d_obs: str = "none"  # the decision recovery reported for it
    by_attempts: bool = False  # the attempts rule turned the journal's decision into d_exp
    waiting_before: set[str] = field(default_factory=set)  # items waiting before recovery

    @property
    def d_rule(self) -> str:
        return "recovery.attempts_exhausted" if self.by_attempts else "recovery.matrix"

    def add(self, clause: str, text: str) -> None:
        self.V.append(Violation(clause, f"{self.where}: {text}"))


def _where(point: str, item: Item | None, alt: Alt | None) -> str:
    where = f"after a kill at {point}"
    if alt is not None:
        where += f" ({alt.stage}"
        if alt.step is not None and item is not None and alt.step < len(item.steps):
            where += f", step {item.steps[alt.step].step_id}"
        where += ")"
    return where


def _check(spec: Spec, workload: Workload, point: str, obs: Observation, item: Item | None, alt: Alt | None) -> Verdict:
    c = _Case(spec, workload, obs, item, alt, _where(point, item, alt), obs.ids.get(item.key) if item else None)
    _check_kill_left(c)
    _check_scan(c)
    _check_recovery_did(c)
    _check_waiting_untouched(c)
    _check_end_state(c)
    if obs.stale_writes is not None:
        c.checked.add("recovery.fencing_after_takeover")
        c.V.extend(_fencing(spec, workload, obs, item, c.where))
    allowance = None
    observed = None
    if item is not None and alt is not None and alt.crashed is not None:
        fw = (obs.final.get(item.key) or {}).get("work") or {}
        expect_q = rules.quarantines(spec, c.d_exp)
        allowance = step_allowance(spec, item, alt.crashed, alt, expect_q and bool(fw.get("quarantined")), c.by_attempts)
        s = item.steps[alt.crashed]
        key = spec.effect_key(work_id=obs.ids[item.key], step_id=s.step_id, tool=s.tool)
        # what the world saw: a stale worker's application counts (the sink is the ground truth)
        observed = obs.applied.get(key, 0) + obs.stale_applied.get(key, 0)
    checked = c.checked | {v.clause for v in c.V}
    clauses = [cl for cl in CLAUSE_ORDER if cl in checked] + sorted(cl for cl in checked if cl not in CLAUSE_ORDER)
    return Verdict(c.V, clauses, alt, c.d_exp, c.d_obs, allowance, observed)


def _check_kill_left(c: _Case) -> None:
    """The state the kill left: the journal and status the worker's last acknowledged write
    leaves (recovery.marker_kept, recovery.no_loss), and the decision the contract expects."""
    item, alt = c.item, c.alt
    if item is None or alt is None:
        return
    c.checked.add("recovery.marker_kept")
    pre = c.obs.pre.get(item.key) or {}
    seen = _receipt_states(pre)
    for s in item.steps:
        if not s.is_effect:
            continue
        want = alt.journal.get(s.step_id, "none")
        got = seen.get(s.step_id) or "none"
        if want != got:
            c.add("recovery.marker_kept", f"{item.key} receipt {s.step_id} ({s.step_class}) "
                  f"is {got}, the worker's last acknowledged write leaves it {want}")
    for sid in _unrecorded(pre):
        c.add("recovery.marker_kept", f"{item.key} receipt {sid} is completed without the "
              "result the worker recorded (the in-flight marker is gone, the outcome was not stored)")
    status = (pre.get("work") or {}).get("status")
    if status != alt.status:
        c.add("recovery.no_loss", f"{item.key} is {status} before recovery, "
              f"the worker's last acknowledged write leaves it {alt.status}")
    c.d_exp, c.by_attempts = expected_decision(c.spec, item, alt, (pre.get("work") or {}).get("attempt"))
    if c.by_attempts:
        c.checked.add("recovery.attempts_exhausted")


def _check_scan(c: _Case) -> None:
    """The scan: it took only stale work, never waiting work, and decided for the crashed item
    what the contract says (recovery.scan, recovery.waiting_untouched, recovery.matrix)."""
    spec, obs, item, wid = c.spec, c.obs, c.item, c.wid
    waits = set(spec.waiting_statuses.values())
    c.waiting_before = {k for k, e in obs.pre.items() if (e.get("work") or {}).get("status") in waits}
    if c.waiting_before:
        c.checked.add("recovery.waiting_untouched")
    by_wid = {v.get("work_id"): v for v in obs.victims if isinstance(v, Mapping)}
    key_of = {w: k for k, w in obs.ids.items()}
    for v in obs.early_victims:
        k = key_of.get(v.get("work_id"), v.get("work_id"))
        if k in c.waiting_before:
            c.add("recovery.waiting_untouched", f"recovery took waiting work {k} ({v.get('decision')}, {v.get('reason')})")
        else:
            c.add("recovery.scan", f"recovery took {k} ({v.get('decision')}) before its lease "
                  "lapsed (lease_expires_at + grace for its source not yet passed)")
    if wid is not None and wid in by_wid:
        c.d_obs = str(by_wid[wid].get("decision"))
    for vwid, v in by_wid.items():
        k = key_of.get(vwid, vwid)
        if vwid == wid and c.d_exp != "none":
            continue
        if k in c.waiting_before:
            c.add("recovery.waiting_untouched", f"recovery took waiting work {k} "
                  f"(decision {v.get('decision')}, {v.get('reason')})")
        else:
            status = ((obs.pre.get(k) or {}).get("work") or {}).get("status")
            c.add("recovery.scan", f"recovery took {k}, which was {status} and not stale (decision {v.get('decision')})")
    if item is None or c.d_exp == "none":
        return
    pw0 = ((obs.post.get(item.key) or {}).get("work") or {})
    acted = (pw0.get("status") == spec.initial_status if rules.requeues(spec, c.d_exp)
             else bool(pw0.get("quarantined")))
    if wid not in by_wid and obs.scan_killed and acted:
        c.d_obs = c.d_exp  # the killed scan committed its decision; the next one rightly found nothing
    elif wid not in by_wid and obs.scan_killed:
        c.add("recovery.scan", f"the scan was killed inside, and the next scan neither "
              f"reported {item.key} nor found it classified (it is {pw0.get('status')}): "
              "the killed scan's partial work lost it")
    elif wid not in by_wid:
        c.add("recovery.scan", f"{item.key} was {leased_status(spec)} with a lapsed lease and recovery did not report it")
    elif c.d_obs != c.d_exp:
        c.add(c.d_rule, f"{item.key} decision {c.d_obs!r}, the contract says {c.d_exp!r} (journal: {_journal_text(c.alt)})")


def _check_recovery_did(c: _Case) -> None:
    """What recovery did to the crashed item: requeued or quarantined it as decided, and marked
    its receipts (recovery.quarantine.visible, recovery.receipt_marking)."""
    spec, item, alt, d_exp = c.spec, c.item, c.alt, c.d_exp
    if item is None or alt is None:
        return
    post = c.obs.post.get(item.key) or {}
    pw = post.get("work") or {}
    dec = spec.decisions.get(d_exp, {})
    if rules.requeues(spec, d_exp) and pw.get("status") != spec.initial_status:
        c.add(c.d_rule, f"{item.key} decided {d_exp}, but recovery left it {pw.get('status')} instead of requeuing it")
    if rules.quarantines(spec, d_exp):
        if not pw.get("quarantined"):
            c.add("recovery.quarantine.visible", f"{item.key} decided quarantine, "
                  f"but it is not marked quarantined ({pw.get('status')})")
        if pw.get("status") == leased_status(spec):
            c.add("recovery.quarantine.visible", f"quarantined {item.key} still holds a lease")
    pending = [sid for sid, st in alt.journal.items() if st == "pending"]
    if pending:
        c.checked.add("recovery.receipt_marking")
    seen_post = _receipt_states(post)
    marked = dec.get("receipt_state") if d_exp != "none" else None
    classes = {s.step_id: s.step_class for s in item.steps if s.is_effect}
    for sid, st in alt.journal.items():
        want = (marked or "pending") if st == "pending" else st
        got = seen_post.get(sid) or "none"
        # used-up attempts turned a requeue into quarantine: whether recovery marks a receipt
        # whose own class did not call for quarantine is the implementation's choice
        # (docs/protocol.md, "Where the contract leaves the choice to you")
        free = c.by_attempts and st == "pending" and spec.receipt_decision("pending", classes.get(sid) or "") != d_exp
        if got != want and not (free and got == "pending"):
            c.add("recovery.receipt_marking", f"after recovery ({d_exp}) {item.key} receipt {sid} is {got}, expected {want}")


def _check_waiting_untouched(c: _Case) -> None:
    """Recovery changed nothing of the work that was waiting (recovery.waiting_untouched)."""
    for k in sorted(c.waiting_before):
        a, b = (c.obs.pre.get(k) or {}).get("work") or {}, (c.obs.post.get(k) or {}).get("work") or {}
        changed = [f for f in ("status", "waiting_kind", "waiting_ref", "waiting_deadline", "lease_version", "attempt",
                               "quarantined") if a.get(f) != b.get(f)]
        if changed:
            c.add("recovery.waiting_untouched", f"recovery changed waiting {k}: "
                  + ", ".join(f"{f} {a.get(f)!r} -> {b.get(f)!r}" for f in changed))


def _check_end_state(c: _Case) -> None:
    """The end state of every item: finished or visibly quarantined, its receipts and fold
    intact, its effects within what the contract allows."""
    spec, obs, item = c.spec, c.obs, c.item
    expect_q = item is not None and rules.quarantines(spec, c.d_exp)
    listed = set(obs.quarantined_listed)
    for it in c.workload.items:
        e = obs.final.get(it.key) or {}
        w = e.get("work") or {}
        q_here = expect_q and item is not None and it.key == item.key
        if q_here:
            if not w.get("quarantined"):
                c.add("recovery.quarantine.visible", f"{it.key} was quarantined, but ends "
                      f"{w.get('status')} and not quarantined (picked up again without an operator)")
            elif obs.ids[it.key] not in listed:
                c.add("recovery.quarantine.visible", f"quarantined {it.key} is missing from list(quarantined=true)")
        elif w.get("status") != DONE:
            extra = f" [worker: {'; '.join(obs.notes)}]" if obs.notes else ""
            c.add("recovery.no_loss", f"{it.key} ends {w.get('status')}"
                  f"{' (quarantined)' if w.get('quarantined') else ''}, expected {DONE}{extra}")
        if w.get("quarantined") and obs.ids[it.key] not in listed and not q_here:
            c.add("recovery.quarantine.visible", f"{it.key} is quarantined but not listed")
        for sid in _unrecorded(e):
            c.add("recovery.marker_kept", f"{it.key} receipt {sid} ends completed without the result the worker recorded")
        for prob in fold_problems(spec, w, e.get("events") or []):
            c.add("eventlog.fold", f"{it.key}: {prob}")
        _check_effects(c, it, w, q_here)
    for wid_listed in listed - {w for w in obs.ids.values()}:
        c.V.append(Violation("recovery.quarantine.visible", f"list(quarantined=true) names unknown work {wid_listed}"))


def _check_effects(c: _Case, it: Item, w: Mapping[str, Any], q_here: bool) -> None:
    """Each effect step of ``it`` applied as often as the contract allows (recovery.effects_allowed)."""
    spec, obs, item = c.spec, c.obs, c.item
    for j in it.effect_steps():
        s = it.steps[j]
        allow = step_allowance(spec, it, j, c.alt if (item is not None and it.key == item.key) else None,
                               bool(w.get("quarantined")) and q_here, c.by_attempts)
        key = spec.effect_key(work_id=obs.ids[it.key], step_id=s.step_id, tool=s.tool)
        n = obs.applied.get(key, 0)
        late = obs.stale_applied.get(key, 0)
        # A paused worker let go after a takeover may still reach its provider once: nothing a
        # ledger can fence.  Its effect counts either as the one effect or as an extra.
        if not (allow.allows(n) or (late and allow.allows(n + late))):
            more = f" (+{late} by the stale worker)" if late else ""
            c.add("recovery.effects_allowed", f"{it.key} step {s.step_id} ({s.step_class}) "
                  f"applied {n} time(s){more}, allowed {_allow_text(allow)}")


def _fencing(spec: Spec, workload: Workload, obs: Observation, item: Item | None, where: str) -> list[Violation]:
    V = []
    writes = obs.stale_writes or []
    if not obs.took_over:
        V.append(Violation("recovery.fencing_after_takeover", f"{where}: no second worker took the item over, "
                           "so fencing could not be exercised"))
    if not writes:
        V.append(Violation("recovery.fencing_after_takeover", f"{where}: the stale worker made no write after it was let go"))
    for wr in writes:
        if wr.get("ok"):
            V.append(Violation("recovery.fencing_after_takeover", f"{where}: the stale worker's {wr['op']} was accepted "
                               "after another worker took the item over"))
        elif wr.get("code") != "stale_lease":
            V.append(Violation("recovery.fencing_after_takeover", f"{where}: the stale worker's {wr['op']} was refused "
                               f"with {wr.get('code')}, expected stale_lease"))
    if item is not None:
        e = obs.final.get(item.key) or {}
        for r in e.get("receipts") or []:
            res = r.get("result")
            if isinstance(res, Mapping) and res.get("session") == obs.stale_session:
                late = sum(obs.stale_applied.values())
                V.append(Violation("recovery.fencing_after_takeover", f"{where}: receipt {r.get('step_id')} was recorded "
                                   f"by the stale worker ({r.get('state')}; it applied {late} effect(s) at the sink "
                                   "after the takeover)"))
    return V


def _journal_text(alt: Alt | None) -> str:
    if alt is None or not alt.journal:
        return "empty"
    return ", ".join(f"{k} {v}" for k, v in alt.journal.items())


def _allow_text(a: Allowance) -> str:
    hi = "inf" if a.max is None else str(a.max)
    return f"{a.name} [{a.min}, {hi}]"


def allowance_text(a: Allowance | None) -> str | None:
    return None if a is None else a.name


# ---------------------------------------------------------------------------------- storms
def storm_step_allowed(spec: Spec, step_class: str, receipt_state: str | None, count: int) -> bool:
    """Whether ``count`` applied effects fit some crash point of the class's matrix row, given the
    receipt's final state (a storm does not know where its kills landed)."""
    row = spec.matrix[step_class]
    allows = [spec.allowances[e.effects] for e in row.values()]
    if receipt_state == "completed":
        return any(a.allows(count) for a in allows if not a.quarantined)
    if receipt_state is None:
        return count == 0
    return any(a.max is None or count <= a.max for a in allows)
