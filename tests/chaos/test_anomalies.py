"""The safety checker on synthetic histories: each anomaly class caught alone and proven by a
minimal excerpt, correct histories under every fault left clean (hand-built and generated from
a serial model of a correct ledger), single mutations of correct histories caught as the right
class, malformed files refused with one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from checker_support import T0, assert_proves, kinds, only, ops
from history_sim import STALE, HistoryBuilder, simulate
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from ledgercheck.chaos.safety.anomalies import Verdict, check
from ledgercheck.chaos.safety.history import (
    History,
    HistoryError,
    HistoryWriter,
    load_history,
    merge_histories,
    process_path,
)


# ------------------------------------------------------------------------- each class, alone
def test_split_ownership_two_live_grants() -> None:
    b = HistoryBuilder()
    b.create("producer", "x", T0)
    ta = b.claim("w1", "x", T0 + 1)
    b.items["x"].status = "queued"  # the broken ledger hands the leased item out again
    tb = b.claim("w2", "x", T0 + 20)
    b.close_out("w2", "x", tb, T0 + 25)
    b.final(T0 + 100)
    h = b.history()
    a = only(check(h), "split_ownership")
    assert a.work_id == "x"
    grants = ops(a, "claim")
    assert [g.result["lease_token"] for g in grants] == [ta, tb]
    assert "w1" in a.explanation and "w2" in a.explanation
    assert_proves(h, a)


def test_split_ownership_counts_renewals_and_skips_released_or_lapsed_holders() -> None:
    # Renewal extends w1's lease to T0+85 (+15 grace): a grant to w2 at T0+70 takes a live lease.
    b = HistoryBuilder()
    b.create("producer", "x", T0)
    ta = b.claim("w1", "x", T0 + 1)
    b.renew("w1", "x", ta, T0 + 40)
    b.items["x"].status = "queued"
    b.claim("w2", "x", T0 + 70)
    b.final(T0 + 200)
    h = b.history()
    a = only(check(h), "split_ownership")
    assert [r.op for r in a.excerpt if r.type == "complete"] == ["claim", "renew", "claim"]
    assert_proves(h, a)
    # Without the renewal the same grant comes after the lapse (T0+61): correct.
    b = HistoryBuilder()
    b.create("producer", "x", T0)
    b.claim("w1", "x", T0 + 1)
    b.items["x"].status = "queued"
    b.claim("w2", "x", T0 + 70)
    b.final(T0 + 200)
    assert check(b.history()).anomalies == []
    # A released holder: w1 closed out (and an operator requeued the item) before w2's grant,
    # all well inside w1's first lease.
    b = HistoryBuilder()
    b.create("producer", "x", T0)
    ta = b.claim("w1", "x", T0 + 1)
    b.close_out("w1", "x", ta, T0 + 5, status="failed")
    b.requeue("operator", "x", T0 + 5.5)
    b.claim("w2", "x", T0 + 6)
    b.final(T0 + 200)
    assert kinds(check(b.history())) == []


def test_split_ownership_by_a_recovery_that_takes_a_live_lease() -> None:
    b = HistoryBuilder()
    b.create("producer", "x", T0)
    b.claim("w1", "x", T0 + 1)
    # The monitor moves the live lease (lapses at T0+61) at T0+30: a recovery that ignores the lease.
    b.items["x"].expires = T0 - 100
    b.expire("monitor", T0 + 30)
    b.recover("monitor", T0 + 30)
    b.items["x"].expires = T0 + 46
    b.claim("w2", "x", T0 + 31)
    b.final(T0 + 200)
    h = b.history()
    a = only(check(h), "split_ownership")
    assert_proves(h, a)


def test_split_ownership_without_lease_expiry_unless_the_holder_died_or_an_operator_acted() -> None:
    def run(between: str) -> tuple[History, Verdict]:
        b = HistoryBuilder(reclaim="operator")
        b.create("producer", "x", T0)
        b.claim("w1", "x", T0 + 1)
        b.records[-1]["result"]["lease_expires_at"] = None  # a queue with no lease expiry
        if between == "kill":
            b.nemesis("kill", "w1")
        elif between == "operator":
            b.call("operator", "recover", {"now": T0 + 2}, "ok", [{"work_id": "x", "decision": "requeue"}])
        b.nemesis("reopen", "w3")  # a reopen puts the unacknowledged item back
        b.items["x"].status = "queued"
        tb = b.claim("w2", "x", T0 + 3)
        b.records[-1]["result"]["lease_expires_at"] = None
        b.close_out("w2", "x", tb, T0 + 4)
        b.final(T0 + 10)
        h = b.history()
        return h, check(h)

    h, v = run("nothing")  # the holder is alive and released nothing: two owners
    a = only(v, "split_ownership")
    assert "no lease expiry" in a.explanation
    assert_proves(h, a)
    assert run("kill")[1].anomalies == []  # the holder was killed: its work handed on
    assert run("operator")[1].anomalies == []  # the operator took the work back


def test_stale_write_accepted_after_takeover() -> None:
    b = HistoryBuilder()
    b.create("producer", "x", T0)
    ta = b.claim("w1", "x", T0 + 1)
    b.nemesis("pause", "w1")
    b.expire("monitor", T0 + 70)
    b.recover("monitor", T0 + 70)
    tb = b.claim("w2", "x", T0 + 71)
    b.nemesis("resume", "w1")
    b.close_out("w1", "x", ta, T0 + 72)  # the broken ledger accepts the lapsed, superseded token
    b.final(T0 + 200)
    h = b.history()
    a = only(check(h), "stale_write_accepted")
    closes = ops(a, "close_out")
    assert len(closes) == 1 and closes[0].outcome == "ok"
    assert [g.result["lease_token"] for g in ops(a, "claim")] == [ta, tb]
    assert_proves(h, a)


def test_indefinite_close_out_is_stale_only_when_a_later_read_shows_it() -> None:
    def run(applied: bool) -> tuple[History, Verdict]:
        b = HistoryBuilder()
        b.create("producer", "x", T0)
        ta = b.claim("w1", "x", T0 + 1)
        b.expire("monitor", T0 + 70)
        b.recover("monitor", T0 + 70)
        b.claim("w2", "x", T0 + 71)
        b.nemesis("kill", "w1")
        b.close_out("w1", "x", ta, T0 + 72, outcome="killed", applied=applied)
        b.final(T0 + 200)
        return b.history(), check(b.history())

    assert run(False)[1].anomalies == []  # killed mid-close-out, and nothing shows it happened
    h, v = run(True)  # the final read shows w1's close-out (its status, time and result): it happened
    a = only(v, "stale_write_accepted")
    assert a.excerpt[-1].type == "final"
    assert_proves(h, a)


def test_terminal_changed_without_requeue() -> None:
    b = HistoryBuilder()
    b.create("producer", "x", T0)
    ta = b.claim("w1", "x", T0 + 1)
    b.close_out("w1", "x", ta, T0 + 2)
    b.items["x"].status = "running"  # the broken ledger reopens finished work by itself
    b.get("w2", "x")
    b.items["x"].status = "done"
    b.final(T0 + 10)
    h = b.history()
    a = only(check(h), "terminal_changed")
    assert [r.op for r in a.excerpt if r.type == "complete"] == ["close_out", "get"]
    assert_proves(h, a)
    # The same change through an operator requeue is allowed.
    b = HistoryBuilder()
    b.create("producer", "x", T0)
    ta = b.claim("w1", "x", T0 + 1)
    b.close_out("w1", "x", ta, T0 + 2)
    b.requeue("operator", "x", T0 + 3)
    tb = b.claim("w2", "x", T0 + 4)
    b.close_out("w2", "x", tb, T0 + 5)
    b.final(T0 + 10)
    assert check(b.history()).anomalies == []


def test_lost_work_missing_from_final() -> None:
    b = HistoryBuilder()
    b.create("producer", "x", T0)
    b.create("producer", "y", T0)
    ty = b.claim("w1", "y", T0 + 1)
    b.close_out("w1", "y", ty, T0 + 2)
    b.final(T0 + 10, drop=["x"])
    h = b.history()
    a = only(check(h), "lost_work")
    assert a.work_id == "x" and "missing" in a.explanation
    assert [r.op for r in a.excerpt if r.type == "complete"] == ["create"]
    assert a.excerpt[-1].type == "final" and a.excerpt[-1].items == {}
    assert_proves(h, a)


def test_lost_work_from_an_indefinite_create_that_a_later_read_shows() -> None:
    b = HistoryBuilder()
    b.create("producer", "x", T0, outcome="indefinite", applied=True)
    b.claim("w1", "x", T0 + 1)  # the claim hands out the item: the create happened
    b.final(T0 + 10, drop=["x"])
    h = b.history()
    a = only(check(h), "lost_work")
    assert_proves(h, a)
    # An indefinite create that nothing ever shows is not work the ledger acknowledged.
    b = HistoryBuilder()
    b.create("producer", "x", T0, outcome="indefinite", applied=False)
    b.claim_nothing("w1", T0 + 1)
    b.final(T0 + 10)
    assert check(b.history()).anomalies == []


def test_lost_work_when_the_operator_path_leaves_it_leased() -> None:
    b = HistoryBuilder(reclaim="operator")
    b.create("producer", "x", T0)
    b.claim("w1", "x", T0 + 1)
    b.nemesis("kill", "w1")
    b.final(T0 + 500, path="operator", actions=[{"op": "recover", "work_ids": []}])
    h = b.history()
    a = only(check(h), "lost_work")
    assert "still running" in a.explanation
    assert_proves(h, a)


def _effect_twice_after_a_kill(delivery: str) -> HistoryBuilder:
    """w1 applies x's effect and is killed; the monitor brings x back and w2 applies it again."""
    b = HistoryBuilder(delivery=delivery)
    b.create("producer", "x", T0)
    b.claim("w1", "x", T0 + 1)
    b.effect("w1", "x")
    b.nemesis("kill", "w1")
    b.expire("monitor", T0 + 70)
    b.recover("monitor", T0 + 70)
    tb = b.claim("w2", "x", T0 + 71)
    b.effect("w2", "x")
    b.close_out("w2", "x", tb, T0 + 72)
    b.final(T0 + 100)
    return b


