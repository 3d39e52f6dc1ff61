"""A read-back compares an item's trail field by field only from the first event after those it
found right before (``Model.check_trail``); those are checked by their bytes alone.  The verdicts
must be the full comparison's: an old event rewritten in any way the full comparison sees (a value,
a type, a seq, an event dropped) is still caught as trail.append_only, the fold is still judged on
the whole trail, and a trail that did not change is not compared again."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ledgercheck.conformance.harness import ClauseFailure, Harness
from ledgercheck.conformance.model import Model
from ledgercheck.reference.adapter import ReferenceAdapter
from ledgercheck.spec import Spec
from ledgercheck.transport.client import InProcessClient


def _walk(spec: Spec) -> tuple[Harness, str]:
    """A harness on the reference with one item taken through a few moves (each read back)."""
    client = InProcessClient(ReferenceAdapter(spec), "python:test_trail_prefix:ReferenceAdapter", spec)
    h = Harness(client, spec, client.profiles)
    h.fresh()
    wid = h.create(source_system="manual", source_id="prefix-0")
    tok = h.claim(wid)
    h.do("renew", work_id=wid, token=tok)
    h.do("set_waiting", work_id=wid, token=tok, kind=next(iter(spec.waiting_statuses)), ref="r-1")
    return h, wid


def _full(model: Model, wid: str, trail: list[dict[str, Any]], snap: dict[str, Any]) -> list[str]:
    """The clauses the full comparison finds (check_events and check_fold keep nothing)."""
    return sorted({v.clause for v in model.check_events(wid, trail) + model.check_fold(snap, trail)})


def _set(path: tuple[Any, ...], value: Any) -> Any:
    def change(trail: list[dict[str, Any]]) -> None:
        target: Any = trail
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


def _drop_first(trail: list[dict[str, Any]]) -> None:
    del trail[0]


def _swap(trail: list[dict[str, Any]]) -> None:
    trail[0], trail[1] = trail[1], trail[0]


def _reorder_keys(trail: list[dict[str, Any]]) -> None:
    trail[0] = dict(reversed(list(trail[0].items())))


def _int_to_float(trail: list[dict[str, Any]]) -> None:
    trail[0]["data"]["priority"] = float(trail[0]["data"]["priority"])


# (how the old events change, whether the full comparison finds anything)
CHANGES = {
    "value": (_set((0, "data", "source_id"), "someone-else"), True),
    "bool for int": (_set((0, "data", "attempt"), False), True),
    "seq": (_set((1, "seq"), 99), True),
    "type": (_set((1, "type"), "work_created"), True),
    "dropped": (_drop_first, True),
    "swapped": (_swap, True),
    "fold field": (_set((1, "data", "lease_version"), 7), True),
    # the same values (the full comparison passes them; the bytes differ, so it runs)
    "key order": (_reorder_keys, False),
    "int as float": (_int_to_float, False),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_changed_old_event_gets_the_full_comparisons_verdict(spec, change):
    h, wid = _walk(spec)
    snap = h.raw("get", work_id=wid).value
    trail = h.raw("events", work_id=wid).value
    assert h.model.check_trail(wid, trail, snap) == [] and wid in h.model._verified  # kept
    alter, caught = CHANGES[change]
    bad = copy.deepcopy(trail)
    alter(bad)
    want = _full(h.model, wid, bad, snap)
    got = sorted({v.clause for v in h.model.check_trail(wid, bad, snap)})
    assert got == want
    assert bool(got) == caught and (not caught or "trail.append_only" in got or "eventlog.fold" in got), got
    if change in ("value", "bool for int", "seq", "dropped"):
        assert "trail.append_only" in got, got
    # a trail that failed is not kept: the next read of the right trail is compared in full
    assert (wid in h.model._verified) == (not caught)


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The first event each comparison of a trail with the model's compares field by field."""
    seen: list[int] = []
    compare = Model._compare_events

    def spy(self: Model, w: str, actual: Any, start: int = 0) -> Any:
        seen.append(start)
        return compare(self, w, actual, start)

    monkeypatch.setattr(Model, "_compare_events", spy)
    return seen


def test_an_unchanged_trail_is_compared_from_its_first_new_event(spec, starts):
    h, wid = _walk(spec)
    starts.clear()
    h.verify(wid)
    n = len(h.model.events[wid])
    assert starts == [n]  # nothing new: no event compared field by field
    h.do("resume", work_id=wid, owner="worker-2")  # one more event, read back
    assert starts[-1] == n and len(h.model.events[wid]) == n + 1


def test_a_model_trail_taken_over_is_compared_in_full(spec, starts):
    h, wid = _walk(spec)
    snap = h.raw("get", work_id=wid).value
    trail = h.raw("events", work_id=wid).value
    h.model.adopt(wid, snap, trail)  # a new model trail (as after an indefinite answer)
    starts.clear()
    assert h.model.check_trail(wid, trail, snap) == []
    assert h.model.check_trail(wid, trail, snap) == []
    assert starts == [0, len(trail)]


