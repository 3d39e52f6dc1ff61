"""Inputs that once broke a reader, replayed through the CLI, and the bounds checked in real processes.

``regressions/expect.json`` names each file (``KIND/NAME``, with ``#LABEL`` when one file is run
more than one way), the command (``{file}`` is the file, ``{out}`` an output folder), the exit
status and a piece of the one error line.  A new input that breaks a reader goes into that
directory with its expectation.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fuzz_support import (
    assert_contract_outcome,
    assert_nothing_written,
    assert_refused_or_done,
    cli,
    files_under,
)
from ledgercheck.spec import yamlpos

from ledgercheck import bounded

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "regressions"
EXPECT: dict[str, dict[str, Any]] = json.loads((CORPUS / "expect.json").read_text(encoding="utf-8"))
PREFIX = {"spec": None, "replay": "ledgercheck replay: ", "crash": "ledgercheck crash ", "report": "ledgercheck report: ",
          "history": "ledgercheck history: ", "certify": ""}


def test_every_corpus_file_has_an_expectation() -> None:
    files = {str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*") if p.is_file() and p.name != "expect.json"}
    named = {k.split("#")[0] for k in EXPECT}
    assert files == named, f"without expectation: {sorted(files - named)}; missing: {sorted(named - files)}"


@pytest.mark.parametrize("key", sorted(EXPECT))
def test_regression_input(key: str, tmp_path: Path) -> None:
    want = EXPECT[key]
    path = CORPUS / key.split("#")[0]
    out = tmp_path / "out"
    argv = [a.replace("{file}", str(path)).replace("{out}", str(out)) for a in want["argv"]]
    before = files_under(tmp_path)
    ran = cli(argv, tmp_path)
    assert ran.rc == want["rc"], f"exit {ran.rc}, expected {want['rc']}: {ran.err}"
    if argv[0] == "spec":
        assert_contract_outcome(ran)
    else:
        assert_refused_or_done(ran, PREFIX[argv[0]])
    assert want["err"] in ran.err, ran.err
    if ran.rc:
        assert str(path) in ran.err, f"the error does not name the file: {ran.err}"
    assert "PWNED" not in {p.name for p in tmp_path.rglob("*")}
    assert_nothing_written(before, tmp_path, allowed="out")


# ---- real processes --------------------------------------------------------------------------------


def run(argv: list[str], cwd: Path, timeout: float) -> tuple[subprocess.CompletedProcess[str], float]:
    """``python -m ledgercheck ARGV``; its result and the CPU time (user + system) it used.

    ``timeout`` is a safety net for a hang, never a verdict: the CPU time is what is judged,
    because it is the same on an idle machine and a busy one (the wall time is not)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, "-m", "ledgercheck", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return proc, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def test_the_merge_key_bomb_is_refused_within_a_second_in_a_real_process(tmp_path: Path) -> None:
    """Ten levels of ``<<: [*m, *m, ...]`` used to run past 20 s.  The second (of CPU time) is the
    issue's bound for the refusal itself: the interpreter's start-up, measured on a contract the
    loader refuses at once, is taken off.  Both take about 0.3 CPU seconds, idle or loaded."""
    bomb = CORPUS / "contract" / "merge_key_bomb.yaml"
    plain, idle = run(["spec", "validate", str(CORPUS / "contract" / "alias_bomb.yaml")], tmp_path, 600)
    proc, took = run(["spec", "validate", str(bomb)], tmp_path, 600)
    assert proc.returncode == 1 and plain.returncode == 1
    assert proc.stderr == f"{bomb}:4:12: the document expands to more than {yamlpos.MAX_VALUES} values (check its aliases and merge keys)\n"
    assert took - idle < 1.0, (took, idle)


def test_a_replay_file_does_not_start_its_command_in_a_real_process(tmp_path: Path) -> None:
    for kind in ("trace", "replay"):
        path = CORPUS / kind / "exec_adapter.json"
        argv = ["replay", str(path)] if kind == "trace" else ["crash", "replay", str(path)]
        proc, _ = run(argv, tmp_path, 600)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and "which starts a command" in proc.stderr
        assert not list(tmp_path.iterdir()), "the recorded command ran"


def test_deep_results_file_is_one_line_in_a_real_process(tmp_path: Path) -> None:
    path = CORPUS / "results" / "deep.json"
    proc, _ = run(["report", "show", str(path)], tmp_path, 600)
    assert proc.returncode == 2
    assert proc.stderr == f"ledgercheck report: {path}: nests deeper than 64 levels at line 1962, the limit for a results file\n"


# ---- the bounds themselves ---------------------------------------------------------------------------


