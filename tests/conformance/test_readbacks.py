"""The periodic full comparison reads each item's record once: from the listing, which the model
compares snapshot by snapshot.  Only the events are then read per item.  A listing that lies
about a record, and an event trail that lies, are both still caught there; a ledger whose
``get`` lies is caught by the read-back that follows each operation."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from ledgercheck.conformance.harness import ClauseFailure, Harness
from ledgercheck.reference.adapter import ReferenceAdapter
from ledgercheck.spec import Spec
from ledgercheck.transport.client import InProcessClient


class _Lying(ReferenceAdapter):
    """The reference, with one read able to lie about the first item once ``lie`` is set."""

    lie = ""

    def _first(self) -> str:
        assert self.ledger is not None
        return self.ledger.list()[0]["work_id"]

    def list(self, **kw: Any) -> list[dict[str, Any]]:
        out = self.ledger.list(**kw)  # type: ignore[union-attr]
        if self.lie == "list" and out:
            out[0] = dict(out[0], priority=out[0]["priority"] + 1)
        return out

    def get(self, *, work_id: str) -> dict[str, Any]:
        out = self.ledger.get(work_id=work_id)  # type: ignore[union-attr]
        return dict(out, priority=out["priority"] + 1) if self.lie == "get" and work_id == self._first() else out

    def events(self, *, work_id: str) -> list[dict[str, Any]]:
        out = self.ledger.events(work_id=work_id)  # type: ignore[union-attr]
        return out[:-1] if self.lie == "events" and work_id == self._first() and len(out) > 1 else out


def _harness(spec: Spec) -> tuple[Harness, _Lying, Counter[str]]:
    adapter = _Lying(spec)
    client = InProcessClient(adapter, "python:test_readbacks:_Lying", spec)
    seen: Counter[str] = Counter()
    call = client.call

    def counted(op: str, **args: Any) -> Any:
        seen[op] += 1
        return call(op, **args)

    client.call = counted  # type: ignore[method-assign]
    many = client.call_many

    def counted_many(calls: list[tuple[str, dict[str, Any]]]) -> Any:  # read-backs sent together (pipelining)
        for op, _ in calls:
            seen[op] += 1
        return many(calls)

    client.call_many = counted_many  # type: ignore[method-assign]
    h = Harness(client, spec, client.profiles)
    h.fresh()
    for i in range(3):
        wid = h.create(source_system="manual", source_id=f"item-{i}")
        h.claim(wid)
    return h, adapter, seen


def test_the_full_comparison_reads_each_record_once_from_the_listing(spec):
    h, _, seen = _harness(spec)
    seen.clear()
    h.verify_all()
    assert seen["list"] == 1 and seen["get"] == 0
    assert seen["events"] == len(h.model.items) == 3


# the listing's wrong field is blamed as any snapshot field the last move did not set; the trail
# that lost its last event, as a missing event
@pytest.mark.parametrize("lie, clause", [("list", "core.transition.allowed"), ("events", "trail.one_per_transition")])
def test_a_lying_listing_or_trail_fails_the_full_comparison(spec, lie, clause):
    h, adapter, _ = _harness(spec)
    h.verify_all()  # the truth passes
    adapter.lie = lie
    with pytest.raises(ClauseFailure) as info:
        h.verify_all()
    assert clause in info.value.clauses, info.value


def test_a_lying_get_fails_the_read_back_after_an_operation(spec):
    h, adapter, _ = _harness(spec)
    adapter.lie = "get"
    first = next(iter(h.model.items))
    with pytest.raises(ClauseFailure) as info:
        h.do("renew", work_id=first, token=h.token(first))
    assert "lease.renew.extends" in info.value.clauses  # the renewed record read back is not the one renew made
