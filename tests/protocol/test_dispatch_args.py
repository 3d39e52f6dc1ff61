"""The dispatcher passes a call's arguments on as they are unless one is null: null arguments are
left out (an explicit null is an absent argument), found by identity alone, so a value whose
``==`` misbehaves is passed on untouched; argument problems are still the ones _Params finds."""

from __future__ import annotations

from typing import Any

from ledgercheck.transport.client import Dispatcher


class _Recorder:
    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []

    def op(self, *, a: Any, b: Any = "default", c: Any = None) -> dict[str, Any]:
        self.got.append({"a": a, "b": b, "c": c})
        return {"ok": True}

    def any_kw(self, **kw: Any) -> list[str]:
        return sorted(kw)


class _WeirdEq:
    """Claims to equal everything, None included; raises when asked for truth."""

    def __eq__(self, other: object) -> Any:
        raise RuntimeError("== asked")

    __hash__ = object.__hash__


def test_null_arguments_are_left_out_and_others_passed_on() -> None:
    rec = _Recorder()
    d = Dispatcher(rec)
    weird = _WeirdEq()
    assert d("op", {"a": 1, "b": None}).ok
    assert d("op", {"a": weird, "c": 2}).ok
    assert d("op", {"a": None}).code == "invalid_argument"  # required, and null: missing
    assert d("op", {"a": 1, "d": 4}).code == "unsupported"
    assert d("op", {"a": 1, "d": None}).ok  # a null unknown argument is an absent one
    assert rec.got == [{"a": 1, "b": "default", "c": None}, {"a": weird, "b": "default", "c": 2},
                       {"a": 1, "b": "default", "c": None}]
    assert d("any_kw", {"x": 1, "y": None, "z": weird}).value == ["x", "z"]


def test_the_callers_arguments_are_not_changed() -> None:
    rec = _Recorder()
    d = Dispatcher(rec)
    args = {"a": 1, "b": None}
    d("op", args)
    args2 = {"a": 1, "b": 2}
    d("op", args2)
    assert args == {"a": 1, "b": None} and args2 == {"a": 1, "b": 2}
