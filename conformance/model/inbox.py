"""The inbox profile's operations: delivery, drain, ack, nack and dead letters."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from .base import Accept, Expectation, ModelBase, Refuse, Violation, _Bad, same_json


class InboxOps(ModelBase):
    PROFILE = "inbox"

    def _box(self, recipient: str) -> list[dict[str, Any]]:
        return self.inbox.setdefault(recipient, [])

    def _op_inbox_deliver(self, a: dict[str, Any]) -> Expectation:
        box = self._box(a["recipient"])
        dup = any(m["message_id"] == a["message_id"] for m in box)

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, Mapping) or not isinstance(res.get("delivered"), bool):
                raise _Bad("inbox.deliver.idempotent", f"expected {{delivered: bool}}, got {res!r:.80}")
            if dup:
                return [] if res["delivered"] is False else [Violation("inbox.deliver.idempotent", f"message {a['message_id']!r} delivered twice")]
            box.append({"message_id": a["message_id"], "sender": a["sender"], "body": copy.deepcopy(a.get("body")),
                        "state": "pending", "nacks": 0})
            return [] if res["delivered"] is True else [Violation("inbox.deliver.idempotent", f"first delivery of {a['message_id']!r} reported as duplicate")]

        return Accept(h, "inbox.deliver.idempotent", "delivery is always accepted")

    def _op_inbox_drain(self, a: dict[str, Any]) -> Expectation:
        box = self._box(a["recipient"])
        limit = a.get("max") or self.spec.inbox_drain_max

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, list) or not all(isinstance(m, Mapping) for m in res):
                raise _Bad("inbox.drain.max", f"drain must return a list of messages, got {res!r:.80}")
            out = []
            by_id = {m["message_id"]: m for m in box}
            if len(res) > limit:
                out.append(Violation("inbox.drain.max", f"drain(max={limit}) handed out {len(res)} messages"))
            seen = set()
            handed = []
            for m in res:
                mid = m.get("message_id")
                mm = by_id.get(mid)
                if mm is None:
                    out.append(Violation("inbox.deliver.idempotent", f"drain handed out unknown message {mid!r}"))
                    continue
                if mid in seen:
                    out.append(Violation("inbox.drain.inflight", f"drain handed out {mid!r} twice in one batch"))
                    continue
                seen.add(mid)
                if mm["state"] == "inflight":
                    out.append(Violation("inbox.drain.inflight", f"{mid!r} was handed out again before it was nacked"))
                elif mm["state"] == "acked":
                    out.append(Violation("inbox.ack", f"{mid!r} was handed out again after it was acknowledged"))
                elif mm["state"] == "dead":
                    out.append(Violation("inbox.dead_letter", f"dead-lettered {mid!r} was handed out again"))
                else:
                    handed.append(mm)
                if m.get("sender") != mm["sender"] or not same_json(m.get("body"), mm["body"]):
                    out.append(Violation("inbox.deliver.idempotent", f"{mid!r} came back with sender/body {m.get('sender')!r}/{m.get('body')!r:.40}"))
                if m.get("nacks") != mm["nacks"]:
                    out.append(Violation("inbox.nack.redeliver", f"{mid!r} reports {m.get('nacks')!r} nacks, expected {mm['nacks']}"))
            # per-sender FIFO: what is handed out for a sender is the head of its pending messages, in order
            pending = [m for m in box if m["state"] == "pending"]
            for sender in {m["sender"] for m in handed}:
                mine = [m["message_id"] for m in pending if m["sender"] == sender]
                got = [m["message_id"] for m in handed if m["sender"] == sender]
                if got != mine[: len(got)]:
                    out.append(Violation("inbox.fifo.per_sender", f"sender {sender!r}: handed out {got}, but pending in arrival order is {mine}"))
            if not res and limit >= 1:
                busy = {m["sender"] for m in box if m["state"] == "inflight"}
                ready = [m for m in pending if m["sender"] not in busy]
                if ready:
                    m0 = ready[0]
                    clause = "inbox.nack.redeliver" if m0["nacks"] else "inbox.deliver.idempotent"
                    out.append(Violation(clause, f"drain handed out nothing although {m0['message_id']!r} is pending"))
            for mm in handed:
                mm["state"] = "inflight"
            return out

        return Accept(h, "inbox.drain.max", "draining always answers")

    def _inbox_msg(self, a: Mapping[str, Any]) -> tuple[dict[str, Any] | None, Refuse | None]:
        for m in self._box(a["recipient"]):
            if m["message_id"] == a["message_id"]:
                return m, None
        return None, Refuse(frozenset({"not_found"}), "core.not_found", f"no message {a['message_id']!r} for {a['recipient']!r}")

    def _op_inbox_ack(self, a: dict[str, Any]) -> Expectation:
        m, refuse = self._inbox_msg(a)
        if refuse:
            return refuse
        if m["state"] == "acked":
            return Accept(lambda res: [], "inbox.ack", "acknowledging twice changes nothing", also_refuse=frozenset({"invalid_transition"}))
        if m["state"] != "inflight":
            return Refuse(frozenset({"invalid_transition"}), "inbox.ack", f"{m['message_id']!r} is {m['state']}, not handed out")

        def h(res: Any) -> list[Violation]:
            m["state"] = "acked"
            return []

        return Accept(h, "inbox.ack", f"{m['message_id']!r} is handed out and can be acknowledged")

    def _op_inbox_nack(self, a: dict[str, Any]) -> Expectation:
        m, refuse = self._inbox_msg(a)
        if refuse:
            return refuse
        if m["state"] != "inflight":
            return Refuse(frozenset({"invalid_transition"}), "inbox.nack.redeliver", f"{m['message_id']!r} is {m['state']}, not handed out")
        n = m["nacks"] + 1
        dead = n >= self.spec.inbox_max_nacks

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, Mapping):
                raise _Bad("inbox.dead_letter", f"expected {{dead, nacks}}, got {res!r:.80}")
            out = []
            if res.get("dead") is not dead:
                out.append(Violation("inbox.dead_letter", f"nack {n} of {m['message_id']!r} (max_nacks {self.spec.inbox_max_nacks}) reported dead={res.get('dead')!r}"))
            if res.get("nacks") != n:
                out.append(Violation("inbox.nack.redeliver", f"{m['message_id']!r} reports {res.get('nacks')!r} nacks, expected {n}"))
            m["nacks"] = n
            m["state"] = "dead" if dead else "pending"
            return out

        return Accept(h, "inbox.nack.redeliver", f"{m['message_id']!r} is handed out and can be nacked")

    def _op_inbox_dead(self, a: dict[str, Any]) -> Expectation:
        want = [m["message_id"] for m in self._box(a["recipient"]) if m["state"] == "dead"]

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, list):
                raise _Bad("inbox.dead_letter", f"expected a list, got {res!r:.80}")
            got = sorted(str(m.get("message_id")) for m in res if isinstance(m, Mapping))
            if got != sorted(want):
                return [Violation("inbox.dead_letter", f"dead letters are {got}, expected {sorted(want)}")]
            box = {m["message_id"]: m for m in self._box(a["recipient"])}
            out = []
            for m in res:  # each dead letter as it was delivered, with the nacks that killed it
                mm = box[m["message_id"]]
                bad = [f for f in ("sender", "body", "nacks") if not same_json(m.get(f), mm[f])]
                if bad:
                    out.append(Violation("inbox.dead_letter", f"dead letter {mm['message_id']!r}: {', '.join(f'{f} is {m.get(f)!r:.40}, expected {mm[f]!r:.40}' for f in bad)}"))
            return out

        return Accept(h, "inbox.dead_letter", "dead letters can always be listed")
