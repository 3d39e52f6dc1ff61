"""spec/rules.py reads the recovery and effect rules from the contract, and nothing else restates them.

The interpreter's answers follow the contract's data (an overlay that changes a value changes
the answer), an item's own retry policy sets its attempt limit, and the modules that used to
carry their own copy of the attempts rule call the interpreter instead.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest
from ledgercheck.spec import Spec, default_spec, load_spec, rules

ROOT = Path(__file__).resolve().parents[2]
T = 1000.0


@pytest.fixture(scope="module")
def spec() -> Spec:
    return default_spec()


def overlay(tmp_path: Path, text: str) -> Spec:
    path = tmp_path / "overlay.yaml"
    path.write_text("extends: default\n" + textwrap.dedent(text), encoding="utf-8")
    return load_spec([path])


def item(spec: Spec, **kw: object) -> dict[str, object]:
    base: dict[str, object] = {f: None for f in spec.work_fields}
    base.update(work_id="w1", source_system="manual", source_id="u1", status=spec.initial_status, attempt=1,
                lease_version=1, cancel_requested=False, quarantined=False, priority=3, created_at=0.0)
    base.update(kw)
    return base


def running(spec: Spec, **kw: object) -> dict[str, object]:
    leased = next(s for s, st in spec.statuses.items() if st.leased)
    return item(spec, status=leased, owner="w", lease_token="t", lease_expires_at=T, started_at=T - 45, **kw)


# ---------------------------------------------------------------------------------- decisions
def test_the_journal_decides_by_the_scanner_rule(spec: Spec) -> None:
    it = running(spec)
    assert rules.recovery_decision(spec, it, []).name == spec.scanner["none"]
    assert rules.recovery_decision(spec, it, [("completed", "pure")]).name == spec.scanner["completed"]
    d = rules.recovery_decision(spec, it, [("completed", "pure"), ("pending", "non_idempotent_with_lookup")])
    assert (d.name, d.by_attempts) == ("reconcile", False)
    assert d.why == "journal: pending non_idempotent_with_lookup"


def test_used_up_attempts_turn_a_requeue_into_the_contracts_decision(spec: Spec) -> None:
    limit = spec.retry_policy_for("manual").max_attempts
    assert rules.recovery_decision(spec, running(spec, attempt=limit - 1), []).name == "retry"
    d = rules.recovery_decision(spec, running(spec, attempt=limit), [])
    assert (d.name, d.journal, d.by_attempts) == (spec.attempts_exhausted, "retry", True)
    assert d.why == f"attempts exhausted ({limit}/{limit})"
    # decisions that do not requeue are left as they are, and an unknown attempt never exhausts
    q = rules.recovery_decision(spec, running(spec, attempt=limit), [("pending", "non_idempotent_without_lookup")])
    assert (q.name, q.by_attempts) == ("quarantine", False)
    assert rules.recovery_decision(spec, running(spec, attempt=None), []).name == "retry"


def test_the_items_own_retry_policy_sets_its_attempt_limit(spec: Spec) -> None:
    """The drift bug: the attempts rule must read the policy the item was created with."""
    default = spec.retry_policy_for("manual").max_attempts
    assert default == 3
    at2 = running(spec, attempt=2)
    assert rules.recovery_decision(spec, at2, []).name == "retry"
    assert rules.recovery_decision(spec, at2, [], {"max_attempts": 2}).name == "quarantine"
    at3 = running(spec, attempt=3)
    assert rules.recovery_decision(spec, at3, []).name == "quarantine"
    assert rules.recovery_decision(spec, at3, [], {"max_attempts": 5}).name == "retry"
    assert rules.recovery_decision(spec, at3, [], {"initial_backoff": "1s"}).name == "quarantine"  # no limit given
    assert rules.attempt_limit(spec, "manual", {"max_attempts": 7}) == 7


def test_the_exhausted_decision_and_the_source_policy_come_from_the_contract(tmp_path: Path) -> None:
    s = overlay(tmp_path, """
        decisions:
          park: {requeue: false, quarantine: true, rank: 5, description: "Parked for a person."}
        attempts_exhausted: {decision: park}
        retry:
          by_source:
            control: {policy: {max_attempts: 2}}
        """)
    assert rules.recovery_decision(s, running(s, attempt=3), []).name == "park"
    assert rules.quarantines(s, "park") and not rules.requeues(s, "park")
    assert rules.recovery_decision(s, running(s, attempt=2, source_system="control"), []).name == "park"
    assert rules.recovery_decision(s, running(s, attempt=2), []).name == "retry"


# ---------------------------------------------------------------------------------- staleness
def test_a_leased_item_is_stale_strictly_after_expiry_plus_grace(spec: Spec) -> None:
    it = running(spec)
    lapse = T + spec.lease_for("manual").grace
    assert rules.lease_lapse(spec, it) == lapse
    assert not rules.stale_for_recovery(spec, it, lapse)
    assert rules.stale_for_recovery(spec, it, lapse + 0.001)
    ctl = running(spec, source_system="control")
    assert rules.lease_lapse(spec, ctl) == T + spec.lease_for("control").grace


def test_waiting_queued_and_closed_work_is_never_stale_by_age(spec: Spec) -> None:
    wait = next(iter(spec.waiting_statuses.values()))
    for it in (item(spec, status=wait, waiting_deadline=T), item(spec), item(spec, status="done", finished_at=T)):
        assert rules.lease_lapse(spec, it) is None
        assert not rules.stale_for_recovery(spec, it, T + 10**9, "closed_out")


def test_work_the_monitor_marked_is_stale_until_classified(spec: Spec) -> None:
    dst = spec.targets("expire", "running")[0]
    hb = spec.timeout_reasons["heartbeat"]
    ev = spec.operations["expire"].event_for(dst)
    marked = item(spec, status=dst, status_reason=hb, finished_at=T)
    assert rules.stale_for_recovery(spec, marked, T, ev)
    # a holder's own close-out with the same reason, a later event, another phase, quarantine: not stale
    assert not rules.stale_for_recovery(spec, marked, T, spec.operations["close_out"].event_for(dst))
    assert not rules.stale_for_recovery(spec, marked, T, spec.operations["recover"].intent_event)
    assert not rules.stale_for_recovery(spec, marked, T, None)
    assert not rules.stale_for_recovery(spec, {**marked, "status_reason": spec.timeout_reasons["execution"]}, T, ev)
    assert not rules.stale_for_recovery(spec, {**marked, "quarantined": True}, T, ev)


def test_staleness_follows_the_contract(tmp_path: Path) -> None:
    s = overlay(tmp_path, """
        stale:
          lease_lapsed: true
          monitor_marked: null
        """)
    dst = s.targets("expire", "running")[0]
    marked = item(s, status=dst, status_reason=s.timeout_reasons["heartbeat"])
    assert not rules.stale_for_recovery(s, marked, T, s.operations["expire"].event_for(dst))
    assert rules.marked_statuses(s) == ()
    s2 = overlay(tmp_path, """
        stale:
          lease_lapsed: true
          monitor_marked: {by: expire, reason: execution, unless: [quarantined, cancel_requested]}
        """)
    ev = s2.operations["expire"].event_for(dst)
    by_exec = item(s2, status=dst, status_reason=s2.timeout_reasons["execution"])
    assert rules.stale_for_recovery(s2, by_exec, T, ev)
    assert not rules.stale_for_recovery(s2, {**by_exec, "cancel_requested": True}, T, ev)


# ---------------------------------------------------------------------------------- effects
def test_requeue_writes_what_the_contract_lists(spec: Spec) -> None:
    before = item(spec, status="done", finished_at=T, result={"x": 1}, error_class="transient", started_at=T - 1,
                  cancel_requested=True, quarantined=True, status_reason="old")
    after = rules.apply_effects(spec, "requeue", before, now=T + 1, args={"reason": "operator"}, dst="queued")
    assert after["status"] == "queued" and after["status_reason"] == "operator"
    for f in ("finished_at", "result", "error_class", "next_retry_at", "started_at"):
        assert after[f] is None, f
    assert after["cancel_requested"] is False and after["quarantined"] is False
    assert before["status"] == "done"  # the input is not changed
    assert rules.open_fields(spec, "requeue", before) == {}
    waited = {**before, "waiting_kind": "user", "waiting_ref": "r", "waiting_deadline": T}
    assert rules.open_fields(spec, "requeue", waited) == {"waiting_kind": None, "waiting_ref": None, "waiting_deadline": None}


def test_expire_cancel_close_out_and_recover_steps(spec: Spec) -> None:
    r = running(spec)
    exp = rules.effect_changes(spec, "expire", now=T, args={"reason": "why"}, dst="timeout")
    assert exp["status"] == "timeout" and exp["status_reason"] == "why" and exp["finished_at"] == T
    assert exp["owner"] is None and exp["lease_token"] is None and exp["lease_expires_at"] is None
    waiting = {**r, "waiting_kind": "user", "waiting_ref": "r", "waiting_deadline": T}
    assert rules.open_fields(spec, "expire", waiting) == {"waiting_kind": "user", "waiting_ref": "r", "waiting_deadline": T}
    assert rules.effect_changes(spec, "cancel", "intent", now=T) == {"cancel_requested": True}
    cancel = rules.effect_changes(spec, "cancel", now=T, args={"reason": "stop"}, dst="cancelled")
    assert cancel["next_retry_at"] is None and cancel["status_reason"] == "stop" and cancel["finished_at"] == T
    assert rules.open_fields(spec, "cancel", {**r, "next_retry_at": T + 5}) == {"next_retry_at": T + 5}
    close = rules.effect_changes(spec, "close_out", now=T, args={"result": [1], "reason": None}, dst="done")
    assert close["result"] == [1] and close["owner"] is None and "error_class" not in close
    assert rules.open_fields(spec, "close_out", {**r, "error_class": "transient"}) == {"error_class": None}
    rel = rules.effect_changes(spec, "recover", "release", now=T, dst="timeout")
    assert rel["status_reason"] == spec.timeout_reasons["heartbeat"] and rel["lease_token"] is None
    req = rules.effect_changes(spec, "recover", "requeue", now=T, args={"decision": "resume"}, dst="queued")
    assert req["status_reason"] == "recovered: resume" and req["quarantined"] is False and req["result"] is None
    assert rules.effect_changes(spec, "recover", "quarantine", now=T) == {"quarantined": True}
    with pytest.raises(ValueError, match="no instant"):
        rules.effect_changes(spec, "expire", args={"reason": "x"})
    with pytest.raises(KeyError, match="no effects.intent"):
        rules.effect_changes(spec, "requeue", "intent", now=T)


def test_effects_follow_the_contract(tmp_path: Path) -> None:
    s = overlay(tmp_path, """
        operations:
          close_out:
            effects:
              move:
                set: {result: "arg:result", finished_at: now, status_reason: "text:closed ({reason})", error_class: null}
                may_clear: []
        """)
    close = rules.effect_changes(s, "close_out", now=T, args={"result": 1, "reason": "ok"}, dst="done")
    assert close["error_class"] is None and close["status_reason"] == "closed (ok)"
    assert rules.open_fields(s, "close_out", {"error_class": "transient"}) == {}
    assert close["owner"] is None  # the overlay gave no `clear`: the base's is kept (mappings merge key by key)


def test_the_guard_comes_from_the_transition_table(spec: Spec) -> None:
    guarded = next(t for t in spec.transitions if t.guard)
    it = item(spec, status=guarded.src)
    assert not rules.guard_holds(spec, it, guarded.dst)
    assert rules.guard_holds(spec, {**it, guarded.guard: True}, guarded.dst)
    assert not rules.guard_holds(spec, it, "no-such-status")


# ---------------------------------------------------------------------------------- one copy
# The six places that each carried the attempts rule, and the function each has now.
CALLERS = {
    "reference/recovery.py": "_decide",
    "conformance/model/recovery.py": "_decision",
    "chaos/crash/checker.py": "expected_decision",
    "chaos/crash/storms.py": "_check_barrier",
    "conformance/clauses/recovery.py": "_expected",
    "fixtures/testkit/broken_recovery.py": "_decide",
}
PACKAGE_DIRS = ("ledgercheck", "reference", "conformance", "chaos", "fixtures", "reports")


def restates_attempts_rule(source: str) -> list[str]:
    """Functions of ``source`` with a condition that both compares something with max_attempts
    and asks whether a recovery decision requeues: the attempts-exhausted rule written out."""
    out = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for cond in ast.walk(fn):
            if not isinstance(cond, ast.BoolOp):
                continue
            parts = list(ast.walk(cond))
            limit = any(isinstance(n, ast.Compare) and any(isinstance(x, ast.Attribute) and x.attr == "max_attempts"
                                                           for x in ast.walk(n)) for n in parts)
            decision = any((isinstance(n, ast.Attribute) and n.attr == "decisions")
                           or (isinstance(n, ast.Constant) and n.value == "requeue") for n in parts)
            if limit and decision:
                out.append(fn.name)
                break
    return out


def calls_interpreter(source: str, name: str) -> bool:
    """Whether some function ``name`` in ``source`` calls rules.recovery_decision."""
    for fn in ast.walk(ast.parse(source)):
        if isinstance(fn, ast.FunctionDef) and fn.name == name:
            for n in ast.walk(fn):
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "recovery_decision":
                    return True
    return False


def test_no_module_outside_spec_restates_the_attempts_rule() -> None:
    found = {}
    for d in PACKAGE_DIRS:
        for f in sorted((ROOT / d).rglob("*.py")):
            hits = restates_attempts_rule(f.read_text(encoding="utf-8"))
            if hits:
                found[str(f.relative_to(ROOT))] = hits
    assert found == {}, f"the attempts rule written out by hand (call spec.rules.recovery_decision): {found}"


@pytest.mark.parametrize("path", sorted(CALLERS))
def test_the_former_copies_call_the_interpreter(path: str) -> None:
    assert calls_interpreter((ROOT / path).read_text(encoding="utf-8"), CALLERS[path]), path


OLD_COPY = '''
def expected_decision(spec, item, alt, attempt):
    d = spec.scanner_decision(open_, False)
    policy = spec.retry_policy_for(item.source_system, None)
    if spec.decisions[d].get("requeue") and attempt is not None and attempt >= policy.max_attempts:
        return QUARANTINE, True
    return d, False
'''
OLD_INLINE = '''
def again(h):
    want = h.spec.scanner_decision(open_, False)
    if h.spec.decisions[want].get("requeue") and h.item(wid)["attempt"] >= h.spec.retry_default.max_attempts:
        want = "quarantine"
'''
RETRY_RULE = '''
def fail(self, s, policy):
    if self.spec.error_classes[e] and s["attempt"] < policy.max_attempts and retry_to:
        return retry_to
'''


def test_the_scan_finds_a_restated_rule_and_leaves_the_retry_rule_alone() -> None:
    assert restates_attempts_rule(OLD_COPY) == ["expected_decision"]
    assert restates_attempts_rule(OLD_INLINE) == ["again"]
    assert restates_attempts_rule(RETRY_RULE) == []  # fail's retry-or-fail choice is another rule
    assert not calls_interpreter(OLD_COPY, "expected_decision")
    assert calls_interpreter("def f(s, i):\n    return rules.recovery_decision(s, i, [])\n", "f")


def test_recovery_steps_are_the_contracts_release_mark_then_requeue_or_quarantine() -> None:
    """The one writing of what a recovery decision does (the reference and the model both follow it)."""
    from ledgercheck.spec import default_spec
    from ledgercheck.spec.rules import recovery_steps

    spec = default_spec()
    leased = next(n for n, st in spec.statuses.items() if st.leased)
    mid = spec.targets("recover", leased)[0]
    for decision, d in spec.decisions.items():
        if not d.get("requeue") and not d.get("quarantine"):
            continue
        steps = recovery_steps(spec, leased, decision)
        assert (steps[0].step, steps[0].src, steps[0].dst) == ("release", leased, mid)
        want = ["release"] + (["mark"] if d.get("receipt_state") else []) + (["requeue"] if d.get("requeue") else ["quarantine"])
        assert [s.step for s in steps] == want, decision
        if d.get("requeue"):
            assert steps[-1].src == mid and steps[-1].dst == spec.targets("recover", mid)[0]
            assert steps[-1].changes(spec, 5.0, decision)["status"] == steps[-1].dst
        else:
            assert steps[-1].dst is None and steps[-1].event == spec.operations["recover"].intent_event
    assert recovery_steps(spec, mid, "none") == ()
