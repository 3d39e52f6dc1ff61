"""The aggregation rules: tests -> clause outcomes -> profile verdicts -> one verdict and exit code."""

from __future__ import annotations

import pytest
from ledgercheck.reports.results import ResultsError
from ledgercheck.reports.summary import verdict_line
from ledgercheck.reports.verdicts import NO_TEST, Evidence, clause_outcome


def ev(*outcomes: str, not_claimed: bool = False) -> list[Evidence]:
    return [Evidence(nodeid=f"t{i}", outcome=o, not_claimed=not_claimed, message=f"m{i}") for i, o in enumerate(outcomes)]


@pytest.mark.parametrize(("evidence", "requested", "claimed", "want"), [
    (ev("passed", "passed"), True, True, "pass"),
    (ev("passed", "error", "failed"), True, True, "error"),        # an error beats a failure
    (ev("passed", "failed"), True, True, "fail"),
    (ev("passed", "xpassed"), True, True, "fail"),                # a strict known bug that passed
    (ev("xfailed", "xfailed"), True, True, "xfail"),
    (ev("passed", "xfailed"), True, True, "xfail"),              # mixed pass + known bug
    (ev("passed", "skipped"), True, True, "pass"),               # a skip is no evidence, the pass is
    (ev("skipped", "skipped", not_claimed=True), True, False, "not_claimed"),
    (ev("skipped", not_claimed=True), True, True, "error"),       # claimed profile, tests say "not claimed"
    (ev("skipped", "skipped"), True, True, "error"),              # nothing actually ran
    ([], True, True, "error"),                                    # no test at all: never a pass
    ([], True, False, "not_claimed"),
    ([], False, True, "not_requested"),
    (ev("failed"), False, True, "fail"),                          # outcome still shown, profile not requested
])
def test_clause_outcome_rules(evidence: list[Evidence], requested: bool, claimed: bool, want: str) -> None:
    outcome, message = clause_outcome(evidence, profile="core", requested=requested, claimed=claimed)
    assert outcome == want
    assert (message is None) == (want in ("pass", "not_claimed", "not_requested"))


def test_all_claimed_pass_is_certified(factory) -> None:
    doc = factory.certified()
    assert doc["verdict"] == "CERTIFIED" and doc["exit_code"] == 0
    assert doc["certified_profiles"] == ["core", "trail", "cancel", "lease", "waiting", "retry", "idempotency", "eventlog", "recovery"]
    verd = doc["profiles"]["verdicts"]
    assert verd["inbox"]["verdict"] == verd["outbox"]["verdict"] == "not_claimed"
    assert verd["inbox"]["not_claimed"] == verd["inbox"]["clauses"] == 7
    assert verdict_line(doc) == "CERTIFIED for profiles core, trail, cancel, lease, waiting, retry, idempotency, eventlog, recovery"
    passed = [c for c in doc["clauses"] if c["profile"] in doc["certified_profiles"]]
    assert all(c["outcome"] == "pass" and c["passed"] == c["tests"] > 0 for c in passed)
    assert all(c["outcome"] == "not_claimed" for c in doc["clauses"] if c["profile"] not in doc["certified_profiles"])


def test_clause_counts_follow_tests(factory, spec) -> None:
    tests = factory.tests(known_bugs=(), failing=())
    doc = factory.build(tests=tests, windows=[], adapter=factory.adapter(known_bugs={}))
    by_id = {c["id"]: c for c in doc["clauses"]}
    for c in spec.clauses:
        mine = [t for t in tests if t["clause"] == c.id]
        assert by_id[c.id]["tests"] == len(mine)
        assert by_id[c.id]["passed"] == sum(t["outcome"] == "passed" for t in mine)
        assert by_id[c.id]["skipped"] == sum(t["outcome"] == "skipped" for t in mine)


def test_must_failure_is_not_certified(factory) -> None:
    doc = factory.build(tests=factory.tests(known_bugs=(), failing=("lease.fencing",)), windows=factory.windows(bad=()),
                        adapter=factory.adapter(known_bugs={}))
    assert doc["verdict"] == "NOT CERTIFIED" and doc["exit_code"] == 1 and doc["certified_profiles"] == []
    assert doc["profiles"]["verdicts"]["lease"]["verdict"] == "failed"
    assert doc["profiles"]["verdicts"]["core"]["verdict"] == "certified"
    assert verdict_line(doc) == "NOT CERTIFIED: accepts a stale holder's writes (lease.fencing)"
    fencing = next(c for c in doc["clauses"] if c["id"] == "lease.fencing")
    assert fencing["outcome"] == "fail" and "stale token" in fencing["message"]


def test_should_failure_only_warns(factory) -> None:
    doc = factory.build(tests=factory.tests(known_bugs=(), failing=("core.claim.order", "outbox.order")),
                        windows=factory.windows(bad=()), adapter=factory.adapter(known_bugs={}))
    assert doc["verdict"] == "CERTIFIED"
    assert doc["profiles"]["verdicts"]["core"] == {**doc["profiles"]["verdicts"]["core"], "verdict": "certified",
                                                   "failed": 1, "warnings": ["core.claim.order"]}
    assert verdict_line(doc).endswith("(1 SHOULD clause(s) not met)")


