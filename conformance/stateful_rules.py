"""The stateful machine's rules, one set per profile of the contract.

A rule set holds the rules of one profile's operations (the generic rule of each operation, its
arguments drawn from the contract through ``ArgDraws``) and the scenarios that profile is about
(a failing item retried to the end, a worker dying mid-step, a poisoned message).  The machine
(conformance/stateful.py) includes the set of every profile the contract gives an enabled
operation, and drops any rule whose operations (``needs``) are not all enabled.

Things the ledger hands out (items, leases, effect keys, outbox keys) are kept in hypothesis bundles, so a shrunk failing program reads as
a short story: ``work_0 = state.create(...)``, ``lease_0 = state.claim(work=work_0, ...)``,
``state.renew(lease=lease_0, use='held')``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, multiple, precondition, rule
from ledgercheck.spec import Spec
from ledgercheck.transport.clock import QUANTUM

from .harness import DriveBlocked, Harness, NotApplicable
from .model import Refuse
from .stateful_args import ArgDraws, Pools, edges

F = TypeVar("F", bound=Callable[..., Any])

WORKS = Bundle("work")
LEASES = Bundle("lease")
RECEIPTS = Bundle("receipt")
LETTERS = Bundle("letter")
FORGED = "forged-token"
NEEDS = "_ledger_needs"


@dataclass(frozen=True)
class Lease:
    """A lease the ledger handed out: the item and its token (later maybe superseded)."""

    work_id: str
    token: str
    owner: str


def needs(*ops: str) -> Callable[[F], F]:
    """Mark a rule as using these operations: it is dropped unless all are enabled."""
    def mark(fn: F) -> F:
        setattr(fn, NEEDS, ops)
        return fn
    return mark


@dataclass
class Ctx:
    """What every rule set shares: the harness, the contract's groups of statuses and the
    helpers that pick tokens, make items and find an item's instants."""

    h: Harness
    enabled: frozenset[str]
    pools: Pools = field(default_factory=Pools)

    def __post_init__(self) -> None:
        spec = self.spec
        self.kinds = list(spec.waiting_statuses)
        self.classes = list(spec.step_classes)
        self.errors = list(spec.error_classes)
        self.terminal = list(spec.terminal_statuses)
        self.retryable = [c for c, r in spec.error_classes.items() if r]
        self.sources = list(spec.source_systems)
        # the identity's free-text fields (not its enums): where a careless index folds values
        create_args = spec.operations["create"].args if "create" in spec.operations else {}
        self.identity_strings = [k for k in spec.identity_key
                                 if k in create_args and create_args[k].type in ("string", "nonempty_string")]
        self.claimable = tuple(t.src for t in spec.edges_of("claim"))
        self.leased = tuple(n for n, s_ in spec.statuses.items() if s_.leased)
        self.waiting = tuple(spec.waiting_statuses.values())
        self.monitors = [op for op in spec.operations if op in self.enabled and self.is_monitor(op)]
        h = self.h  # policies in clock seconds: their literals are the contract's, converted once
        self.policies: list[Any] = [
            None, h.contract_policy({"max_attempts": 8, "initial_backoff": 4.0, "multiplier": 3.0, "max_backoff": 20.0}),
            # a partial policy keeps the default max_backoff, which its initial_backoff may not exceed
            {"max_attempts": 5, "jitter": "none", "initial_backoff": min(h.contract_seconds(1.0), spec.retry_default.max_backoff)},
            {"max_attempts": 4, "jitter": "equal"}, {"max_attempts": 1}]
        self.draw = ArgDraws(spec, self.pools, [p for p in self.policies if p is not None], h.scale)

    @property
    def spec(self) -> Spec:
        return self.h.spec

    def is_monitor(self, op: str) -> bool:
        """A monitor's scan (the contract's operation kind)."""
        o = self.spec.operations[op]
        return o.kind == "monitor"

    def status(self, wid: str) -> str:
        return self.h.model.items[wid]["status"]

    def token(self, lease: Lease, use: str) -> str:
        """The lease's own token ("held": the live one or a superseded one), the item's live
        token ("live", the held one when the item has none now) or a forged one."""
        if use == "forged":
            return FORGED
        if use == "live":
            return self.h.model.items[lease.work_id]["lease_token"] or lease.token
        return lease.token

    def lease_of(self, wid: str, owner: str) -> Any:
        tok = self.h.model.items[wid]["lease_token"]
        return Lease(wid, tok, owner) if tok and self.status(wid) in self.leased else multiple()

    def fresh(self, i: int) -> str:
        """A new item (its boundaries lie ahead) of the i-th source system."""
        h = self.h
        src = self.sources[i % len(self.sources)]
        run = {"source_run_id": f"probe-{len(h.model.items)}"} if src in self.spec.run_id_required_for else {}
        return h.do("create", source_system=src, source_id=f"probe-{len(h.model.items)}", **run).value["work"]["work_id"]

    def boundary(self, it: dict[str, Any], which: str) -> float | None:
        lt = self.spec.lease_for(it["source_system"])
        if which == "lease_expiry":
            return it["lease_expires_at"]
        if which == "lapse":
            return None if it["lease_expires_at"] is None else it["lease_expires_at"] + lt.grace
        if which == "wait_deadline":
            return it["waiting_deadline"]
        if which == "next_retry":
            return it["next_retry_at"]
        ex = self.spec.phase_timeout("execution")
        return None if ex is None or it["started_at"] is None else it["started_at"] + ex

    def guarded_calls(self, wid: str, toks: list[str], every_form: bool = True) -> list[tuple[str, dict[str, Any]]]:
        """Every lease-guarded write on ``wid`` with each of ``toks``, in each of its forms (or
        in its first form only)."""
        calls: list[tuple[str, dict[str, Any]]] = []
        on = self.enabled
        n = None if every_form else 1
        for tok in toks:
            if "renew" in on:
                calls.append(("renew", {"work_id": wid, "token": tok}))
            for st_ in self.terminal[:n]:
                calls.append(("close_out", {"work_id": wid, "token": tok, "status": st_}))
            if "fail" in on:
                calls += [("fail", {"work_id": wid, "token": tok, "error_class": cls}) for cls in self.errors[:n]]
            if "set_waiting" in on:
                for kind in self.kinds[:n]:
                    calls.append(("set_waiting", {"work_id": wid, "token": tok, "kind": kind, "ref": self.pools.refs[0]}))
                    calls.append(("set_waiting", {"work_id": wid, "token": tok, "kind": kind, "ref": ""}))
            if "effect_begin" in on:
                calls.append(("effect_begin", {"work_id": wid, "step_id": "step-0", "tool": self.pools.tools[0],
                                               "input": self.pools.payloads[0], "step_class": self.classes[0], "token": tok}))
        return calls

    def sweep_calls(self, wid: str) -> list[tuple[str, dict[str, Any]]]:
        it = self.h.model.items[wid]
        live = it["lease_token"]
        toks = [t for t in [live, FORGED, *[t for t in self.h.model.tokens.get(wid, []) if t != live][-1:]] if t]
        calls: list[tuple[str, dict[str, Any]]] = []
        for op in ("claim", "resume"):
            if op in self.enabled:
                calls.append((op, {"work_id": wid, "owner": self.pools.owners[1]}))
        for op in ("cancel", "requeue"):
            if op in self.enabled:
                calls.append((op, {"work_id": wid}))
        return calls + self.guarded_calls(wid, toks)

    def refused_only(self, calls: list[tuple[str, dict[str, Any]]]) -> None:
        """Send each call the model refuses now (each must be refused and change nothing)."""
        for op, args in calls:
            exp = self.h.expected(op, args)
            if isinstance(exp, Refuse):
                self.h.do(op, _expected=exp, **args)

    def lapse(self, wid: str) -> None:
        """Move the clock past the item's lease expiry and grace."""
        t = self.boundary(self.h.model.items[wid], "lapse")
        if t is not None:
            self.h.advance_to(t + QUANTUM)


