"""The wire protocol's message shapes, built from the contract.

Requests are ``{"id": int, "op": str, "args": {...}}``; responses ``{"id": int, "ok": true,
"result": ...}`` or ``{"id": int, "ok": false, "error": {"code", "message", "definite"}}``;
an adapter may also print notifications ``{"event": "crash_point", "point": str}``.  The
argument schema of each operation comes from the contract's argument list; result shapes are
the named types below (the contract's ``returns:``).  Types are checked at the protocol level:
a value of the wrong JSON type is a protocol error of the adapter, while a well-typed value
that breaks a rule (an unknown status, say) is a clause failure found by the checker.

``docs/protocol.schema.json`` is :func:`protocol_schema` written out by ``ledgercheck protocol
schema``; the operation reference in ``docs/protocol.md`` is :func:`reference_markdown`.
"""

from __future__ import annotations

import json
import os
import select
import time
from collections.abc import Callable, Mapping
from typing import Any

from ledgercheck.spec import Spec
from ledgercheck.transport.protocol import DELIVERY, RECLAIM

from ledgercheck import PROTOCOL_VERSION


def _spin_setting() -> float:
    raw = os.environ.get("LEDGERCHECK_WIRE_SPIN_US", "300")
    try:
        us = float(raw)
    except ValueError:
        raise SystemExit(f"LEDGERCHECK_WIRE_SPIN_US={raw!r}: expected microseconds (a number, 0 = off)") from None
    return max(0.0, min(us, 100_000.0)) / 1e6


# How long one side of the pipe keeps polling for the other side's next line before it blocks.
# On virtual machines an idle vCPU halts, and waking it through a pipe costs tens of
# microseconds on each side of every round trip; a short spin (yielding the CPU to anything
# else runnable on every turn) keeps the answer's wake-up cheap.  Bounded, so a slow or silent
# peer costs at most this much CPU per line before the normal blocking wait takes over.
SPIN_SECONDS = _spin_setting()


def spin_until_readable(poller: select.poll, seconds: float = SPIN_SECONDS) -> bool:
    """Poll ``poller`` without sleeping for up to ``seconds``; True as soon as it is readable."""
    if seconds <= 0:
        return False
    end = time.perf_counter() + seconds
    poll, now, yield_ = poller.poll, time.perf_counter, os.sched_yield
    while not poll(0):
        if now() >= end:
            return False
        yield_()
    return True


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def runnable_elsewhere() -> int:
    """How many other threads are runnable right now (the kernel's instantaneous count from
    /proc/loadavg, less this one); where that cannot be read, the one-minute load average."""
    try:
        with open("/proc/loadavg", "rb") as f:
            running = int(f.read().split()[3].split(b"/")[0])
        return max(0, running - 1)
    except (OSError, ValueError, IndexError):
        try:
            return int(os.getloadavg()[0])
        except OSError:
            return 0


class Spinner:
    """Decides, wait by wait, whether spinning for the peer's next line pays.

    A spin pays when the peer answers within it and the CPU it burns (yielding on every turn)
    is not wanted by anyone else.  So it spins only while (a) fewer threads are runnable than
    there are cores (looked at every ``LOOK_EVERY`` seconds: on a busy machine every yield
    hands the CPU to another process and the answer's wake-up waits for a time slice, so the
    spin loses to a plain blocking wait) and (b) its recent spins were answered (after ``MISSES``
    unanswered spins in a row it blocks at once).  While (b) stops it, it tries one spin every
    ``PROBE_EVERY`` waits, so it comes back when the peer answers quickly again.  While (a)
    stops it, it never probes: the next look at the load brings it back, and a probe on a busy
    machine costs more than all the waits it could save (with both cores busy, one probe in 64
    waits made the wire's round trips 10-40% slower)."""

    LOOK_EVERY = 0.25
    MISSES = 4
    PROBE_EVERY = 64

    def __init__(self, seconds: float | None = None, busy: Callable[[], bool] | None = None,
                 policy: str | None = None) -> None:
        self.seconds = SPIN_SECONDS if seconds is None else seconds
        cores = _cores()
        self._busy_fn = busy or (lambda: runnable_elsewhere() >= cores)
        # LEDGERCHECK_WIRE_SPIN_POLICY=always: spin before every wait, whatever the load and the
        # answers (the fixed spin earlier versions used; bench/bench_transport.py compares them)
        if (policy or os.environ.get("LEDGERCHECK_WIRE_SPIN_POLICY", "adaptive")) == "always":
            self._busy_fn = lambda: False
            self.MISSES = 1 << 62
        self._looked = -1e9
        self.busy = False
        self.misses = 0
        self.skipped = 0
        self.spins = self.hits = 0

    def wait(self, poller: select.poll) -> bool:
        """Spin on ``poller`` if it pays; True when it became readable during the spin."""
        if self.seconds <= 0:
            return False
        now = time.monotonic()
        if now - self._looked >= self.LOOK_EVERY:
            self._looked = now
            self.busy = self._busy_fn()
        if self.busy:
            return False
        if self.misses >= self.MISSES:
            self.skipped += 1
            if self.skipped < self.PROBE_EVERY:
                return False
        self.skipped = 0
        self.spins += 1
        hit = spin_until_readable(poller, self.seconds)
        if hit:
            self.hits += 1
            self.misses = 0
        else:
            self.misses += 1
        return hit