def test_duplicate_effect_against_the_declaration() -> None:
    for delivery in ("effectively-once", "at-most-once"):
        h = _effect_twice_after_a_kill(delivery).history()
        a = only(check(h), "duplicate_effect")
        assert [r.type for r in a.excerpt] == ["effect", "effect"]
        assert delivery in a.explanation
        assert_proves(h, a)


def test_duplicate_effect_under_at_least_once_is_an_observation() -> None:
    v = check(_effect_twice_after_a_kill("at-least-once").history())
    assert v.anomalies == []
    assert any(o.startswith("effects ran twice for 1 item after 1 kill") and "permitted by at-least-once" in o
               for o in v.observations), v.observations


def test_stuck_work_lapsed_lease_nothing_brings_back() -> None:
    b = HistoryBuilder(reclaim="lease")
    b.create("producer", "x", T0)
    b.claim("w1", "x", T0 + 1)
    b.nemesis("kill", "w1")
    b.items["x"].expires = T0 + 10_000  # the broken monitor has no rule for the lapsed lease
    b.expire("monitor", T0 + 100)
    b.items["x"].expires = T0 + 46
    b.claim_nothing("w2", T0 + 101)
    b.final(T0 + 102)
    h = b.history()
    a = only(check(h), "stuck_work")
    assert "operator" in a.explanation
    assert any(r.type == "complete" and r.op == "expire" for r in a.context)  # the monitor ran, shown aside
    assert_proves(h, a)
    # Same history, but the final read comes before anything proved it would not come back.
    b = HistoryBuilder(reclaim="lease")
    b.create("producer", "x", T0)
    b.claim("w1", "x", T0 + 1)
    b.nemesis("kill", "w1")
    b.final(T0 + 102)
    v = check(b.history())
    assert v.anomalies == [] and v.counts.get("leased_lapsed_at_end") == 1


