"""Mutation testing of the reference ledger through the wire: does the harness catch a ledger
that is wrong in one small way, and does it name the right clause?

A *mutant* is the reference served over the JSON-lines protocol (as ``ledgercheck serve
reference`` does) with one rewrite of the messages that cross the pipe: a refusal turned into
a success, a returned field dropped or altered, a timing of the contract it runs under shifted
by one clock quantum, an identifier folded to lower case, a stale lease token swapped for the
live one, a list answer reversed...  The operators are not written per case: :func:`generate`
derives them from the contract (its operations, their arguments and result shapes, the event
data each operation writes, the error codes, the timings and limits), so an operation added to
the contract gets mutants of its own.

*Benign* mutants change nothing the contract or the protocol constrains (key order, unknown
extra fields, error messages, optional fields left out, the order of lists whose order is
free, a few milliseconds of delay): the harness must flag none of them.

Each mutant is judged by running the clause tests against it (:func:`judge`); it is *caught*
when a test fails (a clause violation, or an adapter error such as a malformed result), and
caught *by its own clause* when a failure names one of the clauses the contract ties to the
mutated behaviour (:func:`own_clauses`: the clauses whose statements name the error code, the
field, the argument or the timing the operator changes, and the operation).  The campaign
(:func:`campaign`, ``ledgercheck selfcheck mutate``, ``bench/bench_mutation.py``) first runs
the unmutated reference through an observing proxy (a control: it must pass every test), which
also records which operator sites the suite exercises; a generated mutant whose site never
occurs (``get`` never refused with ``stale_lease``) is reported as not exercised, not run.

See docs/selfcheck.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from ledgercheck.spec import Spec, rules
from ledgercheck.spec.args import arg_problem
from ledgercheck.spec.contract import parse_duration
from ledgercheck.transport.clock import QUANTUM, plain
from ledgercheck.transport.server import Server, _lines
from ledgercheck.transport.wire import RESULT_DOC, dumps, loads, result_types

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
    out += [c for c in extra if c and c not in out]
    return tuple(out)


def _forbidden_blames(spec: Spec, op: str) -> tuple[str, ...]:
    """The clauses the model blames for a forbidden move by ``op`` (its blame table for
    refused transitions, conformance/model.py), over every pair the table forbids."""
    from .model import Model

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
    for terms in (_op_terms(spec, op), nouns):
        found = [cid for cid, text in mine if any(_mentions(text, t) for t in terms)]
        if found:
            return found
    return []


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
    """Whether the contract fixes the order of ``op``'s list answer: its result's description
    or a clause naming the operation speaks of order."""
    doc = RESULT_DOC.get(spec.operations[op].returns, "").lower()
    if any(w in doc for w in ORDER_WORDS):
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


_GENERATED: dict[str, list[Mutant]] = {}


def generate(spec: Spec) -> list[Mutant]:
    """Every mutant the contract gives rise to (unexercised ones included)."""
    got = _GENERATED.get(spec.digest)
    if got is None:
        got = _GENERATED[spec.digest] = _generate(spec)
    return list(got)


def _generate(spec: Spec) -> list[Mutant]:
    out: list[Mutant] = []
    codes = [c for c, definite in spec.errors.items() if definite and c not in NO_REFUSAL]
    ops = [o for o in spec.operations if o not in ("hello", "reset")]
    types = result_types(spec)
    for op in ops:
        for code in codes:
            extra = _forbidden_blames(spec, op) if code == "invalid_transition" else ()
            own = own_clauses(spec, op, [code], extra, refusal=code != "not_found")
            out.append(Mutant("refuse_ok", (op, code), own=own, site=("code", op, code),
                              what=f"{op} answers ok where the reference refused it with {code}"))
            # the code that says what the call names does not exist (an existing item, receipt or
            # message declared missing); for not_found itself, a malformed argument
            other = "not_found" if code != "not_found" else "invalid_argument"
            out.append(Mutant("refuse_swap", (op, code, other), own=own, site=("code", op, code),
                              what=f"{op} refuses with {other} where the reference refused it with {code}"))
    # dropped fields: every required field of every result shape an operation returns
    for name, f, required in _answer_fields(spec, ops, types):
        if required:
            out.append(Mutant("drop_field", (name, f), own=(PROTOCOL_OWNER,), site=("field", name, f),
                              what=f"every {name} answer lacks its required field {f}"))
        else:
            out.append(Mutant("drop_field", (name, f), benign=True, site=("field", name, f),
                              what=f"every {name} answer leaves out its optional field {f}"))
    # altered fields: what each operation writes (event data) and the scalar fields of other answers
    for op in ops:
        writes = _event_clauses(spec, op)
        for path in _alter_paths(spec, op, types):
            leaf = path.split(".")[-1]
            owner = rules.field_owner(spec, leaf)
            extra = ([owner] if owner is not None else []) + (writes if leaf in _event_fields(spec, op) else [])
            if _in_snapshot(spec, op, path, types):
                extra += _status_owner(spec, op) if leaf == "status" else []
            else:
                extra += _record_clauses(spec, op)
            out.append(Mutant("alter", (op, path), own=own_clauses(spec, op, [leaf], extra), site=("value", op, path),
                              what=f"{op}'s answer has {path} changed (type kept)"))
    # lists: reversed, and one element left out
    for op, schema in _list_answers(spec, ops, types):
        if _order_bearing(spec, op):
            out.append(Mutant("reorder", (op,), own=own_clauses(spec, op, list(ORDER_WORDS) + ["seq"]), site=("list2", op),
                              what=f"{op}'s list answer is reversed (the contract fixes its order)"))
        else:
            out.append(Mutant("reorder", (op,), benign=True, site=("list2", op),
                              what=f"{op}'s list answer is reversed (the contract leaves its order free)"))
        item = _object_schema(_item_schema(schema, types) or {}, types)
        records = [] if item is None or set(item.get("properties", {})) == set(spec.work_fields) else _record_clauses(spec, op)
        out.append(Mutant("drop_item", (op,), own=own_clauses(spec, op, [], records), site=("list1", op),
                          what=f"{op}'s list answer lacks its last element"))
    # case folded in identifiers the ledger compares (the clause that takes the model's
    # identity-folding judgement, if the contract has one, owns every such mutant too)
    folding = [c.id for c in spec.clauses if "create.identity_folded" in c.judges]
    for op in ops:
        for name, arg in spec.operations[op].args.items():
            if arg.type in ("string", "nonempty_string") and name not in ("reason", "message", "error", "ref"):
                out.append(Mutant("fold_case", (op, name), own=own_clauses(spec, op, [name], folding), site=("upper", op, name),
                                  what=f"{op}'s {name} is folded to lower case before the ledger sees it"))
    # fences skipped: a stale lease token replaced by the live one, a stale expected_seq by the current one
    for op in ops:
        args = spec.operations[op].args
        if "token" in args:
            out.append(Mutant("skip_fence", (op, "token"), own=own_clauses(spec, op, ["stale_lease"], ["lease.fencing"]),
                              site=("stale", op, "token"), what=f"{op} with a stale lease token is performed with the live one"))
        if "expected_seq" in args:
            out.append(Mutant("skip_fence", (op, "expected_seq"), own=own_clauses(spec, op, ["expected_seq"]),
                              site=("stale", op, "expected_seq"), what=f"{op} with a stale expected_seq is performed at the current one"))
    if "claim" in spec.operations:
        out.append(Mutant("claim_last", (), own=own_clauses(spec, "claim", ["order"]), site=("choice", "claim"),
                          what="a claim of the next item takes the last candidate instead of the first"))
    # the contract the reference runs under, one quantum (or one unit) off
    doc = plain(spec.document)
    for path in _duration_paths(doc):
        subjects = [p for p in path if p not in ("policy", "by_source", "timeouts", "lease", "retry", "waiting", "phases")]
        subjects += ["source"] if "by_source" in path else []
        subjects += ["deadline"] if "timeouts" in path else []
        # a duration the contract sets as a minimum ("for at least the retention window") may be longer
        at_least = any(mentions(c.statement, path[-1]) and "at least" in c.statement.lower() for c in spec.clauses)
        for sign in ("+", "-"):
            benign = at_least and sign == "+"
            out.append(Mutant("timing", (".".join(path), sign), benign=benign, own=() if benign else own_clauses(spec, None, subjects),
                              what=f"the reference runs with {'.'.join(path)} {sign} {QUANTUM:g}s"
                              + (" (the contract sets it as a minimum)" if benign else "")))
    # a per-item override of a timing (an operation's duration argument, the duration fields of a
    # per-item retry policy) one quantum off: the third source of a time rule's instant
    for op in ops:
        for name, arg in spec.operations[op].args.items():
            if arg.type not in ("duration", "retry_policy"):
                continue
            for sign in ("+", "-"):
                out.append(Mutant("arg_instant", (op, name, sign), own=own_clauses(spec, op, [name]), site=("arg", op, name),
                                  what=f"{op}'s {name} (a per-item timing) is taken {sign} {QUANTUM:g}s"))
    # a fence keyed on the owner's name: a stale token passes when the worker it was handed to
    # holds the item again (the same worker re-acquiring)
    for op in ops:
        args = spec.operations[op].args
        if "token" in args and "work_id" in args:
            out.append(Mutant("fence_owner", (op,), own=own_clauses(spec, op, ["stale_lease"], ["lease.fencing"]),
                              site=("stale_same_owner", op), what=f"{op} accepts a stale lease token its owner was given before"))
        if "expected_seq" in args:
            out.append(Mutant("seq_first", (op,), own=own_clauses(spec, op, ["expected_seq"]), site=("stale_first", op),
                              what=f"{op} on an empty stream accepts any expected_seq (the check is off at its first value)"))
    # a replay answered as it was first answered, though its context changed since (the item or
    # its parent finished, cancelled, its lease lost, the ledger reopened): for the operations a
    # clause says are replayed or idempotent
    for op in ops:
        terms = _op_terms(spec, op)
        said = [c for c in spec.clauses if any(mentions(c.statement, t) for t in terms)
                and any(w in c.statement.lower() for w in REPLAY_WORDS)]
        if said:
            out.append(Mutant("replay_stale", (op,), own=own_clauses(spec, op, [], [c.id for c in said]), site=("replay_changed", op),
                              what=f"a replayed {op} is answered as it was first answered, though the answer changed since"))
    # a replay refused: the same call again (its arguments but ``now`` unchanged), which the
    # reference answers, refused with the code the contract gives to a reused idempotency key
    refusal = _replay_refusal(spec)
    for op in ops:
        said = _said(spec, op, REPLAY_WORDS)
        if said:
            out.append(Mutant("replay_refuse", (op, refusal), own=own_clauses(spec, op, [], [c.id for c in said]),
                              site=("replay_same", op), what=f"a replayed {op} is refused with {refusal} instead of answered"))
    # a tree walk that does not descend below a finished node: for the operations a clause says
    # walk an item's tree (a cascade, a count over the tree)
    for op in ops:
        said = _said(spec, op, TREE_WORDS)
        if said:
            out.append(Mutant("tree_finished", (op,), own=own_clauses(spec, op, [], [c.id for c in said]),
                              site=("tree_finished", op),
                              what=f"{op} walks an item's tree without descending below its finished nodes"))
    # an optional argument ignored: left out of the call before the ledger sees it
    for op in ops:
        for name, arg in spec.operations[op].args.items():
            if not arg.required and name not in ("now",):
                # an argument the ledger records: the clause owning that field, and those of the events it writes
                owner = rules.field_owner(spec, name)
                extra = ([owner] if owner is not None else []) + (_event_clauses(spec, op) if name in _event_fields(spec, op) else [])
                out.append(Mutant("drop_option", (op, name), own=own_clauses(spec, op, [name], extra), site=("arg", op, name),
                                  what=f"{op} ignores its optional argument {name}"))
    # one row of a contract table handled like another: the reference runs with the row's
    # entries replaced by the next row's (tables whose rows an operation argument names)
    for path, rows in _row_tables(spec, doc):
        table = _get_path(doc, path)
        for i, row in enumerate(rows):
            other = rows[(i + 1) % len(rows)]
            if _rule_of(table[row]) == _rule_of(table[other]):
                continue  # rows that differ in their prose only
            rule = _rule_of(table[row])
            subjects = [row, other, path[-1], *rule]
            # a row's flag is named inside other words too: "retryable" in retry.non_retryable
            flags = [k for k, v in rule.items() if isinstance(v, bool)]
            extra = [c.id for c in spec.clauses if any(f in (c.statement + " " + c.id).lower() for f in flags)]
            out.append(Mutant("row_swap", (".".join(path), row, other), own=own_clauses(spec, None, subjects, extra),
                              what=f"the reference handles the {row} row of {'.'.join(path)} like the {other} row"))
    for path in LIMIT_PATHS:
        if _get_path(doc, path) is None:
            continue
        for sign in ("+", "-"):
            out.append(Mutant("limit", (".".join(path), sign), own=own_clauses(spec, None, [path[-1]]),
                              what=f"the reference runs with {'.'.join(path)} {sign} 1"))
    return out + _benign_rewrites()


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


def parse_mutant(spec: Spec, name: str) -> Mutant:
    """The generated mutant called ``name`` (or a ``ValueError`` naming the known families)."""
    if name == "none" or name.startswith("observe"):
        return Mutant(name, ())
    # the benign ones without generating the rest (a mutant server parses its name at each start)
    found = next((m for m in _benign_rewrites() if m.name == name), None) \
        or next((m for m in generate(spec) if m.name == name), None)
    if found is not None:
        return found
    families = sorted({m.family for m in generate(spec)} | {"none", "observe"})
    raise ValueError(f"unknown mutant {name!r} (families: {', '.join(families)}; `ledgercheck selfcheck list` names them all)")


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


# ---------------------------------------------------------------------------------------------
# Judging a mutant with the clause tests


@dataclass
class Catch:
    test: str  # the clause test (case name) that failed
    clauses: list[str]  # the clauses its failure named (or "adapter:<code>", "harness:<error>")
    message: str


@dataclass
class Verdict:
    mutant: str
    family: str
    benign: bool
    own: list[str]
    what: str
    fired: bool = False
    caught: bool = False
    own_caught: bool = False
    catches: list[Catch] = field(default_factory=list)
    tests_run: int = 0
    seconds: float = 0.0
    exercised: bool = True  # False: the suite never reaches the mutant's site (not run)
    klass: str = ""  # the class of bug (Mutant.klass): rates are reported per class too

    @property
    def first_clauses(self) -> list[str]:
        return self.catches[0].clauses if self.catches else []


def _cases(spec: Spec) -> list[Any]:
    from .clauses import all_cases

    return list(all_cases(spec, chaos=False))


def _is_slow(case: Any) -> bool:
    return getattr(case.fn, "__module__", "").endswith(".concurrency")


def _near_profiles(spec: Spec, mutant: Mutant) -> set[str]:
    """The profiles of the operations a mutant touches (for a dropped field, those returning
    its shape): their tests run right after the own clauses' (only the order, for speed)."""
    ops = [p for p in mutant.params[:1] if p in spec.operations]
    if mutant.family == "drop_field":
        defs = result_types(spec)
        ops = [o for o, op in spec.operations.items() if o not in ("hello", "reset")
               and any(name == mutant.params[0] for name, _ in _shapes_within(defs[op.returns], defs, op.returns))]
    return {spec.operations[o].profile or "core" for o in ops}


