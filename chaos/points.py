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
the lease, and which of the contract's crash points describes a kill there.  A kill at one of
the adapter's own points (inside an operation) leaves either the stage before the operation or
the stage after it; both are legitimate, and the checker accepts whichever the ledger shows.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledgercheck.spec import Spec

DONE = "done"  # the terminal status the worker closes every item out with
QUARANTINE = "quarantine"  # the recovery decision that parks an item for a person


class ChaosError(Exception):
    """A chaos run cannot proceed (bad input, unusable adapter); the message is one line."""


@dataclass(frozen=True)
class Stage:
    name: str
    journal: str | None  # what the journal holds for the step in hand
    held: bool  # the worker holds the lease
    point: str | None  # the contract crash point a kill here corresponds to
    submitted: bool = False


STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage("unclaimed", "none", False, None),
    Stage("acquired", "none", True, "after_claim"),
    Stage("renewed", "none", True, "during_renew"),
    Stage("begun", "pending", True, "after_intent_before_submit"),
    Stage("submitted", "pending", True, "after_submit_before_record", submitted=True),
    Stage("recorded", "completed", True, "after_record_before_close_out"),
    Stage("waiting", "none", False, "after_waiting_set"),
    Stage("closed", None, False, None),
)}

# The stage a completed operation leads to (operations not listed change nothing the checker sees).
OP_AFTER = {
    "claim": "acquired", "resume": "acquired", "renew": "renewed", "effect_begin": "begun",
    "effect_record": "recorded", "set_waiting": "waiting", "close_out": "closed",
}

WORKER_POINTS: tuple[str, ...] = tuple(s.point for s in STAGES.values() if s.point)
FRESH_POINT = STAGES["acquired"].point  # allowance of a step that has not started yet
COMPLETED_POINT = STAGES["recorded"].point  # allowance of a step whose receipt is stored


def check_contract(spec: Spec) -> list[str]:
    """Problems between the contract's crash points and the worker's protocol (empty if none)."""
    out = []
    for st in STAGES.values():
        if st.point is None:
            continue
        cp = spec.crash_points.get(st.point)
        if cp is None:
            out.append(f"the contract has no crash point {st.point!r}, which the worker implements")
            continue
        if cp.journal != st.journal:
            out.append(f"crash point {st.point!r}: the contract says the journal holds {cp.journal}, "
                       f"the worker's protocol leaves {st.journal}")
        if cp.waiting != (st.name == "waiting"):
            out.append(f"crash point {st.point!r}: waiting flag differs from the worker's protocol")
    if DONE not in spec.statuses or not spec.terminal(DONE):
        out.append(f"the contract has no terminal status {DONE!r} to close work out with")
    if QUARANTINE not in spec.decisions:
        out.append(f"the contract has no recovery decision {QUARANTINE!r}")
    for cls_, row in spec.matrix.items():
        for p in WORKER_POINTS:
            if p in spec.crash_points and p not in row:
                out.append(f"matrix row {cls_!r} has no entry for {p!r}")
    return out


def worker_points(spec: Spec) -> list[str]:
    """The contract's crash points the worker can stop at, in contract order."""
    return [p for p in spec.crash_points if p in WORKER_POINTS]


def unknown_points(spec: Spec) -> list[str]:
    """Contract crash points the worker's protocol has no place for."""
    return [p for p in spec.crash_points if p not in WORKER_POINTS]


def leased_status(spec: Spec) -> str:
    return next(n for n, st in spec.statuses.items() if st.leased)
