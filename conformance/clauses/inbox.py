"""Clause tests of the inbox profile (spec/contract/clauses/inbox.yaml)."""


from __future__ import annotations

from collections.abc import Iterable

from ledgercheck.spec import Spec

from ..harness import Harness, NotApplicable
from . import CaseFn, case, cases, check, durable

R = "agent-7"


def _deliver(h: Harness, mid: str, sender: str, body: object = None):
    return h.do("inbox_deliver", recipient=R, message_id=mid, sender=sender, body=body if body is not None else {"text": mid, "reply_to": None, "meta": {"thread": None}})


def _drain(h: Harness, n: int | None = None) -> list[str]:
    out = h.do("inbox_drain", recipient=R, max=n)
    return [m["message_id"] for m in out.value]


@case("inbox.deliver.idempotent", "duplicate")
def _dup(h: Harness) -> None:
    a = _deliver(h, "m1", "alice").value
    b = _deliver(h, "m1", "alice").value
    check(a["delivered"] is True and b["delivered"] is False, "inbox.deliver.idempotent", f"deliveries reported {a}, {b}", h)
    got = _drain(h)
    check(got == ["m1"], "inbox.deliver.idempotent", f"drained {got}", h)
    h.do("inbox_ack", recipient=R, message_id="m1")
    _deliver(h, "m1", "alice")
    check(_drain(h) == [], "inbox.deliver.idempotent", "a redelivered, acknowledged message came back", h)


