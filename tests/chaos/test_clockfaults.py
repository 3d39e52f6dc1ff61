"""Clock faults (chaos/safety/clockfaults.py): libfaketime moving a process's time, the seeded faults in
a safety campaign, the broken ledger only they catch, and a long recovery window passed by running
the database fast.

Every test counts events or reads clocks; none waits a fixed time or bounds real time.  The
campaigns need PostgreSQL for the wall-clock ledgers (fixtures/testkit/pg_ledger.py, fixtures/testkit/broken_clocks.py)
and libfaketime (sh scripts/install-test-deps.sh); without libfaketime they fail with one line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from ledgercheck.chaos.crash.points import ChaosError
from ledgercheck.chaos.safety import clockfaults, nemesis
from ledgercheck.chaos.safety.campaign import run_campaign
from ledgercheck.chaos.safety.clockfaults import CLOCK_FAULTS, FakeClock, draw, skewed_workers
from ledgercheck.spec import default_spec

ASK_TIME = "import sys, time\nfor _ in sys.stdin:\n    print(time.time(), time.monotonic(), flush=True)\n"


@pytest.fixture(scope="module", autouse=True)
def _libfaketime() -> None:
    if clockfaults.libfaketime() is None:
        pytest.fail("libfaketime is not installed (Debian faketime, libfaketime: sh scripts/install-test-deps.sh)",
                    pytrace=False)


def _history(result: Any) -> list[dict[str, Any]]:
    with open(result.history, "rb") as f:
        return [json.loads(line) for line in f]


# ------------------------------------------------------------------------------ the clock itself
def test_rewriting_the_clock_file_moves_a_running_process_time() -> None:
    with FakeClock() as clock:
        child = clock.popen([sys.executable, "-c", ASK_TIME], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert child.stdin is not None and child.stdout is not None
        for offset in (0.0, 3600.0, -90.5, 0.0):
            clock.set(offset=offset)
            before = time.time()
            child.stdin.write("now\n")
            child.stdin.flush()
            seen = float(child.stdout.readline().split()[0])
            after = time.time()
            # the child read its clock between the two reads of ours, moved by the offset
            assert before + offset - 0.01 <= seen <= after + offset + 0.01, (offset, before, seen, after)


def test_a_process_run_fast_passes_a_long_wait_at_once() -> None:
    """A 10-minute sleep, run 600 times as fast: the process's own clocks (wall and monotonic)
    advance by the whole 10 minutes."""
    prog = ("import time\nw, m = time.time(), time.monotonic()\ntime.sleep(600)\n"
            "print(time.time() - w, time.monotonic() - m)\n")
    with FakeClock(rate=600) as clock:
        out = clock.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=300)
    wall, mono = map(float, out.stdout.split())
    assert wall >= 600 and mono >= 600, out


def test_faked_command_gives_argv_and_environment_for_any_program(tmp_path: Any) -> None:
    path = str(tmp_path / "clock")
    argv, env, clock_file = clockfaults.faked_command(["date", "+%s"], offset=-86400 * 365, clock_file=path)
    assert clock_file == path and open(path).read().strip() == "-31536000.000000"
    assert env["FAKETIME_TIMESTAMP_FILE"] == path and env["FAKETIME_NO_CACHE"] == "1"
    assert "libfaketime" in env["LD_PRELOAD"] and "FAKETIME_DONT_FAKE_MONOTONIC" not in env
    seen = int(subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60).stdout)
    assert seen < time.time() - 86400 * 364  # a year behind


def test_a_clock_spec_refuses_what_libfaketime_cannot_read() -> None:
    assert clockfaults.clock_spec(1.5) == "+1.500000"
    assert clockfaults.clock_spec(-2, 10) == "-2.000000 x10"
    for bad in ((float("nan"), 1.0), (0.0, 0.0), (0.0, -2.0)):
        with pytest.raises(ValueError):
            clockfaults.clock_spec(*bad)


# ------------------------------------------------------------------------------ the faults
def test_clock_faults_are_seeded_named_and_not_in_the_default_set() -> None:
    assert set(CLOCK_FAULTS) <= set(nemesis.KNOWN) and not set(CLOCK_FAULTS) & set(nemesis.FAULTS)
    assert nemesis.parse_faults("pause,skew,fast") == ("pause", "skew", "fast")
    for kind in CLOCK_FAULTS:
        a, b = draw(kind, 7, 1.25, 0.5, 0.8), draw(kind, 7, 1.25, 0.5, 0.8)
        assert a == b  # a seed names the same fault with the same parameters
        others = {json.dumps(draw(kind, s, 1.25, 0.5, 0.8).params) for s in range(20)}
        assert len(others) > 10
        assert a.steps[0][0] == 0 and a.end >= a.steps[-1][0]
        if kind == "fast":
            assert a.params["rate"] in clockfaults.FAST_RATES and a.steps[0][2] == a.params["rate"]
        else:
            assert 0.8 <= abs(a.params["offset"]) <= 6 * 0.8
    strobe = draw("strobe", 3, 2.0, 0.1, 1.0)
    assert len(strobe.steps) == strobe.params["flips"] >= 4
    assert {s[1] for s in strobe.steps} == {strobe.params["offset"], 0.0}  # back and forth
    signs = {draw("skew", s, 1.0, 0.3, 1.0).params["offset"] > 0 for s in range(20)}
    assert signs == {True, False}  # ahead and behind
    with pytest.raises(ChaosError):
        draw("melt", 1, 1.0, 0.1, 1.0)


def test_clock_faults_without_libfaketime_say_so_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("LEDGERCHECK_LIBFAKETIME", str(tmp_path / "missing.so"))
    with pytest.raises(ChaosError, match="libfaketime") as exc:
        run_campaign("reference", workers=2, items=2, seed=1, faults="skew", out_dir=str(tmp_path / "h"))
    assert "\n" not in str(exc.value)


def test_what_a_skewed_worker_did_is_judged_by_the_ledger_time() -> None:
    """A synthetic history: w1's clock is set behind; it renews while its lease is live (ok), closes
    out after its lease lapsed by the ledger's time (accepted: the ledger's fault), writes again
    (refused), and w2's write is refused while its lease was live (its clock ahead)."""
    def op(i: int, p: str, name: str, t: float, now: float, outcome: str, result: Any = None, **args: Any) -> list[dict[str, Any]]:
        return [{"type": "invoke", "id": i, "process": p, "op": name, "args": args, "t": t, "now": now},
                {"type": "complete", "id": i, "outcome": outcome, "t": t + 0.001, "result": result}]
    lease = {"work_id": "a", "owner": "w1", "lease_expires_at": 110.0, "status": "running"}
    lease2 = {"work_id": "b", "owner": "w2", "lease_expires_at": 150.0, "status": "running"}
    recs = [{"type": "meta", "timings": {"ttl": 10.0, "grace": 5.0}},
            *op(1, "w1", "claim", 1.0, 100.0, "ok", lease, owner="w1"),
            *op(2, "w2", "claim", 1.0, 140.0, "ok", lease2, owner="w2"),
            {"type": "nemesis", "fault": "skew", "process": "w1", "point": {"offset": -30.0, "hold": 5}, "t": 1.5},
            {"type": "nemesis", "fault": "skew", "process": "w2", "point": {"offset": 30.0, "hold": 5}, "t": 1.5},
            *op(3, "w1", "renew", 2.0, 108.0, "ok", lease, work_id="a", token="t1"),
            *op(4, "w1", "close_out", 3.0, 120.0, "ok", {"work_id": "a", "status": "done"}, work_id="a", token="t1"),
            *op(5, "w1", "renew", 3.5, 121.0, "refused", None, work_id="a", token="t1"),
            *op(6, "w2", "renew", 3.6, 141.0, "refused", None, work_id="b", token="t2"),
            {"type": "nemesis", "fault": "clock_end", "process": "w1", "point": {"of": "skew"}, "t": 4.0},
            *op(7, "w1", "renew", 5.0, 200.0, "refused", None, work_id="a", token="t1")]  # after the fault: not counted
    rows = {w["worker"]: w for w in skewed_workers(recs)}
    w1, w2 = rows["w1"], rows["w2"]
    assert (w1["writes"], w1["ok"], w1["refused"], w1["ok_after_lapse"], w1["refused_after_lapse"]) == (3, 2, 1, 1, 1)
    assert (w2["writes"], w2["refused_while_live"], w2["to"]) == (1, 1, None)  # never ended: runs to the end
    assert "1 accepted after its lease had lapsed" in clockfaults.describe(w1)
    assert "refused while its lease was live" in clockfaults.describe(w2)
    assert skewed_workers([r for r in recs if r.get("type") != "nemesis"]) == []


