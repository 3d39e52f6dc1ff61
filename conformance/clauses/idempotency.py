"""Clause tests of the idempotency (effect journal) profile."""

from __future__ import annotations

from collections.abc import Iterable

from ledgercheck.spec import Spec

from ..harness import Harness, NotApplicable
from ..model import same_json
from . import CaseFn, case, cases, check

INPUTS = {
    "flat": {"to": "ops@example.org", "subject": "report"},
    "nested-unicode": {"b": [1, 2, {"z": "ünïcødé ✓", "a": None}], "a": {"y": 15, "x": True}},
    "scalar": "plain text",
    "empty": {},
    # strings as they are (no Unicode normalisation), keys by code point (not UTF-16 unit),
    # integers as plain digits whatever their size
    "decomposed-unicode": {"nfc": "caf\u00e9", "nfd": "cafe\u0301"},
    "astral-keys": {"\U0001F642": 1, "\uff01": 2, "a": [{"\U0001D11E": True, "\ufb01": None}]},
    "big-integers": {"amount": 2 ** 53 - 1, "neg": -(2 ** 53 - 1), "id": 2 ** 53 - 2},
}


def _begin(h: Harness, wid: str, step: str = "step-1", tool: str = "email.send", inp: object = None,
           cls: str = "idempotent_with_key", token: str | None = None):
    return h.do("effect_begin", work_id=wid, step_id=step, tool=tool, input=INPUTS["flat"] if inp is None else inp,
                step_class=cls, token=token)


# step ids and tools beyond ASCII: canonical JSON keeps non-ASCII as it is (no \u escapes)
SCOPES = {
    "non-ascii-scope": ("étape-ü", "邮件.send", {"sujet": "réunion ✓", "à": None}),
    "astral-scope": ("step-🚀", "tool.✉", {"emoji": "🙂"}),
}


def _derived(h: Harness, step: str, tool: str, inp: object) -> None:
    wid = h.create()
    out = _begin(h, wid, step=step, tool=tool, inp=inp)
    r = out.value["receipt"]
    check(r["key"] == h.spec.effect_key(work_id=wid, step_id=step, tool=tool), "idem.key.derivation",
          f"key {r['key']!r} for step {step!r}, tool {tool!r} is not sha256(canonical(work_id, step_id, tool))", h)
    check(r["input_hash"] == h.spec.input_hash(inp), "idem.key.derivation", "input_hash is not sha256(canonical(input))", h)


