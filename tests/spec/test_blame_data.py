"""Which clause a wrong field or argument breaks, and which clauses only chaos judges, are contract data.

The contract's work fields, operation arguments and error codes carry a ``blame`` clause, and a
clause says ``judge: chaos`` when only crash windows can judge it.  The model, the clause tests
and the mutation catalogue read them through ``spec.rules``; an overlay that changes one changes
what the harness blames.
"""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest
from ledgercheck.conformance.clauses import all_cases
from ledgercheck.conformance.model import Model, Outcome, Refuse
from ledgercheck.spec import Spec, default_spec, load_spec, rules

T = 1000.0


@pytest.fixture(scope="module")
def spec() -> Spec:
    return default_spec()


def overlay(tmp_path: Path, text: str) -> Spec:
    path = tmp_path / "overlay.yaml"
    path.write_text("extends: default\n" + textwrap.dedent(text), encoding="utf-8")
    return load_spec([path])


def cancelled(spec: Spec) -> tuple[Model, dict]:
    """A model with one item created and cancelled, and the snapshot a correct ledger shows for it."""
    m = Model(spec)
    args = {"source_system": "manual", "source_id": "a", "now": T}
    exp = m.expect("create", args)
    assert m.settle("create", exp, Outcome.success({"work": {**m._new_item("w1", args)}, "created": True})) == []
    exp = m.expect("cancel", {"work_id": "w1", "now": T + 1})
    want = rules.apply_effects(spec, "cancel", m.items["w1"], now=T + 1, args={"reason": None}, dst="cancelled")
    assert m.settle("cancel", exp, Outcome.success(want)) == []
    assert m.check_work(dict(want)) == []
    return m, dict(want)


def test_field_owners_come_from_the_work_fields(spec: Spec) -> None:
    owners = rules.field_owners(spec)
    assert owners == {n: f.blame for n, f in spec.work_fields.items() if f.blame}
    assert owners["attempt"] == "retry.exhausted" and owners["lease_version"] == "lease.version.monotonic"
    assert rules.field_owner(spec, "work_id") is None and rules.field_owner(spec, "no_such_field") is None


def test_the_model_blames_the_fields_owner_from_the_contract(spec: Spec, tmp_path: Path) -> None:
    m, snap = cancelled(spec)
    # a later read shows a changed attempt count: the field's owner is blamed
    assert [v.clause for v in m.check_work({**snap, "attempt": 5})] == ["retry.exhausted"]
    moved = overlay(tmp_path, "work_fields:\n  attempt: {blame: retry.schedule}\n")
    m2, snap2 = cancelled(moved)
    assert [v.clause for v in m2.check_work({**snap2, "attempt": 5})] == ["retry.schedule"]


def test_argument_blame_comes_from_the_operations_arguments(spec: Spec) -> None:
    assert rules.argument_blame(spec, "create", "source_system") == "core.create.source_system"
    assert rules.argument_blame(spec, "fail", "error_class") == "retry.unknown_class"
    # close-out's status: a waiting status is the exclusive-waiting clause's, another one close-out's
    waiting = next(s for s, st in spec.statuses.items() if st.waiting_kind)
    assert rules.argument_blame(spec, "close_out", "status", waiting) == "core.waiting_closeout.exclusive"
    assert rules.argument_blame(spec, "close_out", "status", "queued") == "core.close_out.explicit"
    # an argument without its own blame falls to the invalid_argument error's
    assert rules.argument_blame(spec, "get", "work_id") == spec.error_blame["invalid_argument"] == "core.invalid_argument"


def test_the_model_refuses_a_bad_argument_with_the_contracts_clause(spec: Spec, tmp_path: Path) -> None:
    bad = {"source_system": "nowhere", "source_id": "a", "now": T}
    exp = Model(spec).expect("create", bad)
    assert isinstance(exp, Refuse) and exp.clause == "core.create.source_system"
    moved = overlay(tmp_path, """\
        operations:
          create:
            args:
              source_system: {blame: core.invalid_argument}
        """)
    exp = Model(moved).expect("create", bad)
    assert isinstance(exp, Refuse) and exp.clause == "core.invalid_argument"