STR = {"type": "string"}
INT = {"type": "integer"}
NUM = {"type": "number"}
BOOL = {"type": "boolean"}
ANY: dict[str, Any] = {}
OBJ = {"type": "object"}
NOTIFICATION_EVENTS = ("crash_point",)


def _nullable(s: dict[str, Any]) -> dict[str, Any]:
    # A type list is checked in one step; anyOf would try (and fail) the first branch for every null.
    if set(s) == {"type"} and isinstance(s["type"], str):
        return {"type": [s["type"], "null"]}
    return {"anyOf": [s, {"type": "null"}]}


def _obj(props: dict[str, Any], required: list[str] | None = None, doc: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props, "required": list(props) if required is None else required}
    if doc:
        out["description"] = doc
    return out


FIELD_JSON = {"string": STR, "integer": INT, "boolean": BOOL, "time": NUM, "status": STR, "any": ANY}

ARG_JSON = {
    "string": STR, "nonempty_string": STR, "time": NUM, "duration": NUM, "object": OBJ, "any": ANY,
    "boolean": BOOL, "positive_int": INT, "nonnegative_int": INT, "source_system": STR, "priority": INT,
    "retry_policy": OBJ, "status": STR, "terminal_status": STR, "waiting_kind": STR, "error_class": STR,
    "step_class": STR, "receipt_state": STR, "effect_key": STR, "wakeup_kind": STR,
}

# What each result type is, in words (the shapes themselves come from result_types()).
RESULT_DOC = {
    "none": "Always `null`.",
    "work": "A work snapshot: every field of the contract's `work_fields`.",
    "work_or_null": "A work snapshot, or `null` when there was nothing to take.",
    "create_result": "The item, and whether this call created it (`false`: the unit already had a record, which is returned).",
    "work_list": "Work snapshots, in the order the operation's clauses give: `list` in creation order (`core.list.order`), `children` in spawn order (`spawn.join`); `cancel_tree`'s order is left open.",
    "event": "One entry of an item's event trail; `data` carries the fields the contract lists for the event type, with their values after the event.",
    "event_list": "An item's events, oldest first, `seq` counting up from the contract's `first_seq` without gaps.",
    "move_list": "Items a monitor moved: one entry per item, with the reason recorded in `status_reason` (or null).",
    "id_list": "Work ids.",
    "receipt": "An effect-journal receipt.",
    "receipt_or_null": "A receipt, or `null` when the key has none.",
    "receipt_list": "Receipts in the order their intents were recorded.",
    "begin_result": "The receipt for the step, and whether this call created it.",
    "deliver_result": "Whether the message was new (`false`: a duplicate delivery, ignored).",
    "message_list": "Inbox messages.",
    "nack_result": "The message's nack count after this call, and whether it was dead-lettered.",
    "outbox_message": "An outbox message.",
    "enqueue_result": "The outbox message, and whether this call created it.",
    "outbox_list": "Pending outbox messages, oldest first.",
    "append_result": "The seq the entry was stored at.",
    "log_list": "Log entries in seq order.",
    "victim_list": "Stale items recovery acted on, with the decision taken.",
    "lane_lease": "A lane's lease: who holds the (session key, lane), its token, version and expiry.",
    "lane_lease_or_null": "The lane's new lease, or `null` while another lease on the lane is live.",
    "push_result": "Whether the task was queued (`false`: the lane already holds that task id).",
    "lane_task": "A task of a lane's queue; `state` is `queued` or `handed` (handed to the holder, not yet done).",
    "lane_task_or_null": "The task handed to the lane's holder, or `null` when none is queued.",
    "lane_task_list": "A lane's tasks not yet done, in arrival order.",
    "wake_run": "A run of the wakeups profile: its state, wake cycles so far, the wakeups merged into its next hand-out and its timer.",
    "wake_handout": "A run handed out under a lease: its wake cycle, the wakeups it was woken by, the hand-out's token, expires_at and attempt (1, or more when a lapsed hand-out of the cycle was handed out again).",
    "wake_handout_or_null": "The run handed out, its wake cycle and the wakeups it was woken by, with its lease, or `null` when no run is ready.",
    "ask_result": "The outcome of an ask by its target's status (the contract's `ask` outcomes), with the target's result when it replied.",
    "seq_result": "A stream's last seq (the contract's `first_seq` - 1 while the stream is empty).",
    "handshake": "Who the adapter is and what it claims (see *The handshake*).",
}