def test_the_fold_goes_on_from_the_kept_one(spec):
    h, wid = _walk(spec)
    snap = h.raw("get", work_id=wid).value
    trail = h.raw("events", work_id=wid).value
    assert h.model.check_trail(wid, trail, snap) == []
    # the snapshot lies about a field only the kept events set: the fold still sees it
    lie = dict(snap, source_id="not-the-folded-one")
    assert [v.clause for v in h.model.check_trail(wid, trail, lie)] == ["eventlog.fold"]
    assert h.model.check_trail(wid, trail, snap) == []


class RewritesHistory(ReferenceAdapter):
    """The reference, except that once ``rewrite`` is set every trail it hands out has its first
    event changed: the item's source_id (a value) or its attempt count as a boolean (a type)."""

    rewrite = ""

    def events(self, *, work_id: str) -> list[dict[str, Any]]:
        out = self.ledger.events(work_id=work_id)  # type: ignore[union-attr]
        if self.rewrite == "value":
            out[0]["data"]["source_id"] = "rewritten"
        elif self.rewrite == "type":
            out[0]["data"]["attempt"] = bool(out[0]["data"]["attempt"])
        return out


@pytest.mark.parametrize("rewrite", ["value", "type"])
def test_a_ledger_rewriting_an_event_read_back_before_fails_append_only(spec, rewrite):
    adapter = RewritesHistory(spec)
    client = InProcessClient(adapter, "python:test_trail_prefix:RewritesHistory", spec)
    h = Harness(client, spec, client.profiles)
    h.fresh()
    wid = h.create(source_system="manual", source_id="history-0")
    tok = h.claim(wid)  # read back: the trail is kept
    assert wid in h.model._verified
    adapter.rewrite = rewrite
    with pytest.raises(ClauseFailure) as info:
        h.do("renew", work_id=wid, token=tok)
    assert "trail.append_only" in info.value.clauses, info.value


def test_a_kept_fold_shares_no_object_with_the_answer_it_came_from(spec):
    """An in-process ledger may hand out objects it keeps and change them later: the fold kept
    from a trail must not change with them."""
    client = InProcessClient(ReferenceAdapter(spec), "python:test_trail_prefix:ReferenceAdapter", spec)
    h = Harness(client, spec, client.profiles)
    h.fresh()
    wid = h.create(source_system="manual", source_id="result-0")
    tok = h.claim(wid)
    h.do("close_out", work_id=wid, token=tok, status=spec.terminal_statuses[0], result={"answer": [1, 2]})
    snap = h.raw("get", work_id=wid).value
    trail = h.raw("events", work_id=wid).value
    pristine = copy.deepcopy(trail)
    h.model._verified.pop(wid)  # (the fold kept is then taken from this very trail)
    assert h.model.check_trail(wid, trail, snap) == []
    trail[-1]["data"]["result"]["answer"].append(3)  # the object the fold took its result from
    assert h.model.check_trail(wid, pristine, snap) == []


def test_equal_events_shared_differently_are_compared_in_full(spec, starts):
    """The encoding writes an object met again as a reference to it: the same values with their
    objects shared otherwise encode otherwise, and the trail is compared in full (with the full
    comparison's verdict), never taken for the kept one on bytes that mean something else."""
    from ledgercheck.conformance.model.base import _trail_encoding

    h, wid = _walk(spec)
    snap = h.raw("get", work_id=wid).value
    trail = h.raw("events", work_id=wid).value
    assert h.model.check_trail(wid, trail, snap) == []
    kept = h.model._verified[wid][2]
    shared = copy.deepcopy(trail)
    for e in shared[1:]:  # one str object for every event's (equal) work id
        e["work_id"] = shared[0]["work_id"]
    wrong = copy.deepcopy(trail)
    wrong[1]["data"] = wrong[0]["data"]  # one object, but not the value the second event had
    unshared = copy.deepcopy(trail)
    for e in unshared:  # every string a new object of its own
        for k, v in list(e.items()):
            if isinstance(v, str):
                e[k] = "".join(list(v))
    for alt, caught in ((shared, False), (unshared, False), (wrong, True)):
        blob = _trail_encoding(alt)
        assert blob is not None and not blob.startswith(kept, 5)
        want = _full(h.model, wid, alt, snap)
        starts.clear()
        got = sorted({v.clause for v in h.model.check_trail(wid, alt, snap)})
        assert starts == [0] and got == want and bool(got) == caught, (got, want)
        assert h.model.check_trail(wid, trail, snap) == []  # (kept again from the right trail)


def test_the_trail_encoding_never_enters_the_list_in_its_table(spec):
    from ledgercheck.conformance.model.base import _trail_encoding

    h, wid = _walk(spec)
    trail = h.raw("events", work_id=wid).value
    held = [trail, trail]  # the caller's list, referred to from elsewhere too
    blob = _trail_encoding(held[0])
    assert blob is not None and blob[:1] == b"["
    assert _trail_encoding([object()]) is None
