"""Seeded random walks through the reference ledger and the harness's Model side by side.

Every step draws an operation (valid or not: unknown ids, stale tokens, bad arguments), asks the
Model what the contract expects, runs it on the reference, and settles: any Violation fails
the test with the seed and step, so a failure replays exactly.  After each step the touched
records' snapshots, event trails and folds are compared too.  The clock moves by random
amounts and also jumps to the exact deadlines of live records (lease expiry + grace, waiting
deadlines, retry instants, execution budgets), where off-by-one mistakes live.

LEDGERCHECK_WALK_SEEDS=200 runs more seeds.
"""

from __future__ import annotations

import os
import random
from typing import Any

import pytest
from ledgercheck.conformance.model import Model
from ledgercheck.spec import Spec, default_spec
from ledgercheck.transport.client import connect

SEEDS = int(os.environ.get("LEDGERCHECK_WALK_SEEDS", "6"))
STEPS = 250
OPS = (["create"] * 4 + ["claim"] * 4 + ["renew"] * 3 + ["close_out"] * 3 + ["set_waiting"] * 2 + ["resume"] * 2 + ["fail"] * 2
       + ["expire"] * 2 + ["recover"] * 2 + ["effect_begin"] * 2
       + ["cancel", "requeue", "promote_due", "effect_record", "effect_mark", "effect_lookup", "effect_list", "active", "list",
          "get", "events", "inbox_deliver", "inbox_drain", "inbox_ack", "inbox_nack", "inbox_dead", "outbox_enqueue",
          "outbox_pending", "outbox_mark_sent", "log_append", "log_read"])


class Walker:
    def __init__(self, spec: Spec, rng: random.Random) -> None:
        self.spec, self.rng = spec, rng

    def wid(self, m: Model) -> str:
        ids = list(m.items)
        return self.rng.choice(ids) if ids and self.rng.random() < 0.95 else self.rng.choice(["nope", "000000000001" + "0" * 20])

    def token(self, m: Model, wid: str) -> str:
        toks = m.tokens.get(wid, [])
        if toks and self.rng.random() < 0.85:
            return toks[-1] if self.rng.random() < 0.85 else self.rng.choice(toks)
        return "forged-token"

    def clock(self, m: Model, now: float) -> float:
        r = self.rng.random()
        if r < 0.35:
            return now + self.rng.choice([0, 0.5, 1, 5, 15, 30, 45, 60, 75, 100, 600, 3600, 86400])
        if r < 0.55:  # jump to an exact deadline (or just past it) of a live record
            marks = []
            for it in m.items.values():
                lt = self.spec.lease_for(it["source_system"])
                if it["lease_expires_at"] is not None:
                    marks += [it["lease_expires_at"], it["lease_expires_at"] + lt.grace]
                if it["started_at"] is not None and it["lease_token"] is not None:
                    marks.append(it["started_at"] + (self.spec.phase_timeout("execution") or 0))
                for f in ("waiting_deadline", "next_retry_at"):
                    if it[f] is not None:
                        marks.append(it[f])
            future = [x for x in marks if x >= now]
            if future:
                return self.rng.choice(future) + self.rng.choice([0, 0, 0.001])
        return now

    def op(self, m: Model, now: float) -> tuple[str, dict[str, Any]]:
        rng, spec = self.rng, self.spec
        op = rng.choice(OPS)
        if op == "create":
            ss = rng.choice(list(spec.source_systems) + (["fax"] if rng.random() < 0.05 else []))
            a: dict[str, Any] = {"source_system": ss, "source_id": f"s{rng.randrange(8)}", "now": now}
            if ss in spec.run_id_required_for or rng.random() < 0.2:
                if rng.random() < 0.95:
                    a["source_run_id"] = f"r{rng.randrange(3)}"
            if rng.random() < 0.3:
                a["priority"] = rng.randrange(spec.priority_min - (1 if rng.random() < 0.1 else 0), spec.priority_max + 1)
            if rng.random() < 0.2:
                a["retry_policy"] = {"max_attempts": rng.randrange(1, 5), "jitter": rng.choice(list(spec.jitter_modes))}
            return op, a
        if op == "claim":
            a = {"owner": f"w{rng.randrange(3)}", "now": now}
            if rng.random() < 0.3:
                a["work_id"] = self.wid(m)
            return op, a
        if op in ("renew", "close_out", "set_waiting", "fail"):
            w = self.wid(m)
            a = {"work_id": w, "token": self.token(m, w), "now": now}
            if op == "close_out":
                pool = list(spec.terminal_statuses) + (["running", "waiting_user"] if rng.random() < 0.1 else [])
                a |= {"status": rng.choice(pool)}
                if rng.random() < 0.5:
                    a["result"] = {"v": rng.randrange(100)}
                if rng.random() < 0.3:
                    a["reason"] = "because"
            elif op == "set_waiting":
                a |= {"kind": rng.choice(list(spec.waiting_statuses)), "ref": rng.choice(["ref1", "ref2", "", "  "] if rng.random() < 0.1 else ["ref1"])}
                if rng.random() < 0.5:
                    a["timeout"] = rng.choice([10.0, 100.0, 1000.0])
            elif op == "fail":
                a["error_class"] = rng.choice(list(spec.error_classes))
            return op, a
        if op in ("cancel", "requeue"):
            return op, {"work_id": self.wid(m), "now": now}
        if op == "resume":
            return op, {"work_id": self.wid(m), "owner": f"w{rng.randrange(3)}", "now": now}
        if op in ("expire", "promote_due", "recover", "active"):
            return op, {"now": now}
        if op in ("get", "events", "effect_list"):
            return op, {"work_id": self.wid(m)}
        if op == "list":
            return op, {k: v for k, v in (("status", rng.choice([None, *spec.statuses])), ("quarantined", rng.choice([None, True, False])))
                        if v is not None}
        if op == "effect_begin":
            w = self.wid(m)
            a = {"work_id": w, "step_id": f"st{rng.randrange(3)}", "tool": "t", "input": {"x": rng.randrange(2)},
                 "step_class": rng.choice(list(spec.step_classes)), "now": now}
            if rng.random() < 0.5:
                a["token"] = self.token(m, w)
            return op, a
        if op in ("effect_record", "effect_mark", "effect_lookup"):
            keys = list(m.receipts)
            key = rng.choice(keys) if keys and rng.random() < 0.9 else "0" * 64
            if op == "effect_lookup":
                return op, {"key": key}
            if op == "effect_mark":
                return op, {"key": key, "state": rng.choice(list(spec.receipt_states)), "now": now}
            r = m.receipts.get(key)
            a = {"key": key, "input_hash": r["input_hash"] if r and rng.random() < 0.9 else "1" * 64, "result": {"ok": 1}, "now": now}
            if r and rng.random() < 0.5:
                a["token"] = self.token(m, r["work_id"])
            return op, a
        if op == "inbox_deliver":
            return op, {"recipient": "r", "message_id": f"m{rng.randrange(10)}", "sender": rng.choice("ab"), "body": {"n": 1}, "now": now}
        if op == "inbox_drain":
            return op, {"recipient": "r", "now": now} | ({"max": rng.randrange(1, 4)} if rng.random() < 0.5 else {})
        if op in ("inbox_ack", "inbox_nack"):
            return op, {"recipient": "r", "message_id": f"m{rng.randrange(10)}", "now": now}
        if op == "inbox_dead":
            return op, {"recipient": "r"}
        if op == "outbox_enqueue":
            a = {"key": f"k{rng.randrange(5)}", "destination": "d", "payload": {"p": rng.randrange(2)}, "now": now}
            if rng.random() < 0.3 and m.items:
                a["work_id"] = self.wid(m)
            return op, a
        if op == "outbox_pending":
            return op, {"max": rng.randrange(1, 4)} if rng.random() < 0.5 else {}
        if op == "outbox_mark_sent":
            return op, {"key": f"k{rng.randrange(5)}", "provider_ref": f"p{rng.randrange(3)}", "now": now}
        if op == "log_append":
            stream = f"s{rng.randrange(2)}"
            last = spec.first_seq - 1 + len(m.logs.get(stream, []))
            return op, {"stream": stream, "expected_seq": last if rng.random() < 0.8 else last + rng.choice([-1, 1]), "kind": "k",
                        "payload": {"a": 1}, "now": now}
        assert op == "log_read"
        return op, {"stream": f"s{rng.randrange(2)}"} | ({"from_seq": rng.randrange(0, 4)} if rng.random() < 0.5 else {})


