"""Clause tests of the core profile."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Mapping

from ledgercheck.spec import Spec, rules
from ledgercheck.transport.clock import QUANTUM

from ..harness import OWNER, DriveBlocked, Harness, NotApplicable
from . import CaseFn, answered, case, cases, check, durable, fail


def _statuses(spec: Spec) -> list[str]:
    return list(spec.statuses)


def _source_id(h: Harness) -> str:
    return f"unit-{len(h.model.items)}"


# ---------------------------------------------------------------- statuses
@cases("core.status.enum")
def _enum(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for status in _statuses(spec):
        def fn(h: Harness, status: str = status) -> None:
            wid = h.create()
            h.drive(wid, status)
            got = h.raw("get", work_id=wid).value
            check(got.get("status") in h.spec.statuses, "core.status.enum", f"snapshot status {got.get('status')!r}", h)
            for w in h.raw("list").value:
                check(w.get("status") in h.spec.statuses, "core.status.enum", f"listed status {w.get('status')!r}", h)
        yield status, fn


@cases("core.status.terminal")
def _terminal(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for status in _statuses(spec):
        def fn(h: Harness, status: str = status) -> None:
            wid = h.create()
            h.drive(wid, status)
            if h.spec.terminal(status):
                _poke_everything(h, wid)
                check(h.item(wid)["status"] == status, "core.status.terminal", f"{status} is terminal but the item moved", h)
            else:
                # a non-terminal status always has a way forward for the work
                ways = [t for t in h.spec.transitions if t.src == status]
                check(bool(ways), "core.status.terminal", f"{status} is not terminal but nothing leaves it", h)
                h.drive(wid, ways[0].dst) if _drivable(h, status, ways[0].dst) else None
        yield status, fn


def _drivable(h: Harness, src: str, dst: str) -> bool:
    try:
        h.path_to(src, dst)
        return True
    except NotApplicable:
        return False


def _poke_everything(h: Harness, wid: str) -> None:
    """Try every operation that could change an item; the model says which must be refused."""
    it = h.item(wid)
    toks = h.model.tokens.get(wid, [])
    tok = toks[-1] if toks else "no-such-token"
    tries: list[tuple[str, dict]] = [
        ("claim", {"owner": OWNER, "work_id": wid}),
        ("renew", {"work_id": wid, "token": tok}),
        ("set_waiting", {"work_id": wid, "token": tok, "kind": next(iter(h.spec.waiting_statuses)), "ref": "late-ref"}),
        ("resume", {"work_id": wid, "owner": OWNER}),
        ("fail", {"work_id": wid, "token": tok, "error_class": next(iter(h.spec.error_classes))}),
        ("cancel", {"work_id": wid}),
    ]
    for st in h.spec.terminal_statuses:
        tries.append(("close_out", {"work_id": wid, "token": tok, "status": st}))
    for op, args in tries:
        if h.claims(op):
            out = h.do(op, **args)
            if op == "claim" and h.last_claim_fallback:
                continue  # asked for this item, got "the next queued one" instead: says nothing here
            if h.spec.terminal(it["status"]) and op != "requeue":
                check(not out.ok, "core.terminal.immutable", f"{op} on {it['status']} work was accepted", h)


# ---------------------------------------------------------------- create
@cases("core.create.initial")
def _initial(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for src in spec.source_systems:
        def fn(h: Harness, src: str = src) -> None:
            kw = {"source_run_id": "run-1"} if src in h.spec.run_id_required_for else {}
            wid = h.create(src, "first", **kw)
            it = h.raw("get", work_id=wid).value
            check(it["status"] == h.spec.initial_status and it["attempt"] == 0 and it["owner"] is None,
                  "core.create.initial", f"new work is {it['status']} attempt {it['attempt']} owner {it['owner']!r}", h)
        yield src, fn


@case("core.create.unique_unit", "same-unit")
def _unique(h: Harness) -> None:
    a = h.create("conversation", "chat-7")
    b = h.do("create", source_system="conversation", source_id="chat-7")
    check(b.value["work"]["work_id"] == a and b.value["created"] is False, "core.create.unique_unit", "second create made a new record", h)
    check(len(h.raw("list").value) == 1, "core.create.unique_unit", "two records for one unit", h)


@case("core.create.unique_unit", "after-progress")
def _unique_later(h: Harness) -> None:
    a = h.create("control", "cmd-1")
    h.claim(a)
    h.do("create", source_system="control", source_id="cmd-1")
    check(h.item(a)["status"] == "running", "core.create.unique_unit", "re-creating the unit changed it", h)


@case("core.create.unique_unit", "duplicate-answers-stored")
def _unique_answer(h: Harness) -> None:
    # the second create differs from the first in everything but the unit (another priority, a
    # payload, a later time) and comes after the record moved on: its answer must be the stored
    # record as it is now, field by field (the model compares it), not one built from the call
    spec = h.spec
    first, second = spec.priority_min, spec.priority_max
    a = h.create("control", "cmd-echo", priority=first)
    h.advance(h.contract_seconds(1.0))
    h.claim(a)
    h.advance(h.contract_seconds(1.0))
    out = h.do("create", source_system="control", source_id="cmd-echo", priority=second, payload={"again": True})
    check(out.ok and out.value["work"]["work_id"] == a, "core.create.unique_unit", "second create did not answer the existing record", h)
    got = h.raw("get", work_id=a).value
    check(got.get("priority") == first and got.get("status") == h.item(a)["status"], "core.create.unique_unit",
          f"re-creating the unit changed it: priority {got.get('priority')!r}, status {got.get('status')!r}", h)


# source ids are strings compared as they are: ids differing only by case (or by one non-ASCII
# letter) are different units, whatever a collation or case-folding index would say
_UNITS = ("chat-1", "chat-2", "Chat-1", "CHAT-1", "chät-1", "ÇHAT-1", "çhat-1")


@case("core.create.unique_unit", "distinct-units")
def _distinct(h: Harness) -> None:
    ids = {}
    for sid in _UNITS:
        ids[sid] = h.create("conversation", sid)
    h.create("control", "chat-1")
    check(len(set(ids.values())) == len(_UNITS), "core.create.unique_unit", "distinct units were merged", h)
    check(len(h.raw("list").value) == len(_UNITS) + 1, "core.create.unique_unit", "distinct units were merged", h)
    for sid, wid in ids.items():  # and each still finds its own record
        out = h.do("create", source_system="conversation", source_id=sid)
        check(out.value["work"]["work_id"] == wid, "core.create.unique_unit", f"re-creating {sid!r} found another unit's record", h)


@cases("core.create.unique_unit")
def _distinct_runs(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    """The unit is the whole triple, for every source system (not just the one that must carry
    a run id): the same source_id under two run ids, or with and without one, is two units."""
    for src in spec.source_systems:
        def fn(h: Harness, src: str = src) -> None:
            runs = ["run-a", "run-b"] + ([] if src in h.spec.run_id_required_for else [None])
            ids = {}
            for run in runs:
                kw = {} if run is None else {"source_run_id": run}
                ids[run] = h.do("create", source_system=src, source_id="unit-r", **kw).value["work"]["work_id"]
            check(len(set(ids.values())) == len(runs), "core.create.unique_unit",
                  f"{src} units differing only by source_run_id were merged: {ids}", h)
            for run, wid in ids.items():
                kw = {} if run is None else {"source_run_id": run}
                out = h.do("create", source_system=src, source_id="unit-r", **kw)
                check(out.value["work"]["work_id"] == wid, "core.create.unique_unit",
                      f"re-creating ({src}, unit-r, {run}) found another unit's record", h)
        yield f"runs-{src}", fn


@cases("core.create.source_system")
def _bad_create(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    bad = {
        "unknown-source": {"source_system": "carrier-pigeon"},
        "empty-source": {"source_system": ""},
        "priority-below": {"priority": spec.priority_min - 1},
        "priority-above": {"priority": spec.priority_max + 1},
        "priority-not-int": {"priority": "high"},
        # JSON booleans and fractions are not integers (whatever a language's int type says)
        "priority-true": {"priority": True},
        "priority-false": {"priority": False},
        "priority-fraction": {"priority": spec.priority_min + 0.5},
        "priority-numeric-string": {"priority": str(spec.priority_default)},
    }
    for name, over in bad.items():
        def fn(h: Harness, over: dict = over) -> None:
            args = {"source_system": "manual", "source_id": "x"} | over
            out = h.do("create", **args)
            check(not out.ok, "core.create.source_system", f"create with {over} was accepted", h)
            check(h.raw("list").value == [], "core.create.source_system", "a refused create left a record", h)
        yield name, fn


@cases("core.scheduler.run_identity")
def _runs(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for src in spec.run_id_required_for:
        def missing(h: Harness, src: str = src) -> None:
            out = h.do("create", source_system=src, source_id="nightly-report")
            check(not out.ok, "core.scheduler.run_identity", f"{src} work without source_run_id was accepted", h)

        def two_runs(h: Harness, src: str = src) -> None:
            a = h.create(src, "nightly-report", source_run_id="2026-11-20")
            b = h.create(src, "nightly-report", source_run_id="2026-11-21")
            check(a != b, "core.scheduler.run_identity", "two runs of one schedule share a record", h)
            c = h.do("create", source_system=src, source_id="nightly-report", source_run_id="2026-11-21")
            check(c.value["work"]["work_id"] == b, "core.scheduler.run_identity", "the same run got a second record", h)

        def empty(h: Harness, src: str = src) -> None:
            out = h.do("create", source_system=src, source_id="nightly-report", source_run_id="")
            check(not out.ok, "core.scheduler.run_identity", f"{src} work with an empty source_run_id was accepted", h)

        def run_ids_as_is(h: Harness, src: str = src) -> None:
            runs = ("night-A", "night-a", "NIGHT-A", "nacht-ä")
            ids = [h.create(src, "nightly-report", source_run_id=r) for r in runs]
            check(len(set(ids)) == len(runs), "core.scheduler.run_identity", f"runs {runs} do not all have records of their own", h)

        yield f"{src}-needs-run-id", missing
        yield f"{src}-empty-run-id", empty
        yield f"{src}-runs-are-units", two_runs
        yield f"{src}-run-ids-case-sensitive", run_ids_as_is
    for src in spec.source_systems:
        if src in spec.run_id_required_for:
            continue

        def empty_is_none(h: Harness, src: str = src) -> None:
            # an empty run id is none: the record holds null (the model predicts it and compares
            # the answer and the read-back), and it is the unit created without a run id, in
            # either order
            a = h.do("create", source_system=src, source_id="unit-e", source_run_id="").value["work"]["work_id"]
            b = h.do("create", source_system=src, source_id="unit-e")
            check(b.value["work"]["work_id"] == a, "core.scheduler.run_identity",
                  f"({src}, unit-e) with an empty run id and without one are two records", h)
            c = h.create(src, "unit-f")
            d = h.do("create", source_system=src, source_id="unit-f", source_run_id="")
            check(d.value["work"]["work_id"] == c, "core.scheduler.run_identity",
                  f"({src}, unit-f) without a run id and with an empty one are two records", h)
        yield f"{src}-empty-run-id-is-none", empty_is_none


# ---------------------------------------------------------------- transitions
def _edge_case(src: str, dst: str, op: str) -> CaseFn:
    """The edge src -> dst by ``op``: the record moves (judged on the snapshot; the model checks
    every field after the step)."""
    def fn(h: Harness) -> None:
        h.need(op)
        wid = h.create()
        h.drive(wid, src)
        h.perform(wid, src, dst, op)
        got = h.raw("get", work_id=wid).value
        check(isinstance(got, dict) and got.get("status") == dst, "core.transition.allowed",
              f"{op}: the record is {got.get('status') if isinstance(got, dict) else got!r} after {src} -> {dst}", h)
    return fn


def _table_edges(spec: Spec) -> Iterable[tuple[str, str, str]]:
    for t in spec.transitions:
        for op in t.ops:
            if op == "recover":
                continue  # recover moves through timeout in one call; the recovery clauses cover it
            yield t.src, t.dst, op


@cases("core.transition.allowed")
def _allowed(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for src, dst, op in _table_edges(spec):
        yield f"{src}->{dst}:{op}", _edge_case(src, dst, op)


def _unguarded_case(src: str, dst: str, guard: str) -> CaseFn:
    """A close-out along a guarded edge whose guard does not hold is refused.  With the cancel
    profile claimed, cancel.intent_first judges it (the guard is the cancel request)."""
    def fn(h: Harness) -> None:
        if h.claims("cancel"):
            raise NotApplicable(f"the guard {guard} is judged by the cancel profile's clauses")
        wid = h.create()
        h.drive(wid, src)
        tok = h.token(wid) or "no-such-token"
        out = h.do("close_out", work_id=wid, token=tok, status=dst)
        check(not out.ok and h.item(wid)["status"] == src, "core.transition.forbidden",
              f"close-out moved {src} work to {dst} without {guard}", h)
    return fn


def _attempts_toward(h: Harness, wid: str, dst: str) -> list[tuple[str, dict]]:
    """Operations that could move an item to ``dst``, with plausible arguments."""
    toks = h.model.tokens.get(wid, [])
    tok = toks[-1] if toks else "no-such-token"
    out: list[tuple[str, dict]] = []
    ops = sorted({op for t in h.spec.transitions if t.dst == dst for op in t.ops})
    for op in ops:
        if not h.claims(op):
            continue
        if op == "claim":
            out.append((op, {"owner": OWNER, "work_id": wid}))
        elif op == "resume":
            out.append((op, {"work_id": wid, "owner": OWNER}))
        elif op == "set_waiting":
            kind = h.spec.statuses[dst].waiting_kind
            if kind:
                out.append((op, {"work_id": wid, "token": tok, "kind": kind, "ref": "ref-forbidden"}))
        elif op == "close_out":
            if h.spec.terminal(dst):
                out.append((op, {"work_id": wid, "token": tok, "status": dst}))
        elif op == "fail":
            retry = not h.spec.terminal(dst)
            cls = next(c for c, r in h.spec.error_classes.items() if r == retry)
            out.append((op, {"work_id": wid, "token": tok, "error_class": cls}))
        elif op in ("cancel", "requeue"):
            out.append((op, {"work_id": wid}))
        elif op in ("expire", "promote_due", "recover"):
            out.append((op, {}))
    return out


def _forbidden_case(src: str, dst: str, clause: str) -> CaseFn:
    def fn(h: Harness) -> None:
        wid = h.create()
        h.drive(wid, src)
        tried = 0
        for op, args in _attempts_toward(h, wid, dst):
            out = h.do(op, **args)
            tried += 1
            if h.item(wid)["status"] == dst:
                fail(clause, f"{op} moved {wid} along the forbidden edge {src} -> {dst}", h)
            if out.ok and op not in ("expire", "promote_due", "recover", "cancel") and h.item(wid)["status"] != src:
                return  # a legitimate move elsewhere (e.g. cancel intent); the model vouched for it
        if tried == 0:
            raise NotApplicable(f"no claimed operation can target {dst}")
    return fn


@cases("core.transition.forbidden")
def _forbidden(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    named = set(spec.forbidden_examples)
    for src, dst in spec.forbidden_pairs():
        if (src, dst) in named:
            continue
        yield f"{src}->{dst}", _forbidden_case(src, dst, "core.transition.forbidden")
    for t in spec.transitions:
        if t.guard and "close_out" in t.ops and spec.terminal(t.dst):
            yield f"{t.src}->{t.dst}:without-{t.guard}", _unguarded_case(t.src, t.dst, t.guard)


@cases("core.transition.corruption")
def _corruption(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for src, dst in spec.forbidden_examples:
        yield f"{src}->{dst}", _forbidden_case(src, dst, "core.transition.corruption")


# ---------------------------------------------------------------- a tour of the table (trail and eventlog tests)
def _tour(h: Harness, wid: str) -> list[str]:
    """Visit every status the claimed profiles can reach, in a sensible order."""
    visited = [h.item(wid)["status"]]
    for target in h.spec.statuses:
        if target == h.item(wid)["status"]:
            continue
        try:
            path = h.path_to(h.item(wid)["status"], target)
        except NotApplicable:
            continue
        for src, dst, op in path:
            h.perform(wid, src, dst, op)
            visited.append(dst)
    return visited


# ---------------------------------------------------------------- terminal, close-out, waiting exclusivity
@cases("core.terminal.immutable")
def _immutable(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for status in spec.terminal_statuses:
        def fn(h: Harness, status: str = status) -> None:
            wid = h.create()
            h.drive(wid, status)
            before = h.raw("get", work_id=wid).value
            h.advance(h.contract_seconds(1.0))
            _poke_everything(h, wid)
            after = h.raw("get", work_id=wid).value
            for k in ("status", "owner", "lease_token", "lease_version", "lease_expires_at", "result", "finished_at"):
                check(before.get(k) == after.get(k), "core.terminal.immutable", f"{k} changed on {status} work: {before.get(k)!r} -> {after.get(k)!r}", h)
        yield status, fn


@cases("core.waiting_closeout.exclusive")
def _exclusive(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for status in spec.statuses:
        if spec.terminal(status):
            continue
        def fn(h: Harness, status: str = status) -> None:
            wid = h.create()
            tok = h.claim(wid)
            out = h.do("close_out", work_id=wid, token=tok, status=status)
            check(not out.ok, "core.waiting_closeout.exclusive", f"close-out to non-terminal {status} was accepted", h)
        yield f"close-out-to-{status}", fn


@case("core.running.renew_or_leave", "lapse")
def _renew_or_leave(h: Harness) -> None:
    wid = h.create()
    h.claim(wid)
    h.advance_to(h.lapse_time(wid))
    h.do("expire")
    check(h.item(wid)["status"] != "running", "core.running.renew_or_leave", "running work without renewals stayed running", h)


@case("core.running.renew_or_leave", "renewing-stays")
def _renewing(h: Harness) -> None:
    h.need("renew")
    wid = h.create()
    tok = h.claim(wid)
    lt = h.spec.lease_for("manual")
    # six renewals, or as many as fit inside the execution budget: a stint longer than that is timed
    # out (retry.execution_timeout), which is not what this case judges
    limit = h.spec.phase_timeout("execution")
    steps = 6 if limit is None else max(1, min(6, int((limit - QUANTUM) // lt.renew_interval)))
    for _ in range(steps):
        h.advance(lt.renew_interval)
        h.do("renew", work_id=wid, token=tok)
        h.do("expire")
    check(h.item(wid)["status"] == "running", "core.running.renew_or_leave", "renewed work was expired", h)


@case("core.close_out.explicit", "only-close-out-completes")
def _explicit(h: Harness) -> None:
    wid = h.create()
    tok = h.claim(wid)
    for op, args in (("renew", {"work_id": wid, "token": tok}), ("expire", {}), ("promote_due", {}), ("cancel", {"work_id": wid})):
        if h.claims(op):
            h.do(op, **args)
            check(h.item(wid)["status"] != "done", "core.close_out.explicit", f"{op} completed the work", h)
    h.do("close_out", work_id=wid, token=tok, status="done", result={"answer": 42})
    got = h.raw("get", work_id=wid).value
    check(got["status"] == "done" and got["result"] == {"answer": 42}, "core.close_out.explicit", f"close-out gave {got['status']} {got['result']!r}", h)


@case("core.close_out.explicit", "with-reason")
def _explicit_with_reason(h: Harness) -> None:
    """``reason`` is an optional argument of close-out: giving one changes nothing but the
    recorded reason (every status close-out reaches without a guard)."""
    for status in [t.dst for t in h.spec.edges_of("close_out") if t.src == "running" and not t.guard]:
        wid = h.create()
        tok = h.claim(wid)
        h.do("close_out", work_id=wid, token=tok, status=status, reason="the worker says why")
        got = h.raw("get", work_id=wid).value
        check(got["status"] == status, "core.close_out.explicit",
              f"close-out as {status} with a reason gave {got['status']}", h)


@case("core.close_out.explicit", "holder-only")
def _holder_only(h: Harness) -> None:
    wid = h.create()
    h.claim(wid)
    out = h.do("close_out", work_id=wid, token="not-the-token", status="done")
    check(not out.ok, "core.close_out.explicit", "close-out without the lease token was accepted", h)


# Results of the shapes a careless store changes: null-valued and nested keys, an empty list,
# non-ASCII text, a list with a null, a bare string, an explicit null and none given at all.
OUTCOMES: tuple[tuple[str, dict[str, object]], ...] = (
    ("object", {"result": {"answer": 42, "note": None, "detail": {"tags": [], "by": "réunion à 10h ✓"}}}),
    ("list", {"result": ["a", None, 3]}),
    ("text", {"result": "no reply after 3 tries"}),
    ("null", {"result": None}),
    ("absent", {}),
)


@cases("core.close_out.outcome")
def _outcome(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    """Close-out into each terminal status it reaches from a leased one, with each result shape:
    the returned snapshot (judged by the model) and a later read carry that result exactly."""
    for t in spec.edges_of("close_out"):
        if not spec.statuses[t.src].leased:
            continue
        def fn(h: Harness, src: str = t.src, dst: str = t.dst, guard: str | None = t.guard) -> None:
            if guard is not None:
                h.need("cancel")  # the guard (a cancel request) is what a cancel records on leased work
            for _, given in OUTCOMES:
                wid = h.create()
                h.drive(wid, src)
                if guard is not None:
                    h.do("cancel", work_id=wid)
                h.do("close_out", work_id=wid, token=h.token(wid), status=dst, **given)
                want = given.get("result")
                got = h.raw("get", work_id=wid).value
                check(got["status"] == dst and json.dumps(got.get("result"), sort_keys=True) == json.dumps(want, sort_keys=True),
                      "core.close_out.outcome", f"closed out {dst} with result {want!r}, a read gives {got['status']} "
                      f"with result {got.get('result')!r}", h)
        yield f"{t.src}->{t.dst}", fn


# ---------------------------------------------------------------- requeue
@cases("core.requeue.terminal")
def _requeue(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for status in spec.statuses:
        def fn(h: Harness, status: str = status) -> None:
            wid = h.create()
            h.drive(wid, status)
            out = h.do("requeue", work_id=wid, reason="operator")
            if h.spec.terminal(status):
                check(out.ok and h.item(wid)["status"] == h.spec.initial_status, "core.requeue.terminal", f"requeue of {status} failed", h)
                tok = h.claim(wid)
                check(h.item(wid)["lease_token"] == tok, "core.requeue.terminal", "requeued work could not run again", h)
            else:
                check(not out.ok, "core.requeue.terminal", f"requeue of non-terminal {status} was accepted", h)
        yield status, fn


# ---------------------------------------------------------------- errors
@cases("core.not_found")
def _not_found(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for op, o in spec.operations.items():
        if "work_id" not in o.args or not o.args["work_id"].required:
            continue
        def fn(h: Harness, op: str = op) -> None:
            h.need(op)
            h.create()
            args = _valid_args(h, op, "w-does-not-exist")
            out = h.do(op, **args)
            _offered_elsewhere(h, op)
            check(not out.ok and out.code == "not_found", "core.not_found", f"{op} on an unknown id answered {out.code or 'ok'}", h)
        yield op, fn


def _offered_elsewhere(h: Harness, op: str) -> None:
    """An operation of another profile that the ledger answered unsupported: whether it refuses
    bad calls is not core's to judge (that profile's own clauses report it not offered), so the
    case does not apply, and core's verdict never hangs on another profile's operations."""
    prof = h.spec.operations[op].profile
    if prof == "core":
        return
    gone = [v for v in h.unoffered_here if v == op or v.startswith(f"{op} ")]
    if gone:
        h.unoffered_here[:] = [v for v in h.unoffered_here if v not in gone]
        raise NotApplicable(f"{op} is not offered; the clauses of profile {prof} report it")


def _valid_args(h: Harness, op: str, wid: str) -> dict:
    sample = {
        "string": "s", "nonempty_string": "s", "time": h.now(), "duration": 10.0, "object": {}, "any": {"k": 1},
        "boolean": True, "positive_int": 1, "nonnegative_int": 0, "source_system": "manual", "priority": h.spec.priority_default,
        "retry_policy": {}, "status": h.spec.initial_status, "terminal_status": h.spec.terminal_statuses[0],
        "waiting_kind": next(iter(h.spec.waiting_statuses)), "error_class": next(iter(h.spec.error_classes)),
        "step_class": next(iter(h.spec.step_classes)), "receipt_state": "unknown", "effect_key": "0" * 64,
        "wakeup_kind": next(iter(h.spec.wakeup_kinds), "message"),
    }
    args = {}
    for name, arg in h.spec.operations[op].args.items():
        if name == "work_id":
            args[name] = wid
        elif arg.required:
            args[name] = sample[arg.type]
    return args


# Values outside each argument type of the contract (spec/args.py says what each type admits):
# wrong JSON types (a boolean is no integer, a fraction no count), out-of-range numbers (0 or
# less for positive durations and counts), empty strings where a non-empty one is required,
# names the contract does not list.  Only values every reading of the type rejects: no
# integral floats (2.0 is 2 in JSON), no case variants of listed names.  ``any`` admits every
# JSON value, so a required ``any`` argument is only tested missing.
_WRONG: dict[str, tuple] = {
    "string": (17, True, ["s"]),
    "nonempty_string": ("", 17, False),
    "time": ("noon", True),
    "duration": (-5, 0, True, "soon"),
    "object": ([1], "text", 5),
    "any": (),
    "boolean": ("yes", 1),
    "positive_int": (0, -1, 1.5, True, "2"),
    "nonnegative_int": (-1, 0.5, True, "0"),
    "source_system": ("nowhere", "", 5),
    "priority": (),  # from the contract's range: see _wrong_values
    "retry_policy": ({"max_attempts": 0}, "fast", {"max_attempts": True}),
    "status": ("finished", "", 3),
    "terminal_status": ("running", "finished", True),
    "waiting_kind": ("coffee", ""),
    "error_class": ("cosmic_rays", ""),
    "step_class": ("magic", ""),
    "receipt_state": ("maybe", ""),
    "effect_key": ("xyz", "0" * 63, "g" * 64, 64),
}
_MISSING = object()


def _wrong_values(spec: Spec, arg_type: str) -> tuple:
    """The values outside ``arg_type``; a priority's come from the contract's own range (one past
    each end, a boolean, a fraction inside the range, the default as a numeric string)."""
    if arg_type == "priority":
        return (spec.priority_max + 1, spec.priority_min - 1, True, spec.priority_min + 0.5, str(spec.priority_default))
    return _WRONG.get(arg_type, ())


@cases("core.invalid_argument")
def _invalid(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    """Every argument of every operation (of any profile: a test of an operation whose profile
    the adapter does not claim is not claimed), with each value outside its type (missing, for
    a required argument of a type that admits every value).  The contract has no per-profile
    invalid-argument clause; an argument that a specific clause of another profile judges (a
    waiting kind or reference, an error class) is left to that clause's own tests."""
    fallback = spec.error_blame["invalid_argument"]
    for op, o in spec.operations.items():
        if o.kind == "session":
            continue
        for name, arg in o.args.items():
            if name == "now":
                continue
            wrong: list = list(_wrong_values(spec, arg.type))
            if arg.required and not wrong:
                wrong.append(_MISSING)
            if not wrong:
                continue
            judge = rules.argument_blame(spec, op, name)  # the contract says which clause a bad argument breaks
            if o.profile != "core" and judge != fallback and spec.clause(judge).profile != "core":
                continue

            def fn(h: Harness, op: str = op, name: str = name, wrong: tuple = tuple(wrong), arg=arg) -> None:
                h.need(op)
                wid = h.create()
                for bad in wrong:
                    args = _valid_args(h, op, wid)
                    if bad is _MISSING:
                        args.pop(name, None)
                        mode = f"{name} missing"
                    else:
                        args[name] = bad
                        mode = f"{name}={bad!r}"
                    before = h.raw("list").value
                    out = h.do(op, **args)
                    _offered_elsewhere(h, op)
                    codes = ("invalid_argument", "not_found")
                    if arg.type == "terminal_status" and bad in h.spec.statuses:
                        codes += ("invalid_transition",)  # a status, but a move the table forbids
                    if op != "create" or name != "source_run_id":
                        check(not out.ok and out.code in codes, "core.invalid_argument",
                              f"{op} with {mode} answered {out.code or 'ok'}", h)
                    check(len(h.raw("list").value) == len(before), "core.invalid_argument", "a refused call created work", h)
            yield f"{op}.{name}", fn


