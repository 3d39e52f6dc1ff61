"""The mutation self-check (conformance/mutation/): mutants of the reference served through the
wire must be caught by the clause tests, each naming its own clause, and benign ones must not be
flagged.  The default tests judge a small sample; LEDGERCHECK_MUTATION_FULL=1 runs the whole
campaign with the floors docs/selfcheck.md states."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from typing import Any

import pytest
from ledgercheck.conformance import mutation as M
from ledgercheck.spec import default_spec

SPEC = default_spec()

# one mutant of each kind of fault the operators make: a refusal flipped, a returned field
# altered, a fence skipped, case folded in a key, a timing one quantum off, a drain reordered
SAMPLE = [
    "refuse_ok:renew:stale_lease",
    "alter:claim:lease_expires_at",
    "skip_fence:close_out:token",
    "fold_case:create:source_id",
    "timing:lease.grace:-",
    "reorder:inbox_drain",
    # a receipt field altered in an answer: owned by the clause saying what the operation returns
    "alter:effect_record:work_id",
]


@pytest.mark.parametrize("name", SAMPLE)
def test_sampled_mutant_is_caught_by_its_own_clause(name: str) -> None:
    m = M.parse_mutant(SPEC, name)
    assert not m.benign and m.own
    v = M.judge(SPEC, m)
    assert v.fired, f"{name} never changed a message"
    assert v.caught, f"{name} survived {v.tests_run} clause tests"
    assert v.own_caught, f"{name} was caught by {v.catches[0].clauses} ({v.catches[0].test}), none of its own clauses {m.own}"


def _reopens(case: Any) -> bool:
    """A clause test that opens its ledger again in a new process (``durable(h)``): each reopen
    starts another mutant server, so these few take about half of all the clause tests' time."""
    return "durable(h)" in inspect.getsource(case.fn)


def test_benign_rewrites_all_at_once_are_not_flagged() -> None:
    # every benign operator together (key order, extra fields, reworded messages, definite left
    # out, optional fields left out, lists of free order reversed, delays), over every clause
    # test but the multi-process ones (the slowest; the full campaign runs them too) and those
    # that reopen their ledger (the long tier's test below)
    v = M.judge(SPEC, M.parse_mutant(SPEC, "benign:all"), only=lambda c: not M._is_slow(c) and not _reopens(c))
    assert v.fired
    assert v.tests_run > 400
    assert not v.caught, [(c.test, c.clauses, c.message) for c in v.catches[:3]]


# the same rewrites over the clause tests that reopen their ledger (crash-inside and survives-reopen
# tests); the default keeps them over every other clause test, the same operations' answers included
@pytest.mark.thorough
def test_benign_rewrites_are_not_flagged_across_reopens() -> None:
    v = M.judge(SPEC, M.parse_mutant(SPEC, "benign:all"), only=lambda c: not M._is_slow(c) and _reopens(c))
    assert v.fired
    assert v.tests_run >= 5  # 7 today: four survive a reopen, three crash inside the adapter
    assert not v.caught, [(c.test, c.clauses, c.message) for c in v.catches[:3]]


def test_a_survivor_is_reported_as_one() -> None:
    # the judge is not a rubber stamp: with only tests that cannot see the mutation (creation
    # tests never renew), a real fault survives and is reported as such
    v = M.judge(SPEC, M.parse_mutant(SPEC, "refuse_ok:renew:stale_lease"),
                only=lambda c: c.clause == "core.create.initial")
    assert v.tests_run >= 1
    assert not v.caught and not v.own_caught and not v.fired