def result_types(spec: Spec) -> dict[str, dict[str, Any]]:
    work = _obj({n: (_nullable(FIELD_JSON[f.type]) if f.nullable and f.type != "any" else FIELD_JSON[f.type])
                 for n, f in spec.work_fields.items()})
    ref = {"$ref": "#/$defs/work"}
    event = _obj({"work_id": STR, "seq": INT, "type": STR, "from_status": _nullable(STR), "to_status": _nullable(STR),
                  "at": NUM, "data": OBJ}, ["work_id", "seq", "type", "from_status", "to_status", "data"])
    move = _obj({"work_id": STR, "from_status": STR, "to_status": STR, "reason": _nullable(STR)}, ["work_id", "from_status", "to_status"])
    receipt = _obj({"key": STR, "work_id": STR, "step_id": STR, "tool": STR, "step_class": STR, "input_hash": STR,
                    "state": STR, "result": ANY})
    rref = {"$ref": "#/$defs/receipt"}
    message = _obj({"message_id": STR, "sender": STR, "body": ANY, "nacks": INT})
    outbox = _obj({"key": STR, "destination": STR, "payload": ANY, "work_id": _nullable(STR), "state": STR,
                   "provider_ref": _nullable(STR)})
    oref = {"$ref": "#/$defs/outbox_message"}
    types = {
        "none": {"type": "null"},
        "work": work,
        "work_or_null": _nullable(ref),
        "create_result": _obj({"work": ref, "created": BOOL}),
        "work_list": {"type": "array", "items": ref},
        "event": event,
        "event_list": {"type": "array", "items": {"$ref": "#/$defs/event"}},
        "move": move,
        "move_list": {"type": "array", "items": {"$ref": "#/$defs/move"}},
        "id_list": {"type": "array", "items": STR},
        "receipt": receipt,
        "receipt_or_null": _nullable(rref),
        "receipt_list": {"type": "array", "items": rref},
        "begin_result": _obj({"receipt": rref, "created": BOOL}),
        "deliver_result": _obj({"delivered": BOOL}),
        "inbox_message": message,
        "message_list": {"type": "array", "items": {"$ref": "#/$defs/inbox_message"}},
        "nack_result": _obj({"dead": BOOL, "nacks": INT}),
        "outbox_message": outbox,
        "enqueue_result": _obj({"message": oref, "created": BOOL}),
        "outbox_list": {"type": "array", "items": oref},
        "append_result": _obj({"seq": INT}),
        "log_entry": _obj({"stream": STR, "seq": INT, "kind": STR, "payload": OBJ, "at": NUM}, ["stream", "seq", "kind", "payload"]),
        "log_list": {"type": "array", "items": {"$ref": "#/$defs/log_entry"}},
        "victim": _obj({"work_id": STR, "decision": STR, "reason": STR}, ["work_id", "decision"]),
        "victim_list": {"type": "array", "items": {"$ref": "#/$defs/victim"}},
        "lane_lease": _obj({"session_key": STR, "lane": STR, "owner": STR, "token": STR, "version": INT, "expires_at": NUM}),
        "lane_lease_or_null": _nullable({"$ref": "#/$defs/lane_lease"}),
        "push_result": _obj({"queued": BOOL}),
        "lane_task": _obj({"task_id": STR, "body": ANY, "state": {"enum": ["queued", "handed"]}}),
        "lane_task_or_null": _nullable({"$ref": "#/$defs/lane_task"}),
        "lane_task_list": {"type": "array", "items": {"$ref": "#/$defs/lane_task"}},
        "wake_run": _obj({"run_id": STR, "state": {"enum": ["suspended", "pending", "running"]}, "cycle": INT,
                          "wakeups": {"type": "array", "items": STR}, "timer_at": _nullable(NUM)}),
        "wake_handout": _obj({"run_id": STR, "worker": STR, "cycle": INT, "woken_by": {"type": "array", "items": STR},
                              "token": STR, "expires_at": NUM, "attempt": INT}),
        "wake_handout_or_null": _nullable({"$ref": "#/$defs/wake_handout"}),
        "ask_result": _obj({"outcome": STR, "result": ANY}),
        "seq_result": _obj({"seq": INT}),
        "handshake": _obj({
            "name": STR, "version": STR, "protocol": STR, "profiles": {"type": "array", "items": STR},
            "capabilities": _obj({"clock": {"enum": ["injected", "wall"]}, "durable": BOOL, "concurrent": BOOL,
                                  "time_resolution": {"type": "number", "minimum": 0},
                                  "delivery": {"enum": list(DELIVERY)}, "reclaim": {"enum": list(RECLAIM)},
                                  "pipeline": BOOL}, []),
            "crash_points": {"type": "array", "items": STR},
            "known_bugs": {"type": "object", "additionalProperties": STR},
            "artifact_sha256": _nullable(STR),
        }, ["name", "version", "protocol", "profiles"]),
    }
    for name, doc in RESULT_DOC.items():
        if name in types:
            types[name] = {"description": doc, **types[name]}
    return types


