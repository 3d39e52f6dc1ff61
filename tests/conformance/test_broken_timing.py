"""Broken ledgers that get a timing boundary or a per-source value wrong are caught, each for its clause.

For every class in ``ledgercheck.fixtures.testkit.broken_timing.ALL`` the clause tests of its clause's
profile fail, and the failing test of the broken clause blames that clause (as in
test_broken_ledgers.py).  For ``MODEL_BLAME`` and for the model's own blame rules, one short
scenario through the harness shows which clause the model names.  The reference passes the
same scenarios.
"""

from __future__ import annotations

import pytest
from clause_runs import clause_test_failures
from ledgercheck.conformance.harness import ClauseFailure, Harness
from ledgercheck.fixtures.testkit import broken_timing
from ledgercheck.transport.clock import QUANTUM


def _address(cls: type) -> str:
    return f"python:ledgercheck.fixtures.testkit.broken_timing:{cls.__name__}"


def test_variants_name_contract_clauses(spec):
    ids = {c.id for c in spec.clauses}
    for cls in broken_timing.ALL + broken_timing.MODEL_BLAME:
        assert cls.BREAKS in ids and cls.WHAT, cls.__name__


@pytest.mark.parametrize("cls", broken_timing.ALL, ids=lambda c: c.__name__)
def test_clause_tests_catch_it(cls, spec, harness_for):
    profile = spec.clause(cls.BREAKS).profile
    h = harness_for(_address(cls))
    failed = clause_test_failures(h, spec, lambda case: spec.clause(case.clause).profile == profile)
    assert failed, f"{cls.__name__} ({cls.WHAT}) passed every clause test of profile {profile}"
    assert cls.BREAKS in failed, f"{cls.__name__}: expected {cls.BREAKS} to fail, failing clauses were {sorted(failed)}"
    assert cls.BREAKS in failed[cls.BREAKS], f"{cls.__name__}: the failing test of {cls.BREAKS} blamed {failed[cls.BREAKS]}"
    # a boundary bug of one clause does not fail its neighbours' tests (the model sets aside
    # what belongs elsewhere while a test judges its own clause)
    assert set(failed) == {cls.BREAKS}, f"{cls.__name__}: tests of other clauses failed too: {failed}"


# ---------------------------------------------------------------- the model's blame, scenario by scenario
def _claimed(h: Harness, src: str = "manual") -> tuple[str, str]:
    wid = h.create(src)
    return wid, h.claim(wid)


def early_execution_timeout(h: Harness) -> None:
    """Renewed all the way to started_at + budget; the monitor runs at exactly that instant."""
    wid, tok = _claimed(h)
    start, limit = h.now(), h.spec.phase_timeout("execution")
    lt = h.spec.lease_for("manual")
    while h.now() < start + limit:
        h.advance_to(min(h.now() + lt.renew_interval, start + limit))
        h.do("renew", work_id=wid, token=tok)
    h.do("expire")


def wait_timeout_record(h: Harness) -> None:
    """A wait runs out; the record must name wait_timeout (read back after the expire)."""
    wid, tok = _claimed(h)
    h.do("set_waiting", work_id=wid, token=tok, kind=next(iter(h.spec.waiting_statuses)), ref="cb-1", timeout=60.0)
    h.advance(60.0 + QUANTUM)
    h.do("expire")


def close_out_at_lapse_instant(h: Harness) -> None:
    wid, tok = _claimed(h)
    h.advance_to(h.item(wid)["lease_expires_at"] + h.spec.lease_for("manual").grace)
    h.do("close_out", work_id=wid, token=tok, status="done")


def outbox_same_payload_other_key_order(h: Harness) -> None:
    h.do("outbox_enqueue", key="k1", destination="d", payload={"a": 1, "b": 2})
    h.do("outbox_enqueue", key="k1", destination="d", payload={"b": 2, "a": 1})


def first_record_result(h: Harness) -> None:
    wid, tok = _claimed(h)
    r = h.do("effect_begin", work_id=wid, step_id="s1", tool="t", input={}, step_class="pure", token=tok).value["receipt"]
    h.do("effect_record", key=r["key"], input_hash=r["input_hash"], result={"provider_id": None, "ok": True}, token=tok)
    h.do("effect_lookup", key=r["key"])


BLAME = [
    # (variant, scenario, the clause the model must blame)
    (broken_timing.ExecTimeoutInclusive, early_execution_timeout, "retry.execution_timeout"),
    (broken_timing.StatusReasonAlwaysLeaseExpired, wait_timeout_record, "core.expire.timeout_reason"),
    (broken_timing.CloseOutRefusedAtExactLapse, close_out_at_lapse_instant, "lease.fencing"),
    (broken_timing.OutboxPayloadKeyOrder, outbox_same_payload_other_key_order, "outbox.dedupe"),
    (broken_timing.EffectResultDropsNulls, first_record_result, "idem.record"),
]


@pytest.mark.parametrize(("cls", "scenario", "clause"), BLAME, ids=lambda x: getattr(x, "__name__", x))
def test_model_blames_the_right_clause(cls, scenario, clause, harness_for):
    scenario(harness_for("reference"))  # the contract's own behaviour passes
    h = harness_for(_address(cls))
    with pytest.raises(ClauseFailure) as info:
        scenario(h)
    assert info.value.clauses == [clause], f"{cls.__name__}: the model blamed {info.value.clauses}, expected {clause}"


def test_every_model_blame_variant_has_a_scenario():
    assert set(broken_timing.MODEL_BLAME) <= {cls for cls, _, _ in BLAME}