USE = st.sampled_from(["live", "held", "live", "forged"])  # half the guarded writes with the live token


def core_rules(c: Ctx) -> type:
    h = c.h

    class Core:
        @rule(target=WORKS, args=c.draw.call("create"))
        def create(self, args: dict[str, Any]) -> Any:
            if "retry_policy" in args and "fail" not in c.enabled:
                args = {k: v for k, v in args.items() if k != "retry_policy"}
            out = h.do("create", **args)
            return out.value["work"]["work_id"] if out.ok else multiple()

        @rule(work=WORKS, field=st.sampled_from(c.identity_strings or list(c.spec.identity_key)),
              form=st.integers(0, 6),
              args=c.draw.call("create", c.spec.identity_key))
        def create_again(self, work: str, field: str, form: int, args: dict[str, Any]) -> Any:
            """An existing unit's identity created again: as it is (form 0: the record there
            answers), or with one of its string fields at one of that value's edges (another case,
            surrounding whitespace, the other normalization form...: another unit, kept apart)."""
            it = h.model.items[work]
            ident = {k: it.get(k) for k in c.spec.identity_key}
            value = ident[field]
            if form and isinstance(value, str) and value:
                forms = edges(value, allow_empty=False)
                ident[field] = forms[(form - 1) % len(forms)]
            if "retry_policy" in args and "fail" not in c.enabled:
                args = {k: v for k, v in args.items() if k != "retry_policy"}
            h.do("create", **{k: v for k, v in ident.items() if v is not None}, **args)

        @rule(target=LEASES, work=WORKS, by_id=st.booleans(), args=c.draw.call("claim", ("work_id",)))
        def claim(self, work: str, by_id: bool, args: dict[str, Any]) -> Any:
            out = h.do("claim", work_id=work if by_id else None, **args)
            wid = out.value.get("work_id") if out.ok and isinstance(out.value, dict) else None
            return c.lease_of(wid, args["owner"]) if wid in h.model.items else multiple()

        @rule(lease=LEASES, use=USE, args=c.draw.call("close_out", ("work_id", "token")))
        def close_out(self, lease: Lease, use: str, args: dict[str, Any]) -> None:
            h.do("close_out", work_id=lease.work_id, token=c.token(lease, use), **args)

        @rule(work=WORKS, args=c.draw.call("requeue", ("work_id",)))
        def requeue(self, work: str, args: dict[str, Any]) -> None:
            h.do("requeue", work_id=work, **args)

        @precondition(lambda self: "expire" in c.monitors)
        @rule()
        def expire(self) -> None:
            h.do("expire")

        @needs("create", "claim")
        @rule(target=LEASES, how=st.sampled_from(["lapse", "requeue", "fail", "resume"]),
              owner=c.draw.value("owner", "string"), status=st.sampled_from(c.terminal))
        def reacquire(self, how: str, owner: str, status: str) -> Any:
            """The same worker name takes an item again (after its lease lapsed and the monitor
            ran, after a requeue, a retry or a wait): the token it held before must now be
            refused, whatever name it comes with."""
            wid = c.fresh(len(h.model.items))
            h.do("claim", owner=owner, work_id=wid)
            old = h.model.items[wid]["lease_token"]
            if not old:
                return multiple()
            if how == "lapse" and "expire" in c.enabled:
                c.lapse(wid)
                h.do("expire")
            elif how == "requeue":
                h.do("close_out", work_id=wid, token=old, status=status)
                h.do("requeue", work_id=wid)
            elif how == "fail" and "fail" in c.enabled and c.retryable:
                h.do("fail", work_id=wid, token=old, error_class=c.retryable[0])
            elif how == "resume" and "set_waiting" in c.enabled and c.kinds:
                h.do("set_waiting", work_id=wid, token=old, kind=c.kinds[0], ref=c.pools.refs[0])
                if c.status(wid) in c.waiting:
                    h.do("resume", work_id=wid, owner=owner)
            if c.status(wid) in c.terminal and "requeue" in c.enabled:  # a lapse that timed the work out
                h.do("requeue", work_id=wid)
            nxt = h.model.items[wid]["next_retry_at"]
            if c.status(wid) == "retry_scheduled" and nxt is not None and "promote_due" in c.enabled:
                h.advance_to(nxt)
                h.do("promote_due")
            if c.status(wid) in c.claimable:
                h.do("claim", owner=owner, work_id=wid)
            c.refused_only(c.guarded_calls(wid, [old], every_form=False))
            return c.lease_of(wid, owner)

    return Core