def test_generation_follows_the_contract() -> None:
    mutants = M.generate(SPEC)
    names = [m.name for m in mutants]
    assert len(names) == len(set(names))
    families = {m.family for m in mutants}
    assert {"refuse_ok", "refuse_swap", "drop_field", "alter", "reorder", "drop_item", "fold_case", "skip_fence",
            "claim_last", "timing", "limit", *M.BENIGN_FAMILIES} <= families
    ops = [o for o in SPEC.operations if o not in ("hello", "reset")]
    codes = [c for c, d in SPEC.errors.items() if d and c not in M.NO_REFUSAL]
    assert {m.name for m in mutants if m.family == "refuse_ok"} == {f"refuse_ok:{o}:{c}" for o in ops for c in codes}
    # every required field of the work snapshot can be dropped; the optional ones are benign
    assert {m.params[1] for m in mutants if m.family == "drop_field" and m.params[0] == "work"} == set(SPEC.work_fields)
    assert all(m.benign for m in mutants if m.family == "drop_field" and m.params[1] == "at")
    # an operation's answer is altered in the fields its events say it writes
    claim = {m.params[1] for m in mutants if m.family == "alter" and m.params[0] == "claim"}
    assert claim == {"status", *SPEC.events["claimed"].data}
    # a list whose order the contract leaves free may be reversed; one it fixes may not
    reorder = {m.params[0]: m.benign for m in mutants if m.family == "reorder"}
    assert reorder["inbox_drain"] is False and reorder["log_read"] is False and reorder["expire"] is True
    assert all(m.own for m in mutants if m.family in ("skip_fence", "fold_case", "timing") and not m.benign
               and m.params[0] != "outbox_mark_sent")
    # a duration the contract sets as a minimum may grow, not shrink
    timing = {m.name: m.benign for m in mutants if m.family == "timing"}
    assert timing["timing:idempotency.retention:+"] and not timing["timing:idempotency.retention:-"]
    assert not timing["timing:lease.grace:+"]


def test_own_clauses_come_from_the_statements() -> None:
    assert "lease.acquire" in M.own_clauses(SPEC, "claim", ["lease_expires_at"])
    assert "lease.renew.grace" in M.own_clauses(SPEC, None, ["grace"])
    assert "inbox.fifo.per_sender" in M.own_clauses(SPEC, "inbox_drain", ["order"])
    assert M.own_clauses(SPEC, "renew", ["stale_lease"], refusal=True)[:2] == ("lease.renew.conditions", "lease.renew.grace")
    assert M.mentions("A renewal by the holder", "renew") and M.mentions("An acknowledged message", "ack")
    assert not M.mentions("the statuses of the contract", "state")


def test_answer_fields_are_owned_by_what_the_operation_answers() -> None:
    own = {m.name: m.own for m in M.generate(SPEC) if m.family in ("alter", "drop_item")}
    # a receipt's work_id in a lookup's answer: the clause saying a lookup returns the stored
    # receipt, beside the one naming the field (kept: the rule only adds)
    assert {"idem.record", "idem.key.derivation"} <= set(own["alter:effect_lookup:work_id"])
    # no clause names effect_mark or effect_list: the clauses speaking of receipts own their answers
    assert "idem.receipt_states" in own["alter:effect_mark:state"] and "idem.begin" in own["drop_item:effect_list"]
    assert "inbox.dead_letter" in own["alter:inbox_dead:[0].message_id"]
    assert "retry.promote" in own["alter:promote_due:[0].from_status"]
    # a status answered by an operation that moves items; not for a snapshot read back by get
    assert "core.transition.allowed" in own["alter:close_out:status"]
    # snapshot fields keep their own rule: no profile-wide additions
    assert "core.transition.allowed" not in own["alter:claim:lease_expires_at"]