def test_a_contract_file_over_the_size_limit_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = Path(yamlpos.__file__).parent / "contract"
    limit = max(f.stat().st_size for f in shipped.rglob("*.yaml"))  # the real limit (4 MiB) works the same
    monkeypatch.setattr(yamlpos, "MAX_BYTES", limit)
    path = tmp_path / "big.yaml"
    path.write_text("extends: default\n" + "#" * limit + "\n", encoding="utf-8")
    ran = cli(["spec", "validate", str(path)], tmp_path)
    assert ran.rc == 1
    assert ran.err == f"big.yaml: larger than {limit:,} bytes, the limit for a contract file\n"  # named as given, from here
    path.write_text("extends: default\n", encoding="utf-8")
    assert cli(["spec", "validate", str(path)], tmp_path).rc == 0


@pytest.mark.parametrize("argv, limits", [
    (["replay", "{file}", "--adapter", "reference"], "TRACE"),
    (["crash", "replay", "{file}"], "REPLAY"),
    (["report", "show", "{file}"], "RESULTS"),
])
def test_json_inputs_over_their_size_or_value_limit_are_refused(argv: list[str], limits: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    real: bounded.Limits = getattr(bounded, limits)
    small = bounded.Limits(real.what, max_bytes=5000, max_values=100)
    for module in ("ledgercheck.bounded", "ledgercheck.conformance.trace", "ledgercheck.chaos.crash.replays"):
        monkeypatch.setattr(f"{module}.{limits}", small, raising=False)
    monkeypatch.setattr("ledgercheck.reports.results.RESULTS_LIMITS", small)
    path = tmp_path / "in.json"
    for text, message in (("[" + "0," * 3000 + "0]", "larger than 5,000 bytes"),
                          ("[" + '"a",' * 200 + '"a"]', "holds more than 100 values")):
        path.write_text(text, encoding="utf-8")
        ran = cli([a.replace("{file}", str(path)) for a in argv], tmp_path)
        assert ran.rc == 2, ran.err
        assert ran.err.count("\n") == 1 and f"{path}: {message}, the limit for a {real.what}" in ran.err, ran.err


def test_json_nesting_at_the_limit_loads_and_one_deeper_is_refused() -> None:
    limits = bounded.Limits("test file", 10_000)
    ok = "[" * limits.max_depth + "]" * limits.max_depth
    assert bounded.shape_problem(ok, limits) is None
    deeper = "{\"a\": " + ok + "}"
    assert bounded.shape_problem(deeper, limits) == f"nests deeper than {limits.max_depth} levels at line 1, the limit for a test file"
    # brackets inside strings are text, not structure
    assert bounded.shape_problem(json.dumps(["[" * 500, "\\\"[[[["]), limits) is None


def test_adapter_named_on_the_command_line_wins_and_is_reported(tmp_path: Path) -> None:
    """A trace recording an exec: adapter replays against the one the user names; the output says
    which one the file recorded."""
    path = CORPUS / "trace" / "exec_adapter.json"
    ran = cli(["replay", str(path), "--adapter", "reference", "--json"], tmp_path)
    summary = json.loads(ran.out)
    assert ran.rc == 0, ran.err
    assert (summary["adapter"], summary["recorded_adapter"]) == ("reference", "exec:sh -c 'touch PWNED'")
    assert not list(tmp_path.iterdir())


# ---- certify checks the artifact hash before the suite runs ----------------------------------------------

BAD_HASH_ADAPTER = "python:bad_handshake:BadArtifactHash"


@pytest.mark.parametrize("extra, message", [
    ([], "the adapter's handshake gives artifact_sha256 'not-a-sha', which is not 64 lowercase hex digits (a SHA-256) or null"),
    (["--artifact", "{tmp}"], "--artifact {tmp}: cannot read: Is a directory"),
    (["--artifact", "{tmp}/missing.bin"], "--artifact {tmp}/missing.bin: cannot read: No such file or directory"),
])
def test_certify_refuses_a_bad_artifact_hash_before_running(extra: list[str], message: str, tmp_path: Path) -> None:
    adapter = BAD_HASH_ADAPTER if not extra else "reference"
    argv = ["certify", "--adapter", adapter, "--out", str(tmp_path / "out"), "--quiet",
            *[a.replace("{tmp}", str(tmp_path)) for a in extra]]
    ran = cli(argv, tmp_path, bound=60)
    assert ran.rc == 2
    assert ran.err == f"ledgercheck certify: {message.replace('{tmp}', str(tmp_path))}\n"
    assert not (tmp_path / "out").exists(), "the suite started"


def test_a_good_handshake_hash_is_not_refused() -> None:
    from ledgercheck.conformance.commands import artifact_problem

    assert artifact_problem(None, {"artifact_sha256": "ab" * 32}) is None
    assert artifact_problem(None, {"artifact_sha256": None}) is None
    assert artifact_problem(None, {}) is None
    assert artifact_problem(__file__, {"artifact_sha256": "not-a-sha"}) is None  # the file's hash is used instead


# ---- a trace's length and its replay's time ---------------------------------------------------------------


def test_a_trace_longer_than_the_step_limit_is_refused_before_the_adapter_starts(tmp_path: Path) -> None:
    from ledgercheck.conformance.trace import MAX_STEPS

    doc = json.loads((CORPUS / "trace" / "exec_adapter.json").read_text(encoding="utf-8"))
    doc["steps"] = [{"op": "list", "args": {}}] * (MAX_STEPS + 1)
    path = tmp_path / "long.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    ran = cli(["replay", str(path)], tmp_path)  # the recorded exec: adapter is not even looked at
    assert ran.rc == 2
    assert ran.err == f"ledgercheck replay: {path}: {MAX_STEPS + 1:,} steps, more than {MAX_STEPS:,}, the limit for a trace\n"


def test_a_replay_past_its_time_limit_stops_in_one_line(tmp_path: Path) -> None:
    """A trace can ask for work that grows with the square of its length (a list after each of
    thousands of creates), so a replay has a time limit; 0 s stops it at its first step."""
    path = CORPUS / "trace" / "exec_adapter.json"
    ran = cli(["replay", str(path), "--adapter", "reference", "--time-limit", "0"], tmp_path)
    assert ran.rc == 2
    assert ran.err == (f"ledgercheck replay: {path}: step 1 (create): the replay ran past 0s, the limit for a "
                       f"replay (--time-limit)\n")
    assert cli(["replay", str(path), "--adapter", "reference"], tmp_path).rc == 0


# ---- no false alarms: what runs write is within the bounds --------------------------------------------------


def test_replay_bounds_accept_what_runs_write(tmp_path: Path) -> None:
    """The largest storm `crash storm` lets a user run (the storms' own table, chaos/crash/limits.py),
    a negative seed and a scan-killed window load; one past each bound does not."""
    from fuzz_support import storm_replay_doc, window_replay_doc
    from ledgercheck.chaos.crash import limits
    from ledgercheck.chaos.crash.points import ChaosError
    from ledgercheck.chaos.crash.replays import MAX_OCCURRENCE, load_replay

    def loads(doc: dict[str, Any]) -> bool:
        path = tmp_path / "r.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
        try:
            load_replay(str(path), max_workers=limits.HARD_MAX_WORKERS)
        except ChaosError:
            return False
        return True

    storm = storm_replay_doc()
    storm["seed"] = storm["storm"]["seed"] = -7
    storm["storm"].update(kills=limits.MAX_KILLS, items=limits.MAX_ITEMS, workers=limits.HARD_MAX_WORKERS, time_limit=3600.0)
    assert loads(storm)
    for key, (integer, lo, hi) in limits.STORM_LIMITS.items():
        step = 1 if integer else 0.5
        for outside in (lo - step, hi + step):
            assert not loads(dict(storm, storm={**storm["storm"], key: outside})), (key, outside)
    window = window_replay_doc()
    window.update(seed=-(2**63), occurrence=MAX_OCCURRENCE, scan_kill=["ledger.after_commit", 3])
    assert loads(window)
    assert not loads(dict(window, occurrence=MAX_OCCURRENCE + 1))


def test_an_alarm_dropped_in_a_finalizer_is_kept_quiet_and_the_next_one_stops_the_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The time bound's alarm can land in a finalizer, where Python drops the exception and hands
    it to the unraisable hook (pytest fails the test on it): the bound keeps those from the hook,
    passes any other dropped exception on, and its next alarm still stops the running code.  The
    bound counts CPU time, so the finalizer and the loop work (a sleep would not move it)."""
    from fuzz_support import OverTime, time_bound

    seen: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_value))

    def work(cpu_seconds: float) -> None:
        end = time.process_time() + cpu_seconds
        while time.process_time() < end:
            pass

    class SlowFinalizer:
        def __del__(self) -> None:
            work(0.5)  # the first alarm (0.1 CPU seconds) lands here, ends it and is dropped

    class BadFinalizer:
        def __del__(self) -> None:
            raise KeyError("a finalizer's own bug")

    started = time.process_time()
    with pytest.raises(OverTime, match="CPU time"), time_bound(0.1):
        obj: Any = BadFinalizer()
        del obj
        obj = SlowFinalizer()
        del obj
        while True:  # the next alarm, 0.2 CPU seconds later, stops this loop
            pass
    # CPU seconds: the second alarm (0.3), not the first, and far from a loop nothing stopped
    assert 0.25 < time.process_time() - started < 30
    assert len(seen) == 1 and isinstance(seen[0], KeyError), seen
    assert sys.unraisablehook is not None and sys.unraisablehook.__name__ == "<lambda>"  # restored


def test_a_command_that_waits_without_working_is_stopped_by_the_safety_net() -> None:
    """The CPU-time bound never rings while the code waits (no CPU time passes): the wall-clock
    safety net stops it, and says it is a hang, not a reader's work."""
    from fuzz_support import OverTime, time_bound

    with pytest.raises(OverTime, match="a hang"), time_bound(10.0, hang_limit=0.2):
        while True:
            signal.pause()  # waits, using no CPU time, until a signal: the net's, 0.2 s on
