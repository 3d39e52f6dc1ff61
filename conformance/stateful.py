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

from collections.abc import Iterable
from typing import Any

from faker import Faker
from hypothesis import HealthCheck, Phase, settings, target
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from ledgercheck.spec import Spec
from ledgercheck.transport.clock import QUANTUM

from .budgets import PROFILES
from .harness import DriveBlocked, Harness, NotApplicable
from .model import Refuse

FULL_CHECK_EVERY = 25


def run_machine(machine: type[RuleBasedStateMachine], opts: settings, seed: int | None) -> None:
    """Run a state machine as a test, with a fixed seed when one is given (reproducible runs).

    The seed is given the way ``@hypothesis.seed`` gives it: hypothesis then still keeps and
    replays examples in ``opts.database`` (under a key of the machine's name), which it never does
    under a process-wide forced seed."""
    from hypothesis import seed as fixed_seed
    from hypothesis.stateful import run_state_machine_as_test

    if seed is not None:
        machine = fixed_seed(seed)(machine)
    run_state_machine_as_test(machine, settings=opts)


def hypothesis_settings(profile: str, database: Any = None, **over: Any) -> settings:
    if profile not in PROFILES:
        raise ValueError(f"unknown hypothesis profile {profile!r} (choose from {', '.join(PROFILES)})")
    budget = dict(PROFILES[profile])
    shrink = (Phase.shrink,) if budget.pop("shrink", True) else ()
    opts: dict[str, Any] = {"phases": (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, *shrink)}
    opts.update(budget)
    opts.update(over)
    return settings(deadline=None, database=database, suppress_health_check=list(HealthCheck), print_blob=False, **opts)


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
        ids = [f"{fk.user_name()}-{fk.random_int(100, 999)}" for _ in range(4)]
        # distinct units whose ids differ only by case, and one beyond ASCII
        self.source_ids = [*ids, ids[0].upper(), f"{ids[1]}-ünï"]
        self.run_ids = [fk.date_this_year().isoformat() for _ in range(3)]
        self.payloads = [{"text": fk.sentence(), "from": fk.email()} for _ in range(2)] + [
            # nulls (top level and nested), a nested object, non-ASCII text: kept as they are
            {"text": fk.sentence(), "reply_to": None, "meta": {"lang": "fr", "thread": None, "tags": []}},
            {"text": "réunion à 10h ✓", "from": fk.email(), "cc": [None]},
        ] + [{"amount": 10}, {"amount": 11}]
        self.owners = [f"worker-{fk.first_name().lower()}" for _ in range(3)]
        self.refs = [f"{fk.uri_path()}#{fk.random_int(1, 99)}" for _ in range(3)]
        self.tools = ["email.send", "calendar.create", "github.comment", "llm.call"]
        name = fk.first_name().lower()
        # three senders: one beyond ASCII and one differing from another only by case
        self.senders = [name, f"{fk.first_name().lower()}-ø", name.capitalize()]
        self.destinations = [f"telegram:{fk.random_int(1000, 9999)}", f"mail:{fk.email()}"]


LIFECYCLE_EXCLUDES = ("inbox_", "outbox_", "log_")
FAMILIES = ("lifecycle", "messaging")
MESSAGING_PROFILES = frozenset({"inbox", "outbox", "eventlog"})


def machine_profiles(claimed: Iterable[str], family: str) -> list[str]:
    """The profiles a machine family checks: messaging = inbox, outbox and the event-log
    streams; lifecycle = everything else (the event-log profile's fold checks included)."""
    if family == "messaging":
        return [p for p in claimed if p in MESSAGING_PROFILES]
    return [p for p in claimed if p not in ("inbox", "outbox")]


