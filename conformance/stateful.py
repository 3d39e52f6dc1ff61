"""Model-based random exploration with hypothesis' stateful testing.

The machine is a base (time, negative probes, driving items to deep states, the full
comparisons) plus one rule set per profile of the contract (conformance/stateful_rules.py),
included when the adapter claims that profile.  Arguments are drawn from the contract's own
``args`` (conformance/stateful_args.py: optional ones present and absent, strings at their
edges, numbers at their bounds) and from the machine's state: the items, leases, effect keys
and messages the ledger handed out are kept in hypothesis bundles, so a failing example
shrinks to a short program that reads as a story.
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

from hypothesis import HealthCheck, Phase, settings, target
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from ledgercheck.spec import Spec
from ledgercheck.spec.rules import in_profiles
from ledgercheck.transport.clock import QUANTUM

from .budgets import PROFILES
from .harness import DriveBlocked, Harness, NotApplicable
from .stateful_args import Pools
from .stateful_rules import WORKS, Ctx, rule_set

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


def time_steps(spec: Spec, wall: bool = False) -> list[float]:
    """Durations around the contract's boundaries, in clock seconds (the unit of ``spec``, the
    run's contract: on a wall clock already multiplied by the wall scale).

    On a virtual clock: all multiples of the clock quantum, a quantum either side of each lease
    boundary.  On a wall clock (``wall``): the lease timings and retry backoffs as they are (a
    quantum of contract time is far inside the wall tolerance); the contract's hour-long budgets
    (waits, the execution budget) stay out, as minutes of real sleep per step."""
    if wall:
        return _wall_steps(spec)
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


def _wall_steps(spec: Spec) -> list[float]:
    vals: set[float] = set()
    for lt in [spec.lease_default, *spec.lease_by_source.values()]:
        vals |= {lt.renew_interval, lt.ttl, lt.ttl + lt.grace, lt.grace}
    p = spec.retry_default
    vals |= {spec.backoff_base(p, n) for n in range(1, p.max_attempts + 1)}
    return sorted(vals)


FAMILIES = ("lifecycle", "messaging", "tree")
MESSAGING_PROFILES = frozenset({"inbox", "outbox", "eventlog", "lanes", "wakeups", "logread"})
ITEMLESS_PROFILES = ("inbox", "outbox", "lanes", "wakeups")  # no work items: the messaging family only
# Work trees: spawn and ask, with every profile of work items beside them.  A family of its own,
# so the lifecycle machine's exploration (and the budget at which it finds what it finds) does not
# thin out with every profile added on top of it.
TREE_PROFILES = frozenset({"spawn", "ask"})


def machine_profiles(claimed: Iterable[str], family: str) -> list[str]:
    """The profiles a machine family checks: messaging = inbox, outbox, the event-log streams,
    lanes and wakeups; tree = spawn and ask with the profiles of work items (none when neither is
    claimed); lifecycle = those profiles without spawn and ask (the event-log profile's fold checks included)."""
    claimed = list(claimed)
    if family == "messaging":
        return [p for p in claimed if p in MESSAGING_PROFILES]
    if family == "tree":
        if not TREE_PROFILES & set(claimed):
            return []
        return [p for p in claimed if p not in ITEMLESS_PROFILES]
    return [p for p in claimed if p not in ITEMLESS_PROFILES and p not in TREE_PROFILES]


def enabled_operations(h: Harness, only: str | None) -> frozenset[str]:
    """The operations the machine sends: those the adapter claims, of the family ``only``."""
    return frozenset(op for op in h.spec.operations
                     if h.claims(op) and (only is None or (only == "messaging") == in_profiles(h.spec, op, MESSAGING_PROFILES)))


def base_machine(c: Ctx, full_check_every: int) -> type[RuleBasedStateMachine]:
    """What every machine has: time, jumps to an item's instants, negative probes in every
    status, driving items along the table, and the periodic and final full comparisons."""
    h, spec = c.h, c.spec
    steps = time_steps(spec, h.wall)
    all_statuses = list(spec.statuses)
    then = st.sampled_from(["", *c.monitors])

    class Base(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            h.fresh()
            self.steps = 0
            self.probes = 0

        @initialize()
        def start(self) -> None:
            pass

        @rule(dt=st.sampled_from(steps), then=then)
        def advance(self, dt: float, then: str) -> None:
            """Let time pass, then (like a real monitor loop would) maybe run a monitor."""
            h.advance(dt)
            if then:
                h.do(then)

        @rule(work=WORKS, which=st.sampled_from(["lease_expiry", "lapse", "wait_deadline", "next_retry", "exec_limit"]),
              delta=st.sampled_from([-QUANTUM, 0.0, QUANTUM]), then=then)
        def jump(self, work: str, which: str, delta: float, then: str) -> None:
            """Move the clock to an instant that matters for one item (just before, at, just
            after it), then maybe run a monitor at exactly that instant."""
            t = c.boundary(h.model.items[work], which)
            if t is not None and t + delta > h.now():
                h.advance_to(t + delta)
            if then:
                h.do(then)

        @rule(work=WORKS, new=st.booleans())
        def probe(self, work: str, new: bool) -> None:
            """Take an item (this one, or a new one) to a status along allowed edges, then try
            every operation the contract refuses there: each must be refused and change nothing.
            Statuses come in turn, so every status gets its negative tests."""
            status = all_statuses[self.probes % len(all_statuses)]
            self.probes += 1
            wid = c.fresh(self.probes) if new else work
            try:
                h.drive(wid, status)
            except (NotApplicable, DriveBlocked):
                return
            c.refused_only(c.sweep_calls(wid))

        @rule(target=WORKS, which=st.sampled_from(["lease", "wait", "retry"]), delta=st.sampled_from([-QUANTUM, 0.0, QUANTUM]),
              journal=st.sampled_from(["none", "pending", "completed"]), cls=st.sampled_from(c.classes),
              n=st.integers(0, 7))
        def edge_of_time(self, which: str, delta: float, journal: str, cls: str, n: int) -> str:
            """Take a new item to the status whose clock matters, move time to just before, at or
            just after its boundary (expiry, expiry + grace, wait deadline, retry instant) and run
            the monitors there.  Leased work first gets an effect in its journal (pending or
            completed, of some step class), so the recovery scan's decisions are exercised."""
            wid = c.fresh(n)
            goal = {"lease": c.leased[0], "wait": c.waiting[0] if c.waiting else None, "retry": "retry_scheduled"}[which]
            if goal is None or goal not in spec.statuses:
                return wid
            try:
                h.drive(wid, goal)
            except (NotApplicable, DriveBlocked):
                return wid
            it = h.model.items[wid]
            if which == "lease" and journal != "none" and "effect_begin" in c.enabled and it["lease_token"]:
                rec = h.do("effect_begin", work_id=wid, step_id="step-0", tool=c.pools.tools[n % len(c.pools.tools)],
                           input=c.pools.payloads[n % len(c.pools.payloads)], step_class=cls, token=it["lease_token"]).value
                if journal == "completed" and rec and "effect_record" in c.enabled:
                    r = rec["receipt"]
                    h.do("effect_record", key=r["key"], input_hash=r["input_hash"], result={"ok": n}, token=it["lease_token"])
            instants = {"lease": ["lease_expiry", "lapse"], "wait": ["wait_deadline"], "retry": ["next_retry"]}[which]
            for name in instants:
                t = c.boundary(h.model.items[wid], name)
                if t is None or t + delta <= h.now():
                    continue
                h.advance_to(t + delta)
                for op in c.monitors:
                    h.do(op)
            return wid

        @rule(work=WORKS, status=st.sampled_from(all_statuses))
        def drive(self, work: str, status: str) -> None:
            """Take one item to a status along allowed edges (reaches deep states quickly)."""
            try:
                h.drive(work, status)
            except (NotApplicable, DriveBlocked):
                pass

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

    return Base


def make_machine(h: Harness, full_check_every: int = FULL_CHECK_EVERY, only: str | None = None) -> type[RuleBasedStateMachine]:
    """Build the state machine: the base plus the rule set of every profile the contract gives an
    enabled operation; ``only`` = "lifecycle", "messaging" or "tree" keeps that family of operations."""
    c = Ctx(h, enabled_operations(h, only), Pools())
    profiles = list(dict.fromkeys(p for p in (h.spec.operations[op].profile for op in sorted(c.enabled)) if p))
    sets = [cls for cls in (rule_set(p, c) for p in profiles) if cls is not None]
    base = base_machine(c, full_check_every)
    if not any(op in c.enabled for op in ("create", "claim")):
        # a messaging machine has no items: the rules about items would never find one
        for name in ("jump", "probe", "edge_of_time", "drive"):
            delattr(base, name)
    machine = type("LedgerMachine", (*sets, base), {"__qualname__": "LedgerMachine", "__module__": __name__})
    return machine
