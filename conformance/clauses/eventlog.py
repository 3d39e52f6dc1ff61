"""Clause tests of the eventlog profile."""

from __future__ import annotations

from ledgercheck.transport.clock import QUANTUM

from ..harness import Harness
from ..model import fold, same_json
from . import case, check
from .core import _tour

S = "run-42"
# names that differ from S (and from each other) only by case or by a non-ASCII letter
OTHER_STREAMS = ("Run-42", "RUN-42", "rün-42", "RÜN-42")
# names a SQL LIKE pattern built from S's neighbours would confuse: '_' and '%' are plain
# characters of a stream name, never wildcards
WILDCARD_STREAMS = ("run_42", "run%42", "run-4_", "%")


@case("eventlog.append.expected_seq", "sequence")
def _append(h: Harness) -> None:
    first = h.spec.first_seq
    for i in range(4):
        out = h.do("log_append", stream=S, expected_seq=first - 1 + i, kind="msg.received", payload={"n": i})
        check(out.value["seq"] == first + i, "eventlog.append.expected_seq", f"entry {i} stored at {out.value['seq']}", h)
    other = h.do("log_append", stream="run-43", expected_seq=first - 1, kind="run.started")
    check(other.value["seq"] == first, "eventlog.append.expected_seq", "streams share a sequence", h)
    for name in (*OTHER_STREAMS, *WILDCARD_STREAMS):  # stream names are compared as they are: each is a stream of its own
        out = h.do("log_append", stream=name, expected_seq=first - 1, kind="run.started")
        check(out.value["seq"] == first, "eventlog.append.expected_seq", f"stream {name!r} shares a sequence with another", h)


@case("eventlog.append.conflict", "stale-and-future")
def _conflict(h: Harness) -> None:
    first = h.spec.first_seq
    h.do("log_append", stream=S, expected_seq=first - 1, kind="a")
    for exp in (first - 1, first + 5):
        out = h.do("log_append", stream=S, expected_seq=exp, kind="b")
        check(not out.ok and out.code == "concurrent_append", "eventlog.append.conflict", f"expected_seq {exp} answered {out.code or 'ok'}", h)
    h.do("log_read", stream=S)


@case("eventlog.read", "from-seq")
def _read(h: Harness) -> None:
    first = h.spec.first_seq
    for i in range(5):
        # payloads as appended: nulls (top level and nested), empty containers, non-ASCII text
        payload = {"i": i, "text": "é", "note": None, "meta": {"reply_to": None, "tags": [], "n": [None, i]}, "ok": i % 2 == 0}
        h.do("log_append", stream=S, expected_seq=first - 1 + i, kind=f"k{i}", payload=payload)
    for start in (None, first, first + 2, first + 9):
        h.do("log_read", stream=S, from_seq=start)
    h.do("log_read", stream="never-written")
    for name in (*OTHER_STREAMS, *WILDCARD_STREAMS):  # another stream's name: nothing was appended to it
        h.do("log_read", stream=name)
        h.do("log_read", stream=name, from_seq=first + 1)
    for j, name in enumerate((*OTHER_STREAMS, *WILDCARD_STREAMS)):
        for i in range(j % 4 + 1):
            h.do("log_append", stream=name, expected_seq=first - 1 + i, kind=f"{name}.{i}", payload={"stream": name})
    for name in (S, *OTHER_STREAMS, *WILDCARD_STREAMS):
        h.do("log_read", stream=name)