def cancel_rules(c: Ctx) -> type:
    h = c.h

    class Cancel:
        @rule(work=WORKS, args=c.draw.call("cancel", ("work_id",)))
        def cancel(self, work: str, args: dict[str, Any]) -> None:
            h.do("cancel", work_id=work, **args)

    return Cancel


def lease_rules(c: Ctx) -> type:
    h = c.h

    class LeaseRules:
        @rule(lease=LEASES, use=USE, wait=st.booleans())
        def renew(self, lease: Lease, use: str, wait: bool) -> None:
            """Renew the lease at once, or after the item's renew interval (a worker's
            heartbeat, so the expiry it gets is not the one it had) when the lease outlasts it."""
            if wait:
                it = h.model.items[lease.work_id]
                t = c.boundary(it, "lease_expiry")
                interval = c.spec.lease_for(it["source_system"]).renew_interval
                if t is not None and t - interval > h.now():
                    h.advance(interval)
            h.do("renew", work_id=lease.work_id, token=c.token(lease, use))

    return LeaseRules


def waiting_rules(c: Ctx) -> type:
    h = c.h

    class Waiting:
        @rule(lease=LEASES, use=USE, args=c.draw.call("set_waiting", ("work_id", "token")))
        def set_waiting(self, lease: Lease, use: str, args: dict[str, Any]) -> None:
            h.do("set_waiting", work_id=lease.work_id, token=c.token(lease, use), **args)

        @rule(target=LEASES, work=WORKS, args=c.draw.call("resume", ("work_id",)))
        def resume(self, work: str, args: dict[str, Any]) -> Any:
            out = h.do("resume", work_id=work, **args)
            return c.lease_of(work, args["owner"]) if out.ok else multiple()

    return Waiting