def make_machine(h: Harness, full_check_every: int = FULL_CHECK_EVERY, only: str | None = None) -> type[RuleBasedStateMachine]:
    """Build the state machine; ``only`` = "lifecycle" or "messaging" keeps that family of rules."""
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

    def pick(m: Any, i: int, where: tuple[str, ...] = ()) -> str:
        """An item for an operation.  Draws 0-5 of 8 stay among items in the statuses ``where``
        (where the operation can succeed); draws 6-7 first pick a status among those present,
        then an item in it, so rare statuses are as likely targets as common ones (negative tests)."""
        ids = items(m)
        st_ = h.model.items
        if where and i < 6:
            fit = [w for w in ids if st_[w]["status"] in where]
            if fit:
                return fit[i % len(fit)]
        present = sorted({st_[w]["status"] for w in ids})
        status = present[i % len(present)]
        fit = [w for w in ids if st_[w]["status"] == status]
        return fit[(i // len(present)) % len(fit)]

    def token_for(wid: str, choice: str) -> str:
        toks = h.model.tokens.get(wid, [])
        if choice == "live" and h.model.items[wid]["lease_token"]:
            return h.model.items[wid]["lease_token"]
        if choice == "stale":
            live = h.model.items[wid]["lease_token"]
            old = [t for t in toks if t != live]
            if old:
                return old[-1]
        return "forged-token"

    # half of the guarded writes carry the live token, half a stale (an earlier lease's, when
    # the item had one) or a forged one: fencing gets exercised as much as the happy path
    tokens = st.sampled_from(["live", "stale", "live", "forged"])

    all_statuses = list(spec.statuses)
    retryable = [c for c, r in spec.error_classes.items() if r]
    policies: list[Any] = [None, {"max_attempts": 8, "initial_backoff": 4.0, "multiplier": 3.0, "max_backoff": 20.0},
                           # a partial policy keeps the default max_backoff, which its initial_backoff may not exceed
                           {"max_attempts": 5, "jitter": "none", "initial_backoff": min(1.0, spec.retry_default.max_backoff)},
                           {"max_attempts": 4, "jitter": "equal"}]
    sources = list(spec.source_systems)

    def fresh(i: int) -> str:
        src = sources[i % len(sources)]
        run = {"source_run_id": f"probe-{len(h.model.items)}"} if src in spec.run_id_required_for else {}
        return h.do("create", source_system=src, source_id=f"probe-{len(h.model.items)}", **run).value["work"]["work_id"]

    def sweep_calls(wid: str) -> list[tuple[str, dict[str, Any]]]:
        it = h.model.items[wid]
        live = it["lease_token"]
        toks = [t for t in [live, "forged-token", *[t for t in h.model.tokens.get(wid, []) if t != live][-1:]] if t]
        calls: list[tuple[str, dict[str, Any]]] = []
        for op in ("claim", "resume"):
            if op in enabled:
                calls.append((op, {"work_id": wid, "owner": pools.owners[1]}))
        for op in ("cancel", "requeue"):
            if op in enabled:
                calls.append((op, {"work_id": wid}))
        for tok in toks:
            if "renew" in enabled:
                calls.append(("renew", {"work_id": wid, "token": tok}))
            for st_ in terminal:
                calls.append(("close_out", {"work_id": wid, "token": tok, "status": st_}))
            if "fail" in enabled:
                for cls in errors:
                    calls.append(("fail", {"work_id": wid, "token": tok, "error_class": cls}))
            if "set_waiting" in enabled:
                for kind in kinds:
                    calls.append(("set_waiting", {"work_id": wid, "token": tok, "kind": kind, "ref": pools.refs[0]}))
                    calls.append(("set_waiting", {"work_id": wid, "token": tok, "kind": kind, "ref": ""}))
            if "effect_begin" in enabled:
                calls.append(("effect_begin", {"work_id": wid, "step_id": "step-0", "tool": pools.tools[0],
                                               "input": pools.payloads[0], "step_class": classes[0], "token": tok}))
        return calls

    def boundary(it: dict[str, Any], which: str) -> float | None:
        lt = spec.lease_for(it["source_system"])
        if which == "lease_expiry":
            return it["lease_expires_at"]
        if which == "lapse":
            return None if it["lease_expires_at"] is None else it["lease_expires_at"] + lt.grace
        if which == "wait_deadline":
            return it["waiting_deadline"]
        if which == "next_retry":
            return it["next_retry_at"]
        ex = spec.phase_timeout("execution")
        return None if ex is None or it["started_at"] is None else it["started_at"] + ex
    enabled = frozenset(
        op for op in spec.operations
        if h.claims(op) and (only is None
                             or (only == "lifecycle") != op.startswith(LIFECYCLE_EXCLUDES))
    )
    monitors = [op for op in ("expire", "promote_due", "recover") if op in enabled]
    claimable = tuple(t.src for t in spec.edges_of("claim"))
    leased = tuple(n for n, s_ in spec.statuses.items() if s_.leased)
    waiting = tuple(spec.waiting_statuses.values())
    terminal_t = tuple(terminal)
    cancellable = tuple({t.src for t in spec.edges_of("cancel")} | set(spec.operations["cancel"].intent_from))

    class LedgerMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            h.fresh()
            self.steps = 0
            self.probes = 0

        @initialize()
        def start(self) -> None:
            pass

        # ---------------------------------------------------------- time
        @rule(dt=st.sampled_from(steps), then=st.sampled_from(["", *monitors]))
        def advance(self, dt: float, then: str) -> None:
            """Let time pass, then (like a real monitor loop would) maybe run a monitor."""
            h.advance(dt)
            if then:
                h.do(then)

        @precondition(lambda self: h.model.items)
        @rule(i=idx, which=st.sampled_from(["lease_expiry", "lapse", "wait_deadline", "next_retry", "exec_limit"]),
              delta=st.sampled_from([-QUANTUM, 0.0, QUANTUM]), then=st.sampled_from(["", *monitors]))
        def jump(self, i: int, which: str, delta: float, then: str) -> None:
            """Move the clock to an instant that matters for one item (just before, at, just
            after it), then maybe run a monitor at exactly that instant."""
            where = {"wait_deadline": waiting, "next_retry": ("retry_scheduled",)}.get(which, leased)
            it = h.model.items[pick(self, i, where)]
            t = boundary(it, which)
            if t is not None and t + delta > h.now():
                h.advance_to(t + delta)
            if then:
                h.do(then)

        @precondition(lambda self: h.model.items and "fail" in enabled)
        @rule(i=idx, cls=st.sampled_from(errors), times=st.integers(1, 4))
        def attempt(self, i: int, cls: str, times: int) -> None:
            """Execution attempts that fail, one after the other on one item: promote when due,
            claim, fail (retry schedules deepen fast)."""
            wid = pick(self, i, ("retry_scheduled",) + claimable)
            for _ in range(times):
                it = h.model.items[wid]
                if it["status"] == "retry_scheduled" and "promote_due" in enabled:
                    h.advance_to(it["next_retry_at"])
                    h.do("promote_due")
                if h.model.items[wid]["status"] in claimable:
                    h.do("claim", owner=pools.owners[0], work_id=wid)
                if h.model.items[wid]["status"] not in leased:
                    return
                h.do("fail", work_id=wid, token=h.model.items[wid]["lease_token"], error_class=cls)

        @precondition(lambda self: h.model.items)
        @rule(i=idx, status=st.sampled_from(list(spec.statuses)))
        def probe(self, i: int, status: str) -> None:
            """Take one item to a status along allowed edges, then try every operation the
            contract refuses there: each must be refused and change nothing.  Refusals leave the
            state alone, so one rule can try them all; every status gets its negative tests."""
            # statuses in turn (hypothesis' own draws favour repeats); odd draws use a new item
            status = all_statuses[(self.probes + i) % len(all_statuses)]
            self.probes += 1
            wid = fresh(i) if i % 2 else pick(self, i)
            try:
                h.drive(wid, status)
            except (NotApplicable, DriveBlocked):
                return
            for op, args in sweep_calls(wid):
                full = dict(args, now=h.now())
                if isinstance(h.model.expect(op, full), Refuse):
                    h.do(op, **args)

        @precondition(lambda self: h.model.items)
        @rule(i=idx, which=st.sampled_from(["lease", "wait", "retry"]), delta=st.sampled_from([-QUANTUM, 0.0, QUANTUM]),
              journal=st.sampled_from(["none", "pending", "completed"]), cls=st.sampled_from(classes))
        def edge_of_time(self, i: int, which: str, delta: float, journal: str, cls: str) -> None:
            """Take one item to the status whose clock matters, move time to just before, at or
            just after its boundary (expiry, expiry + grace, wait deadline, retry instant) and run
            the monitors there.  Leased work first gets an effect in its journal (pending or
            completed, of some step class), so the recovery scan's decisions are exercised."""
            target = {"lease": leased[0], "wait": waiting[0] if waiting else None, "retry": "retry_scheduled"}[which]
            if target is None or target not in spec.statuses:
                return
            wid = fresh(i)  # a new item, so its boundaries lie ahead
            try:
                h.drive(wid, target)
            except (NotApplicable, DriveBlocked):
                return
            it = h.model.items[wid]
            if which == "lease" and journal != "none" and "effect_begin" in enabled and it["lease_token"]:
                rec = h.do("effect_begin", work_id=wid, step_id="step-0", tool=pools.tools[i % len(pools.tools)],
                           input=pools.payloads[i % len(pools.payloads)], step_class=cls, token=it["lease_token"]).value
                if journal == "completed" and rec and "effect_record" in enabled:
                    r = rec["receipt"]
                    h.do("effect_record", key=r["key"], input_hash=r["input_hash"], result={"ok": i}, token=it["lease_token"])
            instants = {"lease": ["lease_expiry", "lapse"], "wait": ["wait_deadline"], "retry": ["next_retry"]}[which]
            for name in instants:
                t = boundary(h.model.items[wid], name)
                if t is None or t + delta <= h.now():
                    continue
                h.advance_to(t + delta)
                for op in monitors:
                    h.do(op)
            _ = it

        @precondition(lambda self: "fail" in enabled)
        @rule(policy=st.sampled_from(policies), cls=st.sampled_from(retryable or errors))
        def retries(self, policy: Any, cls: str) -> None:
            """A fresh item under one retry policy fails with a retryable error until it is
            failed for good: every backoff delay, the cap and the attempt limit get checked."""
            args: dict[str, Any] = {"source_system": "manual", "source_id": f"retry-{len(h.model.items)}"}
            if policy is not None:
                args["retry_policy"] = policy
            wid = h.do("create", **args).value["work"]["work_id"]
            for _ in range(12):
                h.do("claim", owner=pools.owners[0], work_id=wid)
                if h.model.items[wid]["status"] not in leased:
                    return
                h.do("fail", work_id=wid, token=h.model.items[wid]["lease_token"], error_class=cls)
                it = h.model.items[wid]
                if it["status"] != "retry_scheduled" or "promote_due" not in enabled:
                    return
                h.advance_to(it["next_retry_at"])
                h.do("promote_due")

        @precondition(lambda self: h.model.items and "recover" in enabled and "effect_begin" in enabled)
        @rule(cls=st.sampled_from(classes), journal=st.sampled_from(["pending", "completed", "none"]),
              then=st.sampled_from(["recover", "expire"]))
        def crash(self, cls: str, journal: str, then: str) -> None:
            """A worker dies mid-step: a fresh item is claimed, an effect of some class is begun
            (and maybe recorded), the lease lapses, and the monitor and the recovery scan run."""
            wid = fresh(len(h.model.items))
            h.do("claim", owner=pools.owners[2], work_id=wid)
            it = h.model.items[wid]
            if it["status"] not in leased:
                return
            if journal != "none":
                rec = h.do("effect_begin", work_id=wid, step_id="step-0", tool=pools.tools[0], input=pools.payloads[0],
                           step_class=cls, token=it["lease_token"]).value
                if journal == "completed" and rec:
                    r = rec["receipt"]
                    h.do("effect_record", key=r["key"], input_hash=r["input_hash"], result={"done": True}, token=it["lease_token"])
            h.advance_to(boundary(h.model.items[wid], "lapse") + QUANTUM)
            if then == "expire":
                h.do("expire")
            h.do("recover")

        @precondition(lambda self: h.model.items)
        @rule(i=idx, status=st.sampled_from(list(spec.statuses)))
        def drive(self, i: int, status: str) -> None:
            """Take one item to a status along allowed edges (reaches deep states quickly)."""
            wid = pick(self, i)
            try:
                h.drive(wid, status)
            except (NotApplicable, DriveBlocked):
                pass

        # ---------------------------------------------------------- core
        @rule(src=st.sampled_from(list(spec.source_systems)), unit=st.integers(0, 5), run=st.integers(0, 2),
              prio=st.one_of(st.none(), st.integers(spec.priority_min - 1, spec.priority_max + 1)),
              payload=st.integers(0, 5), with_run=st.booleans(), policy=st.sampled_from([None, None, {"max_attempts": 1}, {"jitter": "none", "initial_backoff": 5.0},
                                      {"max_attempts": 8, "initial_backoff": 4.0, "multiplier": 3.0, "max_backoff": 20.0}]))
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
            h.do("claim", owner=pools.owners[owner], work_id=pick(self, i, claimable) if by_id else None)

        @precondition(lambda self: h.model.items)
        @rule(i=idx, status=st.sampled_from(terminal + ["waiting_user", "running"]), tok=tokens, with_result=st.booleans())
        def close_out(self, i: int, status: str, tok: str, with_result: bool) -> None:
            wid = pick(self, i, leased)
            h.do("close_out", work_id=wid, token=token_for(wid, tok), status=status, result={"ok": i} if with_result else None)

        @precondition(lambda self: h.model.items)
        @rule(i=idx, reason=st.sampled_from([None, "user asked"]))
        def cancel(self, i: int, reason: str | None) -> None:
            h.do("cancel", work_id=pick(self, i, cancellable), reason=reason)

        @precondition(lambda self: h.model.items)
        @rule(i=idx, reason=st.sampled_from([None, "operator"]))
        def requeue(self, i: int, reason: str | None) -> None:
            h.do("requeue", work_id=pick(self, i, terminal_t), reason=reason)

        @precondition(lambda self: monitors)
        @rule(op=st.sampled_from(["expire", "expire", "promote_due", "recover"]))
        def monitor(self, op: str) -> None:
            if op in enabled:
                h.do(op)

        # ---------------------------------------------------------- lease
        @precondition(lambda self: h.model.items and "renew" in enabled)
        @rule(i=idx, tok=tokens)
        def renew(self, i: int, tok: str) -> None:
            wid = pick(self, i, leased)
            h.do("renew", work_id=wid, token=token_for(wid, tok))

        # ---------------------------------------------------------- waiting
        @precondition(lambda self: h.model.items and "set_waiting" in enabled)
        @rule(i=idx, kind=st.sampled_from(kinds), ref=st.sampled_from([0, 1, 2, -1]), tok=tokens,
              timeout=st.sampled_from([None, None, 60.0, 600.0]))
        def set_waiting(self, i: int, kind: str, ref: int, tok: str, timeout: float | None) -> None:
            wid = pick(self, i, leased)
            h.do("set_waiting", work_id=wid, token=token_for(wid, tok), kind=kind, ref=pools.refs[ref] if ref >= 0 else "",
                 timeout=timeout)

        @precondition(lambda self: h.model.items and "resume" in enabled)
        @rule(i=idx, owner=st.integers(0, 2))
        def resume(self, i: int, owner: int) -> None:
            h.do("resume", work_id=pick(self, i, waiting), owner=pools.owners[owner])

        # ---------------------------------------------------------- retry
        @precondition(lambda self: h.model.items and "fail" in enabled)
        @rule(i=idx, cls=st.sampled_from(errors), tok=tokens)
        def fail(self, i: int, cls: str, tok: str) -> None:
            wid = pick(self, i, leased)
            h.do("fail", work_id=wid, token=token_for(wid, tok), error_class=cls, message="upstream said no")

        # ---------------------------------------------------------- idempotency
        @precondition(lambda self: h.model.items and "effect_begin" in enabled)
        @rule(i=idx, step=st.integers(0, 1), tool=st.integers(0, 1), inp=st.integers(0, 5), cls=st.sampled_from(classes),
              tok=st.sampled_from(["live", "live", "none", "stale"]))
        def effect_begin(self, i: int, step: int, tool: int, inp: int, cls: str, tok: str) -> None:
            wid = pick(self, i, leased)
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
        @rule(r=idx, state=st.sampled_from(["unknown", "needs_inspection", "pending", "completed"]))
        def effect_mark(self, r: int, state: str) -> None:
            keys = h.model.receipt_order
            h.do("effect_mark", key=keys[r % len(keys)], state=state)

        # ---------------------------------------------------------- recovery
        # ---------------------------------------------------------- inbox
        @precondition(lambda self: "inbox_deliver" in enabled)
        @rule(m=st.integers(0, 9), sender=st.integers(0, 2))
        def inbox_deliver(self, m: int, sender: int) -> None:
            h.do("inbox_deliver", recipient="agent", message_id=f"msg-{m}", sender=pools.senders[m % 3 if sender else sender],
                 body={"n": m})

        @precondition(lambda self: "inbox_nack" in enabled)
        @rule(m=st.integers(10, 19), sender=st.integers(0, 2), extra=st.integers(0, 1))
        def poison(self, m: int, sender: int, extra: int) -> None:
            """A message whose handler keeps failing: deliver, then drain and nack it until it is
            dead-lettered (and once more): the nack count and the dead-letter limit get checked."""
            mid = f"msg-{m}"
            h.do("inbox_deliver", recipient="agent", message_id=mid, sender=pools.senders[sender], body={"n": m})
            for _ in range(spec.inbox_max_nacks + 1 + extra):
                got = h.do("inbox_drain", recipient="agent", max=None).value or []
                mine = [x for x in got if x.get("message_id") == mid]
                for x in got:
                    if x.get("message_id") != mid:
                        h.do("inbox_ack", recipient="agent", message_id=x["message_id"])
                if not mine:
                    break
                h.do("inbox_nack", recipient="agent", message_id=mid, error="handler keeps failing")
            h.do("inbox_dead", recipient="agent")

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

        # ---------------------------------------------------------- invariants
        @invariant()
        def periodic_full_check(self) -> None:
            self.steps += 1
            h.rule_steps += 1
            if self.steps % full_check_every == 0:
                h.verify_all()

        def teardown(self) -> None:
            if h.coverage:
                target(float(len(h.coverage)), label="distinct (operation, status, outcome) triples")
            if not h.failed:  # after a failure the model is behind; the first failure is the report
                h.verify_all()

    # rules of operations the adapter does not claim are removed outright, so hypothesis never
    # spends a draw or a precondition check on them
    for name in list(vars(LedgerMachine)):
        op = name.rstrip("_")
        if op in spec.operations and op not in enabled:
            delattr(LedgerMachine, name)
    LedgerMachine.__name__ = LedgerMachine.__qualname__ = "LedgerMachine"
    return LedgerMachine
