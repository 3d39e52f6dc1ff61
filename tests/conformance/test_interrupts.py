"""A run that did not finish never certifies (docs/results.md, "Runs that did not finish").

Real ``ledgercheck certify`` subprocesses, stopped by a real SIGINT or SIGTERM in a known phase:
the run writes LEDGERCHECK_PROGRESS_FILE (a line as each test starts and as each crash window
ends), and the test sends the signal once the line it waits for appears, so no sleep decides
where the signal lands.  Every process the run started is watched (psutil, while it runs) and
must be gone when it has exited.  The breaker is checked on adapters that hang or die on every
call: the run stops after N tests, counted in the report, not in seconds.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from ledgercheck.services import reaper
from patience import SAFETY_NET

HERE = Path(__file__).resolve().parent
HANG = HERE / "hang_adapter.py"
LIMIT = SAFETY_NET  # seconds a run may take at most before the test gives up on it (never reached when correct)


@dataclass
class Run:
    rc: int
    out: str
    err: str
    doc: dict[str, Any]
    out_dir: Path
    seen: dict[int, psutil.Process] = field(default_factory=dict)
    signalled_at: str | None = None
    progress: list[str] = field(default_factory=list)
    signalled_after: int = 0  # progress lines written when the signal went out


def _serve_reference() -> str:
    exe = Path(sys.executable).with_name("ledgercheck")
    return f"exec:{shlex.quote(str(exe))} serve reference"


def certify(tmp_path: Path, *args: str, until: Callable[[list[str]], bool] | None = None, sig: int = signal.SIGINT,
            group: bool = True, env_extra: dict[str, str] | None = None) -> Run:
    """Run certify; once ``until(progress lines)`` holds, send ``sig`` to its process group (as a
    terminal's Ctrl-C does) or to the certify process alone."""
    progress = tmp_path / "progress.log"
    out_dir = tmp_path / "out"
    env = {**os.environ, "LEDGERCHECK_PROGRESS_FILE": str(progress), **(env_extra or {})}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    cmd = [sys.executable, "-m", "ledgercheck", "certify", "--out", str(out_dir), "--artifacts", str(tmp_path / "art"),
           "--seed", "7", *args]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    seen: dict[int, psutil.Process] = {}
    signalled_at = None
    signalled_after = 0
    deadline = time.monotonic() + LIMIT
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            for pid in reaper.descendants(proc.pid):
                if pid not in seen:
                    try:
                        seen[pid] = psutil.Process(pid)
                    except psutil.NoSuchProcess:
                        pass
            if until is not None and signalled_at is None:
                lines = progress.read_text().splitlines() if progress.exists() else []
                if until(lines):
                    signalled_at, signalled_after = lines[-1], len(lines)
                    (os.killpg if group else os.kill)(proc.pid, sig)
            time.sleep(0.01)
        out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(SAFETY_NET)
    doc = json.loads((out_dir / "results.json").read_text()) if (out_dir / "results.json").exists() else {}
    lines = progress.read_text().splitlines() if progress.exists() else []
    return Run(proc.returncode, out, err, doc, out_dir, seen, signalled_at, lines, signalled_after)


def assert_nothing_left(run: Run) -> None:
    """Every process seen below the run is gone (a zombie counts as gone): a SIGKILL lands when
    the process next runs, so each is polled for, up to the safety net of minutes (a process the
    run left behind, stopped or waiting, stays: that is what fails here)."""
    deadline = time.monotonic() + SAFETY_NET
    alive = []
    for p in run.seen.values():
        while time.monotonic() < deadline:
            try:
                if not p.is_running() or p.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.02)
        else:
            alive.append(p)
    left = []
    for p in alive:
        try:
            left.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
            p.kill()
        except psutil.NoSuchProcess:
            pass
    assert not left, f"left running after the run ended: {left}"


def assert_incomplete(run: Run, reason: str) -> dict[str, Any]:
    assert run.rc == 2, (run.rc, run.out[-2000:], run.err[-2000:])
    assert run.doc, f"no results.json: {run.err[-2000:]}"
    inc = run.doc["run"]["incomplete"]
    assert (run.doc["verdict"], run.doc["exit_code"], inc["reason"]) == ("INCOMPLETE", 2, reason), inc
    assert inc["tests"]["finished"] < inc["tests"]["planned"]
    assert len(inc["tests"]["unfinished"]) == min(200, inc["tests"]["planned"] - inc["tests"]["finished"])
    # the terminal's verdict line and every rendering say so first
    lines = run.out.splitlines()
    verdict = lines[next(i for i, ln in enumerate(lines) if ln.startswith("  html ")) - 1]
    assert verdict.startswith("INCOMPLETE: "), run.out[-2000:]
    assert (run.out_dir / "summary.md").read_text().splitlines()[0].startswith("### ⏹️ ledgercheck: INCOMPLETE")
    assert 'data-verdict="INCOMPLETE"' in (run.out_dir / "report.html").read_text()
    assert '<testsuite name="run"' in (run.out_dir / "junit.xml").read_text()
    return inc