def test_chaos_only_clauses_are_marked_in_the_contract(spec: Spec, tmp_path: Path) -> None:
    chaos = rules.chaos_clauses(spec)
    assert chaos == ("recovery.no_loss", "recovery.effects_allowed", "recovery.fencing_after_takeover")
    assert all(spec.clause(c).judge == "chaos" for c in chaos)
    listed = {c.clause for c in all_cases(spec)}
    assert not listed & set(chaos) and "recovery.matrix" in listed  # crash windows judge them, not clause tests
    # without the exploration, each gets one case that says nothing judged it
    off = [c for c in all_cases(spec, chaos=False) if c.clause in chaos]
    assert [c.clause for c in off] == list(chaos)
    # marking another clause chaos-only takes its clause tests away
    marked = dataclasses.replace(spec, clauses=tuple(dataclasses.replace(c, judge="chaos") if c.id == "recovery.matrix" else c
                                                     for c in spec.clauses))
    assert "recovery.matrix" in rules.chaos_clauses(marked)
    assert "recovery.matrix" not in {c.clause for c in all_cases(marked)}


def test_a_clause_takes_a_named_judgement_of_the_model(spec: Spec, tmp_path: Path) -> None:
    """A create answered with the record of a unit whose ids differ only by case (whitespace,
    normalization form) is blamed on the clause that ``judges: [create.identity_folded]``, and
    on the identity triple's clause while no clause takes that judgement."""
    def merged_blame(s: Spec) -> list[str]:
        m = Model(s)
        first = {"source_system": "manual", "source_id": "Order-7", "now": T}
        exp = m.expect("create", first)
        snap = m._new_item("w1", first)
        assert m.settle("create", exp, Outcome.success({"work": snap, "created": True})) == []
        exp = m.expect("create", {**first, "source_id": "order-7"})  # another unit: the case differs
        return [v.clause for v in m.settle("create", exp, Outcome.success({"work": snap, "created": False}))]

    assert rules.identity_folded(("manual", "Order-7", None), ("manual", " order-7", None))
    assert rules.identity_folded(("manual", "caf\u00e9", None), ("manual", "cafe\u0301", None))  # NFC / NFD
    assert not rules.identity_folded(("manual", "order-7", None), ("manual", "order-7", None))
    assert not rules.identity_folded(("manual", "order-7", None), ("manual", "order-8", None))
    taken = [c.id for c in spec.clauses if "create.identity_folded" in c.judges]
    assert merged_blame(spec) == (taken or ["core.create.unique_unit"])
    # no clause takes it: the identity triple's clause; another clause takes it: that one
    plain = dataclasses.replace(spec, clauses=tuple(dataclasses.replace(c, judges=()) for c in spec.clauses))
    assert rules.judging_clause(plain, "create.identity_folded", "fallback") == "fallback"
    assert merged_blame(plain) == ["core.create.unique_unit"]
    moved = dataclasses.replace(plain, clauses=tuple(
        dataclasses.replace(c, judges=("create.identity_folded",)) if c.id == "core.scheduler.run_identity" else c
        for c in plain.clauses))
    assert merged_blame(moved) == ["core.scheduler.run_identity"]


def test_a_clause_takes_what_an_operation_leaves_in_a_field(spec: Spec) -> None:
    """``judges: [<operation>.<field>]``: a wrong value of that field, in the snapshot the operation
    returns or in a later read before the item changes again, is blamed on the clause that takes
    it; another operation's wrong value of the same field is not."""
    def blames(s: Spec, status: str, lose_at: str) -> list[str]:
        m = Model(s)
        args = {"source_system": "manual", "source_id": "a", "now": T}
        exp = m.expect("create", args)
        assert m.settle("create", exp, Outcome.success({"work": m._new_item("w1", args), "created": True})) == []
        exp = m.expect("claim", {"owner": "o", "work_id": "w1", "now": T})
        snap = {**m.items["w1"], "status": "running", "owner": "o", "lease_token": "t", "lease_version": 1,
                "lease_expires_at": T + s.lease_for("manual").ttl, "attempt": 1, "started_at": T}
        assert m.settle("claim", exp, Outcome.success(snap)) == []
        exp = m.expect("close_out", {"work_id": "w1", "token": "t", "status": status, "result": {"n": None}, "now": T + 1})
        done = {**snap, "status": status, "owner": None, "lease_token": None, "lease_expires_at": None,
                "result": {"n": None}, "finished_at": T + 1}
        found = m.settle("close_out", exp, Outcome.success({**done, "result": {}} if lose_at == "close_out" else done))
        if lose_at == "read":
            found = m.check_work({**done, "result": {}})
        return [v.clause for v in found]

    # no clause takes it: the close-out's own clauses
    plain = dataclasses.replace(spec, clauses=tuple(dataclasses.replace(c, judges=tuple(j for j in c.judges if j in rules.NAMED_JUDGEMENTS))
                                                    for c in spec.clauses))
    assert "close_out.result" not in rules.judgements(plain)
    assert blames(plain, "failed", "close_out") == ["core.transition.allowed"]
    assert blames(plain, "done", "read") == ["core.close_out.explicit"]
    # the clause that takes it, whichever that is
    for taker in ("core.close_out.explicit", "core.status.terminal"):
        taking = dataclasses.replace(plain, clauses=tuple(
            dataclasses.replace(c, judges=(*c.judges, "close_out.result")) if c.id == taker else c for c in plain.clauses))
        assert rules.judgements(taking)["close_out.result"] == taker
        for status in ("done", "failed"):
            assert blames(taking, status, "close_out") == [taker]
            assert blames(taking, status, "read") == [taker]
    # another operation's value of the field stays with its own clause: a create that stores a result
    m = Model(spec)
    args = {"source_system": "manual", "source_id": "b", "now": T}
    exp = m.expect("create", args)
    assert [v.clause for v in m.settle("create", exp, Outcome.success({"work": {**m._new_item("w2", args), "result": 1}, "created": True}))] \
        == ["core.create.initial"]


