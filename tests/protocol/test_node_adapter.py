"""The Node.js example adapter (fixtures/libraries/node/ledger-adapter.js), checked by the model.

Long random operation sequences, valid and invalid, go through the wire to the adapter; the
model (``Model(spec, profiles=["core", "trail", "cancel"])``) judges every answer, and every item an operation
touched is read back (snapshot and events) and compared.  The same walk runs against the
reference ledger, so a disagreement there would point at the walk, not the adapter.  With
``LEDGER_ADAPTER_BUG`` set, the adapter carries a deliberate defect and the model must name
the clause it breaks.
"""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.conformance.model import Model, Refuse, Violation
from ledgercheck.spec import Spec
from ledgercheck.transport.client import Client, WireClient, connect

NODE_ADAPTER = Path(__file__).resolve().parents[2] / "fixtures" / "libraries" / "node" / "ledger-adapter.js"
T0 = 1_000_000.0
# time steps (seconds) and their weights: mostly small, sometimes onto and just past lease limits
STEPS = [0.0, 0.125, 1.0, 5.0, 30.0, 44.875, 45.0, 45.125, 75.0, 75.125, 600.0]
STEP_WEIGHTS = [2, 3, 4, 3, 2, 1, 1, 1, 1, 1, 1]


class Walk:
    """Drives one client with the model as the judge."""

    def __init__(self, client: Client, spec: Spec, contract: dict[str, Any], seed: int = 0) -> None:
        self.client = client
        self.spec = spec
        self.model = Model(spec, profiles=["core", "trail", "cancel"])
        self.rng = random.Random(seed)
        self.now = T0
        self.log: list[str] = []
        self.violations: list[Violation] = []
        out = client.reset({"contract": contract})
        assert out.ok, out

    # -- one checked operation ----------------------------------------------------------------
    def do(self, op: str, **args: Any) -> Any:
        self.log.append(f"{op}({', '.join(f'{k}={v!r}' for k, v in args.items())})")
        exp = self.model.expect(op, args)
        out = self.client.call(op, **args)
        assert out.ok or out.definite, f"adapter error after {self.log[-5:]}: {out.code}: {out.message}"
        found = self.model.settle(op, exp, out)
        if isinstance(exp, Refuse) or not out.ok:
            wid = args.get("work_id")
            touched = [wid] if isinstance(wid, str) and wid in self.model.items else []
        else:
            touched = sorted(self.model.touched)
        for wid in touched:
            got = self.client.call("get", work_id=wid)
            assert got.ok, got
            found += self.model.check_work(got.value, wid)
            events = self.client.call("events", work_id=wid)
            assert events.ok, events
            found += self.model.check_events(wid, events.value)
        for v in found:
            self.violations.append(Violation(v.clause, f"{v.message} (step {len(self.log)}: {self.log[-1]})", v.op))
        return out.value if out.ok else None

    def verify_all(self) -> None:
        self.do("list")
        for wid in list(self.model.items):
            self.violations += self.model.check_work(self.client.call("get", work_id=wid).value, wid)
            self.violations += self.model.check_events(wid, self.client.call("events", work_id=wid).value)

    # -- random steps -------------------------------------------------------------------------
    def _wid(self, prefer: tuple[str, ...] = ()) -> Any:
        """Any item, often one in a status where the operation has an effect, sometimes junk."""
        r = self.rng.random()
        if not self.model.items or r < 0.05:
            return self.rng.choice(["no-such-work", "", 42])
        fitting = [w for w, it in self.model.items.items() if it["status"] in prefer]
        if fitting and r < 0.65:
            return self.rng.choice(fitting)
        return self.rng.choice(list(self.model.items))

    def _token(self, wid: Any) -> Any:
        it = self.model.items.get(wid) if isinstance(wid, str) else None
        r = self.rng.random()
        if it is not None and it["lease_token"] and r < 0.75:
            return it["lease_token"]
        old = self.model.tokens.get(wid, []) if isinstance(wid, str) else []
        if old and r < 0.9:
            return self.rng.choice(old)
        return self.rng.choice(["forged-token", 7])

    def step(self) -> None:
        rng = self.rng
        if rng.random() < 0.2:
            self.now += rng.choices(STEPS, STEP_WEIGHTS)[0]
        op = rng.choices(["create", "claim", "close_out", "cancel", "requeue", "expire", "get", "list", "events", "junk"],
                         weights=[18, 18, 16, 8, 8, 7, 5, 5, 5, 10])[0]
        now = self.now
        if op == "create":
            system = rng.choice(self.spec.source_systems)
            args: dict[str, Any] = {"source_system": system, "source_id": f"unit-{rng.randrange(12)}", "now": now}
            if system in self.spec.run_id_required_for or rng.random() < 0.2:
                if rng.random() < 0.9:
                    args["source_run_id"] = f"run-{rng.randrange(3)}"
            if rng.random() < 0.5:
                args["priority"] = rng.randrange(self.spec.priority_min - 1, self.spec.priority_max + 2)
            if rng.random() < 0.3:
                args["payload"] = {"n": rng.randrange(100), "text": "é✓"}
            self.do("create", **args)
        elif op == "claim":
            kw: dict[str, Any] = {"owner": rng.choice(["w1", "w2"]), "now": now}
            if rng.random() < 0.5:
                kw["work_id"] = self._wid(self.spec.terminal_statuses + (self.spec.initial_status,))
            self.do("claim", **kw)
        elif op == "close_out":
            wid = self._wid(("running",))
            status = rng.choice(list(self.spec.terminal_statuses) * 3 + list(self.spec.statuses))
            result = rng.choice([None, {"answer": rng.randrange(10)}, ["a", 1, None], "text", 3.5])
            self.do("close_out", work_id=wid, token=self._token(wid), status=status, result=result,
                    reason=rng.choice([None, "finished", "user asked"]), now=now)
        elif op in ("cancel", "requeue"):
            prefer = self.spec.terminal_statuses if op == "requeue" else tuple(s for s in self.spec.statuses if not self.spec.terminal(s))
            self.do(op, work_id=self._wid(prefer), reason=rng.choice([None, "operator"]), now=now)
        elif op == "expire":
            self.do("expire", now=now)
        elif op in ("get", "events"):
            self.do(op, work_id=self._wid())
        elif op == "list":
            self.do("list", status=rng.choice([None, *self.spec.statuses, "lost"]), quarantined=rng.choice([None, False, True]))
        else:
            self.junk()

    def junk(self) -> None:
        """Arguments of the wrong type or out of range: refused with invalid_argument."""
        rng = self.rng
        case = rng.randrange(6)
        if case == 0:
            self.do("create", source_system="fax", source_id="x", now=self.now)
        elif case == 1:
            self.do("create", source_system="manual", source_id=5, now=self.now)
        elif case == 2:
            self.do("claim", owner="w1", now="soon")
        elif case == 3:
            self.do("list", quarantined="no")
        elif case == 4:
            self.do("close_out", work_id=self._wid(), token="t", status="done", now=None)
        else:
            self.do("expire", now="later")

    def run(self, steps: int, until: str | None = None) -> list[Violation]:
        """``steps`` random steps, then a full comparison; stops early once clause ``until`` is broken."""
        for _ in range(steps):
            self.step()
            if until is not None and any(v.clause == until for v in self.violations):
                return self.violations
        self.verify_all()
        return self.violations


