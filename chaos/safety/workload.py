"""Workloads: items of work, each a sequence of steps, generated from a seed with faker.

A step is either an *effect* step of one of the contract's step classes (a tool call with an
input) or a *wait*: the worker puts the item into a waiting status and leaves it until the
harness delivers the callback, after which a worker resumes it and carries on with the next
step.  Workloads travel as plain JSON (to worker processes and in replay files).
"""

from __future__ import annotations

import datetime
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ledgercheck.spec import Spec

# Tool verbs by effect kind, so that generated tools read like what the step does.
_VERBS = {
    "none": ["render_template", "summarize", "classify", "extract_fields", "plan_reply"],
    "keyed": ["send_email", "post_message", "upsert_contact", "publish_event", "enqueue_job"],
    "rerunnable": ["complete_prompt", "embed_document", "rank_candidates", "draft_answer"],
    "lookup": ["create_ticket", "open_invoice", "book_slot", "file_report"],
    "unsafe": ["charge_card", "send_sms", "wire_transfer", "print_label"],
}
WAIT_TIMEOUT = 30 * 86400.0  # long enough that no test clock reaches a wait's deadline


class WorkloadError(ValueError):
    """A workload document is malformed; the message says where."""


@dataclass(frozen=True)
class Step:
    step_id: str
    kind: str  # "effect" | "wait"
    step_class: str | None = None
    tool: str | None = None
    input: Any = None
    wait_kind: str | None = None
    wait_ref: str | None = None
    wait_timeout: float | None = None

    @property
    def is_effect(self) -> bool:
        return self.kind == "effect"

    def to_dict(self) -> dict[str, Any]:
        if self.is_effect:
            return {"step_id": self.step_id, "kind": "effect", "step_class": self.step_class, "tool": self.tool,
                    "input": self.input}
        return {"step_id": self.step_id, "kind": "wait", "wait_kind": self.wait_kind, "wait_ref": self.wait_ref,
                "wait_timeout": self.wait_timeout}


@dataclass(frozen=True)
class Item:
    key: str
    source_system: str
    source_id: str
    steps: tuple[Step, ...]
    source_run_id: str | None = None
    priority: int | None = None
    payload: Mapping[str, Any] = field(default_factory=dict)
    retry_policy: Mapping[str, Any] | None = None  # the item's own policy, given at create

    def effect_steps(self) -> list[int]:
        return [i for i, s in enumerate(self.steps) if s.is_effect]

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "source_system": self.source_system, "source_id": self.source_id,
                "source_run_id": self.source_run_id, "priority": self.priority, "payload": dict(self.payload),
                "steps": [s.to_dict() for s in self.steps]} | ({"retry_policy": dict(self.retry_policy)} if self.retry_policy else {})


@dataclass(frozen=True)
class Workload:
    seed: int
    items: tuple[Item, ...]
    name: str = "custom"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "seed": self.seed, "items": [it.to_dict() for it in self.items]}

    def item(self, key: str) -> Item:
        for it in self.items:
            if it.key == key:
                return it
        raise KeyError(key)

    @property
    def step_count(self) -> int:
        return sum(len(it.steps) for it in self.items)

    def classes(self) -> set[str]:
        return {s.step_class for it in self.items for s in it.steps if s.is_effect and s.step_class}

    @classmethod
    def from_dict(cls, doc: Any, spec: Spec | None = None) -> Workload:
        if not isinstance(doc, Mapping):
            raise WorkloadError("workload: expected an object")
        raw_items = doc.get("items")
        if not isinstance(raw_items, list) or not raw_items:
            raise WorkloadError("workload: 'items' must be a non-empty list")
        items = []
        seen: set[str] = set()
        for n, ri in enumerate(raw_items):
            it = parse_item(ri, f"workload item {n}", spec)
            if it.key in seen:
                raise WorkloadError(f"workload item {n}: duplicate key {it.key!r}")
            seen.add(it.key)
            items.append(it)
        seed = doc.get("seed", 0)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise WorkloadError("workload: 'seed' must be an integer")
        return cls(seed, tuple(items), str(doc.get("name") or "custom"))


