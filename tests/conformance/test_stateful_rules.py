"""The stateful machine: rule sets follow the contract's profiles, arguments come from the
contract's own ``args`` (optional ones present and absent, strings at their edges, numbers at
their bounds), a worker name that takes an item again must not get through with the token it
held before, and a failing example prints as a short program over named bundle values."""

from __future__ import annotations

import unicodedata
from typing import Any

import pytest
from hypothesis import Phase, find, settings
from ledgercheck.conformance.harness import ClauseFailure, find_exception
from ledgercheck.conformance.stateful import hypothesis_settings, machine_profiles, make_machine, run_machine
from ledgercheck.conformance.stateful_args import ASTRAL, ArgDraws, Pools, edges
from ledgercheck.conformance.stateful_rules import Ctx
from ledgercheck.fixtures.testkit.broken import Broken

QUIET = settings(database=None, max_examples=2000, phases=(Phase.generate,))


def _draws(spec: Any) -> ArgDraws:
    return ArgDraws(spec, Pools(), [{"max_attempts": 1}])


def _optional(spec: Any) -> list[tuple[str, str]]:
    return [(op, name) for op, o in spec.operations.items() for name, a in o.args.items() if not a.required and name != "now"]


def test_every_optional_argument_is_drawn_present_and_absent(spec):
    draws = _draws(spec)
    pairs = _optional(spec)
    assert ("close_out", "reason") in pairs and len(pairs) >= 15
    for op, name in pairs:
        strategy = draws.call(op)
        assert name in find(strategy, lambda a, n=name: n in a, settings=QUIET), (op, name)
        assert name not in find(strategy, lambda a, n=name: n not in a, settings=QUIET), (op, name)


def test_required_arguments_are_always_drawn_and_taken_ones_never(spec):
    draws = _draws(spec)
    got = find(draws.call("set_waiting", ("work_id", "token")), lambda a: True, settings=QUIET)
    assert {"kind", "ref"} <= set(got) and not {"work_id", "token", "now"} & set(got)


def test_strings_are_drawn_at_their_edges(spec):
    draws = _draws(spec)
    owners = draws.value("owner", "string")
    plain = Pools().owners[0] + "-é"  # the pool's first value, given a letter whose NFC and NFD differ
    for want in (plain.swapcase(), f" {plain}", f"{plain} ", unicodedata.normalize("NFD", plain), plain + ASTRAL):
        assert find(owners, lambda v, w=want: v == w, settings=QUIET) == want
    # empty where the type allows it, fields the record may hold as null included (the contract
    # says an empty run id is none and an empty owner is the name '')
    for name in ("reason", "owner", "source_run_id"):
        assert find(draws.value(name, "string"), lambda v: v == "", settings=QUIET) == ""
    # a non-empty type never gets an empty or blank value
    refs = draws.value("ref", "nonempty_string")
    with pytest.raises(Exception, match="No examples found"):
        find(refs, lambda v: not v.strip(), settings=QUIET)


def test_edges_differ_from_the_value_and_keep_empty_only_where_allowed():
    vals = edges("Wörker", allow_empty=False)
    assert "Wörker" not in vals and "" not in vals and len(set(vals)) == len(vals) >= 5
    assert "" in edges("x", allow_empty=True)


def test_numbers_are_drawn_at_their_bounds(spec):
    draws = _draws(spec)
    prio = draws.value("priority", "priority")
    for want in (spec.priority_min - 1, spec.priority_min, spec.priority_max, spec.priority_max + 1):
        assert find(prio, lambda v, w=want: v == w, settings=QUIET) == want
    assert find(draws.value("max", "positive_int"), lambda v: v == 0, settings=QUIET) == 0  # the first invalid value


def test_an_argument_type_the_machine_cannot_draw_is_named(spec):
    with pytest.raises(ValueError, match="'when'.*'instant'"):
        _draws(spec).value("when", "instant")


def test_rule_sets_follow_the_profiles_of_the_contract(spec, harness_for):
    full = make_machine(harness_for("reference"), only="lifecycle")
    for op in ("renew", "fail", "set_waiting", "effect_begin", "cancel", "recover", "reacquire", "crash", "retries"):
        assert hasattr(full, op), op
    core = make_machine(harness_for("reference", ["core"]), only="lifecycle")
    assert hasattr(core, "create") and hasattr(core, "close_out") and hasattr(core, "reacquire")
    # every rule of a profile the adapter does not claim is gone, the scenarios that need them too
    for op in ("renew", "fail", "set_waiting", "effect_begin", "cancel", "recover", "crash", "retries", "promote_due"):
        assert not hasattr(core, op), op
    messaging = make_machine(harness_for("reference", ["inbox", "outbox"]), only="messaging")
    assert hasattr(messaging, "inbox_deliver") and hasattr(messaging, "outbox_enqueue")
    assert not any(hasattr(messaging, r) for r in ("create", "claim", "probe", "drive", "reacquire", "log_append"))