@pytest.fixture(scope="module")
def node(node_address: str, spec: Spec) -> Iterator[WireClient]:
    c = connect(node_address, spec, timeout=600.0)
    assert isinstance(c, WireClient)
    yield c
    c.close()


def _node_with_bug(node_address: str, spec: Spec, bug: str) -> WireClient:
    c = connect(node_address, spec, timeout=600.0, env={**os.environ, "LEDGER_ADAPTER_BUG": bug})
    assert isinstance(c, WireClient)
    return c


def test_handshake(node: WireClient) -> None:
    hs = node.handshake
    assert hs["name"] == "node-example-ledger" and hs["protocol"] == "1.0"
    assert node.profiles == ["core", "trail", "cancel"] and node.clock == "injected" and node.crash_points == []
    assert hs["artifact_sha256"] == hashlib.sha256(NODE_ADAPTER.read_bytes()).hexdigest()


def test_reset_needs_the_contract(node: WireClient, contract: dict[str, Any]) -> None:
    out = node.reset({})
    assert out.code == "invalid_argument" and "contract" in out.message
    broken = {k: v for k, v in contract.items() if k != "transitions"}
    assert node.reset({"contract": broken}).code == "invalid_argument"
    assert node.reset({"contract": contract}).ok


def test_other_profiles_are_unsupported(node: WireClient, contract: dict[str, Any]) -> None:
    assert node.reset({"contract": contract}).ok
    for op, args in [("renew", {"work_id": "w", "token": "t", "now": T0}), ("recover", {"now": T0}),
                     ("inbox_dead", {"recipient": "r"}), ("no_such_op", {})]:
        out = node.call(op, **args)
        assert out.code == "unsupported" and out.definite, (op, out)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_random_walks_have_no_violations(node: WireClient, spec: Spec, contract: dict[str, Any], seed: int) -> None:
    walk = Walk(node, spec, contract, seed)
    found = walk.run(700)
    assert not found, "\n".join(map(str, found[:10]))
    assert len(walk.model.items) >= 5 and sum(len(e) for e in walk.model.events.values()) > 40, "the walk went somewhere"


