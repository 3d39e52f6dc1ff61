"""Every replay the harness prints reproduces the failure it is printed for.

For every deliberately broken ledger of the catalogues (fixtures/testkit/broken*.py), the clause tests of
the clause it breaks are run as the plugin runs them, each failing test's trace is saved as the
plugin saves it, and the trace is replayed on a new connection:

* as ``ledgercheck replay`` does by default (the clause test the trace names: its program and its
  own checks), the replay fails the clause the failure is listed under;
* as bare steps judged by the model (``--steps``), so too, for every failure the model found
  (a failure only the test's own check of the answers saw needs that check);
* the reopen tests' traces carry a ``reopen`` step, and their bare steps fail too (before
  reopening was a step, they replayed as "all steps conform" against the very ledger that
  failed);
* the same traces replayed against the reference ledger reproduce nothing (no false alarm).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Collection
from pathlib import Path

import pytest
from ledgercheck.conformance.clauses import NoCheck, all_cases
from ledgercheck.conformance.harness import ClauseFailure, DriveBlocked, Harness, NotApplicable, NotOffered
from ledgercheck.conformance.trace import TraceError, dump_trace, load_trace, run_replay
from ledgercheck.spec import Spec
from ledgercheck.transport.client import connect

CATALOGUES = ["broken", "broken_inputs", "broken_journal", "broken_paths", "broken_recovery", "broken_timing", "broken_edges", "broken_trees"]
# the reopen tests: ledgers that keep part of their state in process memory
IN_MEMORY = {"DeadLettersInMemory", "OutboxSentInMemory", "RetryPolicyInMemory"}


def _failing_traces(spec: Spec, module: str, out: Path, only: Collection[str] | None = None) -> list[tuple[str, str, Path]]:
    """(address, case, trace file) for every failing clause test of each ledger's broken clause
    (of the ledgers named in ``only``, when given)."""
    m = importlib.import_module(f"ledgercheck.fixtures.testkit.{module}")
    found = []
    cases = list(all_cases(spec))  # listed once: every ledger's broken clause is looked up in it
    for cls in m.ALL:
        if only is not None and cls.__name__ not in only:
            continue
        address = f"python:ledgercheck.fixtures.testkit.{module}:{cls.__name__}"
        client = connect(address, spec)
        h = Harness(client, spec, client.profiles)
        try:
            for case in cases:
                if case.clause != cls.BREAKS:
                    continue
                try:
                    h.start_case(case.clause)
                    case.fn(h)
                except ClauseFailure as exc:
                    path = out / f"{cls.__name__}-{case.name}.json"
                    dump_trace(h, path, exc.violations, address, case=case.name,
                               judged_by="check" if getattr(exc, "by_check", False) else "model")
                    found.append((address, case.name, path))
                except (NotApplicable, NotOffered, NoCheck, DriveBlocked):
                    pass
        finally:
            h.leave_directory()
            client.close()
    return found


def _replay(address: str, path: Path, spec: Spec, steps_only: bool):
    doc = load_trace(path)
    client = connect(address, spec)
    try:
        return run_replay(Harness(client, spec, doc["profiles"]), doc, str(path), steps_only=steps_only)
    finally:
        client.close()


# two catalogues in the default run (the oldest and a constructed one); all of them in the long tier
DEFAULT_CATALOGUES = {"broken", "broken_trees"}


@pytest.mark.parametrize("module", [m if m in DEFAULT_CATALOGUES else pytest.param(m, marks=pytest.mark.thorough)
                                    for m in CATALOGUES])
def test_every_failing_trace_of_a_broken_ledger_replays_to_its_clause(module: str, spec: Spec, tmp_path: Path) -> None:
    traces = _failing_traces(spec, module, tmp_path)
    assert traces, f"no clause test failed for the ledgers of {module}"
    problems = []
    for address, case, path in traces:
        doc = load_trace(path)
        listed = case.split("[")[0]
        assert doc["focus"] == listed and doc["case"] == case
        done = _replay(address, path, spec, steps_only=False)
        if not done.reproduced or listed not in done.found or done.listed != listed or done.mode != "case":
            problems.append(f"{case} on {address}: replay {done.mode} found {done.found}")
        if doc["judged_by"] == "model":
            bare = _replay(address, path, spec, steps_only=True)
            if not bare.reproduced or listed not in bare.found or bare.listed != listed:
                problems.append(f"{case} on {address}: bare steps found {bare.found}")
    assert not problems, "\n".join(problems)


def test_reopen_is_a_step_and_its_bare_steps_reproduce(spec: Spec, tmp_path: Path) -> None:
    traces = _failing_traces(spec, "broken_journal", tmp_path, only=IN_MEMORY)
    assert {t[0].rsplit(":", 1)[1] for t in traces} == IN_MEMORY  # each fails its reopen test
    for address, case, path in traces:
        doc = load_trace(path)
        assert [s["op"] for s in doc["steps"]].count("reopen") >= 1, case
        bare = _replay(address, path, spec, steps_only=True)
        if doc["judged_by"] == "model":
            assert bare.reproduced, f"{case}: {bare.found}"
        # the reference, which keeps everything in its directory, reproduces none of them
        for steps_only in (False, True):
            clean = _replay("reference", path, spec, steps_only=steps_only)
            assert clean.violations == [], f"{case} on the reference: {clean.found}"


def test_the_replay_command_reproduces_a_reopen_failure_and_not_on_the_reference(cli, spec: Spec, tmp_path: Path) -> None:
    address = "python:ledgercheck.fixtures.testkit.broken_journal:OutboxSentInMemory"
    ((_, case, path),) = _failing_traces(spec, "broken_journal", tmp_path, only={address.rsplit(":", 1)[1]})
    for steps in ([], ["--steps"]):
        proc = cli("replay", str(path), "--adapter", address, "--json", *steps)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        out = json.loads(proc.stdout)
        assert out["reproduced"] and out["listed"] == "outbox.mark_sent" and out["reproduced_clauses"] == ["outbox.mark_sent"], out
        assert out["mode"] == ("steps" if steps else "case") and out["inexact"] is None
    proc = cli("replay", str(path), "--adapter", "reference")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "did not reproduce outbox.mark_sent" in proc.stdout


def test_a_handouts_token_is_named_in_the_trace_and_its_bare_steps_reproduce(spec: Spec, tmp_path: Path) -> None:
    """A run's hand-out token is the ledger's choice, like a work item's lease token: the trace
    names it by the order the answers handed it out (``{"$handout": k}``), so the bare steps
    replayed on a new ledger send the token that ledger handed out, and reproduce the failure on
    the broken ledger and nothing on the reference.  (Before, the literal token was sent and the
    new ledger refused it with stale_lease.)"""
    traces = _failing_traces(spec, "broken_edges", tmp_path, only={"RenewAnswersFirstTaker"})
    (address, case, path), = [t for t in traces if t[1].startswith("wakeups.lease")]
    doc = load_trace(path)
    tokens = [s["args"]["token"] for s in doc["steps"] if "token" in s["args"]]
    assert tokens and all(isinstance(t, dict) and set(t) == {"$handout"} for t in tokens), tokens
    bare = _replay(address, path, spec, steps_only=True)
    assert bare.reproduced and bare.found == ["wakeups.lease"], bare.found
    clean = _replay("reference", path, spec, steps_only=True)
    assert clean.violations == [], clean.found
    # a reference to a hand-out the replay's answers never gave is one clear error naming the step
    doc["steps"] = [s for s in doc["steps"] if s["op"] != "wake_take"]
    short = tmp_path / "short.json"
    short.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(TraceError, match=r"refers to hand-out token \d+, but the replay's answers handed out 0"):
        _replay(address, short, spec, steps_only=True)


def test_a_reopen_step_with_arguments_or_a_bad_header_is_refused_in_one_line(cli, tmp_path: Path) -> None:
    base = {"format": "ledgercheck-trace", "version": 3, "adapter": "reference", "profiles": ["core"], "violations": [],
            "seed": 0, "epoch": 1e6, "steps": [{"op": "reopen", "args": {}}]}
    bad = [({"steps": [{"op": "reopen", "args": {"dir": "/etc"}}]}, "step 1: reopen takes no arguments"),
           ({"focus": 7}, "focus must be a string or null"),
           ({"judged_by": "oracle"}, "judged_by must be one of model, check"),
           ({"wall_scale": 0}, "wall_scale must be a number in (0, 100]"),
           ({"steps": [{"op": "wake_renew", "args": {"run_id": "r", "token": {"$handout": -1}, "now": {"$t": 0}}}]},
            "step 1: argument 'token': $handout must be the index of a hand-out's token")]
    for change, words in bad:
        path = tmp_path / "t.json"
        path.write_text(json.dumps({**base, **change}), encoding="utf-8")
        proc = cli("replay", str(path), "--adapter", "reference")
        assert proc.returncode == 2 and words in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    # a reopen step alone, on the reference: a ledger in a directory, opened again, nothing to find
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(base), encoding="utf-8")
    proc = cli("replay", str(path), "--adapter", "reference", "--steps")
    assert proc.returncode == 0 and "all 1 steps conform" in proc.stdout, proc.stdout + proc.stderr


def test_a_malformed_work_id_reaches_a_next_only_queue_after_the_harness_learned_it(spec: Spec) -> None:
    """Once a queue answered claim-by-id unsupported, the harness claims "the next" instead, but
    never for a malformed ``work_id``: core.invalid_argument[claim.work_id] must send it, or a
    correct queue fails for an argument it never received (and the replay, on a fresh harness,
    does not reproduce that failure: how it was found)."""
    client = connect("python:adapters:ClaimsOnlyNext", spec)
    h = Harness(client, spec, ["core"])
    (case,) = [c for c in all_cases(spec) if c.name == "core.invalid_argument[claim.work_id]"]
    try:
        h.fresh()
        wid = h.create()
        h.do("claim", owner="w", work_id=wid)  # unsupported: from now on the harness claims the next one
        assert h.claim_by_id is False and h.last_claim_fallback
        h.fresh()
        h.focus = case.clause
        case.fn(h)  # passes: the queue refuses work_id=17 with invalid_argument
        assert [s["args"].get("work_id") for s in h.trace if s["op"] == "claim"] == [17, True, ["s"]]
    finally:
        client.close()


def test_list_order_is_judged_on_a_next_only_queue(spec: Spec) -> None:
    """core.list.order moves some records before it lists them; on a queue that hands out only its
    next item the claim takes another record than the one asked for, and the listing's order is
    judged all the same (the case was skipped as "not claimed", leaving the clause undecided)."""
    client = connect("python:adapters:ClaimsOnlyNext", spec)
    h = Harness(client, spec, ["core"])
    (case,) = [c for c in all_cases(spec) if c.name == "core.list.order[creation-order]"]
    try:
        h.fresh()
        h.focus = case.clause
        case.fn(h)  # passes: ClaimsOnlyNext lists in creation order
        assert h.claim_by_id is False  # the claim did fall back to "the next"
        assert [s["op"] for s in h.trace].count("list") >= 2
    finally:
        client.close()
