"""The result checker's compiled quick path (``quick_accept``, source generated and run with
``exec``) gives the same answer as its plain version (``quick_accept_plain``, the schema read at
each call) over generated schemas and values: the protocol's own definitions and schemas built
from every keyword the quick path knows, plus ones it does not (its "not sure"), recursive
definitions, nullable and multi-type lists, required properties absent, bools among integers."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample
from ledgercheck.spec import default_spec
from ledgercheck.transport import wire
from ledgercheck.transport.wire import protocol_schema, quick_accept, quick_accept_plain

LONG = os.environ.get("LEDGERCHECK_THOROUGH") == "1"  # the long tier: ten times the examples
DEFS = protocol_schema(default_spec())["$defs"]
KEYS = ["a", "b", "c"]
SCALARS = [None, True, False, 0, 1, -1, 2, 1.0, 0.5, -2.5, "", "a", "x"]

scalar = st.sampled_from(SCALARS)
json_value = st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                          st.dictionaries(st.sampled_from(KEYS + ["z"]), inner, max_size=4)),
                          max_leaves=10)
type_name = st.sampled_from(["string", "integer", "number", "boolean", "null", "object", "array"])
LOCAL = ["A", "B", "C"]  # definitions of the generated documents (they may refer to each other and themselves)


def _schemas(leaf_refs: bool = True) -> st.SearchStrategy[Any]:
    ref = st.sampled_from([f"#/$defs/{n}" for n in LOCAL] + ["#/$defs/missing", "#/elsewhere"])
    leaf = st.one_of(
        st.just(True), st.just({}), st.just(False),
        st.fixed_dictionaries({"type": st.one_of(type_name, st.lists(type_name, max_size=3), st.just("float"))}),
        st.fixed_dictionaries({"enum": st.lists(scalar, max_size=3)}),
        st.fixed_dictionaries({"const": st.one_of(scalar, st.just([1]), st.just({"a": 1}))}),
        st.fixed_dictionaries({"minimum": st.sampled_from([0, 1, 0.5])}, optional={"type": type_name}),
        st.fixed_dictionaries({"$ref": ref}),
        st.fixed_dictionaries({"pattern": st.just("x")}),  # a keyword the quick path does not know
    )

    def extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.fixed_dictionaries({}, optional={
            "type": st.one_of(type_name, st.lists(type_name, min_size=1, max_size=2)),
            "properties": st.dictionaries(st.sampled_from(KEYS), inner, max_size=3),
            "required": st.lists(st.sampled_from(KEYS + ["z"]), max_size=3, unique=True),
            "additionalProperties": st.one_of(st.booleans(), inner),
            "items": inner, "anyOf": st.lists(inner, min_size=1, max_size=3),
            "$ref": ref, "description": st.just("d"), "enum": st.lists(json_value, max_size=2),
            "minimum": st.just(0),
        })

    return st.recursive(leaf, extend, max_leaves=12)


schema = _schemas()
defs = st.fixed_dictionaries({n: schema for n in LOCAL})


def _same(s: Any, d: Any, values: list[Any]) -> list[Any]:
    """The values on which the compiled and the plain predicate disagree."""
    compiled, plain = quick_accept(s, d), quick_accept_plain(s, d)
    return [v for v in values if _answer(compiled, v) != _answer(plain, v)]


def _answer(check: Any, v: Any) -> Any:
    """True, False, or the exception raised (a definition that refers to itself before
    looking at any part of the value recurses without end in both versions, as in any validator)."""
    try:
        return bool(check(v))
    except RecursionError:
        return RecursionError


def _near(s: Any, d: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values shaped after a schema (its properties present or not), so that the checks past the
    first type test are reached, not only refused at once."""
    if depth > 3 or not isinstance(s, dict):
        return json_value
    if "$ref" in s and str(s["$ref"])[8:] in d:
        return _near(d[str(s["$ref"])[8:]], d, depth + 1)
    options = [json_value]
    props = s.get("properties") or {}
    if props:
        options.append(st.fixed_dictionaries({}, optional={k: _near(sub, d, depth + 1) for k, sub in props.items()})
                       .flatmap(lambda m: st.dictionaries(st.sampled_from(["z", "q"]), scalar, max_size=1).map(lambda x: {**m, **x})))
    if "items" in s:
        options.append(st.lists(_near(s["items"], d, depth + 1), max_size=3))
    if "enum" in s and s["enum"]:
        options.append(st.sampled_from(s["enum"]))
    return st.one_of(*options)


