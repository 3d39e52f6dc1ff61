"""Clause tests of the ask profile (spec/contract/clauses/ask.yaml)."""


from __future__ import annotations

from collections.abc import Iterable

from ledgercheck.spec import Spec

from ..harness import DriveBlocked, Harness, NotApplicable
from . import CaseFn, cases, check


# ------------------------------------------------------------------ ask
def _ask_case(outcome: str) -> CaseFn:
    def fn(h: Harness) -> None:
        h.need("ask_outcome")
        statuses = [s for s, o in h.spec.ask_outcomes.items() if o == outcome] if outcome != h.spec.ask_unfinished \
            else [s for s in h.spec.statuses if not h.spec.terminal(s)]
        asked = 0
        for i, status in enumerate(statuses):
            wid = h.create(source_id=f"asked-{i}")
            try:
                h.drive(wid, status)
            except (NotApplicable, DriveBlocked):
                continue  # a status the claimed profiles cannot reach
            asked += 1
            out = h.do("ask_outcome", work_id=wid)
            check(out.value.get("outcome") == outcome, f"ask.{outcome}", f"{status} target answered {out.value!r:.80}", h)
        if not asked:
            raise NotApplicable(f"no status with the outcome {outcome} is reachable with the claimed profiles")
        h.do("ask_outcome", work_id="no-such-work")
    return fn


@cases("ask.replied")
def _replied(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    yield "done-target", _ask_case("replied")


@cases("ask.timed_out")
def _timed_out(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    yield "unfinished-targets", _ask_case("timed_out")


@cases("ask.target_failed")
def _target_failed(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    yield "dead-targets", _ask_case("target_failed")


@cases("ask.target_cancelled")
def _target_cancelled(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    yield "cancelled-target", _ask_case("target_cancelled")