@case("core.claim.empty", "empty-ledger")
def _claim_empty(h: Harness) -> None:
    out = h.do("claim", owner=OWNER)
    check(out.ok and out.value is None, "core.claim.empty", f"claim on an empty ledger gave {out.value!r:.60}", h)


@case("core.claim.empty", "nothing-queued")
def _claim_none_queued(h: Harness) -> None:
    a = h.create()
    h.claim(a)
    b = h.create()
    h.drive(b, "done")
    out = h.do("claim", owner="worker-2")
    check(out.ok and out.value is None, "core.claim.empty", f"claim with nothing queued gave {out.value!r:.60}", h)


@case("core.claim.empty", "due-retry-not-queued")
def _claim_due_retry(h: Harness) -> None:
    """A retry that is due is still retry_scheduled until promote_due moves it: a claim with
    nothing queued neither promotes it nor hands it out."""
    h.need("fail", "promote_due")
    retryable = [c for c, r in h.spec.error_classes.items() if r]
    if not retryable:
        raise NotApplicable("the contract has no retryable error class")
    wid = h.create()
    tok = h.claim(wid)
    h.do("fail", work_id=wid, token=tok, error_class=retryable[0])
    if h.item(wid)["status"] != "retry_scheduled":
        raise NotApplicable("a retryable failure did not schedule a retry")
    h.advance_to(h.item(wid)["next_retry_at"] + QUANT)
    out = h.do("claim", owner="worker-2")
    check(out.ok and out.value is None, "core.claim.empty", f"claim with only a due retry (not promoted) gave {out.value!r:.60}", h)
    check(h.item(wid)["status"] == "retry_scheduled", "core.claim.empty", "a claim with nothing queued moved a due retry", h)


