"""The result checker's quick path never accepts what the full JSON Schema validator refuses."""

from __future__ import annotations

from typing import Any

import fastjsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ledgercheck.spec import default_spec
from ledgercheck.transport.wire import protocol_schema, quick_accept, result_checker

SPEC = default_spec()
DOC = protocol_schema(SPEC)
DEFS = DOC["$defs"]
RETURNS = sorted({op.returns for op in SPEC.operations.values()})
FULL = {r: fastjsonschema.compile({"$defs": DEFS, "$ref": f"#/$defs/{r}"}) for r in RETURNS}
QUICK = {r: quick_accept({"$ref": f"#/$defs/{r}"}, DEFS) for r in RETURNS}

scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False, allow_infinity=False, width=32),
                    st.sampled_from(["", "queued", "running", "done", "w-1", "manual", "claimed"]))
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                               st.dictionaries(st.text(max_size=3), inner, max_size=3)), max_leaves=8)


def _full_ok(ret: str, value: Any) -> bool:
    try:
        FULL[ret](value)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


def _mutations(value: Any) -> list[Any]:
    """Values one small step away from a valid one: a field dropped, retyped or nulled."""
    out: list[Any] = []
    if isinstance(value, dict):
        for k in value:
            for repl in (None, True, 1, 1.5, "x", [], {}):
                out.append({**value, k: repl})
            out.append({x: y for x, y in value.items() if x != k})
            out += [{**value, k: m} for m in _mutations(value[k])[:6]]
    elif isinstance(value, list) and value:
        out += [[m, *value[1:]] for m in _mutations(value[0])[:12]]
        out.append([*value, "stray"])
    return out


def _valid_results() -> dict[str, list[Any]]:
    """Real results of every return type, from a short session with the reference ledger."""
    from ledgercheck.transport.client import connect

    c = connect("reference", SPEC, check_results=False)
    got: dict[str, list[Any]] = {r: [] for r in RETURNS}
    try:
        c.reset({})
        t = 1_000_000.0
        calls = [("create", {"source_system": "manual", "source_id": "a", "now": t}),
                 ("create", {"source_system": "manual", "source_id": "b", "priority": 3, "payload": {"x": [1, 2.5]}, "now": t})]
        for op, args in calls:
            got[SPEC.operations[op].returns].append(c.call(op, **args).value)
        wid = got["create_result"][0]["work"]["work_id"]
        w = c.call("claim", owner="o", work_id=wid, now=t + 1).value
        got["work_or_null"].append(w)
        got["work_or_null"].append(None)
        tok = w["lease_token"]
        for op, args in [("renew", {"work_id": wid, "token": tok, "now": t + 2}), ("get", {"work_id": wid}), ("list", {}),
                         ("events", {"work_id": wid}), ("active", {}),
                         ("effect_begin", {"work_id": wid, "step_id": "s", "tool": "t", "input": {"q": 1}, "step_class": "idempotent_with_key",
                                           "token": tok, "now": t + 3}),
                         ("effect_list", {"work_id": wid}), ("expire", {"now": t + 10_000}),
                         ("inbox_deliver", {"recipient": "r", "message_id": "m", "sender": "s", "body": {"n": 1}, "now": t}),
                         ("inbox_drain", {"recipient": "r", "now": t}), ("inbox_nack", {"recipient": "r", "message_id": "m", "error": "e", "now": t}),
                         ("outbox_enqueue", {"key": "k", "destination": "d", "payload": {"p": 1}, "now": t}), ("outbox_pending", {"now": t}),
                         ("log_append", {"stream": "s", "expected_seq": 0, "kind": "k", "payload": {}, "now": t}), ("log_read", {"stream": "s"}),
                         ("recover", {"now": t + 20_000}), ("hello", {"protocol": "1.0"})]:
            if op not in SPEC.operations:
                continue
            args = {k: v for k, v in args.items() if k in SPEC.operations[op].args}
            out = c.call(op, **args)
            if out.ok:
                got[SPEC.operations[op].returns].append(out.value)
    finally:
        c.close()
    return got


VALID = _valid_results()


def test_real_results_take_the_quick_path() -> None:
    covered = 0
    for ret, values in VALID.items():
        for v in values:
            assert _full_ok(ret, v), (ret, v)
            assert QUICK[ret](v), f"{ret}: a valid result missed the quick path: {v!r:.200}"
            covered += 1
    assert covered >= 15 and {"work", "event_list", "create_result", "work_list"} <= {r for r, vs in VALID.items() if vs}


@pytest.mark.parametrize("ret", [r for r in RETURNS if VALID.get(r)])
def test_quick_path_refuses_every_near_miss_the_schema_refuses(ret: str) -> None:
    for good in VALID[ret]:
        for bad in _mutations(good):
            if QUICK[ret](bad):
                assert _full_ok(ret, bad), f"{ret}: the quick path accepted what the schema refuses: {bad!r:.300}"


@settings(max_examples=300, deadline=None)
@given(ret=st.sampled_from(RETURNS), value=json_values)
def test_quick_path_never_accepts_what_the_schema_refuses(ret: str, value: Any) -> None:
    if QUICK[ret](value):
        assert _full_ok(ret, value)


def test_checker_messages_still_come_from_the_full_validator() -> None:
    chk = result_checker(SPEC)
    snap = VALID["work"][0]
    assert chk.problem("get", snap) is None
    msg = chk.problem("get", {**snap, "attempt": "one"})
    assert msg is not None and msg.startswith("get returned a malformed result") and "attempt" in msg
    assert chk.problem("events", [{**VALID["event_list"][0][0], "seq": True}]) is not None



def test_quick_path_cases_it_must_get_right() -> None:
    """An absent required property is "not sure" (its KeyError is caught), an absent optional
    one passes, a list's items are checked in the loop as their own schema says."""
    snap = VALID["work"][0]
    assert QUICK["work"](snap)
    for bad in ({**snap, "attempt": "one"}, {**snap, "attempt": True}, {**snap, "cancel_requested": None},
                {k: v for k, v in snap.items() if k != "lease_token"}, {k: v for k, v in snap.items() if k != "result"}):
        assert not QUICK["work"](bad) and not _full_ok("work", bad)
    assert QUICK["work"]({**snap, "result": {"any": ["thing"]}}) and QUICK["work"]({**snap, "extra": 1})
    event = VALID["event_list"][0][0]
    without_at = {k: v for k, v in event.items() if k != "at"}  # "at" is optional: absent passes, null does not
    assert QUICK["event_list"]([event, without_at]) and _full_ok("event_list", [event, without_at])
    for bad in ([event, {**event, "at": None}], [event, {k: v for k, v in event.items() if k != "seq"}], [event, "x"],
                [event, [event]]):
        assert not QUICK["event_list"](bad) and not _full_ok("event_list", bad)
    # stricter than the schema where it may be: an integral float for an integer is left to it
    assert not QUICK["event_list"]([event, {**event, "seq": 1.0}]) and _full_ok("event_list", [event, {**event, "seq": 1.0}])
    assert QUICK["work_list"]([snap, snap]) and not QUICK["work_list"]([snap, {**snap, "status": None}])
    assert QUICK["work_or_null"](None) and QUICK["work_or_null"](snap) and not QUICK["work_or_null"]({})