def run_case(h: Any, case: Any) -> Catch | None:
    """Run one clause test as the plugin does; the failure it ended in, if any."""
    from .clauses import NoCheck
    from .harness import AdapterFailure, ClauseFailure, DriveBlocked, NotApplicable, NotOffered
    from .plugin import SIDE_FINDING_CLAUSES

    try:
        h.start_case(case.clause)
        case.fn(h)
    except ClauseFailure as exc:
        return Catch(case.name, exc.clauses, str(exc).splitlines()[-1][:300])
    except AdapterFailure as exc:
        code = exc.outcome.code
        return Catch(case.name, [PROTOCOL_OWNER if code == "protocol_error" else f"adapter:{code}"], str(exc)[:300])
    except DriveBlocked as exc:
        if not h.last_claim_fallback:
            return Catch(case.name, ["harness:drive_blocked"], str(exc)[:300])
    except (NotApplicable, NotOffered, NoCheck):
        pass
    except Exception as exc:  # noqa: BLE001 - a harness crash on a mutated answer is a finding too
        return Catch(case.name, [f"harness:{type(exc).__name__}"], str(exc)[:300])
    finally:
        side = [v for v in h.tolerated if v.clause in SIDE_FINDING_CLAUSES]
        h.tolerated = []
    if side:
        return Catch(case.name, sorted({v.clause for v in side}), str(side[0])[:300])
    return None