@settings(max_examples=400 if LONG else 40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), s=schema, d=defs)
@example(data=None, s={"type": "object", "properties": {"a": {"type": ["integer", "null"]}}, "required": ["a"]},
         d={"A": True, "B": True, "C": True})
@example(data=None, s={"items": {"$ref": "#/$defs/A"}}, d={"A": {"items": {"$ref": "#/$defs/A"}, "type": "array"}, "B": {}, "C": {}})
def test_compiled_and_plain_quick_paths_agree_on_generated_schemas(data: Any, s: Any, d: dict[str, Any]) -> None:
    values = list(SCALARS) + [[], {}, {"a": 1}, {"a": None, "b": True}, [1, True], [{"a": 1}], {"a": {"b": 1}}]
    if data is not None:
        values += [data.draw(_near(s, d), label="near") for _ in range(4)]
    assert _same(s, d, values) == []


@settings(max_examples=300 if LONG else 30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(sorted(DEFS)))
def test_compiled_and_plain_quick_paths_agree_on_the_protocol_schema(data: Any, name: str) -> None:
    s = {"$ref": f"#/$defs/{name}"}
    values = [data.draw(_near(s, DEFS), label="near") for _ in range(6)]
    assert _same(s, DEFS, values) == []


def _counterexample() -> Any:
    """A schema and value the two versions disagree on, searched without shrinking."""
    def differs(case: tuple[Any, Any]) -> bool:
        s, v = case
        return bool(_same(s, {"A": True, "B": True, "C": True}, [v]))
    small = st.recursive(st.sampled_from([True, {}, {"type": "integer"}, {"type": ["integer", "null"]}, {"enum": [1, "a"]},
                                          {"minimum": 1}, {"pattern": "x"}]),
                         lambda inner: st.fixed_dictionaries({}, optional={
                             "properties": st.dictionaries(st.sampled_from(KEYS), inner, max_size=2),
                             "required": st.lists(st.sampled_from(KEYS), max_size=2, unique=True),
                             "items": inner, "anyOf": st.lists(inner, min_size=1, max_size=2)}), max_leaves=5)
    return find(st.tuples(small, json_value), differs,
                settings=settings(max_examples=2000, database=None, deadline=None, phases=[Phase.generate]))


def _loose_types(self: Any, x: str, kinds: list[str], out: list[str], ind: str) -> None:
    REAL_TYPE_TEST(self, x, [*kinds, "bool"] if "int" in kinds and "bool" not in kinds else kinds, out, ind)


def _absent_is_fine(self: Any, name: str, schema: Any) -> None:
    REAL_FUNCTION(self, name, schema)
    self.src[-1] = self.src[-1].replace("    except KeyError:\n        return False", "    except KeyError:\n        return True")


REAL_TYPE_TEST, REAL_FUNCTION = wire._QuickCompiler._type_test, wire._QuickCompiler.function


@pytest.mark.parametrize("broken", ["compiled_bool_is_int", pytest.param("compiled_absent_required_accepted", marks=pytest.mark.thorough),
                                    "plain_required_ignored"])
def test_the_differential_property_finds_a_changed_version(monkeypatch: pytest.MonkeyPatch, broken: str) -> None:
    """Either version changed -> the property above finds a schema and value they disagree on."""
    if broken == "compiled_bool_is_int":
        monkeypatch.setattr(wire._QuickCompiler, "_type_test", _loose_types)
    elif broken == "compiled_absent_required_accepted":
        monkeypatch.setattr(wire._QuickCompiler, "function", _absent_is_fine)
    else:
        real = wire.quick_accept_plain

        def lax(s: Any, d: Any) -> Any:
            def strip(x: Any) -> Any:
                if isinstance(x, dict):
                    return {k: strip(v) for k, v in x.items() if k != "required"}
                return [strip(v) for v in x] if isinstance(x, list) else x
            return real(strip(s), {k: strip(v) for k, v in d.items()})
        monkeypatch.setattr(f"{__name__}.quick_accept_plain", lax)
    try:
        found = _counterexample()
    except NoSuchExample:  # pragma: no cover - the failure this test exists for
        pytest.fail(f"the differential property did not notice the {broken} change")
    assert found is not None
