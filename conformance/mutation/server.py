"""The mutating server: the reference in process behind a pipe whose messages one mutant rewrites
(:class:`MutantServer`), and the values its rewrites put into answers."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable, Mapping
from typing import IO, Any

from ledgercheck.spec import Spec
from ledgercheck.spec.args import arg_problem
from ledgercheck.spec.contract import parse_duration
from ledgercheck.transport.clock import QUANTUM
from ledgercheck.transport.server import Server, _lines
from ledgercheck.transport.wire import dumps, loads, result_types

from .mutants import (
    ARG_FAMILIES,
    BENIGN_FAMILIES,
    TIMING_KEYS,
    Mutant,
    _alter_paths,
    _answer_fields,
    _get_path,
    _item_schema,
    _list_answers,
    _object_schema,
    _order_bearing,
    _resolve,
)

# ---------------------------------------------------------------------------------------------
# The mutating server: the reference, in process, behind a pipe whose messages are rewritten


def _placeholder(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> Any:
    """A value of the right JSON shape for a result nobody computed."""
    schema = _resolve(schema, defs)
    if "anyOf" in schema:
        return None
    if schema.get("enum"):  # a value the protocol allows (a run's state, a task's state)
        return schema["enum"][0]
    typ = schema.get("type")
    if isinstance(typ, list):
        return None if "null" in typ else _placeholder({"type": typ[0]}, defs)
    if typ == "object":
        props = schema.get("properties", {})
        return {k: _placeholder(props[k], defs) for k in schema.get("required", [])}
    return {"array": [], "string": "mutant", "integer": 0, "number": 0.0, "boolean": False, "null": None}.get(typ)


def _alter(spec: Spec, key: str, value: Any, enum: Iterable[str] = (), item: Any = None) -> Any:
    """``value`` changed, its JSON type kept (None when it cannot be: null stays null): a name
    from a closed set (``enum``, the protocol's for the field, or the contract's statuses,
    receipt states, outbox states, error classes and wakeup kinds) becomes the set's next name;
    a list of names has its first one changed, an empty list gets ``item`` (a value of its items'
    shape) when there is one."""
    if value is None:
        return None
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + QUANTUM
    if isinstance(value, str):
        for names in (list(enum), list(spec.statuses), list(spec.receipt_states), ["pending", "sent"],
                      list(spec.error_classes), list(spec.wakeup_kinds)):
            if value in names and len(names) > 1:
                return names[(names.index(value) + 1) % len(names)]
        return value + "-x"
    if isinstance(value, dict):
        return {**value, "mutated": True}
    if value and isinstance(value[0], str):
        return [_alter(spec, key, value[0]), *value[1:]]
    if not value and item is not None:
        return [item]
    return ["mutated", value]


def _walk_path(value: Any, path: str) -> tuple[Any, Any] | None:
    """(container, key) of ``path`` ("work.status", "[0].nacks") in an answer, or None."""
    parts = path.split(".")
    node = value
    for i, p in enumerate(parts):
        if p == "[0]":
            if not isinstance(node, list) or not node:
                return None
            node = node[0]
            continue
        if i == len(parts) - 1:
            return (node, p) if isinstance(node, dict) and p in node else None
        if not isinstance(node, dict) or p not in node:
            return None
        node = node[p]
    return None


def _field_enum(defs: Mapping[str, Any], ret: str, path: str) -> tuple[str, ...]:
    """The names the protocol allows for the field at ``path`` of a ``ret`` answer (its
    ``enum``), or none."""
    schema = _field_schema(defs, ret, path)
    return tuple(schema.get("enum", ())) if schema is not None else ()


def _field_schema(defs: Mapping[str, Any], ret: str, path: str) -> Mapping[str, Any] | None:
    """The protocol's schema of the field at ``path`` of a ``ret`` answer, or None."""
    schema: Mapping[str, Any] | None = _resolve(defs[ret], defs)
    for p in path.split("."):
        if schema is None:
            return ()
        if p == "[0]":
            schema = _item_schema(schema, defs)
            continue
        obj = _object_schema(schema, defs)
        schema = _resolve(obj["properties"][p], defs) if obj is not None and p in obj.get("properties", {}) else None
    return schema


