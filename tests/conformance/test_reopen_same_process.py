"""A ledger opened again by the process that holds it (docs/protocol.md, ``reset``): a reset
naming a ``dir`` that holds a ledger sees everything committed there, "whichever process committed
it and whether the reset comes to a new process or to this one".

The clause tests ``core.list.complete[after-reopen-same-process]`` and ``[after-reopen-new-process]``
leave items in every status nothing moves by itself, open the ledger again and read every record
back.  A ledger that wipes its directory when the same process is reset a second time with it
fails the first (and only the first); the reference and the independent ledgers pass both; an
adapter that cannot open a directory twice in one process does not offer it (never a failure);
one without durable state is not asked.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ledgercheck.conformance.clauses import all_cases
from ledgercheck.conformance.harness import ClauseFailure, Harness, NotApplicable, NotOffered, run_harness
from ledgercheck.conformance.trace import dump_trace, load_trace, run_replay
from ledgercheck.transport.client import connect

ROOT = Path(__file__).resolve().parents[2]
WIPES = "python:ledgercheck.fixtures.testkit.broken:WipesOnSameProcessReopen"
SAME, NEW = "core.list.complete[after-reopen-same-process]", "core.list.complete[after-reopen-new-process]"


def _run(spec, address: str, name: str, trace: Path | None = None) -> str | Exception:
    """Run one clause case as the plugin does: "pass", or the exception it ended with."""
    case = next(c for c in all_cases(spec) if c.name == name)
    client = connect(address, spec)
    h = run_harness(client, spec, client.profiles)
    try:
        h.start_case(case.clause)
        case.fn(h)
        return "pass"
    except (ClauseFailure, NotApplicable, NotOffered) as exc:
        if trace is not None and isinstance(exc, ClauseFailure):
            dump_trace(h, trace, exc.violations, address, case=name, judged_by="check")
        return exc
    finally:
        h.leave_directory()
        client.close()


@pytest.mark.parametrize("address", ["reference", "python:ledgercheck.fixtures.testkit.independent:SharedMemLedger",
                                     f"exec:node {ROOT / 'fixtures/libraries/node/full-ledger.js'}",
                                     f"exec:python {ROOT / 'fixtures/testkit/eventsourced/ledger.py'}"])
def test_correct_ledgers_keep_everything_across_both_reopens(spec, address):
    assert _run(spec, address, SAME) == "pass"
    assert _run(spec, address, NEW) == "pass"


def test_a_ledger_that_wipes_on_a_second_reset_in_the_same_process_fails_list_complete(spec, tmp_path):
    got = _run(spec, WIPES, SAME, trace=tmp_path / "t.json")
    assert isinstance(got, ClauseFailure), got
    assert [v.clause for v in got.violations] == ["core.list.complete"]
    msg = got.violations[0].message
    assert "same adapter process" in msg and "5 of 5 records are gone" in msg and "(running)" in msg, msg
    # a new process opening the directory sees everything: the bug is the same process's alone
    assert _run(spec, WIPES, NEW) == "pass"
    # the failure's trace carries the harness's own step and replays to the same clause, as the
    # case and as bare steps; against the reference it reproduces nothing
    doc = load_trace(tmp_path / "t.json")
    assert [s["op"] for s in doc["steps"]][-1] == "reopen_here"
    for address, want in ((WIPES, ["core.list.complete"]), ("reference", [])):
        for steps_only in (False, True):
            client = connect(address, spec)
            try:
                done = run_replay(Harness(client, spec, doc["profiles"]), doc, "t.json", steps_only=steps_only)
            finally:
                client.close()
            assert done.found == want and done.reproduced == bool(want), (address, steps_only, done.found)


def test_an_adapter_that_cannot_open_a_dir_twice_in_one_process_does_not_offer_it(spec):
    got = _run(spec, "python:adapters_reopen:NoSecondOpen", SAME)
    assert isinstance(got, NotOffered) and got.what == "reset naming the open dir again in the same process", got
    assert "unsupported" in got.message
    assert _run(spec, "python:adapters_reopen:NoSecondOpen", NEW) == "pass"


def test_an_adapter_without_durable_state_is_not_asked(spec):
    for name in (SAME, NEW):
        got = _run(spec, "python:ledgercheck.fixtures.testkit.independent:MemLedger", name)
        assert isinstance(got, NotApplicable) and "durable" in str(got), got


def test_in_a_run_the_unoffered_reopen_is_not_offered_not_failed(tmp_path, suite):
    from ledgercheck.reports.results import load_results

    out = tmp_path / "results.json"
    proc = suite(tmp_path, "--ledger-adapter", "python:adapters_reopen:NoSecondOpen", "--ledger-profile", "core",
                 "--ledger-clauses-only", "--ledger-results", str(out), "-k", "after-reopen")
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = load_results(str(out))
    tests = {t["nodeid"].rsplit("::", 1)[-1]: t for t in doc["tests"]}
    assert tests[SAME]["outcome"] == "not_offered", tests[SAME]
    assert tests[SAME]["not_offered"] == ["reset naming the open dir again in the same process"]
    assert tests[NEW]["outcome"] == "passed"
    clause = next(c for c in doc["clauses"] if c["id"] == "core.list.complete")
    assert clause["outcome"] == "not_offered" and clause["failed"] == 0, clause
