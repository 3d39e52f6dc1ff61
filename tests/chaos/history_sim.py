"""Synthetic safety histories: a fluent builder over a small model of a correct ledger, and a
seeded simulation of a campaign (serial execution, random kills and pauses).

Used by the checker's tests (hand-built anomalies, random correct histories, single mutations)
and by bench/bench_history.py (a realistic 100,000-operation history).  Nothing here touches a
real ledger: the model is the contract's lease rules in a few lines, so a history it produces is
correct by construction unless a test breaks it on purpose.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from ledgercheck.chaos.safety.history import FORMAT, History

START = 1_000_000.0
STALE = {"code": "stale_lease", "message": "the token is not the live lease", "definite": True}
BUSY = {"code": "invalid_transition", "message": "already leased", "definite": True}
KILLED = {"code": "transport", "message": "worker killed mid-call", "definite": False}


@dataclass
class ItemState:
    work_id: str
    source_id: str
    created_at: float
    status: str = "queued"
    owner: str | None = None
    token: str | None = None
    version: int = 0
    expires: float | None = None
    attempt: int = 0
    result: Any = None
    started_at: float | None = None
    finished_at: float | None = None
    queue: bool = False  # shown as a lease-less queue shows it: no owner, no expiry, the id as token
    next_retry_at: float | None = None

    def snapshot(self) -> dict[str, Any]:
        if self.queue:
            return {"work_id": self.work_id, "source_system": "control", "source_id": self.source_id,
                    "status": self.status, "owner": None,
                    "lease_token": self.work_id if self.status == "running" else None, "lease_version": 0,
                    "lease_expires_at": None, "attempt": 0, "result": self.result, "created_at": self.created_at,
                    "started_at": None, "finished_at": self.finished_at}
        return {"work_id": self.work_id, "source_system": "control", "source_id": self.source_id,
                "status": self.status, "owner": self.owner, "lease_token": self.token,
                "lease_version": self.version, "lease_expires_at": self.expires, "attempt": self.attempt,
                "result": self.result, "created_at": self.created_at, "started_at": self.started_at,
                "finished_at": self.finished_at, **({} if self.next_retry_at is None else {"next_retry_at": self.next_retry_at})}


class HistoryBuilder:
    """Writes history records (as JSON objects) while keeping each item's state.

    ``outcome`` is ``ok``, ``refused``, ``indefinite`` (a completion saying so) or ``killed``
    (an invoke with no completion).  The model applies an operation when its outcome is ok, or
    when ``applied=True`` is passed for one that is not (a refused one: a broken ledger whose
    refusal took effect); it never decides whether the ledger *should* have allowed it: that is
    the caller's choice (see :func:`simulate`).
    """

    def __init__(self, *, delivery: str = "at-least-once", reclaim: str = "lease", ttl: float = 45.0,
                 grace: float = 15.0, clock: str = "injected", workers: int = 2, seed: int = 0,
                 prefix: str = "", queue: bool = False) -> None:
        self.ttl, self.grace = ttl, grace
        self.prefix = prefix
        self.queue = queue  # a lease-less queue: see ItemState.queue
        self.records: list[dict[str, Any]] = [{
            "type": "meta", "format": FORMAT,
            "adapter": {"address": "synthetic", "name": "model", "version": "1", "clock": clock, "durable": True},
            "declared": {"delivery": delivery, "reclaim": reclaim}, "timings": {"ttl": ttl, "grace": grace},
            "seed": seed, "workers": workers, "items": 0, "nemesis": {"faults": ["kill", "pause", "reopen"], "seed": seed}}]
        self.t = 0.0
        self.next_id = 0
        self.items: dict[str, ItemState] = {}
        self._tokens = 0

    # -- raw records
    def tick(self, dt: float = 0.001) -> float:
        self.t = round(self.t + dt, 6)
        return self.t

    def invoke(self, process: str, op: str, args: Mapping[str, Any]) -> int:
        op_id = self.next_id
        self.next_id += 1
        self.records.append({"type": "invoke", "id": op_id, "process": process, "op": op, "args": dict(args),
                             "t": self.tick(), "now": args.get("now")})
        return op_id

    def complete(self, op_id: int, process: str, op: str, outcome: str, result: Any = None, error: Any = None) -> None:
        self.records.append({"type": "complete", "id": op_id, "process": process, "op": op, "outcome": outcome,
                             "result": result, "error": error, "t": self.tick()})

    def call(self, process: str, op: str, args: Mapping[str, Any], outcome: str, result: Any = None,
             error: Any = None) -> int:
        op_id = self.invoke(process, op, args)
        if outcome == "killed":
            return op_id
        if outcome == "ok":
            self.complete(op_id, process, op, "ok", result, None)
        else:
            self.complete(op_id, process, op, outcome, None,
                          error if error is not None else (KILLED if outcome == "indefinite" else STALE))
        return op_id

    def effect(self, process: str, work_id: str, key: str | None = None, applied: bool = True) -> HistoryBuilder:
        self.records.append({"type": "effect", "process": process, "work_id": work_id,
                             "key": key or f"{work_id}:send", "applied": applied, "count": None, "t": self.tick()})
        return self

    def nemesis(self, fault: str, process: str | None = None, point: Any = None) -> HistoryBuilder:
        self.records.append({"type": "nemesis", "fault": fault, "process": process, "point": point, "t": self.tick()})
        return self

    # -- ledger operations on the model
    def create(self, process: str, work_id: str, now: float, outcome: str = "ok", applied: bool | None = None) -> HistoryBuilder:
        src = f"src-{work_id}"
        st = ItemState(work_id, src, now, queue=self.queue)
        if _applies(outcome, applied):
            self.items[work_id] = st
            self.records[0]["items"] = len(self.items)
        self.call(process, "create", {"source_system": "control", "source_id": src, "now": now}, outcome,
                  {"work": st.snapshot(), "created": True})
        return self

    def claim(self, process: str, work_id: str | None, now: float, outcome: str = "ok",
              applied: bool | None = None, owner: str | None = None, by_id: bool = False) -> str | None:
        """Claim `work_id` (the item the ledger hands out); returns the new token when applied."""
        owner = owner or process
        token = None
        result = None
        if work_id is not None and _applies(outcome, applied):
            st = self.items[work_id]
            self._tokens += 1
            token = work_id if self.queue else f"{self.prefix}tok{self._tokens}"
            st.status, st.owner, st.token = "running", owner, token
            st.version += 1
            st.expires = now + self.ttl
            st.attempt += 1
            st.started_at = now
            result = st.snapshot()
        args: dict[str, Any] = {"owner": owner, "now": now}
        if by_id and work_id is not None:
            args["work_id"] = work_id
        self.call(process, "claim", args, outcome, result, BUSY if outcome == "refused" else None)
        return token

    def claim_nothing(self, process: str, now: float) -> HistoryBuilder:
        self.call(process, "claim", {"owner": process, "now": now}, "ok", None)
        return self

    def renew(self, process: str, work_id: str, token: str, now: float, outcome: str = "ok") -> HistoryBuilder:
        st = self.items[work_id]
        result = None
        if outcome == "ok":
            st.expires = now + self.ttl
            result = st.snapshot()
        self.call(process, "renew", {"work_id": work_id, "token": token, "now": now}, outcome, result)
        return self

    def close_out(self, process: str, work_id: str, token: str, now: float, status: str = "done",
                  outcome: str = "ok", applied: bool | None = None, result: Any = None) -> HistoryBuilder:
        st = self.items[work_id]
        value = result if result is not None else {"by": process, "attempt": st.attempt}
        snap = None
        if _applies(outcome, applied):
            st.status, st.owner, st.token, st.expires = status, None, None, None
            st.result, st.finished_at = value, now
            snap = st.snapshot()
        self.call(process, "close_out", {"work_id": work_id, "token": token, "status": status, "result": value,
                                         "now": now}, outcome, snap)
        return self

    def fail(self, process: str, work_id: str, token: str, now: float, retry_in: float = 10.0,
             outcome: str = "ok") -> HistoryBuilder:
        """A retryable failure: the item waits in retry_scheduled until ``now + retry_in``."""
        st = self.items[work_id]
        snap = None
        if outcome == "ok":
            st.status, st.owner, st.token, st.expires = "retry_scheduled", None, None, None
            snap = {**st.snapshot(), "next_retry_at": now + retry_in, "error_class": "transient"}
            st.next_retry_at = now + retry_in
        self.call(process, "fail", {"work_id": work_id, "token": token, "error_class": "transient", "now": now},
                  outcome, snap)
        return self

    def promote_due(self, process: str, now: float) -> list[str]:
        moved = []
        for st in self.items.values():
            if st.status == "retry_scheduled" and st.next_retry_at is not None and now >= st.next_retry_at:
                st.status, st.next_retry_at = "queued", None
                moved.append({"work_id": st.work_id, "from_status": "retry_scheduled", "to_status": "queued"})
        self.call(process, "promote_due", {"now": now}, "ok", moved)
        return [m["work_id"] for m in moved]

    def expire(self, process: str, now: float) -> list[str]:
        moved = []
        for st in self.items.values():
            if st.status == "running" and st.expires is not None and now > st.expires + self.grace:
                st.status, st.owner, st.token, st.expires, st.finished_at = "timeout", None, None, None, now
                moved.append({"work_id": st.work_id, "from_status": "running", "to_status": "timeout"})
        self.call(process, "expire", {"now": now}, "ok", moved)
        return [m["work_id"] for m in moved]

    def recover(self, process: str, now: float) -> list[str]:
        moved = []
        for st in self.items.values():
            if st.status == "timeout":
                st.status, st.finished_at, st.result = "queued", None, None
                moved.append({"work_id": st.work_id, "decision": "requeue"})
        self.call(process, "recover", {"now": now}, "ok", moved)
        return [m["work_id"] for m in moved]

    def requeue(self, process: str, work_id: str, now: float, outcome: str = "ok") -> HistoryBuilder:
        st = self.items[work_id]
        snap = None
        if outcome == "ok":
            st.status, st.finished_at, st.result, st.started_at = "queued", None, None, None
            snap = st.snapshot()
        self.call(process, "requeue", {"work_id": work_id, "now": now}, outcome, snap)
        return self

    def get(self, process: str, work_id: str) -> HistoryBuilder:
        self.call(process, "get", {"work_id": work_id}, "ok", self.items[work_id].snapshot())
        return self

    def final(self, now: float | None = None, *, path: str = "lease", actions: Iterable[Mapping[str, Any]] = (),
              drop: Iterable[str] = (), override: Mapping[str, Mapping[str, Any]] | None = None) -> HistoryBuilder:
        items: dict[str, Any] = {wid: st.snapshot() for wid, st in self.items.items() if wid not in set(drop)}
        for wid, changes in (override or {}).items():
            items[wid] = {**items[wid], **changes}
        rec: dict[str, Any] = {"path": path, "actions": list(actions)}
        if now is not None:
            rec["now"] = now
        self.records.append({"type": "final", "t": self.tick(), "items": items, "recovery": rec})
        return self

    # -- output
    def history(self, path: str = "<synthetic>") -> History:
        return History.of(self.records, path=path)

    def dumps(self) -> bytes:
        return b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in self.records)

    def lapsed(self, work_id: str, now: float) -> bool:
        st = self.items[work_id]
        if self.queue:
            return st.status != "running"  # no lease: held until released
        return st.expires is None or now > st.expires + self.grace

    def reopen(self, process: str, orphans: set[str]) -> HistoryBuilder:
        """A lease-less queue opened again puts the work of dead holders back (nothing else)."""
        self.nemesis("reopen", process)
        for wid in sorted(orphans):
            st = self.items[wid]
            if st.status == "running":
                st.status, st.token = "queued", None
        orphans.clear()
        return self


def _applies(outcome: str, applied: bool | None) -> bool:
    """Does the model apply an operation: ok, or ``applied=True`` for one that may have (indefinite,
    killed) or said it did not (refused: a broken ledger's refusal that took effect)."""
    return outcome == "ok" or (outcome in ("indefinite", "killed", "refused") and bool(applied))


# ------------------------------------------------------------------------------ simulation
@dataclass
class _Worker:
    name: str
    item: str | None = None
    token: str | None = None
    effect_done: bool = False


def simulate(seed: int, *, items: int = 8, workers: int = 3, steps: int = 120, delivery: str = "at-least-once",
             ttl: float = 45.0, grace: float = 15.0, faults: bool = True, prefix: str = "",
             queue: bool = False) -> HistoryBuilder:
    """A correct campaign, run serially: a producer, `workers` workers, a monitor, a nemesis.

    Each step one actor acts on a model that follows the contract's lease rules: a claim takes a
    queued item; a holder renews, applies its effect, closes out; a write whose lease lapsed
    (now > expiry + grace) is refused; the monitor marks lapsed leases timeout and requeues them.
    Faults: a kill leaves the worker's current call without a completion (it may or may not have
    taken effect: both are drawn), a pause jumps the clock past the worker's lease before it
    writes.  At the end the clock moves past every lease, the monitor runs and one worker drains
    the queue; the final read holds every item.  `prefix` goes before every item name, token and
    worker name (so several simulations can be joined into one history, each with its own workers,
    see :func:`interleave`).

    ``queue=True`` simulates a correct lease-less queue (reclaim by the operator): results carry
    no owner, no expiry and the item's id as token; nothing lapses, a pause takes nothing over,
    and the work of killed holders comes back only when the queue is opened again (a reopen).
    """
    rng = random.Random(seed)
    b = HistoryBuilder(delivery=delivery, ttl=ttl, grace=grace, workers=workers, seed=seed, prefix=prefix,
                       reclaim="operator" if queue else "lease", queue=queue)
    orphans: set[str] = set()  # queue mode: items whose holder was killed
    now = START
    ws = [_Worker(f"{prefix}w{i}") for i in range(workers)]
    applied_keys: set[str] = set()
    created = 0

    def produce() -> None:
        nonlocal created
        wid = f"{prefix}item{created}"
        created += 1
        if faults and rng.random() < 0.05:  # the producer's create comes back indefinite
            b.create("producer", wid, now, outcome="indefinite", applied=rng.random() < 0.5)
        else:
            b.create("producer", wid, now)

    def do_effect(w: _Worker) -> None:
        assert w.item is not None
        key = f"{w.item}:send"
        dedup = delivery != "at-least-once" and key in applied_keys
        b.effect(w.name, w.item, key, applied=not dedup)
        applied_keys.add(key)
        w.effect_done = True

    def worker_step(w: _Worker) -> None:
        nonlocal now
        if w.item is None:
            queued = [s.work_id for s in b.items.values() if s.status == "queued"]
            if not queued:
                b.claim_nothing(w.name, now)
                return
            wid = queued[0]
            w.item, w.token, w.effect_done = wid, b.claim(w.name, wid, now), False
            return
        wid, tok = w.item, w.token
        assert tok is not None
        live = b.items[wid].token == tok and not b.lapsed(wid, now)
        r = rng.random()
        if r < 0.2 and not queue:
            b.renew(w.name, wid, tok, now, outcome="ok" if live else "refused")
            if not live:
                w.item = None
        elif not w.effect_done and live:
            do_effect(w)
        else:
            b.close_out(w.name, wid, tok, now, outcome="ok" if live else "refused")
            w.item = None

    def kill(w: _Worker) -> None:
        b.nemesis("kill", w.name)
        if w.item is not None and w.token is not None:
            wid, tok = w.item, w.token
            if rng.random() < 0.5 and not w.effect_done and b.items[wid].token == tok:
                do_effect(w)  # killed after the effect, before the close-out was answered
            live = b.items[wid].token == tok and not b.lapsed(wid, now)
            b.close_out(w.name, wid, tok, now, outcome="killed", applied=live and rng.random() < 0.5)
            if b.items[wid].status == "running":
                orphans.add(wid)
        else:
            queued = [s.work_id for s in b.items.values() if s.status == "queued"]
            if queued:  # killed mid-claim: the grant may or may not have happened
                outcome = "killed" if queue else rng.choice(["killed", "indefinite"])
                if b.claim(w.name, queued[0], now, outcome=outcome, applied=rng.random() < 0.5) is not None:
                    orphans.add(queued[0])
        w.item, w.token, w.effect_done = None, None, False

    def pause(w: _Worker) -> None:
        nonlocal now
        if queue:  # nothing lapses in a queue: the pause only delays
            b.nemesis("pause", w.name)
            now += rng.uniform(1.0, 20.0)
            b.nemesis("resume", w.name)
            return
        b.nemesis("pause", w.name)
        now += ttl + grace + rng.uniform(1.0, 20.0)
        monitor()
        other = ws[(ws.index(w) + 1) % len(ws)]
        if other.item is None:
            worker_step(other)  # another worker may take the lapsed item over
        b.nemesis("resume", w.name)

    def monitor() -> None:
        if queue:
            b.reopen("reopener", orphans)
            return
        if b.expire("monitor", now) or any(s.status == "timeout" for s in b.items.values()):
            b.recover("monitor", now)

    for _ in range(items):
        produce()
    for _ in range(steps):
        now += rng.uniform(0.1, 5.0)
        r = rng.random()
        if r < 0.05 and created < items * 3:
            produce()
        elif r < 0.10:
            monitor()
        elif faults and r < 0.16:
            kill(rng.choice(ws))
        elif faults and r < 0.20:
            pause(rng.choice(ws))
        else:
            worker_step(rng.choice(ws))
    # The nemesis stops; leases lapse; the monitor runs; a worker drains the queue.
    now += ttl + grace + 1.0
    for w in ws:
        w.item, w.token = None, None
    monitor()
    drain = ws[0]
    while any(s.status == "queued" for s in b.items.values()):
        now += 0.5
        worker_step(drain)
        while drain.item is not None:
            now += 0.1
            worker_step(drain)
    b.claim_nothing(drain.name, now)
    b.final(now)
    return b


def interleave(builders: list[HistoryBuilder]) -> list[dict[str, Any]]:
    """Join independent simulations (built with distinct prefixes) into one history, as if they
    had run side by side: one meta, every operation renumbered and sorted by t, one final read."""
    meta = dict(builders[0].records[0])
    rows: list[tuple[float, int, dict[str, Any]]] = []
    items: dict[str, Any] = {}
    last_t, now, offset, seq = 0.0, None, 0, 0
    for b in builders:
        top = 0
        for r in b.records[1:]:
            if r["type"] == "final":
                items.update(r["items"])
                last_t = max(last_t, r["t"])
                now = max(now or r["recovery"].get("now", 0.0), r["recovery"].get("now", 0.0))
                continue
            if "id" in r:
                r = {**r, "id": r["id"] + offset}
                top = max(top, r["id"] + 1)
            rows.append((r["t"], seq, r))
            seq += 1
        offset = max(offset, top)
    rows.sort(key=lambda x: (x[0], x[1]))
    meta["items"] = len(items)
    final = {"type": "final", "t": round(last_t + 0.001, 6), "items": items,
             "recovery": {"path": "lease", "actions": [], "now": now}}
    return [meta, *(r for _t, _s, r in rows), final]
