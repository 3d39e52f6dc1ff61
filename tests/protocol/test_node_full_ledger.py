"""A second, independent ledger in another language: fixtures/libraries/node/full-ledger.js.

It was written from the docs and the contract alone (never from the reference or the model),
claims every profile of the contract, keeps its state in a file across processes, and can switch on
readings of the contract that differ from the reference's where the contract leaves the
choice open (NODELEDGER_CHOICES).  The suite must certify it with every such choice switched
on: a harness that demanded the reference's choice would be raising a false alarm.

The crash-window exploration is left out here (its own crash points are passed on every
write, so exploring them takes minutes); certified with it by hand: ``ledgercheck certify
--adapter "exec:node fixtures/libraries/node/full-ledger.js"``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

LEDGER = Path(__file__).resolve().parents[2] / "fixtures" / "libraries" / "node" / "full-ledger.js"
CHOICES = ["promote_keeps_next_retry_at", "cancel_keeps_next_retry_at", "done_clears_error_class", "fail_stores_result",
           "outbox_destination_is_input", "quarantine_marks_unknown", "wait_timeout_keeps_wait", "lane_late_holder",
           "wake_timer_shows_due"]


def test_every_documented_choice_exists():
    text = LEDGER.read_text(encoding="utf-8")
    for choice in CHOICES:
        assert f"//   {choice}" in text and f"CHOICES.has('{choice}')" in text, choice


@pytest.mark.budgeted
@pytest.mark.thorough  # 18-20 s: the independent and event-sourced ledgers' certifications stay in the default run
def test_certified_with_every_open_choice_taken(certified_without_chaos):
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed (.ci/run installs it)")
    certified_without_chaos(f"exec:{node} {LEDGER}", 2, dict(os.environ, NODELEDGER_CHOICES=",".join(CHOICES)))
