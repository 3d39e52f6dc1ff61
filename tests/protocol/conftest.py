"""Fixtures for the wire protocol tests: the contract, adapter commands, misbehaving adapters."""

from __future__ import annotations

import shlex
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.spec import Spec, default_spec
from ledgercheck.transport.client import WireClient
from ledgercheck.transport.wire import plain
from patience import SAFETY_NET

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ADAPTERS = HERE / "adapters"
NODE_ADAPTER = REPO / "fixtures" / "libraries" / "node" / "ledger-adapter.js"


@pytest.fixture(scope="session")
def spec() -> Spec:
    return default_spec()


@pytest.fixture(scope="session")
def contract(spec: Spec) -> dict[str, Any]:
    """The merged contract document, as the harness sends it in reset."""
    return plain(spec.document)


@pytest.fixture(scope="session")
def ledgercheck_cmd() -> str:
    exe = Path(sys.executable).with_name("ledgercheck")
    found = str(exe) if exe.exists() else shutil.which("ledgercheck")
    if not found:
        pytest.fail("the ledgercheck command is not installed next to this Python (pip install -e .)")
    return found


@pytest.fixture(scope="session")
def serve_reference(ledgercheck_cmd: str) -> str:
    """Address of the reference ledger served over the wire protocol."""
    return f"exec:{shlex.quote(ledgercheck_cmd)} serve reference"


@pytest.fixture(scope="session")
def node_address() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: the Node.js example adapter cannot run (CI installs nodejs)")
    return f"exec:{shlex.quote(node)} {shlex.quote(str(NODE_ADAPTER))}"


@pytest.fixture
def misbehaving(spec: Spec) -> Iterator[Callable[..., WireClient]]:
    """Start tests/protocol/adapters/misbehave.py in a given mode; closed after the test.  Its
    timeouts are the safety net of minutes unless a test asks for one that must expire."""
    opened: list[WireClient] = []

    def start(mode: str, timeout: float = SAFETY_NET, startup_timeout: float = SAFETY_NET) -> WireClient:
        argv = [sys.executable, str(ADAPTERS / "misbehave.py"), mode]
        c = WireClient(argv, f"exec:misbehave.py {mode}", spec, timeout=timeout, startup_timeout=startup_timeout)
        opened.append(c)
        return c

    yield start
    for c in opened:
        c.close()


CHAOS_CLAUSES = {"recovery.no_loss", "recovery.effects_allowed", "recovery.fencing_after_takeover"}


@pytest.fixture
def certified_without_chaos(tmp_path, certify_budget) -> Callable[..., dict[str, Any]]:
    """certified_without_chaos(adapter, seed, env) runs ``ledgercheck certify --no-chaos`` on an
    independent ledger and asserts what a correct one gets: no failure or error outside the
    clauses only crash windows decide, eight profiles certified, and exactly those clauses left
    undecided (so the recovery profile is not certified).  Returns the results document."""
    import json
    import subprocess

    def run(adapter: str, seed: int, env: dict[str, str]) -> dict[str, Any]:
        out = tmp_path / "out"
        proc = subprocess.run([sys.executable, "-m", "ledgercheck", "certify", "--adapter", adapter, "--seed", str(seed),
                               "--no-chaos", "--out", str(out), "--artifacts", str(tmp_path / "artifacts"), "--json", *certify_budget],
                              capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
        doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
        bad = [f"{t['nodeid']}: {(t['message'] or '')[:300]}" for t in doc["tests"]
               if t["outcome"] in ("failed", "error") and t["clause"] not in CHAOS_CLAUSES]
        assert not bad, "\n".join(bad[:5]) + proc.stderr[-1000:]
        verdicts = {p: v["verdict"] for p, v in doc["profiles"]["verdicts"].items()}
        # it claims every profile of the contract (the eventsourced ledger by the set's name, full)
        assert doc["profiles"]["claimed"] == doc["profiles"]["defined"] and set(verdicts) == set(doc["profiles"]["defined"])
        assert all(v == "certified" for p, v in verdicts.items() if p != "recovery"), verdicts
        # without the exploration only the clauses crash windows decide stay open
        undecided = {c["id"] for c in doc["clauses"] if c["outcome"] == "error"}
        assert undecided == CHAOS_CLAUSES, undecided
        return doc

    return run