def _request(op: str, args: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"id": INT, "op": {"const": op}, "args": {"type": "object", "properties": args, "required": required}},
        "required": ["id", "op", "args"],
    }


def protocol_schema(spec: Spec) -> dict[str, Any]:
    """One JSON Schema document describing every message of the wire protocol."""
    defs: dict[str, Any] = dict(result_types(spec))
    requests = []
    for name, op in spec.operations.items():
        args = {a: ARG_JSON[arg.type] for a, arg in op.args.items()}
        if name == "reset":
            args["config"] = {
                "type": "object",
                "description": "dir: a directory for the ledger's files; contract: the merged contract document; "
                               "other keys are adapter-specific and may be ignored.",
                "properties": {"dir": STR, "contract": OBJ, "timeout_scale": NUM},
            }
        defs[f"request_{name}"] = _request(name, args, [a for a, arg in op.args.items() if arg.required])
        defs[f"result_{name}"] = {"$ref": f"#/$defs/{op.returns}"}
        requests.append({"$ref": f"#/$defs/request_{name}"})
    defs["request_arm"] = _request("arm", {"point": STR, "occurrence": {"type": "integer", "minimum": 1}}, ["point"])
    defs["result_arm"] = {"$ref": "#/$defs/none"}
    requests.append({"$ref": "#/$defs/request_arm"})
    defs["request"] = {"oneOf": requests}
    defs["error"] = _obj({"code": {"enum": list(spec.errors)}, "message": STR, "definite": BOOL}, ["code", "message"])
    defs["response"] = {
        "oneOf": [
            {"type": "object", "properties": {"id": INT, "ok": {"const": True}, "result": ANY}, "required": ["id", "ok", "result"]},
            {"type": "object", "properties": {"id": {"type": ["integer", "null"]}, "ok": {"const": False},
                                              "error": {"$ref": "#/$defs/error"}},
             "required": ["id", "ok", "error"]},
        ]
    }
    defs["notification"] = _obj({"event": {"enum": list(NOTIFICATION_EVENTS)}, "point": STR,
                                 "occurrence": {"type": "integer", "minimum": 1}}, ["event", "point"])
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://ledgercheck.dev/schema/wire-protocol-{PROTOCOL_VERSION}.json",
        "title": f"ledgercheck wire protocol {PROTOCOL_VERSION}",
        "description": "One JSON object per line on the adapter's stdin (requests) and stdout (responses, notifications). "
                       f"Contract {spec.name} {spec.version}.",
        "$defs": defs,
        "oneOf": [{"$ref": "#/$defs/request"}, {"$ref": "#/$defs/response"}, {"$ref": "#/$defs/notification"}],
    }