def walk(spec: Spec, seed: int, tmp: Any, steps: int = STEPS) -> None:
    rng = random.Random(seed)
    client = connect("reference", spec)
    client.reset({"dir": str(tmp), "contract": dict(spec.document)})
    model, walker, now = Model(spec), Walker(spec, rng), 1000.0
    try:
        for step in range(steps):
            now = walker.clock(model, now)
            op, args = walker.op(model, now)
            exp = model.expect(op, args)
            out = client.call(op, **args)
            found = model.settle(op, exp, out)
            for wid in sorted(model.touched):
                snap = client.call("get", work_id=wid)
                evs = client.call("events", work_id=wid)
                assert snap.ok and evs.ok, (snap, evs)
                found += model.check_work(snap.value, wid) + model.check_events(wid, evs.value) + model.check_fold(snap.value, evs.value)
            if found:
                lines = "\n  ".join(str(v) for v in found)
                pytest.fail(f"seed {seed} step {step}: {op}({args}) -> {out}\n  {lines}")
    finally:
        client.close()


@pytest.mark.parametrize("seed", range(SEEDS))
def test_walk_matches_model(seed: int, tmp_path: Any) -> None:
    walk(default_spec(), seed, tmp_path)


@pytest.mark.parametrize("seed", range(max(2, SEEDS // 3)))
def test_walk_matches_model_under_an_overlay(seed: int, tmp_path: Any, overlay: Any) -> None:
    spec = overlay("lease:\n  ttl: 20s\n  renew_interval: 5s\n  grace: 3s\n  by_source:\n    control: {ttl: 8s, renew_interval: 2s, grace: 1s}\n"
                   "retry:\n  policy: {max_attempts: 2, initial_backoff: 1s, max_backoff: 30s, jitter: equal}\n"
                   "phases:\n  execution: {timeout: 90s}\ninbox:\n  max_nacks: 2\n")
    walk(spec, 1000 + seed, tmp_path)