@case("core.claim.order", "priority-then-age")
def _order(h: Harness) -> None:
    prios = [h.spec.priority_max, h.spec.priority_min, h.spec.priority_default, h.spec.priority_min]
    ids = []
    for p in prios:
        ids.append(h.create(priority=p))
        h.advance(h.contract_seconds(QUANT))
    want = [w for _, _, w in sorted((p, i, w) for i, (p, w) in enumerate(zip(prios, ids, strict=True)))]
    got = []
    for _ in ids:
        out = h.do("claim", owner=OWNER)
        check(out.ok and out.value is not None, "core.transition.allowed", f"claim returned {out.value!r:.60} with queued work left", h)
        got.append(out.value["work_id"])
    check(got == want, "core.claim.order", f"claimed in order {[ids.index(g) for g in got]}, expected {[ids.index(w) for w in want]}", h)


QUANT = 0.125


@case("core.list.complete", "by-status")
def _list(h: Harness) -> None:
    targets = [s for s in h.spec.statuses if _drivable(h, h.spec.initial_status, s)]
    # one item per status, each taken to its status before the next exists (so even a queue
    # that only hands out "the next queued item" claims the intended one); queued ones last
    # (statuses a queue may hand out again by itself, like a due retry, come late too)
    targets.sort(key=lambda s: (s == h.spec.initial_status, bool(h.spec.targets("promote_due", s))))
    for s in targets:
        h.drive(h.create(), s)
    h.do("list")
    for s in h.spec.statuses:
        h.do("list", status=s)