def retry_rules(c: Ctx) -> type:
    h = c.h

    class Retry:
        @rule(lease=LEASES, use=USE, args=c.draw.call("fail", ("work_id", "token")))
        def fail(self, lease: Lease, use: str, args: dict[str, Any]) -> None:
            h.do("fail", work_id=lease.work_id, token=c.token(lease, use), **args)

        @rule()
        def promote_due(self) -> None:
            h.do("promote_due")

        @rule(work=WORKS, cls=st.sampled_from(c.errors), times=st.integers(1, 4))
        def attempt(self, work: str, cls: str, times: int) -> None:
            """Execution attempts that fail, one after the other on one item: promote when due,
            claim, fail (retry schedules deepen fast)."""
            for _ in range(times):
                it = h.model.items[work]
                if it["status"] == "retry_scheduled" and "promote_due" in c.enabled:
                    h.advance_to(it["next_retry_at"])
                    h.do("promote_due")
                if c.status(work) in c.claimable:
                    h.do("claim", owner=c.pools.owners[0], work_id=work)
                if c.status(work) not in c.leased:
                    return
                h.do("fail", work_id=work, token=h.model.items[work]["lease_token"], error_class=cls)

        @needs("claim")
        @rule(target=WORKS, policy=st.sampled_from(c.policies), cls=st.sampled_from(c.retryable or c.errors))
        def retries(self, policy: Any, cls: str) -> str:
            """A fresh item under one retry policy fails with a retryable error until it is
            failed for good: every backoff delay, the cap and the attempt limit get checked."""
            args: dict[str, Any] = {"source_system": "manual", "source_id": f"retry-{len(h.model.items)}"}
            if policy is not None:
                args["retry_policy"] = policy
            wid = h.do("create", **args).value["work"]["work_id"]
            for _ in range(12):
                h.do("claim", owner=c.pools.owners[0], work_id=wid)
                if c.status(wid) not in c.leased:
                    break
                h.do("fail", work_id=wid, token=h.model.items[wid]["lease_token"], error_class=cls)
                it = h.model.items[wid]
                if it["status"] != "retry_scheduled" or "promote_due" not in c.enabled:
                    break
                h.advance_to(it["next_retry_at"])
                h.do("promote_due")
            return wid

    return Retry


def idempotency_rules(c: Ctx) -> type:
    h = c.h
    spec = c.spec

    class Idempotency:
        @rule(target=RECEIPTS, lease=LEASES, step=st.sampled_from(["step-0", "step-1"]),
              use=st.sampled_from(["live", "live", "none", "held"]),
              args=c.draw.call("effect_begin", ("work_id", "token", "step_id")))
        def effect_begin(self, lease: Lease, step: str, use: str, args: dict[str, Any]) -> Any:
            tok = None if use == "none" else c.token(lease, use)
            out = h.do("effect_begin", work_id=lease.work_id, step_id=step, token=tok, **args)
            rec = out.value if out.ok else None
            return rec["receipt"]["key"] if isinstance(rec, dict) and rec.get("receipt") else multiple()

        @rule(key=RECEIPTS, right_hash=st.booleans(), use=st.sampled_from(["live", "none", "held"]),
              args=c.draw.call("effect_record", ("key", "input_hash", "token")))
        def effect_record(self, key: str, right_hash: bool, use: str, args: dict[str, Any]) -> None:
            rec = h.model.receipts[key]
            ih = rec["input_hash"] if right_hash else spec.input_hash({"tampered": repr(args.get("result"))})
            live = h.model.items[rec["work_id"]]["lease_token"]
            old = [t for t in h.model.tokens.get(rec["work_id"], []) if t != live]
            tok = {"live": live or FORGED, "none": None}.get(use, old[-1] if old else FORGED)
            h.do("effect_record", key=key, input_hash=ih, token=tok, **args)

        @rule(key=RECEIPTS, args=c.draw.call("effect_mark", ("key",)))
        def effect_mark(self, key: str, args: dict[str, Any]) -> None:
            h.do("effect_mark", key=key, **args)

    return Idempotency