def test_the_timeline_shades_a_clock_faulted_lane_until_its_clock_is_real_again() -> None:
    from ledgercheck.reports import timeline

    recs = [{"type": "meta"},
            {"type": "invoke", "id": 1, "process": "w1", "op": "claim", "args": {"owner": "w1"}, "t": 1.0, "now": 1.0},
            {"type": "complete", "id": 1, "outcome": "ok", "t": 1.1, "result": {"work_id": "a", "owner": "w1"}},
            {"type": "nemesis", "fault": "bump", "process": "w1", "point": {"offset": -3.0, "hold": 1.0}, "t": 1.2},
            {"type": "nemesis", "fault": clockfaults.END, "process": "w1", "point": {"of": "bump"}, "t": 2.2},
            {"type": "invoke", "id": 2, "process": "w1", "op": "renew", "args": {"work_id": "a", "token": "x"}, "t": 2.5,
             "now": 2.5},
            {"type": "complete", "id": 2, "outcome": "ok", "t": 2.6, "result": {"work_id": "a", "owner": "w1"}}]
    ops = timeline.collect(recs)
    bump = next(f for f in ops.faults if f.fault == "bump")
    timeline._close_spans(ops.faults, {"w1"})
    assert bump.end == 2.2
    html = timeline.render_timeline(ops, whole=True)
    assert 'data-span="bump"' in html and 'data-fault="clock_end"' in html