def run_stateful(client: Any, spec: Spec, family: str, seed: int = 1) -> Catch | None:
    """One stateful machine family (the ``ci`` budget, a fixed seed, no shrinking) as the
    plugin runs it; the failure it ended in, if any."""
    from hypothesis import Phase

    from .harness import AdapterFailure, ClauseFailure, Harness, find_exception
    from .stateful import hypothesis_settings, machine_profiles, make_machine, run_machine

    profiles = machine_profiles(client.profiles, family)
    if not profiles:
        return None
    h = Harness(client, spec, profiles, seed=seed)
    h.note_unoffered = True
    machine = make_machine(h, only=family)
    opts = hypothesis_settings("ci", phases=(Phase.explicit, Phase.generate))
    try:
        run_machine(machine, opts, seed)
    except BaseException as exc:  # noqa: BLE001 - hypothesis wraps failures
        if isinstance(exc, KeyboardInterrupt):
            raise
        found = find_exception(exc, ClauseFailure)
        if found is not None:
            return Catch(f"stateful::{family}", found.clauses, str(found).splitlines()[-1][:300])
        failure = find_exception(exc, AdapterFailure)
        if failure is not None:
            code = failure.outcome.code
            return Catch(f"stateful::{family}", [PROTOCOL_OWNER if code == "protocol_error" else f"adapter:{code}"], str(failure)[:300])
        return Catch(f"stateful::{family}", [f"harness:{type(exc).__name__}"], str(exc)[:300])
    return None