def test_known_bug_blocks_certification(factory) -> None:
    doc = factory.build(tests=factory.tests(failing=()), windows=factory.windows(bad=()))
    cap = next(c for c in doc["clauses"] if c["id"] == "retry.cap")
    assert cap["outcome"] == "xfail" and cap["message"].startswith("known bug: the backoff cap")
    assert doc["profiles"]["verdicts"]["retry"]["verdict"] == "failed"
    assert doc["verdict"] == "NOT CERTIFIED"
    assert verdict_line(doc) == "NOT CERTIFIED: waits longer than max_backoff between retries (retry.cap, known bug)"


def test_known_bug_that_passes_fails(factory) -> None:
    tests = factory.tests(failing=(), outcomes={"retry.cap": ["xpassed"]})
    doc = factory.build(tests=tests, windows=factory.windows(bad=()))
    cap = next(c for c in doc["clauses"] if c["id"] == "retry.cap")
    assert cap["outcome"] == "fail" and cap["xpassed"] == 1
    assert "known bug" in cap["message"]


def test_clause_without_test_is_an_error(factory) -> None:
    tests = [t for t in factory.tests(known_bugs=(), failing=()) if t["clause"] != "waiting.deadline"]
    doc = factory.build(tests=tests, windows=factory.windows(bad=()), adapter=factory.adapter(known_bugs={}))
    clause = next(c for c in doc["clauses"] if c["id"] == "waiting.deadline")
    assert clause["outcome"] == "error" and clause["message"] == NO_TEST and clause["tests"] == 0
    assert doc["profiles"]["verdicts"]["waiting"]["verdict"] == "error"
    assert doc["verdict"] == "ERROR" and doc["exit_code"] == 2
    assert verdict_line(doc) == ("ERROR: 1 clause(s) could not be decided in profiles waiting "
                                 "(first: waiting.deadline: no test produced a result)")


def test_test_error_beats_failures(factory) -> None:
    tests = factory.tests(outcomes={"core.not_found": ["passed", "error"]})
    doc = factory.build(tests=tests)  # also has failures and a known bug
    assert doc["verdict"] == "ERROR" and doc["exit_code"] == 2
    assert doc["profiles"]["verdicts"]["core"]["verdict"] == "error"


def test_not_requested_profiles_do_not_count(factory) -> None:
    doc = factory.build(requested=["core", "idempotency"])
    verd = doc["profiles"]["verdicts"]
    assert verd["lease"]["verdict"] == "not_requested"  # lease.fencing fails there, but nobody asked
    assert verd["recovery"]["verdict"] == "not_requested"
    assert doc["verdict"] == "CERTIFIED" and doc["certified_profiles"] == ["core", "idempotency"]


def test_nothing_requested_is_claimed(factory) -> None:
    doc = factory.build(requested=["inbox", "outbox"])
    assert doc["verdict"] == "NOT CERTIFIED" and doc["exit_code"] == 1
    assert verdict_line(doc) == "NOT CERTIFIED: the adapter claims none of the requested profiles (inbox, outbox)"


def test_failing_crash_window_fails_its_clauses(factory) -> None:
    doc = factory.build(tests=factory.tests(known_bugs=(), failing=()), adapter=factory.adapter(known_bugs={}))
    by_id = {c["id"]: c for c in doc["clauses"]}
    for cid in ("recovery.matrix", "recovery.effects_allowed"):
        assert by_id[cid]["outcome"] == "fail"
        assert by_id[cid]["failed"] == 1 and by_id[cid]["tests"] == by_id[cid]["passed"] + 1
        assert "applied the write twice" in by_id[cid]["message"]
    assert doc["verdict"] == "NOT CERTIFIED" and doc["profiles"]["verdicts"]["recovery"]["verdict"] == "failed"


def test_crash_windows_alone_can_pass_a_clause(factory) -> None:
    tests = [t for t in factory.tests(known_bugs=(), failing=()) if t["clause"] != "recovery.matrix"]
    doc = factory.build(tests=tests, windows=factory.windows(bad=()), adapter=factory.adapter(known_bugs={}))
    matrix = next(c for c in doc["clauses"] if c["id"] == "recovery.matrix")
    assert matrix["outcome"] == "pass" and matrix["tests"] == matrix["passed"] == 30
    windows = factory.windows(bad=())
    windows[0]["verdict"] = "error"
    windows[0]["message"] = "the worker could not be restarted"
    doc = factory.build(tests=tests, windows=windows, adapter=factory.adapter(known_bugs={}))
    assert doc["verdict"] == "ERROR"


def test_run_error_is_an_error(factory) -> None:
    doc = factory.build(tests=[], windows=[], run=factory.run(error="adapter exec:./bin/acme-ledger exited with 127"),
                        adapter={"address": "exec:./bin/acme-ledger"})
    assert doc["verdict"] == "ERROR" and doc["exit_code"] == 2
    assert doc["adapter"]["name"] is None and doc["adapter"]["transport"] == "wire"
    assert verdict_line(doc) == "ERROR: adapter exec:./bin/acme-ledger exited with 127"