def recovery_rules(c: Ctx) -> type:
    h = c.h

    class Recovery:
        @rule()
        def recover(self) -> None:
            h.do("recover")

        @needs("recover", "effect_begin", "claim")
        @rule(target=WORKS, cls=st.sampled_from(c.classes), journal=st.sampled_from(["pending", "completed", "none"]),
              then=st.sampled_from(["recover", "expire"]))
        def crash(self, cls: str, journal: str, then: str) -> str:
            """A worker dies mid-step: a fresh item is claimed, an effect of some class is begun
            (and maybe recorded), the lease lapses, and the monitor and the recovery scan run."""
            wid = c.fresh(len(h.model.items))
            h.do("claim", owner=c.pools.owners[2], work_id=wid)
            it = h.model.items[wid]
            if it["status"] not in c.leased:
                return wid
            if journal != "none":
                rec = h.do("effect_begin", work_id=wid, step_id="step-0", tool=c.pools.tools[0], input=c.pools.payloads[0],
                           step_class=cls, token=it["lease_token"]).value
                if journal == "completed" and rec and "effect_record" in c.enabled:
                    r = rec["receipt"]
                    h.do("effect_record", key=r["key"], input_hash=r["input_hash"], result={"done": True}, token=it["lease_token"])
            c.lapse(wid)
            if then == "expire" and "expire" in c.enabled:
                h.do("expire")
            h.do("recover")
            return wid

    return Recovery


def inbox_rules(c: Ctx) -> type:
    h = c.h
    spec = c.spec

    def inflight() -> list[str]:
        return [m["message_id"] for m in h.model.inbox.get("agent", []) if m["state"] == "inflight"]

    class Inbox:
        @rule(m=st.integers(0, 9), sender=st.integers(0, 2), args=c.draw.call(
            "inbox_deliver", ("recipient", "message_id", "sender")))
        def inbox_deliver(self, m: int, sender: int, args: dict[str, Any]) -> None:
            h.do("inbox_deliver", recipient="agent", message_id=f"msg-{m}", sender=c.pools.senders[m % 3 if sender else sender],
                 **args)

        @needs("inbox_deliver", "inbox_drain", "inbox_ack", "inbox_dead")
        @rule(m=st.integers(10, 19), sender=st.integers(0, 2), extra=st.integers(0, 1))
        def poison(self, m: int, sender: int, extra: int) -> None:
            """A message whose handler keeps failing: deliver, then drain and nack it until it is
            dead-lettered (and once more): the nack count and the dead-letter limit get checked."""
            mid = f"msg-{m}"
            h.do("inbox_deliver", recipient="agent", message_id=mid, sender=c.pools.senders[sender], body={"n": m})
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

        @rule(args=c.draw.call("inbox_drain", ("recipient",)))
        def inbox_drain(self, args: dict[str, Any]) -> None:
            h.do("inbox_drain", recipient="agent", **args)

        @precondition(lambda self: inflight())
        @rule(i=st.integers(0, 7))
        def inbox_ack(self, i: int) -> None:
            ids = inflight()
            h.do("inbox_ack", recipient="agent", message_id=ids[i % len(ids)])

        @precondition(lambda self: inflight())
        @rule(i=st.integers(0, 7), args=c.draw.call("inbox_nack", ("recipient", "message_id")))
        def inbox_nack(self, i: int, args: dict[str, Any]) -> None:
            ids = inflight()
            h.do("inbox_nack", recipient="agent", message_id=ids[i % len(ids)], **args)

    return Inbox


def outbox_rules(c: Ctx) -> type:
    h = c.h

    class Outbox:
        @rule(target=LETTERS, k=st.integers(0, 4), args=c.draw.call("outbox_enqueue", ("key", "work_id")))
        def outbox_enqueue(self, k: int, args: dict[str, Any]) -> str:
            key = f"reply-{k}"
            h.do("outbox_enqueue", key=key, **args)
            return key

        @rule(args=c.draw.call("outbox_pending"))
        def outbox_pending(self, args: dict[str, Any]) -> None:
            h.do("outbox_pending", **args)

        @rule(letter=LETTERS, args=c.draw.call("outbox_mark_sent", ("key",)))
        def outbox_mark_sent(self, letter: str, args: dict[str, Any]) -> None:
            h.do("outbox_mark_sent", key=letter, **args)

    return Outbox


def eventlog_rules(c: Ctx) -> type:
    h = c.h
    spec = c.spec

    class EventLog:
        @rule(stream=st.sampled_from(["stream-0", "stream-1"]), off=st.sampled_from([0, 0, 0, -1, 1]),
              args=c.draw.call("log_append", ("stream", "expected_seq")))
        def log_append(self, stream: str, off: int, args: dict[str, Any]) -> None:
            last = spec.first_seq - 1 + len(h.model.logs.get(stream, []))
            h.do("log_append", stream=stream, expected_seq=max(0, last + off), **args)

    return EventLog