def test_altered_and_invented_answers_keep_the_protocols_shape() -> None:
    # a name from a closed set becomes another name of that set, not a string the protocol
    # refuses: the mutant is then judged by the model (the clause), not by the shape check
    from ledgercheck.transport.wire import result_checker, result_types

    defs, shape = result_types(SPEC), result_checker(SPEC)
    run = {"run_id": "run-1", "state": "pending", "cycle": 1, "wakeups": ["message", "timer"], "timer_at": None}
    for field in ("state", "wakeups"):
        changed = {**run, field: M._alter(SPEC, field, run[field], M._field_enum(defs, "wake_run", field))}
        assert changed[field] != run[field] and shape.problem("wake_get", changed) is None, changed
    # an empty list of names gets one name (a run suspended with no wakeup yet)
    items = M._item_schema(M._field_schema(defs, "wake_run", "wakeups"), defs)
    assert shape.problem("wake_get", {**run, "wakeups": M._alter(SPEC, "wakeups", [], (), M._placeholder(items, defs))}) is None
    assert M._field_enum(defs, "lane_task_list", "[0].state") == ("queued", "handed")
    assert M._alter(SPEC, "state", "handed", ("queued", "handed")) == "queued"
    assert M._alter(SPEC, "state", "pending", M._field_enum(defs, "wake_run", "state")) == "running"  # not the outbox's "sent"
    assert M._alter(SPEC, "status", "queued") != "queued"  # the contract's statuses, as before
    # a refusal answered ok: a value of the result's shape, enumerations included
    for op in ("wake_get", "lane_next", "lane_tasks", "get"):
        assert shape.problem(op, M._placeholder(defs[SPEC.operations[op].returns], defs)) is None, op


def test_a_lanes_stale_token_is_swapped_for_the_lanes_live_one() -> None:
    # skip_fence on a lane: the live token is the lane's lease, not a work item's
    import io
    import json

    from ledgercheck.reference.adapter import ReferenceAdapter

    adapter = ReferenceAdapter(SPEC)
    adapter.reset({})
    server = M.MutantServer(adapter, io.BytesIO(), SPEC, M.parse_mutant(SPEC, "skip_fence:lane_next:token"))

    def call(op: str, **args: object) -> dict:
        return server.handle(json.dumps({"id": 1, "op": op, "args": args}).encode())

    lane = {"session_key": "s", "lane": "l"}
    old = call("lane_acquire", **lane, owner="A", now=0.0)["result"]["token"]
    call("lane_push", **lane, task_id="t1", now=0.0)
    call("lane_acquire", **lane, owner="B", now=1000.0)  # the first lease lapsed long ago: B takes the lane over
    assert server._live_lane_token("s", "l") not in (None, old)
    out = call("lane_next", **lane, token=old, now=1000.0)
    assert out["ok"] and out["result"]["task_id"] == "t1" and server.fired == 1  # the reference alone refuses it
    assert server._live_lane_token("s", "nowhere") is None
    adapter.close()


def test_unknown_mutant_is_one_line_and_exit_2() -> None:
    p = subprocess.run([sys.executable, "-m", "ledgercheck", "selfcheck", "serve", "--mutant", "flip:nothing"],
                       input=b"", capture_output=True, timeout=600)
    assert p.returncode == 2
    err = p.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "unknown mutant 'flip:nothing'" in err[0]
    p = subprocess.run([sys.executable, "-m", "ledgercheck", "selfcheck", "mutate", "--jobs", "0"],
                       capture_output=True, timeout=600)
    assert p.returncode == 2 and "--jobs" in p.stderr.decode()


@pytest.mark.skipif(os.environ.get("LEDGERCHECK_MUTATION_FULL") != "1",
                    reason="the full mutation campaign takes minutes: set LEDGERCHECK_MUTATION_FULL=1")
def test_full_campaign_holds_the_floors() -> None:
    figs, rows = M.campaign(SPEC, jobs=2)
    survivors = [r["mutant"] for r in rows if r["fired"] and not r["benign"] and not r["caught"]]
    flagged = [r["mutant"] for r in rows if r["fired"] and r["benign"] and r["caught"]]
    assert figs.control_flagged == 0
    assert figs.benign_flagged == 0, flagged
    assert figs.caught_fraction >= M.FLOOR_CAUGHT, survivors
    assert figs.own_fraction >= M.FLOOR_OWN, M.figures_text(figs)