def _stale_answer(first: Any, now: Any) -> Any:
    """A replay's answer with what it describes frozen at the first answer: the objects in it (a
    snapshot, a receipt) as first answered, its own flags (``created``: whether this call made
    the item) as answered now; an answer that is one object or a list, as first answered."""
    if isinstance(first, dict) and isinstance(now, dict) and any(isinstance(v, (dict, list)) for v in now.values()):
        return {k: (json.loads(json.dumps(first[k])) if isinstance(v, (dict, list)) and k in first else v) for k, v in now.items()}
    return json.loads(json.dumps(first))


def _shift_timing(value: Any, by: float) -> Any:
    """A per-item timing moved by ``by`` seconds: a duration, or the durations in a retry policy
    (None when nothing in it is a duration, or the shift would leave a non-positive one)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value + by if value + by > 0 else None
    if isinstance(value, dict):
        out, moved = dict(value), False
        for k, v in value.items():
            if k in TIMING_KEYS:
                try:
                    base = parse_duration(v)
                except (ValueError, TypeError):
                    continue
                if base + by > 0:
                    out[k], moved = base + by, True
        return out if moved else None
    return None


def _reverse_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _reverse_keys(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reverse_keys(v) for v in value]
    return value


class MutantServer(Server):
    """:class:`Server` with one mutant's rewrites applied to each request and answer.

    Rewrites that need the ledger's state (the live token, a stream's last seq, the queued
    candidates of a claim) read it from the in-process adapter, not through the pipe.  The
    first time the mutant changes something in a process, a line goes to ``log`` (and, for
    the observing control, one line per new site it sees), so the judge knows it fired."""

    def __init__(self, adapter: Any, out: IO[bytes], spec: Spec, mutant: Mutant, log: str | None = None) -> None:
        super().__init__(adapter, out)
        self.spec = spec
        self.mutant = mutant
        self.log = log
        self.fired = 0
        self.seen: set[tuple[str, ...]] = set()
        self.defs = result_types(spec)
        self.answers = 0
        fam = mutant.family
        self.benign = set(BENIGN_FAMILIES) if fam == "benign" else {fam} & set(BENIGN_FAMILIES)
        self.delay_every = 8 if fam == "benign" else 1
        # all at once: also the optional fields left out and the lists whose order is free reversed
        # (the benign drop_field and reorder mutants, found without generating every mutant)
        ops = [o for o in spec.operations if o not in ("hello", "reset")] if fam == "benign" else []
        self.optional = [(name, f) for name, f, required in _answer_fields(spec, ops, self.defs) if not required]
        self.free_order = {op for op, _ in _list_answers(spec, ops, self.defs) if not _order_bearing(spec, op)}
        self.token_owner: dict[str, str] = {}  # every work lease token answered so far -> the owner it went to
        self.first_answer: dict[tuple[str, str], Any] = {}  # (op, its arguments but now) -> its first result

    # -- bookkeeping ---------------------------------------------------------------------------
    def _note(self, *site: str) -> None:
        if site in self.seen:
            return
        self.seen.add(site)
        self._write_log(json.dumps(list(site)))

    def _fire(self) -> None:
        self.fired += 1
        if self.fired == 1:
            self._write_log("fired")

    def _write_log(self, line: str) -> None:
        if not self.log:
            return
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)

    def _call(self, op: str, **args: Any) -> Any:
        out = self.dispatch(op, args)
        return out.value if out.ok else None

    def _live_token(self, args: Mapping[str, Any]) -> Any:
        if isinstance(args.get("session_key"), str) and isinstance(args.get("lane"), str):
            return self._live_lane_token(args["session_key"], args["lane"])
        wid = args.get("work_id")
        if not isinstance(wid, str) and isinstance(args.get("key"), str):
            rec = self._call("effect_lookup", key=args["key"])
            wid = rec.get("work_id") if isinstance(rec, dict) else None
        snap = self._call("get", work_id=wid) if isinstance(wid, str) else None
        return snap.get("lease_token") if isinstance(snap, dict) else None

    def _holder(self, args: Mapping[str, Any]) -> tuple[Any, Any]:
        """(live lease token, owner) of the work item a call names."""
        wid = args.get("work_id")
        snap = self._call("get", work_id=wid) if isinstance(wid, str) else None
        return (snap.get("lease_token"), snap.get("owner")) if isinstance(snap, dict) else (None, None)

    def _same_owner_stale(self, args: Mapping[str, Any]) -> str | None:
        """The live token when the call's token is stale but was handed to the item's current owner."""
        tok = args.get("token")
        if not isinstance(tok, str):
            return None
        live, owner = self._holder(args)
        if isinstance(live, str) and live != tok and owner is not None and self.token_owner.get(tok) == owner:
            return live
        return None

    def _note_tokens(self, value: Any) -> None:
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, dict) and isinstance(v.get("lease_token"), str) and isinstance(v.get("owner"), str):
                self.token_owner.setdefault(v["lease_token"], v["owner"])

    def _live_lane_token(self, session_key: str, lane: str) -> str | None:
        """The token of a lane's current lease (None when the lane is free or released): no
        operation reads a lane's lease without taking it, so it is read from the reference's
        lane table (reference/schema.py)."""
        read = getattr(getattr(self.adapter, "ledger", None), "_read", None)
        if read is None:
            return None
        rows = read("SELECT token, released FROM lane WHERE session_key = ? AND lane = ?", (session_key, lane))
        return str(rows[0][0]) if rows and not rows[0][1] else None

    def _last_seq(self, stream: Any) -> int | None:
        entries = self._call("log_read", stream=stream) if isinstance(stream, str) else None
        if not isinstance(entries, list):
            return None
        return entries[-1]["seq"] if entries else self.spec.first_seq - 1

    def _claim_candidates(self) -> list[dict[str, Any]]:
        queued = self._call("list", status=self.spec.initial_status)
        if not isinstance(queued, list):
            return []
        order = {w["work_id"]: i for i, w in enumerate(queued)}
        return sorted(queued, key=lambda w: (w["priority"], w["created_at"], order[w["work_id"]]))

    # -- the exchange --------------------------------------------------------------------------
    def handle(self, raw: bytes) -> dict[str, Any]:
        try:
            req = loads(raw)
        except ValueError:
            return super().handle(raw)
        if not isinstance(req, dict) or not isinstance(req.get("op"), str) or not isinstance(req.get("args", {}), dict):
            return super().handle(raw)
        op, args = req["op"], dict(req.get("args") or {})
        fam = self.mutant.family
        if fam == "observe":
            self._observe_request(op, args)
        args = self._rewrite_request(op, args)
        req["args"] = args
        resp = self._forward(op, req)
        if fam in ("observe", "fence_owner") and resp.get("ok") is True:
            self._note_tokens(resp.get("result"))
        if fam in ("observe", "replay_stale", "replay_refuse") and resp.get("ok") is True and op in self.spec.operations \
                and op not in ("hello", "reset"):
            key = (op, dumps({k: v for k, v in args.items() if k != "now"}).decode())
            again = key in self.first_answer
            first = self.first_answer.setdefault(key, json.loads(json.dumps(resp.get("result"))))
            if again and fam == "observe":
                self._note("replay_same", op)
            elif again and fam == "replay_refuse" and op == self.mutant.params[0]:
                self._fire()
                code = self.mutant.params[1]
                return {"id": resp.get("id"), "ok": False,
                        "error": {"code": code, "message": f"{op}: refused (a repeated call)", "definite": self.spec.errors[code]}}
            stale = _stale_answer(first, resp.get("result"))
            if stale != resp.get("result"):
                if fam == "observe":
                    self._note("replay_changed", op)
                elif op == self.mutant.params[0]:
                    self._fire()
                    resp = {**resp, "result": stale}
        if fam == "observe":
            self._observe_answer(op, args, resp)
        return self._rewrite_answer(op, args, resp)

    def _forward(self, op: str, req: dict[str, Any]) -> dict[str, Any]:
        """The reference's answer; under ``tree_finished`` (and the observing control) with its
        tree walk replaced for the call by one that does not descend below finished nodes (the
        mutant answers from it; the control notes where the two walks differ)."""
        fam = self.mutant.family
        ledger = getattr(self.adapter, "ledger", None)
        walk = getattr(ledger, "_descendants", None)
        if fam not in ("observe", "tree_finished") or walk is None or op not in self.spec.operations \
                or (fam == "tree_finished" and op != self.mutant.params[0]):
            return super().handle(dumps(req))

        def skipping(cur: Any, work_id: str) -> list[str]:
            full = walk(cur, work_id)
            out: list[str] = []
            frontier = [work_id]
            while frontier:
                nxt = [d["child_id"] for w in frontier
                       if w == work_id or ledger._get(cur, w).snap["status"] not in ledger.terminal
                       for d in ledger._spawned(cur, w)]
                out += nxt
                frontier = nxt
            if out == full:
                return full
            if fam == "observe":
                self._note("tree_finished", op)
                return full
            self._fire()
            return out

        ledger._descendants = skipping
        try:
            return super().handle(dumps(req))
        finally:
            del ledger._descendants

    def _rewrite_request(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        fam, p = self.mutant.family, self.mutant.params
        if fam in ARG_FAMILIES and op in self.spec.operations and arg_problem(self.spec, op, args) is not None:
            return args  # a call the contract refuses for its arguments is the input checks' business: left alone
        if op == "reset" and fam == "row_swap" and isinstance(args.get("config"), dict):
            contract = args["config"].get("contract")
            table = _get_path(contract, p[0].split(".")) if isinstance(contract, dict) else None
            if isinstance(table, dict) and p[1] in table and p[2] in table:
                config = dict(args["config"])
                config["contract"] = contract = json.loads(json.dumps(contract))
                table = _get_path(contract, p[0].split("."))
                table[p[1]] = json.loads(json.dumps(table[p[2]]))
                self._fire()
                return {**args, "config": config}
            return args
        if op == "reset" and fam in ("timing", "limit") and isinstance(args.get("config"), dict):
            contract = args["config"].get("contract")
            if isinstance(contract, dict):
                path = p[0].split(".")
                node = _get_path(contract, path[:-1])
                if isinstance(node, dict) and node.get(path[-1]) is not None:
                    config = dict(args["config"])
                    config["contract"] = contract = json.loads(json.dumps(contract))
                    node = _get_path(contract, path[:-1])
                    step = QUANTUM if fam == "timing" else 1
                    base = parse_duration(node[path[-1]]) if fam == "timing" else int(node[path[-1]])
                    node[path[-1]] = base + (step if p[1] == "+" else -step)
                    args = {**args, "config": config}
                    self._fire()
            return args
        if fam == "fold_case" and op == p[0] and isinstance(args.get(p[1]), str) and args[p[1]].lower() != args[p[1]]:
            self._fire()
            return {**args, p[1]: args[p[1]].lower()}
        if fam == "skip_fence" and op == p[0]:
            if p[1] == "token" and isinstance(args.get("token"), str):
                live = self._live_token(args)
                if isinstance(live, str) and live != args["token"]:
                    self._fire()
                    return {**args, "token": live}
            elif p[1] == "expected_seq" and isinstance(args.get("expected_seq"), int):
                last = self._last_seq(args.get("stream"))
                if last is not None and last != args["expected_seq"]:
                    self._fire()
                    return {**args, "expected_seq": last}
        if fam == "arg_instant" and op == p[0] and args.get(p[1]) is not None:
            new = _shift_timing(args[p[1]], QUANTUM if p[2] == "+" else -QUANTUM)
            if new is not None and new != args[p[1]]:
                self._fire()
                return {**args, p[1]: new}
        if fam == "fence_owner" and op == p[0]:
            live = self._same_owner_stale(args)
            if live is not None:
                self._fire()
                return {**args, "token": live}
        if fam == "seq_first" and op == p[0] and isinstance(args.get("expected_seq"), int):
            last = self._last_seq(args.get("stream"))
            if last == self.spec.first_seq - 1 and last != args["expected_seq"]:
                self._fire()
                return {**args, "expected_seq": last}
        if fam == "drop_option" and op == p[0] and args.get(p[1]) is not None:
            self._fire()
            return {k: v for k, v in args.items() if k != p[1]}
        if fam == "claim_last" and op == "claim" and args.get("work_id") is None:
            cands = self._claim_candidates()
            if len(cands) >= 2 and cands[-1]["work_id"] != cands[0]["work_id"]:
                self._fire()
                return {**args, "work_id": cands[-1]["work_id"]}
        return args

    def _rewrite_answer(self, op: str, args: Mapping[str, Any], resp: dict[str, Any]) -> dict[str, Any]:
        fam, p = self.mutant.family, self.mutant.params
        ok = resp.get("ok") is True
        if fam == "refuse_ok" and op == p[0] and not ok and resp["error"]["code"] == p[1]:
            value = self._fake_result(op, args)
            self._fire()
            resp = {"id": resp["id"], "ok": True, "result": value}
        elif fam == "refuse_swap" and op == p[0] and not ok and resp["error"]["code"] == p[1]:
            self._fire()
            resp = {**resp, "error": {**resp["error"], "code": p[2], "definite": self.spec.errors[p[2]]}}
        elif fam == "drop_field" and ok and op in self.spec.operations and op not in ("hello", "reset"):
            ret = self.spec.operations[op].returns
            if self._drop(resp.get("result"), self.defs[ret], ret, p[0], p[1]):
                self._fire()
        elif fam == "alter" and op == p[0] and ok:
            where = _walk_path(resp.get("result"), p[1])
            if where is not None:
                node, key = where
                schema = _field_schema(self.defs, self.spec.operations[op].returns, p[1])
                items = _item_schema(schema, self.defs) if schema is not None else None
                new = _alter(self.spec, key, node[key], tuple(schema.get("enum", ())) if schema is not None else (),
                             _placeholder(items, self.defs) if items is not None else None)
                if new is not None and new != node[key]:
                    node[key] = new
                    self._fire()
        elif fam in ("reorder", "drop_item") and op == p[0] and ok and isinstance(resp.get("result"), list):
            lst = resp["result"]
            if fam == "reorder" and len(lst) >= 2 and lst != lst[::-1]:
                resp["result"] = lst[::-1]
                self._fire()
            elif fam == "drop_item" and lst:
                resp["result"] = lst[:-1]
                self._fire()
        if fam == "benign" and ok and op in self.spec.operations and op not in ("hello", "reset"):
            ret = self.spec.operations[op].returns
            for shape, fname in self.optional:
                if self._drop(resp.get("result"), self.defs[ret], ret, shape, fname):
                    self._fire()
            lst = resp.get("result")
            if op in self.free_order and isinstance(lst, list) and len(lst) >= 2:
                resp["result"] = lst[::-1]
                self._fire()
        if self.benign:
            resp = self._benign(op, resp)
        return resp

    def _fake_result(self, op: str, args: Mapping[str, Any]) -> Any:
        """What an accepting ledger might answer: the item's snapshot where there is one,
        else a value of the result's shape."""
        ret = self.spec.operations[op].returns if op in self.spec.operations else "none"
        if ret in ("work", "work_or_null") and isinstance(args.get("work_id"), str):
            snap = self._call("get", work_id=args["work_id"])
            if snap is not None:
                return snap
        return _placeholder(self.defs.get(ret, {"type": "null"}), self.defs)

    def _drop(self, value: Any, schema: Mapping[str, Any], name: str, shape: str, fname: str) -> bool:
        """Remove ``fname`` from every object of type ``shape`` inside an answer (``name``: the
        type ``schema`` belongs to)."""
        if "$ref" in schema:
            ref = schema["$ref"].rsplit("/", 1)[1]
            return self._drop(value, self.defs[ref], ref, shape, fname)
        done = False
        for alt in schema.get("anyOf", []):
            done |= self._drop(value, alt, name, shape, fname)
        if schema.get("type") == "array" and isinstance(value, list):
            for v in value:
                done |= self._drop(v, schema["items"], name, shape, fname)
        if isinstance(value, dict) and schema.get("properties"):
            if name == shape and fname in value:
                del value[fname]
                done = True
            for k, sub in schema["properties"].items():
                if k in value:
                    done |= self._drop(value[k], sub, name, shape, fname)
        return done

    def _extra(self, value: Any, schema: Mapping[str, Any]) -> None:
        """An unknown field in every object of the protocol's result shapes (never inside the
        caller's own values: results, payloads, bodies and event data are data, not protocol)."""
        schema = _resolve(schema, self.defs)
        for alt in schema.get("anyOf", []):
            self._extra(value, alt)
        if schema.get("type") == "array" and isinstance(value, list):
            for v in value:
                self._extra(v, schema["items"])
        if isinstance(value, dict) and schema.get("properties"):
            for k, sub in schema["properties"].items():
                if k in value:
                    self._extra(value[k], sub)
            value["x_mutant_note"] = "an unknown field the harness must ignore"

    def _benign(self, op: str, resp: dict[str, Any]) -> dict[str, Any]:
        self.answers += 1
        if "reword" in self.benign and resp.get("ok") is False:
            err = resp["error"]
            resp = {**resp, "error": {**err, "message": f"refused ({err.get('code')}): the ledger said no, in other words"}}
            self._fire()
        if "omit_definite" in self.benign and resp.get("ok") is False and "definite" in resp["error"] \
                and resp["error"]["definite"] == self.spec.errors.get(resp["error"]["code"]):
            resp = {**resp, "error": {k: v for k, v in resp["error"].items() if k != "definite"}}
            self._fire()
        if "extra_fields" in self.benign:
            resp = {**resp, "x_mutant_note": "an unknown field the harness must ignore"}
            if isinstance(resp.get("error"), dict):
                resp["error"] = {**resp["error"], "x_mutant_note": "ignored"}
            if resp.get("ok") is True and op in self.spec.operations and op not in ("hello", "reset"):
                ret = self.spec.operations[op].returns
                self._extra(resp.get("result"), self.defs[ret])
            self._fire()
        if "shuffle_keys" in self.benign:
            resp = _reverse_keys(resp)
            self._fire()
        if "delay" in self.benign and self.answers % self.delay_every == 0:
            time.sleep(0.003)
            self._fire()
        return resp

    # -- the observing control ---------------------------------------------------------------
    def _observe_request(self, op: str, args: Mapping[str, Any]) -> None:
        if op not in self.spec.operations or op in ("hello", "reset"):
            return
        for name, v in args.items():
            if isinstance(v, str) and v.lower() != v:
                self._note("upper", op, name)
        if isinstance(args.get("token"), str):
            live = self._live_token(args)
            if isinstance(live, str) and live != args["token"]:
                self._note("stale", op, "token")
        if isinstance(args.get("expected_seq"), int) and op == "log_append":
            last = self._last_seq(args.get("stream"))
            if last is not None and last != args["expected_seq"]:
                self._note("stale", op, "expected_seq")
        if op == "claim" and args.get("work_id") is None:
            cands = self._claim_candidates()
            if len(cands) >= 2:
                self._note("choice", "claim")
        for name, v in args.items():
            if v is not None and name in self.spec.operations[op].args:
                self._note("arg", op, name)
        if "work_id" in args and self._same_owner_stale(args) is not None:
            self._note("stale_same_owner", op)
        if isinstance(args.get("expected_seq"), int):
            last = self._last_seq(args.get("stream"))
            if last == self.spec.first_seq - 1 and last != args["expected_seq"]:
                self._note("stale_first", op)

    def _observe_answer(self, op: str, args: Mapping[str, Any], resp: Mapping[str, Any]) -> None:
        if op not in self.spec.operations or op in ("hello", "reset"):
            return
        if resp.get("ok") is False:
            self._note("code", op, str(resp["error"].get("code")))
            return
        value = resp.get("result")
        ret = self.spec.operations[op].returns
        if isinstance(value, list):
            if value:
                self._note("list1", op)
            if len(value) >= 2 and value != value[::-1]:
                self._note("list2", op)
        self._observe_fields(value, self.defs[ret], ret)
        for path in _alter_paths(self.spec, op, self.defs):
            where = _walk_path(value, path)
            if where is not None and where[0][where[1]] is not None:
                self._note("value", op, path)

    def _observe_fields(self, value: Any, schema: Any, name: str) -> None:
        if "$ref" in schema:
            ref = schema["$ref"].rsplit("/", 1)[1]
            self._observe_fields(value, self.defs[ref], ref)
            return
        for alt in schema.get("anyOf", []):
            self._observe_fields(value, alt, name)
        if schema.get("type") == "array" and isinstance(value, list):
            for v in value[:3]:
                self._observe_fields(v, schema["items"], name)
        if isinstance(value, dict) and schema.get("properties"):
            for k, sub in schema["properties"].items():
                if k in value:
                    self._note("field", name, k)
                    self._observe_fields(value[k], sub, name)


def serve_mutant(adapter: Any, spec: Spec, mutant: Mutant, infile: IO[bytes], outfile: IO[bytes], log: str | None = None) -> int:
    """Like :func:`server.serve`, with ``mutant``'s rewrites."""
    server = MutantServer(adapter, outfile, spec, mutant, log)
    for raw in _lines(infile):
        if not raw.strip():
            continue
        outfile.write(server.encode(server.handle(raw)))
        outfile.flush()
    close = getattr(adapter, "close", None)
    if callable(close):
        close()
    return 0


def address(mutant: str, log: str | None = None, target: str = "reference") -> str:
    """The ``exec:`` adapter address serving ``target`` with ``mutant``'s rewrites."""
    import shlex

    argv = [sys.executable, "-m", "ledgercheck", "selfcheck", "serve", "--mutant", mutant, "--target", target]
    if log:
        argv += ["--log", log]
    return "exec:" + " ".join(shlex.quote(a) for a in argv)