def judge(spec: Spec, mutant: Mutant, *, exhaustive: bool = False, only: Callable[[Any], bool] | None = None,
          timeout: float = 10.0, stateful: bool = True) -> Verdict:
    """Run the clause tests against ``mutant``: its own clauses' tests first; then, unless one
    of them already named an own clause, the others until one fails (all of them when
    ``exhaustive`` or when the mutant is benign, which must pass every test).  When no clause
    test noticed a non-benign mutant, and for ``benign:all``, the stateful machines run too
    (``stateful``; they judge each answer before any read-back, with no clause in focus)."""
    from ledgercheck.transport.client import connect

    from .harness import Harness

    v = Verdict(mutant.name, mutant.family, mutant.benign, list(mutant.own), mutant.what, klass=mutant.klass)
    cases = [c for c in _cases(spec) if only is None or only(c)]
    own = set(mutant.own)
    near = _near_profiles(spec, mutant)
    profile_of = {c.id: c.profile for c in spec.clauses}
    rest = [c for c in cases if c.clause not in own]
    ordered = [c for c in cases if c.clause in own] + [c for c in rest if profile_of[c.clause] in near and not _is_slow(c)] \
        + [c for c in rest if profile_of[c.clause] not in near and not _is_slow(c)] + [c for c in rest if _is_slow(c)]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ledgercheck-mutant-") as tmp:
        log = os.path.join(tmp, "fired.log")
        client = connect(address(mutant.name, log), spec, timeout=timeout)
        try:
            h = Harness(client, spec, client.profiles)
            n_own = sum(1 for c in ordered if c.clause in own)
            for i, case in enumerate(ordered):
                got = run_case(h, case)
                v.tests_run += 1
                if got is not None:
                    v.catches.append(got)
                    v.caught = True
                    v.own_caught = v.own_caught or bool(own & set(got.clauses))
                if exhaustive or mutant.benign:
                    continue
                if v.own_caught or (v.caught and i >= n_own - 1):
                    break
            if stateful and only is None and (mutant.name == "benign:all" or (not v.caught and not mutant.benign)):
                from .stateful import FAMILIES

                for family in FAMILIES:
                    got = run_stateful(client, spec, family)
                    v.tests_run += 1
                    if got is not None:
                        v.catches.append(got)
                        v.caught = True
                        v.own_caught = v.own_caught or bool(own & set(got.clauses))
                        if not mutant.benign:
                            break
        finally:
            client.close()
        v.fired = os.path.exists(log) and "fired" in Path(log).read_text().split()
    v.seconds = round(time.monotonic() - t0, 2)
    return v


