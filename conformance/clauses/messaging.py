"""Clause tests of the inbox and outbox profiles."""

from __future__ import annotations

from collections.abc import Iterable

from ledgercheck.spec import Spec

from ..harness import Harness
from . import CaseFn, case, cases, check

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


@case("inbox.ack", "gone")
def _ack(h: Harness) -> None:
    _deliver(h, "m1", "alice")
    _drain(h)
    h.do("inbox_ack", recipient=R, message_id="m1")
    check(_drain(h) == [], "inbox.ack", "an acknowledged message came back", h)
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


# ---------------------------------------------------------------- outbox
def _enqueue(h: Harness, key: str, payload: object = None):
    return h.do("outbox_enqueue", key=key, destination="telegram:chat-42", payload=payload if payload is not None else {"text": key, "thread": None, "meta": {"lang": "fr", "reply_to": None}})


@case("outbox.intent_first", "pending-before-send")
def _intent(h: Harness) -> None:
    _enqueue(h, "reply-1")
    got = [m["key"] for m in h.do("outbox_pending").value]
    check(got == ["reply-1"], "outbox.intent_first", f"pending {got}", h)


@cases("outbox.dedupe")
def _dedupe(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    def same(h: Harness) -> None:
        _enqueue(h, "reply-1")
        out = _enqueue(h, "reply-1")
        check(out.value["created"] is False, "outbox.dedupe", "second enqueue created a message", h)
        check(len(h.do("outbox_pending").value) == 1, "outbox.dedupe", "two pending messages for one key", h)

    def conflict(h: Harness) -> None:
        _enqueue(h, "reply-1", {"text": "hello"})
        out = _enqueue(h, "reply-1", {"text": "goodbye"})
        check(not out.ok and out.code == "idempotency_conflict", "outbox.dedupe", f"key reuse with another payload answered {out.code or 'ok'}", h)

    def key_order(h: Harness) -> None:
        # payloads are compared as JSON values (the contract's canonical JSON: keys sorted), so
        # the same payload with its keys in another order is the same payload
        a = {"text": "hällo", "meta": {"a": 1, "b": None, "c": [1, {"y": 2, "x": 1}]}, "to": None}
        b = {"to": None, "meta": {"c": [1, {"x": 1, "y": 2}], "b": None, "a": 1}, "text": "hällo"}
        _enqueue(h, "reply-1", a)
        out = h.raw("outbox_enqueue", key="reply-1", destination="telegram:chat-42", payload=b, now=h.now())
        check(out.ok and out.value.get("created") is False, "outbox.dedupe",
              f"the same payload with its keys in another order answered {out.code or out.value!r:.80}", h)
        _enqueue(h, "reply-1", b)  # and once more through the model, which compares the answer
        check(len(h.do("outbox_pending").value) == 1, "outbox.dedupe", "two pending messages for one key", h)

    def after_sent(h: Harness) -> None:
        # the key identifies the message for good: once it was sent, enqueuing it again (a retry
        # of the step that sent it) returns the sent message and queues nothing new
        _enqueue(h, "reply-1")
        h.do("outbox_mark_sent", key="reply-1", provider_ref="tg-1001")
        out = _enqueue(h, "reply-1")
        check(out.ok and out.value["created"] is False, "outbox.dedupe", "enqueuing a sent key again created a message", h)
        check(h.do("outbox_pending").value == [], "outbox.dedupe", "a sent key is pending again", h)

    yield "same-payload", same
    yield "after-sent", after_sent
    yield "other-payload", conflict
    yield "same-payload-other-key-order", key_order


@case("outbox.mark_sent", "once")
def _sent(h: Harness) -> None:
    _enqueue(h, "reply-1")
    h.do("outbox_mark_sent", key="reply-1", provider_ref="tg-1001")
    again = h.do("outbox_mark_sent", key="reply-1", provider_ref="tg-2002").value
    check(again["provider_ref"] == "tg-1001", "outbox.mark_sent", f"second mark gave {again['provider_ref']!r}", h)
    check(h.do("outbox_pending").value == [], "outbox.mark_sent", "a sent message is still pending", h)
    out = h.do("outbox_mark_sent", key="never-enqueued", provider_ref="x")
    check(not out.ok and out.code == "not_found", "outbox.mark_sent", f"marking an unknown key answered {out.code or 'ok'}", h)


@case("outbox.order", "enqueue-order")
def _order(h: Harness) -> None:
    keys = [f"k{i}" for i in (3, 1, 4, 0, 2)]
    for k in keys:
        _enqueue(h, k)
    got = [m["key"] for m in h.do("outbox_pending").value]
    check(got == keys, "outbox.order", f"pending order {got}, enqueued {keys}", h)
    got2 = [m["key"] for m in h.do("outbox_pending", max=2).value]
    check(got2 == keys[:2], "outbox.order", f"pending(max=2) gave {got2}", h)
