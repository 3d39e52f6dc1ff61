"""The Spec's helpers answer from the contract's data: timings, retry bounds, keys, recovery, profiles."""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path

import pytest
from ledgercheck.spec import RetryPolicy, Spec, default_spec, load_spec


@pytest.fixture(scope="module")
def spec() -> Spec:
    return default_spec()


def overlay(tmp_path: Path, text: str) -> Spec:
    path = tmp_path / "overlay.yaml"
    path.write_text("extends: default\n" + textwrap.dedent(text), encoding="utf-8")
    return load_spec([path])


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ---- leases and waiting ----------------------------------------------------------------------


def test_lease_for_uses_the_source_override(spec: Spec) -> None:
    default = spec.lease_for(None)
    assert (default.ttl, default.renew_interval, default.grace) == (45, 15, 30)
    control = spec.lease_for("control")
    assert (control.ttl, control.renew_interval, control.grace) == (30, 10, 15)
    assert spec.lease_for("conversation") == default
    assert spec.lease_for("not-a-source") == default


def test_partial_lease_override_inherits_the_rest(tmp_path: Path) -> None:
    s = overlay(tmp_path, """
        lease:
          grace: 20s
          by_source:
            scheduler: {ttl: 2m}
        """)
    sched = s.lease_for("scheduler")
    assert (sched.ttl, sched.renew_interval, sched.grace) == (120, 15, 20)


def test_waiting_timeout_per_kind_and_source(spec: Spec, tmp_path: Path) -> None:
    assert spec.waiting_timeout("user", None) == 24 * 3600
    assert spec.waiting_timeout("external", "scheduler") == 2 * 3600
    s = overlay(tmp_path, """
        waiting:
          by_source:
            scheduler: {timeouts: {external: 30m}}
        """)
    assert s.waiting_timeout("external", "scheduler") == 1800
    assert s.waiting_timeout("user", "scheduler") == 24 * 3600
    assert s.waiting_timeout("external", "conversation") == 2 * 3600
    with pytest.raises(KeyError):
        s.waiting_timeout("approval", None)


def test_phase_timeouts(spec: Spec) -> None:
    assert spec.phase_timeout("execution") == 3600
    assert spec.phase_timeout("claim") == 300
    assert spec.phase_timeout("waiting") is None
    assert spec.phase_timeout("no_such_phase") is None


# ---- retry -------------------------------------------------------------------------------------


def test_retry_policy_defaults_and_overrides(spec: Spec, tmp_path: Path) -> None:
    p = spec.retry_policy_for(None)
    assert p == RetryPolicy(max_attempts=3, initial_backoff=2, multiplier=2.0, max_backoff=300, jitter="full")
    assert spec.retry_policy_for("conversation") == p
    q = spec.retry_policy_for(None, {"max_attempts": 5, "initial_backoff": "1s", "jitter": None})
    assert (q.max_attempts, q.initial_backoff, q.multiplier, q.jitter) == (5, 1, 2.0, "full")
    s = overlay(tmp_path, """
        retry:
          by_source:
            control: {policy: {max_attempts: 1, jitter: none}}
        """)
    c = s.retry_policy_for("control")
    assert (c.max_attempts, c.jitter, c.initial_backoff) == (1, "none", 2)
    assert s.retry_policy_for("control", {"max_attempts": 4}).max_attempts == 4
    assert s.retry_policy_for("manual") == p


def test_backoff_range_for_every_jitter_mode(spec: Spec) -> None:
    raw = spec.document["retry"]["jitter_modes"]
    assert set(spec.jitter_modes) == set(raw) == {"none", "full", "equal"}
    for mode, (lo, hi) in raw.items():
        policy = spec.retry_policy_for(None, {"jitter": mode})
        for attempt, base in [(1, 2.0), (2, 4.0), (3, 8.0), (8, 256.0)]:
            assert spec.backoff_range(policy, attempt) == pytest.approx((lo * base, hi * base))
    assert spec.backoff_range(spec.retry_policy_for(None, {"jitter": "none"}), 2) == (4.0, 4.0)
    assert spec.backoff_range(spec.retry_policy_for(None, {"jitter": "equal"}), 3) == (4.0, 8.0)
    assert spec.backoff_range(spec.retry_policy_for(None, {"jitter": "full"}), 1) == (0.0, 2.0)


