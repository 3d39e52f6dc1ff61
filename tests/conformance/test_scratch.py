"""Scratch files go away: a certify run, an adapter that exits, and an adapter killed with SIGKILL
leave nothing in the temporary directory they were given.

Each test gives the processes it starts an empty ``TMPDIR`` of its own and lists what is in it
afterwards.  ``test_a_killed_adapter_leaves_its_directory_without_a_scratch_parent`` shows that
the listing finds a real leftover (a SIGKILLed adapter cannot clean up after itself); the others
show the cleanup that removes it: the adapters' own (reference: a finalizer; the event-sourced
ledger: on the next reset and at exit) and the run's scratch parent (transport.reaper).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from ledgercheck.services.reaper import scratch_parent

ROOT = Path(__file__).resolve().parents[2]
ES_LEDGER = ROOT / "fixtures" / "testkit" / "eventsourced" / "ledger.py"
SUBPROCESS_ADAPTER = f"exec:{sys.executable} {ES_LEDGER}"
# clauses that reset fresh ledgers and reopen one in a new process; for the subprocess adapter
# also a crash window, which kills the adapter process with SIGKILL at a named point
SELECTION = {"in-process": "core.create.initial or survives-reopen",
             "subprocess": "core.create.initial or survives-reopen or after_claim"}


def leftovers(tmp: Path) -> list[str]:
    return sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*"))


def env_with_tmp(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["TMPDIR"] = str(tmp)
    return env


@pytest.mark.parametrize(("kind", "adapter"), [("in-process", "reference"), ("subprocess", SUBPROCESS_ADAPTER)],
                         ids=["in-process", "subprocess"])
def test_certify_leaves_nothing_in_its_temp_parent(cli, tmp_path: Path, kind: str, adapter: str) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = cli("certify", "--adapter", adapter, "-k", SELECTION[kind], "--seed", "3", "--no-history",
            "--out", str(tmp_path / "out"), "--artifacts", str(tmp_path / "artifacts"), cwd=tmp_path,
            env=env_with_tmp(tmp))
    # a verdict (INCONCLUSIVE: the selection runs no case of most clauses) after the selected tests passed
    assert (tmp_path / "out" / "results.json").exists(), r.stderr
    assert re.search(r"\d+ passed", r.stdout) and not re.search(r"\d+ failed", r.stdout), r.stdout[-2000:]
    assert leftovers(tmp) == []


def run_python(code: str, tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env_with_tmp(tmp), capture_output=True, text=True,
                          timeout=600)


def test_reference_adapter_removes_its_scratch_at_exit(tmp_path: Path) -> None:
    # a thread still serving the adapter when the interpreter exits holds it to the end (a daemon
    # thread's frame is never released): only an exit-time cleanup removes its directory
    code = ("import os, tempfile, threading\n"
            "from ledgercheck.reference.adapter import ReferenceAdapter\n"
            "ready = threading.Event()\n"
            "def serve(a):\n"
            "    a.reset(); a.reset(); ready.set(); threading.Event().wait()  # serving until the exit\n"
            "threading.Thread(target=serve, args=(ReferenceAdapter(),), daemon=True).start()\n"
            "ready.wait(); print(len(os.listdir(tempfile.gettempdir())))\n")
    r = run_python(code, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1"  # it did make its scratch directory there
    assert leftovers(tmp_path) == []


def test_reference_adapter_removes_its_scratch_when_collected(tmp_path: Path) -> None:
    from ledgercheck.reference.adapter import ReferenceAdapter

    old = tempfile.tempdir
    tempfile.tempdir = str(tmp_path)
    try:
        a = ReferenceAdapter()
        a.reset()
        assert leftovers(tmp_path) != []
        a.close()
        del a
    finally:
        tempfile.tempdir = old
    assert leftovers(tmp_path) == []


def es_session(tmp: Path, lines: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ES_LEDGER)], input="".join(s + "\n" for s in lines),
                          env=env_with_tmp(tmp), capture_output=True, text=True, timeout=600)


def test_event_sourced_ledger_keeps_one_scratch_directory_and_removes_it_at_exit(tmp_path: Path) -> None:
    resets = [json.dumps({"id": i, "op": "reset", "args": {}}) for i in range(1, 4)]
    listing = '{"id": 9, "op": "list", "args": {}}'
    r = es_session(tmp_path, resets + [listing])
    assert r.returncode == 0, r.stderr
    assert r.stdout.count('"ok":true') == 4, r.stdout
    assert leftovers(tmp_path) == []


def start_killed_adapter(tmp: Path) -> None:
    """An event-sourced ledger that made its scratch directory and was then SIGKILLed."""
    proc = subprocess.Popen([sys.executable, str(ES_LEDGER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=dict(os.environ), text=True)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write('{"id": 1, "op": "reset", "args": {}}\n')
        proc.stdin.flush()
        assert '"ok":true' in proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_a_killed_adapter_leaves_its_directory_without_a_scratch_parent(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    start_killed_adapter(tmp_path)
    left = leftovers(tmp_path)
    assert left and left[0].startswith("es-ledger-"), left


def test_the_scratch_parent_removes_what_a_killed_adapter_left(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with scratch_parent() as root:
        assert os.environ["TMPDIR"] == root and tempfile.gettempdir() == root
        start_killed_adapter(tmp_path)
        assert any(p.startswith("es-ledger-") for p in os.listdir(root))
    assert os.environ["TMPDIR"] == str(tmp_path) and tempfile.gettempdir() == str(tmp_path)
    assert leftovers(tmp_path) == []
