"""`ledgercheck crash ...`: exit codes, one-line errors, replay files that reproduce the kill."""

from __future__ import annotations

import json
import shlex

import pytest

from ledgercheck.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["crash", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_points_lists_worker_and_adapter_points(capsys) -> None:
    rc, out, _ = run(capsys, "points", "--json")
    doc = json.loads(out)
    assert rc == 0
    assert [p["point"] for p in doc["worker_points"]][:3] == ["after_claim", "after_intent_before_submit",
                                                              "after_submit_before_record"]
    assert doc["adapter_points"] == ["ledger.after_event_insert", "ledger.after_commit"]
    assert doc["worker_points"][2]["matrix"]["non_idempotent_without_lookup"] == {"decision": "quarantine",
                                                                                  "effects": "at_most_once"}


def test_run_one_window_json(capsys, scratch) -> None:
    args = ["run", "--point", "after_submit_before_record", "--occurrence", "4", "--json"]
    rc, out, _ = run(capsys, *args, *(["--tmp-dir", scratch] if scratch else []))
    w = json.loads(out)
    assert rc == 0
    assert (w["verdict"], w["step_class"], w["decision_observed"]) == ("pass", "non_idempotent_with_lookup", "reconcile")


def test_failing_window_writes_a_replay_that_reproduces_it(capsys, tmp_path, scratch) -> None:
    tmp = ["--tmp-dir", scratch] if scratch else []
    rc, out, _ = run(capsys, "run", "--adapter", "python:broken_ledgers:EagerReceipt", "--point",
                     "after_intent_before_submit", "--occurrence", "2", "--replay-dir", str(tmp_path), *tmp)
    assert rc == 1
    line = next(ln for ln in out.splitlines() if "reproduce:" in ln)
    cmd = line.split("reproduce:", 1)[1].strip()
    words = shlex.split(cmd)
    assert words[:3] == ["ledgercheck", "crash", "replay"]
    # the file records a python: adapter, which a replay file may not choose: the command names it
    assert words[4:] == ["--adapter", "python:broken_ledgers:EagerReceipt"]
    path = words[3]
    doc = json.loads(open(path, encoding="utf-8").read())
    assert (doc["point"], doc["occurrence"], doc["mode"]) == ("after_intent_before_submit", 2, "kill")
    rc, _, err = run(capsys, "replay", path, *tmp)
    assert rc == 2 and "does not choose code to run" in err and len(err.splitlines()) == 1
    rc, out, _ = run(capsys, *words[2:], "--json", *tmp)
    again = json.loads(out)
    assert rc == 1
    assert again["verdict"] == "fail" and "recovery.marker_kept" in again["message"]
    assert again["clauses"] == doc["recorded"]["clauses"]
    assert again["replay_file"] == path
    rc, out, _ = run(capsys, "replay", path, "--adapter", "reference", "--json", *tmp)
    assert rc == 0 and json.loads(out)["verdict"] == "pass"  # the same kill against a correct ledger


@pytest.mark.parametrize("content, message", [
    ("{not json", "invalid JSON"),
    ('{"format": "something-else"}', "not a ledgercheck crash replay file"),
    ('{"format": "ledgercheck-crash-replay", "version": 1, "kind": "window", "adapter": "reference"}', "missing"),
    ('{"format": "ledgercheck-crash-replay", "version": 9}', "version 9"),
])
def test_corrupt_replay_files_give_one_line_and_exit_2(capsys, tmp_path, content: str, message: str) -> None:
    f = tmp_path / "replay.json"
    f.write_text(content)
    rc, out, err = run(capsys, "replay", str(f))
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and message in err and str(f) in err


def test_replay_from_another_contract_is_refused(capsys, tmp_path) -> None:
    doc = {"format": "ledgercheck-crash-replay", "version": 1, "kind": "window", "adapter": "reference", "seed": 0,
           "workload": {"items": []}, "point": "after_claim", "occurrence": 1, "mode": "kill", "spec_digest": "0" * 64}
    f = tmp_path / "r.json"
    f.write_text(json.dumps(doc))
    rc, _, err = run(capsys, "replay", str(f))
    assert rc == 2 and "recorded against contract 000000000000" in err


@pytest.mark.parametrize("argv, message", [
    (["run", "--point", "after_lunch"], "unknown crash point 'after_lunch'"),
    (["run", "--point", "after_claim", "--occurrence", "99"], "not reached"),
    (["run", "--adapter", "exec:false", "--point", "after_claim"], "adapter exec:false"),
    (["run", "--adapter", "python:no_such_module:Factory", "--point", "after_claim"], "cannot import"),
    (["explore", "--workload", "/nonexistent/workload.json"], "/nonexistent/workload.json"),
])
def test_bad_input_gives_one_line_and_exit_2(capsys, argv: list[str], message: str) -> None:
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and message in err


def test_an_adapter_that_dies_is_an_error_not_a_pass(capsys, scratch) -> None:
    tmp = ["--tmp-dir", scratch] if scratch else []
    rc, out, _ = run(capsys, "run", "--adapter", "python:broken_ledgers:DiesOnRecover", "--point", "after_claim", "--json", *tmp)
    w = json.loads(out)
    assert rc == 1 and w["verdict"] == "error" and "recover" in w["message"] and "died" in w["message"]


def test_an_adapter_that_hangs_is_an_error_within_the_timeout(capsys, scratch) -> None:
    tmp = ["--tmp-dir", scratch] if scratch else []
    rc, out, _ = run(capsys, "run", "--adapter", "python:broken_ledgers:HangsOnRecover", "--point", "after_claim",
                     "--timeout", "3", "--json", *tmp)
    w = json.loads(out)
    assert rc == 1 and w["verdict"] == "error" and "did not answer within 3s" in w["message"]


def test_explore_table_and_exit_code(capsys, scratch, tmp_path) -> None:
    tmp = ["--tmp-dir", scratch] if scratch else []
    rc, out, _ = run(capsys, "explore", "--points", "after_waiting_set", "--no-fencing", *tmp)
    assert rc == 0
    assert out.splitlines()[0].split()[:3] == ["point", "class", "occ"]
    assert "5 windows: 5 passed, 0 failed, 0 errors" in out
    rc, out, _ = run(capsys, "explore", "--adapter", "python:broken_ledgers:WaitingIsStale", "--points",
                     "after_waiting_set", "--max-occurrence", "2", "--no-fencing", "--replay-dir", str(tmp_path), *tmp)
    assert rc == 1
    assert out.count("reproduce: ledgercheck crash replay") == 2


def test_crash_testing_refuses_an_adapter_without_the_event_trail() -> None:
    """The crash workers read each item's event trail: an adapter that does not claim it is
    refused in one line naming the profile, and the same adapter claiming it is taken."""
    from ledgercheck.chaos.crash.exploration import ChaosError, check_adapter

    hs = {"profiles": ["core", "lease", "idempotency", "recovery"], "capabilities": {"clock": "injected", "durable": True}}
    with pytest.raises(ChaosError, match=r"needs profile\(s\) trail,"):
        check_adapter(hs, "exec:./queue")
    check_adapter({**hs, "profiles": [*hs["profiles"], "trail"]}, "exec:./queue")