def test_stuck_work_named_by_an_operator_action_under_lease_and_permitted_under_operator() -> None:
    def run(reclaim: str) -> tuple[History, Verdict]:
        b = HistoryBuilder(reclaim=reclaim)
        b.create("producer", "x", T0)
        b.claim("w1", "x", T0 + 1)
        b.nemesis("kill", "w1")
        b.expire("operator", T0 + 100)
        b.requeue("operator", "x", T0 + 100)
        b.final(T0 + 101, path="operator", actions=[{"op": "requeue", "work_ids": ["x"]}])
        return b.history(), check(b.history())

    h, v = run("lease")
    a = only(v, "stuck_work")
    assert "requeue" in a.explanation
    assert_proves(h, a)
    _, v = run("operator")
    assert v.anomalies == []
    assert any("came back through the operator's requeue; permitted by reclaim=operator" in o for o in v.observations)


def test_stuck_work_when_the_lapsed_grant_was_made_by_a_claim_killed_in_flight() -> None:
    # The claim never answered (killed); the final read shows its lease: it happened, by the kill.
    b = HistoryBuilder(reclaim="lease")
    b.create("producer", "x", T0)
    b.claim("w1", "x", T0 + 1, outcome="killed", applied=True)
    b.nemesis("kill", "w1")
    b.items["x"].expires = T0 + 10_000
    b.expire("monitor", T0 + 100)
    b.items["x"].expires = T0 + 46
    b.claim_nothing("w2", T0 + 101)
    b.final(T0 + 102)
    h = b.history()
    a = only(check(h), "stuck_work")
    assert_proves(h, a)


# --------------------------------------------------------------- correct histories under faults
def test_kill_mid_claim_with_indefinite_outcome_then_reclaim() -> None:
    for applied in (False, True):
        b = HistoryBuilder()
        b.create("producer", "x", T0)
        b.nemesis("kill", "w1")
        b.claim("w1", "x", T0 + 1, outcome="indefinite", applied=applied)
        if applied:  # the grant happened: the lease must lapse and the monitor bring it back
            b.expire("monitor", T0 + 70)
            b.recover("monitor", T0 + 70)
        tb = b.claim("w2", "x", T0 + 71)
        b.get("w2", "x")
        b.close_out("w2", "x", tb, T0 + 72)
        b.final(T0 + 100)
        assert check(b.history()).anomalies == [], applied


def test_pause_past_ttl_with_the_late_write_refused() -> None:
    b = HistoryBuilder()
    b.create("producer", "x", T0)
    ta = b.claim("w1", "x", T0 + 1)
    b.effect("w1", "x")
    b.nemesis("pause", "w1")
    b.expire("monitor", T0 + 70)
    b.recover("monitor", T0 + 70)
    tb = b.claim("w2", "x", T0 + 71)
    b.nemesis("resume", "w1")
    b.renew("w1", "x", ta, T0 + 72, outcome="refused")
    b.close_out("w1", "x", ta, T0 + 72, outcome="refused")
    b.effect("w2", "x")
    b.close_out("w2", "x", tb, T0 + 73)
    b.final(T0 + 100)
    v = check(b.history())
    assert v.anomalies == []
    assert any("permitted by at-least-once" in o for o in v.observations)


def test_reopen_that_does_not_disturb_holders_and_retries_with_backoff() -> None:
    b = HistoryBuilder()
    b.create("producer", "x", T0)
    b.create("producer", "y", T0)
    ta = b.claim("w1", "x", T0 + 1)
    b.nemesis("reopen", None)
    b.claim("w2", None, T0 + 2, outcome="indefinite")  # a transport error on reopen: retried
    tb = b.claim("w2", "y", T0 + 4)
    b.claim("w3", "x", T0 + 5, outcome="refused", by_id=True)  # x is leased: refused
    b.renew("w1", "x", ta, T0 + 30)
    b.renew("w1", "x", ta, T0 + 70)  # renewals keep w1's lease live well past the first ttl
    b.close_out("w1", "x", ta, T0 + 100)
    b.close_out("w2", "y", tb, T0 + 101)
    b.final(T0 + 200)
    v = check(b.history())
    assert v.anomalies == []
    assert v.counts["nemesis_reopen"] == 1 and v.counts["op_indefinite"] == 1


