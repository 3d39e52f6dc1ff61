"""The mutants: what one is (:class:`Mutant`: its family, parameters, own clauses and site), the
families and their classes, and what the generator reads of the contract to build them (the
clauses an operation, a field or a code is named in, result shapes, event data, durations, tables)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ledgercheck.spec import Spec
from ledgercheck.spec.contract import parse_duration
from ledgercheck.transport.wire import RESULT_DOC, result_types

# ---------------------------------------------------------------------------------------------
# Mutants

PROTOCOL_OWNER = "protocol.result_shape"  # a dropped required field: the protocol's result check
ORDER_WORDS = ("order", "oldest", "fifo")
NO_REFUSAL = frozenset({"unsupported", "busy"})  # refusals the reference never gives on its own
# durations of the contract whose value decides an answer (renew_interval is advice to workers)
TIMING_KEYS = ("ttl", "grace", "timeouts", "initial_backoff", "max_backoff", "timeout", "retention")
# integer limits of the contract, shifted by one
LIMIT_PATHS = (("retry", "policy", "max_attempts"), ("inbox", "max_nacks"), ("inbox", "drain_max"),
               ("outbox", "pending_max"), ("eventlog", "first_seq"))
# operators rewriting a call's arguments in ways only a valid call can show (an invalid one is refused first)
ARG_FAMILIES = ("arg_instant", "fence_owner", "seq_first", "drop_option")
# what a clause statement says of an operation whose repeated call is answered from what it did first
REPLAY_WORDS = ("replay", "idempot", "again", "duplicate")
# what a clause statement says of an operation that walks a tree of items
TREE_WORDS = ("descendant", "tree")
BENIGN_FAMILIES = ("shuffle_keys", "extra_fields", "reword", "omit_definite", "delay")
# the class of bug each family of operators stands for (Mutant.klass; docs/selfcheck.md)
CLASS_OF = {
    "refuse_ok": "refusal", "refuse_swap": "refusal", "drop_field": "shape", "alter": "value", "reorder": "list",
    "drop_item": "list", "fold_case": "ident", "claim_last": "choice", "limit": "bound", "seq_first": "bound",
    "timing": "instant", "arg_instant": "instant", "fence_owner": "fence", "drop_option": "option", "row_swap": "row",
    "replay_stale": "replay", "replay_refuse": "replay_refused", "tree_finished": "tree",
}


@dataclass(frozen=True)
class Mutant:
    """One operator with its parameters.  ``name`` is what ``selfcheck serve --mutant`` takes."""

    family: str
    params: tuple[str, ...] = ()
    benign: bool = False
    own: tuple[str, ...] = ()  # the clauses the contract ties to the mutated behaviour
    site: tuple[str, ...] | None = None  # what the suite must exercise for the mutant to fire
    what: str = ""

    @property
    def name(self) -> str:
        return ":".join((self.family, *self.params))

    @property
    def klass(self) -> str:
        """The class of bug the mutant stands for (docs/selfcheck.md): the unit the self-check
        reports its rates per, besides overall."""
        if self.benign:
            return "benign"
        if self.family == "skip_fence":
            return "bound" if self.params[1:2] == ("expected_seq",) else "fence"
        return CLASS_OF.get(self.family, self.family)


@functools.lru_cache(maxsize=4096)
def _tokens(text: str) -> tuple[str, ...]:
    text = re.sub(r"(?<=[a-z])-(?=[a-z])", "_", text.lower())
    return tuple(re.findall(r"[a-z0-9_]+", text))


# endings by which a statement names a word ("renew": "renewal", "expire": "expiry", "ack": "acknowledged")
SUFFIXES = ("", "s", "es", "d", "ed", "ing", "al", "y", "ery", "nowledged")


def _op_terms(spec: Spec, op: str) -> tuple[str, ...]:
    """Words that name an operation in clause statements: its name, its name without the
    profile prefix (``inbox_drain`` is "drain", ``set_waiting`` "waiting"), and "monitor" for
    the monitor operation of the core profile."""
    parts = op.split("_")
    out = [op]
    if len(parts) > 1 and parts[0] in ("inbox", "outbox", "effect", "log", "set"):
        out.append("_".join(parts[1:]))
    if op == "promote_due":
        out.append("promote")
    o = spec.operations[op]
    if o.kind == "monitor" and (o.profile or "core") == "core":
        out.append("monitor")
    return tuple(out)


def mentions(statement: str, term: str) -> bool:
    """Whether a clause statement names ``term``: an identifier exactly, or a word with one of
    a few endings ("renew" names "renewal", "close_out" names "close-out", "expire" "expiry")."""
    return _mentions(statement, term)


@functools.lru_cache(maxsize=65536)
def _mentions(statement: str, term: str) -> bool:
    words = _tokens(statement)
    if "_" in term:
        return term in words
    stems = [term] + ([term[:-1]] if term.endswith("e") else [])
    return any(w.startswith(st) and w[len(st):] in SUFFIXES for w in words for st in stems)


REFUSAL_WORDS = ("refused", "refuse", "fails")
_BY_OP: dict[tuple[str, str], list[Any]] = {}


def own_clauses(spec: Spec, op: str | None, subjects: Iterable[str], extra: Iterable[str] = (),
                refusal: bool = False) -> tuple[str, ...]:
    """The clauses the contract ties to a mutation of ``subjects`` (an error code, a field, an
    argument, a timing's key) in ``op``: those whose statement (or id) names a subject and the
    operation; failing that, those of the operation's profile naming a subject; failing that,
    any naming a subject.  For a changed refusal: every clause naming the code, and those
    naming the operation and a refusal.
    When nothing names a subject, the clauses naming the operation (its profile's first).
    ``extra`` (the model's owner of a snapshot field) is added."""
    subjects = [s for s in subjects if s]
    text = {c.id: c.statement + " " + c.id.replace(".", " ") for c in spec.clauses}
    subj = [c for c in spec.clauses if any(_mentions(text[c.id], s) for s in subjects)]
    if not subj:  # an identifier no clause names: the clauses naming all of its words ("drain_max")
        subj = [c for c in spec.clauses if any("_" in s and all(_mentions(text[c.id], w) for w in s.split("_"))
                                               for s in subjects)]
    chosen = subj
    if op is not None:
        prof = spec.operations[op].profile or "core"
        key = (spec.digest, op)
        by_op = _BY_OP.get(key)
        if by_op is None:
            by_op = _BY_OP[key] = [c for c in spec.clauses if any(_mentions(text[c.id], t) for t in _op_terms(spec, op))]
        if refusal:  # every clause naming the code, and those naming the operation and a refusal
            chosen = subj + [c for c in by_op if c not in subj and any(_mentions(c.statement, w) for w in REFUSAL_WORDS)]
        else:
            chosen = [c for c in subj if c in by_op] or [c for c in subj if c.profile == prof] or subj
        if not chosen:
            chosen = [c for c in by_op if c.profile == prof] or by_op
    out = [c.id for c in chosen]
    for c in extra:
        if c and c not in out:
            out.append(c)
    return tuple(out)


def _forbidden_blames(spec: Spec, op: str) -> tuple[str, ...]:
    """The clauses the model blames for a forbidden move by ``op`` (its blame table for
    refused transitions, conformance/model.py), over every pair the table forbids."""
    from ..model import Model

    model = Model(spec)
    out: list[str] = []
    for src in spec.statuses:
        for dst in [*spec.statuses, None]:
            if dst is not None and spec.allowed(src, dst):
                continue
            c = model._forbidden_blame(src, dst, op)
            if c not in out:
                out.append(c)
    return tuple(out) if spec.edges_of(op) else ()


def _result_schema(spec: Spec, typ: str) -> tuple[dict[str, Any], dict[str, Any]]:
    types = result_types(spec)
    return types[typ], types


def _resolve(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    while "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _object_schema(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The object schema inside ``schema`` (through refs and nullable wrappers), or None."""
    schema = _resolve(schema, defs)
    for alt in schema.get("anyOf", []):
        s = _resolve(alt, defs)
        if s.get("type") == "object":
            return s
    return schema if schema.get("type") == "object" else None


PASSED_THROUGH = ("string", "object", "any")  # argument types that carry no rule of their own


def _answers_work(spec: Spec, op: str, types: Mapping[str, Any]) -> bool:
    """``op`` answers with work snapshots: a snapshot, a list of them, or an object whose record is
    one (``create_result``)."""
    ret = spec.operations[op].returns
    if ret not in types:
        return False
    schema = _resolve(types[ret], types)
    if schema is types.get("work"):
        return True
    item = _item_schema(schema, types)
    if item is not None:
        return item is types.get("work")
    obj = _object_schema(schema, types) or {}
    if obj is types.get("work"):  # a snapshot or null (claim's)
        return True
    return any(_resolve(v, types) is types.get("work") for v in obj.get("properties", {}).values() if isinstance(v, dict))


def _property_names(schema: Any, defs: Mapping[str, Any], out: set[str], seen: set[str]) -> set[str]:
    """Every property name inside ``schema``, through its refs."""
    if isinstance(schema, Mapping):
        ref = schema.get("$ref")
        if isinstance(ref, str):
            name = ref.rsplit("/", 1)[1]
            if name not in seen:
                seen.add(name)
                _property_names(defs.get(name), defs, out, seen)
        for k, v in schema.items():
            if k == "properties" and isinstance(v, Mapping):
                out.update(v)
            _property_names(v, defs, out, seen)
    elif isinstance(schema, list):
        for v in schema:
            _property_names(v, defs, out, seen)
    return out


def unrecorded_option(spec: Spec, op: str, name: str, types: Mapping[str, Any]) -> str | None:
    """Why ignoring the optional argument ``name`` of ``op`` changes no answer the contract lets
    anyone judge, or None when it may.  For an operation answering with work snapshots: the
    argument is a value passed through (a string, an object, any JSON value: not a duration, a
    limit, a status or a policy, whose types carry a rule), has no clause of its own (``blame``),
    its name is no field of a snapshot, and every
    field the operation's effects write from it (``arg:NAME``) is compared with ``compare: none``
    (a close-out's ``reason`` goes to ``status_reason``); what is stored nowhere (a create's
    ``payload``, a failure's ``message``) is written nowhere either.  For any other operation: a
    passed-through argument without a ``blame`` that no answer of its profile carries (no property
    of that name in its shapes) and no clause of its profile names (a nack's ``error``)."""
    arg = spec.operations[op].args[name]
    if arg.type not in PASSED_THROUGH or arg.blame or name in spec.work_fields:
        return None
    if not _answers_work(spec, op, types):
        # a journal's argument: unrecorded when no answer of its profile carries a field of that name
        # and no clause of the profile names it (a nack's ``error``; a receipt's fencing ``token`` is named)
        prof = spec.operations[op].profile
        fields: set[str] = set()
        for o in spec.operations.values():
            if o.profile == prof and o.returns in types:
                _property_names(types[o.returns], types, fields, set())
        if name in fields or any(c.profile == prof and _mentions(c.statement, name) for c in spec.clauses):
            return None
        return f"no answer of the {prof} profile carries it and no clause of it names it"
    targets = [f for step in (spec.effects.get(op) or {}).values() for f, v in step.writes
               if v.kind == "arg" and v.param == name]
    if any(spec.work_fields[f].compare != "none" for f in targets if f in spec.work_fields):
        return None
    if targets:
        return f"it is recorded only in {', '.join(sorted(set(targets)))}, which the contract does not compare (compare: none)"
    return "no field of the work item records it and no answer carries it"


def _item_schema(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any] | None:
    schema = _resolve(schema, defs)
    return _resolve(schema["items"], defs) if schema.get("type") == "array" else None


def _event_fields(spec: Spec, op: str) -> list[str]:
    """The snapshot fields ``op`` writes according to the contract: the data of its events (and
    the status, when one of them is a transition event)."""
    o = spec.operations[op]
    names = [o.event] if isinstance(o.event, str) else list((o.event or {}).values())
    if o.intent_event:
        names.append(o.intent_event)
    out: list[str] = []
    for e in names:
        ev = spec.events.get(e)
        if ev is None:
            continue
        if ev.transition and "status" not in out:
            out.append("status")
        out += [f for f in ev.data if f not in out]
    return out


def _event_clauses(spec: Spec, op: str) -> list[str]:
    """The clauses naming an event ``op`` appends: they say what the operation writes."""
    o = spec.operations[op]
    names = [o.event] if isinstance(o.event, str) else list((o.event or {}).values())
    names += [o.intent_event] if o.intent_event else []
    return [c.id for c in spec.clauses if any(e in _tokens(c.statement) for e in names)]


# words of a result type's name that name no record ("receipt_or_null" carries a receipt)
GENERIC_RESULT_WORDS = frozenset({"list", "or", "null", "result", "none", "id"})


def _record_clauses(spec: Spec, op: str) -> list[str]:
    """The clauses that say what ``op`` answers when its answer is not a work snapshot: those
    of the operation's profile naming the operation; failing that, those naming the record its
    result carries (a receipt, a message).  A changed field of that record breaks
    them: they say what the ledger stores and hands back for it.  A clause elsewhere that only
    uses the field's name for something else (the key derivation hashes ``work_id``; it says
    nothing of what a receipt answer holds) is not one of them."""
    o = spec.operations[op]
    prof = o.profile or "core"
    # a clause's statement and its own name (its id without the profile's prefix: "begin")
    mine = [(c.id, c.statement + " " + " ".join(c.id.split(".")[1:])) for c in spec.clauses if c.profile == prof]
    nouns = [w for w in o.returns.split("_") if w not in GENERIC_RESULT_WORDS]
    out: list[str] = []
    for terms in (_op_terms(spec, op), nouns):
        found = [cid for cid, text in mine if any(_mentions(text, t) for t in terms) and cid not in out]
        out += found
        # a clause naming the operation only to order its answer (idem.list.order) says nothing of
        # what the records hold: those naming the record still do
        if out and not all(any(w in _tokens(text) for w in ORDER_WORDS) for cid, text in mine if cid in out):
            return out
    return out


def _status_owner(spec: Spec, op: str) -> list[str]:
    """For a status altered in the answer of an operation that moves items: the clause saying a
    transition moves the record from the one status to the other (the status it answers is
    the one it moved the item to)."""
    if not spec.edges_of(op):
        return []
    return [c.id for c in spec.clauses if c.id == "core.transition.allowed"]


def _in_snapshot(spec: Spec, op: str, path: str, defs: Mapping[str, Any]) -> bool:
    """Whether ``path`` of ``op``'s answer lies in a work snapshot (for ``alter``)."""
    schema = _resolve(defs[spec.operations[op].returns], defs)
    item = _item_schema(schema, defs)
    if item is not None:
        schema, path = item, path.removeprefix("[0].")
    for part in path.split(".")[:-1]:
        obj = _object_schema(schema, defs)
        if obj is None or part not in obj.get("properties", {}):
            return False
        schema = obj["properties"][part]
    obj = _object_schema(schema, defs)
    return obj is not None and set(obj.get("properties", {})) == set(spec.work_fields)


def _order_bearing(spec: Spec, op: str) -> bool:
    """Whether the contract fixes the order of ``op``'s list answer: a clause naming the
    operation speaks of order, or its result's description does and no other operation returns
    that result (a description shared by several operations, such as ``work_list``'s, leaves
    each one's order to its clauses: ``cancel_tree``'s is left open)."""
    returns = spec.operations[op].returns
    doc = RESULT_DOC.get(returns, "").lower()
    shared = sum(o.returns == returns for o in spec.operations.values()) > 1
    if not shared and any(w in doc for w in ORDER_WORDS):
        return True
    return any(any(mentions(c.statement, t) for t in _op_terms(spec, op)) and any(w in _tokens(c.statement) for w in ORDER_WORDS)
               for c in spec.clauses)


def _duration_paths(doc: Mapping[str, Any]) -> Iterator[tuple[str, ...]]:
    """Paths of the contract document's durations that decide answers (see TIMING_KEYS)."""
    def walk(node: Any, path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
        if isinstance(node, Mapping):
            for k, v in node.items():
                yield from walk(v, (*path, str(k)))
        elif path and (set(path) & set(TIMING_KEYS)):
            try:
                parse_duration(node)
            except (ValueError, TypeError):
                return
            if path[0] == "phases" and _get_path(doc, (*path[:2], "action")) != "timeout":
                return  # a phase only reported to operators decides no answer
            if path[0] in ("lease", "waiting", "retry", "phases", "idempotency") and "renew_interval" not in path:
                yield path

    yield from walk(doc, ())


def _said(spec: Spec, op: str, words: Iterable[str]) -> list[Any]:
    """The clauses whose statement names ``op`` and one of ``words``."""
    terms = _op_terms(spec, op)
    return [c for c in spec.clauses if any(mentions(c.statement, t) for t in terms)
            and any(w in c.statement.lower() for w in words)]


def _replay_refusal(spec: Spec) -> str:
    """The definite error code the contract describes as a replay's (a reused idempotency key),
    else invalid_transition."""
    errors = spec.document.get("errors") or {}
    for code, definite in spec.errors.items():
        text = f"{code} {(errors.get(code) or {}).get('description', '')}".lower()
        if definite and code not in NO_REFUSAL and any(w in text for w in REPLAY_WORDS):
            return code
    return "invalid_transition"


def _rule_of(row: Mapping[str, Any]) -> dict[str, Any]:
    """A table row without its prose (``description``): what a ledger acts on."""
    return {k: v for k, v in row.items() if k != "description"}


def _row_tables(spec: Spec, doc: Mapping[str, Any]) -> Iterator[tuple[tuple[str, ...], list[str]]]:
    """(path, row names) of the contract's tables whose rows an operation argument names: mappings
    of two or more rows of one shape whose names are exactly the values some argument type takes."""
    from ledgercheck.spec.args import type_problem

    types = {a.type for o in spec.operations.values() for a in o.args.values()}

    def walk(node: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], list[str]]]:
        if not isinstance(node, dict):
            return
        rows = list(node)
        if len(rows) >= 2 and all(isinstance(v, dict) for v in node.values()) \
                and len({tuple(sorted(v)) for v in node.values()}) == 1 \
                and any(all(type_problem(spec, t, r) is None for r in rows) and type_problem(spec, t, "x-not-a-row") is not None
                        and t not in ("string", "nonempty_string", "any") for t in types):
            yield path, rows
        for k, v in node.items():
            yield from walk(v, (*path, str(k)))

    yield from walk(doc, ())


def _benign_rewrites() -> list[Mutant]:
    """The benign families' mutants, and all of them at once (they need no clause of their own)."""
    return [Mutant(f, (), benign=True, what=BENIGN_WHAT[f]) for f in BENIGN_FAMILIES] \
        + [Mutant("benign", ("all",), benign=True, what="every benign rewrite at once, optional fields left out and "
                  "lists of free order reversed too (a delay on every 8th answer)")]


def _answer_fields(spec: Spec, ops: Iterable[str], types: Mapping[str, Any]) -> Iterator[tuple[str, str, bool]]:
    """(shape name, field, required) of every field of every object shape the operations return."""
    seen: set[str] = set()
    for typ in sorted({spec.operations[o].returns for o in ops}):
        for name, obj in _shapes_within(types[typ], types, typ):
            if name in seen:
                continue
            seen.add(name)
            for f in obj.get("properties", {}):
                yield name, f, f in obj.get("required", [])


def _list_answers(spec: Spec, ops: Iterable[str], types: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(operation, its resolved result schema) of the operations that answer a list."""
    for op in ops:
        schema = _resolve(types[spec.operations[op].returns], types)
        if schema.get("type") == "array":
            yield op, schema


BENIGN_WHAT = {
    "shuffle_keys": "every JSON object in answers has its keys in reverse order",
    "extra_fields": "every answer, error and result object carries an unknown extra field (the caller's own values untouched)",
    "reword": "every error message is reworded (the code and definiteness kept)",
    "omit_definite": "errors leave out `definite` (the code's own definiteness applies)",
    "delay": "every answer is held back 3 ms",
}


def _shapes_within(schema: Mapping[str, Any], defs: Mapping[str, Any], name: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(type name, object schema) of every object shape inside a result type."""
    if "$ref" in schema:
        ref = schema["$ref"].rsplit("/", 1)[1]
        yield from _shapes_within(defs[ref], defs, ref)
        return
    for alt in schema.get("anyOf", []):
        yield from _shapes_within(alt, defs, name)
    if schema.get("type") == "array":
        yield from _shapes_within(schema["items"], defs, name)
    if schema.get("type") == "object" and schema.get("properties"):
        yield name, schema
        for p in schema["properties"].values():
            yield from _shapes_within(p, defs, name)


def _alter_paths(spec: Spec, op: str, defs: Mapping[str, Any]) -> list[str]:
    """Fields of ``op``'s answer an ``alter`` mutant changes: for snapshots, the fields the
    operation writes; for other objects, every required field; for lists, the first element's."""
    ret = spec.operations[op].returns
    schema = _resolve(defs[ret], defs)
    prefix = ""
    item = _item_schema(schema, defs)
    if item is not None:
        schema, prefix = item, "[0]."
    obj = _object_schema(schema, defs)
    if obj is None:
        return []
    is_work = set(obj.get("properties", {})) == set(spec.work_fields)
    if is_work:
        return [prefix + f for f in _event_fields(spec, op)] if not prefix else []
    out = []
    for f in obj.get("required", []):
        sub = _object_schema(obj["properties"][f], defs)
        if sub is not None and set(sub.get("properties", {})) == set(spec.work_fields):
            out += [f"{prefix}{f}.{g}" for g in _event_fields(spec, op)]
        elif sub is not None:
            out += [f"{prefix}{f}.{g}" for g in sub.get("required", [])]
        elif f != "data":
            out.append(prefix + f)
    return out


def _get_path(doc: Mapping[str, Any], path: Iterable[str]) -> Any:
    node: Any = doc
    for p in path:
        if not isinstance(node, Mapping) or p not in node:
            return None
        node = node[p]
    return node