def test_adapter_without_identity_cannot_be_certified(factory) -> None:
    doc = factory.build(tests=factory.tests(known_bugs=(), failing=()), windows=factory.windows(bad=()),
                        adapter=factory.adapter(known_bugs={}, version=None))
    assert all(v["verdict"] in ("certified", "not_claimed") for v in doc["profiles"]["verdicts"].values())
    assert doc["verdict"] == "ERROR" and doc["exit_code"] == 2
    assert verdict_line(doc).startswith("ERROR: the adapter did not identify itself")


def test_failure_without_clause_is_an_error(factory) -> None:
    tests = factory.tests(known_bugs=(), failing=())
    tests.append({"nodeid": "ledger::stateful[messaging]", "clause": None, "kind": "stateful", "outcome": "error",
                  "message": "harness failure: RuntimeError: boom", "workers": 0})
    doc = factory.build(tests=tests, windows=factory.windows(bad=()), adapter=factory.adapter(known_bugs={}),
                        run=factory.run(workers=0))
    assert doc["verdict"] == "ERROR"
    assert verdict_line(doc) == ("ERROR: 1 test(s) failed without naming a clause "
                                 "(first: ledger::stateful[messaging]: harness failure: RuntimeError: boom)")
    # a stateful run that names the clause it found violated fails that clause instead
    tests[-1] = {**tests[-1], "clause": "trail.types", "outcome": "failed"}
    doc = factory.build(tests=tests, windows=factory.windows(bad=()), adapter=factory.adapter(known_bugs={}))
    assert doc["verdict"] == "NOT CERTIFIED"
    assert next(c for c in doc["clauses"] if c["id"] == "trail.types")["outcome"] == "fail"


def test_timings(factory) -> None:
    doc = factory.build()
    t = doc["timings"]
    assert t["total_s"] == 252.5  # 09:26:53.000 -> 09:31:05.500
    assert t["by_kind"]["stateful"] == {"count": 1, "duration_s": 41.7}
    assert t["by_kind"]["crash_window"]["count"] == 30
    assert t["slowest"][0] == {"nodeid": "ledger::stateful[core-machine]", "duration_s": 41.7}
    durations = [s["duration_s"] for s in t["slowest"]]
    assert durations == sorted(durations, reverse=True) and len(durations) == 10


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda f: {"tests": [*f.tests(), {"nodeid": "x::y", "clause": "core.nope", "outcome": "passed"}]},
     "names unknown clause 'core.nope'"),
    (lambda f: {"tests": f.tests() + f.tests()[:1]}, "appears twice"),
    (lambda f: {"tests": [{**f.tests()[0], "outcome": "ok"}]}, "tests[0].outcome"),
    (lambda f: {"requested": ["core", "billing"]}, "unknown profile(s) billing"),
    (lambda f: {"windows": [{**f.windows()[0], "decision_expected": "quarantine"}]}, "contradicts the contract's matrix"),
    (lambda f: {"windows": [{**f.windows()[0], "decision_observed": "resume"}]}, "verdict pass, but decision"),
    (lambda f: {"windows": [{**f.windows()[1], "effects_observed": 3}]}, "outside exactly_once"),
    (lambda f: {"windows": [{**f.windows()[0], "point": "after_lunch"}]}, "unknown crash point"),
    (lambda f: {"windows": f.windows()[:1] * 2}, "appears twice"),
    (lambda f: {"run": {"kind": "certify", "command": "x"}}, "run: missing started_at, finished_at"),
    (lambda f: {"adapter": {"name": "x"}}, "adapter: missing address"),
    (lambda f: {"adapter": {**f.adapter(), "profiles": ["core", "queues"]}}, "unknown profile(s) queues"),
])
def test_build_refuses_inconsistent_input(factory, mutate, message: str) -> None:
    with pytest.raises(ResultsError) as exc:
        factory.build(**mutate(factory))
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("mode, clause", [("kill", "recovery.no_loss"), ("pause", "recovery.fencing_after_takeover")])
def test_a_window_that_could_not_be_judged_is_an_error_of_its_clause(factory, spec, mode, clause) -> None:
    """A window that ended without a verdict (its worker lost the item, say) still goes into the
    report, as an error of the clause it was there to decide; it never breaks the report."""
    from ledgercheck.chaos.crash.scenario import WindowResult

    point = next(iter(spec.crash_points))
    w = WindowResult(point, 3, mode, "error", message="get: not_found: item-2 is gone").as_dict()
    assert w["clauses"] == [clause] and w["step_class"] is None
    tests = [t for t in factory.tests(known_bugs=(), failing=()) if t["clause"] != clause]
    doc = factory.build(tests=tests, windows=[*factory.windows(bad=()), w], adapter=factory.adapter(known_bugs={}))
    by_id = {c["id"]: c for c in doc["clauses"]}
    assert by_id[clause]["outcome"] == "error" and "item-2 is gone" in by_id[clause]["message"]
    assert doc["verdict"] == "ERROR"
