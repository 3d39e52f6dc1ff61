"""`ledgercheck crash ...`: bad path options are one line and exit 2; an adapter's own crash
points over the wire are counted (not guessed from the worker's count, which cannot see them),
and only occurrences the run reaches are windows."""

from __future__ import annotations

import pytest
from ledgercheck.chaos.crash.commands import add_parser
from ledgercheck.chaos.crash.exploration import Explorer, explore
from ledgercheck.chaos.safety.workload import Workload, default_workload
from ledgercheck.spec import Spec

EXEC = "exec:ledgercheck serve reference"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    import argparse

    p = argparse.ArgumentParser()
    add_parser(p.add_subparsers())
    args = p.parse_args(["crash", *argv])
    rc = args.func(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("argv, message", [
    (["run", "--point", "after_claim", "--tmp-dir", "/nonexistent"], "--tmp-dir /nonexistent: no such directory"),
    (["explore", "--tmp-dir", "/nonexistent"], "--tmp-dir /nonexistent: no such directory"),
    (["storm", "--tmp-dir", "/nonexistent"], "--tmp-dir /nonexistent: no such directory"),
    (["points", "--tmp-dir", "/nonexistent"], "--tmp-dir /nonexistent: no such directory"),
    (["replay", "r.json", "--tmp-dir", "/nonexistent"], "--tmp-dir /nonexistent: no such directory"),
    (["run", "--point", "after_claim", "--tmp-dir", "/etc/hostname"], "not a directory"),
    (["run", "--point", "after_claim", "--replay-dir", "/etc/hostname/replays"], "--replay-dir /etc/hostname/replays"),
    (["run", "--point", "after_claim", "--occurrence", "0"], "--occurrence must be 1 or more"),
])
def test_bad_paths_give_one_line_and_exit_2(capsys, argv: list[str], message: str) -> None:
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and message in err, err


@pytest.fixture(scope="module")
def small(spec: Spec) -> Workload:
    wl = default_workload(spec, 0, waiting=True)
    return Workload(seed=wl.seed, items=wl.items[:1], name="one item")


def test_an_adapter_point_over_the_wire_is_counted_and_only_reached_occurrences_are_windows(
            spec: Spec, scratch: str | None, small: Workload, tmp_path) -> None:
    with Explorer("reference", spec, workload=small, tmp_root=scratch) as ex:
        n = ex.occurrences("ledger.after_commit")  # in-process: counted by the baseline
    assert n >= 2
    with Explorer(EXEC, spec, workload=small, tmp_root=scratch) as ex:
        assert ex.counted("ledger.after_commit") is None
        assert ex.occurrences("ledger.after_commit") == n  # over the wire: counted by probing
        msg = ex.not_reached("ledger.after_commit", n + 2)
    assert f" {n} time(s)" in msg and " 0 time(s)" not in msg  # `crash run --occurrence N+2` says this


def test_an_adapter_points_windows_over_the_wire_are_every_reached_occurrence_on_both_lanes(
            spec: Spec, scratch: str | None, small: Workload, tmp_path) -> None:
    """explore runs an adapter point's windows over the wire 1, 2, ... on two lanes until the
    first the run does not reach: exactly the occurrences the in-process baseline counts, each a
    real kill that passes, none past the end (a window one lane ran past it is dropped)."""
    with Explorer("reference", spec, workload=small, tmp_root=scratch) as ex:
        n = ex.occurrences("ledger.after_commit")
    seen: list[int] = []
    ws = explore(EXEC, spec, workload=small, points=["ledger.after_commit"], jobs=2, scan_kills=False,
                 tmp_root=scratch, replay_dir=str(tmp_path), progress=lambda done, total, w: seen.append(w["occurrence"]))
    assert [w["occurrence"] for w in ws] == list(range(1, n + 1))
    assert all(w["verdict"] == "pass" and w["mode"] == "kill" for w in ws), [w["message"] for w in ws]
    assert sorted(seen)[: n] == list(range(1, n + 1))  # progress saw each window as it ended
