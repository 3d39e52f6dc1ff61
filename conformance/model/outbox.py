"""The outbox profile's operations: enqueue, pending and mark-sent."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from .base import Accept, Expectation, ModelBase, Refuse, Violation, _Bad, same_json


class OutboxOps(ModelBase):
    PROFILE = "outbox"

    def _op_outbox_enqueue(self, a: dict[str, Any]) -> Expectation:
        key = a["key"]
        if a.get("work_id") is not None and a["work_id"] not in self.items:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no work {a['work_id']!r}")
        existing = self.outbox.get(key)
        ph = self.spec.input_hash(a["payload"])
        if existing is not None and self.spec.input_hash(existing["payload"]) != ph:
            return Refuse(frozenset({"idempotency_conflict"}), "outbox.dedupe", f"outbox key {key!r} was used with another payload")

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, Mapping) or not isinstance(res.get("message"), Mapping):
                raise _Bad("outbox.intent_first", f"expected {{message, created}}, got {res!r:.80}")
            out = []
            if existing is not None:
                if res.get("created") is not False:
                    out.append(Violation("outbox.dedupe", f"enqueueing key {key!r} again created a second message"))
                # the answer is the existing message as it is now (sent, with its reference, if it
                # was): every field of it is the dedupe clause's "returns the existing message"
                return out + _compare_outbox(existing, res["message"], "outbox.dedupe", recorded="outbox.dedupe")
            if res.get("created") is not True:
                out.append(Violation("outbox.dedupe", f"first enqueue of {key!r} reported created={res.get('created')!r}"))
            msg = {"key": key, "destination": a["destination"], "payload": copy.deepcopy(a["payload"]),
                   "work_id": a.get("work_id"), "state": "pending", "provider_ref": None}
            self.outbox[key] = msg
            self.outbox_order.append(key)
            return out + _compare_outbox(msg, res["message"], "outbox.intent_first")

        if existing is not None:
            # refusing a reuse of the key with the same payload is a dedupe error, not an intent
            # one; with another destination or work id the contract does not say whether that is
            # "different input" (idempotency_conflict), so either answer is taken
            other = existing["destination"] != a["destination"] or existing["work_id"] != a.get("work_id")
            return Accept(h, "outbox.dedupe", f"outbox key {key!r} is reused with the same payload: the existing message is returned",
                          also_refuse=frozenset({"idempotency_conflict"}) if other else frozenset())
        return Accept(h, "outbox.intent_first", "enqueueing is always accepted")

    def _op_outbox_pending(self, a: dict[str, Any]) -> Expectation:
        limit = a.get("max") or self.spec.outbox_pending_max
        pending = [k for k in self.outbox_order if self.outbox[k]["state"] == "pending"]

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, list) or not all(isinstance(m, Mapping) for m in res):
                raise _Bad("outbox.intent_first", f"expected a list of messages, got {res!r:.80}")
            got = [m.get("key") for m in res]
            out = []
            sent = [k for k in got if k in self.outbox and self.outbox[k]["state"] == "sent"]
            if sent:
                out.append(Violation("outbox.mark_sent", f"sent messages {sent} are still pending"))
            want_n = min(limit, len(pending))
            real = [k for k in got if k in pending]
            if len(got) > limit or len(real) != want_n or len(set(got)) != len(got):
                out.append(Violation("outbox.intent_first", f"pending(max={limit}) gave {len(real)} of {len(pending)} pending messages"))
            elif real != pending[:want_n]:
                out.append(Violation("outbox.order", f"pending messages in order {real}, enqueued as {pending[:want_n]}"))
            for m in res:
                if m.get("key") in self.outbox:
                    out += _compare_outbox(self.outbox[m["key"]], m, "outbox.intent_first")
            return out

        return Accept(h, "outbox.intent_first", "pending messages can always be listed")

    def _op_outbox_mark_sent(self, a: dict[str, Any]) -> Expectation:
        msg = self.outbox.get(a["key"])
        if msg is None:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no outbox message {a['key']!r}")

        def h(res: Any) -> list[Violation]:
            if msg["state"] == "pending":
                msg.update(state="sent", provider_ref=a["provider_ref"])
            return _compare_outbox(msg, res, "outbox.mark_sent")

        return Accept(h, "outbox.mark_sent", "marking sent is always accepted")


def _compare_outbox(exp: Mapping[str, Any], got: Any, clause: str, recorded: str = "outbox.mark_sent") -> list[Violation]:
    """``got`` field by field against the model's message; ``recorded`` is blamed for its state and
    provider reference (what marking it sent records), ``clause`` for the rest."""
    if not isinstance(got, Mapping):
        return [Violation(clause, f"expected an outbox message, got {got!r:.80}")]
    out = []
    for f in ("key", "destination", "payload", "work_id", "state", "provider_ref"):
        if not same_json(got.get(f), exp[f]):
            c = recorded if f in ("state", "provider_ref") else clause
            out.append(Violation(c, f"outbox {exp['key']!r}: {f} is {got.get(f)!r}, expected {exp[f]!r}"))
    return out