@cases("idem.key.derivation")
def _derivation(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for name, inp in INPUTS.items():
        def fn(h: Harness, inp: object = inp) -> None:
            _derived(h, "step-1", "email.send", inp)
        yield name, fn

    for name, (step, tool, inp) in SCOPES.items():
        def scoped(h: Harness, step: str = step, tool: str = tool, inp: object = inp) -> None:
            _derived(h, step, tool, inp)
        yield name, scoped

    def key_order(h: Harness) -> None:
        wid = h.create()
        a = {"x": 1, "y": {"p": 1, "q": 2}}
        b = {"y": {"q": 2, "p": 1}, "x": 1}
        _begin(h, wid, inp=a)
        out = _begin(h, wid, inp=b)
        check(out.ok and out.value["created"] is False, "idem.key.derivation", "the same input with another key order was treated as different", h)
    yield "key-order-independent", key_order


@case("idem.begin", "after-recovery-marked")
def _begin_after_marking(h: Harness) -> None:
    """The holder dies with the intent open; recovery marks the receipt (reconcile: unknown).
    The next holder's begin returns that receipt as it is: not created, not re-armed to pending."""
    h.need("recover", "effect_lookup")
    cls = next((c for c in h.spec.step_classes
                if h.spec.receipt_decision("pending", c) == "reconcile"), None)
    if cls is None:
        raise NotApplicable("no step class is reconciled by the matrix")
    wid = h.create()
    r = _begin(h, wid, cls=cls, token=h.claim(wid)).value["receipt"]
    h.advance_to(h.lapse_time(wid))
    h.do("recover")
    state = h.do("effect_lookup", key=r["key"]).value["state"]
    again = _begin(h, wid, cls=cls, token=h.claim(wid, owner="w-new")).value
    check(again["created"] is False and again["receipt"]["state"] == state, "idem.begin",
          f"begin after recovery marked the receipt {state}: created {again['created']}, state {again['receipt']['state']}", h)


@case("idem.begin", "twice")
def _begin_twice(h: Harness) -> None:
    wid = h.create()
    first = _begin(h, wid).value
    again = _begin(h, wid).value
    check(first["created"] is True and again["created"] is False and again["receipt"]["state"] == "pending", "idem.begin",
          f"begin twice gave created {first['created']}/{again['created']}", h)
    check(len(h.do("effect_list", work_id=wid).value) == 1, "idem.begin", "two receipts for one step", h)


@case("idem.list.order", "begin-order")
def _list_order(h: Harness) -> None:
    """An item's effects begun at one instant, interleaved with another item's, their keys (hashes
    of the item's id: eight of them in begin order by chance once in 40,320 runs) in no relation to
    the order they were begun; then one completed, one moved to another state
    the receipt table allows, and the first begun again: effect_list gives them in the order they
    were first begun."""
    wid, other = h.create(), h.create()
    receipts = []
    for step in ("step-h", "step-g", "step-f", "step-e", "step-d", "step-c", "step-b", "step-a"):
        receipts.append(_begin(h, wid, step=step).value["receipt"])
        _begin(h, other, step=step)
    keys = [r["key"] for r in receipts]
    h.advance(h.contract_seconds(1.0))
    h.do("effect_record", key=keys[1], input_hash=receipts[1]["input_hash"], result={"n": 1})
    moved = next((b for a, b in sorted(h.spec.receipt_transitions) if a == "pending" and b != "completed"), None)
    if moved is not None and h.claims("effect_mark"):
        h.do("effect_mark", key=keys[3], state=moved)
    _begin(h, wid, step="step-h")
    listed = h.do("effect_list", work_id=wid).value
    got = [x.get("key") for x in listed if isinstance(x, dict)]
    check(got == keys, "idem.list.order",
          f"effect_list gave the receipts begun as #{list(range(len(keys)))} in the order #{[keys.index(k) if k in keys else k for k in got]}", h)


@cases("idem.conflict")
def _conflict(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    def at_begin(h: Harness) -> None:
        wid = h.create()
        _begin(h, wid, inp={"amount": 10})
        out = _begin(h, wid, inp={"amount": 11})
        check(not out.ok and out.code == "idempotency_conflict", "idem.conflict", f"reuse with another input answered {out.code or 'ok'}", h)

    def at_record(h: Harness) -> None:
        wid = h.create()
        r = _begin(h, wid, inp={"amount": 10}).value["receipt"]
        out = h.do("effect_record", key=r["key"], input_hash=h.spec.input_hash({"amount": 11}), result={"ok": 1})
        check(not out.ok and out.code == "idempotency_conflict", "idem.conflict", f"record with another input hash answered {out.code or 'ok'}", h)

    yield "begin", at_begin
    yield "record", at_record


# results as a provider returns them: nulls at the top and nested, empty containers, non-ASCII
RESULTS = {
    "then-lookup": {"message_id": "m-1"},
    "booleans-kept": {"ok": True, "retry": False, "codes": [0, 1, True, False]},
    "nulls-kept": {"message_id": "m-2", "thread_id": None, "meta": {"retry_after": None, "tags": [], "ids": [None, 3]}, "note": "reçu"},
}


@cases("idem.record")
def _record(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for name, result in RESULTS.items():
        def fn(h: Harness, result: object = result) -> None:
            wid = h.create()
            r = _begin(h, wid).value["receipt"]
            h.do("effect_record", key=r["key"], input_hash=r["input_hash"], result=result)
            got = h.do("effect_lookup", key=r["key"]).value
            check(got is not None and got["state"] == "completed" and same_json(got["result"], result), "idem.record",
                  f"lookup gave {got!r:.120}, recorded {result!r:.80}", h)
        yield name, fn


@case("idem.duplicate_returns_stored", "second-result-ignored")
def _dup(h: Harness) -> None:
    wid = h.create()
    r = _begin(h, wid).value["receipt"]
    h.do("effect_record", key=r["key"], input_hash=r["input_hash"], result={"message_id": "first"})
    out = h.do("effect_record", key=r["key"], input_hash=r["input_hash"], result={"message_id": "second"})
    check(out.ok and out.value["result"] == {"message_id": "first"}, "idem.duplicate_returns_stored", f"second record gave {out.value!r:.80}", h)
    again = _begin(h, wid).value
    check(again["receipt"]["state"] == "completed" and again["receipt"]["result"] == {"message_id": "first"},
          "idem.duplicate_returns_stored", "beginning a completed effect did not return the stored result", h)


@case("idem.lookup_miss", "never-begun")
def _miss(h: Harness) -> None:
    out = h.do("effect_lookup", key="ab" * 32)
    check(out.ok and out.value is None, "idem.lookup_miss", f"lookup of an unknown key gave {out.value!r:.60}", h)


@cases("idem.receipt_states")
def _states(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    states = spec.receipt_states
    for a in states:
        for b in states:
            if a == b or a == "completed" and b == "completed":
                continue

            def fn(h: Harness, a: str = a, b: str = b) -> None:
                wid = h.create()
                r = _begin(h, wid).value["receipt"]
                path = {"pending": [], "completed": ["completed"], "unknown": ["unknown"], "needs_inspection": ["needs_inspection"]}[a] \
                    if a in ("pending", "completed", "unknown", "needs_inspection") else []
                for step in path:
                    if step == "completed":
                        h.do("effect_record", key=r["key"], input_hash=r["input_hash"], result={"ok": True})
                    else:
                        h.do("effect_mark", key=r["key"], state=step)
                if b == "completed":
                    h.do("effect_record", key=r["key"], input_hash=r["input_hash"], result={"ok": True})
                else:
                    h.do("effect_mark", key=r["key"], state=b)
            yield f"{a}->{b}", fn


@cases("idem.fenced")
def _fenced(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    def begin(h: Harness) -> None:
        wid = h.create()
        h.claim(wid)
        out = _begin(h, wid, token="not-the-lease")
        check(not out.ok and out.code == "stale_lease", "idem.fenced", f"begin with a stale token answered {out.code or 'ok'}", h)

    def record(h: Harness) -> None:
        wid = h.create()
        old = h.claim(wid, owner="w-old")
        r = _begin(h, wid, token=old).value["receipt"]
        h.advance_to(h.lapse_time(wid))
        h.do("expire")
        h.do("requeue", work_id=wid)
        h.claim(wid, owner="w-new")
        out = h.do("effect_record", key=r["key"], input_hash=r["input_hash"], result={"late": True}, token=old)
        check(not out.ok and out.code == "stale_lease", "idem.fenced", f"record with the old holder's token answered {out.code or 'ok'}", h)

    def record_marked(cls: str) -> CaseFn:
        def fn(h: Harness) -> None:
            # the holder dies mid-effect; recovery marks its receipt (unknown or needs_inspection)
            # and requeues or quarantines the item: the dead holder's late record stays fenced
            h.need("recover")
            wid = h.create()
            old = h.claim(wid, owner="w-old")
            r = _begin(h, wid, cls=cls, token=old).value["receipt"]
            h.advance_to(h.lapse_time(wid))
            h.do("recover")
            if h.item(wid)["status"] in {t.src for t in h.spec.edges_of("claim")}:
                h.claim(wid, owner="w-new")
            out = h.do("effect_record", key=r["key"], input_hash=r["input_hash"], result={"late": True}, token=old)
            check(not out.ok and out.code == "stale_lease", "idem.fenced",
                  f"{cls}: record of a receipt recovery marked, with the dead holder's token, answered {out.code or 'ok'}", h)
        return fn

    def lapsed(op: str) -> CaseFn:
        def fn(h: Harness) -> None:
            # the holder's own token after its lease lapsed (now > expiry + grace), the monitor not
            # run yet: the lease is no longer live, so the journal write is fenced all the same
            if op == "effect_record":
                h.need("effect_record")
            wid = h.create()
            tok = h.claim(wid)
            r = _begin(h, wid, token=tok).value["receipt"] if op == "effect_record" else None
            h.advance_to(h.lapse_time(wid))  # no expire, no recover
            if r is None:
                out = _begin(h, wid, step="step-late", token=tok)
            else:
                out = h.do("effect_record", key=r["key"], input_hash=r["input_hash"], result={"late": True}, token=tok)
            check(not out.ok and out.code == "stale_lease", "idem.fenced",
                  f"{op} with the holder's token after its lease lapsed (monitor not run yet) answered {out.code or 'ok'}", h)
        return fn

    yield "begin", begin
    yield "record-after-takeover", record
    yield "begin-lapsed-before-monitor", lapsed("effect_begin")
    yield "record-lapsed-before-monitor", lapsed("effect_record")
    for cls in spec.step_classes:
        state = spec.decisions[spec.receipt_decision("pending", cls)].get("receipt_state")
        if state:
            yield f"record-after-recovery-{state}", record_marked(cls)


@case("idem.retention", "within-window")
def _retention(h: Harness) -> None:
    if h.wall:
        raise NotApplicable("a retention window of days cannot pass on a wall clock")
    wid = h.create()
    r = _begin(h, wid).value["receipt"]
    h.do("effect_record", key=r["key"], input_hash=r["input_hash"], result={"kept": True})
    h.advance(max(0.0, h.spec.retention - h.contract_seconds(1.0)))
    for op in ("expire", "promote_due", "recover"):
        if h.claims(op):
            h.do(op)
    got = h.do("effect_lookup", key=r["key"]).value
    check(got is not None and got["result"] == {"kept": True}, "idem.retention", "a receipt vanished within the retention window", h)


# ---------------------------------------------------------------- round-3 hunt
@cases("idem.conflict")
def _conflict_completed(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    """Completion does not end the key's input check: a later begin or record with another
    input is still a conflict (and the stored result is unchanged)."""
    def begin(h: Harness) -> None:
        wid = h.create()
        r = _begin(h, wid, inp={"amount": 10}).value["receipt"]
        h.do("effect_record", key=r["key"], input_hash=r["input_hash"], result={"ok": 1})
        out = _begin(h, wid, inp={"amount": 11})
        check(not out.ok and out.code == "idempotency_conflict", "idem.conflict", f"begin of a completed key with another input answered {out.code or 'ok'}", h)

    def record(h: Harness) -> None:
        wid = h.create()
        r = _begin(h, wid, inp={"amount": 10}).value["receipt"]
        h.do("effect_record", key=r["key"], input_hash=r["input_hash"], result={"ok": 1})
        out = h.do("effect_record", key=r["key"], input_hash=h.spec.input_hash({"amount": 11}), result={"ok": 2})
        check(not out.ok and out.code == "idempotency_conflict", "idem.conflict", f"record of a completed key with another input hash answered {out.code or 'ok'}", h)

    yield "begin-after-completed", begin
    yield "record-after-completed", record
