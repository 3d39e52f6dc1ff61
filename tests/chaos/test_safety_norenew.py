"""A holder on a ledger without a renewal goes on past its lease (chaos/safety/campaign.py).

A worker past its lease's expiry by the clock renews before its effect and leaves the item if the
ledger refuses; a ledger that has no ``renew`` (it answers ``unsupported``) gives the worker no
way to learn that its lease lapsed, so the worker runs its effect and closes out, as a job queue's
worker does (Celery with a visibility timeout, pg-boss and graphile-worker past a job's expiry).
The displaced holder's late close-out then shows what the ledger does with it: refused by a queue
that checks the token (no anomaly), accepted by one that does not (``stale_write_accepted``).
Before, the holder left the item at the refused renewal and neither ledger was told apart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ledgercheck.chaos.safety.campaign import run_campaign
from ledgercheck.chaos.safety.history import load_history

NR = "python:norenew_ledgers"
SETTINGS: dict[str, Any] = {"workers": 4, "items": 40, "seed": 1, "duration": 2.0}


def _why(r: Any) -> tuple[Any, ...]:
    return ([a["explanation"] for a in r.anomalies or []][:4], r.nemesis, r.takeovers, r.final, r.notes[:6], r.missing)


def _late(r: Any) -> tuple[list[Any], list[Any]]:
    """The effects a displaced holder ran, and the close-outs it sent with its old token, after the
    takeover of its item."""
    h = load_history(r.history)
    takeovers = [x for x in h.records if x.type == "nemesis" and x.fault == "takeover"]

    def late(x: Any, wid: Any) -> bool:
        return any(x.process == t.process and wid == t.point["work_id"] and x.t > t.t for t in takeovers)
    effects = [x for x in h.records if x.type == "effect" and late(x, x.work_id)]
    closes = [x for x in h.records if x.type == "invoke" and x.op == "close_out" and late(x, x.args.get("work_id"))]
    return effects, closes


def test_a_displaced_holder_without_renew_closes_out_and_an_unfenced_queue_accepts_it(tmp_path: Path,
                                                                                       scratch: str | None) -> None:
    r = run_campaign(f"{NR}:SmallQueueNoRenewNoFence", faults="pause", out_dir=str(tmp_path), tmp_root=scratch,
                     **SETTINGS)
    effects, closes = _late(r)
    # a holder paused before its effect, past its lease when let go, found no renew: it went on
    # (before, it left the item at the unsupported renewal: no late effect, only holders paused
    # after their effect wrote late)
    assert effects and closes, _why(r)
    found = {a["class"] for a in r.anomalies or []}
    assert "stale_write_accepted" in found and r.verdict == "fail", _why(r)
    # at-least-once: the effect run again by the holder that went on is permitted, never a finding
    assert found <= {"stale_write_accepted", "split_ownership"}, _why(r)


@pytest.mark.thorough
def test_a_displaced_holder_without_renew_is_refused_by_a_queue_that_checks_the_token(tmp_path: Path,
                                                                                     scratch: str | None) -> None:
    r = run_campaign(f"{NR}:SmallQueueNoRenew", faults="pause", out_dir=str(tmp_path), tmp_root=scratch, **SETTINGS)
    assert r.anomalies == [], _why(r)
    effects, late = _late(r)
    assert effects and late, _why(r)
    h = load_history(r.history)
    refused = {(x.process, x.id) for x in h.records if x.type == "complete" and x.op == "close_out"
               and x.outcome == "refused"}
    assert any((x.process, x.id) in refused for x in late), _why(r)
