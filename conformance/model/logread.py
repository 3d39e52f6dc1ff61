"""The logread profile's operations: a stream's last seq, and tailing it from a seq."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Accept, Expectation, ModelBase, Violation, _Bad, same_json


class LogreadOps(ModelBase):
    PROFILE = "logread"

    def _op_log_last_seq(self, a: dict[str, Any]) -> Expectation:
        want = self.spec.first_seq - 1 + len(self.logs.get(a["stream"], []))

        def h(res: Any) -> list[Violation]:
            got = res.get("seq") if isinstance(res, Mapping) else res
            return [] if got == want and type(got) is int else [Violation("logread.last_seq", f"last_seq({a['stream']!r}) is {got!r}, expected {want}")]

        return Accept(h, "logread.last_seq", "reading always works")

    def _op_log_tail(self, a: dict[str, Any]) -> Expectation:
        want = [e for e in self.logs.get(a["stream"], []) if e["seq"] >= a["from_seq"]][: a["max"]]

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, list) or not all(isinstance(e, Mapping) for e in res):
                raise _Bad("logread.tail", f"expected a list of entries, got {res!r:.80}")
            got = [(e.get("stream"), e.get("seq"), e.get("kind")) for e in res]
            exp = [(a["stream"], e["seq"], e["kind"]) for e in want]
            if got != exp or not all(same_json(g.get("payload") or {}, e["payload"]) for g, e in zip(res, want, strict=True)):
                return [Violation("logread.tail", f"tail({a['stream']!r}, from {a['from_seq']}, max {a['max']}) gave seqs "
                                  f"{[g[1] for g in got]}, expected {[e[1] for e in exp]}")]
            return []

        return Accept(h, "logread.tail", "reading always works")