def test_monitors_are_the_contracts_monitor_operations(spec, harness_for):
    h = harness_for("reference")
    c = Ctx(h, frozenset(op for op in spec.operations if h.claims(op)))
    assert c.monitors == [op for op, o in spec.operations.items() if o.kind == "monitor"]


class FencesByOwner(Broken):
    """Fences close-out, failure and waiting by the worker's name: a token that was once handed
    to the worker now holding the item is taken as the live one (renewal stays right)."""

    BREAKS = "lease.fencing"
    WHAT = "a superseded token is accepted when it was handed to the same worker name"

    def reset(self, config: dict[str, Any] | None = None) -> None:
        super().reset(config)
        self._owner_of: dict[str, str] = {}

    def _issued(self, snap: Any) -> Any:
        if isinstance(snap, dict) and snap.get("lease_token"):
            self._owner_of[snap["lease_token"]] = snap.get("owner")
        return snap

    def _fence(self, work_id: Any, token: Any) -> Any:
        if not isinstance(work_id, str) or token not in self._owner_of:
            return token
        try:
            snap = self._snap(work_id)
        except Exception:
            return token
        live = snap.get("lease_token")
        return live if live and snap.get("owner") == self._owner_of[token] else token

    def claim(self, **kw: Any) -> Any:
        return self._issued(self.ledger.claim(**kw))

    def resume(self, **kw: Any) -> Any:
        return self._issued(self.ledger.resume(**kw))

    def close_out(self, *, work_id: str, token: str, **kw: Any) -> Any:
        return self.ledger.close_out(work_id=work_id, token=self._fence(work_id, token), **kw)

    def fail(self, *, work_id: str, token: str, **kw: Any) -> Any:
        return self.ledger.fail(work_id=work_id, token=self._fence(work_id, token), **kw)

    def set_waiting(self, *, work_id: str, token: str, **kw: Any) -> Any:
        return self.ledger.set_waiting(work_id=work_id, token=self._fence(work_id, token), **kw)


def _stateful_failure(h: Any, seed: int, examples: int) -> ClauseFailure | None:
    opts = hypothesis_settings("dev", database=None, max_examples=examples, phases=(Phase.generate,))
    try:
        run_machine(make_machine(h, only="lifecycle"), opts, seed)
    except BaseException as e:  # noqa: BLE001 - the run's failure is what is looked at
        return find_exception(e, ClauseFailure)
    return None


def test_the_same_owner_taking_an_item_again_cannot_use_its_old_token(harness_for):
    h = harness_for("python:test_stateful_rules:FencesByOwner")
    h = harness_for("python:test_stateful_rules:FencesByOwner", machine_profiles(h.client.profiles, "lifecycle"))
    failure = _stateful_failure(h, 0, 60)
    assert failure is not None, "a ledger that fences by owner name passed the stateful run"
    assert "lease.fencing" in failure.clauses, failure.clauses


def test_a_failing_example_prints_as_a_program_over_named_values(harness_for, capsys):
    name = "python:ledgercheck.fixtures.testkit.broken:RenewsWhileWaiting"
    h = harness_for(name)
    h = harness_for(name, machine_profiles(h.client.profiles, "lifecycle"))
    # no shrinking here (minutes on a busy machine): the example as found already names its values
    opts = hypothesis_settings("dev", database=None, max_examples=60, phases=(Phase.generate,))
    with pytest.raises(BaseException) as info:
        run_machine(make_machine(h, only="lifecycle"), opts, 0)
    failure = find_exception(info.value, ClauseFailure)
    assert failure is not None and "lease.renew.conditions" in failure.clauses
    printed = capsys.readouterr().out + "\n".join(getattr(info.value, "__notes__", []))
    program = [ln for ln in printed.splitlines() if ln.startswith(("state.", "work_")) and "full_check" not in ln]
    # the item is a named value that later steps refer to, not an integer pick
    assert any(ln.startswith("work_0 = state.") for ln in program), printed[-2000:]
    assert any("work=work_" in ln for ln in program) and not any(" i=" in ln or "(i=" in ln for ln in program), program


@pytest.mark.parametrize("how", ["lapse", "requeue", "fail", "resume"])
def test_reacquire_refuses_the_old_token_of_the_same_owner(how, harness_for):
    def run(address: str) -> None:
        h = harness_for(address)
        h = harness_for(address, machine_profiles(h.client.profiles, "lifecycle"))
        make_machine(h, only="lifecycle")().reacquire(how=how, owner="worker-ann", status="done")
        h.verify_all()

    run("reference")
    with pytest.raises(ClauseFailure) as info:
        run("python:test_stateful_rules:FencesByOwner")
    assert "lease.fencing" in info.value.clauses, info.value.clauses