@case("core.list.complete", "many")
def _list_many(h: Harness) -> None:
    """"Every record" has no page size: more records than any batch size the contract names
    (inbox drain, outbox relay: an implementer's natural default page) all come back, with and
    without a status filter."""
    n = 2 * max(h.spec.inbox_drain_max, h.spec.outbox_pending_max, 100) + 1
    for i in range(n):
        h.create("manual", f"bulk-{i}")
    # and past the page limits stores impose by default (1000, 1024): those records are created
    # with plain calls (the model would read each one back); the listing is judged by its count
    extra = max(0, 1025 - n)
    for i in range(extra):
        out = h.raw("create", source_system="manual", source_id=f"bulk-{n + i}", now=h.now())
        check(out.ok, "core.list.complete", f"create of bulk record {n + i} answered {out.code}", h)
    n += extra
    for args in ({}, {"status": h.spec.initial_status}):
        got = h.raw("list", **args).value
        check(isinstance(got, list) and len(got) == n and len({w.get("work_id") for w in got}) == n,
              "core.list.complete", f"list({args}) returned {len(got) if isinstance(got, list) else got!r} records of {n}", h)


@case("core.list.complete", "filters")
def _list_filters(h: Harness) -> None:
    """Every filter list defines, with its false as well as its true values, alone and combined
    (``quarantined=false`` asks for the records that are not quarantined: it is no "no filter")."""
    if h.claims("recover") and h.claims("effect_begin"):
        from .recovery import _quarantine_class, _stale_with

        try:
            cls = _quarantine_class(h.spec)
        except NotApplicable:
            cls = None
        if cls is not None:  # quarantined work first (its lapse moves the clock past any other lease)
            _stale_with(h, "pending", cls)
            h.do("recover")
    targets = [s for s in h.spec.statuses if _drivable(h, h.spec.initial_status, s)]
    targets.sort(key=lambda s: (s == h.spec.initial_status, bool(h.spec.targets("promote_due", s))))
    for s in targets:
        h.drive(h.create(), s)
    filters = {name: arg for name, arg in h.spec.operations["list"].args.items() if name != "now"}
    values: dict[str, list] = {}
    for name, arg in filters.items():
        if arg.type == "boolean":
            values[name] = [False, True]
        elif arg.type in ("status", "terminal_status"):
            values[name] = list(h.spec.statuses) if arg.type == "status" else list(h.spec.terminal_statuses)
    for name, vals in values.items():
        for v in vals:
            h.do("list", **{name: v})
    names = list(values)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            for va in values[a]:
                for vb in values[b]:
                    h.do("list", **{a: va, b: vb})