def _started(prefix: str, n: int = 1) -> Callable[[list[str]], bool]:
    return lambda lines: sum(1 for ln in lines if ln.startswith(f"start ledgercheck::{prefix}")) >= n


def test_sigint_during_clause_tests(tmp_path: Path) -> None:
    run = certify(tmp_path, "--adapter", _serve_reference(), "--no-chaos", "-k", "core", until=_started("core::", 5))
    inc = assert_incomplete(run, "interrupted")
    assert inc["signal"] == "SIGINT" and "interrupted by SIGINT while running ledgercheck::core::" in inc["message"]
    assert_nothing_left(run)


def test_an_interrupt_the_adapter_swallows_still_stops_the_run(tmp_path: Path) -> None:
    """The adapter eats the KeyboardInterrupt (the signal goes out while its ``reset`` waits); the
    run records the signal all the same, starts no further test and is INCOMPLETE."""
    run = certify(tmp_path, "--adapter", "python:swallowing_adapter:SwallowsInterrupts", "--no-chaos", "-k", "core",
                  until=lambda lines: lines.count("adapter-wait") >= 3)
    inc = assert_incomplete(run, "interrupted")
    assert "Interrupted: ledgercheck: interrupted by SIGINT" in run.out, run.out[-2000:]  # swallowed, yet stopped
    later = [ln for ln in run.progress[run.signalled_after:] if ln.startswith("start ")]
    assert len(later) <= 1, later  # at most one test was already starting as the signal went out
    assert inc["tests"]["planned"] - inc["tests"]["finished"] > 50
    assert_nothing_left(run)


def test_sigint_during_stateful_tests(tmp_path: Path) -> None:
    run = certify(tmp_path, "--adapter", "reference", "--no-chaos", "-k", "stateful", until=_started("stateful::"))
    inc = assert_incomplete(run, "interrupted")
    assert "ledgercheck::stateful::" in inc["message"]
    # no false verdicts from the interrupted machine: whatever finished before it passed
    assert all(t["outcome"] in ("passed", "skipped") for t in run.doc["tests"]), run.doc["tests"]
    assert_nothing_left(run)


@pytest.mark.parametrize("group", [True, False], ids=["process-group", "certify-alone"])
def test_sigint_during_crash_exploration(tmp_path: Path, group: bool) -> None:
    """The workers, their fork server and the windows in flight all end at once (the windows not
    started are dropped, not explored first: with the signal sent to certify alone the workers
    do not die of it themselves); the windows explored are counted, the point is not finished,
    and nothing certifies."""
    run = certify(tmp_path, "--adapter", "reference", "-k", "chaos and after_event_insert",
                  until=lambda lines: any(ln.startswith("window ") for ln in lines), group=group)
    inc = assert_incomplete(run, "interrupted")
    assert run.signalled_at is not None and run.signalled_at.startswith("window ")
    windows = [ln for ln in run.progress if ln.startswith("window ")]
    total = int(windows[0].rsplit("/", 1)[1])
    after = len([ln for ln in run.progress[run.signalled_after:] if ln.startswith("window ")])
    # two lanes: at most the windows in flight (and one finishing as the signal lands) end after it
    assert total >= 40 and after <= 4, (total, after, windows[-3:])
    cw = inc["crash_windows"]
    assert cw["points_planned"] == 1 and cw["points_finished"] == 0 and cw["finished"] == len(windows), (cw, len(windows))
    assert cw["planned"] is None or cw["finished"] < cw["planned"], cw
    assert len(run.seen) >= 2, "the exploration should have started worker processes"
    assert_nothing_left(run)


def test_sigterm_to_certify_alone_under_xdist(tmp_path: Path) -> None:
    """SIGTERM to the certify process only (not its group): it passes the stop on to its xdist
    workers, which end their tests, close their adapters and exit; the run is INCOMPLETE once."""
    run = certify(tmp_path, "--adapter", _serve_reference(), "--no-chaos", "-n", "2", "-k", "stateful",
                  until=_started("stateful::"), sig=signal.SIGTERM, group=False)
    inc = assert_incomplete(run, "interrupted")
    assert inc["signal"] == "SIGTERM"
    assert run.err.count("ledgercheck: INCOMPLETE") == 1, run.err[-3000:]
    assert_nothing_left(run)


