"""The worker: plays an agent runtime against the ledger under test, in its own process.

A worker process holds one adapter client (an in-process adapter it loaded itself, or an
``exec:`` adapter subprocess it spawned) and the effect sink.  The harness drives it over a
control connection with small dict messages (``{"cmd": ...}``); the worker answers each with
``{"ok": true, ...}`` or ``{"ok": false, "error": ...}``.

When the worker reaches the armed crash point it sends ``{"event": "crash_point", ...}`` with
where it is (item, step, stage, the operation in flight) and blocks on the connection.  The
harness then SIGKILLs it (or SIGSTOPs it and later lets it continue to test fencing).  Points
inside the adapter reach the same announcement through ``set_crash_hook`` (in-process) or the
wire protocol's ``arm`` and crash-point notification.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import random
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ledgercheck.chaos.safety.sink import EffectSink
from ledgercheck.chaos.safety.workload import Item, ItemIndex, Workload
from ledgercheck.spec import Spec, default_spec
from ledgercheck.spec.rules import crash_points_at
from ledgercheck.transport import costs
from ledgercheck.transport.client import HARNESS_CODES, AdapterError, Client, connect

from .points import DONE, leased_status

# Operations whose failure means the adapter itself broke (not a refusal by the rules).
BUSY_RETRIES = 50
TICK = 2.0  # seconds between "still working" messages of a storm worker


class OpFailed(Exception):
    def __init__(self, op: str, code: str, message: str) -> None:
        super().__init__(f"{op}: {code}: {message}")
        self.op, self.code, self.message = op, code, message


class AdapterBroken(Exception):
    """The adapter crashed, hung or answered garbage; the run cannot go on."""


@dataclass
class Armed:
    point: str
    occurrence: int
    work_id: str | None = None


class Worker:
    """The runtime's logic.  Subclass and override the ``on_*`` hooks to make a worker variant."""

    def __init__(self, client: Client, spec: Spec, owner: str, conn: Any = None) -> None:
        self.client = client
        self.spec = spec
        self.owner = owner
        self.conn = conn
        self.sink: EffectSink | None = None
        self.session = "main"
        self.now = 0.0
        self.armed: Armed | None = None
        self.counts: dict[str, int] = {}
        self.trace: list[dict[str, Any]] | None = None
        self._stage_points: dict[str, tuple[str, ...]] = {}
        self.inflight: str | None = None
        self.cur: dict[str, Any] = {}
        self.completed: dict[str, set[int]] = {}
        self.notes: list[str] = []
        self.probe = False  # set when a paused worker is let go after a takeover
        self.stale_writes: list[dict[str, Any]] = []
        self.leased = leased_status(spec)
        self.waiting = dict(spec.waiting_statuses)  # kind -> status
        self.acq_log: int | None = None
        self.acquired = 0  # items claimed or resumed (storms count them per cycle)
        self.latency = 0.0  # seconds a provider call takes (storms), so kills land inside steps
        hook = getattr(client, "adapter", None)
        self._inproc_hook = callable(getattr(hook, "set_crash_hook", None))
        if self._inproc_hook:
            hook.set_crash_hook(self._adapter_point)
        if hasattr(client, "on_notification"):
            client.on_notification = self._notification

    # ------------------------------------------------------------------ crash points
    def _adapter_point(self, point: str) -> None:
        self.hit(point)

    def _notification(self, msg: Mapping[str, Any]) -> None:
        if msg.get("event") == "crash_point":
            self.announce(str(msg.get("point")), int(msg.get("occurrence") or 0))

    def arm(self, point: str | None, occurrence: int = 1, work_id: str | None = None) -> None:
        self.counts = {}
        self.armed = Armed(point, occurrence, work_id) if point else None
        if point and point in self.client.crash_points and not self._inproc_hook:
            arm = getattr(self.client, "arm", None)
            if arm is None:
                raise AdapterBroken(f"cannot arm adapter point {point!r}: the client has no arm()")
            out = arm(point, occurrence)
            if not out.ok:
                raise AdapterBroken(f"arm {point}: {out.code}: {out.message}")

    def context(self) -> dict[str, Any]:
        c = dict(self.cur)
        c["op"] = self.inflight
        return c

    def hit(self, point: str) -> None:
        wid = self.cur.get("work_id")
        a = self.armed
        if a is not None and a.work_id is not None and point == a.point and wid != a.work_id:
            return
        n = self.counts[point] = self.counts.get(point, 0) + 1
        if self.trace is not None:
            self.trace.append({"point": point, "occurrence": n, "ctx": self.context()})
        if a is not None and point == a.point and n == a.occurrence:
            self.announce(point, n)

    def reach(self, stage: str) -> None:
        """The worker is at ``stage`` of its protocol (chaos/crash/points.py): hit every crash point the
        contract says stands for a kill there (its ``stage``), so no point is named here."""
        for point in self.stage_points(stage):
            self.hit(point)

    def stage_points(self, stage: str) -> tuple[str, ...]:
        pts = self._stage_points.get(stage)
        if pts is None:
            pts = self._stage_points[stage] = crash_points_at(self.spec, stage)
        return pts

    def announce(self, point: str, occurrence: int) -> None:
        """Tell the harness where we are and block until killed (or told to continue)."""
        if self.conn is None:
            raise RuntimeError(f"crash point {point} reached without a control connection")
        self.armed = None
        self.conn.send({"event": "crash_point", "point": point, "occurrence": occurrence,
                        "ctx": self.context(), "pid": os.getpid()})
        while True:
            msg = self.conn.recv()
            if isinstance(msg, dict) and msg.get("cmd") == "continue":
                self.now = float(msg.get("now", self.now))
                self.probe = bool(msg.get("probe"))
                if msg.get("session"):
                    self.session = str(msg["session"])
                return

    def mark(self, work_id: str | None, item: Item | None, step: int | None, stage: str) -> None:
        self.cur = {"work_id": work_id, "item": item.key if item else None, "step": step, "stage": stage,
                    "completed": sorted(self.completed.get(work_id, ())) if work_id else []}

    # ------------------------------------------------------------------ ledger calls
    def op(self, name: str, **args: Any) -> Any:
        for attempt in range(BUSY_RETRIES):
            self.inflight = name
            try:
                out = self.client.call(name, **args)
            finally:
                self.inflight = None
            if out.ok:
                return out.value
            if out.code == "busy" and attempt + 1 < BUSY_RETRIES:
                time.sleep(0.01 * (attempt + 1))
                continue
            if out.code in HARNESS_CODES:
                raise AdapterBroken(f"{name}: {out.code}: {out.message}")
            raise OpFailed(name, out.code, out.message)
        raise AdapterBroken(f"{name}: stayed busy")  # pragma: no cover - loop always returns or raises

    def write(self, name: str, **args: Any) -> Any:
        """A write made with a lease token; recorded when the worker is stale (probe mode)."""
        try:
            value = self.op(name, **args)
        except OpFailed as exc:
            if self.probe:
                self.stale_writes.append({"op": name, "ok": False, "code": exc.code})
            raise
        if self.probe:
            self.stale_writes.append({"op": name, "ok": True, "code": None})
        return value

    # ------------------------------------------------------------------ policy hooks
    def on_open_receipt(self, state: str, effect: str, created: bool) -> str:
        """What to do with a step whose receipt is not completed: 'execute', 'reconcile' or 'leave'."""
        if state == "pending" and created:
            return "execute"
        if state == "unknown":
            return "reconcile"
        if state == "pending":
            if effect == "lookup":
                return "reconcile"
            if effect == "unsafe":
                return "leave"
            return "execute"
        return "leave"  # needs_inspection, or a state this worker does not know

    def on_quarantined(self, work: Mapping[str, Any]) -> bool:
        """Called for quarantined work; True means the worker took it back (a correct worker never does)."""
        return False

    def receipt_result(self, provider_result: Any) -> dict[str, Any]:
        """What the worker stores in a receipt: the provider's answer, and who recorded it."""
        return {"provider": provider_result, "worker": self.owner, "session": self.session}

    # ------------------------------------------------------------------ one item
    def run_item(self, item: Item, work: Mapping[str, Any]) -> str:
        """Carry one held item as far as it goes: 'done', 'waiting', 'lost' (lease refused) or 'left'."""
        wid = work["work_id"]
        token = work["lease_token"]
        done = self.completed.setdefault(wid, set())
        nxt = next((i for i in range(len(item.steps)) if i not in done), None)
        self.mark(wid, item, nxt, "acquired")
        self.reach("acquired")
        try:
            return self._steps(item, wid, token, done)
        except OpFailed as exc:
            if exc.code == "stale_lease":
                if self.probe:
                    self._probe_rest(item, wid, token)
                return "lost"
            self.notes.append(f"{item.key}: {exc}")
            return "left"

    def _steps(self, item: Item, wid: str, token: str, done: set[int]) -> str:
        events: list[Mapping[str, Any]] | None = None
        waiting_event = self.spec.operations["set_waiting"].event_for()
        last_effect = max(item.effect_steps(), default=None)
        for k, st in enumerate(item.steps):
            if k in done:
                continue
            self.mark(wid, item, k, "acquired")
            if not st.is_effect:
                if events is None:
                    events = self.op("events", work_id=wid)
                if any(e.get("type") == waiting_event and (e.get("data") or {}).get("waiting_ref") == st.wait_ref
                       for e in events):
                    done.add(k)
                    continue
                self.write("set_waiting", work_id=wid, token=token, kind=st.wait_kind, ref=st.wait_ref,
                           timeout=st.wait_timeout, now=self.now)
                done.add(k)
                self.mark(wid, item, k, "waiting")
                self.reach("waiting")
                return "waiting"
            self.write("renew", work_id=wid, token=token, now=self.now)
            self.mark(wid, item, k, "renewed")
            self.reach("renewed")
            begin = self.write("effect_begin", work_id=wid, step_id=st.step_id, tool=st.tool, input=st.input,
                               step_class=st.step_class, token=token, now=self.now)
            rec = begin["receipt"]
            state = rec["state"]
            if state == "completed":
                done.add(k)
                self.mark(wid, item, k, "recorded")
                continue
            effect = self.spec.step_classes[st.step_class]
            action = self.on_open_receipt(state, effect, bool(begin.get("created")))
            if action == "leave":
                self.notes.append(f"{item.key} {st.step_id}: receipt {state}; left for a person")
                return "left"
            assert self.sink is not None
            result = self.sink.lookup(rec["key"]) if action == "reconcile" else None
            if result is None:
                self.mark(wid, item, k, "begun")
                self.reach("begun")
                if self.latency:
                    time.sleep(self.latency)
                result = self.sink.submit(key=rec["key"], work_id=wid, step_id=st.step_id, tool=st.tool,
                                          step_class=st.step_class, input=st.input, worker=self.owner,
                                          session=self.session)
                self.mark(wid, item, k, "submitted")
                self.reach("submitted")
            self.write("effect_record", key=rec["key"], input_hash=rec["input_hash"], result=self.receipt_result(result),
                       token=token, now=self.now)
            done.add(k)
            self.mark(wid, item, k, "recorded")
        if last_effect is not None and self.cur.get("stage") == "recorded" and self.cur.get("step") == last_effect:
            self.reach("recorded")
        self.write("close_out", work_id=wid, token=token, status=DONE, result={"steps": len(item.steps)}, now=self.now)
        self.mark(wid, item, self.cur.get("step"), "closed")
        return DONE

    def _probe_rest(self, item: Item, wid: str, token: str) -> None:
        """A stale worker whose write was refused tries its other writes once: each must be refused."""
        step = self.cur.get("step")
        st = item.steps[step] if isinstance(step, int) and step < len(item.steps) else None
        tries: list[tuple[str, dict[str, Any]]] = [("renew", {"work_id": wid, "token": token, "now": self.now})]
        if st is not None and st.is_effect:
            tries.append(("effect_begin", {"work_id": wid, "step_id": st.step_id, "tool": st.tool, "input": st.input,
                                           "step_class": st.step_class, "token": token, "now": self.now}))
            if self.cur.get("stage") in ("begun", "submitted", "recorded"):  # a receipt this worker began exists
                key = self.spec.effect_key(work_id=wid, step_id=st.step_id, tool=st.tool)
                tries.append(("effect_record", {"key": key, "input_hash": self.spec.input_hash(st.input),
                                                "result": self.receipt_result(None), "token": token, "now": self.now}))
        tries.append(("close_out", {"work_id": wid, "token": token, "status": DONE, "now": self.now}))
        done = {w["op"] for w in self.stale_writes}
        for name, args in tries:
            if name in done:
                continue
            try:
                self.write(name, **args)
            except OpFailed:
                pass

    # ------------------------------------------------------------------ whole workloads
    def setup(self, workload: Workload) -> dict[str, str]:
        ids = {}
        for it in workload.items:
            own = {"retry_policy": dict(it.retry_policy)} if it.retry_policy else {}
            res = self.op("create", source_system=it.source_system, source_id=it.source_id,
                          source_run_id=it.source_run_id, priority=it.priority, payload=dict(it.payload) or None,
                          now=self.now, **own)
            ids[it.key] = res["work"]["work_id"]
        return ids

    def run_sequential(self, workload: Workload, ids: Mapping[str, str], only: str | None = None) -> dict[str, str]:
        """Process items in workload order, pass after pass, delivering every wait's callback
        on the pass after the item started waiting.  ``only`` limits the run to one item."""
        outcome: dict[str, str] = {}
        initial = self.spec.initial_status
        waits = set(self.waiting.values())
        for _ in range(2 * max(len(it.steps) for it in workload.items) + 2):
            snaps = {w["work_id"]: w for w in self.op("list")}
            progressed = False
            for it in workload.items:
                wid = ids[it.key]
                if only is not None and wid != only:
                    continue
                w = snaps.get(wid)
                if w is None:
                    self.notes.append(f"{it.key}: the ledger does not list {wid}")
                    continue
                if w.get("quarantined"):
                    if not self.on_quarantined(w):
                        continue
                    w = self.op("get", work_id=wid)
                status = w["status"]
                if status == initial:
                    self.mark(wid, it, next((i for i in range(len(it.steps)) if i not in self.completed.get(wid, ())), None),
                              "unclaimed")
                    try:
                        got = self.write("claim", owner=self.owner, work_id=wid, now=self.now)
                    except OpFailed as exc:
                        self.notes.append(f"{it.key}: {exc}")
                        continue
                    if got is None:
                        continue
                elif status in waits:
                    k = next((i for i, s in enumerate(it.steps) if not s.is_effect and s.wait_ref == w.get("waiting_ref")), None)
                    self.mark(wid, it, k, "waiting")
                    try:
                        got = self.write("resume", work_id=wid, owner=self.owner, now=self.now)
                    except OpFailed as exc:
                        self.notes.append(f"{it.key}: {exc}")
                        continue
                    if k is not None:
                        self.completed.setdefault(wid, set()).add(k)
                else:
                    continue
                progressed = True
                self._log_acquire(got)
                outcome[it.key] = self.run_item(it, got)
                if self.probe:
                    return outcome
            if not progressed:
                break
        return outcome

    # ------------------------------------------------------------------ storms
    def _log_acquire(self, work: Mapping[str, Any]) -> None:
        self.acquired += 1
        if self.acq_log is not None:
            line = json.dumps({"work_id": work["work_id"], "lease_version": work.get("lease_version"),
                               "token": work.get("lease_token"), "owner": self.owner}) + "\n"
            os.write(self.acq_log, line.encode())

    def run_storm(self, lookup: Callable[[Mapping[str, Any]], Item | None], rng: random.Random,
                  between: Callable[[], bool], idle: Callable[[], bool]) -> None:
        """Claim any work until told to stop.  ``lookup`` finds the workload item of a work
        snapshot; ``between()`` is called between items (it handles pauses), ``idle()`` when there
        is nothing to claim or resume; False from either stops."""
        waits = tuple(self.waiting.values())
        while between():
            self.mark(None, None, None, "unclaimed")
            got = self.write("claim", owner=self.owner, now=self.now)
            if got is None:
                got = self._resume_any(waits, rng)
                if got is None:
                    if not idle():
                        return
                    continue
            it = lookup(got)
            self._log_acquire(got)
            if it is None:
                self.notes.append(f"claimed {got['work_id']}, which is not in the workload")
                continue
            self.completed.pop(got["work_id"], None)
            self.run_item(it, got)

    def _resume_any(self, waits: tuple[str, ...], rng: random.Random) -> Mapping[str, Any] | None:
        cands = [w for s in waits for w in self.op("list", status=s) if not w.get("quarantined")]
        rng.shuffle(cands)
        for w in cands[:8]:
            try:
                return self.write("resume", work_id=w["work_id"], owner=self.owner, now=self.now)
            except OpFailed as exc:
                if exc.code in ("invalid_transition", "not_found"):
                    continue
                raise
        return None

    # ------------------------------------------------------------------ inspection
    def inspect(self, ids: Mapping[str, str], events: bool) -> dict[str, Any]:
        items = {}
        for key, wid in ids.items():
            entry: dict[str, Any] = {"work": self.op("get", work_id=wid), "receipts": self.op("effect_list", work_id=wid)}
            if events:
                entry["events"] = self.op("events", work_id=wid)
            items[key] = entry
        out: dict[str, Any] = {"items": items}
        if events:
            out["quarantined"] = [w["work_id"] for w in self.op("list", quarantined=True)]
        return out