def schema_text(spec: Spec) -> str:
    """The schema as it is stored in docs/protocol.schema.json."""
    return json.dumps(protocol_schema(spec), indent=2, ensure_ascii=False) + "\n"


_TYPES: dict[str, tuple[str, ...]] = {"string": ("str",), "integer": ("int",), "number": ("int", "float"), "boolean": ("bool",),
                                      "null": ("NoneType",), "object": ("dict",), "array": ("list",)}
_PY_TYPES: dict[str, type] = {"str": str, "int": int, "float": float, "bool": bool, "NoneType": type(None), "dict": dict,
                              "list": list}
_QUICK_KEYWORDS = frozenset({"type", "properties", "required", "$ref", "items", "enum", "const", "description", "minimum",
                             "anyOf", "additionalProperties"})


class _QuickCompiler:
    """Compiles result schemas into plain Python predicates (see :func:`quick_accept`).

    The code is what CPython 3.11 runs fastest: ``type(x)`` (one specialised instruction) tested
    with ``is``, a required property read as ``x[k]`` (a function's ``KeyError`` means "not
    sure", never an acceptance), and the items of a list that refer to an object schema checked
    inside the loop, without a call per item."""

    def __init__(self, defs: Mapping[str, Any]) -> None:
        self.defs = defs
        self.src: list[str] = []
        self.consts: dict[str, Any] = {"NoneType": type(None), "_MISSING": object()}
        self.names: dict[str, str] = {}
        self.inlining: list[str] = []  # definitions being inlined (a recursive one is called instead)
        self.n = 0

    def const(self, value: Any) -> str:
        self.n += 1
        name = f"_c{self.n}"
        self.consts[name] = value
        return name

    def ref(self, target: str) -> str:
        if target not in self.names:
            self.names[target] = f"_d_{len(self.names)}"
            # a definition's function is the same wherever it is first met: nothing inlined
            # around this call decides what it inlines (see quick_accept_plain)
            outer, self.inlining = self.inlining, []
            try:
                self.function(self.names[target], self.defs[target])
            finally:
                self.inlining = outer
        return self.names[target]

    def function(self, name: str, schema: Any) -> None:
        body: list[str] = []
        if not self.checks(schema, "v", body, "        "):
            lines = ["    return False"]
        elif not body:  # nothing to test (``true``, ``{}``, only a description)
            lines = ["    return True"]
        else:
            # a required property that is absent: KeyError, "not sure" (the full check decides)
            lines = ["    try:", *body, "    except KeyError:", "        return False", "    return True"]
        self.src.append(f"def {name}(v):\n" + "\n".join(lines) + "\n")

    def anon(self, schema: Any) -> str:
        self.n += 1
        name = f"_f{self.n}"
        self.function(name, schema)
        return name

    def _type_test(self, x: str, kinds: list[str], out: list[str], ind: str) -> None:
        if len(kinds) == 1:
            out.append(f"{ind}if type({x}) is not {kinds[0]}: return False")
            return
        self.n += 1
        t = f"_t{self.n}"
        out.append(f"{ind}{t} = type({x})")
        out.append(f"{ind}if {' and '.join(f'{t} is not {k}' for k in kinds)}: return False")

    def checks(self, schema: Any, x: str, out: list[str], ind: str, inline: bool = False) -> bool:
        """Append lines that ``return False`` unless ``x`` passes; False = not understood.
        ``inline``: a reference is checked in place (a list's items) rather than called."""
        if schema is True or schema == {}:
            return True
        if not isinstance(schema, dict) or set(schema) - _QUICK_KEYWORDS:
            return False
        is_dict = is_list = False
        if "$ref" in schema:
            target = str(schema["$ref"])
            if not target.startswith("#/$defs/") or target[8:] not in self.defs:
                return False
            name = target[8:]
            if inline and set(schema) == {"$ref"} and name not in self.inlining:
                self.inlining.append(name)
                try:
                    return self.checks(self.defs[name], x, out, ind)
                finally:
                    self.inlining.pop()
            out.append(f"{ind}if not {self.ref(name)}({x}): return False")
        if "type" in schema:
            names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            if not names or any(n not in _TYPES for n in names):
                return False
            kinds = sorted({t for n in names for t in _TYPES[n]})  # type(True) is bool, never int
            self._type_test(x, kinds, out, ind)
            is_dict, is_list = kinds == ["dict"], kinds == ["list"]
        if "enum" in schema:
            c = self.const(list(schema["enum"]))
            out.append(f"{ind}if not any({x} == o and type({x}) is type(o) for o in {c}): return False")
        if "const" in schema:
            c = self.const(schema["const"])
            out.append(f"{ind}if not ({x} == {c} and type({x}) is type({c})): return False")
        if "minimum" in schema:
            c = self.const(schema["minimum"])
            out.append(f"{ind}if type({x}) in (int, float) and {x} < {c}: return False")
        if "anyOf" in schema:
            alts = [self.anon(a) for a in schema["anyOf"]]
            out.append(f"{ind}if not ({' or '.join(f'{a}({x})' for a in alts)}): return False")
        props = schema.get("properties") or {}
        required = schema.get("required") or []
        extra = schema.get("additionalProperties", True)
        if props or required or extra is not True:
            inner = ind
            if not is_dict:
                out.append(f"{ind}if type({x}) is dict:")
                out.append(f"{ind}    pass")
                inner = ind + "    "
            rest = [k for k in required if k not in props]
            if rest:
                out.append(f"{inner}if not {self.const(frozenset(rest))} <= {x}.keys(): return False")
            for k, sub in props.items():
                self.n += 1
                y = f"_x{self.n}"
                lines: list[str] = []
                if not self.checks(sub, y, lines, inner + "    "):
                    return False
                if k in required:
                    if not lines:
                        out.append(f"{inner}if {k!r} not in {x}: return False")
                    elif lines[0].startswith((f"{inner}    if type({y}) is not ", f"{inner}    _t")) \
                            and lines[0].count(y) == 1 and not any(y in ln for ln in lines[1:]):
                        # only its type is tested: on the value read in place
                        out.append(lines[0][4:].replace(f"type({y})", f"type({x}[{k!r}])", 1))
                        out += [ln[4:] for ln in lines[1:]]
                    else:
                        out.append(f"{inner}{y} = {x}[{k!r}]")  # (absent: KeyError, see function())
                        out += [ln[4:] for ln in lines]
                elif lines:
                    out.append(f"{inner}{y} = {x}.get({k!r}, _MISSING)")
                    out.append(f"{inner}if {y} is not _MISSING:")
                    out += lines
            if extra is False:
                out.append(f"{inner}if not {x}.keys() <= {self.const(frozenset(props))}: return False")
            elif extra is not True:
                fn, known = self.anon(extra), self.const(frozenset(props))
                out.append(f"{inner}for _k, _v in {x}.items():")
                out.append(f"{inner}    if _k not in {known} and not {fn}(_v): return False")
        if "items" in schema:
            self.n += 1
            y = f"_x{self.n}"
            lines = []
            if not self.checks(schema["items"], y, lines, ind + "        ", inline=True):
                return False
            if lines:
                out.append(f"{ind}if type({x}) is list:" if not is_list else f"{ind}if True:")
                out.append(f"{ind}    for {y} in {x}:")
                out += lines
        return True

    def build(self, schema: Any) -> Callable[[Any], bool]:
        top = self.anon(schema)
        scope = dict(self.consts)
        exec("\n".join(self.src), scope)  # noqa: S102 - source generated above from the schema's keywords only
        # (a schema that is only a reference: the referenced check itself, one call less)
        ref = str(schema["$ref"])[8:] if isinstance(schema, dict) and set(schema) == {"$ref"} else None
        return scope[self.names[ref] if ref in self.names else top]  # type: ignore[no-any-return]