LANES = ("lane-0", "lane-1")
RUNS = ("run-0", "run-1", "run-2")


def lanes_rules(c: Ctx) -> type:
    h = c.h
    sk = "session-0"

    def lane(i: int) -> dict[str, Any]:
        return h.model.lanes.get((sk, LANES[i]), {"token": None, "tokens": [], "tasks": []})

    def tok(i: int, use: str) -> str:
        """The lane's current token ("live"), its first one ever ("held": superseded once the
        lane changed hands) or a forged one."""
        ln = lane(i)
        if use == "live" and ln["token"]:
            return str(ln["token"])
        if use == "held" and ln["tokens"]:
            return str(ln["tokens"][0])
        return FORGED

    class Lanes:
        @rule(i=st.integers(0, 1), who=st.integers(0, 2))
        def lane_acquire(self, i: int, who: int) -> None:
            h.do("lane_acquire", session_key=sk, lane=LANES[i], owner=c.pools.owners[who])

        @rule(i=st.integers(0, 1), use=USE)
        def lane_renew(self, i: int, use: str) -> None:
            h.do("lane_renew", session_key=sk, lane=LANES[i], token=tok(i, use))

        @rule(i=st.integers(0, 1), use=USE)
        def lane_release(self, i: int, use: str) -> None:
            h.do("lane_release", session_key=sk, lane=LANES[i], token=tok(i, use))

        @needs("lane_tasks")
        @rule(i=st.integers(0, 1), k=st.integers(0, 5), n=st.integers(1, 3))
        def lane_push(self, i: int, k: int, n: int) -> None:
            """Follow-up work arrives (the lane busy or not), and the lane's queue is read back."""
            for j in range(n):
                h.do("lane_push", session_key=sk, lane=LANES[i], task_id=f"task-{k + j}", body=c.pools.payloads[(k + j) % 6])
            h.do("lane_tasks", session_key=sk, lane=LANES[i])

        @rule(i=st.integers(0, 1), use=USE)
        def lane_next(self, i: int, use: str) -> None:
            h.do("lane_next", session_key=sk, lane=LANES[i], token=tok(i, use))

        @rule(i=st.integers(0, 1), use=USE, k=st.integers(0, 7))
        def lane_done(self, i: int, use: str, k: int) -> None:
            handed = [t["task_id"] for t in lane(i)["tasks"] if t["state"] == "handed"] or [f"task-{k}"]
            h.do("lane_done", session_key=sk, lane=LANES[i], token=tok(i, use), task_id=handed[k % len(handed)])

        @rule(i=st.integers(0, 1))
        def lane_tasks(self, i: int) -> None:
            h.do("lane_tasks", session_key=sk, lane=LANES[i])

        @needs("lane_acquire", "lane_push", "lane_renew", "lane_next", "lane_done", "lane_tasks")
        @rule(i=st.integers(0, 1), who=st.integers(0, 2), k=st.integers(0, 5), n=st.integers(1, 3),
              wait=st.sampled_from(["none", "half", "lapse"]), finish=st.booleans())
        def lane_cycle(self, i: int, who: int, k: int, n: int, wait: str, finish: bool) -> None:
            """A holder's turn on a lane: it takes the lane, follow-up work arrives while it is
            busy, time passes (some of its lease, or past its lapse), it renews, takes the oldest
            task and maybe finishes it, and the lane's queue is read back."""
            lease = h.do("lane_acquire", session_key=sk, lane=LANES[i], owner=c.pools.owners[who]).value
            if not isinstance(lease, dict):
                return
            for j in range(n):
                h.do("lane_push", session_key=sk, lane=LANES[i], task_id=f"task-{k + j}", body=c.pools.payloads[(k + j) % 6])
            lt = c.spec.lease_default
            h.advance({"none": 0.0, "half": lt.ttl / 2, "lapse": h.lapse_step()}[wait])
            tok = lease.get("token")
            h.do("lane_renew", session_key=sk, lane=LANES[i], token=tok)
            got = h.do("lane_next", session_key=sk, lane=LANES[i], token=tok).value
            if finish and isinstance(got, dict):
                h.do("lane_done", session_key=sk, lane=LANES[i], token=tok, task_id=got.get("task_id"))
            h.do("lane_tasks", session_key=sk, lane=LANES[i])

    return Lanes


