"""Model-based random exploration with hypothesis' stateful testing.

The rules are the contract's operations (only those of claimed profiles are enabled); the
arguments are drawn from the model's current state (existing items, live and stale lease
tokens, receipts, in-flight messages) and from faker-made pools of sources and payloads.
Virtual time moves in steps chosen around the contract's own boundaries (renew interval, ttl,
ttl + grace, waiting budgets, backoff bounds), so the interesting instants are visited often.

Every operation goes through ``Harness.do``: the model checks the answer and every touched
item is read back and compared (snapshot, events and, with the eventlog profile, the fold);
a periodic full comparison and one at teardown catch anything else.  A failure shrinks to a
short program, which is also saved as a JSON trace that replays without hypothesis.
"""

from __future__ import annotations

from typing import Any

from faker import Faker
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from ledgercheck.spec import Spec

from .clock import QUANTUM
from .harness import Harness

PROFILES = {
    "ci": {"max_examples": 40, "stateful_step_count": 40},
    "dev": {"max_examples": 150, "stateful_step_count": 50},
    "thorough": {"max_examples": 2000, "stateful_step_count": 100},
}
FULL_CHECK_EVERY = 10


def run_machine(machine: type[RuleBasedStateMachine], opts: settings, seed: int | None) -> None:
    """Run a state machine as a test, with a fixed seed when one is given (reproducible runs)."""
    import hypothesis.core as hcore
    from hypothesis.stateful import run_state_machine_as_test

    old = hcore.global_force_seed
    hcore.global_force_seed = seed if seed is not None else old
    try:
        run_state_machine_as_test(machine, settings=opts)
    finally:
        hcore.global_force_seed = old


def hypothesis_settings(profile: str, database: Any = None, **over: Any) -> settings:
    if profile not in PROFILES:
        raise ValueError(f"unknown hypothesis profile {profile!r} (choose from {', '.join(PROFILES)})")
    opts: dict[str, Any] = dict(PROFILES[profile])
    opts.update(over)
    return settings(
        deadline=None,
        database=database,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink),
        print_blob=False,
        **opts,
    )


def _q(x: float) -> float:
    return max(QUANTUM, round(x / QUANTUM) * QUANTUM)


def time_steps(spec: Spec) -> list[float]:
    """Durations around the contract's boundaries (all multiples of the clock quantum)."""
    vals: set[float] = {QUANTUM, 1.0}
    for lt in [spec.lease_default, *spec.lease_by_source.values()]:
        for v in (lt.renew_interval, lt.ttl, lt.ttl + lt.grace, lt.grace):
            vals |= {_q(v - QUANTUM), _q(v), _q(v + QUANTUM)}
    for v in spec.waiting_timeouts.values():
        vals |= {_q(v), _q(v + QUANTUM)}
    p = spec.retry_default
    for n in range(1, p.max_attempts + 1):
        vals.add(_q(spec.backoff_base(p, n)))
    ex = spec.phase_timeout("execution")
    if ex:
        vals.add(_q(ex + QUANTUM))
    return sorted(vals)


class Pools:
    """Faker-made values, generated once per machine class from a fixed seed."""

    def __init__(self, seed: int = 1234) -> None:
        fk = Faker()
        fk.seed_instance(seed)
        self.source_ids = [f"{fk.user_name()}-{fk.random_int(100, 999)}" for _ in range(6)]
        self.run_ids = [fk.date_this_year().isoformat() for _ in range(3)]
        self.payloads = [{"text": fk.sentence(), "from": fk.email()} for _ in range(4)] + [{"amount": 10}, {"amount": 11}]
        self.owners = [f"worker-{fk.first_name().lower()}" for _ in range(3)]
        self.refs = [f"{fk.uri_path()}#{fk.random_int(1, 99)}" for _ in range(3)]
        self.tools = ["email.send", "calendar.create", "github.comment", "llm.call"]
        self.senders = [fk.first_name().lower() for _ in range(3)]
        self.destinations = [f"telegram:{fk.random_int(1000, 9999)}", f"mail:{fk.email()}"]


