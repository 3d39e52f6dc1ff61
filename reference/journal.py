"""Journal operations of the reference ledger: effect receipts, inbox, outbox, append-only log.

A mixin of :class:`ledgercheck.reference.ledger.Ledger`; it uses the ledger's transaction,
argument checks and lease fencing, and decides with the Spec's receipt transitions, nack limit
and batch sizes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

from ledgercheck.spec import Spec
from ledgercheck.transport.protocol import LedgerError

from .rows import Rec, decode, encode

_RECEIPT = "SELECT key, work_id, step_id, tool, step_class, input_hash, state, result FROM effect"
_OUT = "SELECT key, destination, payload, work_id, state, provider_ref, payload_hash FROM outbox"
_MSG = "SELECT message_id, sender, body, nacks FROM inbox"


def _receipt(r: tuple[Any, ...]) -> dict[str, Any]:
    return {"key": r[0], "work_id": r[1], "step_id": r[2], "tool": r[3], "step_class": r[4],
            "input_hash": r[5], "state": r[6], "result": None if r[7] is None else decode(r[7])}


def _msg(r: tuple[Any, ...]) -> dict[str, Any]:
    return {"message_id": r[0], "sender": r[1], "body": None if r[2] is None else decode(r[2]), "nacks": r[3]}


def _out(r: tuple[Any, ...]) -> dict[str, Any]:
    return {"key": r[0], "destination": r[1], "payload": decode(r[2]), "work_id": r[3], "state": r[4], "provider_ref": r[5]}


class JournalOps:
    # provided by Ledger
    spec: Spec
    _tx: Any
    _check: Callable[[str, Mapping[str, Any]], None]
    _read: Callable[..., list[Any]]
    _get: Callable[[sqlite3.Cursor, str], Rec]
    _lease_ok: Callable[[Rec, Any, float, str], None]

    # ------------------------------------------------------------------ idempotency
    def _fence(self, cur: sqlite3.Cursor, work_id: str, token: str | None, now: float, op: str) -> None:
        if token is not None:
            self._lease_ok(self._get(cur, work_id), token, now, op)

    def effect_begin(self, *, work_id: str, step_id: str, tool: str, input: Any, step_class: str, now: float,
                     token: str | None = None) -> dict[str, Any]:
        self._check("effect_begin", {"work_id": work_id, "step_id": step_id, "tool": tool, "input": input,
                                     "step_class": step_class, "token": token, "now": now})
        now = float(now)
        key = self.spec.effect_key(work_id=work_id, step_id=step_id, tool=tool)
        ih = self.spec.input_hash(input)
        with self._tx as cur:
            rec = self._get(cur, work_id)
            r = cur.execute(_RECEIPT + " WHERE key = ?", (key,)).fetchone()
            if r is not None and r[5] != ih:
                raise LedgerError("idempotency_conflict", f"effect_begin: key {key[:12]} was begun with input {r[5][:12]}, not {ih[:12]}")
            if token is not None:
                self._lease_ok(rec, token, now, "effect_begin")
            if r is not None:
                return {"receipt": _receipt(r), "created": False}
            seq = cur.execute("SELECT ifnull(max(seq), 0) + 1 FROM effect").fetchone()[0]
            cur.execute("INSERT INTO effect(key, work_id, step_id, tool, step_class, input_hash, state, result, created_at, "
                        "updated_at, seq) VALUES (?, ?, ?, ?, ?, ?, 'pending', NULL, ?, ?, ?)",
                        (key, work_id, step_id, tool, step_class, ih, now, now, seq))
        return {"receipt": {"key": key, "work_id": work_id, "step_id": step_id, "tool": tool, "step_class": step_class,
                            "input_hash": ih, "state": "pending", "result": None}, "created": True}

    def effect_lookup(self, *, key: str) -> dict[str, Any] | None:
        self._check("effect_lookup", {"key": key})
        rows = self._read(_RECEIPT + " WHERE key = ?", (key,))
        return _receipt(rows[0]) if rows else None

    def effect_record(self, *, key: str, input_hash: str, result: Any, now: float, token: str | None = None) -> dict[str, Any]:
        self._check("effect_record", {"key": key, "input_hash": input_hash, "result": result, "token": token, "now": now})
        now = float(now)
        with self._tx as cur:
            r = cur.execute(_RECEIPT + " WHERE key = ?", (key,)).fetchone()
            if r is None:
                raise LedgerError("not_found", f"effect_record: no receipt {key[:12]}")
            if r[5] != input_hash:
                raise LedgerError("idempotency_conflict", f"effect_record: receipt {key[:12]} was begun with another input")
            self._fence(cur, r[1], token, now, "effect_record")
            if r[6] == "completed":
                return _receipt(r)
            if (r[6], "completed") not in self.spec.receipt_transitions:
                raise LedgerError("invalid_transition", f"effect_record: receipt {key[:12]} is {r[6]} and cannot be completed")
            cur.execute("UPDATE effect SET state = 'completed', result = ?, updated_at = ? WHERE key = ?", (encode(result), now, key))
        return {**_receipt(r), "state": "completed", "result": decode(encode(result))}

    def effect_mark(self, *, key: str, state: str, now: float) -> dict[str, Any]:
        self._check("effect_mark", {"key": key, "state": state, "now": now})
        now = float(now)
        with self._tx as cur:
            r = cur.execute(_RECEIPT + " WHERE key = ?", (key,)).fetchone()
            if r is None:
                raise LedgerError("not_found", f"effect_mark: no receipt {key[:12]}")
            if state == "completed":
                raise LedgerError("invalid_argument", "effect_mark: completing a receipt needs its result; use effect_record")
            if (r[6], state) not in self.spec.receipt_transitions:
                raise LedgerError("invalid_transition", f"effect_mark: receipt {key[:12]} cannot go {r[6]} -> {state}")
            cur.execute("UPDATE effect SET state = ?, updated_at = ? WHERE key = ?", (state, now, key))
        return {**_receipt(r), "state": state}

    def effect_list(self, *, work_id: str) -> list[dict[str, Any]]:
        self._check("effect_list", {"work_id": work_id})
        if not self._read("SELECT 1 FROM work WHERE work_id = ?", (work_id,)):
            raise LedgerError("not_found", f"no work {work_id!r}")
        return [_receipt(r) for r in self._read(_RECEIPT + " WHERE work_id = ? ORDER BY seq", (work_id,))]

    # ------------------------------------------------------------------ inbox
    def inbox_deliver(self, *, recipient: str, message_id: str, sender: str, now: float, body: Any = None) -> dict[str, Any]:
        self._check("inbox_deliver", {"recipient": recipient, "message_id": message_id, "sender": sender,
                                      "body": body, "now": now})
        now = float(now)
        with self._tx as cur:
            if cur.execute("SELECT 1 FROM inbox WHERE recipient = ? AND message_id = ?", (recipient, message_id)).fetchone():
                return {"delivered": False}
            arrival = cur.execute("SELECT ifnull(max(arrival), 0) + 1 FROM inbox WHERE recipient = ?", (recipient,)).fetchone()[0]
            cur.execute("INSERT INTO inbox(recipient, message_id, sender, body, arrival, state, nacks, delivered_at, updated_at) "
                        "VALUES (?, ?, ?, ?, ?, 'pending', 0, ?, ?)", (recipient, message_id, sender, encode(body), arrival, now, now))
        return {"delivered": True}

    def inbox_drain(self, *, recipient: str, now: float, max: int | None = None) -> list[dict[str, Any]]:
        self._check("inbox_drain", {"recipient": recipient, "max": max, "now": now})
        now = float(now)
        limit = max or self.spec.inbox_drain_max
        with self._tx as cur:
            rows = cur.execute(_MSG + " WHERE recipient = ? AND state = 'pending' ORDER BY arrival LIMIT ?", (recipient, limit)).fetchall()
            cur.executemany("UPDATE inbox SET state = 'inflight', updated_at = ? WHERE recipient = ? AND message_id = ?",
                            [(now, recipient, r[0]) for r in rows])
        return [_msg(r) for r in rows]

    def _inbox_state(self, cur: sqlite3.Cursor, recipient: str, message_id: str) -> tuple[str, int]:
        r = cur.execute("SELECT state, nacks FROM inbox WHERE recipient = ? AND message_id = ?", (recipient, message_id)).fetchone()
        if r is None:
            raise LedgerError("not_found", f"no message {message_id!r} for {recipient!r}")
        return r[0], r[1]

    def inbox_ack(self, *, recipient: str, message_id: str, now: float) -> None:
        self._check("inbox_ack", {"recipient": recipient, "message_id": message_id, "now": now})
        now = float(now)
        with self._tx as cur:
            state, _ = self._inbox_state(cur, recipient, message_id)
            if state == "acked":
                return None
            if state != "inflight":
                raise LedgerError("invalid_transition", f"inbox_ack: {message_id!r} is {state}, not handed out")
            cur.execute("UPDATE inbox SET state = 'acked', updated_at = ? WHERE recipient = ? AND message_id = ?", (now, recipient, message_id))
        return None

    def inbox_nack(self, *, recipient: str, message_id: str, now: float, error: str | None = None) -> dict[str, Any]:
        self._check("inbox_nack", {"recipient": recipient, "message_id": message_id, "error": error, "now": now})
        now = float(now)
        with self._tx as cur:
            state, nacks = self._inbox_state(cur, recipient, message_id)
            if state != "inflight":
                raise LedgerError("invalid_transition", f"inbox_nack: {message_id!r} is {state}, not handed out")
            nacks += 1
            dead = nacks >= self.spec.inbox_max_nacks
            cur.execute("UPDATE inbox SET state = ?, nacks = ?, last_error = ?, updated_at = ? WHERE recipient = ? AND message_id = ?",
                        ("dead" if dead else "pending", nacks, error, now, recipient, message_id))
        return {"dead": dead, "nacks": nacks}

    def inbox_dead(self, *, recipient: str) -> list[dict[str, Any]]:
        self._check("inbox_dead", {"recipient": recipient})
        return [_msg(r) for r in self._read(
            "SELECT message_id, sender, body, nacks FROM inbox_dead_letter WHERE recipient = ? ORDER BY dead_at, message_id", (recipient,))]

    # ------------------------------------------------------------------ outbox
    def outbox_enqueue(self, *, key: str, destination: str, payload: Any, now: float, work_id: str | None = None) -> dict[str, Any]:
        self._check("outbox_enqueue", {"key": key, "destination": destination, "payload": payload,
                                       "work_id": work_id, "now": now})
        now = float(now)
        ph = self.spec.input_hash(payload)
        with self._tx as cur:
            if work_id is not None:
                self._get(cur, work_id)
            r = cur.execute(_OUT + " WHERE key = ?", (key,)).fetchone()
            if r is not None:
                if r[6] != ph:
                    raise LedgerError("idempotency_conflict", f"outbox_enqueue: key {key!r} was used with another payload")
                return {"message": _out(r), "created": False}
            seq = cur.execute("SELECT ifnull(max(seq), 0) + 1 FROM outbox").fetchone()[0]
            text = encode(payload)
            cur.execute("INSERT INTO outbox(key, seq, destination, payload, payload_hash, work_id, state, created_at) "
                        "VALUES (?, ?, ?, ?, ?, ?, 'pending', ?)", (key, seq, destination, text, ph, work_id, now))
        return {"message": {"key": key, "destination": destination, "payload": decode(text), "work_id": work_id,
                            "state": "pending", "provider_ref": None}, "created": True}

    def outbox_pending(self, *, max: int | None = None) -> list[dict[str, Any]]:
        self._check("outbox_pending", {"max": max})
        limit = max or self.spec.outbox_pending_max
        return [_out(r) for r in self._read(_OUT + " WHERE state = 'pending' ORDER BY seq LIMIT ?", (limit,))]

    def outbox_mark_sent(self, *, key: str, provider_ref: str, now: float) -> dict[str, Any]:
        self._check("outbox_mark_sent", {"key": key, "provider_ref": provider_ref, "now": now})
        now = float(now)
        with self._tx as cur:
            r = cur.execute(_OUT + " WHERE key = ?", (key,)).fetchone()
            if r is None:
                raise LedgerError("not_found", f"outbox_mark_sent: no message {key!r}")
            if r[4] == "sent":
                return _out(r)
            cur.execute("UPDATE outbox SET state = 'sent', provider_ref = ?, sent_at = ? WHERE key = ?", (provider_ref, now, key))
        return {**_out(r), "state": "sent", "provider_ref": provider_ref}

    # ------------------------------------------------------------------ append-only log
    def log_append(self, *, stream: str, expected_seq: int, kind: str, now: float, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        self._check("log_append", {"stream": stream, "expected_seq": expected_seq, "kind": kind,
                                   "payload": payload, "now": now})
        now = float(now)
        first = self.spec.first_seq
        with self._tx as cur:
            last = cur.execute("SELECT ifnull(max(seq), ?) FROM log_entry WHERE stream = ?", (first - 1, stream)).fetchone()[0]
            if expected_seq != last:
                raise LedgerError("concurrent_append", f"log_append: stream {stream!r} is at seq {last}, not {expected_seq}")
            cur.execute("INSERT INTO log_entry(stream, seq, kind, payload, at) VALUES (?, ?, ?, ?, ?)",
                        (stream, last + 1, kind, encode(payload or {}), now))
        return {"seq": last + 1}

    def log_read(self, *, stream: str, from_seq: int | None = None) -> list[dict[str, Any]]:
        self._check("log_read", {"stream": stream, "from_seq": from_seq})
        start = self.spec.first_seq if from_seq is None else from_seq
        return [{"stream": r[0], "seq": r[1], "kind": r[2], "payload": decode(r[3]), "at": r[4]}
                for r in self._read("SELECT stream, seq, kind, payload, at FROM log_entry WHERE stream = ? AND seq >= ? "
                                    "ORDER BY seq", (stream, start))]