def wakeups_rules(c: Ctx) -> type:
    h = c.h
    kinds = list(c.spec.wakeup_kinds) or ["message"]
    timers = st.sampled_from([None, None, 0.0, 5.0, 60.0, 600.0])
    lt = c.spec.lease_default
    waits = st.sampled_from(["none", "none", "half", "lapse"])

    def run(r: int) -> str:
        """One of the runs the model knows (or, past them, a new one)."""
        known = sorted(h.model.runs)
        return known[r] if r < len(known) else RUNS[r % len(RUNS)]

    def tok(rid: str, use: str) -> str:
        """The run's live hand-out token ("live"), its first one ever ("held": superseded once
        the run was handed out again) or a forged one."""
        r = h.model.runs.get(rid) or {}
        if use == "live" and r.get("token"):
            return str(r["token"])
        if use == "held" and r.get("tokens"):
            return str(r["tokens"][0])
        return FORGED

    def suspend(rid: str, timer: float | None, use: str = "live") -> None:
        h.do("wake_suspend", run_id=rid, timer_at=None if timer is None else h.now() + h.contract_seconds(timer), token=tok(rid, use))

    def wait(how: str) -> None:
        h.advance({"none": 0.0, "half": lt.ttl / 2, "lapse": h.lapse_step()}[how])

    class Wakeups:
        @rule(r=st.integers(0, 3), timer=timers, use=USE)
        def wake_suspend(self, r: int, timer: float | None, use: str) -> None:
            suspend(run(r), timer, use)

        @rule(r=st.integers(0, 3), kind=st.sampled_from(kinds), times=st.integers(1, 3))
        def wake_fire(self, r: int, kind: str, times: int) -> None:
            """One or several wakeups of a kind for a run (merged while it is pending)."""
            for _ in range(times):
                h.do("wake_fire", run_id=run(r), kind=kind)

        @rule(who=st.integers(0, 2), times=st.integers(1, 2))
        def wake_take(self, who: int, times: int) -> None:
            for _ in range(times):
                h.do("wake_take", worker=c.pools.owners[who])

        @rule(r=st.integers(0, 3))
        def wake_get(self, r: int) -> None:
            h.do("wake_get", run_id=run(r))

        @needs("wake_suspend", "wake_fire", "wake_take")
        @rule(r=st.integers(0, 2), fired=st.lists(st.sampled_from(kinds), max_size=3), timer=timers,
              during=st.lists(st.sampled_from(kinds), max_size=2), takes=st.integers(1, 3), how=waits, use=USE)
        def wake_cycle(self, r: int, fired: list[str], timer: float | None, during: list[str], takes: int, how: str,
                       use: str) -> None:
            """A run's wake cycle: it suspends (maybe with a timer), wakeups fire, workers take
            (more than once: the cycle is handed out once), wakeups fire while it runs, time
            passes (half a ttl after a renew with the live, the first or a forged token, or past
            the hand-out's lapse: its holder died, and the next take hands it out again), and it
            suspends again, with the live, the first or a forged token
            (pending at once if a wakeup fired while it ran)."""
            rid = RUNS[r]
            if rid in h.model.runs and h.model.runs[rid]["state"] != "running":
                for _ in range(2):
                    h.do("wake_take", worker=c.pools.owners[0])
                if h.model.runs[rid]["state"] != "running":
                    return
            suspend(rid, timer)
            for kind in fired:
                h.do("wake_fire", run_id=rid, kind=kind)
            for i in range(takes):
                h.do("wake_take", worker=c.pools.owners[i % 3])
            for kind in during:
                h.do("wake_fire", run_id=rid, kind=kind)
            if how == "half" and h.claims("wake_renew"):
                h.do("wake_renew", run_id=rid, token=tok(rid, use))  # the holder (or an impostor) renews
            wait(how)
            for i in range(takes):
                h.do("wake_take", worker=c.pools.owners[(i + 1) % 3])
            if h.model.runs[rid]["state"] == "running":
                suspend(rid, None, use)

    return Wakeups