def quick_accept(schema: Any, defs: Mapping[str, Any]) -> Callable[[Any], bool]:
    """A predicate that says True only for values ``schema`` accepts (JSON values as parsed).

    It understands the keywords the protocol's result schemas use and says False (\"not sure\")
    wherever it meets anything else, so the caller runs the full validator only then -- for a
    malformed result, or one shaped in a way the quick path does not cover -- and takes its
    message.  Stricter than the schema is allowed, laxer is not: ``bool`` is never an integer
    or a number here, and an integer-valued float, or an enum or const matched only across
    numeric types, is left to the full check.  Compiled to plain Python: a snapshot costs
    about a microsecond, a tenth of the general validator.
    """
    return _QuickCompiler(defs).build(schema)


def quick_accept_plain(schema: Any, defs: Mapping[str, Any]) -> Callable[[Any], bool]:
    """The plain version of :func:`quick_accept`: the same answers, read from the schema at each
    call instead of compiled (the oracle of its differential test, tests/protocol/test_quick_plain.py).

    A *function* is what the compiler makes one Python function of: the top schema, each
    definition called by ``$ref``, each ``anyOf`` alternative and an ``additionalProperties``
    schema.  A function whose schema holds a keyword outside the quick set anywhere in what it
    checks in line (properties, items, a list's item definition inlined) says False for every
    value; a called one decides only where it is called.  A list's items that are only a
    reference are checked in line unless that definition is already being inlined (a recursive
    one is called)."""

    def target(s: dict[str, Any]) -> str | None:
        t = str(s["$ref"])
        return t[8:] if t.startswith("#/$defs/") and t[8:] in defs else None

    def inlined(s: Any, stack: tuple[str, ...], inline: bool) -> str | None:
        if inline and isinstance(s, dict) and set(s) == {"$ref"}:
            name = target(s)
            if name is not None and name not in stack:
                return name
        return None

    def understood(s: Any, stack: tuple[str, ...], inline: bool = False) -> bool:
        if s is True or s == {}:
            return True
        if not isinstance(s, dict) or set(s) - _QUICK_KEYWORDS:
            return False
        if "$ref" in s:
            if target(s) is None:
                return False
            name = inlined(s, stack, inline)
            if name is not None:
                return understood(defs[name], stack + (name,))
        if "type" in s:
            names = s["type"] if isinstance(s["type"], list) else [s["type"]]
            if not names or any(n not in _TYPES for n in names):
                return False
        if not all(understood(sub, stack) for sub in (s.get("properties") or {}).values()):
            return False
        return "items" not in s or understood(s["items"], stack, inline=True)

    def function(s: Any, v: Any) -> bool:
        return understood(s, ()) and passes(s, v, ())

    def passes(s: Any, v: Any, stack: tuple[str, ...], inline: bool = False) -> bool:
        if s is True or s == {}:
            return True
        if "$ref" in s:
            name = inlined(s, stack, inline)
            if name is not None:
                return passes(defs[name], v, stack + (name,))
            if not function(defs[str(s["$ref"])[8:]], v):
                return False
        if "type" in s:
            names = s["type"] if isinstance(s["type"], list) else [s["type"]]
            if type(v) not in {_PY_TYPES[t] for n in names for t in _TYPES[n]}:  # bool is not int here
                return False
        if "enum" in s and not any(v == o and type(v) is type(o) for o in s["enum"]):
            return False
        if "const" in s and not (v == s["const"] and type(v) is type(s["const"])):
            return False
        if "minimum" in s and type(v) in (int, float) and v < s["minimum"]:
            return False
        if "anyOf" in s and not any(function(alt, v) for alt in s["anyOf"]):
            return False
        if type(v) is dict:
            props = s.get("properties") or {}
            required = s.get("required") or []
            if any(k not in v for k in required):
                return False
            if not all(passes(sub, v[k], stack) for k, sub in props.items() if k in v):
                return False
            extra = s.get("additionalProperties", True)
            if extra is False and any(k not in props for k in v):
                return False
            if extra is not True and extra is not False \
                    and not all(function(extra, w) for k, w in v.items() if k not in props):
                return False
        if "items" in s and type(v) is list:
            return all(passes(s["items"], w, stack, inline=True) for w in v)
        return True

    return lambda v: function(schema, v)


