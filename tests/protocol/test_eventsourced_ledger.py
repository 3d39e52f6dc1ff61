"""A third independent ledger: fixtures/testkit/eventsourced/ledger.py, an event-sourced Python ledger.

It was written from the docs and the contract alone (never from the reference, the model or
the other independent ledgers).  Its only durable record of a work item is an append-only
SQLite event table; snapshots are folds of the events, caught up by every process that shares
the database.  It claims the whole contract (profile set full) and makes, wherever the contract leaves a choice
open, a choice other than the obvious one (listed in its module docstring); the suite must
certify it.

The crash-window exploration is left out here (it takes minutes: the ledger's own crash points
are passed on every write); without it only the three clauses that crash windows decide stay
undecided, so the recovery profile is reported as not certified and every other profile as
certified.  Certified with the exploration by hand:
``ledgercheck certify --adapter "exec:python fixtures/testkit/eventsourced/ledger.py" --seed 1``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

LEDGER = Path(__file__).resolve().parents[2] / "fixtures" / "testkit" / "eventsourced" / "ledger.py"


@pytest.mark.budgeted
def test_certified_from_the_docs_alone(certified_without_chaos):
    env = dict(os.environ)
    env.pop("ESLEDGER_CHOICES", None)
    certified_without_chaos(f"exec:{sys.executable} {LEDGER}", 3, env)