# ---------------------------------------------------------------------------------- the process
def load_worker_class(ref: str | None) -> type[Worker]:
    """``None`` for the standard worker, or ``module:Class`` / ``path/to/file.py:Class`` for a variant."""
    if not ref:
        return Worker
    target, _, name = ref.rpartition(":")
    if not target or not name:
        raise ChaosWorkerError(f"worker variant {ref!r}: use module:Class or file.py:Class")
    try:
        if target.endswith(".py"):
            modname = "ledgercheck_worker_variant_" + os.path.basename(target)[:-3]
            spec_ = importlib.util.spec_from_file_location(modname, target)
            if spec_ is None or spec_.loader is None:
                raise ImportError(f"cannot load {target}")
            mod = importlib.util.module_from_spec(spec_)
            sys.modules[modname] = mod
            spec_.loader.exec_module(mod)
        else:
            mod = importlib.import_module(target)
    except Exception as exc:  # noqa: BLE001 - one line for any import failure
        raise ChaosWorkerError(f"worker variant {ref!r}: {type(exc).__name__}: {exc}") from None
    cls = getattr(mod, name, None)
    if not (isinstance(cls, type) and issubclass(cls, Worker)):
        raise ChaosWorkerError(f"worker variant {ref!r}: {name} is not a Worker subclass")
    return cls


