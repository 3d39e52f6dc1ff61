"""JSON Schemas of the wire protocol, built from the contract.

Requests are ``{"id": int, "op": str, "args": {...}}``; responses ``{"id": int, "ok": true,
"result": ...}`` or ``{"id": int, "ok": false, "error": {"code", "message", "definite"}}``;
an adapter may also print notifications ``{"event": "crash_point", "point": str}``.  The
argument schema of each operation comes from the contract's argument list; result shapes are
the named types below (the contract's ``returns:``).  Types are checked at the protocol level:
a value of the wrong JSON type is a protocol error of the adapter, while a well-typed value
that breaks a rule (an unknown status, say) is a clause failure found by the checker.
"""

from __future__ import annotations

import json
from typing import Any

from ledgercheck import PROTOCOL_VERSION
from ledgercheck.spec import Spec

STR = {"type": "string"}
INT = {"type": "integer"}
NUM = {"type": "number"}
BOOL = {"type": "boolean"}
ANY: dict[str, Any] = {}
OBJ = {"type": "object"}


def _nullable(s: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [s, {"type": "null"}]}


def _obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props) if required is None else required}


FIELD_JSON = {"string": STR, "integer": INT, "boolean": BOOL, "time": NUM, "status": STR, "any": ANY}

ARG_JSON = {
    "string": STR, "nonempty_string": STR, "time": NUM, "duration": NUM, "object": OBJ, "any": ANY,
    "boolean": BOOL, "positive_int": INT, "nonnegative_int": INT, "source_system": STR, "priority": INT,
    "retry_policy": OBJ, "status": STR, "terminal_status": STR, "waiting_kind": STR, "error_class": STR,
    "step_class": STR, "receipt_state": STR, "effect_key": STR,
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
    return {
        "none": {"type": "null"},
        "work": work,
        "work_or_null": _nullable(ref),
        "create_result": _obj({"work": ref, "created": BOOL}),
        "work_list": {"type": "array", "items": ref},
        "event": event,
        "event_list": {"type": "array", "items": {"$ref": "#/$defs/event"}},
        "move_list": {"type": "array", "items": move},
        "id_list": {"type": "array", "items": STR},
        "receipt": receipt,
        "receipt_or_null": _nullable(rref),
        "receipt_list": {"type": "array", "items": rref},
        "begin_result": _obj({"receipt": rref, "created": BOOL}),
        "deliver_result": _obj({"delivered": BOOL}),
        "message_list": {"type": "array", "items": message},
        "nack_result": _obj({"dead": BOOL, "nacks": INT}),
        "outbox_message": outbox,
        "enqueue_result": _obj({"message": oref, "created": BOOL}),
        "outbox_list": {"type": "array", "items": oref},
        "append_result": _obj({"seq": INT}),
        "log_list": {"type": "array", "items": _obj({"stream": STR, "seq": INT, "kind": STR, "payload": OBJ, "at": NUM},
                                                    ["stream", "seq", "kind", "payload"])},
        "victim_list": {"type": "array", "items": _obj({"work_id": STR, "decision": STR, "reason": STR}, ["work_id", "decision"])},
        "handshake": _obj({
            "name": STR, "version": STR, "protocol": STR, "profiles": {"type": "array", "items": STR},
            "capabilities": _obj({"clock": {"enum": ["injected", "wall"]}, "durable": BOOL, "concurrent": BOOL}, []),
            "crash_points": {"type": "array", "items": STR},
            "known_bugs": {"type": "object", "additionalProperties": STR},
            "artifact_sha256": _nullable(STR),
        }, ["name", "version", "protocol", "profiles"]),
    }


def protocol_schema(spec: Spec) -> dict[str, Any]:
    """One JSON Schema document describing every message of the wire protocol."""
    defs: dict[str, Any] = dict(result_types(spec))
    requests = []
    for name, op in spec.operations.items():
        args = {a: ARG_JSON[arg.type] for a, arg in op.args.items()}
        req = {
            "type": "object",
            "properties": {"id": INT, "op": {"const": name}, "args": {
                "type": "object", "properties": args, "required": [a for a, arg in op.args.items() if arg.required]}},
            "required": ["id", "op", "args"],
        }
        defs[f"request_{name}"] = req
        defs[f"result_{name}"] = {"$ref": f"#/$defs/{op.returns}"}
        requests.append({"$ref": f"#/$defs/request_{name}"})
    defs["request_arm"] = {
        "type": "object",
        "properties": {"id": INT, "op": {"const": "arm"}, "args": _obj({"point": STR, "occurrence": INT})},
        "required": ["id", "op", "args"],
    }
    requests.append({"$ref": "#/$defs/request_arm"})
    defs["request"] = {"oneOf": requests}
    defs["error"] = _obj({"code": STR, "message": STR, "definite": BOOL}, ["code", "message"])
    defs["response"] = {
        "oneOf": [
            {"type": "object", "properties": {"id": INT, "ok": {"const": True}, "result": ANY}, "required": ["id", "ok", "result"]},
            {"type": "object", "properties": {"id": INT, "ok": {"const": False}, "error": {"$ref": "#/$defs/error"}},
             "required": ["id", "ok", "error"]},
        ]
    }
    defs["notification"] = _obj({"event": {"const": "crash_point"}, "point": STR, "occurrence": INT}, ["event", "point"])
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://ledgercheck.dev/schema/wire-protocol-{PROTOCOL_VERSION}.json",
        "title": f"ledgercheck wire protocol {PROTOCOL_VERSION}",
        "description": "One JSON object per line on the adapter's stdin (requests) and stdout (responses, notifications).",
        "$defs": defs,
        "oneOf": [{"$ref": "#/$defs/request"}, {"$ref": "#/$defs/response"}, {"$ref": "#/$defs/notification"}],
    }


class ResultChecker:
    """Checks that a result has the JSON shape its operation promises (protocol level).

    Schemas are compiled with fastjsonschema: a check costs tens of microseconds, which keeps
    the wire transport within a small factor of an in-process call.
    """

    def __init__(self, spec: Spec) -> None:
        import fastjsonschema

        self.spec = spec
        doc = protocol_schema(spec)
        compiled: dict[str, Any] = {}
        self._validators: dict[str, Any] = {}
        for name, op in spec.operations.items():
            if op.returns not in compiled:
                compiled[op.returns] = fastjsonschema.compile({"$defs": doc["$defs"], "$ref": f"#/$defs/{op.returns}"})
            self._validators[name] = compiled[op.returns]

    def problem(self, op: str, result: Any) -> str | None:
        import fastjsonschema

        v = self._validators.get(op)
        if v is None:
            return None
        try:
            v(result)
        except fastjsonschema.JsonSchemaException as exc:
            return f"{op} returned a malformed result: {exc.message[:200]}"
        return None


_CHECKERS: dict[str, ResultChecker] = {}


def result_checker(spec: Spec) -> ResultChecker:
    """The (cached) result checker for a contract."""
    chk = _CHECKERS.get(spec.digest)
    if chk is None:
        chk = _CHECKERS[spec.digest] = ResultChecker(spec)
    return chk


def dumps(obj: Any) -> bytes:
    return (json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
