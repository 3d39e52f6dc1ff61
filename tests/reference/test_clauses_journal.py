"""Idempotency, inbox, outbox and event-log clauses (spec/contract/clauses/{idempotency,inbox,outbox,eventlog}.yaml)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ledgercheck.reference.ledger import Ledger
from ledgercheck.spec.rules import fold

T0 = 1000.0


def canon(x: Any) -> str:
    return hashlib.sha256(json.dumps(x, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()


def begin(kit: Any, w: dict[str, Any], step: str = "s1", inp: Any = None, cls: str = "idempotent_with_key", **kw: Any) -> dict[str, Any]:
    return kit.led.effect_begin(work_id=w["work_id"], step_id=step, tool="mailer", input={"to": "a@b"} if inp is None else inp,
                                step_class=cls, now=T0, **kw)


# ---------------------------------------------------------------------- idempotency
def test_idem_key_derivation(kit: Any) -> None:
    w = kit.running(now=T0)
    r = begin(kit, w, inp={"to": "ü@b", "n": [1, 2]})["receipt"]
    assert r["key"] == canon({"work_id": w["work_id"], "step_id": "s1", "tool": "mailer"})
    assert r["input_hash"] == canon({"n": [1, 2], "to": "ü@b"})


def test_idem_begin(kit: Any) -> None:
    w = kit.running(now=T0)
    first = begin(kit, w)
    again = begin(kit, w)
    assert first["created"] is True and again["created"] is False and again["receipt"] == first["receipt"]
    assert first["receipt"]["state"] == "pending" and first["receipt"]["result"] is None
    assert kit.led.effect_list(work_id=w["work_id"]) == [first["receipt"]]


def test_idem_conflict(kit: Any) -> None:
    w = kit.running(now=T0)
    r = begin(kit, w)["receipt"]
    kit.refused("idempotency_conflict", kit.led.effect_begin, work_id=w["work_id"], step_id="s1", tool="mailer",
                input={"to": "other@b"}, step_class="idempotent_with_key", now=T0)
    kit.refused("idempotency_conflict", kit.led.effect_record, key=r["key"], input_hash="0" * 64, result=1, now=T0)
    assert kit.led.effect_lookup(key=r["key"]) == r


def test_idem_record(kit: Any) -> None:
    w = kit.running(now=T0)
    r = begin(kit, w, token=w["lease_token"])["receipt"]
    done = kit.led.effect_record(key=r["key"], input_hash=r["input_hash"], result={"message_id": "m-1"}, token=w["lease_token"], now=T0)
    assert done["state"] == "completed" and done["result"] == {"message_id": "m-1"}
    assert kit.led.effect_lookup(key=r["key"]) == done


def test_idem_duplicate_returns_stored(kit: Any) -> None:
    w = kit.running(now=T0)
    r = begin(kit, w)["receipt"]
    first = kit.led.effect_record(key=r["key"], input_hash=r["input_hash"], result={"v": 1}, now=T0)
    second = kit.led.effect_record(key=r["key"], input_hash=r["input_hash"], result={"v": 2}, now=T0 + 1)
    assert second == first and kit.led.effect_lookup(key=r["key"])["result"] == {"v": 1}
    assert begin(kit, w)["receipt"] == first and len(kit.led.effect_list(work_id=w["work_id"])) == 1


def test_idem_lookup_miss(kit: Any) -> None:
    assert kit.led.effect_lookup(key="f" * 64) is None
    kit.refused("invalid_argument", kit.led.effect_lookup, key="not-a-key")


def test_idem_receipt_states(kit: Any, spec: Any) -> None:
    w = kit.running(now=T0)
    states = spec.receipt_states
    for a in states:
        for b in states:
            r = begin(kit, w, step=f"{a}-{b}")["receipt"]
            path = {"pending": [], "completed": ["completed"], "unknown": ["unknown"], "needs_inspection": ["needs_inspection"]}[a]
            for s in path:
                if s == "completed":
                    kit.led.effect_record(key=r["key"], input_hash=r["input_hash"], result=0, now=T0)
                else:
                    kit.led.effect_mark(key=r["key"], state=s, now=T0)
            allowed = (a, b) in spec.receipt_transitions
            if b == "completed":
                if a == "completed":
                    continue  # a duplicate record, see idem.duplicate_returns_stored
                if allowed:
                    assert kit.led.effect_record(key=r["key"], input_hash=r["input_hash"], result=0, now=T0)["state"] == "completed"
                else:
                    kit.refused("invalid_transition", kit.led.effect_record, key=r["key"], input_hash=r["input_hash"], result=0, now=T0)
                continue
            if allowed:
                assert kit.led.effect_mark(key=r["key"], state=b, now=T0)["state"] == b
            else:
                kit.refused("invalid_transition", kit.led.effect_mark, key=r["key"], state=b, now=T0)
                assert kit.led.effect_lookup(key=r["key"])["state"] == a


def test_idem_fenced(kit: Any) -> None:
    w = kit.running(now=T0)
    r = begin(kit, w, token=w["lease_token"])["receipt"]
    kit.led.expire(now=T0 + 3600)
    kit.led.requeue(work_id=w["work_id"], now=T0 + 3601)
    kit.led.claim(owner="w2", now=T0 + 3602)
    kit.refused("stale_lease", kit.led.effect_record, key=r["key"], input_hash=r["input_hash"], result=1, token=w["lease_token"], now=T0 + 3603)
    kit.refused("stale_lease", kit.led.effect_begin, work_id=w["work_id"], step_id="s9", tool="t", input=1, step_class="pure",
                token=w["lease_token"], now=T0 + 3603)
    assert kit.led.effect_lookup(key=r["key"])["state"] == "pending"


def test_idem_retention(kit: Any, spec: Any) -> None:
    w = kit.running(now=T0)
    r = begin(kit, w)["receipt"]
    done = kit.led.effect_record(key=r["key"], input_hash=r["input_hash"], result="sent", now=T0)
    kit.led.close_out(work_id=w["work_id"], token=w["lease_token"], status="done", now=T0 + 1)
    later = T0 + spec.retention + 86400
    for monitor in (kit.led.expire, kit.led.promote_due, kit.led.recover):
        monitor(now=later)
    kit.led.requeue(work_id=w["work_id"], now=later)
    assert kit.led.effect_lookup(key=r["key"]) == done


# ---------------------------------------------------------------------- inbox
def deliver(kit: Any, mid: str, sender: str = "alice", body: Any = None) -> bool:
    return kit.led.inbox_deliver(recipient="agent", message_id=mid, sender=sender, body=body or {"m": mid}, now=T0)["delivered"]


def drain(kit: Any, n: int | None = None) -> list[str]:
    return [m["message_id"] for m in kit.led.inbox_drain(recipient="agent", max=n, now=T0)]


def test_inbox_deliver_idempotent(kit: Any) -> None:
    assert deliver(kit, "m1") is True and deliver(kit, "m1", body={"other": 1}) is False
    got = kit.led.inbox_drain(recipient="agent", now=T0)
    assert [(m["message_id"], m["body"], m["nacks"]) for m in got] == [("m1", {"m": "m1"}, 0)]
    assert drain(kit) == []


def test_inbox_fifo_per_sender(kit: Any) -> None:
    for i in range(5):
        deliver(kit, f"a{i}", "alice")
        deliver(kit, f"b{i}", "bob")
    seen = []
    while batch := drain(kit, 3):
        seen += batch
    assert [m for m in seen if m.startswith("a")] == [f"a{i}" for i in range(5)]
    assert [m for m in seen if m.startswith("b")] == [f"b{i}" for i in range(5)]


def test_inbox_drain_max(kit: Any, spec: Any) -> None:
    for i in range(7):
        deliver(kit, f"m{i}")
    assert len(drain(kit, 3)) == 3 and len(drain(kit, 1)) == 1 and len(drain(kit)) == 3
    assert spec.inbox_drain_max >= 3


def test_inbox_drain_inflight(kit: Any) -> None:
    deliver(kit, "m1")
    deliver(kit, "m2")
    assert drain(kit, 1) == ["m1"]
    assert drain(kit) == ["m2"] and drain(kit) == []


def test_inbox_ack(kit: Any) -> None:
    deliver(kit, "m1")
    drain(kit)
    kit.led.inbox_ack(recipient="agent", message_id="m1", now=T0)
    kit.led.inbox_ack(recipient="agent", message_id="m1", now=T0)  # twice changes nothing
    assert drain(kit) == []
    kit.refused("invalid_transition", kit.led.inbox_nack, recipient="agent", message_id="m1", now=T0)
    deliver(kit, "m2")
    kit.refused("invalid_transition", kit.led.inbox_ack, recipient="agent", message_id="m2", now=T0)  # not handed out
    kit.refused("not_found", kit.led.inbox_ack, recipient="agent", message_id="nope", now=T0)


def test_inbox_nack_redeliver(kit: Any) -> None:
    deliver(kit, "m1")
    deliver(kit, "m2")
    assert drain(kit, 1) == ["m1"]
    assert kit.led.inbox_nack(recipient="agent", message_id="m1", error="boom", now=T0) == {"dead": False, "nacks": 1}
    got = kit.led.inbox_drain(recipient="agent", now=T0)
    assert [(m["message_id"], m["nacks"]) for m in got] == [("m1", 1), ("m2", 0)]  # m1 keeps its place


def test_inbox_dead_letter(kit: Any, spec: Any) -> None:
    deliver(kit, "m1")
    for n in range(1, spec.inbox_max_nacks + 1):
        assert drain(kit) == ["m1"]
        res = kit.led.inbox_nack(recipient="agent", message_id="m1", now=T0)
        assert res == {"dead": n == spec.inbox_max_nacks, "nacks": n}
        assert [m["message_id"] for m in kit.led.inbox_dead(recipient="agent")] == (["m1"] if res["dead"] else [])
    assert drain(kit) == []
    kit.refused("invalid_transition", kit.led.inbox_nack, recipient="agent", message_id="m1", now=T0)


# ---------------------------------------------------------------------- outbox
def enqueue(kit: Any, key: str, payload: Any = None, **kw: Any) -> dict[str, Any]:
    return kit.led.outbox_enqueue(key=key, destination="smtp", payload=payload or {"k": key}, now=T0, **kw)


def test_outbox_intent_first(kit: Any) -> None:
    w = kit.new(now=T0)
    res = enqueue(kit, "k1", work_id=w["work_id"])
    assert res["created"] is True and res["message"] == {"key": "k1", "destination": "smtp", "payload": {"k": "k1"},
                                                         "work_id": w["work_id"], "state": "pending", "provider_ref": None}
    with Ledger(kit.led.path) as other:  # committed: another connection sees it before anything is sent
        assert other.outbox_pending() == [res["message"]]
    kit.refused("not_found", kit.led.outbox_enqueue, key="k2", destination="d", payload=1, work_id="nope", now=T0)


def test_outbox_dedupe(kit: Any) -> None:
    a = enqueue(kit, "k1")
    b = enqueue(kit, "k1")
    assert b == {"message": a["message"], "created": False} and len(kit.led.outbox_pending()) == 1
    kit.refused("idempotency_conflict", kit.led.outbox_enqueue, key="k1", destination="smtp", payload={"other": 1}, now=T0)


def test_outbox_mark_sent(kit: Any) -> None:
    enqueue(kit, "k1")
    enqueue(kit, "k2")
    s = kit.led.outbox_mark_sent(key="k1", provider_ref="prov-1", now=T0)
    assert (s["state"], s["provider_ref"]) == ("sent", "prov-1")
    assert [m["key"] for m in kit.led.outbox_pending()] == ["k2"]
    assert kit.led.outbox_mark_sent(key="k1", provider_ref="prov-2", now=T0)["provider_ref"] == "prov-1"
    kit.refused("not_found", kit.led.outbox_mark_sent, key="zz", provider_ref="p", now=T0)


def test_outbox_order(kit: Any) -> None:
    keys = [f"k{i}" for i in (5, 1, 9, 3, 7)]
    for k in keys:
        enqueue(kit, k)
    assert [m["key"] for m in kit.led.outbox_pending()] == keys
    assert [m["key"] for m in kit.led.outbox_pending(max=2)] == keys[:2]
    kit.led.outbox_mark_sent(key="k1", provider_ref="p", now=T0)
    assert [m["key"] for m in kit.led.outbox_pending()] == [k for k in keys if k != "k1"]


# ---------------------------------------------------------------------- event log
def test_eventlog_append_expected_seq(kit: Any, spec: Any) -> None:
    first = spec.first_seq
    assert kit.led.log_append(stream="conv-1", expected_seq=first - 1, kind="msg", payload={"t": "hi"}, now=T0) == {"seq": first}
    assert kit.led.log_append(stream="conv-1", expected_seq=first, kind="msg", now=T0) == {"seq": first + 1}
    assert kit.led.log_append(stream="conv-2", expected_seq=first - 1, kind="msg", now=T0) == {"seq": first}


def test_eventlog_append_conflict(kit: Any, spec: Any) -> None:
    first = spec.first_seq
    kit.led.log_append(stream="s", expected_seq=first - 1, kind="a", now=T0)
    for wrong in (first - 1, first + 1, first + 5):
        kit.refused("concurrent_append", kit.led.log_append, stream="s", expected_seq=wrong, kind="b", now=T0)
    assert [e["seq"] for e in kit.led.log_read(stream="s")] == [first]


def test_eventlog_read(kit: Any, spec: Any) -> None:
    first = spec.first_seq
    for i in range(4):
        kit.led.log_append(stream="s", expected_seq=first - 1 + i, kind=f"k{i}", payload={"i": i}, now=T0 + i)
    got = kit.led.log_read(stream="s", from_seq=first + 2)
    assert [(e["seq"], e["kind"], e["payload"], e["at"]) for e in got] == [(first + 2, "k2", {"i": 2}, T0 + 2), (first + 3, "k3", {"i": 3}, T0 + 3)]
    assert len(kit.led.log_read(stream="s")) == 4 and kit.led.log_read(stream="other") == []


def test_eventlog_fold(kit: Any, spec: Any) -> None:
    for status in spec.statuses:
        w = kit.reach(status, now=T0)
        snap = kit.led.get(work_id=w["work_id"])
        folded = fold(spec, kit.events(w))
        for name, f in spec.work_fields.items():
            if f.fold:
                assert folded[name] == snap[name], (status, name)


def test_eventlog_event_data(kit: Any, spec: Any) -> None:
    w = kit.running(now=T0, retry_policy={"max_attempts": 5})
    wid, tok = w["work_id"], w["lease_token"]
    steps = [
        lambda: kit.led.renew(work_id=wid, token=tok, now=T0 + 1),
        lambda: kit.led.fail(work_id=wid, token=tok, error_class="rate_limited", now=T0 + 2),
    ]
    snaps = [kit.led.get(work_id=wid)] + [s() for s in steps]
    for e, snap in zip(kit.events(w)[1:], snaps, strict=True):
        assert set(e["data"]) == set(spec.events[e["type"]].data)
        assert e["data"] == {f: snap[f] for f in spec.events[e["type"]].data}