def test_a_token_handed_out_twice_is_judged_by_its_latest_grant() -> None:
    # A ledger whose tokens are the owner's name: w1 holds x twice, w2 in between; w1's second
    # close-out speaks for its second grant, which nothing superseded.
    b = HistoryBuilder()
    b.create("producer", "x", T0)
    b.claim("w1", "x", T0 + 1)
    b.items["x"].token = "w1"
    b.records[-1]["result"]["lease_token"] = "w1"
    b.close_out("w1", "x", "w1", T0 + 2)
    b.requeue("operator", "x", T0 + 3)
    t2 = b.claim("w2", "x", T0 + 4)
    b.close_out("w2", "x", t2, T0 + 5)
    b.requeue("operator", "x", T0 + 6)
    b.claim("w1", "x", T0 + 7)
    b.items["x"].token = "w1"
    b.records[-1]["result"]["lease_token"] = "w1"
    b.close_out("w1", "x", "w1", T0 + 8)
    b.final(T0 + 20)
    assert check(b.history()).anomalies == []


def _queue_like(b: HistoryBuilder) -> None:
    """Make the last claim's result look like a lease-less queue's: no owner, no expiry, the
    item's id as its token, a version that never moves."""
    r = b.records[-1]["result"]
    r.update(owner=None, lease_expires_at=None, lease_token=r["work_id"], lease_version=0)


def test_a_queue_without_owners_tokens_or_versions_is_judged_by_who_asked() -> None:
    b = HistoryBuilder(reclaim="operator")  # correct: one holder at a time
    b.create("producer", "x", T0)
    b.claim("w1", "x", T0 + 1)
    _queue_like(b)
    b.close_out("w1", "x", "x", T0 + 2)
    b.requeue("operator", "x", T0 + 3)
    b.claim("w2", "x", T0 + 4)
    _queue_like(b)
    b.close_out("w2", "x", "x", T0 + 5)
    b.final(T0 + 10)
    assert check(b.history()).anomalies == []

    b = HistoryBuilder(reclaim="operator")  # two concurrent claims both handed the item out
    b.create("producer", "x", T0)
    i1 = b.invoke("w1", "claim", {"owner": "w1", "now": T0 + 1})
    i2 = b.invoke("w2", "claim", {"owner": "w2", "now": T0 + 1})
    snap = {**b.items["x"].snapshot(), "status": "running", "owner": None, "lease_token": "x", "lease_version": 0}
    b.complete(i1, "w1", "claim", "ok", snap)
    b.complete(i2, "w2", "claim", "ok", snap)
    b.close_out("w1", "x", "x", T0 + 2)
    b.close_out("w2", "x", "x", T0 + 3, outcome="refused")
    b.final(T0 + 10)
    h = b.history()
    a = only(check(h), "split_ownership")  # the first holder's close-out is part of the split, not a second anomaly
    assert "w1" in a.explanation and "w2" in a.explanation
    assert_proves(h, a)


def test_wall_clock_grant_time_from_the_ledger_not_the_recorded_now() -> None:
    # A claim recorded at now=T0+30 but executed after a pause: the ledger's started_at says T0+90.
    b = HistoryBuilder(clock="wall")
    b.create("producer", "x", T0)
    b.claim("w1", "x", T0 + 1)
    b.expire("monitor", T0 + 80)
    b.recover("monitor", T0 + 80)
    b.claim("w2", "x", T0 + 90)
    b.records[-2]["args"]["now"] = b.records[-2]["now"] = T0 + 30
    b.final(T0 + 200)
    assert check(b.history()).anomalies == []


# ---------------------------------------------------------------- generated: false-alarm guard
DELIVERIES = st.sampled_from(["at-least-once", "effectively-once", "at-most-once"])
SEEDS = st.integers(0, 2**32 - 1)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(seed=SEEDS, delivery=DELIVERIES, workers=st.integers(1, 4), queue=st.booleans())
def test_random_correct_histories_have_no_anomaly(seed: int, delivery: str, workers: int, queue: bool) -> None:
    b = simulate(seed, workers=workers, delivery=delivery, queue=queue)
    v = check(b.history())
    assert v.anomalies == [], [(a.kind, a.work_id, a.explanation) for a in v.anomalies]
    assert v.counts["items"] >= 4


def _records(b: HistoryBuilder) -> list[dict[str, Any]]:
    return [dict(r) for r in b.records]


def _ops(recs: list[dict[str, Any]]) -> dict[int, tuple[dict[str, Any], dict[str, Any] | None]]:
    inv = {r["id"]: r for r in recs if r["type"] == "invoke"}
    comp = {r["id"]: r for r in recs if r["type"] == "complete"}
    return {i: (r, comp.get(i)) for i, r in inv.items()}


@FAST
@given(seed=SEEDS)
def test_mutation_refusal_turned_ok_is_a_stale_write(seed: int) -> None:
    recs = _records(simulate(seed, workers=3))
    pairs = _ops(recs)
    grants = [(c["result"]["work_id"], c["result"]["lease_token"], c["result"]["lease_version"], c["t"])
              for _i, (_inv, c) in pairs.items() if c and c["op"] == "claim" and c["outcome"] == "ok" and c["result"]]
    version = {tok: v for _w, tok, v, _t in grants}
    target = None
    for _i, (inv, c) in pairs.items():
        if c and c["outcome"] == "refused" and inv["op"] in ("close_out", "renew"):
            wid, tok = inv["args"]["work_id"], inv["args"]["token"]
            if any(w == wid and v > version.get(tok, 1 << 60) and t < inv["t"] for w, _tk, v, t in grants):
                target = (inv, c)
                break
    assume(target is not None)
    inv, c = target
    c["outcome"], c["error"] = "ok", None
    c["result"] = {"work_id": inv["args"]["work_id"], "status": inv["args"].get("status", "running"),
                   "lease_token": inv["args"]["token"], "owner": inv["process"], "lease_version": version[inv["args"]["token"]]}
    assert "stale_write_accepted" in kinds(check(History.of(recs)))