class ChaosWorkerError(Exception):
    pass


def _spec_from(cfg: Mapping[str, Any]) -> Spec:
    doc = cfg.get("contract")
    if doc is None:
        return default_spec()
    from ledgercheck.spec.load import spec_from_document

    return spec_from_document(doc)


def worker_main(conn: Any, cfg: dict[str, Any]) -> None:
    """Entry point of a worker process (started by the pool through the fork server)."""
    for p in reversed(cfg.get("sys_path") or []):
        if p not in sys.path:
            sys.path.insert(0, p)
    try:
        spec = _spec_from(cfg)
        client = connect(cfg["address"], spec, timeout=float(cfg.get("op_timeout", 30.0)))
        cls = load_worker_class(cfg.get("worker"))
        w = cls(client, spec, cfg["owner"], conn)
    except (AdapterError, ChaosWorkerError) as exc:
        conn.send({"event": "error", "message": str(exc)})
        return
    except Exception as exc:  # noqa: BLE001
        conn.send({"event": "error", "message": f"worker start failed: {type(exc).__name__}: {exc}"})
        return
    conn.send({"event": "ready", "pid": os.getpid(), "handshake": client.handshake, "kind": client.kind,
               "costs": _costs_since_last()})
    _Session(w, conn, cfg).serve()