def test_the_walk_agrees_with_the_reference_ledger(spec: Spec, contract: dict[str, Any]) -> None:
    ref = connect("reference", spec)
    try:
        found = Walk(ref, spec, contract, seed=1).run(400)
    finally:
        ref.close()
    assert not found, "\n".join(map(str, found[:10]))


def test_lifecycle_cases(node: WireClient, spec: Spec, contract: dict[str, Any]) -> None:
    w = Walk(node, spec, contract)
    low = w.do("create", source_system="conversation", source_id="low", priority=7, now=T0)["work"]["work_id"]
    high = w.do("create", source_system="control", source_id="high", priority=1, now=T0 + 1)["work"]["work_id"]
    assert w.do("create", source_system="conversation", source_id="low", now=T0 + 2)["created"] is False
    claimed = w.do("claim", owner="w1", now=T0 + 3)
    assert claimed["work_id"] == high, "the lowest priority value is claimed first"
    assert claimed["lease_expires_at"] == T0 + 3 + spec.lease_for("control").ttl, "per-source lease timings"
    tok = claimed["lease_token"]
    # cancelling running work records the intent; the holder then closes it out as cancelled
    assert w.do("cancel", work_id=high, now=T0 + 4)["cancel_requested"] is True
    assert w.do("close_out", work_id=high, token="forged", status="cancelled", now=T0 + 5) is None
    assert w.do("close_out", work_id=high, token=tok, status="cancelled", now=T0 + 5)["status"] == "cancelled"
    # close-out as cancelled without a cancel request is refused
    tok2 = w.do("claim", owner="w2", work_id=low, now=T0 + 6)["lease_token"]
    assert w.do("close_out", work_id=low, token=tok2, status="cancelled", now=T0 + 7) is None
    # the lease runs out: on the limit itself nothing moves, just past it the monitor marks timeout
    limit = T0 + 6 + spec.lease_for("conversation").ttl + spec.lease_for("conversation").grace
    assert w.do("expire", now=limit) == []
    moves = w.do("expire", now=limit + 0.125)
    assert moves == [{"work_id": low, "from_status": "running", "to_status": "timeout", "reason": "lease_expired"}]
    assert w.do("close_out", work_id=low, token=tok2, status="done", now=limit + 1) is None
    assert w.do("requeue", work_id=low, now=limit + 2)["status"] == "queued"
    assert w.do("requeue", work_id=low, now=limit + 3) is None
    w.verify_all()
    assert not w.violations, "\n".join(map(str, w.violations))
    assert [e["type"] for e in w.do("events", work_id=low)] == ["work_created", "claimed", "timeout_marked", "requeued"]


BUGS = [
    ("done_to_running", "core.transition.corruption"),
    ("cancel_no_event", "trail.one_per_transition"),
    ("requeue_keeps_result", "core.requeue.terminal"),
]


@pytest.mark.parametrize(("bug", "clause"), BUGS, ids=[b[0] for b in BUGS])
def test_the_model_names_a_deliberate_defect(node_address: str, spec: Spec, contract: dict[str, Any], bug: str, clause: str) -> None:
    c = _node_with_bug(node_address, spec, bug)
    try:
        w = Walk(c, spec, contract)
        wid = w.do("create", source_system="manual", source_id="victim", now=T0)["work"]["work_id"]
        tok = w.do("claim", owner="w1", work_id=wid, now=T0 + 1)["lease_token"]
        w.do("close_out", work_id=wid, token=tok, status="done", result={"ok": True}, now=T0 + 2)
        w.do("claim", owner="w2", work_id=wid, now=T0 + 3)
        w.do("create", source_system="manual", source_id="bystander", now=T0 + 4)
        other = w.model.identity[("manual", "bystander", None)]
        w.do("cancel", work_id=other, now=T0 + 5)
        if w.model.items[wid]["status"] == "done":
            w.do("requeue", work_id=wid, now=T0 + 6)
        assert clause in {v.clause for v in w.violations}, f"{bug}: found {[str(v) for v in w.violations]}"
        assert "deliberate defect switched on" in c.stderr_tail()
        # random walks find it too, within a small budget (seeds are fixed: the result is repeatable)
        found = [seed for seed in range(3) if clause in {v.clause for v in Walk(c, spec, contract, seed).run(400, until=clause)}]
        assert found, f"{bug}: no random walk of 400 steps found {clause}"
    finally:
        c.close()