def _inside_lease(h: Harness) -> float:
    """A step after a claim that the lease outlives: the contract's 5 s, or half a short ttl
    (whole quanta on a virtual clock)."""
    half = h.spec.lease_for("manual").ttl / 2
    return min(h.contract_seconds(5.0), half if h.wall else max(QUANTUM, half // QUANTUM * QUANTUM))


@case("eventlog.fold", "every-step")
def _fold(h: Harness) -> None:
    wid = h.create()
    visited = _tour(h, wid)
    if h.claims("renew"):  # a renewal moves the expiry: its event must carry the new one (renewed after
        h.drive(wid, "running")  # the tour, so the tour's retries do not run into the attempt limit)
        h.advance(_inside_lease(h))
        h.do("renew", work_id=wid, token=h.token(wid))
    for _ in visited:
        snap = h.raw("get", work_id=wid).value
        ev = h.events_of(wid, "eventlog.fold")
        folded = fold(h.spec, ev)
        for name, f in h.spec.work_fields.items():
            if f.fold and f.compare != "none":
                check(folded.get(name) == snap.get(name) or (f.compare == "presence" and (folded.get(name) is None) == (snap.get(name) is None)),
                      "eventlog.fold", f"fold(events).{name} = {folded.get(name)!r}, snapshot {snap.get(name)!r}", h)


@case("eventlog.event_data", "monitors")
def _data_monitors(h: Harness) -> None:
    """The events the monitors and the recovery scan write (a lapsed lease, a wait that ran out,
    a due retry, a crashed holder) carry their fields as they are after the event."""
    wid = h.create()
    lapse = lambda: h.advance_to(h.lapse_time(wid))  # noqa: E731
    h.claim(wid)
    lapse()
    h.do("expire")
    h.do("requeue", work_id=wid, reason="again")
    tok = h.claim(wid)
    if h.claims("set_waiting"):
        h.do("set_waiting", work_id=wid, token=tok, kind=next(iter(h.spec.waiting_statuses)), ref="cb-9", timeout=h.contract_seconds(60.0))
        h.advance(h.contract_seconds(60.0 + QUANTUM))
        h.do("expire")
        h.do("requeue", work_id=wid, reason="again")
        tok = h.claim(wid)
    retryable = [c for c, r in h.spec.error_classes.items() if r]
    if h.claims("fail") and h.claims("promote_due") and retryable:
        h.do("fail", work_id=wid, token=tok, error_class=retryable[0])
        if h.item(wid)["status"] == "retry_scheduled":
            h.advance_to(h.item(wid)["next_retry_at"])
            h.do("promote_due")
            tok = h.claim(wid)
    if h.claims("recover") and h.item(wid)["status"] in {n for n, st in h.spec.statuses.items() if st.leased}:
        lapse()
        h.do("recover")
    h.events_of(wid, "eventlog.event_data")  # each step above was compared with the model's events


@case("eventlog.event_data", "tour")
def _data(h: Harness) -> None:
    wid = h.create()
    _tour(h, wid)
    if h.claims("renew"):
        h.drive(wid, "running")
        h.advance(_inside_lease(h))  # so the renewed expiry differs from the claimed one
        h.do("renew", work_id=wid, token=h.token(wid))
    h.do("cancel", work_id=wid)
    h.events_of(wid, "eventlog.event_data")  # each step above was compared with the model's events


# ---------------------------------------------------------------- round-3 hunt
@case("eventlog.append.expected_seq", "after-conflicts")
def _append_after_conflict(h: Harness) -> None:
    """A refused append takes no seq: the next matching append is stored right after the last entry."""
    first = h.spec.first_seq
    h.do("log_append", stream=S, expected_seq=first - 1, kind="a")
    for exp in (first - 1, first + 1, first + 5):
        h.do("log_append", stream=S, expected_seq=exp, kind="lost")
    out = h.do("log_append", stream=S, expected_seq=first, kind="b")
    check(out.ok and out.value["seq"] == first + 1, "eventlog.append.expected_seq", f"after refused appends, stored at {out.value!r}", h)
    h.do("log_read", stream=S)


@case("eventlog.read", "every-start")
def _read_every_start(h: Harness) -> None:
    """Reading from every seq around the stream (0, the seqs just below the first, each entry's,
    the one after the last: a tailer polling for news gets nothing, and beyond)."""
    first = h.spec.first_seq
    for i in range(3):
        h.do("log_append", stream=S, expected_seq=first - 1 + i, kind=f"k{i}", payload={"i": i})
    for start in sorted({0, *range(max(0, first - 2), first + 5)}):
        h.do("log_read", stream=S, from_seq=start)


# payload values a careless store changes: integers past 2^53, up to the 64-bit limits (canonical JSON writes
# integers as plain digits), floats that need all 17 digits, booleans (not 0/1), text beyond the
# BMP and text in decomposed form (kept as it is, never normalised)
FIDELITY = {"big": 2 ** 53 - 1, "huge": 2 ** 53 - 2, "neg": -(2 ** 53 - 1), "time": 1000045.125, "tenth": 0.1,
            "third": 1 / 3, "yes": True, "no": False, "emoji": "\U0001F642 \U0001D11E", "decomposed": "cafe\u0301",
            "nested": {"n": [None, {"x": None}], "flag": [True, 0, 1, False]}}


@case("eventlog.read", "payload-fidelity")
def _read_fidelity(h: Harness) -> None:
    first = h.spec.first_seq
    h.do("log_append", stream=S, expected_seq=first - 1, kind="values", payload=FIDELITY)
    got = h.raw("log_read", stream=S).value
    check(isinstance(got, list) and len(got) == 1 and same_json(got[0].get("payload"), FIDELITY), "eventlog.read",
          f"read back {got[0].get('payload') if got else None!r:.160}", h)