@FAST
@given(seed=SEEDS, pick=st.integers(0, 1000), queue=st.booleans())
def test_mutation_duplicated_grant_is_split_ownership(seed: int, pick: int, queue: bool) -> None:
    b = simulate(seed, workers=3, queue=queue)
    recs = _records(b)
    claims = [i for i, r in enumerate(recs) if r["type"] == "complete" and r["op"] == "claim"
              and r["outcome"] == "ok" and r["result"]]
    assume(claims)
    at = claims[pick % len(claims)]
    a = recs[at]["result"]
    inv_a = next(r for r in recs if r["type"] == "invoke" and r["id"] == recs[at]["id"])
    other = "w9" if a["owner"] != "w9" else "w8"
    start = inv_a["now"] + 1.0
    new_id = max(r["id"] for r in recs if "id" in r) + 1
    t = recs[at]["t"]
    dup = {**a, "owner": other, "lease_token": "dup", "lease_version": a["lease_version"] + 1,
           "started_at": start, "lease_expires_at": start + b.ttl}
    if queue:  # what a lease-less queue says: no owner, no expiry, the same token and version
        dup = {**a, "owner": None, "started_at": None}
    recs[at + 1:at + 1] = [
        {"type": "invoke", "id": new_id, "process": other, "op": "claim", "args": {"owner": other, "now": start},
         "t": t + 0.0001, "now": start},
        {"type": "complete", "id": new_id, "process": other, "op": "claim", "outcome": "ok", "result": dup,
         "error": None, "t": t + 0.0002}]
    assert "split_ownership" in kinds(check(History.of(recs)))


@FAST
@given(seed=SEEDS, pick=st.integers(0, 1000))
def test_mutation_item_dropped_from_final_is_lost_work(seed: int, pick: int) -> None:
    recs = _records(simulate(seed))
    final = recs[-1]
    acked = sorted(c["result"]["work"]["work_id"] for c in recs
                   if c["type"] == "complete" and c["op"] == "create" and c["outcome"] == "ok")
    wid = acked[pick % len(acked)]
    # the item never finished: its close-outs are taken out of the history too
    ends = {r["id"] for r in recs if r["type"] == "invoke" and r["op"] == "close_out" and r["args"].get("work_id") == wid}
    recs = [r for r in recs if not (r["type"] in ("invoke", "complete") and r.get("id") in ends)]
    final["items"] = {k: v for k, v in final["items"].items() if k != wid}
    v = check(History.of(recs))
    assert [a.kind for a in v.anomalies] == ["lost_work"] and v.anomalies[0].work_id == wid


@FAST
@given(seed=SEEDS, pick=st.integers(0, 1000))
def test_a_finished_item_the_ledger_no_longer_keeps_is_not_lost_work(seed: int, pick: int) -> None:
    """A ledger that deletes a job when it completes (graphile-worker, Sidekiq OSS): the history shows
    the item's acknowledged close-out to a final status, so its absence from the final read loses no
    work (the contract's clauses judge the missing record)."""
    recs = _records(simulate(seed))
    final = recs[-1]
    reads = {"get", "list", "events", "active"}

    def finished_by_ack(wid: str) -> bool:  # the last thing that touched it: an acknowledged close-out
        touched = [r for r in recs if r["type"] in ("invoke", "complete") and r["op"] not in reads
                   and ((r["args"] or {}).get("work_id") == wid if r["type"] == "invoke"
                        else isinstance(r["result"], dict) and r["result"].get("work_id") == wid)]
        last = touched[-1] if touched else None
        return bool(last) and last["type"] == "complete" and last["op"] == "close_out" and last["outcome"] == "ok"

    done = sorted(w for w, snap in final["items"].items()
                  if snap is not None and snap.get("status") == "done" and finished_by_ack(w))
    assume(done)
    wid = done[pick % len(done)]
    final["items"] = {k: v for k, v in final["items"].items() if k != wid}
    v = check(History.of(recs))
    assert v.anomalies == [] and v.counts.get("finished_not_kept") == 1, [a.explanation for a in v.anomalies]


def test_stuck_work_under_a_lease_longer_than_the_contracts() -> None:
    """reclaim=lease, and the ledger granted a lease far longer than the contract's ttl + grace
    (graphile-worker frees a lock after 4 hours): past the contract's window the monitor ran and a
    claim found nothing, so the item does not come back within the contract's lease."""
    def run(last_claim: float) -> Verdict:
        b = HistoryBuilder(reclaim="lease")
        b.create("producer", "x", T0)
        b.ttl = 4 * 3600.0  # the ledger's own lease; the contract's (in the history's meta) stays 45 s
        b.claim("w1", "x", T0 + 1)
        b.ttl = 45.0
        b.nemesis("kill", "w1")
        b.expire("monitor", last_claim - 1)  # nothing lapsed by the ledger's reckoning: nothing moves
        b.claim_nothing("w2", last_claim)
        b.final(last_claim + 1)
        return check(b.history())

    v = run(T0 + 100)  # past T0 + 1 + 45 + 15
    [a] = v.anomalies
    assert a.kind == "stuck_work" and "longer than the contract's ttl + grace" in a.explanation, a.explanation
    # before the contract's window has passed nothing proves it: no anomaly, counted as left
    v = run(T0 + 50)
    assert v.anomalies == [] and v.counts.get("leased_beyond_contract_at_end") == 1
    # a ledger whose lease is the contract's and whose monitor brings it back has no anomaly
    b = HistoryBuilder(reclaim="lease")
    b.create("producer", "x", T0)
    b.claim("w1", "x", T0 + 1)
    b.nemesis("kill", "w1")
    b.expire("monitor", T0 + 100)
    b.requeue("monitor", "x", T0 + 100.5)
    t = b.claim("w2", "x", T0 + 101)
    assert t is not None
    b.close_out("w2", "x", t, T0 + 102)
    b.final(T0 + 103)
    assert check(b.history()).anomalies == []