def test_the_reference_is_clean_under_every_clock_fault(tmp_path: Any) -> None:
    """The default tier's campaign: the reference, its adapters exec'd on their workers' clocks,
    under pauses and all four clock faults; every fault recorded with its parameters, each clock
    back to real time by the end, and the lanes of the faulted workers shaded in the timeline."""
    r = run_campaign("reference", workers=3, items=10, seed=1, faults="pause,skew,bump,strobe,fast",
                     out_dir=str(tmp_path / "h"), time_limit=90.0)
    assert r.anomalies == [] and r.verdict == "pass", (r.anomalies[:1], r.missing)
    assert all(r.nemesis[k] >= 1 for k in CLOCK_FAULTS), r.nemesis
    lines = _history(r)
    faults = [x for x in lines if x["type"] == "nemesis" and x["fault"] in CLOCK_FAULTS]
    assert all(x["process"] and isinstance(x["point"], dict) for x in faults)
    assert all("rate" in x["point"] if x["fault"] == "fast" else "offset" in x["point"] for x in faults)
    ends = [x for x in lines if x["type"] == "nemesis" and x["fault"] == clockfaults.END]
    assert {x["process"] for x in faults} <= {x["process"] for x in ends}  # every faulted clock was set back
    assert any(x["fault"] == clockfaults.STEP for x in lines if x["type"] == "nemesis")  # strobe flips, bumps back
    assert [w["worker"] for w in r.observations["clock"]] == [x["process"] for x in faults]
    assert sum(w["writes"] for w in r.observations["clock"]) > 0  # the faulted workers did write meanwhile


# ------------------------------------------------------------------------------ long tier
@pytest.fixture(scope="module")
def pg_dsn() -> Iterator[str]:
    from ledgercheck.services.postgres import PostgresUnavailable, shared_server

    try:
        yield shared_server().dsn()
    except PostgresUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


def _pg(cls: str, seed: int, faults: str, dsn: str, tmp: Any) -> Any:
    return run_campaign(f"python:ledgercheck.fixtures.testkit.{cls}", workers=5, items=20, seed=seed, faults=faults,
                        reset={"server_dsn": dsn}, latency=(0.05, 0.3), min_each=2,
                        out_dir=str(tmp / f"{cls.replace(':', '-')}-{seed}-{faults}"), time_limit=90.0)


PROOF_SEED = 1