# The call timeout a run gives an adapter: short where every call must time out (the adapter never
# answers), the safety net of minutes where every call must end otherwise (the adapter dies), so
# a busy machine cannot turn a crash it is slow to notice into a timeout.
TIMEOUT = {"hang": "0.3", "crash": str(SAFETY_NET)}


@pytest.mark.parametrize("mode", ["hang", "crash"])
def test_the_breaker_stops_a_run_against_an_adapter_that_cannot_answer(tmp_path: Path, mode: str) -> None:
    adapter = f"exec:{shlex.quote(sys.executable)} {shlex.quote(str(HANG))} {mode}"
    run = certify(tmp_path, "--adapter", adapter, "--no-chaos", "--timeout", TIMEOUT[mode], "--breaker", "3")
    inc = assert_incomplete(run, "breaker")
    ran = [t for t in run.doc["tests"] if t["outcome"] != "skipped"]
    assert len(ran) == 3 and all(t["outcome"] == "error" for t in ran), ran
    assert inc["tests"]["planned"] > 100
    assert f"breaker: adapter {adapter}" in inc["message"]
    code = "timeout" if mode == "hang" else "adapter_crashed"
    assert inc["message"].count(code) >= 3, inc["message"]
    assert_nothing_left(run)


def test_the_breaker_works_per_worker_under_xdist(tmp_path: Path) -> None:
    """Each xdist worker counts its own tests; the first to trip stops the whole run, so at most
    the other worker's tests in flight run past it (two workers: at most 2 x 3 tests)."""
    adapter = f"exec:{shlex.quote(sys.executable)} {shlex.quote(str(HANG))} crash"
    run = certify(tmp_path, "--adapter", adapter, "--no-chaos", "--timeout", TIMEOUT["crash"], "--breaker", "3", "-n", "2")
    inc = assert_incomplete(run, "breaker")
    ran = [t for t in run.doc["tests"] if t["outcome"] != "skipped"]
    assert 3 <= len(ran) <= 6 and all(t["outcome"] == "error" for t in ran), ran
    assert inc["tests"]["planned"] > 100 and f"breaker: adapter {adapter}" in inc["message"]
    assert_nothing_left(run)


def test_without_the_breaker_every_planned_test_runs(tmp_path: Path) -> None:
    """--breaker 0: the same adapter is tried on every planned test (ERROR, not INCOMPLETE)."""
    adapter = f"exec:{shlex.quote(sys.executable)} {shlex.quote(str(HANG))} crash"
    run = certify(tmp_path, "--adapter", adapter, "--no-chaos", "--timeout", TIMEOUT["crash"], "--breaker", "0",
                  "-k", "core.status.enum")
    assert run.rc == 2 and run.doc["verdict"] == "ERROR" and run.doc["run"]["incomplete"] is None
    ran = [t for t in run.doc["tests"] if t["outcome"] != "skipped"]
    assert len(ran) > 3 and all(t["outcome"] == "error" for t in ran)
    assert_nothing_left(run)


def test_a_worker_that_dies_leaves_the_run_incomplete(tmp_path: Path) -> None:
    """An xdist worker process dies in the middle of a test (the adapter ends it): the other tests
    run, but that one has no outcome, so the run is INCOMPLETE (unfinished), never certified."""
    marker = tmp_path / "exited"
    run = certify(tmp_path, "--adapter", "python:swallowing_adapter:ExitsOnce", "--no-chaos", "-n", "2",
                  "-k", "core.status.enum", env_extra={"LEDGERCHECK_TEST_EXIT_ONCE": str(marker)})
    assert marker.exists()
    inc = assert_incomplete(run, "unfinished")
    assert len(inc["tests"]["unfinished"]) == 1 and inc["tests"]["finished"] == inc["tests"]["planned"] - 1, inc
    assert_nothing_left(run)


def test_an_uninterrupted_run_is_complete(tmp_path: Path) -> None:
    run = certify(tmp_path, "--adapter", "reference", "--no-chaos", "-k", "core.claim")
    assert run.doc["run"]["incomplete"] is None and run.doc["verdict"] != "INCOMPLETE", run.doc["run"]
    assert "INCOMPLETE" not in run.out + run.err
    assert_nothing_left(run)
