"""Crash points: the worker's own points, how they line up with the contract, and what a kill
at any moment of the worker's protocol leaves behind.

The worker handles one step of an item like this (``worker.py``)::

    claim/resume -> [after_claim]
      per effect step:  renew -> [during_renew] -> effect_begin -> [after_intent_before_submit]
                        -> submit to the provider -> [after_submit_before_record] -> effect_record
      per wait step:    set_waiting -> [after_waiting_set]   (the item is left until resumed)
    -> [after_record_before_close_out] -> close_out(done)

At every moment the worker knows the *stage* of the step in hand.  A stage fixes what the
effect journal must hold for that step (none, pending or completed), whether the worker holds
the lease, and which of the contract's crash points describes a kill there (the contract names,
for each point, the stage it stands for: ``stage``).  A kill at one of
the adapter's own points (inside an operation) leaves either the stage before the operation or
the stage after it; both are legitimate, and the checker accepts whichever the ledger shows.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledgercheck.spec import Spec, default_spec
from ledgercheck.spec.rules import success_status

DONE = success_status(default_spec())  # the terminal status the worker closes every item out with (``success``)
QUARANTINE = "quarantine"  # the recovery decision that parks an item for a person


class ChaosError(Exception):
    """A chaos run cannot proceed (bad input, unusable adapter); the message is one line."""


@dataclass(frozen=True)
class Stage:
    name: str
    journal: str | None  # what the journal holds for the step in hand
    held: bool  # the worker holds the lease
    killable: bool  # a kill here is one of the contract's crash points (its ``stage``)
    submitted: bool = False


STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage("unclaimed", "none", False, False),
    Stage("acquired", "none", True, True),
    Stage("renewed", "none", True, True),
    Stage("begun", "pending", True, True),
    Stage("submitted", "pending", True, True, submitted=True),
    Stage("recorded", "completed", True, True),
    Stage("waiting", "none", False, True),
    Stage("closed", None, False, False),
)}

# The stage a completed operation leads to (operations not listed change nothing the checker sees).
OP_AFTER = {
    "claim": "acquired", "resume": "acquired", "renew": "renewed", "effect_begin": "begun",
    "effect_record": "recorded", "set_waiting": "waiting", "close_out": "closed",
}

FRESH_STAGE = "acquired"  # its point's allowance: a step that has not started yet
COMPLETED_STAGE = "recorded"  # its point's allowance: a step whose receipt is stored


def stage_point(spec: Spec, stage: str) -> str | None:
    """The contract's crash point for a kill at ``stage`` (the first, in contract order, whose
    ``stage`` it is: the validator holds every point of one stage to the same matrix entries)."""
    return next((p for p, cp in spec.crash_points.items() if cp.stage == stage), None)


def fresh_point(spec: Spec) -> str:
    return stage_point(spec, FRESH_STAGE) or ""


def completed_point(spec: Spec) -> str:
    return stage_point(spec, COMPLETED_STAGE) or ""


def check_contract(spec: Spec) -> list[str]:
    """Problems between the contract's crash points and the worker's protocol (empty if none)."""
    out = []
    for p, cp in spec.crash_points.items():
        if cp.stage is None:
            continue  # a point the worker has no place for (unknown_points)
        st = STAGES.get(cp.stage)
        if st is None or not st.killable:
            out.append(f"crash point {p!r} stands for stage {cp.stage!r}, which is not a stage of the worker's protocol "
                       f"where a kill is a crash point ({', '.join(n for n, s in STAGES.items() if s.killable)})")
            continue
        if cp.journal != st.journal:
            out.append(f"crash point {p!r}: the contract says the journal holds {cp.journal}, "
                       f"the worker's protocol leaves {st.journal} at stage {st.name!r}")
        if cp.waiting != (st.name == "waiting"):
            out.append(f"crash point {p!r}: waiting flag differs from the worker's protocol")
        first = stage_point(spec, cp.stage)
        if first != p:
            for cls_, row in spec.matrix.items():
                if p in row and first in row and row[p] != row[first]:
                    out.append(f"matrix row {cls_!r}: crash points {first!r} and {p!r} stand for one stage of the worker "
                               f"({cp.stage!r}), so the checker cannot tell them apart, but their entries differ")
    for name, st in STAGES.items():
        if st.killable and stage_point(spec, name) is None:
            out.append(f"the contract has no crash point for the worker's stage {name!r}, which the worker implements")
    if DONE not in spec.statuses or not spec.terminal(DONE):
        out.append(f"the contract has no terminal status {DONE!r} to close work out with")
    if QUARANTINE not in spec.decisions:
        out.append(f"the contract has no recovery decision {QUARANTINE!r}")
    for cls_, row in spec.matrix.items():
        for p in worker_points(spec):
            if p not in row:
                out.append(f"matrix row {cls_!r} has no entry for {p!r}")
    return out


def worker_points(spec: Spec) -> list[str]:
    """The contract's crash points the worker can stop at (those naming one of its stages), in
    contract order."""
    return [p for p, cp in spec.crash_points.items() if cp.stage in STAGES and STAGES[cp.stage].killable]


def unknown_points(spec: Spec) -> list[str]:
    """Contract crash points the worker's protocol has no place for."""
    known = set(worker_points(spec))
    return [p for p in spec.crash_points if p not in known]


def leased_status(spec: Spec) -> str:
    return next(n for n, st in spec.statuses.items() if st.leased)