@pytest.mark.thorough
def test_a_ledger_that_judges_leases_by_the_worker_clock_is_caught_only_under_skew(pg_dsn: str, tmp_path: Any) -> None:
    from ledgercheck.fixtures.testkit.broken_clocks import WorkerClockLease

    plain = _pg("broken_clocks:WorkerClockLease", PROOF_SEED, "kill,pause", pg_dsn, tmp_path)
    assert plain.anomalies == [] and plain.verdict == "pass", (plain.anomalies[:1], plain.missing)
    found = _pg("broken_clocks:WorkerClockLease", PROOF_SEED, "kill,pause,skew", pg_dsn, tmp_path)
    behind = [x for x in _history(found) if x["type"] == "nemesis" and x["fault"] == "skew" and x["point"]["offset"] < 0]
    assert behind, "the seed drew no clock behind"
    classes = {a["class"] for a in found.anomalies or []}
    assert classes and classes <= WorkerClockLease.ANOMALIES, found.anomalies[:1]
    # what the skewed workers did says it: a write accepted after its lease lapsed by the ledger's time
    assert any(w["ok_after_lapse"] for w in found.observations["clock"]), found.observations["clock"]


@pytest.mark.thorough
@pytest.mark.parametrize("cls", ["pg_ledger:PgTimeFenced", "pg_ledger:PgLedger"])
def test_a_ledger_on_the_database_clock_is_clean_under_clock_faults(cls: str, pg_dsn: str, tmp_path: Any) -> None:
    for seed in (1, 2):
        r = _pg(cls, seed, "pause,skew,bump,strobe,fast", pg_dsn, tmp_path)
        assert r.anomalies == [] and r.verdict == "pass", (seed, r.anomalies[:1], r.missing)
        assert sum(r.nemesis[k] for k in CLOCK_FAULTS) >= 3, r.nemesis


@pytest.mark.thorough
@pytest.mark.parametrize("fault", CLOCK_FAULTS)
def test_the_reference_is_clean_under_each_clock_fault_over_ten_seeds(fault: str, tmp_path: Any) -> None:
    hit = 0
    for seed in range(1, 11):
        # five workers: two killed (their replacements' adapters are exec'd, slow to start on a busy
        # machine) and two paused still leave one to take a paused holder's item over
        r = run_campaign("reference", workers=5, items=20, seed=seed, faults=f"kill,pause,{fault}", min_each=2,
                         out_dir=str(tmp_path / f"{fault}-{seed}"), time_limit=90.0)
        assert r.anomalies == [] and r.verdict == "pass", (fault, seed, r.anomalies[:1], r.missing)
        hit += r.nemesis[fault]
    assert hit >= 10, hit


@pytest.mark.thorough
def test_a_lease_of_minutes_lapses_in_a_short_run_when_the_database_runs_fast() -> None:
    """fixtures/testkit/pg_ledger.py's PgLedger judges leases by the database server's clock.  The
    contract's lease is 45 s + 30 s of grace; with the server run 60 times as fast another worker
    takes the item over once the database's clock has passed that, and the first worker's late
    write is refused.  The test counts claims until the takeover; the database's own timestamps
    show how much of its time passed."""
    from ledgercheck.fixtures.testkit.pg_ledger import PgLedger
    from ledgercheck.transport.protocol import LedgerError

    lt = default_spec().lease_for("manual")
    with FakeClock(rate=60) as clock, clockfaults.postgres_on_clock(clock) as srv:
        ledger = PgLedger()
        ledger.reset({"server_dsn": srv.dsn(), "dir": "fast"})
        try:
            ledger.create(source_system="manual", source_id="one", now=time.time())
            first = ledger.claim(owner="w1", now=time.time())
            assert first is not None
            claims, taken = 0, None
            while taken is None:
                taken = ledger.claim(owner="w2", now=time.time())
                claims += 1
                db_now = ledger._read(lambda cur: ledger._now(cur, 0.0))
                assert db_now < first["started_at"] + 20 * (lt.ttl + lt.grace), "no takeover after 20 lease lapses"
            assert taken["work_id"] == first["work_id"] and taken["owner"] == "w2"
            assert taken["started_at"] - first["started_at"] >= lt.ttl + lt.grace  # the database's time passed
            assert claims > 1
            with pytest.raises(LedgerError) as exc:
                ledger.close_out(work_id=first["work_id"], token=first["lease_token"], status="done", now=time.time())
            assert exc.value.code == "stale_lease"
        finally:
            ledger.close()