class ResultChecker:
    """Checks that a result has the JSON shape its operation promises (protocol level).

    Schemas are compiled with fastjsonschema, and nullable fields use type lists rather than
    ``anyOf`` (which costs an exception per null), so a snapshot check costs a few microseconds.
    """

    def __init__(self, spec: Spec) -> None:
        import fastjsonschema

        self.spec = spec
        self._error = fastjsonschema.JsonSchemaException
        doc = protocol_schema(spec)
        compiled: dict[str, Any] = {}
        self._validators: dict[str, Any] = {}
        for name, op in spec.operations.items():
            if op.returns not in compiled:
                compiled[op.returns] = fastjsonschema.compile({"$defs": doc["$defs"], "$ref": f"#/$defs/{op.returns}"})
            self._validators[name] = compiled[op.returns]
        quick = {ret: quick_accept({"$ref": f"#/$defs/{ret}"}, doc["$defs"]) for ret in compiled}
        # operation -> a predicate that says True only for results the full check accepts (an
        # operation without an entry is not checked)
        self.quick = {name: quick[op.returns] for name, op in spec.operations.items()}

    def problem(self, op: str, result: Any) -> str | None:
        v = self._validators.get(op)
        if v is None:
            return None
        if self.quick[op](result):
            return None
        try:
            v(result)
        except self._error as exc:
            return f"{op} returned a malformed result: {exc.message[:200]}"
        return None


