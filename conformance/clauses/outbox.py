"""Clause tests of the outbox profile (spec/contract/clauses/outbox.yaml)."""


from __future__ import annotations

from collections.abc import Iterable

from ledgercheck.spec import Spec

from ..harness import Harness
from ..model import same_json
from . import CaseFn, case, cases, check, durable


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


# ---------------------------------------------------------------- round-3 hunt: outbox
@case("outbox.dedupe", "other-work-item")
def _dedupe_work(h: Harness) -> None:
    """The key alone identifies the message: reusing it for another work item is either the
    existing message or an idempotency_conflict (the contract lets you choose), never a second one."""
    w1, w2 = h.create(), h.create()
    payload = {"text": "done", "thread": None}
    h.do("outbox_enqueue", key="reply-1", destination="telegram:chat-42", payload=payload, work_id=w1)
    out = h.do("outbox_enqueue", key="reply-1", destination="telegram:chat-42", payload=payload, work_id=w2)
    check((out.ok and out.value["created"] is False) or (not out.ok and out.code == "idempotency_conflict"), "outbox.dedupe",
          f"reusing the key for another work item answered {out.code or out.value!r:.80}", h)
    got = [m["key"] for m in h.raw("outbox_pending").value]
    check(got == ["reply-1"], "outbox.dedupe", f"one key, pending {got}", h)


@case("outbox.dedupe", "other-payload-same-after-normalisation")
def _dedupe_nfc(h: Harness) -> None:
    """Payloads are compared by their canonical JSON, which keeps strings as they are: 'é' as one
    code point and as e + combining accent are different payloads."""
    _enqueue(h, "reply-1", {"text": "caf\u00e9"})
    out = _enqueue(h, "reply-1", {"text": "cafe\u0301"})
    check(not out.ok and out.code == "idempotency_conflict", "outbox.dedupe",
          f"key reuse with a differently spelled payload answered {out.code or 'ok'}", h)


@case("outbox.intent_first", "payload-as-given")
def _intent_payload(h: Harness) -> None:
    """What is recorded is what will be sent: integers of any size (canonical JSON writes them as
    plain digits), non-ASCII and astral text, booleans and nulls come back as enqueued."""
    payload = {"amount": 2 ** 53 - 1, "id": 2 ** 53 - 2, "neg": -(2 ** 53 - 1), "text": "caf\u00e9 cafe\u0301 \U0001F642",
               "ok": True, "no": False, "none": None, "n": [0, 1, {"deep": None}]}
    m = _enqueue(h, "reply-1", payload).value["message"]
    check(same_json(m.get("payload"), payload), "outbox.intent_first", f"enqueue returned payload {m.get('payload')!r:.100}", h)
    got = h.do("outbox_pending").value
    check(len(got) == 1 and same_json(got[0].get("payload"), payload), "outbox.intent_first",
          f"pending payload {got[0].get('payload') if got else None!r:.100}", h)


@case("outbox.intent_first", "work-item-recorded")
def _intent_work_item(h: Harness) -> None:
    """Every optional argument present: a message enqueued for a work item records that item,
    and the relay's pending list hands it out with it (the model compares every field); one
    enqueued without it records none."""
    h.need("create")
    wid = h.create()
    _enqueue_for(h, "reply-w", wid)
    _enqueue(h, "reply-none")
    got = h.do("outbox_pending").value
    check([m.get("work_id") for m in got] == [wid, None], "outbox.intent_first",
          f"pending messages name the work items {[m.get('work_id') for m in got]}, enqueued for {[wid, None]}", h)
    sent = h.do("outbox_mark_sent", key="reply-w", provider_ref="tg-7").value
    check(sent.get("work_id") == wid, "outbox.intent_first", f"the sent message names {sent.get('work_id')!r}, enqueued for {wid!r}", h)


def _enqueue_for(h: Harness, key: str, work_id: str):
    return h.do("outbox_enqueue", key=key, destination="telegram:chat-42", payload={"text": key}, work_id=work_id)


@case("outbox.mark_sent", "survives-reopen")
def _sent_reopen(h: Harness) -> None:
    """Marking sent is durable: after a reopen the message is still sent, with its first reference."""
    with durable(h) as reopen:
        _enqueue(h, "reply-1")
        _enqueue(h, "reply-2")
        h.do("outbox_mark_sent", key="reply-1", provider_ref="tg-1001")
        reopen()
        got = [m["key"] for m in h.do("outbox_pending").value]
        check(got == ["reply-2"], "outbox.mark_sent", f"after a reopen pending is {got}", h)
        again = h.do("outbox_mark_sent", key="reply-1", provider_ref="tg-2002").value
        check(again["provider_ref"] == "tg-1001", "outbox.mark_sent", f"after a reopen, marking again gave {again['provider_ref']!r}", h)