def observe(spec: Spec, timeout: float = 10.0) -> tuple[set[tuple[str, ...]], list[Catch]]:
    """The control: every clause test through the observing proxy (it must pass them all);
    the sites the suite exercised."""
    from ledgercheck.transport.client import connect

    from .harness import Harness

    with tempfile.TemporaryDirectory(prefix="ledgercheck-observe-") as tmp:
        log = os.path.join(tmp, "sites.log")
        client = connect(address("observe", log), spec, timeout=timeout)
        flagged = []
        try:
            h = Harness(client, spec, client.profiles)
            for case in _cases(spec):
                got = run_case(h, case)
                if got is not None:
                    flagged.append(got)
        finally:
            client.close()
        sites = {tuple(json.loads(line)) for line in Path(log).read_text().splitlines() if line.startswith("[")} \
            if os.path.exists(log) else set()
    return sites, flagged


# ---------------------------------------------------------------------------------------------
# The campaign


@dataclass
class Figures:
    generated: int
    exercised: int
    non_benign: int
    caught: int
    own_caught: int
    benign: int
    benign_flagged: int
    not_fired: int
    control_flagged: int
    seconds: float
    per_class: dict[str, dict[str, int]] = field(default_factory=dict)  # class_figures(rows)

    @property
    def caught_fraction(self) -> float:
        return self.caught / self.non_benign if self.non_benign else 1.0

    @property
    def own_fraction(self) -> float:
        return self.own_caught / self.caught if self.caught else 1.0


FLOOR_CAUGHT = 0.95
FLOOR_OWN = 0.90