def parse_item(ri: Any, where: str, spec: Spec | None = None) -> Item:
    """One item of a workload document (checked)."""
    if not isinstance(ri, Mapping):
        raise WorkloadError(f"{where}: expected an object")
    for k in ("key", "source_system", "source_id"):
        if not isinstance(ri.get(k), str) or not ri.get(k):
            raise WorkloadError(f"{where}: '{k}' must be a non-empty string")
    if spec is not None and ri["source_system"] not in spec.source_systems:
        raise WorkloadError(f"{where}: unknown source system {ri['source_system']!r}")
    raw_steps = ri.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise WorkloadError(f"{where}: 'steps' must be a non-empty list")
    ids: set[str] = set()
    steps = [_step(rs, f"{where} step {m}", spec, ids) for m, rs in enumerate(raw_steps)]
    prio = ri.get("priority")
    if prio is not None and (not isinstance(prio, int) or isinstance(prio, bool)):
        raise WorkloadError(f"{where}: 'priority' must be an integer")
    run = ri.get("source_run_id")
    if run is not None and not isinstance(run, str):
        raise WorkloadError(f"{where}: 'source_run_id' must be a string")
    payload = ri.get("payload") or {}
    if not isinstance(payload, Mapping):
        raise WorkloadError(f"{where}: 'payload' must be an object")
    policy = ri.get("retry_policy")
    if policy is not None and not isinstance(policy, Mapping):
        raise WorkloadError(f"{where}: 'retry_policy' must be an object")
    return Item(ri["key"], ri["source_system"], ri["source_id"], tuple(steps), run, prio, dict(payload),
                dict(policy) if policy else None)


def _step(rs: Any, where: str, spec: Spec | None, ids: set[str]) -> Step:
    if not isinstance(rs, Mapping):
        raise WorkloadError(f"{where}: expected an object")
    sid = rs.get("step_id")
    if not isinstance(sid, str) or not sid:
        raise WorkloadError(f"{where}: 'step_id' must be a non-empty string")
    if sid in ids:
        raise WorkloadError(f"{where}: duplicate step_id {sid!r}")
    ids.add(sid)
    kind = rs.get("kind")
    if kind == "effect":
        cls_ = rs.get("step_class")
        if not isinstance(cls_, str) or (spec is not None and cls_ not in spec.step_classes):
            raise WorkloadError(f"{where}: unknown step class {cls_!r}")
        tool = rs.get("tool")
        if not isinstance(tool, str) or not tool:
            raise WorkloadError(f"{where}: 'tool' must be a non-empty string")
        return Step(sid, "effect", cls_, tool, rs.get("input"))
    if kind == "wait":
        wk = rs.get("wait_kind")
        if not isinstance(wk, str) or (spec is not None and wk not in spec.waiting_statuses):
            raise WorkloadError(f"{where}: unknown wait kind {wk!r}")
        ref = rs.get("wait_ref")
        if not isinstance(ref, str) or not ref:
            raise WorkloadError(f"{where}: 'wait_ref' must be a non-empty string")
        to = rs.get("wait_timeout")
        if to is not None and (not isinstance(to, int | float) or isinstance(to, bool) or to <= 0):
            raise WorkloadError(f"{where}: 'wait_timeout' must be a positive number")
        return Step(sid, "wait", wait_kind=wk, wait_ref=ref, wait_timeout=None if to is None else float(to))
    raise WorkloadError(f"{where}: 'kind' must be 'effect' or 'wait', not {kind!r}")