def spawn_rules(c: Ctx) -> type:
    h = c.h
    model = h.model

    def spawned() -> list[tuple[str, str]]:
        return [(p, k) for p, kids in model.spawned.items() for k, _ in kids]

    class Spawn:
        @rule(target=WORKS, parent=WORKS, k=st.integers(0, 3), replay=st.booleans(),
              args=c.draw.call("spawn", ("parent_id", "key")))
        def spawn(self, parent: str, k: int, replay: bool, args: dict[str, Any]) -> Any:
            """Spawn a child; half the time the spawn is then replayed at once (a worker retrying
            the step): the log answers with the same child and the queue holds no second one."""
            out = h.do("spawn", parent_id=parent, key=f"sub-{k}", **args)
            wid = out.value["work"].get("work_id") if out.ok and isinstance(out.value, dict) and out.value.get("created") else None
            if replay and wid is not None:
                h.do("spawn", parent_id=parent, key=f"sub-{k}")
                if "list" in c.enabled:
                    h.do("list")
            return wid if wid in model.items else multiple()

        @needs("list")
        @precondition(lambda self: spawned())
        @rule(i=st.integers(0, 15))
        def respawn(self, i: int) -> None:
            """A worker that took a parent over replays one of its spawns (same key): the log
            answers with the child it records, and the queue holds no second one."""
            parent, key = spawned()[i % len(spawned())]
            h.do("spawn", parent_id=parent, key=key)
            h.do("list")

        @rule(work=WORKS)
        def children(self, work: str) -> None:
            h.do("children", work_id=work)

        @rule(work=WORKS, args=c.draw.call("cancel_tree", ("work_id",)))
        def cancel_tree(self, work: str, args: dict[str, Any]) -> None:
            h.do("cancel_tree", work_id=work, **args)

        @needs("spawn")
        @rule(target=WORKS, wide=st.booleans(), cancel=st.booleans(), args=c.draw.call("cancel_tree", ("work_id",)))
        def tree(self, wide: bool, cancel: bool, args: dict[str, Any]) -> str:
            """A fresh root grows past its budget, as a chain (one child per generation) or as a
            fan of two branches: either way the spawn after the budget's last is refused.  Half
            the trees are then cancelled from their root, every generation below it at once."""
            root = c.fresh(len(model.items))
            tips = [root, root] if wide else [root]
            for n in range(c.spec.spawn_budget + 1):
                i = n % len(tips)
                out = h.do("spawn", parent_id=tips[i], key=f"tree-{n}")
                if not out.ok:
                    break
                tips[i] = out.value["work"]["work_id"]
            if cancel and "cancel_tree" in c.enabled:
                h.do("cancel_tree", work_id=root, **args)
            return root

    return Spawn


def ask_rules(c: Ctx) -> type:
    h = c.h

    class Ask:
        @rule(work=WORKS)
        def ask_outcome(self, work: str) -> None:
            h.do("ask_outcome", work_id=work)

        @needs("ask_outcome")
        @rule()
        def ask_every_status(self) -> None:
            """A caller asks the latest item of every status for its answer: each outcome the
            contract maps gets asked, the replies with their results."""
            latest = {it["status"]: wid for wid, it in h.model.items.items()}
            for wid in latest.values():
                h.do("ask_outcome", work_id=wid)

    return Ask


def logread_rules(c: Ctx) -> type:
    h = c.h

    class LogRead:
        @rule(stream=st.sampled_from(["stream-0", "stream-1"]))
        def log_last_seq(self, stream: str) -> None:
            h.do("log_last_seq", stream=stream)

        @rule(stream=st.sampled_from(["stream-0", "stream-1"]), args=c.draw.call("log_tail", ("stream",)))
        def log_tail(self, stream: str, args: dict[str, Any]) -> None:
            h.do("log_tail", stream=stream, **args)

    return LogRead


# rule sets by the profile the contract gives their operations (``Ctx.enabled`` decides which run)
RULE_SETS: dict[str, Callable[[Ctx], type]] = {
    "core": core_rules, "cancel": cancel_rules, "lease": lease_rules, "waiting": waiting_rules, "retry": retry_rules,
    "idempotency": idempotency_rules, "recovery": recovery_rules, "inbox": inbox_rules, "outbox": outbox_rules,
    "eventlog": eventlog_rules, "lanes": lanes_rules, "wakeups": wakeups_rules, "spawn": spawn_rules, "ask": ask_rules,
    "logread": logread_rules,
}


def rule_ops(name: str, fn: Any, spec: Spec) -> tuple[str, ...]:
    """The operations a rule uses: those it is marked with, and the operation it is named after."""
    own = (name,) if name in spec.operations else ()
    return (*own, *getattr(fn, NEEDS, ()))


def rule_set(profile: str, c: Ctx) -> type | None:
    """The profile's rule set with the rules whose operations are not all enabled removed."""
    make = RULE_SETS.get(profile)
    if make is None:
        return None
    cls = make(c)
    for name, fn in list(vars(cls).items()):
        if callable(fn) and not all(op in c.enabled for op in rule_ops(name, fn, c.spec)):
            delattr(cls, name)
    return cls


__all__ = ["Ctx", "Lease", "RULE_SETS", "WORKS", "LEASES", "RECEIPTS", "LETTERS", "rule_set", "needs",
           "DriveBlocked", "NotApplicable"]