_CHECKERS: dict[str, ResultChecker] = {}


def result_checker(spec: Spec) -> ResultChecker:
    """The (cached) result checker for a contract."""
    chk = _CHECKERS.get(spec.digest)
    if chk is None:
        chk = _CHECKERS[spec.digest] = ResultChecker(spec)
    return chk


_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode

_PLAIN = frozenset({str, int, bool, type(None)})


def _finite(obj: Any) -> bool:
    """True unless a float somewhere in ``obj`` is NaN or infinite (x - x is 0.0 only for finite x)."""
    t = type(obj)
    if t is dict:
        vals: Any = obj.values()
    elif t is list or t is tuple:
        vals = obj
    elif isinstance(obj, float):
        return obj - obj == 0.0
    elif isinstance(obj, Mapping):
        vals = obj.values()
    elif isinstance(obj, list | tuple):
        vals = obj
    else:
        return True
    for v in vals:
        tv = type(v)
        if tv is float:
            if v - v != 0.0:
                return False
        elif tv in _PLAIN:
            continue
        elif not _finite(v):
            return False
    return True


try:  # orjson is several times faster on the small objects of the protocol
    import orjson as _orjson

    _OR_OPTS = _orjson.OPT_APPEND_NEWLINE

    def dumps(obj: Any) -> bytes:
        """One protocol line: compact JSON, UTF-8, no NaN or infinities, ending in a newline."""
        try:
            line = _orjson.dumps(obj, option=_OR_OPTS)
        except TypeError:  # what orjson cannot encode (e.g. integers beyond 64 bits): the standard way
            return (_ENCODE(obj) + "\n").encode("utf-8")
        # orjson writes NaN and infinities as null: where a null appears, every float must be
        # finite; if one is not, the standard encoder refuses the object
        if b"null" in line and not _finite(obj):
            return (_ENCODE(obj) + "\n").encode("utf-8")
        return line

    def loads(raw: bytes) -> Any:
        """One protocol line parsed (NaN and infinities are not JSON and are refused)."""
        return _orjson.loads(raw)

    LOAD_ERRORS: tuple[type[Exception], ...] = (ValueError, UnicodeDecodeError)
except ImportError:  # pragma: no cover - orjson is a dependency; the standard library still works
    def dumps(obj: Any) -> bytes:
        """One protocol line: compact JSON, UTF-8, no NaN or infinities, ending in a newline."""
        return (_ENCODE(obj) + "\n").encode("utf-8")

    def loads(raw: bytes) -> Any:
        return json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)

    LOAD_ERRORS = (ValueError, UnicodeDecodeError)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def plain(value: Any) -> Any:
    """A JSON-ready copy of a (possibly read-only) contract document."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value