@cases("inbox.fifo.per_sender")
def _fifo(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    for batch in (1, 2, 5):
        def fn(h: Harness, batch: int = batch) -> None:
            order = [("alice", "a1"), ("bob", "b1"), ("alice", "a2"), ("carol", "c1"), ("alice", "a3"), ("bob", "b2"), ("alice", "a4")]
            for sender, mid in order:
                _deliver(h, mid, sender)
            seen: dict[str, list[str]] = {}
            for _ in range(len(order) + 2):
                got = _drain(h, batch)
                for mid in got:
                    seen.setdefault(mid[0], []).append(mid)
                    h.do("inbox_ack", recipient=R, message_id=mid)
                if not got:
                    break
            check(seen.get("a") == ["a1", "a2", "a3", "a4"] and seen.get("b") == ["b1", "b2"], "inbox.fifo.per_sender", f"drain order {seen}", h)
        yield f"batch-{batch}", fn


@case("inbox.drain.max", "limit")
def _max(h: Harness) -> None:
    for i in range(5):
        _deliver(h, f"m{i}", f"s{i}")
    got = _drain(h, 2)
    check(1 <= len(got) <= 2, "inbox.drain.max", f"drain(max=2) gave {len(got)}", h)


@case("inbox.drain.inflight", "not-twice")
def _inflight(h: Harness) -> None:
    for i in range(3):
        _deliver(h, f"m{i}", "alice" if i % 2 else "bob")
    first = _drain(h)
    second = _drain(h)
    check(not set(first) & set(second), "inbox.drain.inflight", f"{sorted(set(first) & set(second))} handed out twice", h)


@case("inbox.drain.inflight", "not-after-a-while")
def _inflight_later(h: Harness) -> None:
    # nothing but a nack returns a drained message: no visibility timeout hands it out again,
    # however long it stays unacknowledged (the contract's longest window, its retention, passes)
    if h.wall:
        raise NotApplicable("a window of days cannot pass on a wall clock")
    for i in range(2):
        _deliver(h, f"m{i}", "alice")
    first = _drain(h)
    h.advance(h.spec.retention)
    second = _drain(h)
    check(not set(first) & set(second), "inbox.drain.inflight",
          f"{sorted(set(first) & set(second))} handed out again after {h.spec.retention:g}s without a nack", h)


@case("inbox.ack", "gone")
def _ack(h: Harness) -> None:
    _deliver(h, "m1", "alice")
    _drain(h)
    h.do("inbox_ack", recipient=R, message_id="m1")
    check(_drain(h) == [], "inbox.ack", "an acknowledged message came back", h)
    # a nack of the acked message: refused as for any message not handed out, and it brings nothing back
    out = h.raw("inbox_nack", recipient=R, message_id="m1", now=h.now())
    check(not out.ok and out.code == "invalid_transition", "inbox.ack",
          f"nack of the acknowledged m1 answered {(out.value if out.ok else out.code)!r:.80}, not invalid_transition", h)
    check(_drain(h) == [], "inbox.ack", "a nack brought an acknowledged message back", h)
    out = h.do("inbox_ack", recipient=R, message_id="never-delivered")
    check(not out.ok and out.code == "not_found", "inbox.ack", f"ack of an unknown message answered {out.code or 'ok'}", h)


@case("inbox.nack.redeliver", "keeps-place")
def _nack(h: Harness) -> None:
    for mid in ("a1", "a2", "a3"):
        _deliver(h, mid, "alice")
    got = _drain(h, 1)
    h.do("inbox_nack", recipient=R, message_id=got[0], error="tool failed")
    again = _drain(h, 3)
    check(again[:1] == [got[0]], "inbox.nack.redeliver", f"after nack of {got[0]}, drain gave {again}", h)


@cases("inbox.dead_letter")
def _dead(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    def exact(h: Harness) -> None:
        n = h.spec.inbox_max_nacks
        _deliver(h, "poison", "alice")
        for i in range(1, n + 1):
            got = _drain(h)
            check(got == ["poison"], "inbox.dead_letter", f"after {i - 1} nack(s) the message was not handed out again (got {got})", h)
            res = h.do("inbox_nack", recipient=R, message_id="poison", error=f"attempt {i}").value
            check(res["dead"] is (i == n), "inbox.dead_letter", f"nack {i} of {n} reported dead={res['dead']}", h)
        check(_drain(h) == [], "inbox.dead_letter", "a dead-lettered message was handed out again", h)
        dead = [m["message_id"] for m in h.do("inbox_dead", recipient=R).value]
        check(dead == ["poison"], "inbox.dead_letter", f"dead letters {dead}", h)
    yield "exact-count", exact


# ---------------------------------------------------------------- round-3 hunt: inbox
@case("inbox.nack.redeliver", "keeps-place-every-nack")
def _nack_every(h: Harness) -> None:
    """Every nack below the limit, not just the first, returns the message to its original place."""
    for mid in ("a1", "a2", "a3"):
        _deliver(h, mid, "alice")
    for i in range(1, h.spec.inbox_max_nacks):
        got = _drain(h, 1)  # (how many it hands out is inbox.drain.max's business; a1 comes first)
        check(got[:1] == ["a1"], "inbox.nack.redeliver", f"after {i - 1} nack(s) of a1, drain(max=1) gave {got}", h)
        h.do("inbox_nack", recipient=R, message_id="a1", error=f"attempt {i}")
    again = _drain(h, 3)
    check(again[:1] == ["a1"], "inbox.nack.redeliver", f"after {h.spec.inbox_max_nacks - 1} nacks of a1, drain gave {again}", h)


@case("inbox.fifo.per_sender", "arrival-not-id-order")
def _fifo_ids(h: Harness) -> None:
    """Arrival order is the order of delivery, whatever the ids look like and however many
    arrive at the same instant (ids sort neither numerically nor lexically here)."""
    order = [("alice", "m-10"), ("bob", "z-1"), ("alice", "m-9"), ("alice", "m-100"), ("bob", "a-2"), ("alice", "m-1")]
    for sender, mid in order:
        _deliver(h, mid, sender)
    seen: list[str] = []
    for _ in range(len(order) + 1):
        got = _drain(h, 1)
        if not got:
            break
        seen += got
        h.do("inbox_ack", recipient=R, message_id=got[0])
    for sender in ("alice", "bob"):
        want = [m for s, m in order if s == sender]
        check([m for m in seen if m in want] == want, "inbox.fifo.per_sender", f"{sender}: drained {seen}, delivered {want}", h)


@case("inbox.drain.max", "limit-one-sender")
def _max_one_sender(h: Harness) -> None:
    """The limit counts messages, not senders: one sender's backlog is handed out max at a time."""
    for sender in ("alice", "bob"):
        for i in range(4):
            _deliver(h, f"{sender}-{i}", sender)
    for n in (1, 2, 3):
        got = _drain(h, n)
        check(1 <= len(got) <= n, "inbox.drain.max", f"drain(max={n}) gave {len(got)} messages: {got}", h)
        for mid in got:
            h.do("inbox_ack", recipient=R, message_id=mid)


@case("inbox.deliver.idempotent", "after-dead-letter")
def _dup_dead(h: Harness) -> None:
    """A message id stays known once dead-lettered: delivering it again is a duplicate, and the
    dead letter is not revived."""
    _deliver(h, "poison", "alice")
    for i in range(h.spec.inbox_max_nacks):
        if _drain(h) != ["poison"]:
            break
        h.do("inbox_nack", recipient=R, message_id="poison", error=f"attempt {i + 1}")
    out = _deliver(h, "poison", "alice").value
    check(out["delivered"] is False, "inbox.deliver.idempotent", f"redelivery of a dead-lettered id reported {out}", h)
    check(_drain(h) == [], "inbox.deliver.idempotent", "a redelivered dead-lettered id was handed out again", h)
    h.do("inbox_dead", recipient=R)


@case("inbox.ack", "only-what-was-handed-out")
def _ack_not_handed_out(h: Harness) -> None:
    """An ack names a message that is handed out: one never drained, one nacked back to pending
    and a dead letter are refused with invalid_transition, and the refused ack changes nothing
    (the pending message is still handed out; the dead one stays dead).  One message only, so
    what a drain hands out does not hang on batch sizes or the order of redeliveries (clauses
    of their own)."""
    _deliver(h, "m1", "alice")
    out = h.do("inbox_ack", recipient=R, message_id="m1")  # never handed out
    check(not out.ok and out.code == "invalid_transition", "inbox.ack", f"ack of a message never handed out answered {out.code or 'ok'}", h)
    got = _drain(h, 1)
    check(got == ["m1"], "inbox.ack", f"after a refused ack of m1 the drain gave {got}", h)
    h.do("inbox_nack", recipient=R, message_id="m1", error="retry later")
    out = h.do("inbox_ack", recipient=R, message_id="m1")  # nacked back to pending
    check(not out.ok and out.code == "invalid_transition", "inbox.ack", f"ack of a nacked (pending) message answered {out.code or 'ok'}", h)
    check(_drain(h, 1) == ["m1"], "inbox.ack", "a refused ack of a nacked message lost it", h)
    for i in range(1, h.spec.inbox_max_nacks):
        h.do("inbox_nack", recipient=R, message_id="m1", error=f"attempt {i}")
        if i < h.spec.inbox_max_nacks - 1:
            _drain(h, 1)
    out = h.do("inbox_ack", recipient=R, message_id="m1")  # dead
    check(not out.ok and out.code == "invalid_transition", "inbox.ack", f"ack of a dead letter answered {out.code or 'ok'}", h)
    check([m["message_id"] for m in h.do("inbox_dead", recipient=R).value] == ["m1"], "inbox.ack", "a refused ack moved a dead letter", h)


@case("inbox.ack", "other-recipient")
def _ack_other(h: Harness) -> None:
    """An ack names the recipient's own message: an id only another recipient received is
    not_found for this one, and the other recipient's message is untouched."""
    other = "agent-8"
    h.do("inbox_deliver", recipient=other, message_id="m1", sender="alice", body={"text": "m1"})
    h.do("inbox_drain", recipient=other)
    out = h.raw("inbox_ack", recipient=R, message_id="m1", now=h.now())  # judged here, not by the model's not_found
    check(not out.ok and out.code == "not_found", "inbox.ack", f"ack of another recipient's message answered {out.code or 'ok'}", h)
    h.do("inbox_nack", recipient=other, message_id="m1", error="handler failed")
    got = [m["message_id"] for m in h.do("inbox_drain", recipient=other).value]
    check(got == ["m1"], "inbox.ack", f"the other recipient's message was lost (drain gave {got})", h)


@case("inbox.dead_letter", "survives-reopen")
def _dead_reopen(h: Harness) -> None:
    """Dead letters are part of the durable ledger: listed (and never handed out) after a reopen."""
    with durable(h) as reopen:
        _deliver(h, "poison", "alice")
        for i in range(h.spec.inbox_max_nacks):
            _drain(h)
            h.do("inbox_nack", recipient=R, message_id="poison", error=f"attempt {i + 1}")
        reopen()
        dead = [m["message_id"] for m in h.do("inbox_dead", recipient=R).value]
        check(dead == ["poison"], "inbox.dead_letter", f"after a reopen the dead letters are {dead}", h)
        check(_drain(h) == [], "inbox.dead_letter", "after a reopen a dead-lettered message was handed out", h)


