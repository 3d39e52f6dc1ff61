"""Storms are bounded: too many workers (or kills, items, timings) are refused in one line, exit 2,
before any worker process starts -- from the command line and from a replay file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.chaos.crash import limits, storms
from ledgercheck.chaos.crash.replays import FORMAT, VERSION
from ledgercheck.spec import default_spec

from ledgercheck.cli import main


@pytest.fixture
def no_processes(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Fail loudly if a storm gets as far as creating its worker pool (the first process)."""
    started: list[Any] = []

    def pool(*a: Any, **kw: Any) -> Any:
        started.append(a)
        raise AssertionError("a storm started worker processes for parameters it should have refused")

    monkeypatch.setattr(storms, "WorkerPool", pool)
    return started


def run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["crash", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(("argv", "needle"), [
    (["--workers", "100000"], "storm workers 100000 is outside 2..64 (at most 64 worker processes"),
    (["--workers", "65"], "storm workers 65 is outside 2..64"),
    (["--workers", "65", "--max-workers", "2000"], "--max-workers must be an integer in 2..1024, not 2000"),
    (["--workers", "200", "--max-workers", "100"], "storm workers 200 is outside 2..100"),
    (["--workers", "1"], "a storm needs at least 2 workers"),
    (["--kills", "1000000000"], "storm kills 1000000000 is outside 0..10000"),
    (["--items", "10000000"], "storm items 10000000 is outside 1..100000"),
    (["--time-limit", "inf"], "storm time_limit must be a finite number"),
])
def test_storm_command_refuses_before_any_process(capsys: Any, no_processes: list[Any], argv: list[str], needle: str) -> None:
    rc, out, err = run(capsys, "storm", *argv)
    assert rc == 2 and out == ""
    line = _one_line(err)
    assert line.startswith("ledgercheck crash storm: ") and needle in line, line
    assert no_processes == []


def _storm_file(tmp_path: Path, **params: Any) -> Path:
    doc = {"format": FORMAT, "version": VERSION, "kind": "storm", "spec_digest": default_spec().digest,
           "spec_version": default_spec().version, "contract": None, "adapter": "reference", "seed": 3,
           "worker": None, "storm": {**storms.StormParams(seed=3, workers=3, kills=5, items=40).as_dict(), **params},
           "workload": None, "schedule": [], "recorded": {"verdict": "fail", "violations": []}}
    path = tmp_path / "storm-replay.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


@pytest.mark.parametrize(("params", "needle"), [
    ({"workers": 1_000_000}, "storm workers 1000000 is outside 2..64"),
    ({"workers": "many"}, "storm workers must be an integer, not 'many'"),
    ({"workers": True}, "storm workers must be an integer, not True"),
    ({"kills": 10**12}, "storm kills 1000000000000 is outside 0..10000"),
    ({"gap_min": 5.0, "gap_max": 1.0}, "storm gap_min 5 is above gap_max 1"),
    ({"latency": -1}, "storm latency -1 is outside 0..10"),
])
def test_storm_replay_file_refused_up_front(capsys: Any, tmp_path: Path, no_processes: list[Any], params: dict[str, Any],
                                            needle: str) -> None:
    path = _storm_file(tmp_path, **params)
    rc, out, err = run(capsys, "replay", str(path))
    assert rc == 2 and out == ""
    line = _one_line(err)
    assert line.startswith(f"ledgercheck crash replay: {path}: ") and needle in line, line
    assert no_processes == []


def test_max_workers_lets_a_bigger_storm_file_through_the_check(tmp_path: Path, no_processes: list[Any]) -> None:
    """The cap is the option's: with --max-workers 100 a 70-worker file passes validation and goes on
    to start its pool (which the fixture stops at once)."""
    path = _storm_file(tmp_path, workers=70)
    with pytest.raises(AssertionError, match="started worker processes"):
        main(["crash", "replay", str(path), "--max-workers", "100"])
    assert len(no_processes) == 1


def test_parameters_within_the_caps_pass(no_processes: list[Any]) -> None:
    storms.check_storm_params(storms.StormParams(workers=limits.MAX_WORKERS, kills=limits.MAX_KILLS,
                                                 items=limits.MAX_ITEMS, gap_min=0.0, gap_max=limits.MAX_GAP))