def make_machine(h: Harness, full_check_every: int = FULL_CHECK_EVERY) -> type[RuleBasedStateMachine]:
    spec = h.spec
    pools = Pools()
    steps = time_steps(spec)
    kinds = list(spec.waiting_statuses)
    classes = list(spec.step_classes)
    errors = list(spec.error_classes)
    terminal = list(spec.terminal_statuses)
    idx = st.integers(min_value=0, max_value=7)

    def items(m: Any) -> list[str]:
        return list(h.model.items)

    def pick(m: Any, i: int) -> str:
        ids = items(m)
        return ids[i % len(ids)]

    def token_for(wid: str, choice: str) -> str:
        toks = h.model.tokens.get(wid, [])
        if choice == "live" and h.model.items[wid]["lease_token"]:
            return h.model.items[wid]["lease_token"]
        if choice == "stale" and toks:
            return toks[0]
        return "forged-token"

    tokens = st.sampled_from(["live", "live", "live", "stale", "forged"])
    enabled = frozenset(op for op in spec.operations if h.claims(op))

    class LedgerMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            h.fresh()
            self.steps = 0

        @initialize()
        def start(self) -> None:
            pass

        # ---------------------------------------------------------- time
        @rule(dt=st.sampled_from(steps))
        def advance(self, dt: float) -> None:
            h.advance(dt)

        # ---------------------------------------------------------- core
        @rule(src=st.sampled_from(list(spec.source_systems)), unit=st.integers(0, 5), run=st.integers(0, 2),
              prio=st.one_of(st.none(), st.integers(spec.priority_min - 1, spec.priority_max + 1)),
              payload=st.integers(0, 5), with_run=st.booleans(), policy=st.sampled_from([None, None, {"max_attempts": 1},
                                                                                        {"jitter": "none", "initial_backoff": 5.0}]))
        def create(self, src: str, unit: int, run: int, prio: int | None, payload: int, with_run: bool, policy: Any) -> None:
            args: dict[str, Any] = {"source_system": src, "source_id": pools.source_ids[unit], "payload": pools.payloads[payload]}
            if with_run or src in spec.run_id_required_for and run:
                args["source_run_id"] = pools.run_ids[run]
            if prio is not None:
                args["priority"] = prio
            if policy is not None and "fail" in enabled:
                args["retry_policy"] = policy
            h.do("create", **args)

        @precondition(lambda self: h.model.items)
        @rule(i=idx, owner=st.integers(0, 2), by_id=st.booleans())
        def claim(self, i: int, owner: int, by_id: bool) -> None:
            h.do("claim", owner=pools.owners[owner], work_id=pick(self, i) if by_id else None)

        @precondition(lambda self: h.model.items)
        @rule(i=idx, status=st.sampled_from(terminal + ["waiting_user", "running"]), tok=tokens, with_result=st.booleans())
        def close_out(self, i: int, status: str, tok: str, with_result: bool) -> None:
            wid = pick(self, i)
            h.do("close_out", work_id=wid, token=token_for(wid, tok), status=status, result={"ok": i} if with_result else None)

        @precondition(lambda self: h.model.items)
        @rule(i=idx)
        def cancel(self, i: int) -> None:
            h.do("cancel", work_id=pick(self, i))

        @precondition(lambda self: h.model.items)
        @rule(i=idx)
        def requeue(self, i: int) -> None:
            h.do("requeue", work_id=pick(self, i))

        @rule()
        def expire(self) -> None:
            h.do("expire")

        @precondition(lambda self: h.model.items)
        @rule(i=idx)
        def get(self, i: int) -> None:
            h.do("get", work_id=pick(self, i))

        @rule(status=st.one_of(st.none(), st.sampled_from(list(spec.statuses))))
        def list_(self, status: str | None) -> None:
            h.do("list", status=status)

        # ---------------------------------------------------------- lease
        @precondition(lambda self: h.model.items and "renew" in enabled)
        @rule(i=idx, tok=tokens)
        def renew(self, i: int, tok: str) -> None:
            wid = pick(self, i)
            h.do("renew", work_id=wid, token=token_for(wid, tok))

        @precondition(lambda self: "active" in enabled)
        @rule()
        def active(self) -> None:
            h.do("active")

        # ---------------------------------------------------------- waiting
        @precondition(lambda self: h.model.items and "set_waiting" in enabled)
        @rule(i=idx, kind=st.sampled_from(kinds), ref=st.sampled_from([0, 1, 2, -1]), tok=tokens,
              timeout=st.sampled_from([None, None, 60.0, 600.0]))
        def set_waiting(self, i: int, kind: str, ref: int, tok: str, timeout: float | None) -> None:
            wid = pick(self, i)
            h.do("set_waiting", work_id=wid, token=token_for(wid, tok), kind=kind, ref=pools.refs[ref] if ref >= 0 else "",
                 timeout=timeout)

        @precondition(lambda self: h.model.items and "resume" in enabled)
        @rule(i=idx, owner=st.integers(0, 2))
        def resume(self, i: int, owner: int) -> None:
            h.do("resume", work_id=pick(self, i), owner=pools.owners[owner])

        # ---------------------------------------------------------- retry
        @precondition(lambda self: h.model.items and "fail" in enabled)
        @rule(i=idx, cls=st.sampled_from(errors), tok=tokens)
        def fail(self, i: int, cls: str, tok: str) -> None:
            wid = pick(self, i)
            h.do("fail", work_id=wid, token=token_for(wid, tok), error_class=cls, message="upstream said no")

        @precondition(lambda self: "promote_due" in enabled)
        @rule()
        def promote_due(self) -> None:
            h.do("promote_due")

        # ---------------------------------------------------------- idempotency
        @precondition(lambda self: h.model.items and "effect_begin" in enabled)
        @rule(i=idx, step=st.integers(0, 2), tool=st.integers(0, 3), inp=st.integers(0, 5), cls=st.sampled_from(classes),
              tok=st.sampled_from(["live", "live", "none", "stale"]))
        def effect_begin(self, i: int, step: int, tool: int, inp: int, cls: str, tok: str) -> None:
            wid = pick(self, i)
            h.do("effect_begin", work_id=wid, step_id=f"step-{step}", tool=pools.tools[tool], input=pools.payloads[inp],
                 step_class=cls, token=None if tok == "none" else token_for(wid, tok))

        @precondition(lambda self: h.model.receipts and "effect_record" in enabled)
        @rule(r=idx, right_hash=st.booleans(), result=st.integers(0, 3), tok=st.sampled_from(["live", "none", "stale"]))
        def effect_record(self, r: int, right_hash: bool, result: int, tok: str) -> None:
            keys = h.model.receipt_order
            rec = h.model.receipts[keys[r % len(keys)]]
            ih = rec["input_hash"] if right_hash else spec.input_hash({"tampered": result})
            h.do("effect_record", key=rec["key"], input_hash=ih, result={"provider_id": f"p-{result}"},
                 token=None if tok == "none" else token_for(rec["work_id"], tok))

        @precondition(lambda self: h.model.receipts and "effect_mark" in enabled)
        @rule(r=idx, state=st.sampled_from(["unknown", "needs_inspection", "pending"]))
        def effect_mark(self, r: int, state: str) -> None:
            keys = h.model.receipt_order
            h.do("effect_mark", key=keys[r % len(keys)], state=state)

        @precondition(lambda self: "effect_lookup" in enabled)
        @rule(r=idx, known=st.booleans())
        def effect_lookup(self, r: int, known: bool) -> None:
            keys = h.model.receipt_order
            h.do("effect_lookup", key=keys[r % len(keys)] if known and keys else "0" * 63 + str(r % 10))

        @precondition(lambda self: h.model.items and "effect_list" in enabled)
        @rule(i=idx)
        def effect_list(self, i: int) -> None:
            h.do("effect_list", work_id=pick(self, i))

        # ---------------------------------------------------------- recovery
        @precondition(lambda self: "recover" in enabled)
        @rule()
        def recover(self) -> None:
            h.do("recover")

        # ---------------------------------------------------------- inbox
        @precondition(lambda self: "inbox_deliver" in enabled)
        @rule(m=st.integers(0, 9), sender=st.integers(0, 2))
        def inbox_deliver(self, m: int, sender: int) -> None:
            h.do("inbox_deliver", recipient="agent", message_id=f"msg-{m}", sender=pools.senders[m % 3 if sender else sender],
                 body={"n": m})

        @precondition(lambda self: "inbox_drain" in enabled)
        @rule(n=st.one_of(st.none(), st.integers(1, 4)))
        def inbox_drain(self, n: int | None) -> None:
            h.do("inbox_drain", recipient="agent", max=n)

        def _inflight(self) -> list[str]:
            return [m["message_id"] for m in h.model.inbox.get("agent", []) if m["state"] == "inflight"]

        @precondition(lambda self: "inbox_ack" in enabled and self._inflight())
        @rule(i=idx)
        def inbox_ack(self, i: int) -> None:
            ids = self._inflight()
            h.do("inbox_ack", recipient="agent", message_id=ids[i % len(ids)])

        @precondition(lambda self: "inbox_nack" in enabled and self._inflight())
        @rule(i=idx)
        def inbox_nack(self, i: int) -> None:
            ids = self._inflight()
            h.do("inbox_nack", recipient="agent", message_id=ids[i % len(ids)], error="handler failed")

        @precondition(lambda self: "inbox_dead" in enabled)
        @rule()
        def inbox_dead(self) -> None:
            h.do("inbox_dead", recipient="agent")

        # ---------------------------------------------------------- outbox
        @precondition(lambda self: "outbox_enqueue" in enabled)
        @rule(k=st.integers(0, 4), payload=st.integers(0, 5), dest=st.integers(0, 1))
        def outbox_enqueue(self, k: int, payload: int, dest: int) -> None:
            h.do("outbox_enqueue", key=f"reply-{k}", destination=pools.destinations[dest], payload=pools.payloads[payload])

        @precondition(lambda self: "outbox_pending" in enabled)
        @rule(n=st.one_of(st.none(), st.integers(1, 3)))
        def outbox_pending(self, n: int | None) -> None:
            h.do("outbox_pending", max=n)

        @precondition(lambda self: "outbox_mark_sent" in enabled and h.model.outbox_order)
        @rule(k=idx, ref=st.integers(0, 99))
        def outbox_mark_sent(self, k: int, ref: int) -> None:
            keys = h.model.outbox_order
            h.do("outbox_mark_sent", key=keys[k % len(keys)], provider_ref=f"prov-{ref}")

        # ---------------------------------------------------------- event log
        @precondition(lambda self: "log_append" in enabled)
        @rule(stream=st.integers(0, 1), off=st.sampled_from([0, 0, 0, -1, 1]), kind=st.sampled_from(["run.started", "tool.called"]))
        def log_append(self, stream: int, off: int, kind: str) -> None:
            s = f"stream-{stream}"
            last = spec.first_seq - 1 + len(h.model.logs.get(s, []))
            h.do("log_append", stream=s, expected_seq=max(0, last + off), kind=kind, payload={"off": off})

        @precondition(lambda self: "log_read" in enabled)
        @rule(stream=st.integers(0, 1), start=st.one_of(st.none(), st.integers(0, 4)))
        def log_read(self, stream: int, start: int | None) -> None:
            h.do("log_read", stream=f"stream-{stream}", from_seq=start)

        # ---------------------------------------------------------- invariants
        @invariant()
        def periodic_full_check(self) -> None:
            self.steps += 1
            if self.steps % full_check_every == 0:
                h.verify_all()

        def teardown(self) -> None:
            h.verify_all()

    # rules of operations the adapter does not claim are removed outright, so hypothesis never
    # spends a draw or a precondition check on them
    for name in list(vars(LedgerMachine)):
        op = name.rstrip("_")
        if op in spec.operations and op not in enabled:
            delattr(LedgerMachine, name)
    LedgerMachine.__name__ = LedgerMachine.__qualname__ = "LedgerMachine"
    return LedgerMachine