def _judge_job(job: tuple[str, bool, float]) -> dict[str, Any]:
    from ledgercheck.spec import default_spec

    name, exhaustive, timeout = job
    spec = default_spec()
    return asdict(judge(spec, parse_mutant(spec, name), exhaustive=exhaustive, timeout=timeout))


def campaign(spec: Spec, *, names: list[str] | None = None, jobs: int = 1, exhaustive: bool = False,
             timeout: float = 10.0, progress: Callable[[str], None] | None = None,
             keep: Mapping[str, dict[str, Any]] | None = None) -> tuple[Figures, list[dict[str, Any]]]:
    """Observe, then judge every exercised mutant (or those named), ``jobs`` at a time.

    ``keep`` (rows of an earlier campaign, by mutant name; ``--resume``) spares judging again a
    mutant that was caught by one of its own clauses, with the same own clauses, by a clause
    test: nothing later in a judgement can change that verdict.  Every other mutant is judged."""
    t0 = time.monotonic()
    say = progress or (lambda s: None)
    every = generate(spec)
    chosen = every if names is None else [m for m in every if m.name in set(names)]
    if names is not None:
        missing = sorted(set(names) - {m.name for m in chosen})
        if missing:
            raise ValueError(f"unknown mutant(s): {', '.join(missing)}")
    say(f"control: the clause tests through the observing proxy ({len(chosen)} mutants generated)")
    sites, control = observe(spec, timeout)
    rows: list[dict[str, Any]] = []
    todo = []
    kept = 0
    for m in chosen:
        old = (keep or {}).get(m.name)
        if m.site is not None and tuple(m.site) not in sites:
            rows.append(asdict(Verdict(m.name, m.family, m.benign, list(m.own), m.what, exercised=False, klass=m.klass)))
        elif old is not None and not m.benign and old.get("own_caught") and old.get("own") == list(m.own) \
                and old.get("fired") and not any(c["test"].startswith("stateful::") for c in old.get("catches", [])):
            rows.append({**old, "klass": m.klass, "resumed": True})
            kept += 1
        else:
            todo.append(m.name)
    if keep is not None:
        say(f"resume: {kept} verdicts (caught by an own clause) kept from the earlier campaign")
    exercised = sum(1 for m in chosen if m.site is None or tuple(m.site) in sites)
    say(f"control: {len(control)} test(s) flagged; {exercised} of {len(chosen)} mutants exercised; "
        f"judging {len(todo)} with {jobs} job(s)")
    results: list[dict[str, Any]] = []
    work = [(n, exhaustive, timeout) for n in todo]
    if jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for i, r in enumerate(pool.map(_judge_job, work), 1):
                results.append(r)
                say(_progress_line(i, len(work), r))
    else:
        for i, job in enumerate(work, 1):
            r = _judge_job(job)
            results.append(r)
            say(_progress_line(i, len(work), r))
    rows += results
    order = {m.name: i for i, m in enumerate(every)}
    rows.sort(key=lambda r: order.get(r["mutant"], 0))
    judged = [r for r in rows if r["exercised"] and r["fired"]]
    bad = [r for r in judged if not r["benign"]]
    good = [r for r in judged if r["benign"]]
    figs = Figures(generated=len(chosen), exercised=len([r for r in rows if r["exercised"]]), non_benign=len(bad),
                   caught=sum(r["caught"] for r in bad), own_caught=sum(r["own_caught"] for r in bad if r["caught"]),
                   benign=len(good), benign_flagged=sum(r["caught"] for r in good),
                   not_fired=len([r for r in rows if r["exercised"] and not r["fired"]]), control_flagged=len(control),
                   seconds=round(time.monotonic() - t0, 1), per_class=class_figures(rows))
    return figs, rows


