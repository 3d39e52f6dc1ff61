"""The model answers "is this a Mapping" for a plain dict without asking the ABC, and same_json
compares two JSON scalars at once: the same answers as isinstance(x, Mapping) and the
element-wise comparison for every kind of value, subclasses and booleans included."""

from __future__ import annotations

import itertools
from collections import OrderedDict, UserDict
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ledgercheck.conformance.model.base import _is_map, same_json


def _same_json_as_it_was(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same_json_as_it_was(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json_as_it_was(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping | list) or isinstance(b, Mapping | list):
        return False
    return a == b


class _Str(str):
    pass


class _List(list):  # type: ignore[type-arg]
    pass


VALUES: list[Any] = [None, True, False, 0, 1, 2, 1.0, 2.0, 0.5, "", "1", "a", _Str("a"), [], [1], [1.0], [True], _List([1]),
                     (1,), {}, {"a": 1}, {"a": 1.0}, {"a": True}, OrderedDict(a=1), UserDict(a=1), MappingProxyType({"a": 1}),
                     {"a": [1, {"b": None}]}, {"a": [1.0, {"b": None}]}, {"a": [1, {"b": False}]}]


def test_is_map_is_isinstance_mapping() -> None:
    for v in VALUES:
        assert _is_map(v) == isinstance(v, Mapping), v


def test_same_json_is_the_elementwise_comparison() -> None:
    for a, b in itertools.product(VALUES, repeat=2):
        assert same_json(a, b) == _same_json_as_it_was(a, b), (a, b)
