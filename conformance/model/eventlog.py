"""The eventlog profile's operations: appending to and reading a stream."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from .base import Accept, Expectation, ModelBase, Refuse, Violation, _Bad, same_json


class EventlogOps(ModelBase):
    PROFILE = "eventlog"

    def _op_log_append(self, a: dict[str, Any]) -> Expectation:
        stream = self.logs.setdefault(a["stream"], [])
        last = self.spec.first_seq - 1 + len(stream)
        if a["expected_seq"] != last:
            return Refuse(frozenset({"concurrent_append"}), "eventlog.append.conflict", f"stream {a['stream']!r} is at seq {last}, not {a['expected_seq']}")

        def h(res: Any) -> list[Violation]:
            seq = last + 1
            stream.append({"stream": a["stream"], "seq": seq, "kind": a["kind"], "payload": copy.deepcopy(a.get("payload") or {})})
            got = res.get("seq") if isinstance(res, Mapping) else None
            return [] if got == seq else [Violation("eventlog.append.expected_seq", f"append after seq {last} stored at {got!r}, expected {seq}")]

        return Accept(h, "eventlog.append.expected_seq", f"expected_seq {last} matches")

    def _op_log_read(self, a: dict[str, Any]) -> Expectation:
        start = a.get("from_seq") if a.get("from_seq") is not None else self.spec.first_seq
        want = [e for e in self.logs.get(a["stream"], []) if e["seq"] >= start]

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, list):
                raise _Bad("eventlog.read", f"expected a list of entries, got {res!r:.80}")
            got = [(e.get("seq"), e.get("kind"), e.get("payload") or {}) if isinstance(e, Mapping) else None for e in res]
            exp = [(e["seq"], e["kind"], e["payload"]) for e in want]
            same = len(got) == len(exp) and all(g is not None and g[:2] == x[:2] and same_json(g[2], x[2]) for g, x in zip(got, exp, strict=True))
            if not same:
                return [Violation("eventlog.read", f"read({a['stream']!r}, from {start}) gave {[g[0] if g else None for g in got]}, expected seqs {[e[0] for e in exp]}")]
            other = [e.get("stream") for e in res if e.get("stream") != a["stream"]]
            return [Violation("eventlog.read", f"read({a['stream']!r}) gave entries naming the stream {other[0]!r}")] if other else []

        return Accept(h, "eventlog.read", "reading always works")