_last_costs: dict[str, float] = {}


def _costs_since_last() -> dict[str, Any]:
    """What this worker spent on its adapter (process starts, round trips) since its last message:
    the harness adds it to its own counts (transport/costs.py)."""
    global _last_costs
    out = costs.since(_last_costs)
    _last_costs = costs.snapshot()
    return out


class _Session:
    """The command loop of one worker process."""

    def __init__(self, w: Worker, conn: Any, cfg: Mapping[str, Any]) -> None:
        self.w = w
        self.conn = conn
        self.cfg = cfg
        self.workload: Workload | None = None
        self.index: ItemIndex | None = None
        self.ids: dict[str, str] = {}
        self.paused = False
        self.per_cycle = self.cycle_start = 0  # a storm's budget per cycle (storm())

    def serve(self) -> None:
        while True:
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                break
            if not isinstance(msg, dict) or msg.get("cmd") == "exit":
                break
            try:
                reply = self.handle(msg)
            except AdapterBroken as exc:
                reply = {"ok": False, "error": f"adapter failed: {exc}", "kind": "adapter"}
            except Exception as exc:  # noqa: BLE001 - report, never die silently
                tb = traceback.format_exc(limit=4).strip().splitlines()[-1]
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc} ({tb})", "kind": "worker"}
            if isinstance(reply, dict):
                reply["costs"] = _costs_since_last()
            try:
                self.conn.send(reply)
            except (OSError, ValueError):
                break
        self.w.client.close()

    def handle(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        w = self.w
        cmd = msg["cmd"]
        if "now" in msg:
            w.now = float(msg["now"])
        if "session" in msg:
            w.session = str(msg["session"])
        if cmd == "open":
            return self.open(msg)
        if cmd == "setup":
            if self.workload is None and self.index is not None:
                self.workload = self.index.workload()
            self.ids = w.setup(self._wl())
            return {"ok": True, "ids": self.ids}
        if cmd == "arm":
            w.arm(msg.get("point"), int(msg.get("occurrence", 1)), msg.get("work_id"))
            return {"ok": True}
        if cmd == "run":
            w.trace = [] if msg.get("trace") else None
            w.notes = []
            outcome = w.run_sequential(self._wl(), self.ids)
            out = {"ok": True, "outcome": outcome, "notes": w.notes, "counts": dict(w.counts),
                   "stale_writes": w.stale_writes}
            if w.trace is not None:
                out["trace"] = w.trace
            return out
        if cmd == "recover":
            return {"ok": True, "victims": w.op("recover", now=w.now)}
        if cmd == "inspect":
            return {"ok": True, **w.inspect(self.ids, bool(msg.get("events")))}
        if cmd == "storm":
            return self.storm(msg)
        if cmd == "check_stale":
            return self.check_stale()
        if cmd == "summary":
            counts: dict[str, int] = {}
            for it in w.op("list"):
                k = "quarantined" if it.get("quarantined") else it["status"]
                counts[k] = counts.get(k, 0) + 1
            return {"ok": True, "counts": counts}
        if cmd == "dump":
            items = w.op("list")
            return {"ok": True, "items": items,
                    "receipts": {it["work_id"]: w.op("effect_list", work_id=it["work_id"]) for it in items},
                    "events": {it["work_id"]: w.op("events", work_id=it["work_id"]) for it in items},
                    "quarantined": [it["work_id"] for it in w.op("list", quarantined=True)]}
        raise ValueError(f"unknown command {cmd!r}")

    def _wl(self) -> Workload:
        if self.workload is None:
            raise ValueError("no workload: send open first")
        return self.workload

    def open(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        w = self.w
        config: dict[str, Any] = {"dir": msg["dir"]}
        if self.cfg.get("contract") is not None:
            config["contract"] = self.cfg["contract"]
        out = w.client.reset(config)
        if not out.ok:
            raise AdapterBroken(f"reset: {out.code}: {out.message}")
        if w.sink is not None:
            w.sink.close()
        w.sink = EffectSink(msg["sink"], w.spec)
        self.workload = None
        if self.index is not None:
            self.index.close()
            self.index = None
        if msg.get("workload_index"):  # storms: thousands of items, read one by one when claimed
            self.index = ItemIndex(msg["workload_index"], w.spec)
        else:
            self.workload = Workload.from_dict(msg["workload"])
        self.ids = dict(msg.get("ids") or {})
        w.completed = {}
        w.counts = {}
        w.armed = None
        w.probe = False
        w.stale_writes = []
        w.latency = float(msg.get("latency") or 0.0)
        if msg.get("acq_log"):
            w.acq_log = os.open(msg["acq_log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return {"ok": True}

    # -- storms ---------------------------------------------------------------------------------
    def storm(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        rng = random.Random(int(msg.get("seed", 0)))
        self.w.notes = []
        # a cycle's budget: at most this many items taken between two kills (0: no limit); a
        # ``go`` that names ``per_cycle`` starts the next cycle, a plain one goes on with this one
        self.per_cycle, self.cycle_start = int(msg.get("per_cycle") or 0), self.w.acquired

        last = [time.monotonic()]

        def between() -> bool:
            now = time.monotonic()
            if now - last[0] > TICK:  # busy is not hung: tell the harness now and then
                last[0] = now
                self.conn.send({"event": "tick"})
            if self.conn.poll() and not self._paused_loop(wait=False):
                return False
            while self.per_cycle and self.w.acquired - self.cycle_start >= self.per_cycle:
                self.conn.send({"event": "budget"})  # this cycle's items are taken: wait for the next
                if not self._paused_loop(wait=True):
                    return False
            return True

        def idle() -> bool:
            self.conn.send({"event": "idle"})
            return self._paused_loop(wait=True)

        self.w.run_storm(self._lookup, rng, between, idle)
        return {"ok": True, "notes": self.w.notes}

    def _lookup(self, work: Mapping[str, Any]) -> Item | None:
        k = (work.get("source_system"), work.get("source_id"), work.get("source_run_id"))
        if self.index is not None:
            return self.index.get(*k)
        return next((i for i in self._wl().items if (i.source_system, i.source_id, i.source_run_id) == k), None)

    def _paused_loop(self, wait: bool) -> bool:
        """Handle control messages between items.  True: go on working; False: stop."""
        while True:
            if not wait and not self.conn.poll():
                return True
            msg = self.conn.recv()
            cmd = msg.get("cmd") if isinstance(msg, dict) else None
            if "now" in msg:
                self.w.now = float(msg["now"])
            if cmd == "go":
                if "per_cycle" in msg:  # the next cycle of a storm
                    self.per_cycle, self.cycle_start = int(msg["per_cycle"] or 0), self.w.acquired
                return True
            if cmd == "stop":
                return False
            if cmd == "pause":
                self.conn.send({"event": "paused"})
                wait = True
                continue
            try:
                reply = self.handle(msg)
            except AdapterBroken as exc:
                reply = {"ok": False, "error": f"adapter failed: {exc}", "kind": "adapter"}
            self.conn.send(reply)
            wait = True

    def check_stale(self) -> dict[str, Any]:
        """Observe every leased item and its journal, run recovery, observe again (storm barrier)."""
        w = self.w
        before = {}
        for it in w.op("list", status=w.leased):
            before[it["work_id"]] = {"work": it, "receipts": w.op("effect_list", work_id=it["work_id"])}
        waiting = {it["work_id"]: it for s in w.waiting.values() for it in w.op("list", status=s)}
        victims = w.op("recover", now=w.now)
        after = {}
        for wid in set(before) | {v["work_id"] for v in victims}:
            after[wid] = {"work": w.op("get", work_id=wid), "receipts": w.op("effect_list", work_id=wid)}
        return {"ok": True, "before": before, "victims": victims, "after": after, "waiting": waiting}
