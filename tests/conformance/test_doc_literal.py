"""docs/protocol.md and the harness agree on ``reset`` and ``dir``.

``docliteral.DocLiteralLedger`` follows every sentence of docs/protocol.md about the session to the
letter: nothing its process holds survives a reset; a ``dir`` that holds a ledger is opened; no
``dir`` is a fresh ledger kept where it likes.  It is certified, every profile, crash windows
included (a harness that expected more of a reset than the documents say would fail it), and the
reopen tests open its ledger from a new adapter object, so a ledger that keeps state only in
memory still fails them (tests/conformance/test_replays_reproduce.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ledgercheck.conformance.clauses import all_cases, durable
from ledgercheck.conformance.harness import Harness
from ledgercheck.spec import default_spec
from ledgercheck.transport.client import connect

ADDRESS = "python:docliteral:DocLiteralLedger"


@pytest.mark.budgeted
@pytest.mark.thorough  # 28-29 s: the independent and event-sourced ledgers' certifications stay in the default run
def test_the_doc_literal_ledger_is_certified(cli, tmp_path: Path, certify_budget: list[str]) -> None:
    out = tmp_path / "out"
    proc = cli("certify", "--adapter", ADDRESS, "--seed", "3", "--out", str(out), "--artifacts", str(tmp_path / "art"),
               "--quiet", "--no-history", *certify_budget, cwd=tmp_path)
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    problems = [f"{t['nodeid']}: {(t.get('message') or '')[:400]}" for t in doc["tests"] if t["outcome"] in ("failed", "error", "fail")]
    assert not problems, "\n".join(problems)
    assert doc["verdict"] == "CERTIFIED" and proc.returncode == 0, proc.stdout[-1500:] + proc.stderr[-1500:]
    assert set(doc["certified_profiles"]) == set(doc["adapter"]["profiles"])
    # every reopen case the contract's clause tests define ran, and passed
    reopen = [t for t in doc["tests"] if "reopen" in t["nodeid"]]
    names = {c.name for c in all_cases(default_spec()) if "reopen" in c.name}
    assert len(reopen) == len(names) >= 3 and {t["outcome"] for t in reopen} == {"passed"}, reopen


def test_a_reopen_is_a_new_connection_on_the_same_dir(spec) -> None:
    """The reopen tests' ``reopen()`` resets a new adapter object with the same ``dir`` and closes
    the one that held it; the ledger's contents are there, and the trace records the step."""
    client = connect(ADDRESS, spec)
    h = Harness(client, spec, client.profiles)
    h.fresh()
    h.focus = "outbox.mark_sent"
    with durable(h) as reopen:
        first = h.client
        assert first is not client and h.directory is not None
        h.do("outbox_enqueue", key="k-1", destination="chat", payload={"n": 1})
        reopen()
        assert h.client is not first and h.client is not client
        out = h.do("outbox_pending")
        assert [m["key"] for m in out.value] == ["k-1"]
    assert h.client is client and h.directory is None
    assert [s["op"] for s in h.trace] == ["outbox_enqueue", "reopen", "outbox_pending"]
    client.close()


def test_there_are_reopen_cases(spec) -> None:
    names = [c.name for c in all_cases(spec) if "reopen" in c.name]
    # one per profile whose promise is about what survives a restart: retry policies, dead letters,
    # sent marks (contract 1.0), and a lane's queue of follow-up work (lanes)
    assert {n.split("[")[0] for n in names} >= {"retry.policy_override", "inbox.dead_letter", "outbox.mark_sent",
                                                "lanes.queue.durable"}, names