# ---------------------------------------------------------------------------------- generation
class _Gen:
    """Seeded generator.  Faker supplies pools of names, addresses, phrases and words once per
    seed; items are composed from the pools (drawing each value from faker directly costs
    milliseconds, too much for storms of thousands of items)."""

    POOL = 48

    def __init__(self, spec: Spec, seed: int) -> None:
        from faker import Faker

        self.spec = spec
        fake = Faker()
        fake.seed_instance(seed)
        self.rng = random.Random(seed)
        self.n = 0
        k = self.POOL
        self.users = [fake.user_name() for _ in range(k)]
        self.domains = [fake.free_email_domain() for _ in range(8)]
        self.emails = [fake.email() for _ in range(k)]
        self.names = [fake.name() for _ in range(k)]
        self.companies = [fake.company() for _ in range(k)]
        self.phrases = [fake.catch_phrase() for _ in range(k)]
        self.sentences = [fake.sentence(nb_words=8) for _ in range(k)]
        self.words = sorted({fake.word() for _ in range(k)})
        self.hosts = sorted({fake.domain_word() for _ in range(k)})
        self.slugs = [fake.slug() for _ in range(k)]
        self.surnames = [fake.last_name().lower() for _ in range(k)]
        self.locales = [fake.locale() for _ in range(16)]
        start, end = datetime.datetime(2024, 1, 1), datetime.datetime(2024, 12, 31)  # fixed: no wall clock
        self.stamps = [fake.date_time_between(start, end).strftime("%Y%m%dT%H%M%S") for _ in range(k)]
        self.uuids = [fake.uuid4() for _ in range(k)]

    def pick(self, pool: list[str]) -> str:
        return pool[self.rng.randrange(len(pool))]

    def source(self, system: str) -> tuple[str, str | None]:
        self.n += 1
        n = self.n
        if system == "conversation":
            sid = f"{self.pick(self.users)}@{self.pick(self.domains)}/msg-{n:05d}"
        elif system == "scheduler":
            sid = f"job-{self.pick(self.slugs)}-{n:05d}"
        elif system == "control":
            sid = f"ctl-{self.pick(self.words)}-{n:05d}"
        else:
            sid = f"{self.pick(self.surnames)}-{self.rng.randrange(10**4):04d}-{n:05d}"
        run = f"run-{self.pick(self.stamps)}-{n:05d}" if system in self.spec.run_id_required_for else None
        return sid, run

    def payload(self) -> dict[str, Any]:
        return {"customer": self.pick(self.names), "email": self.pick(self.emails), "company": self.pick(self.companies),
                "note": self.pick(self.sentences)}

    def effect(self, step_id: str, cls_: str) -> Step:
        kind = self.spec.step_classes[cls_]
        verb = self.rng.choice(_VERBS.get(kind, ["call"]))
        tool = f"{self.pick(self.hosts)}.{verb}"
        # an amount in cents: effect inputs hold integers only, whose canonical JSON every
        # language writes alike (docs/contract.md, Idempotency)
        inp = {"to": self.pick(self.emails), "subject": self.pick(self.phrases), "amount_cents": self.rng.randint(1, 50000),
               "locale": self.pick(self.locales)}
        return Step(step_id, "effect", cls_, tool, inp)

    def wait(self, step_id: str, kind: str) -> Step:
        self.n += 1
        ref = f"{kind}:{self.pick(self.uuids)[:18]}-{self.n:05d}"
        return Step(step_id, "wait", wait_kind=kind, wait_ref=ref, wait_timeout=WAIT_TIMEOUT)


def default_workload(spec: Spec, seed: int = 0, *, waiting: bool = True) -> Workload:
    """One item per step class: ``[class i, wait, class i+1]``.

    Every class is the first step of an item (its matrix row applies as written), follows a
    completed step of another class, and follows a wait; the items rotate over the source
    systems (so per-source lease timings are exercised) and over the waiting kinds.
    """
    g = _Gen(spec, seed)
    classes = list(spec.step_classes)
    kinds = list(spec.waiting_statuses)
    systems = list(spec.source_systems)
    items = []
    for i, cls_ in enumerate(classes):
        system = systems[i % len(systems)]
        sid, run = g.source(system)
        steps = [g.effect("s1", cls_)]
        if waiting and kinds:
            steps.append(g.wait("w1", kinds[i % len(kinds)]))
        steps.append(g.effect("s2", classes[(i + 1) % len(classes)]))
        items.append(Item(f"item-{i + 1}", system, sid, tuple(steps), run, None, g.payload()))
    return Workload(seed, tuple(items), "default")


def generate_workload(spec: Spec, seed: int = 0, *, items: int = 20, max_steps: int = 3, wait_ratio: float = 0.2,
                      classes: list[str] | None = None, waiting: bool = True) -> Workload:
    """A random workload: ``items`` items of 1..max_steps effect steps, some with waits between."""
    if items < 1 or max_steps < 1:
        raise ValueError("a workload needs at least one item and one step")
    g = _Gen(spec, seed)
    pool = list(classes or spec.step_classes)
    kinds = list(spec.waiting_statuses)
    systems = list(spec.source_systems)
    out = []
    for i in range(items):
        system = g.rng.choice(systems)
        sid, run = g.source(system)
        steps: list[Step] = []
        for n in range(g.rng.randint(1, max_steps)):
            if n and waiting and kinds and g.rng.random() < wait_ratio:
                steps.append(g.wait(f"w{n}", g.rng.choice(kinds)))
            steps.append(g.effect(f"s{n + 1}", g.rng.choice(pool)))
        prio = g.rng.randint(spec.priority_min, spec.priority_max)
        out.append(Item(f"item-{i + 1}", system, sid, tuple(steps), run, prio, g.payload()))
    return Workload(seed, tuple(out), "generated")