def class_figures(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Per class of bug (Mutant.klass), the counts the overall figures are made of: generated,
    exercised, did not fire, non-benign judged, caught, caught by an own clause, benign judged and
    benign flagged (a row of an older campaign without a class gets its family's)."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        k = r.get("klass") or ("benign" if r["benign"] else CLASS_OF.get(r["family"], r["family"]))
        c = out.setdefault(k, dict.fromkeys(("generated", "exercised", "not_fired", "non_benign", "caught", "own_caught",
                                             "benign", "benign_flagged"), 0))
        c["generated"] += 1
        if not r["exercised"]:
            continue
        c["exercised"] += 1
        if not r["fired"]:
            c["not_fired"] += 1
        elif r["benign"]:
            c["benign"] += 1
            c["benign_flagged"] += int(bool(r["caught"]))
        else:
            c["non_benign"] += 1
            c["caught"] += int(bool(r["caught"]))
            c["own_caught"] += int(bool(r["caught"] and r["own_caught"]))
    return dict(sorted(out.items()))


def class_floors_missed(f: Figures) -> list[str]:
    """The classes whose rates are below the floors (a class with nothing judged misses none)."""
    bad = []
    for k, c in f.per_class.items():
        if c["non_benign"] and c["caught"] / c["non_benign"] < FLOOR_CAUGHT:
            bad.append(k)
        elif c["caught"] and c["own_caught"] / c["caught"] < FLOOR_OWN:
            bad.append(k)
        elif c["benign_flagged"]:
            bad.append(k)
    return bad


def class_lines(f: Figures) -> list[str]:
    """One line per class: ``fence  caught 16/17 (94.1%)  own 15/16 (93.8%)  benign flagged 0/0 ...``."""
    out = []
    for k, c in f.per_class.items():
        caught = f"{c['caught']}/{c['non_benign']}" + (f" ({c['caught'] / c['non_benign']:.1%})" if c["non_benign"] else "")
        own = f"{c['own_caught']}/{c['caught']}" + (f" ({c['own_caught'] / c['caught']:.1%})" if c["caught"] else "")
        out.append(f"  {k:8} caught {caught:16} own clause {own:16} benign flagged {c['benign_flagged']}/{c['benign']}  "
                   f"({c['generated']} generated, {c['exercised']} exercised, {c['not_fired']} did not fire)")
    return out


def _progress_line(i: int, n: int, r: Mapping[str, Any]) -> str:
    if not r["fired"]:
        state = "did not fire"
    elif r["benign"]:
        state = "FLAGGED" if r["caught"] else "not flagged"
    else:
        state = ("caught by own clause" if r["own_caught"] else "caught, not by its own clause") if r["caught"] else "SURVIVED"
    first = r["catches"][0]["clauses"] if r["catches"] else []
    return f"[{i}/{n}] {r['mutant']}: {state} {', '.join(first)} ({r['seconds']}s)"


def figures_text(f: Figures) -> str:
    return (f"mutants: {f.generated} generated, {f.exercised} exercised by the suite, {f.not_fired} did not fire\n"
            f"caught: {f.caught}/{f.non_benign} non-benign ({f.caught_fraction:.1%}; floor {FLOOR_CAUGHT:.0%})\n"
            f"own clause: {f.own_caught}/{f.caught} of those caught ({f.own_fraction:.1%}; floor {FLOOR_OWN:.0%})\n"
            f"benign flagged: {f.benign_flagged}/{f.benign} (floor 0); control flagged: {f.control_flagged}\n"
            f"time: {f.seconds}s"
            + ("\nper class:\n" + "\n".join(class_lines(f)) if f.per_class else ""))


def floors_hold(f: Figures) -> bool:
    return (f.caught_fraction >= FLOOR_CAUGHT and f.own_fraction >= FLOOR_OWN and f.benign_flagged == 0
            and f.control_flagged == 0 and not class_floors_missed(f))


def markdown(f: Figures, rows: list[dict[str, Any]]) -> str:
    lines = ["# Mutation self-check", "", "```text", figures_text(f), "```", "",
             "| class | generated | exercised | caught | own clause | benign flagged |", "|---|--:|--:|--:|--:|--:|"]
    for k, c in f.per_class.items():
        lines.append(f"| {k} | {c['generated']} | {c['exercised']} | {c['caught']}/{c['non_benign']} | {c['own_caught']}/{c['caught']} | "
                     f"{c['benign_flagged']}/{c['benign']} |")
    lines += ["", "| mutant | class | benign | verdict | first failure names | own clauses | what |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r["exercised"]:
            verdict = "not exercised"
        elif not r["fired"]:
            verdict = "did not fire"
        elif r["benign"]:
            verdict = "**flagged**" if r["caught"] else "not flagged"
        else:
            verdict = ("own clause" if r["own_caught"] else "caught (other clause)") if r["caught"] else "**survived**"
        first = ", ".join(r["catches"][0]["clauses"]) if r["catches"] else ""
        klass = r.get("klass") or ("benign" if r["benign"] else CLASS_OF.get(r["family"], r["family"]))
        lines.append(f"| `{r['mutant']}` | {klass} | {'yes' if r['benign'] else ''} | {verdict} | {first} | "
                     f"{', '.join(r['own'])} | {r['what']} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Command line


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("selfcheck", help="mutation testing of the reference through the wire: does the harness catch it?")
    ps = p.add_subparsers(dest="selfcheck_command", required=True, metavar="WHAT")
    s = ps.add_parser("serve", help="serve the reference over the wire protocol with one mutant's rewrites")
    s.add_argument("--mutant", required=True, help="a mutant name (`ledgercheck selfcheck list`), none or observe")
    s.add_argument("--target", default="reference", help="an in-process adapter address (default: reference)")
    s.add_argument("--log", default=None, help="append a line here when the mutant first fires (observe: every site)")
    s.set_defaults(func=cmd_serve)
    ls = ps.add_parser("list", help="list the mutants the contract gives rise to")
    ls.set_defaults(func=cmd_list)
    m = ps.add_parser("mutate", help="judge mutants with the clause tests; print the figures (exit 1 below the floors)")
    m.add_argument("--mutant", action="append", default=None, help="judge only this mutant (repeatable)")
    m.add_argument("--jobs", type=int, default=1, help="mutants judged at once (processes)")
    m.add_argument("--exhaustive", action="store_true", help="run every clause test on every mutant (slow)")
    m.add_argument("--json", default=None, help="write the per-mutant table as JSON here")
    m.add_argument("--markdown", default=None, help="write the figures and the per-mutant table as Markdown here")
    m.add_argument("--resume", default=None, metavar="JSON",
                   help="keep the verdicts of mutants an earlier campaign (its --json) saw caught by an own clause")
    m.add_argument("--quiet", action="store_true", help="no progress lines")
    m.set_defaults(func=cmd_mutate)


def load_rows(path: str) -> dict[str, dict[str, Any]]:
    """The per-mutant rows of an earlier campaign's JSON, by mutant name (ValueError naming the
    file when it is not one)."""
    from ledgercheck.bounded import InputError, Limits, load_limited

    try:
        doc = load_limited(path, Limits("mutation campaign file", 64 << 20))
    except InputError as exc:
        raise ValueError(str(exc)) from None
    rows = doc.get("mutants") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and isinstance(r.get("mutant"), str) for r in rows):
        raise ValueError(f"{path}: not the JSON of `ledgercheck selfcheck mutate --json` (no list of mutants)")
    return {r["mutant"]: r for r in rows}


def cmd_serve(args: argparse.Namespace) -> int:
    from ledgercheck.spec import default_spec
    from ledgercheck.transport.client import AdapterError, load_inprocess, parse_address

    spec = default_spec()
    try:
        mutant = parse_mutant(spec, args.mutant)
    except ValueError as exc:
        print(f"ledgercheck selfcheck serve: {exc}", file=sys.stderr)
        return 2
    kind, target = parse_address(args.target)
    if kind == "exec":
        print("ledgercheck selfcheck serve: the target must be an in-process adapter (reference, python:MODULE:FACTORY)",
              file=sys.stderr)
        return 2
    try:
        adapter = load_inprocess(kind, target)
    except AdapterError as exc:
        print(f"ledgercheck selfcheck serve: {exc}", file=sys.stderr)
        return 2
    return serve_mutant(adapter, spec, mutant, sys.stdin.buffer, sys.stdout.buffer, args.log)


def cmd_list(args: argparse.Namespace) -> int:
    from ledgercheck.spec import default_spec

    for m in generate(default_spec()):
        print(f"{m.name}\t{'benign' if m.benign else 'own: ' + ','.join(m.own)}\t{m.what}\tclass: {m.klass}")
    return 0


def cmd_mutate(args: argparse.Namespace) -> int:
    from ledgercheck.spec import default_spec

    if args.jobs < 1:
        print("ledgercheck selfcheck mutate: --jobs must be 1 or more", file=sys.stderr)
        return 2
    spec = default_spec()
    say = None if args.quiet else (lambda s: print(s, flush=True))
    keep = None
    if args.resume:
        try:
            keep = load_rows(args.resume)
        except ValueError as exc:
            print(f"ledgercheck selfcheck mutate: {exc}", file=sys.stderr)
            return 2
    try:
        figs, rows = campaign(spec, names=args.mutant, jobs=args.jobs, exhaustive=args.exhaustive, progress=say, keep=keep)
    except ValueError as exc:
        print(f"ledgercheck selfcheck mutate: {exc}", file=sys.stderr)
        return 2
    try:
        if args.json:
            Path(args.json).write_text(json.dumps({"figures": asdict(figs), "mutants": rows}, indent=1) + "\n")
        if args.markdown:
            Path(args.markdown).write_text(markdown(figs, rows))
    except OSError as exc:
        print(f"ledgercheck selfcheck mutate: cannot write: {exc}", file=sys.stderr)
        return 2
    print(figures_text(figs))
    return 0 if floors_hold(figs) else 1
