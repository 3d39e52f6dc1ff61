"""The replay_refused class (issue 32, docs/selfcheck.md): a repeated call that the reference
answers, refused as a replay.  Its own clauses come from the contract (the clauses saying the
operation is replayed or done again, and for an operation that lists a transition the clause
saying every transition is accepted through the operations listing it); the model blames a
refused renewal with the live token on the renewal's clause, and only a refusal with the fence's
code on the fence's clause.  Broken ledgers of the class (fixtures/testkit/broken_refused.py)
fail their own clause's tests, and every failure over their profile names that clause or the
failing test's own."""

from __future__ import annotations

import pytest
from clause_runs import clause_test_failures
from ledgercheck.conformance import mutation as M
from ledgercheck.conformance.mutation.mutants import REPLAY_WORDS, _said, _status_owner
from ledgercheck.fixtures.testkit import broken_refused
from ledgercheck.spec import default_spec
from ledgercheck.transport.protocol import Outcome

SPEC = default_spec()


def test_a_refused_repeat_of_a_moving_operation_owns_the_transition_clause() -> None:
    mutants = [m for m in M.generate(SPEC) if m.family == "replay_refuse"]
    assert mutants
    moving = set()
    for m in mutants:
        op = m.params[0]
        said = {c.id for c in _said(SPEC, op, REPLAY_WORDS)}
        assert said <= set(m.own), m.name
        table = set(_status_owner(SPEC, op))
        if SPEC.edges_of(op):
            assert table and table <= set(m.own), m.name
            moving.add(op)
        else:  # an operation that moves nothing gets nothing from the transition table
            assert not (table & set(m.own)) or any(c in said for c in table), m.name
    assert moving  # the contract has repeated operations that move items (claim, requeue...)


def test_a_refused_live_renewal_is_blamed_on_the_renewal_unless_refused_as_stale(spec, harness_for):
    """wakeups.lease says the live token's wake_renew extends the hand-out; wakeups.fencing says what
    is refused with the fence's code.  A live renewal refused with another code breaks the first."""
    h = harness_for("python:ledgercheck.reference.adapter:ReferenceAdapter")
    h.start_case("wakeups.lease")
    h.do("wake_suspend", run_id="run-1")
    h.do("wake_fire", run_id="run-1", kind=spec.wakeup_kinds[0])
    got = h.do("wake_take", worker="worker-A").value
    fence = spec.handouts["wakeups"].fence
    other = next(c for c, definite in spec.errors.items() if definite and c != fence and c != "unsupported")
    args = {"run_id": "run-1", "token": got["token"], "now": h.now()}
    for code, clause in ((other, "wakeups.lease"), (fence, "wakeups.fencing")):
        found = h.model.settle("wake_renew", h.model.expect("wake_renew", args), Outcome(False, code=code, message="refused"))
        assert [v.clause for v in found] == [clause], (code, found)


@pytest.mark.parametrize("cls", broken_refused.ALL, ids=lambda c: c.__name__)
def test_a_refused_repeat_fails_the_clause_saying_the_call_is_answered(cls, spec, harness_for):
    profile = spec.clause(cls.BREAKS).profile
    h = harness_for(f"python:{cls.__module__}:{cls.__name__}")
    failed = clause_test_failures(h, spec, lambda case: spec.clause(case.clause).profile == profile)
    assert cls.BREAKS in failed and cls.BREAKS in failed[cls.BREAKS], f"{cls.__name__} ({cls.WHAT}): {failed}"
    misblamed = {c: sorted(set(b)) for c, b in failed.items() if cls.BREAKS not in b and c not in b}
    assert not misblamed, f"{cls.__name__} breaks {cls.BREAKS}; these tests' failures named neither it nor their own clause: {misblamed}"