@cases("core.expire.timeout_reason")
def _reasons(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    def heartbeat(h: Harness) -> None:
        wid = h.create()
        h.claim(wid)
        h.advance_to(h.lapse_time(wid))
        out = h.do("expire")
        _reason(h, wid, out.value, h.spec.timeout_reasons["heartbeat"])

    def execution(h: Harness) -> None:
        h.need("renew")
        limit = h.spec.phase_timeout("execution")
        if limit is None:
            raise NotApplicable("the contract has no execution timeout")
        wid = h.create()
        tok = h.claim(wid)
        lt = h.spec.lease_for("manual")
        start = h.now()
        while h.now() - start <= limit:
            h.advance(lt.renew_interval)
            h.do("renew", work_id=wid, token=tok)
        out = h.do("expire")
        _reason(h, wid, out.value, h.spec.timeout_reasons["execution"])

    def waiting(h: Harness) -> None:
        h.need("set_waiting")
        wid = h.create()
        h.drive(wid, next(iter(h.spec.waiting_statuses.values())))
        h.advance_to(h.item(wid)["waiting_deadline"] + QUANT)
        out = h.do("expire")
        _reason(h, wid, out.value, h.spec.timeout_reasons["waiting"])

    yield "heartbeat", heartbeat
    yield "execution", execution
    yield "waiting", waiting


def _reason(h: Harness, wid: str, moves: list, want: str) -> None:
    mine = [m for m in moves if m.get("work_id") == wid]
    # the move's reason is optional (the `move` shape); when given it must name the phase
    check(bool(mine) and mine[0].get("reason") in (want, None), "core.expire.timeout_reason", f"expire reported {mine!r:.100}, expected reason {want}", h)
    got = h.raw("get", work_id=wid).value
    check(got.get("status_reason") == want, "core.expire.timeout_reason", f"status_reason is {got.get('status_reason')!r}, expected {want!r}", h)


def _priority_sample(spec: Spec, levels: int = 64) -> list[int]:
    """Every priority of a range of up to ``levels`` levels; of a wider one both ends and their
    neighbours, the default and an even spread in between (a test creates work at each)."""
    lo, hi = spec.priority_min, spec.priority_max
    if hi - lo < levels:
        return list(range(lo, hi + 1))
    spread = {lo + (hi - lo) * k // (levels - 1) for k in range(levels)}
    return sorted(spread | {lo, lo + 1, spec.priority_default, hi - 1, hi})


# ---------------------------------------------------------------- round-3 hunt
@case("core.transition.allowed", "claim-every-priority")
def _claim_every_priority(h: Harness) -> None:
    """queued -> running by claim holds across the priority range (_priority_sample): a claim without an id
    hands out queued work whatever its priority (the model accepts any queued item)."""
    prios = _priority_sample(h.spec)
    for p in reversed(prios):
        h.create(priority=p)
    for _ in prios:
        out = h.do("claim", owner=OWNER)
        check(out.ok and out.value is not None, "core.transition.allowed", f"claim returned {out.value!r:.60} with queued work left", h)


@case("core.list.complete", "after-changes")
def _list_after_changes(h: Harness) -> None:
    """Listing reflects every change since the last listing, not only new records."""
    ids = [h.create() for _ in range(3)]
    statuses = [s for s in h.spec.statuses if _drivable(h, h.spec.initial_status, s)]
    for s in statuses:
        h.do("list", status=s)
    for wid, s in zip(ids, ("running", "done", "cancelled"), strict=False):
        if s in statuses:
            h.drive(wid, s)
            for st in statuses:
                h.do("list", status=st)
    h.do("list")


@case("core.list.order", "creation-order")
def _list_order(h: Harness) -> None:
    """Records made at one instant, in an order that is neither their priorities', their
    source ids' nor (for a store that sorts by them) their work ids' necessarily, then one made
    later; some then moved (a lease taken, finished, requeued), so that an order by the last
    change differs too.  Every listing, with and without a status filter, gives the records in
    the order of the calls that made them: ties at one instant keep the calls' order."""
    spec = h.spec
    prios = [spec.priority_max, spec.priority_min, spec.priority_default, spec.priority_min, spec.priority_max]
    ids = [h.create(source_id=f"order-{len(prios) - i}", priority=p) for i, p in enumerate(prios)]
    h.advance(h.contract_seconds(QUANT))
    ids.append(h.create(source_id="order-0", priority=spec.priority_min))
    init = spec.initial_status
    moved = [s for s in spec.statuses if s != init and _drivable(h, init, s)]
    done = next((s for s in moved if spec.terminal(s)), None)
    leased = next((s for s in moved if spec.statuses[s].leased), None)
    try:
        for wid, s in ((ids[0], done), (ids[2], leased), (ids[4], done)):
            if s is not None:
                h.drive(wid, s)
        if done is not None and _drivable(h, done, init):
            h.drive(ids[0], init)  # back where it started, at a later instant: its place is kept
    except NotApplicable:
        pass  # a queue that hands out only its next item: the records stay as they are
    except DriveBlocked:
        if not h.last_claim_fallback:
            raise
        # the same, found on the claim itself: the claim took the queue's next item instead (one
        # more record moved), and the order of the listing is judged all the same
    listed = h.do("list").value
    got = [w.get("work_id") for w in listed if isinstance(w, Mapping)]
    want = [w for w in ids if w in got]
    check(got == want, "core.list.order",
          f"list() gave the records made as #{[ids.index(w) for w in want]} in the order #{[ids.index(w) if w in ids else w for w in got]}", h)
    for s in dict.fromkeys(h.item(w)["status"] for w in ids):
        listed = h.do("list", status=s).value
        got = [w.get("work_id") for w in listed if isinstance(w, Mapping)]
        want = [w for w in ids if w in got]
        check(got == want, "core.list.order",
              f"list(status={s}) gave the records made as #{[ids.index(w) for w in want]} in the order #{[ids.index(w) if w in ids else w for w in got]}", h)


def _kept_statuses(h: Harness) -> list[str]:
    """The statuses a reopen test leaves items in, in the order they are made: those no monitor
    operation moves once a deadline passes (a due retry, a wait's deadline: under a wall clock
    the deadline may pass while the ledger is opened again, and a ledger that shows such a move
    before its monitor runs is judged by the monitor's clauses), terminal ones first, then the
    leased status (a claim the reopen must keep), the initial status last (so a queue that
    hands out only the next queued item claims the intended one)."""
    spec = h.spec
    monitors = [op for op, o in spec.operations.items() if o.kind == "monitor"]
    moved = {s for s in spec.statuses if any(spec.targets(op, s) for op in monitors)}
    keep = [s for s in spec.statuses if (s not in moved or spec.statuses[s].leased)
            and _drivable(h, spec.initial_status, s)]
    return sorted(keep, key=lambda s: (s == spec.initial_status, bool(spec.statuses[s].leased), not spec.terminal(s)))


def _snapshots(h: Harness, ids: list[str], when: str) -> tuple[dict[str, Mapping | None], list[str] | None]:
    """Each item's snapshot by ``get`` (None: not found) and the ids ``list`` returns (None: the
    listing was refused or malformed), read without the model."""
    got: dict[str, Mapping | None] = {}
    for wid in ids:
        out = h.raw("get", work_id=wid)
        if out.ok and isinstance(out.value, Mapping):
            got[wid] = out.value
        else:
            check(not out.ok and out.code == "not_found", "core.list.complete",
                  f"get({wid!r}) {when} answered {out.value!r:.80}" if out.ok else f"get({wid!r}) {when} was refused ({out.code}: {out.message})", h)
            got[wid] = None
    listed = h.raw("list")
    ids_listed = ([w.get("work_id") for w in listed.value if isinstance(w, Mapping)]
                  if listed.ok and isinstance(listed.value, list) else None)
    return got, ids_listed


def _reopen_keeps_everything(h: Harness, same_process: bool) -> None:
    """docs/protocol.md, ``reset``: a reset naming a ``dir`` that holds a ledger opens that
    ledger, and everything committed there is visible, "whichever process committed it and
    whether the reset comes to a new process or to this one".  Items are left in every status
    nothing moves by itself (terminal ones, a claimed one, a queued one), read (get and list),
    and the ledger is opened again: by the same adapter process, reset a second time with the
    same ``dir`` (``same_process``), or by a new process.  Every item must be listed and read
    back as it was, field for field (every field of the contract's work record that a comparison
    looks at): nothing lost, no claim undone, no result forgotten.  An adapter that answers the
    second reset ``unsupported`` or ``invalid_argument`` does not offer it (never a failure);
    one that does not declare durable state is not asked."""
    with durable(h) as reopen:
        ids = []
        for status in _kept_statuses(h):
            wid = h.create()
            h.drive(wid, status)
            ids.append(wid)
        if not ids:
            raise NotApplicable("no status can be reached with the operations of the claimed profiles")
        before, listed_before = _snapshots(h, ids, "before the ledger was opened again")
        if any(v is None for v in before.values()) or listed_before is None:
            return  # the reads themselves fail before any reopen: the other list and get tests judge that
        if same_process:
            h.reopen_here()
        else:
            reopen()
        how = ("after a second reset naming the same dir in the same adapter process" if same_process
               else "after a new process opened the same dir")
        after, listed_after = _snapshots(h, ids, how)
        lost = [wid for wid in ids if after[wid] is None]
        check(not lost, "core.list.complete",
              f"{how}, {len(lost)} of {len(ids)} records are gone (get answers not_found): "
              + ", ".join(f"{wid} ({before[wid]['status']})" for wid in lost[:6]), h)
        check(listed_after is not None, "core.list.complete", f"{how}, list was refused or malformed", h)
        unlisted = [wid for wid in ids if wid not in (listed_after or [])]
        check(not unlisted, "core.list.complete",
              f"{how}, list leaves out {len(unlisted)} of {len(ids)} records: {', '.join(unlisted[:6])}", h)
        fields = [f for f, rule in h.spec.document["work_fields"].items() if rule.get("compare", "exact") != "none"]
        changed = []
        for wid in ids:
            b, a = before[wid] or {}, after[wid] or {}
            diff = [f"{f} {b.get(f)!r:.40} -> {a.get(f)!r:.40}" for f in fields if b.get(f) != a.get(f)]
            if diff:
                changed.append(f"{wid} ({b.get('status')}): {', '.join(diff)}")
        check(not changed, "core.list.complete",
              f"{how}, {len(changed)} of {len(ids)} records read back changed, with no operation in between: "
              + "; ".join(changed[:4]), h)


@cases("core.list.complete")
def _list_after_reopen(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    yield "after-reopen-same-process", lambda h: _reopen_keeps_everything(h, same_process=True)
    yield "after-reopen-new-process", lambda h: _reopen_keeps_everything(h, same_process=False)


# One identifier in forms only an exact, code point by code point comparison keeps apart: case,
# surrounding whitespace, Unicode normalization form (NFC and NFD of "cafe" with an acute accent)
# and characters beyond the Basic Multilingual Plane that differ in one code point.
ID_FORMS = ("Order-7", "order-7", "ORDER-7", " order-7", "order-7 ", "order-7\t",
            "caf\u00e9-7", "cafe\u0301-7", "\U0001f4e6-7", "\U0001f4e7-7")


def _created(h: Harness, op: str, flag: str, what: str, **args: object) -> Mapping:
    """Call ``op`` (without the model) and require a new record: ``flag`` is true in its answer."""
    out = h.raw(op, **args, now=h.now())
    check(out.ok, "core.identity.exact", f"{op} with {what} was refused ({out.code}: {out.message})", h)
    check(isinstance(out.value, Mapping) and out.value.get(flag) is True, "core.identity.exact",
          f"{op} with {what} answered {out.value!r:.160}: taken for one it has already, which differs only "
          f"by case, whitespace or normalization form", h)
    return out.value


@case("core.identity.exact", "source_id")
def _identity_source_id(h: Harness) -> None:
    """Each form of a source id is a unit of its own, stored and read back as given; a work id
    in another form (case, whitespace, normalization) finds nothing."""
    made: dict[str, str] = {}
    for sid in ID_FORMS:
        w = _created(h, "create", "created", f"source_id {sid!r}", source_system="manual", source_id=sid)["work"]
        check(w.get("source_id") == sid and w.get("work_id") not in made.values(), "core.identity.exact",
              f"create with source_id {sid!r} gave {w.get('work_id')!r} holding source_id {w.get('source_id')!r}", h)
        made[sid] = w["work_id"]
    for sid, wid in made.items():
        got = h.raw("get", work_id=wid)
        check(got.ok and got.value.get("source_id") == sid, "core.identity.exact",
              f"get({wid!r}) answered {got.value if got.ok else got.code!r:.120}, the record holds source_id {sid!r}", h)
    for wid in made.values():
        others = {wid.upper(), wid.lower(), wid.swapcase(), f" {wid}", f"{wid} ", unicodedata.normalize("NFD", wid)}
        for other in sorted(others - set(made.values())):
            got = h.raw("get", work_id=other)
            check(not got.ok, "core.identity.exact", f"get({other!r}) found {got.value.get('work_id') if isinstance(got.value, Mapping) else got.value!r}"
                  f", but the only ids are exact: {other!r} is none of them", h)


@case("core.identity.exact", "keys")
def _identity_keys(h: Harness) -> None:
    """Step ids of the effect journal, outbox keys and inbox message ids are idempotency keys:
    each form is a key of its own (for each keyed profile the adapter claims)."""
    ops = [op for op in ("effect_begin", "outbox_enqueue", "inbox_deliver") if h.claims(op)]
    if not ops:
        raise NotApplicable("the adapter claims no keyed operation (effect journal, outbox, inbox)")
    if "effect_begin" in ops:
        wid = _created(h, "create", "created", "a plain source id", source_system="manual", source_id="keys")["work"]["work_id"]
        cls = next(iter(h.spec.step_classes))
        keys = set()
        for step in ID_FORMS:
            r = _created(h, "effect_begin", "created", f"step_id {step!r}", work_id=wid, step_id=step, tool="tool.x",
                         input={"n": 1}, step_class=cls)["receipt"]
            check(r.get("step_id") == step and r.get("key") not in keys, "core.identity.exact",
                  f"effect_begin with step_id {step!r} gave receipt {r.get('key')!r} for step {r.get('step_id')!r}", h)
            keys.add(r.get("key"))
    if "outbox_enqueue" in ops:
        for key in ID_FORMS:
            m = _created(h, "outbox_enqueue", "created", f"key {key!r}", key=key, destination="dest", payload={"n": 1})
            check(m["message"].get("key") == key, "core.identity.exact",
                  f"outbox_enqueue with key {key!r} stored key {m['message'].get('key')!r}", h)
    if "inbox_deliver" in ops:
        for mid in ID_FORMS:
            _created(h, "inbox_deliver", "delivered", f"message_id {mid!r}", recipient="r", message_id=mid, sender="s", body={"n": 1})


@case("core.identity.exact", "senders-recipients-and-workers")
def _identity_names(h: Harness) -> None:
    """Names a caller gives, which the contract compares exactly like ids: an inbox message's
    sender and recipient (profile inbox: each form a sender handed back as given, and a mailbox
    of its own, its dead letters included), a worker taking a run (profile wakeups: the hand-out
    names the worker as given)."""
    inbox = all(h.claims(op) for op in ("inbox_deliver", "inbox_drain", "inbox_nack", "inbox_dead"))
    runs = all(h.claims(op) for op in ("wake_suspend", "wake_fire", "wake_take"))
    if not (inbox or runs):
        raise NotApplicable("the adapter claims neither the inbox nor the wakeups profile")
    if inbox:
        for i, sender in enumerate(ID_FORMS):  # one mailbox, a message from each form of a sender
            _created(h, "inbox_deliver", "delivered", f"sender {sender!r}", recipient="senders", message_id=f"s{i}",
                     sender=sender, body={"n": i})
        got = answered(h, "inbox_drain", "core.identity.exact", recipient="senders", max=len(ID_FORMS), now=h.now())
        pairs = sorted((m.get("message_id"), m.get("sender")) for m in got) if isinstance(got, list) else got
        check(pairs == sorted((f"s{i}", f) for i, f in enumerate(ID_FORMS)), "core.identity.exact",
              f"messages from senders {list(ID_FORMS)} came back as {pairs!r:.240}", h)
        for i, rcpt in enumerate(ID_FORMS):  # each form a mailbox of its own; its one message dead-lettered
            # a message id of its own too: the contract lets a ledger key message ids across mailboxes
            _created(h, "inbox_deliver", "delivered", f"recipient {rcpt!r}", recipient=rcpt, message_id=f"m{i}",
                     sender="s", body={"n": i})
            for _ in range(h.spec.inbox_max_nacks):
                drained = answered(h, "inbox_drain", "core.identity.exact", recipient=rcpt, max=1, now=h.now())
                check(isinstance(drained, list) and [(m.get("message_id"), m.get("body")) for m in drained] == [(f"m{i}", {"n": i})],
                      "core.identity.exact", f"mailbox {rcpt!r} handed out {drained!r:.160}; only its own m{i} (body {{'n': {i}}}) "
                      f"was delivered to it", h)
                out = h.raw("inbox_nack", recipient=rcpt, message_id=f"m{i}", now=h.now())
                check(out.ok, "core.identity.exact", f"nack of m{i} in mailbox {rcpt!r} was refused ({out.code})", h)
        if h.claims("inbox_ack"):  # each form of a message id nacked, handed out again, acked: each its own message
            for mid in ID_FORMS:
                _created(h, "inbox_deliver", "delivered", f"message_id {mid!r}", recipient="acks", message_id=mid,
                         sender="s", body={"id": mid})
            answered(h, "inbox_drain", "core.identity.exact", recipient="acks", max=len(ID_FORMS), now=h.now())
            for mid in ID_FORMS:
                out = h.raw("inbox_nack", recipient="acks", message_id=mid, now=h.now())
                check(out.ok, "core.identity.exact", f"nack of handed-out message {mid!r} was refused ({out.code})", h)
            again = answered(h, "inbox_drain", "core.identity.exact", recipient="acks", max=len(ID_FORMS), now=h.now())
            got = sorted(m.get("message_id") for m in again) if isinstance(again, list) else again
            check(got == sorted(ID_FORMS), "core.identity.exact", f"after each message was nacked once, drain gave {got!r:.240}", h)
            for mid in ID_FORMS:
                out = h.raw("inbox_ack", recipient="acks", message_id=mid, now=h.now())
                check(out.ok, "core.identity.exact", f"ack of handed-out message {mid!r} was refused ({out.code})", h)
            # a nack after the ack: none may come back (each ack took its own message); and each nack is refused
            # (invalid_transition, as for any message not handed out): an acknowledged message is never handed out again
            nacked = [(mid, h.raw("inbox_nack", recipient="acks", message_id=mid, now=h.now())) for mid in ID_FORMS]
            taken = [mid for mid, out in nacked if out.ok]
            # some nacks taken: the acks of those forms took another message (each form acked the same way);
            # every nack taken, or refused with another code: what a nack of an acked message does (inbox.ack)
            check(len(taken) in (0, len(ID_FORMS)), "core.identity.exact",
                  f"after every message was acked by its id as given, a nack still took {taken!r:.200} (still handed out) "
                  f"and refused the others: the acks of those forms took other messages", h)
            for mid, out in nacked:
                check(not out.ok and out.code == "invalid_transition", "inbox.ack",
                      f"nack of the acked message {mid!r} answered {(out.value if out.ok else out.code)!r:.80}; an "
                      f"acknowledged message is never handed out again, and only a handed-out one can be nacked", h)
            left = answered(h, "inbox_drain", "core.identity.exact", recipient="acks", max=len(ID_FORMS), now=h.now())
            check(left == [], "core.identity.exact", f"every message was acked by its id as given, yet drain gave {left!r:.200}", h)
        for i, rcpt in enumerate(ID_FORMS):
            dead = answered(h, "inbox_dead", "core.identity.exact", recipient=rcpt)
            check(isinstance(dead, list) and [(m.get("message_id"), m.get("body")) for m in dead] == [(f"m{i}", {"n": i})],
                  "core.identity.exact", f"mailbox {rcpt!r} lists dead letters {dead!r:.160}; only its own m{i} "
                  f"(body {{'n': {i}}}) was dead-lettered there", h)
    if runs:
        for i, worker in enumerate(ID_FORMS):  # each form of a worker takes a run: the hand-out names it as given
            rid = f"Worker-Run-{i}"
            h.raw("wake_suspend", run_id=rid, now=h.now())
            h.raw("wake_fire", run_id=rid, kind=h.spec.wakeup_kinds[0], now=h.now())
            out = h.raw("wake_take", worker=worker, now=h.now())
            check(out.ok and isinstance(out.value, Mapping) and out.value.get("run_id") == rid and out.value.get("worker") == worker,
                  "core.identity.exact", f"worker {worker!r} took the one woken run {rid!r}: {out.value if out.ok else out.code!r:.160}", h)
            token = out.value.get("token")
            if h.claims("wake_renew"):  # the holder renews the run by its id as given
                got = h.raw("wake_renew", run_id=rid, token=token, now=h.now())
                check(got.ok and isinstance(got.value, Mapping) and got.value.get("run_id") == rid, "core.identity.exact",
                      f"renewing run {rid!r} answered {got.value if got.ok else got.code!r:.160}", h)
            h.raw("wake_suspend", run_id=rid, token=token, now=h.now())


@case("core.identity.exact", "tools-streams-keys-and-owners")
def _identity_other_names(h: Harness) -> None:
    """The other names a caller gives, each in every form, where the operation that takes it
    is offered: an effect's tool (handed back as given), an outbound message's key and provider
    reference when it is marked sent (each form its own message), a spawn's key (each form a
    child of its own), a log stream read back by its tail (each form a stream of its own), an
    inbox recipient acknowledging what it was handed (each form a mailbox of its own), and the
    owner a waiting item is resumed by (the item names it as given)."""
    reached = False
    if h.claims("effect_begin"):
        reached = True
        wid = h.create(source_id="tools")
        cls = next(iter(h.spec.step_classes))
        for i, tool in enumerate(ID_FORMS):
            r = _created(h, "effect_begin", "created", f"tool {tool!r}", work_id=wid, step_id=f"step-{i}", tool=tool,
                         input={"n": i}, step_class=cls)["receipt"]
            check(r.get("tool") == tool, "core.identity.exact",
                  f"effect_begin with tool {tool!r} gave a receipt for tool {r.get('tool')!r}", h)
    if h.claims("outbox_enqueue") and h.claims("outbox_mark_sent"):
        reached = True
        for key in ID_FORMS:
            _created(h, "outbox_enqueue", "created", f"key {key!r}", key=key, destination="dest", payload={"key": key})
        for key in ID_FORMS:  # each marked sent by its key as given, its provider reference another form
            ref = f"ref {key}"
            out = h.raw("outbox_mark_sent", key=key, provider_ref=ref, now=h.now())
            got = out.value if out.ok and isinstance(out.value, Mapping) else {}
            check(out.ok and (got.get("key"), got.get("provider_ref"), got.get("payload")) == (key, ref, {"key": key}),
                  "core.identity.exact", f"marking {key!r} sent with provider_ref {ref!r} answered "
                  f"{out.value if out.ok else out.code!r:.200}", h)
        if h.claims("outbox_pending"):
            left = answered(h, "outbox_pending", "core.identity.exact")
            check(left == [], "core.identity.exact", f"every message was marked sent by its key as given, yet the relay "
                  f"is handed {left!r:.200}", h)
    if h.claims("spawn"):
        reached = True
        # forms that fold together share a parent, within the spawn budget of each root
        per = max(1, min(3, h.spec.spawn_budget))
        children: set[str] = set()
        for start in range(0, len(ID_FORMS), per):
            parent = h.create(source_id=f"parent-{start}")
            for key in ID_FORMS[start:start + per]:
                c = _created(h, "spawn", "created", f"key {key!r} under {parent}", parent_id=parent, key=key,
                             payload={"key": key})["work"]
                check(c.get("work_id") not in children, "core.identity.exact",
                      f"spawn with key {key!r} under {parent} answered child {c.get('work_id')!r}, made before by another key", h)
                children.add(c.get("work_id"))
    if h.claims("log_append") and h.claims("log_tail"):
        reached = True
        first = h.spec.first_seq
        for i, stream in enumerate(ID_FORMS):
            out = h.raw("log_append", stream=stream, expected_seq=first - 1, kind="named", payload={"n": i}, now=h.now())
            check(out.ok, "core.identity.exact", f"the first append to stream {stream!r} was refused ({out.code}: {out.message})"
                  f"; no other append named that stream as given", h)
        for i, stream in enumerate(ID_FORMS):
            got = answered(h, "log_tail", "core.identity.exact", stream=stream, from_seq=first, max=len(ID_FORMS))
            entries = [(e.get("stream"), e.get("payload")) for e in got] if isinstance(got, list) else got
            check(entries == [(stream, {"n": i})], "core.identity.exact",
                  f"the tail of stream {stream!r} is {entries!r:.200}; only its own entry (payload {{'n': {i}}}) was appended", h)
    if all(h.claims(op) for op in ("inbox_deliver", "inbox_drain", "inbox_ack")):
        reached = True
        for i, rcpt in enumerate(ID_FORMS):
            _created(h, "inbox_deliver", "delivered", f"recipient {rcpt!r}", recipient=rcpt, message_id=f"a{i}", sender="s",
                     body={"n": i})
        for i, rcpt in enumerate(ID_FORMS):
            got = answered(h, "inbox_drain", "core.identity.exact", recipient=rcpt, max=len(ID_FORMS), now=h.now())
            check(isinstance(got, list) and [m.get("message_id") for m in got] == [f"a{i}"], "core.identity.exact",
                  f"mailbox {rcpt!r} handed out {got!r:.160}; only its own a{i} was delivered to it", h)
            out = h.raw("inbox_ack", recipient=rcpt, message_id=f"a{i}", now=h.now())
            check(out.ok, "core.identity.exact", f"mailbox {rcpt!r} acknowledging the a{i} it was handed was refused "
                  f"({out.code}: {out.message})", h)
    resume_from = [t.src for t in h.spec.transitions if "resume" in t.ops]
    if h.claims("resume") and resume_from:
        reached = True
        for owner in ID_FORMS:
            wid = h.create(source_id=f"resume-{len(owner)}-{ID_FORMS.index(owner)}")
            try:
                h.drive(wid, resume_from[0])
            except DriveBlocked as exc:
                raise NotApplicable(f"no waiting item can be made with the claimed operations: {exc}") from None
            out = h.raw("resume", work_id=wid, owner=owner, now=h.now())
            check(out.ok and isinstance(out.value, Mapping) and out.value.get("owner") == owner, "core.identity.exact",
                  f"resuming {wid} by owner {owner!r} answered {out.value if out.ok else out.code!r:.160}", h)
    if not reached:
        raise NotApplicable("the adapter claims none of the operations that take these names")


def _lane_names_work(h: Harness, lane: Mapping[str, str], name: str, token: object, body: object) -> None:
    """The holder of ``lane`` (its names as given) renews it, takes its one task, marks it done
    and releases it: every call names the lane as given and finds it (each offered operation)."""
    if h.claims("lane_renew"):
        got = h.raw("lane_renew", **lane, token=token, now=h.now())
        check(got.ok and isinstance(got.value, Mapping) and got.value.get(name) == lane[name], "core.identity.exact",
              f"renewing lane {lane} answered {got.value if got.ok else got.code!r:.160}", h)
    if h.claims("lane_next") and h.claims("lane_done"):
        task = h.raw("lane_next", **lane, token=token, now=h.now())
        check(task.ok and isinstance(task.value, Mapping) and (task.value.get("task_id"), task.value.get("body")) == ("task-1", body),
              "core.identity.exact", f"the next task of lane {lane} was {task.value if task.ok else task.code!r:.160}; "
              f"only its own task-1 (body {body!r}) was pushed to it", h)
        done = h.raw("lane_done", **lane, token=token, task_id="task-1", now=h.now())
        check(done.ok, "core.identity.exact", f"marking task-1 of lane {lane} done was refused ({done.code})", h)
    if h.claims("lane_release"):
        out = h.raw("lane_release", **lane, token=token, now=h.now())
        check(out.ok, "core.identity.exact", f"releasing lane {lane} was refused ({out.code})", h)


@case("core.identity.exact", "lanes-and-runs")
def _identity_lanes_runs(h: Harness) -> None:
    """A lane's session key and name and a lane task's id (profile lanes), a run's id (profile
    wakeups) are identifiers: each form names a lane, a task or a run of its own, and each is
    handed back as given."""
    lanes, runs = h.claims("lane_push") and h.claims("lane_tasks") and h.claims("lane_acquire"), \
        h.claims("wake_suspend") and h.claims("wake_fire") and h.claims("wake_get")
    if not (lanes or runs):
        raise NotApplicable("the adapter claims neither the lanes nor the wakeups profile")
    if lanes:
        # each form as the session key, then as the lane's name: a lane of its own, with its own task
        where = [("session_key", {"session_key": f, "lane": "interactive"}) for f in ID_FORMS] + \
                [("lane", {"session_key": "session", "lane": f}) for f in ID_FORMS]
        for i, (name, lane) in enumerate(where):
            _created(h, "lane_push", "queued", f"{name} {lane[name]!r}", **lane, task_id="task-1", body={"n": i})
        for f in ID_FORMS:  # each form as the task id, in one lane: a task of its own
            _created(h, "lane_push", "queued", f"task_id {f!r}", session_key="tasks", lane="interactive", task_id=f)
        for i, (name, lane) in enumerate(where):
            got = answered(h, "lane_tasks", "core.identity.exact", **lane)
            check(isinstance(got, list) and [(t.get("task_id"), t.get("body")) for t in got] == [("task-1", {"n": i})],
                  "core.identity.exact", f"lane {lane} lists {got!r:.160}; only its own task (body {{'n': {i}}}) was pushed to it", h)
            lease = h.raw("lane_acquire", **lane, owner="worker-A", now=h.now())
            check(lease.ok and isinstance(lease.value, Mapping) and lease.value.get(name) == lane[name], "core.identity.exact",
                  f"acquiring the free lane {lane} answered {lease.value if lease.ok else lease.code!r:.160}", h)
            _lane_names_work(h, lane, name, lease.value.get("token"), {"n": i})
        got = answered(h, "lane_tasks", "core.identity.exact", session_key="tasks", lane="interactive")
        ids = [t.get("task_id") for t in got] if isinstance(got, list) else got
        check(isinstance(ids, list) and sorted(ids) == sorted(ID_FORMS), "core.identity.exact",
              f"the lane holds tasks {ids!r:.200} after pushes of {list(ID_FORMS)}", h)
        if h.claims("lane_next") and h.claims("lane_done"):  # each task taken, and marked done by its id as given
            tasks = {"session_key": "tasks", "lane": "interactive"}
            lease = h.raw("lane_acquire", **tasks, owner="worker-A", now=h.now())
            check(lease.ok and isinstance(lease.value, Mapping), "core.identity.exact",
                  f"acquiring the free lane {tasks} answered {lease.value if lease.ok else lease.code!r:.160}", h)
            for _ in ID_FORMS:
                task = h.raw("lane_next", **tasks, token=lease.value.get("token"), now=h.now())
                tid = task.value.get("task_id") if task.ok and isinstance(task.value, Mapping) else None
                check(tid in ID_FORMS, "core.identity.exact", f"the next task of lane {tasks} was {task.value if task.ok else task.code!r:.160}", h)
                done = h.raw("lane_done", **tasks, token=lease.value.get("token"), task_id=tid, now=h.now())
                check(done.ok, "core.identity.exact", f"marking task {tid!r} of lane {tasks} done was refused ({done.code})", h)
            left = answered(h, "lane_tasks", "core.identity.exact", **tasks)
            check(left == [], "core.identity.exact", f"each task was marked done by its id as given, yet the lane lists {left!r:.200}", h)
    if runs:
        for f in ID_FORMS:  # each form a run of its own; one of them is woken
            out = h.raw("wake_suspend", run_id=f, now=h.now())
            check(out.ok and isinstance(out.value, Mapping) and out.value.get("run_id") == f, "core.identity.exact",
                  f"suspending run {f!r} answered {out.value if out.ok else out.code!r:.160}", h)
        out = h.raw("wake_fire", run_id=ID_FORMS[0], kind=h.spec.wakeup_kinds[0], now=h.now())
        check(out.ok, "core.identity.exact", f"waking run {ID_FORMS[0]!r} was refused ({out.code})", h)
        for f in ID_FORMS:
            got = answered(h, "wake_get", "core.identity.exact", run_id=f)
            want = "pending" if f == ID_FORMS[0] else "suspended"
            check(isinstance(got, Mapping) and got.get("run_id") == f and got.get("state") == want, "core.identity.exact",
                  f"run {f!r} reads {got!r:.160}; only {ID_FORMS[0]!r} was woken", h)