def test_the_simulation_exercises_the_faults_it_claims() -> None:
    seen = {"kill": 0, "pause": 0, "dup": 0, "refused_after_takeover": 0, "indefinite": 0}
    for seed in range(40):
        v = check(simulate(seed).history())
        seen["kill"] += v.counts.get("nemesis_kill", 0)
        seen["pause"] += v.counts.get("nemesis_pause", 0)
        seen["dup"] += v.counts.get("duplicates_permitted", 0)
        seen["indefinite"] += v.counts.get("op_indefinite", 0)
        seen["refused_after_takeover"] += v.counts.get("op_refused", 0)
    assert all(n > 0 for n in seen.values()), seen


# ----------------------------------------------------------------------- format: write and read
def test_writer_merge_and_reader_round_trip(tmp_path: Path) -> None:
    ctl = HistoryWriter(process_path(tmp_path, "controller"), "controller", t0=0.0)
    ctl.meta(adapter={"name": "x", "clock": "injected"}, declared={"delivery": "at-least-once"},
             timings={"ttl": 45.0, "grace": 15.0})
    ws = [HistoryWriter(process_path(tmp_path, f"w{i}"), f"w{i}", t0=0.0) for i in range(2)]
    for i, w in enumerate(ws):  # each process numbers its operations from 0; the merge renumbers
        op = w.invoke("claim", {"owner": w.process, "now": T0 + i})
        w.complete(op, "claim", "ok", None)
    ws[1].invoke("claim", {"owner": "w1", "now": T0 + 5})  # killed: no completion
    ctl.final({}, {"path": "lease"})
    for w in (ctl, *ws):
        w.close()
    with open(process_path(tmp_path, "w0"), "ab") as fh:
        fh.write(b'{"type":"invoke","id":7,"pro')  # a writer killed mid-line
    out = tmp_path / "history.jsonl"
    n = merge_histories(sorted(tmp_path.glob("history.*.jsonl")), out)
    h = load_history(out)
    assert n == 7 and len(h.records) == 7
    assert h.records[0].type == "meta" and h.records[-1].type == "final"
    assert len({r.id for r in h.records if r.type == "invoke"}) == 3
    assert check(h).counts["op_indefinite"] == 1


def test_a_restarted_process_numbering_from_zero_again_and_a_buffered_writer(tmp_path: Path) -> None:
    ctl = HistoryWriter(process_path(tmp_path, "controller"), "controller", buffered=True)
    ctl.meta(adapter={}, declared={}, timings={"ttl": 45.0, "grace": 15.0})
    assert process_path(tmp_path, "controller").read_bytes() == b""  # buffered until a flush
    ctl.flush()
    assert b'"meta"' in process_path(tmp_path, "controller").read_bytes()
    for _incarnation in range(2):  # the same worker name after a kill: its ids start at 0 again
        w = HistoryWriter(process_path(tmp_path, "w1"), "w1")
        i = w.invoke("claim", {"owner": "w1", "now": T0})
        w.complete(i, "claim", "ok", None)
        w.close()
    ctl.final({})
    ctl.close()
    out = tmp_path / "history.jsonl"
    merge_histories([process_path(tmp_path, "controller"), process_path(tmp_path, "w1")], out)
    h = load_history(out)
    assert sorted(r.id for r in h.records if r.type == "invoke") == [0, 1]
    assert check(h).counts["op_ok"] == 2


def _write(tmp_path: Path, lines: list[str]) -> Path:
    p = tmp_path / "h.jsonl"
    p.write_text("".join(x + "\n" for x in lines))
    return p


META = json.dumps({"type": "meta", "format": "ledgercheck-history/1", "adapter": {}, "declared": {},
                   "timings": {"ttl": 45, "grace": 15}})
INV = '{"type":"invoke","id":1,"process":"w1","op":"claim","args":{"now":1},"t":0.1,"now":1}'
COMP = '{"type":"complete","id":1,"process":"w1","op":"claim","outcome":"ok","t":0.2}'
FINAL = '{"type":"final","t":9,"items":{}}'


