"""The ask profile's operation: the outcome of asking an item for its answer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Accept, Expectation, ModelBase, Refuse, Violation, _Bad, same_json


class AskOps(ModelBase):
    PROFILE = "ask"

    def ask_clause(self, status: str) -> tuple[str, str]:
        """The outcome the contract gives a target in ``status``, and the clause about it."""
        outcome = self.spec.ask_outcomes.get(status, self.spec.ask_unfinished)
        return outcome, f"ask.{outcome}"

    def _op_ask_outcome(self, a: dict[str, Any]) -> Expectation:
        wid = a["work_id"]
        if wid not in self.items:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no work {wid!r}")
        it = self.items[wid]
        want, clause = self.ask_clause(it["status"])
        replied = want == self.spec.ask_outcomes.get("done")

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, Mapping):
                raise _Bad(clause, f"expected {{outcome, result}}, got {res!r:.80}")
            got = res.get("outcome")
            if got != want:
                return [Violation(clause, f"{wid} is {it['status']}: the outcome is {want!r}, not {got!r}")]
            if replied and not same_json(res.get("result"), it["result"]):
                return [Violation(clause, f"{wid} replied with {res.get('result')!r}, its result is {it['result']!r}")]
            return []

        return Accept(h, clause, f"{wid} is {it['status']}")