# ---------------------------------------------------------------------------------- storm index
class ItemIndex:
    """A workload in a small SQLite file, looked up item by item (storm workers claim a few
    items each; parsing the whole workload in every new worker would cost more than the kill)."""

    def __init__(self, path: str, spec: Spec | None = None) -> None:
        import sqlite3

        self.spec = spec
        self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self.cache: dict[tuple[Any, ...], Item | None] = {}

    @staticmethod
    def write(workload: Workload, path: str) -> None:
        import json
        import sqlite3

        conn = sqlite3.connect(path)
        try:
            conn.execute("CREATE TABLE item (n INTEGER PRIMARY KEY, source_system TEXT, source_id TEXT, "
                         "source_run_id TEXT, doc TEXT NOT NULL)")
            conn.execute("CREATE UNIQUE INDEX item_source ON item(source_system, source_id, ifnull(source_run_id, ''))")
            conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
            conn.executemany("INSERT INTO item VALUES (?, ?, ?, ?, ?)",
                             [(n, it.source_system, it.source_id, it.source_run_id, json.dumps(it.to_dict()))
                              for n, it in enumerate(workload.items)])
            conn.execute("INSERT INTO meta VALUES ('seed', ?), ('name', ?)", (workload.seed, workload.name))
            conn.commit()
        finally:
            conn.close()

    def get(self, source_system: str, source_id: str, source_run_id: str | None) -> Item | None:
        import json

        k = (source_system, source_id, source_run_id)
        if k not in self.cache:
            r = self.conn.execute("SELECT n, doc FROM item WHERE source_system = ? AND source_id = ? AND "
                                  "ifnull(source_run_id, '') = ifnull(?, '')", k).fetchone()
            self.cache[k] = None if r is None else parse_item(json.loads(r[1]), f"workload item {r[0]}", self.spec)
        return self.cache[k]

    def workload(self) -> Workload:
        import json

        seed = self.conn.execute("SELECT value FROM meta WHERE key = 'seed'").fetchone()
        items = [json.loads(r[0]) for r in self.conn.execute("SELECT doc FROM item ORDER BY n")]
        return Workload.from_dict({"seed": int(seed[0]) if seed else 0, "items": items}, self.spec)

    def close(self) -> None:
        self.conn.close()


# ---------------------------------------------------------------------------------- safety profiles
SAFETY_WORKLOADS = ("plain", "profiles")  # what the safety campaign's workers do with an item


