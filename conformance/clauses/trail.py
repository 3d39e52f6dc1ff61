"""Clause tests of the trail profile: the per-item event trail."""

from __future__ import annotations

from collections.abc import Iterable

from ledgercheck.spec import Spec

from ..harness import Harness, NotApplicable
from . import CaseFn, case, cases, check
from .core import _drivable, _poke_everything, _table_edges, _tour


def _edge_event_case(src: str, dst: str, op: str) -> CaseFn:
    """The edge src -> dst by ``op`` appends one event recording the move (trail profile)."""
    def fn(h: Harness) -> None:
        h.need(op)
        wid = h.create()
        h.drive(wid, src)
        before = len(h.model.events[wid])
        h.perform(wid, src, dst, op)
        ev = h.events_of(wid, "trail.one_per_transition")
        moves = [e for e in ev[before:] if e.get("to_status") is not None]
        check(len(moves) == 1 and moves[-1].get("from_status") in (src, None) and moves[-1].get("to_status") == dst,
              "trail.one_per_transition", f"{op}: {len(moves)} transition event(s) for {src} -> {dst}, expected one recording it", h)
    return fn


@cases("trail.one_per_transition")
def _edge_events(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for src, dst, op in _table_edges(spec):
        yield f"{src}->{dst}:{op}", _edge_event_case(src, dst, op)


@cases("trail.one_per_transition")
def _created_event(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    """Creation appends exactly one event, of the type create is assigned; a create that finds
    its unit's record appends none."""
    for src in spec.source_systems:
        def fn(h: Harness, src: str = src) -> None:
            kw = {"source_run_id": "run-1"} if src in h.spec.run_id_required_for else {}
            wid = h.create(src, "first", **kw)
            ev = h.events_of(wid, "trail.one_per_transition")
            want = h.spec.operations["create"].event_for()
            check(len(ev) == 1 and ev[0].get("type") == want, "trail.one_per_transition",
                  f"new work has events {[e.get('type') for e in ev]}, expected one {want}", h)
            h.do("create", source_system=src, source_id="first", **kw)
            ev = h.events_of(wid, "trail.one_per_transition")
            check(len(ev) == 1, "trail.one_per_transition", f"creating the unit again left {len(ev)} events, expected one", h)
        yield f"create-{src}", fn


@case("trail.one_per_transition", "tour")
def _one_per(h: Harness) -> None:
    wid = h.create()
    n_before = 0
    for target in list(h.spec.statuses):
        try:
            path = h.path_to(h.item(wid)["status"], target)
        except NotApplicable:
            continue
        for src, dst, op in path:
            h.perform(wid, src, dst, op)
            ev = h.events_of(wid, "trail.one_per_transition")
            moves = [e for e in ev if e.get("to_status") is not None]
            check(len(moves) > n_before, "trail.one_per_transition", f"{op} {src} -> {dst} appended no transition event", h)
            n_before = len(moves)


@case("trail.one_per_transition", "refusals-append-nothing")
def _refused_nothing(h: Harness) -> None:
    wid = h.create()
    h.drive(wid, "done") if "done" in h.spec.statuses else None
    n = len(h.events_of(wid, "trail.one_per_transition"))
    _poke_everything(h, wid)
    check(len(h.events_of(wid, "trail.one_per_transition")) == n, "trail.one_per_transition", "refused operations appended events", h)


@cases("trail.types")
def _types(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for op, o in spec.operations.items():
        if o.kind not in ("transition", "lease", "create", "monitor") or op == "recover":
            continue
        def fn(h: Harness, op: str = op) -> None:
            h.need(op)
            wid = h.create()
            if op == "create":
                return
            edges = [t for t in h.spec.transitions if op in t.ops]
            if edges:
                t = next((e for e in edges if _drivable(h, h.spec.initial_status, e.src)), None)
                if t is None:
                    raise NotApplicable(f"cannot reach an edge of {op}")
                h.drive(wid, t.src)
                h.perform(wid, t.src, t.dst, op)
            else:  # lease-kind: renew
                h.drive(wid, h.spec.operations[op].statuses[0])
                h.advance(h.contract_seconds(1.0))
                h.do(op, work_id=wid, token=h.token(wid))
            h.events_of(wid, "trail.types")  # verified against the model after each step
        yield op, fn


@case("trail.append_only", "history-stable")
def _append_only(h: Harness) -> None:
    wid = h.create()
    seen: list[dict] = []
    for _ in _tour(h, wid):
        ev = h.events_of(wid, "trail.append_only")
        check(ev[: len(seen)] == seen, "trail.append_only", "earlier events changed", h)
        seqs = [e["seq"] for e in ev]
        check(seqs == list(range(h.spec.first_seq, h.spec.first_seq + len(ev))), "trail.append_only", f"seqs {seqs}", h)
        seen = ev