@pytest.mark.parametrize("lines, line, problem", [
    ([], None, "empty history"),
    ([META, "{not json"], 2, "not JSON"),
    ([META, "[1,2]"], 2, "must be a JSON object"),
    ([META, '{"type":"gossip","t":1}'], 2, "unknown record type 'gossip'"),
    ([META, '{"type":"invoke","id":1,"process":"w1","op":"claim","t":0.1}'], 2, "lacks the field 'args'"),
    ([META, '{"type":"complete","id":4,"process":"w1","op":"claim","outcome":"ok","t":0.2}'], 2,
     "complete of operation id 4 has no earlier invoke"),
    ([META, INV, INV], 3, "operation id 1 is invoked twice"),
    ([META, INV, '{"type":"complete","id":1,"process":"w1","op":"claim","outcome":"maybe","t":0.2}'], 3,
     "complete outcome 'maybe'"),
    ([INV], 1, "does not start with a meta record"),
    ([META, '{"type":"effect","process":"w1","work_id":"x","key":"k","applied":"yes","t":1}'], 2,
     "field 'applied' has the wrong type"),
    ([META.replace("ledgercheck-history/1", "other/9")], 1, "unsupported history format"),
    # the history's shape: one meta first, nothing after the final record (the reader checks these
    # where that record is, not on every line: a malformed record in either place is named the same)
    ([META, META], 2, "a second meta record"),
    (['{"type":"invoke","id":1,"process":"w1","op":"claim","t":0.1}'], 1, "lacks the field 'args'"),
    ([FINAL], 1, "does not start with a meta record"),
    ([META, FINAL, '{"type":"invoke"}'], 3, "a invoke record after the final record"),
    ([META, FINAL, "[1]"], 3, "must be a JSON object"),
    (["", META, FINAL, "", INV], 5, "a invoke record after the final record"),  # blank lines counted
    ([META, INV, COMP, COMP], 4, "operation id 1 is completed twice"),
    ([META, '{"type":"nemesis","fault":"kill","process":3,"t":1}'], 2, "nemesis field 'process' has the wrong type"),
    ([META, '{"type":"nemesis","fault":"kill","t":true}'], 2, "nemesis field 't' has the wrong type (bool)"),
    # a field given twice, the first time with the wrong type: refused (which one counts is the
    # decoder's choice), naming the field
    ([META, '{"type":"nemesis","fault":"kill","t":"soon","t":1}'], 2, "(field 't')"),
    (["", META, "", '{"type":"nemesis","fault":"kill","t":"soon","t":1}'], 4, "(field 't')"),
    # nesting deeper than the decoders go: one line naming it, never a traceback
    ([META, '{"type":"invoke","id":1,"process":"w1","op":"claim","args":{"x":' + "[" * 1010 + "]" * 1010 + '},"t":0.1}'],
     2, "not JSON"),
    ([META, '{"type":"invoke","id":1,"process":"w1","op":"claim","args":{"x":' + "[" * 5000 + "]" * 5000 + '},"t":0.1}'],
     2, "not JSON"),
])
def test_malformed_histories_are_refused_with_one_line(tmp_path: Path, lines: list[str], line: int | None,
                                                       problem: str) -> None:
    p = _write(tmp_path, lines)
    with pytest.raises(HistoryError) as e:
        load_history(p)
    msg = str(e.value)
    assert "\n" not in msg and problem in msg
    assert msg.startswith(f"{p}:{line}:" if line else f"{p}:")


def test_blank_lines_are_skipped_and_records_keep_their_file_lines(tmp_path: Path) -> None:
    p = _write(tmp_path, ["", META, "  ", INV, "", COMP, FINAL])
    h = load_history(p)
    assert [(r.type, r.line) for r in h.records] == [("meta", 2), ("invoke", 4), ("complete", 6), ("final", 7)]
    assert check(h).counts["op_ok"] == 1


def test_size_and_line_limits(tmp_path: Path) -> None:
    p = _write(tmp_path, [META, INV])
    with pytest.raises(HistoryError, match=r"h\.jsonl: file is \d+ bytes, over the limit of 100"):
        load_history(p, max_bytes=100)
    with pytest.raises(HistoryError, match=r"h\.jsonl:1: line is \d+ bytes, over the limit of 50"):
        load_history(p, max_line=50)


# --------------------------------------------------------------------------------- the command
def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = ("import sys, argparse; from ledgercheck.chaos.safety import history_commands as m; "
            "p = argparse.ArgumentParser(prog='ledgercheck'); s = p.add_subparsers(); m.add_parser(s); "
            "a = p.parse_args(sys.argv[1:]); sys.exit(a.func(a))")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600)