class ProfileSteps:
    """The safety campaign's ``profiles`` workload: besides its effect, a worker holding an item
    drives the spawn, inbox and outbox profiles the ledger offers (operations found from the
    contract, chaos/crossitem.roles; one answered ``unsupported`` is not asked again), so the
    cross-item rules are exercised under the campaign's faults:

    * spawn: a root item (one the producer made) spawns a child, its holder joins on the children,
      and now and then cancels the tree instead of closing the root out (children are items the
      workers claim like any other);
    * inbox: when handed an item, the holder delivers a message about it to one of a few shared
      recipients (now and then twice: a duplicate delivery) and drains a recipient; before its
      close-out it acks or nacks what it got (so several holders drain one recipient at once, and
      messages stay in flight while their holder works, is paused or is killed);
    * outbox: the item's outbound message is enqueued (now and then again, as a retry does), and
      the monitor's relay lists the pending messages and marks each sent;
    * repeats in every state (crossitem.repeated_requests): a sender's retry crossing the drain
      delivers a message again while it is in flight, and one crossing the ack or nack after it
      (acked, pending again or dead-lettered); a holder's late retry enqueues the outbound message
      of the item it finished before (pending, or marked sent by the relay meanwhile).  Each is
      drawn for every message and item, so a run of a dozen items repeats requests in each state.
    """

    RECIPIENTS = 3
    SPAWN_P, CANCEL_P, DUP_P, NACK_P, RETRY_P, AGAIN_P = 0.5, 0.25, 0.2, 0.3, 0.2, 0.5

    def __init__(self, spec: Spec) -> None:
        from .crossitem import roles

        self.ops = roles(spec)
        self.sent = 0
        # holder -> (recipient, the messages it drained: (message id, sender, body))
        self.drained: dict[str, tuple[str, list[tuple[str, str, Any]]]] = {}
        self.finished: dict[str, str] = {}  # holder -> the item whose outbound message it enqueued last
        cancel_ops = {n for n, o in spec.operations.items() if o.profile == "cancel"}
        # the status a holder closes its item out with after cancelling its tree
        self.cancelled = next((t.dst for t in spec.transitions if set(t.ops) & cancel_ops
                               and t.dst in spec.terminal_statuses), None)

    def begin(self, call: Any, name: str, held: Mapping[str, Any], now: Any, rng: random.Random) -> None:
        """A holder's first steps on the item it was handed: a message about it delivered to a
        shared recipient (now and then twice), and a recipient drained; what it got stays in flight
        while the holder works (a holder killed or paused meanwhile leaves it so)."""
        o = self.ops
        self.drained[name] = ("", [])
        if not (o["deliver"] and o["drain"]):
            return
        wid = str(held["work_id"])
        box = f"box-{rng.randrange(self.RECIPIENTS)}"
        for _ in range(2 if rng.random() < self.DUP_P else 1):
            call(o["deliver"], recipient=box, message_id=f"m-{wid}", sender=name, body={"work": wid}, now=now())
        src = f"box-{rng.randrange(self.RECIPIENTS)}"
        got = call(o["drain"], recipient=src, max=rng.choice((1, 2)), now=now())
        mine = [(m["message_id"], m.get("sender") if isinstance(m.get("sender"), str) else name, m.get("body"))
                for m in (got.value if got.ok and isinstance(got.value, list) else [])
                if isinstance(m, Mapping) and isinstance(m.get("message_id"), str)]
        self.drained[name] = (src, mine)
        for mid, sender, body in mine:
            if rng.random() < self.AGAIN_P:  # its sender's retry, crossing the drain: the message is in flight
                call(o["deliver"], recipient=src, message_id=mid, sender=sender, body=body, now=now())

    def holding(self, call: Any, name: str, held: Mapping[str, Any], now: Any, rng: random.Random) -> str | None:
        """A holder's steps on the item it holds, before its close-out (``call(op, **args)``
        records and answers): the messages it drained acked or nacked, the outbound message, a
        spawn.  The status to close the item out with when the holder cancelled its tree (None:
        as usual)."""
        o = self.ops
        wid = str(held["work_id"])
        src, mine = self.drained.pop(name, ("", []))
        for mid, sender, body in mine:
            back = o["nack"] if o["nack"] and rng.random() < self.NACK_P else o["ack"]
            if back:
                out = call(back, recipient=src, message_id=mid, now=now())
                dead = out.ok and isinstance(out.value, Mapping) and out.value.get("dead") is True
                if dead or rng.random() < self.AGAIN_P:  # its sender's retry, crossing the ack or nack (always
                    # after a dead letter: few runs make one)
                    call(o["deliver"], recipient=src, message_id=mid, sender=sender, body=body, now=now())
        if o["enqueue"]:
            before = self.finished.get(name)
            if before is not None and rng.random() < self.AGAIN_P:  # a late retry of the item finished before
                call(o["enqueue"], key=f"notify-{before}", destination="mail", payload={"work": before}, work_id=before,
                     now=now())
            for _ in range(2 if rng.random() < self.RETRY_P else 1):
                call(o["enqueue"], key=f"notify-{wid}", destination="mail", payload={"work": wid}, work_id=wid, now=now())
            self.finished[name] = wid
        if o["spawn"] and o["join"] and rng.random() < self.SPAWN_P:  # a child's child too, within the spawn budget
            out = call(o["spawn"], parent_id=wid, key="child-1", payload={"from": wid}, now=now())
            if out.ok:
                call(o["join"], work_id=wid)
                if o["cascade"] and self.cancelled and rng.random() < self.CANCEL_P \
                        and call(o["cascade"], work_id=wid, reason="the run was cancelled", now=now()).ok:
                    return self.cancelled
        return None

    def relay(self, call: Any, now: Any) -> None:
        """The monitor's relay: the pending outbound messages, each marked sent."""
        o = self.ops
        if not (o["listing"] and o["mark"]):
            return
        got = call(o["listing"])
        for m in got.value if got.ok and isinstance(got.value, list) else []:
            if isinstance(m, Mapping) and isinstance(m.get("key"), str):
                self.sent += 1
                call(o["mark"], key=m["key"], provider_ref=f"relay-{self.sent}", now=now())

