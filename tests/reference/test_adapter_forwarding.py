"""The reference adapter forwards operations to its current ledger, whatever it looked up before."""

from __future__ import annotations

from typing import Any

import pytest
from ledgercheck.reference.adapter import ReferenceAdapter
from ledgercheck.transport.protocol import LedgerError

T0 = 100_000.0


def test_after_a_reset_operations_reach_the_new_ledger() -> None:
    a = ReferenceAdapter()
    try:
        a.reset()
        wid = a.create(source_system="manual", source_id="x", now=T0)["work"]["work_id"]
        assert a.get(work_id=wid)["work_id"] == wid
        a.reset()
        with pytest.raises(LedgerError) as info:
            a.get(work_id=wid)  # the first ledger's item: not in the new one
        assert info.value.code == "not_found"
        a.close()
        with pytest.raises(LedgerError, match="no open ledger"):
            a.get(work_id=wid)
    finally:
        a.close()


class Counting(ReferenceAdapter):
    """A subclass whose own __getattr__ wraps what it forwards."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __getattr__(self, name: str) -> Any:
        fn = super().__getattr__(name)

        def call(**kw: Any) -> Any:
            self.seen.append(name)
            return fn(**kw)
        return call


def test_a_subclass_that_wraps_what_it_forwards_wraps_every_call() -> None:
    a = Counting()
    try:
        a.reset()
        for i in range(3):
            a.create(source_system="manual", source_id=f"x{i}", now=T0)
        assert a.seen == ["create"] * 3
    finally:
        a.close()