def test_history_check_command_exit_codes_and_output(tmp_path: Path) -> None:
    clean = tmp_path / "clean.jsonl"
    clean.write_bytes(simulate(3).dumps())
    r = _cli("history", "check", str(clean), "--classes-only")  # history_sim's ledger answers recover 'requeue', no decision of the contract's matrix: linearizability (test_linearize.py) rightly flags it; the class rules alone are under test here
    assert r.returncode == 0, r.stderr
    assert "verdict: no anomaly" in r.stdout and "observations:" in r.stdout

    b = HistoryBuilder()
    b.create("producer", "x", T0)
    b.claim("w1", "x", T0 + 1)
    b.items["x"].status = "queued"
    b.claim("w2", "x", T0 + 20)
    b.final(T0 + 100, drop=["x"])
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b.dumps())
    r = _cli("history", "check", str(bad))
    assert r.returncode == 1
    assert "split_ownership" in r.stdout and "lost_work" in r.stdout
    # and the per-item search: no order of x's operations explains the second claim
    assert "not_linearizable x:" in r.stdout and "verdict: 3 anomalies" in r.stdout
    assert "complete #" in r.stdout  # the excerpt is printed
    r = _cli("history", "check", str(bad), "--json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["summary"] == {"split_ownership": 1, "lost_work": 1} and not doc["ok"]
    assert doc["linearizability"]["stats"]["violations"] == 1
    assert all(a["excerpt"] for a in doc["anomalies"])

    broken = tmp_path / "broken.jsonl"
    broken.write_text(META + "\n{oops\n")
    r = _cli("history", "check", str(broken))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and f"{broken}:2: not JSON" in r.stderr


# ------------------------------------------------------- claimable at the end, handed to nobody
def _stranded(claims: list[float], read_at: float | None = T0 + 90, monitor_at: float | None = None,
              monitor_outcome: str = "ok") -> HistoryBuilder:
    """A claim killed in flight leaves x listed as queued where no claim reaches it (a side list
    the ledger's claims never read); later claims find nothing."""
    b = HistoryBuilder(reclaim="operator")
    b.create("producer", "x", T0)
    b.claim("w1", "x", T0 + 1, outcome="killed", applied=False)
    b.nemesis("kill", "w1")
    if read_at is not None:
        b.get("census", "x")
    for now in claims:
        if monitor_at is not None and now > monitor_at:
            if monitor_outcome == "ok":
                b.expire("monitor", monitor_at)  # answers with what it moved: nothing here
            else:
                b.call("monitor", "expire", {"now": monitor_at}, monitor_outcome)
            monitor_at = None
        b.claim_nothing("w2", now)
    b.final(T0 + 300, path="operator", actions=[{"op": "requeue", "work_ids": []}])
    return b


def test_lost_work_listed_claimable_but_never_handed_out() -> None:
    h = _stranded([T0 + 100, T0 + 130, T0 + 170]).history()
    a = only(check(h), "lost_work")
    assert a.work_id == "x" and "never handed out" in a.explanation
    assert [r.op for r in a.excerpt if r.type == "complete"] == ["get", "claim", "claim"]
    assert_proves(h, a)


def test_claimable_at_the_end_is_not_lost_without_the_proof() -> None:
    # claims that found nothing for less than a lease's lapse (ttl 45 + grace 15)
    assert check(_stranded([T0 + 100, T0 + 150]).history()).anomalies == []
    # no read after the kill: the killed claim may have taken x under a lease the ledger keeps
    assert check(_stranded([T0 + 100, T0 + 170], read_at=None).history()).anomalies == []
    # a monitor with no answer ran after the read: it may have moved x (x may have been leased when
    # the read was made and put back since)
    assert check(_stranded([T0 + 100, T0 + 170], monitor_at=T0 + 95, monitor_outcome="indefinite").history()).anomalies == []


def test_a_monitor_that_names_what_it_moved_leaves_other_items_proven() -> None:
    h = _stranded([T0 + 100, T0 + 170], monitor_at=T0 + 95).history()
    assert only(check(h), "lost_work").work_id == "x"


def _close_out_in_flight_across_a_takeover(outcome: str, requeue: bool = False) -> tuple[History, Verdict]:
    """w1's close-out is sent while its lease is live, held up (a partition), and answered after
    the item's lease lapsed and w2 was granted it (a claim that takes a lapsed lease)."""
    b = HistoryBuilder()
    b.create("producer", "x", T0)
    ta = b.claim("w1", "x", T0 + 1)
    b.nemesis("partition", "w1")
    args = {"work_id": "x", "token": ta, "status": "done", "result": {"by": "w1"}, "now": T0 + 2}
    i = b.invoke("w1", "close_out", args)
    if requeue:
        b.requeue("operator", "x", T0 + 70)
    tb = b.claim("w2", "x", T0 + 71)
    b.nemesis("heal")
    snap = None
    if outcome == "ok":  # the ledger applied the late write over w2's lease
        st = b.items["x"]
        st.status, st.owner, st.token, st.expires, st.result, st.finished_at = "done", None, None, None, {"by": "w1"}, T0 + 2
        snap = st.snapshot()
    b.complete(i, "w1", "close_out", outcome, snap, None if outcome == "ok" else STALE)
    if outcome != "ok":
        b.close_out("w2", "x", tb, T0 + 72)
    b.final(T0 + 200)
    return b.history(), check(b.history())


def test_a_close_out_in_flight_across_a_takeover_that_comes_back_ok_is_a_stale_write() -> None:
    h, v = _close_out_in_flight_across_a_takeover("ok")
    a = only(v, "stale_write_accepted")
    assert "sent before that grant, it completed after it" in a.explanation
    closes = ops(a, "close_out")
    assert len(closes) == 1 and closes[0].outcome == "ok"
    assert len(ops(a, "claim")) == 2
    assert_proves(h, a)
    assert v.counts["late_writes"] == v.counts["late_writes_ok"] == 1  # what the cut-off worker's write did
    assert "1 write sent by cut-off workers during a partition: 1 ok" in v.observations
    # refused when it finally arrived: the ledger fenced it off; nothing to report
    assert _close_out_in_flight_across_a_takeover("refused")[1].anomalies == []
    # a requeue between the two makes a finished item claimable again: either order may be right
    assert "stale_write_accepted" not in kinds(_close_out_in_flight_across_a_takeover("ok", requeue=True)[1])


@pytest.mark.parametrize("close", ["indefinite", "refused", None])
def test_a_job_deleted_as_it_completes_whose_close_out_never_answered_is_not_lost(close: str | None) -> None:
    """A ledger that deletes a job when it completes (graphile-worker), its holder killed while its
    close-out to done ran: the close-out may have taken effect, so the missing record is no proof
    of lost work (seen in graphile-worker's campaign, seed 4).  A close-out refused (it certainly
    did not happen), or none at all, leaves the same missing record as lost work."""
    b = HistoryBuilder(reclaim="lease")
    b.create("producer", "x", T0)
    b.claim("w1", "x", T0 + 1)
    if close is not None:
        b.close_out("w1", "x", b.items["x"].token or "", T0 + 2, outcome=close,
                    applied=close == "indefinite")
    b.nemesis("kill", "w1")
    b.final(T0 + 100, drop={"x"})
    v = check(b.history())
    if close == "indefinite":
        assert v.anomalies == [] and v.counts.get("finished_not_kept") == 1, [a.explanation for a in v.anomalies]
    else:
        assert kinds(v) == ["lost_work"], [a.explanation for a in v.anomalies]
