"""What a history exercised (Verdict.coverage), what it did not reach (Verdict.missing: the verdict is
INCONCLUSIVE, never a pass), the end state judged (work left queued, running or parked), refusals
that took effect (refused_but_applied), and the fault that explains a lost item; on synthetic
histories (tests/chaos/history_sim.py), the command's exit codes included."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from checker_support import T0, assert_proves, kinds, only
from history_sim import HistoryBuilder, simulate
from ledgercheck.chaos.safety.anomalies import SITUATIONS, Verdict, check
from ledgercheck.chaos.safety.history import History

LAPSE = 60.0  # ttl 45 + grace 15


def takeover(b: HistoryBuilder, *, late: str | None = "refused", by: str = "time") -> None:
    """x: w1 claims it and is paused past its lease; the lease's lapse (the monitor's expire and
    recover) or the operator's recovery gives it to w2; w1 goes on and writes with its old token
    (`late`: that write's outcome, None: w1 writes nothing); w2 finishes it."""
    b.create("producer", "x", T0)
    ta = b.claim("w1", "x", T0 + 1)
    b.nemesis("pause", "w1")
    who = "operator" if by == "operator" else "monitor"
    b.expire(who, T0 + 70)
    b.recover(who, T0 + 70)
    tb = b.claim("w2", "x", T0 + 71)
    b.nemesis("resume", "w1")
    if late is not None:
        b.close_out("w1", "x", ta, T0 + 72, outcome=late)
    b.close_out("w2", "x", tb, T0 + 73)


def run_cli(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ledgercheck", "history", "check", str(path), *args],
                          capture_output=True, text=True, timeout=120)


# --------------------------------------------------------------------------------- coverage
def test_a_history_that_reaches_everything_is_no_anomaly_with_its_coverage() -> None:
    b = HistoryBuilder()
    takeover(b)
    b.create("producer", "y", T0 + 80)
    ty = b.claim("w3", "y", T0 + 81)
    b.effect("w3", "y")
    b.nemesis("kill", "w3", point="after_submit_before_record")
    b.expire("monitor", T0 + 150)
    b.recover("monitor", T0 + 150)
    tz = b.claim("w2", "y", T0 + 151)
    b.close_out("w2", "y", tz, T0 + 152)
    assert ty != tz
    b.final(T0 + 200)
    v = check(b.history())
    assert v.verdict == "no anomaly" and v.missing == [] and v.anomalies == []
    cov = v.coverage
    assert set(SITUATIONS) <= set(cov)
    assert cov["claim_ok"] == 4 and cov["close_out_ok"] == 2 and cov["finished"] == 2 and cov["final_read"] == 1
    assert cov["kill"] == 1 and cov["kill_at:after_submit_before_record"] == 1 and cov["pause"] == 1
    assert cov["holder_displaced"] == 1 and cov["displaced_by_time"] == 1 and cov["late_write_after_takeover"] == 1
    assert cov["effect_then_kill"] == 1
    # a killed holder is not displaced: y's second grant is not counted
    assert cov["displaced_by_operator"] == cov["displaced_by_reopen"] == 0
    doc = v.to_json()
    assert doc["verdict"] == "no anomaly" and doc["coverage"] == cov and doc["missing"] == []


def test_a_takeover_through_the_operator_is_classified_so() -> None:
    b = HistoryBuilder(reclaim="operator")
    takeover(b, by="operator")
    b.final(T0 + 200, path="operator")
    v = check(b.history())
    assert v.verdict == "no anomaly", (v.anomalies, v.missing)
    assert v.coverage["displaced_by_operator"] == 1 and v.coverage["displaced_by_time"] == 0


def test_a_displacement_by_a_reopen_is_counted_and_is_split_ownership() -> None:
    b = HistoryBuilder(reclaim="operator")
    b.create("producer", "x", T0)
    b.claim("w1", "x", T0 + 1)
    b.records[-1]["result"]["lease_expires_at"] = None  # a queue: no lease expiry
    b.nemesis("reopen", "reopener")  # it puts w1's live item back
    b.items["x"].status = "queued"
    tb = b.claim("w2", "x", T0 + 3)
    b.records[-1]["result"]["lease_expires_at"] = None
    b.close_out("w1", "x", "tok1", T0 + 4, outcome="refused")
    b.close_out("w2", "x", tb, T0 + 5)
    b.final(T0 + 10)
    v = check(b.history())
    assert kinds(v) == ["split_ownership"] and v.verdict == "anomalies"
    assert v.coverage["displaced_by_reopen"] == 1 and v.coverage["late_write_after_takeover"] == 1


def test_no_late_write_after_a_takeover_is_inconclusive() -> None:
    b = HistoryBuilder()
    takeover(b, late=None)
    b.final(T0 + 200)
    v = check(b.history())
    assert v.anomalies == [] and v.verdict == "inconclusive"
    assert v.missing == ["no displaced holder wrote with its old token after the takeover (1 live holder displaced)"]


def test_a_write_in_flight_across_the_takeover_is_a_late_write() -> None:
    """A cut-off holder's close-out sent before the takeover and answered after it (held up by a
    partition) reached the ledger with a superseded lease: the fence was exercised.  One answered
    before the takeover was not."""
    for answered_after, late in ((True, 1), (False, 0)):
        b = HistoryBuilder()
        b.create("producer", "x", T0)
        ta = b.claim("w1", "x", T0 + 1)
        b.nemesis("partition", "w1")
        sent = b.invoke("w1", "close_out", {"work_id": "x", "token": ta, "status": "done", "now": T0 + 2})
        if not answered_after:
            b.complete(sent, "w1", "close_out", "refused", error={"code": "stale_lease", "message": "m"})
        b.expire("monitor", T0 + 70)
        b.recover("monitor", T0 + 70)
        tb = b.claim("w2", "x", T0 + 71)
        if answered_after:
            b.complete(sent, "w1", "close_out", "refused", error={"code": "stale_lease", "message": "m"})
        b.close_out("w2", "x", tb, T0 + 73)
        b.final(T0 + 200)
        v = check(b.history())
        assert v.anomalies == [] and v.coverage["holder_displaced"] == 1, v.missing
        assert v.coverage["late_write_after_takeover"] == late, (answered_after, v.coverage)


def test_no_displacement_at_all_is_inconclusive_whatever_the_declaration() -> None:
    for reclaim in ("lease", "operator", "never"):
        b = HistoryBuilder(reclaim=reclaim)
        b.create("producer", "x", T0)
        t = b.claim("w1", "x", T0 + 1)
        b.close_out("w1", "x", t, T0 + 2)
        b.final(T0 + 10, path=reclaim)
        v = check(b.history())
        assert v.verdict == "inconclusive" and v.missing == ["no live holder was displaced (by time, operator or reopen)"]


def _refused_takeover(monitor: bool = True, claim_after_lapse: bool = True) -> Verdict:
    """w1 holds x and is paused past its lease; the ledger's recovery runs and w2 asks for work,
    but the ledger hands x to nobody; w1 goes on and finishes x."""
    b = HistoryBuilder(reclaim="never")
    b.create("producer", "x", T0)
    ta = b.claim("w1", "x", T0 + 1)
    b.nemesis("pause", "w1")
    if monitor:
        b.call("monitor", "expire", {"now": T0 + 70}, "ok", [])  # moves nothing: the ledger keeps x with w1
    b.claim_nothing("w2", T0 + 71 if claim_after_lapse else T0 + 30)
    b.nemesis("resume", "w1")
    b.close_out("w1", "x", ta, T0 + 72)
    b.final(T0 + 200, path="never")
    return check(b.history())


def test_takeovers_the_ledger_refused_are_derived_from_the_records() -> None:
    v = _refused_takeover()
    assert v.verdict == "no anomaly" and v.counts["takeovers_refused"] == 1 and v.coverage["holder_displaced"] == 0
    assert any("1 takeover tried and refused by the ledger" in o for o in v.observations), v.observations
    # the claim came before the lease lapsed: nothing was refused, nothing was tried
    v = _refused_takeover(claim_after_lapse=False)
    assert "takeovers_refused" not in v.counts and v.verdict == "inconclusive"
    # without a monitor run past the lapse (a ledger whose monitor runs would have recovered it
    # then), the claim alone does not show a refusal ... unless the history has no monitor at all
    b = HistoryBuilder()
    b.create("producer", "x", T0)
    b.create("producer", "y", T0)
    ty = b.claim("w3", "y", T0)
    b.expire("monitor", T0 + 0.5)
    b.close_out("w3", "y", ty, T0 + 0.6)
    ta = b.claim("w1", "x", T0 + 1)
    b.nemesis("pause", "w1")
    b.claim_nothing("w2", T0 + 71)
    b.nemesis("resume", "w1")
    b.close_out("w1", "x", ta, T0 + 72)
    b.final(T0 + 200)
    v = check(b.history())
    assert "takeovers_refused" not in v.counts and v.verdict == "inconclusive"


def test_no_claim_completing_is_inconclusive_and_the_command_exits_2(tmp_path: Path) -> None:
    b = HistoryBuilder()
    for i in range(3):
        b.create("producer", f"x{i}", T0)
    for i in range(5):  # every claim hangs or is refused
        b.claim(f"w{i % 2}", None, T0 + i, outcome="indefinite")
        b.claim(f"w{i % 2}", None, T0 + i, outcome="refused")
    b.final(T0 + 300)
    v = check(b.history())
    assert v.verdict == "inconclusive" and not v.anomalies
    assert v.missing[:3] == ["no claim ever completed ok (no item was ever handed out)",
                             "no close-out ever completed ok", "no item was finished (terminal) at the final read"]
    p = tmp_path / "h.jsonl"
    p.write_bytes(b.dumps())
    r = run_cli(p)
    assert r.returncode == 2 and r.stderr == ""
    verdict = r.stdout.strip().splitlines()[-1]
    assert verdict.startswith("verdict: INCONCLUSIVE: no claim ever completed ok") and "; " in verdict
    assert "exercised:" in r.stdout and "0 claims ok" in r.stdout
    r = run_cli(p, "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 2 and doc["verdict"] == "inconclusive" and doc["missing"] == v.missing
    assert doc["coverage"]["claim_ok"] == 0


def test_anomalies_and_missing_exit_1_and_say_both(tmp_path: Path) -> None:
    b = HistoryBuilder()
    b.create("producer", "x", T0)
    b.final(T0 + 10, drop=["x"])
    p = tmp_path / "h.jsonl"
    p.write_bytes(b.dumps())
    r = run_cli(p)
    assert r.returncode == 1
    assert "verdict: 1 anomaly (not reached: no claim ever completed ok" in r.stdout


# ------------------------------------------------------------------- incomplete histories
def test_a_history_without_its_final_record_is_inconclusive(tmp_path: Path) -> None:
    b = HistoryBuilder()
    takeover(b)
    whole = check(b.final(T0 + 200).history())
    assert whole.verdict == "no anomaly"
    b.records.pop()  # the final record
    v = check(b.history())
    assert v.verdict == "inconclusive" and v.coverage["final_read"] == 0
    assert v.missing[0].startswith("the history has no final record")
    p = tmp_path / "h.jsonl"
    p.write_bytes(b.dumps())
    r = run_cli(p, "--classes-only")  # history_sim's ledger answers recover 'requeue', no decision of the contract's matrix: linearizability (test_linearize.py) rightly flags it; the class rules alone are under test here
    assert r.returncode == 2 and "verdict: INCONCLUSIVE: the history has no final record" in r.stdout


def test_a_history_cut_off_mid_line_is_refused_in_one_line(tmp_path: Path) -> None:
    b = HistoryBuilder()
    takeover(b)
    b.final(T0 + 200)
    data = b.dumps()
    p = tmp_path / "h.jsonl"
    p.write_bytes(data[: data.rindex(b"\n", 0, len(data) - 1) + 40])  # the final record torn after 40 bytes
    r = run_cli(p)
    n = data.count(b"\n")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == f"ledgercheck history: {p}:{n}: the last line is cut off mid-record: the history ends " \
                               "abruptly (an interrupted campaign's, or copied while it was written)"


def test_one_process_part_of_a_history_is_inconclusive_or_refused(tmp_path: Path) -> None:
    b = HistoryBuilder()
    takeover(b)
    b.final(T0 + 200)
    recs = b.records
    # the controller's part: meta, faults and the final read, no operation
    part = [r for r in recs if r["type"] in ("meta", "nemesis", "final")]
    v = check(History.of(part))
    assert v.verdict == "inconclusive"
    assert "the history holds no operation" in v.missing
    assert any("created by no operation of the history" in m for m in v.missing)
    # a worker's part has no meta record: refused
    p = tmp_path / "history.w1.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in recs if r.get("process") == "w1"))
    r = run_cli(p)
    assert r.returncode == 2 and "does not start with a meta record" in r.stderr and r.stderr.count("\n") == 1


# -------------------------------------------------------------------------- the end state
def _retry(retry_in: float, promote_at: float | None, final_at: float) -> HistoryBuilder:
    b = HistoryBuilder()
    takeover(b)
    b.create("producer", "r", T0 + 100)
    t = b.claim("w3", "r", T0 + 101)
    b.fail("w3", "r", t, T0 + 102, retry_in=retry_in)
    if promote_at is not None:
        b.items["r"].next_retry_at = None  # the broken promote_due does not see it
        b.promote_due("monitor", promote_at)
        b.items["r"].next_retry_at = T0 + 102 + retry_in
    b.final(final_at)
    return b


def test_a_retry_due_after_the_final_read_is_accounted_for() -> None:
    v = check(_retry(500.0, None, T0 + 200).history())
    assert v.verdict == "no anomaly", (v.anomalies, v.missing)
    assert any("1 item left retry_scheduled at the end, due after the final read" in o for o in v.observations)


def test_a_due_retry_the_monitor_left_is_stuck_work() -> None:
    h = _retry(10.0, T0 + 150, T0 + 200).history()
    a = only(check(h), "stuck_work")
    assert a.work_id == "r" and "retry_scheduled" in a.explanation and "promote_due" in a.explanation
    assert_proves(h, a)
    # due, but no promote_due ran after it was due: not proven, and not a pass
    v = check(_retry(10.0, T0 + 105, T0 + 200).history())
    assert v.anomalies == [] and v.verdict == "inconclusive"
    assert v.missing == ["1 item was still retry_scheduled past its due time at the final read, and no promote_due "
                         "ran after it was due: the history does not show whether it comes back"]


def test_work_left_queued_or_running_without_proof_is_inconclusive() -> None:
    b = HistoryBuilder()
    takeover(b)
    b.create("producer", "q", T0 + 100)  # never claimed: the run ended first
    b.create("producer", "l", T0 + 100)
    b.claim("w3", "l", T0 + 150)  # still at work, under a live lease, at the final read
    b.final(T0 + 160)
    v = check(b.history())
    assert v.anomalies == [] and v.verdict == "inconclusive"
    assert len(v.missing) == 2
    assert v.missing[0].startswith("1 item was still claimable at the final read and handed to nobody")
    assert v.missing[1].startswith("1 item was still leased under a live lease at the final read")


def test_a_status_the_contract_does_not_name_is_not_judged_and_not_passed() -> None:
    b = HistoryBuilder()
    takeover(b)
    b.create("producer", "p", T0 + 100)
    b.final(T0 + 200, override={"p": {"status": "paused_by_admin"}})
    v = check(b.history())
    assert v.verdict == "inconclusive"
    assert v.missing == ["1 item ended in status 'paused_by_admin', which the contract does not name: the checker "
                         "cannot judge it"]


def _held_by_the_dead(operator_after: bool, reclaim: str = "operator") -> History:
    """A lease-less queue: w3 holds q and is killed; the operator's recovery runs (or not) after."""
    b = HistoryBuilder(reclaim=reclaim, queue=True)
    takeover(b, by="operator")  # (x, as a queue shows it: no expiry; w2 takes it after the operator's recovery)
    b.create("producer", "q", T0 + 100)
    b.claim("w3", "q", T0 + 101)
    b.nemesis("kill", "w3")
    if operator_after:
        b.call("operator", "list", {"status": "timeout"}, "ok", [])  # a read: not a recovery
        b.call("operator", "recover", {"now": T0 + 150}, "ok", [])  # the queue's recovery sees nothing to move
    b.final(T0 + 200, path=reclaim)
    return b.history()


def test_work_held_by_a_dead_worker_after_the_operators_recovery_is_lost() -> None:
    h = _held_by_the_dead(True)
    v = check(h)
    a = only(v, "lost_work")
    assert a.work_id == "q" and "no lease expiry" in a.explanation and "killed" in a.explanation
    assert [r.op for r in a.excerpt if r.type == "complete"] == ["claim", "recover"]
    assert_proves(h, a)
    v = check(_held_by_the_dead(False))
    assert v.anomalies == [] and any("held (no lease expiry) by killed workers" in m for m in v.missing)
    # under reclaim never nothing is to bring it back: the kill alone leaves it lost
    h = _held_by_the_dead(False, reclaim="never")
    a = only(check(h), "lost_work")
    assert "under reclaim never" in a.explanation
    assert_proves(h, a)


# ------------------------------------------------------------------ refusals that took effect
def test_a_refused_create_whose_item_is_later_claimed_is_refused_but_applied_and_counts_as_created() -> None:
    b = HistoryBuilder()
    takeover(b)
    b.create("producer", "n", T0 + 100, outcome="refused", applied=True)
    b.records[-1]["error"] = {"code": "not_found", "message": "no such source", "definite": True}
    b.claim("w3", "n", T0 + 101)
    b.final(T0 + 300, drop=["n"])  # and then the ledger lost it
    h = b.history()
    v = check(h)
    assert kinds(v) == ["lost_work", "refused_but_applied"]
    rba = next(a for a in v.anomalies if a.kind == "refused_but_applied")
    assert rba.work_id == "n" and "refused (not_found)" in rba.explanation
    assert [r.op for r in rba.excerpt if r.type == "complete"] == ["create", "claim"]
    assert_proves(h, rba)
    lost = next(a for a in v.anomalies if a.kind == "lost_work")
    assert lost.work_id == "n"
    assert v.counts["items"] == 2  # the item a refused create made counts as created
    # a create refused (busy) and then made by a retry with the same identity: nothing to report
    b = HistoryBuilder()
    takeover(b)
    b.create("producer", "n", T0 + 100, outcome="refused")
    b.create("producer", "n", T0 + 100)
    t = b.claim("w3", "n", T0 + 101)
    b.close_out("w3", "n", t, T0 + 102)
    b.final(T0 + 300)
    assert check(b.history()).verdict == "no anomaly"


def test_a_refused_claim_whose_lease_a_read_shows_is_refused_but_applied() -> None:
    b = HistoryBuilder()
    takeover(b)
    b.create("producer", "c", T0 + 100)
    b.claim("w3", "c", T0 + 101, outcome="refused", applied=True)  # the claim took it, and said it did not
    b.records[-1]["error"] = {"code": "invalid_transition", "message": "x", "definite": True}
    b.get("w4", "c")
    b.final(T0 + 110)
    h = b.history()
    v = check(h)
    a = next(a for a in v.anomalies if a.kind == "refused_but_applied")
    assert a.work_id == "c" and "claim by w3 was refused (invalid_transition)" in a.explanation
    assert [r.op for r in a.excerpt if r.type == "complete"] == ["claim", "get"]
    assert_proves(h, a)


def test_a_refused_close_out_whose_result_a_read_shows_is_refused_but_applied() -> None:
    b = HistoryBuilder()
    takeover(b)
    b.create("producer", "d", T0 + 100)
    t = b.claim("w3", "d", T0 + 101)
    b.close_out("w3", "d", t, T0 + 102, outcome="refused", applied=True)
    b.get("w4", "d")
    b.final(T0 + 110)
    h = b.history()
    a = only(check(h), "refused_but_applied")
    assert a.work_id == "d" and "close_out by w3" in a.explanation
    assert_proves(h, a)
    # refused (busy), then the same close-out again, ok: either may have left that result
    b = HistoryBuilder()
    takeover(b)
    b.create("producer", "d", T0 + 100)
    t = b.claim("w3", "d", T0 + 101)
    b.close_out("w3", "d", t, T0 + 102, outcome="refused")
    b.close_out("w3", "d", t, T0 + 102)
    b.get("w4", "d")
    b.final(T0 + 110)
    assert check(b.history()).verdict == "no anomaly"


# ------------------------------------------------------------------ the cause of lost work
def test_lost_work_names_the_fault_that_lost_it() -> None:
    b = HistoryBuilder()
    takeover(b)
    b.create("producer", "k", T0 + 100)
    b.claim("w3", "k", T0 + 101)
    b.nemesis("kill", "w3")  # the ledger kept k only in w3's memory
    b.final(T0 + 300, drop=["k"])
    h = b.history()
    a = only(check(h), "lost_work")
    assert "w3, which held it from its claim, was killed" in a.explanation
    assert [r.type for r in a.cause] == ["invoke", "complete", "nemesis"] and a.cause[-1].fault == "kill"
    assert a.to_json()["cause"][-1]["fault"] == "kill"
    assert_proves(h, a)
    # lost across a reopen, with no holder: the reopen after it was last read
    b = HistoryBuilder()
    takeover(b)
    b.create("producer", "k", T0 + 100)
    b.get("census", "k")
    b.nemesis("reopen", "reopener")
    b.final(T0 + 300, drop=["k"])
    h = b.history()
    a = only(check(h), "lost_work")
    assert "reopened" in a.explanation and [r.fault for r in a.cause] == ["reopen"]
    assert_proves(h, a)


# --------------------------------------------------------------- generated: fair to correct
def test_correct_simulated_campaigns_mostly_reach_full_coverage() -> None:
    verdicts = [check(simulate(seed).history()) for seed in range(30)]
    assert all(not v.anomalies for v in verdicts)
    full = [v for v in verdicts if v.verdict == "no anomaly"]
    assert len(full) >= 20, [v.missing for v in verdicts if v.missing]
    for v in full:
        assert v.coverage["holder_displaced"] >= 1 and v.coverage["late_write_after_takeover"] >= 1


def test_the_contract_can_be_named_and_a_bad_one_is_one_line(tmp_path: Path) -> None:
    b = HistoryBuilder()
    takeover(b)
    b.final(T0 + 200)
    p = tmp_path / "h.jsonl"
    p.write_bytes(b.dumps())
    root = Path(__file__).resolve().parents[2]
    r = run_cli(p, "--spec", str(root / "spec" / "contract" / "ledger.yaml"), "--classes-only")  # history_sim's ledger answers recover 'requeue', no decision of the contract's matrix: linearizability (test_linearize.py) rightly flags it; the class rules alone are under test here
    assert r.returncode == 0 and r.stdout.strip().endswith("verdict: no anomaly")
    r = run_cli(p, "--spec", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1 and "nope.yaml" in r.stderr


def test_partitions_that_never_outlasted_a_takeover_leave_the_run_inconclusive() -> None:
    """A partition is there so that a cut-off holder's writes reach the ledger after another host
    took its item over.  Cuts that all healed first (the campaign's end came, or no holder was on
    the host) judged none of that: the run says so instead of passing."""
    import struct
    from types import SimpleNamespace

    from ledgercheck.chaos.safety.campaign import _Campaign
    from ledgercheck.chaos.safety.campaign_model import CLAIMS0

    def unreached(**counts: int) -> list[str]:
        flags = bytearray(CLAIMS0 + 16)
        struct.pack_into("<QQ", flags, CLAIMS0, 5, 5)  # claims asked and granted: nothing else missing
        run = SimpleNamespace(flags=flags, n_slots=0, created=["w"], missing=[], n_takeovers=0, takeover_net=1.0,
                              counts={"takeover_void": 0, "takeover": 0, **counts})
        _Campaign._unreached(run)  # type: ignore[arg-type]
        return run.missing

    (line,) = unreached(cut=3, partition=5, cut_takeover=0)
    assert "cut 3 hosts off, but no cut lasted until another host took a cut-off holder's item over" in line
    assert unreached(cut=3, partition=5, cut_takeover=1) == []
    assert unreached() == []  # no hosts, no partitions: nothing to say
