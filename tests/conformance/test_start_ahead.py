"""Adapter processes started ahead for the reopen tests (conformance/harness.py, ``start_ahead``).

A reopen test over the wire needs two new adapter processes: the one its directory is opened by,
then the one that opens it again.  The session's harness keeps them started on a thread of its own
while it works on, so a test takes a process that has only answered its ``hello`` instead of
waiting for one to start.  What a reopen test can catch must not change: the process a test takes
is new, the one it replaces has ended before the ledger is opened again, a ledger that forgets
across processes still fails, and the processes left unused end with the session.
"""

from __future__ import annotations

import sys
import tempfile

import pytest
from ledgercheck.conformance.clauses import all_cases
from ledgercheck.conformance.harness import ClauseFailure, run_harness
from ledgercheck.services import reaper
from ledgercheck.transport import costs
from ledgercheck.transport.client import connect

SERVE = f"exec:{sys.executable} -m ledgercheck serve"
REFERENCE = f"{SERVE} reference"
FORGETS = f"{SERVE} python:ledgercheck.fixtures.testkit.broken_journal:DeadLettersInMemory"


def _harness(spec, address: str):
    client = connect(address, spec)
    h = run_harness(client, spec, client.profiles)
    h.start_ahead = 2
    return client, h


def test_a_reopen_takes_new_processes_started_ahead_and_ends_the_old_one(spec):
    client, h = _harness(spec, REFERENCE)
    ahead = []
    try:
        before = costs.snapshot()
        with tempfile.TemporaryDirectory() as tmp:
            h.fresh(directory=tmp)
            first = h.client.pid
            assert first not in (None, client.pid)
            for a in h._ahead:
                a._thread.join()  # (ready: started and greeted)
            ahead = [a.client.pid for a in h._ahead]
            assert len(ahead) == 2 and first not in ahead and client.pid not in ahead
            out = h.raw("create", source_system="manual", source_id="s1", now=h.now())
            assert out.ok, out
            work_id = out.value["work"]["work_id"]
            h.reopen()
            # the reopened ledger is served by the first process started ahead; the one that
            # held the directory has ended, and what it committed is there
            assert h.client.pid == ahead[0] and reaper.gone(first)
            got = h.raw("get", work_id=work_id)
            assert got.ok and got.value["source_id"] == "s1", got
            h.leave_directory()
        spent = costs.since(before)
        # the test counts the processes it used (two), not those started ahead for the next one
        assert spent["starts"] == 2, spent
        for a in h._ahead:
            a._thread.join()
        left = [a.client.pid for a in h._ahead]
        assert len(left) == 2 and ahead[1] in left
    finally:
        h.leave_directory()
        h.close_ahead()
        client.close()
    assert all(reaper.gone(p) for p in ahead + left)
    assert not h._ahead


# the reference's pass is the long tier's: the test above reopens it through processes started ahead
@pytest.mark.parametrize("address, fails", [pytest.param(REFERENCE, False, id="reference", marks=pytest.mark.thorough),
                                            pytest.param(FORGETS, True, id="forgets")])
def test_a_ledger_that_forgets_across_processes_still_fails_its_reopen_test(spec, address, fails):
    case = next(c for c in all_cases(spec) if c.name == "inbox.dead_letter[survives-reopen]")
    client, h = _harness(spec, address)
    try:
        for _ in range(2):  # the second time, every process it takes was started ahead
            h.start_case(case.clause)
            try:
                case.fn(h)
                got = "pass"
            except ClauseFailure as exc:
                got = [v.clause for v in exc.violations]
            finally:
                h.leave_directory()
            assert got == (["inbox.dead_letter"] if fails else "pass"), got
    finally:
        h.close_ahead()
        client.close()