@pytest.mark.parametrize("attempt", [9, 10, 100, 10**6])
def test_backoff_is_capped(spec: Spec, attempt: int) -> None:
    policy = spec.retry_policy_for(None, {"jitter": "none"})
    assert spec.backoff_range(policy, attempt) == (300.0, 300.0)


def test_backoff_before_the_first_attempt_counts_as_the_first(spec: Spec) -> None:
    policy = spec.retry_policy_for(None)
    assert spec.backoff_range(policy, 0) == spec.backoff_range(policy, 1)


# ---- idempotency ---------------------------------------------------------------------------------


def test_effect_key_is_sha256_of_canonical_json(spec: Spec) -> None:
    key = spec.effect_key(work_id="w-1", step_id="send", tool="email")
    assert key == sha('{"step_id":"send","tool":"email","work_id":"w-1"}')
    assert spec.effect_key(tool="email", step_id="send", work_id="w-1", attempt=3) == key  # extra fields ignored
    assert spec.effect_key(work_id="w-2", step_id="send", tool="email") != key
    with pytest.raises(ValueError, match="tool"):
        spec.effect_key(work_id="w-1", step_id="send")


def test_input_hash_is_sha256_of_canonical_json(spec: Spec) -> None:
    value = {"b": [1, 2.5, None, True], "a": {"z": "café", "y": "日本"}}
    expected = sha('{"a":{"y":"日本","z":"café"},"b":[1,2.5,null,true]}')
    assert spec.input_hash(value) == expected == Spec.input_hash(dict(reversed(list(value.items()))))
    assert spec.input_hash(value) == sha(json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
    with pytest.raises(ValueError):
        spec.input_hash({"x": float("nan")})


# ---- transitions ---------------------------------------------------------------------------------


def test_forbidden_pairs_are_the_complement_of_the_table(spec: Spec) -> None:
    pairs = spec.forbidden_pairs()
    n = len(spec.statuses)
    assert len(pairs) == n * (n - 1) - len(spec.transitions)
    assert set(spec.forbidden_examples) <= set(pairs)
    assert not {(t.src, t.dst) for t in spec.transitions} & set(pairs)
    assert all(a != b for a, b in pairs)
    assert ("running", "cancelled") not in pairs and ("running", "queued") in pairs


def test_cancellation_edges(spec: Spec) -> None:
    assert spec.edge("queued", "cancelled").guard is None
    assert spec.edge("retry_scheduled", "cancelled").guard is None
    running = spec.edge("running", "cancelled")
    assert running.guard == "cancel_requested" and running.ops == ("close_out",)
    assert spec.targets("cancel", "running") == ()
    assert "running" in spec.operations["cancel"].intent_from


def test_terminal_statuses_leave_only_by_requeue(spec: Spec) -> None:
    for t in spec.transitions:
        assert t.requeue == spec.terminal(t.src)
        if t.requeue:
            assert t.dst == spec.initial_status and "requeue" in t.ops


# ---- recovery -------------------------------------------------------------------------------------


def test_scanner_decision(spec: Spec) -> None:
    assert spec.scanner_decision([], has_completed=False) == "retry"
    assert spec.scanner_decision([], has_completed=True) == "resume"
    assert spec.scanner_decision([("pending", "non_idempotent_with_lookup")], False) == "reconcile"
    assert spec.scanner_decision([("pending", "non_idempotent_without_lookup")], True) == "quarantine"
    assert spec.scanner_decision([("pending", "idempotent_with_key")], True) == "retry"
    both = [("pending", "non_idempotent_with_lookup"), ("pending", "non_idempotent_without_lookup")]
    assert spec.scanner_decision(both, False) == "quarantine"  # highest rank wins
    assert spec.scanner_decision([("unknown", "pure")], False) == "reconcile"
    assert spec.scanner_decision([("needs_inspection", "pure")], False) == "quarantine"
    with pytest.raises(ValueError):
        spec.scanner_decision([("completed", "pure")], False)


def test_scanner_decision_agrees_with_the_matrix(spec: Spec) -> None:
    for cls, row in spec.matrix.items():
        for point, entry in row.items():
            journal = spec.crash_points[point]
            if journal.waiting:
                assert entry.decision == "none"
                continue
            opened = [("pending", cls)] if journal.journal == "pending" else []
            assert spec.scanner_decision(opened, journal.journal == "completed") == entry.decision, (cls, point)


# ---- profiles, clauses, identity -------------------------------------------------------------


def test_profile_closure(spec: Spec) -> None:
    assert spec.profile_closure(["recovery"]) == ("core", "lease", "idempotency", "recovery")
    assert spec.profile_closure(["waiting"]) == ("core", "cancel", "lease", "waiting")
    assert spec.profile_closure(["eventlog"]) == ("core", "trail", "eventlog")
    assert spec.profile_closure(["trail", "cancel"]) == ("core", "trail", "cancel")
    assert spec.profile_closure(["inbox", "outbox"]) == ("inbox", "outbox")
    assert spec.profile_closure([]) == ()
    assert set(spec.profile_closure(spec.profiles)) == set(spec.profiles)
    with pytest.raises(KeyError):
        spec.profile_closure(["billing"])


def test_the_whole_contract_is_one_named_set(spec: Spec) -> None:
    assert spec.whole_set == "full"
    assert spec.profile_sets["full"].profiles == tuple(spec.profiles)
    assert spec.expand_profiles(["full"]) == (tuple(spec.profiles), ())
    assert spec.expand_profiles(["trail", "core", "billing", "full-ish"]) == (("core", "trail"), ("billing", "full-ish"))


def test_a_plain_queue_profile_keeps_out_the_trail_and_cancellation(spec: Spec) -> None:
    """core asks for no operation of trail or cancel, and each seed invariant is in some profile."""
    core_ops = {n for n, o in spec.operations.items() if o.profile == "core"}
    assert "events" not in core_ops and "cancel" not in core_ops
    assert spec.operations["events"].profile == "trail" and spec.operations["cancel"].profile == "cancel"
    assert {c.id for c in spec.clauses_for(["trail"])} == {"trail.one_per_transition", "trail.types", "trail.append_only"}
    assert {c.id for c in spec.clauses_for(["cancel"])} == {"cancel.immediate", "cancel.intent_first"}
    text = " ".join(c.statement for c in spec.clauses)
    for n in range(1, 7):
        assert f"(invariant {n})" in text, n


def test_clauses_by_id_and_profile(spec: Spec) -> None:
    assert spec.clause("lease.fencing").profile == "lease"
    with pytest.raises(KeyError):
        spec.clause("no.such.clause")
    outbox = spec.clauses_for(["outbox"])
    assert outbox and all(c.profile == "outbox" for c in outbox)
    assert spec.clauses_for(None) == spec.clauses
    assert all(c.source in spec.seeds for c in spec.clauses)


def test_digest_is_stable_and_follows_every_value(spec: Spec, tmp_path: Path) -> None:
    assert len(spec.digest) == 64 and spec.digest == load_spec().digest
    assert overlay(tmp_path, "lease: {ttl: 45s}\n").digest == spec.digest  # an overlay restating a value
    changed = [
        overlay(tmp_path, "lease: {ttl: 46s}\n").digest,
        overlay(tmp_path, "inbox: {max_nacks: 4}\n").digest,
        overlay(tmp_path, "seeds: {000_c0acfc2210694ce4.txt: Changed description.}\n").digest,
    ]
    assert len({spec.digest, *changed}) == 4


def test_every_argument_type_the_validator_allows_is_understood(spec: Spec) -> None:
    from ledgercheck.spec.args import type_problem
    from ledgercheck.spec.checks import ARG_TYPES

    for typ in ARG_TYPES:
        assert not (type_problem(spec, typ, object()) or "").startswith("unknown argument type"), typ
    assert type_problem(spec, "no_such_type", 1) == "unknown argument type 'no_such_type'"
    used = {a.type for op in spec.operations.values() for a in op.args.values()}
    assert used <= ARG_TYPES