def _requeued(spec: Spec, wrong: dict) -> list[str]:
    """The clauses a model blames when a requeue's answer carries ``wrong`` (a failed item
    requeued; every other field as a correct ledger answers)."""
    m = Model(spec)
    args = {"source_system": "manual", "source_id": "a", "now": T}
    exp = m.expect("create", args)
    assert m.settle("create", exp, Outcome.success({"work": m._new_item("w1", args), "created": True})) == []
    exp = m.expect("claim", {"owner": "A", "now": T + 1})
    snap = {**m.items["w1"], "status": "running", "owner": "A", "lease_token": "t1", "lease_version": 1,
            "lease_expires_at": T + 1 + spec.lease_for("manual").ttl, "attempt": 1, "started_at": T + 1}
    assert m.settle("claim", exp, Outcome.success(snap)) == []
    exp = m.expect("close_out", {"work_id": "w1", "token": "t1", "status": "failed", "now": T + 2})
    closed = {**snap, "status": "failed", "owner": None, "lease_token": None, "lease_expires_at": None, "finished_at": T + 2}
    assert m.settle("close_out", exp, Outcome.success(closed)) == []
    exp = m.expect("requeue", {"work_id": "w1", "now": T + 3})
    back = {**closed, "status": "queued", "finished_at": None, "started_at": None, **wrong}
    return [v.clause for v in m.settle("requeue", exp, Outcome.success(back))]


def test_the_clause_owning_an_operations_answer_comes_from_the_contract(spec: Spec, tmp_path: Path) -> None:
    """An operation's ``blame`` names the clause that says what its answer holds: the model
    blames it for a wrong field of that answer no more particular owner covers, and the
    mutation catalogue counts it among the own clauses of every changed field of the answer."""
    from ledgercheck.conformance.mutation.generate import generate

    assert spec.operations["create"].blame == "core.create.initial"
    assert spec.operations["requeue"].blame == "core.requeue.terminal"
    assert _requeued(spec, {}) == []
    assert _requeued(spec, {"status": "failed"}) == ["core.requeue.terminal"]
    # a create's answer: its clause outranks the field's owner (the create wrote every field)
    m = Model(spec)
    args = {"source_system": "manual", "source_id": "b", "now": T}
    exp = m.expect("create", args)
    got = m.settle("create", exp, Outcome.success({"work": {**m._new_item("w1", args), "quarantined": True}, "created": True}))
    assert [v.clause for v in got] == ["core.create.initial"]
    # another clause named by an overlay takes the blame: nothing is hard-coded
    other = overlay(tmp_path, """
        operations:
          requeue:
            blame: core.status.terminal
          create:
            blame: core.create.unique_unit
    """)
    assert _requeued(other, {"status": "failed"}) == ["core.status.terminal"]
    m = Model(other)
    exp = m.expect("create", args)
    got = m.settle("create", exp, Outcome.success({"work": {**m._new_item("w1", args), "quarantined": True}, "created": True}))
    assert [v.clause for v in got] == ["core.create.unique_unit"]
    # the catalogue: every changed field of a snapshot answer counts the operation's clause as its own
    for s in (spec, other):
        alters = [mu for mu in generate(s) if mu.family == "alter" and mu.params[0] in ("create", "requeue")]
        snap = [mu for mu in alters if mu.params[1] != "created"]
        assert len(snap) >= 15
        for mu in snap:
            assert s.operations[mu.params[0]].blame in mu.own, (mu.name, mu.own)
            assert len(set(mu.own)) == len(mu.own), mu.own
