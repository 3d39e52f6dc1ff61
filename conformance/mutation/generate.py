"""Generating the mutants from the contract (:func:`generate`): one function per family of
operators, called in a fixed order, so that a contract gives the same mutants in the same order."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ledgercheck.spec import Spec, rules
from ledgercheck.transport.clock import QUANTUM, plain
from ledgercheck.transport.wire import result_types

from .mutants import (
    LIMIT_PATHS,
    NO_REFUSAL,
    ORDER_WORDS,
    PROTOCOL_OWNER,
    REPLAY_WORDS,
    TREE_WORDS,
    Mutant,
    _alter_paths,
    _answer_fields,
    _benign_rewrites,
    _duration_paths,
    _event_clauses,
    _event_fields,
    _forbidden_blames,
    _get_path,
    _in_snapshot,
    _item_schema,
    _list_answers,
    _object_schema,
    _op_terms,
    _order_bearing,
    _record_clauses,
    _replay_refusal,
    _row_tables,
    _rule_of,
    _said,
    _status_owner,
    mentions,
    own_clauses,
    unrecorded_option,
)

_GENERATED: dict[str, list[Mutant]] = {}


def generate(spec: Spec) -> list[Mutant]:
    """Every mutant the contract gives rise to (unexercised ones included)."""
    got = _GENERATED.get(spec.digest)
    if got is None:
        got = _GENERATED[spec.digest] = _generate(spec)
    return list(got)


@dataclass(frozen=True)
class _Contract:
    """What every family's generator reads: the contract, its operations (the handshake and
    reset aside), its result shapes, its definite refusals and its document."""

    spec: Spec
    ops: list[str]
    types: dict[str, Any]
    codes: list[str]
    doc: Any


def _generate(spec: Spec) -> list[Mutant]:
    c = _Contract(spec, [o for o in spec.operations if o not in ("hello", "reset")], result_types(spec),
                  [code for code, definite in spec.errors.items() if definite and code not in NO_REFUSAL],
                  plain(spec.document))
    out: list[Mutant] = []
    for family in FAMILY_ORDER:
        out += family(c)
    return out + _benign_rewrites()


def _refusals(c: _Contract) -> list[Mutant]:
    """a refusal answered ok, or refused with another code: every definite code of every operation"""
    spec, ops, codes = c.spec, c.ops, c.codes
    out: list[Mutant] = []
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
    return out


def _dropped_fields(c: _Contract) -> list[Mutant]:
    """dropped fields: every required field of every result shape an operation returns"""
    spec, ops, types = c.spec, c.ops, c.types
    out: list[Mutant] = []
    for name, f, required in _answer_fields(spec, ops, types):
        if required:
            out.append(Mutant("drop_field", (name, f), own=(PROTOCOL_OWNER,), site=("field", name, f),
                              what=f"every {name} answer lacks its required field {f}"))
        else:
            out.append(Mutant("drop_field", (name, f), benign=True, site=("field", name, f),
                              what=f"every {name} answer leaves out its optional field {f}"))
    return out


def _altered_fields(c: _Contract) -> list[Mutant]:
    """altered fields: what each operation writes (event data) and the scalar fields of other answers"""
    spec, ops, types = c.spec, c.ops, c.types
    out: list[Mutant] = []
    for op in ops:
        writes = _event_clauses(spec, op)
        for path in _alter_paths(spec, op, types):
            leaf = path.split(".")[-1]
            owner = rules.field_owner(spec, leaf)
            extra = ([owner] if owner is not None else []) + (writes if leaf in _event_fields(spec, op) else [])
            if _in_snapshot(spec, op, path, types):
                extra += _status_owner(spec, op) if leaf == "status" else []
                # the clause the contract says owns what the operation answers (its `blame`)
                extra += [spec.operations[op].blame] if spec.operations[op].blame else []
            else:
                extra += _record_clauses(spec, op)
            out.append(Mutant("alter", (op, path), own=own_clauses(spec, op, [leaf], extra), site=("value", op, path),
                              what=f"{op}'s answer has {path} changed (type kept)"))
    return out


def _lists(c: _Contract) -> list[Mutant]:
    """lists: reversed, and one element left out"""
    spec, ops, types = c.spec, c.ops, c.types
    out: list[Mutant] = []
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
    return out


def _folded_case(c: _Contract) -> list[Mutant]:
    """case folded in identifiers the ledger compares (the clause that takes the model's
    identity-folding judgement, if the contract has one, owns every such mutant too)"""
    spec, ops = c.spec, c.ops
    out: list[Mutant] = []
    folding = [c.id for c in spec.clauses if "create.identity_folded" in c.judges]
    for op in ops:
        for name, arg in spec.operations[op].args.items():
            if arg.type in ("string", "nonempty_string") and name not in ("reason", "message", "error", "ref"):
                out.append(Mutant("fold_case", (op, name), own=own_clauses(spec, op, [name], folding), site=("upper", op, name),
                                  what=f"{op}'s {name} is folded to lower case before the ledger sees it"))
    return out


def _skipped_fences(c: _Contract) -> list[Mutant]:
    """fences skipped: a stale lease token replaced by the live one, a stale expected_seq by the
    current one"""
    spec, ops = c.spec, c.ops
    out: list[Mutant] = []
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
    return out


def _timings(c: _Contract) -> list[Mutant]:
    """the contract the reference runs under, one quantum (or one unit) off"""
    spec, doc = c.spec, c.doc
    out: list[Mutant] = []
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
    return out


def _arg_instants(c: _Contract) -> list[Mutant]:
    """a per-item override of a timing (an operation's duration argument, the duration fields of a
    per-item retry policy) one quantum off: the third source of a time rule's instant"""
    spec, ops = c.spec, c.ops
    out: list[Mutant] = []
    for op in ops:
        for name, arg in spec.operations[op].args.items():
            if arg.type not in ("duration", "retry_policy"):
                continue
            for sign in ("+", "-"):
                out.append(Mutant("arg_instant", (op, name, sign), own=own_clauses(spec, op, [name]), site=("arg", op, name),
                                  what=f"{op}'s {name} (a per-item timing) is taken {sign} {QUANTUM:g}s"))
    return out


def _owner_fences(c: _Contract) -> list[Mutant]:
    """a fence keyed on the owner's name: a stale token passes when the worker it was handed to holds
    the item again (the same worker re-acquiring)"""
    spec, ops = c.spec, c.ops
    out: list[Mutant] = []
    for op in ops:
        args = spec.operations[op].args
        if "token" in args and "work_id" in args:
            out.append(Mutant("fence_owner", (op,), own=own_clauses(spec, op, ["stale_lease"], ["lease.fencing"]),
                              site=("stale_same_owner", op), what=f"{op} accepts a stale lease token its owner was given before"))
        if "expected_seq" in args:
            out.append(Mutant("seq_first", (op,), own=own_clauses(spec, op, ["expected_seq"]), site=("stale_first", op),
                              what=f"{op} on an empty stream accepts any expected_seq (the check is off at its first value)"))
    return out


def _stale_replays(c: _Contract) -> list[Mutant]:
    """a replay answered as it was first answered, though its context changed since (the item or its
    parent finished, cancelled, its lease lost, the ledger reopened): for the operations a clause says
    are replayed or idempotent"""
    spec, ops = c.spec, c.ops
    out: list[Mutant] = []
    for op in ops:
        terms = _op_terms(spec, op)
        said = [c for c in spec.clauses if any(mentions(c.statement, t) for t in terms)
                and any(w in c.statement.lower() for w in REPLAY_WORDS)]
        if said:
            extra = list(dict.fromkeys([c.id for c in said] + _moved_field_owners(spec, op)))
            out.append(Mutant("replay_stale", (op,), own=own_clauses(spec, op, [], extra), site=("replay_changed", op),
                              what=f"a replayed {op} is answered as it was first answered, though the answer changed since"))
    return out


def _moved_field_owners(spec: Spec, op: str) -> list[str]:
    """For an operation that lists a transition (``requeue``): the clauses owning a snapshot field
    whose statement names the operation.  Its repeated call is a new move, answered with the record
    after it; the first call's answer handed back misreports what the moves between changed, and
    the owner of such a field that speaks of the operation says so ("lease_version never decreases
    ... across resumes and requeues": lease.version.monotonic)."""
    if not _status_owner(spec, op):
        return []
    owners = {f.blame for f in spec.work_fields.values() if f.blame}
    return [c.id for c in spec.clauses if c.id in owners and any(mentions(c.statement, t) for t in _op_terms(spec, op))]


def _refused_replays(c: _Contract) -> list[Mutant]:
    """a replay refused: the same call again (its arguments but ``now`` unchanged), which the reference
    answers, refused with the code the contract gives to a reused idempotency key.  Its own clauses:
    those saying the operation is replayed or done again, and, for an operation that lists a
    transition, the clause saying every transition of the table is accepted through the operations
    that list it (the repeated call the reference answers moves an item: a second claim takes the
    next item; refusing it refuses an allowed move, whatever a replay clause says)"""
    spec, ops = c.spec, c.ops
    out: list[Mutant] = []
    refusal = _replay_refusal(spec)
    for op in ops:
        said = _said(spec, op, REPLAY_WORDS)
        if said:
            extra = [c.id for c in said] + _status_owner(spec, op)
            out.append(Mutant("replay_refuse", (op, refusal), own=own_clauses(spec, op, [], extra),
                              site=("replay_same", op), what=f"a replayed {op} is refused with {refusal} instead of answered"))
    return out


def _tree_walks(c: _Contract) -> list[Mutant]:
    """a tree walk that does not descend below a finished node: for the operations a clause says walk
    an item's tree (a cascade, a count over the tree)"""
    spec, ops = c.spec, c.ops
    out: list[Mutant] = []
    for op in ops:
        said = _said(spec, op, TREE_WORDS)
        if said:
            out.append(Mutant("tree_finished", (op,), own=own_clauses(spec, op, [], [c.id for c in said]),
                              site=("tree_finished", op),
                              what=f"{op} walks an item's tree without descending below its finished nodes"))
    return out


def _ignored_options(c: _Contract) -> list[Mutant]:
    """an optional argument ignored: left out of the call before the ledger sees it"""
    spec, ops = c.spec, c.ops
    out: list[Mutant] = []
    for op in ops:
        for name, arg in spec.operations[op].args.items():
            if not arg.required and name not in ("now",):
                why = unrecorded_option(spec, op, name, c.types)
                if why is not None:  # equivalent: no answer the contract judges depends on it
                    out.append(Mutant("drop_option", (op, name), benign=True, site=("arg", op, name),
                                      what=f"{op} ignores its optional argument {name} ({why})"))
                    continue
                # an argument the ledger records: the clause owning that field, and those of the events it writes
                owner = rules.field_owner(spec, name)
                extra = ([owner] if owner is not None else []) + (_event_clauses(spec, op) if name in _event_fields(spec, op) else [])
                if name == "work_id":  # the item an operation that lists a transition is asked to move (claim's):
                    extra += _status_owner(spec, op)  # ignored, the asked transition is not performed
                if spec.operations[op].kind == "read":  # a read's filter: the clause the model judges the read by
                    extra += _read_clause(spec, op)
                elif _stored_in_record(spec, op, name, c.types):  # kept in a record answers hand back (a log
                    extra += _record_clauses(spec, op)  # entry's payload): the clauses saying what it stores, as for alter
                out.append(Mutant("drop_option", (op, name), own=own_clauses(spec, op, [name], extra), site=("arg", op, name),
                                  what=f"{op} ignores its optional argument {name}"))
    return out


def _rows_and_limits(c: _Contract) -> list[Mutant]:
    """one row of a contract table handled like another: the reference runs with the row's entries
    replaced by the next row's (tables whose rows an operation argument names); a limit one more or
    one less.  A change the contract's own checks refuse is not generated: no ledger runs under it"""
    spec, doc = c.spec, c.doc
    out: list[Mutant] = []
    for path, rows in _row_tables(spec, doc):
        table = _get_path(doc, path)
        for i, row in enumerate(rows):
            other = rows[(i + 1) % len(rows)]
            if _rule_of(table[row]) == _rule_of(table[other]):
                continue  # rows that differ in their prose only
            if _refused_swap(doc, path, row, other):
                continue  # a contract the contract's own checks refuse: no ledger runs under it (the reset is refused)
            rule = _rule_of(table[row])
            judges = _chaos_judged(spec, path, rule, _rule_of(table[other]))
            if judges:  # only what the crash windows judge changes: no answer of a ledger does
                out.append(Mutant("row_swap", (".".join(path), row, other), benign=True,
                                  what=f"the reference handles the {row} row of {'.'.join(path)} like the {other} row "
                                       f"(the entries that differ are judged by chaos only: {', '.join(judges)})"))
                continue
            subjects = [row, other, path[-1], *rule]
            # a row's flag is named inside other words too: "retryable" in retry.non_retryable
            flags = [k for k, v in rule.items() if isinstance(v, bool)]
            extra = [c.id for c in spec.clauses if any(f in (c.statement + " " + c.id).lower() for f in flags)]
            out.append(Mutant("row_swap", (".".join(path), row, other), own=own_clauses(spec, None, subjects, extra),
                              what=f"the reference handles the {row} row of {'.'.join(path)} like the {other} row"))
    for path in LIMIT_PATHS:
        if _get_path(doc, path) is None:
            continue
        own = own_clauses(spec, None, [path[-1]]) or _batch_clauses(spec, path)
        # a limit the contract sets as a maximum ("at most the requested number") may be smaller
        at_most = [c for c in spec.clauses if c.id in own and "at most" in c.statement.lower()]
        for sign in ("+", "-"):
            if _refused(doc, path, _get_path(doc, path) + (1 if sign == "+" else -1)):
                continue  # a value the contract's checks refuse (first_seq 0)
            benign = bool(at_most) and sign == "-"
            # one less ends the count while the contract says it still remains: that clause too
            mine = own + tuple(c for c in _below_limit_clauses(spec, path) if c not in own) if sign == "-" else own
            out.append(Mutant("limit", (".".join(path), sign), benign=benign, own=() if benign else mine,
                              what=f"the reference runs with {'.'.join(path)} {sign} 1"
                              + (f" (the contract sets it as a maximum: {at_most[0].id})" if benign else "")))
    return out


def _changed_columns(a: Any, b: Any, key: str = "") -> set[str]:
    """The names of the leaf entries (columns) in which two rows of a table differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return {c for k in set(a) | set(b) for c in _changed_columns(a.get(k), b.get(k), str(k))}
    return set() if a == b else {key}


def _chaos_judged(spec: Spec, path: tuple[str, ...], row: Any, other: Any) -> list[str]:
    """When every column in which ``row`` and ``other`` differ is spoken of only by clauses the
    chaos exploration judges (``judge: chaos``): those clauses; else [].  The clauses speaking of a
    column of the table at ``path`` are those naming the table (each word of its name: "matrix";
    "step" and "class" for ``step_classes``) and the column ("effects", "effect"): a matrix row
    that differs from another only in its effect allowance, a step class given another kind of
    effect, change what the crash windows count (``recovery.effects_allowed``) and no answer the
    clause tests judge.  A column no clause speaks of is not one (the swap stays a mutant)."""
    words = [w[:-2] if w.endswith("sses") else w[:-1] if w.endswith("s") and not w.endswith("ss") else w
             for w in path[-1].split("_")]
    out: list[str] = []
    for col in sorted(_changed_columns(row, other)):
        speaking = [c for c in spec.clauses if all(mentions(c.statement, t) for t in [*words, col])]
        if not speaking or any(c.judge != "chaos" for c in speaking):
            return []
        out += [c.id for c in speaking if c.id not in out]
    return out


def _below_limit_clauses(spec: Spec, path: tuple[str, ...]) -> list[str]:
    """For a limit ``max_<count>``: the clauses saying what happens while the count remains below
    it ("while attempts remain": retry.schedule).  A ledger running with the limit one lower breaks
    that sentence at the last value the limit allows, not the one saying what happens at the limit
    (retry.exhausted: "a failure at attempt >= max_attempts fails the work")."""
    if not path[-1].startswith("max_"):
        return []
    counted = path[-1][len("max_"):]
    return [c.id for c in spec.clauses if re.search(rf"\bwhile {re.escape(counted)} remain", c.statement.lower())]


def _refused_swap(doc: Any, path: tuple[str, ...], row: str, other: str) -> bool:
    """Whether the contract with ``row`` of the table at ``path`` replaced by ``other`` fails the
    contract's own checks (a step class without effect given an allowance other than none)."""
    return _refused(doc, (*path, row), _get_path(doc, (*path, other)))


def _refused(doc: Any, path: tuple[str, ...], value: Any) -> bool:
    """Whether the contract with the entry at ``path`` set to ``value`` fails the contract's own
    checks (no ledger runs under it: the reference refuses such a reset)."""
    import copy

    # not the cached entry point: each changed contract is looked at once
    from ledgercheck.spec.load import _spec_from_document
    from ledgercheck.spec.problems import SpecError

    changed = copy.deepcopy(doc)
    _get_path(changed, list(path[:-1]))[path[-1]] = copy.deepcopy(value)
    try:
        _spec_from_document(changed)
    except SpecError:
        return True
    return False


def _stored_in_record(spec: Spec, op: str, name: str, types: Any) -> bool:
    """``op`` does not answer with work items, ``name`` is a passed-through argument no clause of its
    profile names, and some answer of the profile carries a field named ``name`` (the record the
    argument is stored in: a log entry's ``payload``, a lane task's ``body``)."""
    from .mutants import PASSED_THROUGH, _answers_work, _mentions, _property_names

    prof = spec.operations[op].profile
    if _answers_work(spec, op, types) or spec.operations[op].args[name].type not in PASSED_THROUGH \
            or any(c.profile == prof and _mentions(c.statement, name) for c in spec.clauses):
        return False  # a work item's field, a typed rule, or an argument its profile's clauses name already
    fields: set[str] = set()
    for o in spec.operations.values():
        if o.profile == prof and o.returns in types:
            _property_names(types[o.returns], types, fields, set())
    return name in fields


def _read_clause(spec: Spec, op: str) -> list[str]:
    """The clause the model names for a call of the read ``op`` with its required arguments."""
    from ..model import Model
    from ..stateful_args import ArgDraws, Pools

    draws = ArgDraws(spec, Pools(), [], 1.0)
    args = {n: draws.plain(n, a.type) for n, a in spec.operations[op].args.items() if a.required and n != "now"}
    return [Model(spec).expect(op, {**args, "now": 0.0}).clause]


def _batch_clauses(spec: Spec, path: tuple[str, ...]) -> tuple[str, ...]:
    """For a default batch size no clause names (outbox.pending_max): the clause the model names
    for a call of the list operation whose ``max`` it defaults (``<section>_<name>`` for
    ``<name>_max``, outbox_pending), as the clause cases judge it."""
    if len(path) != 2 or not path[1].endswith("_max"):
        return ()
    op = f"{path[0]}_{path[1][:-len('_max')]}"
    if op not in spec.operations or "max" not in spec.operations[op].args:
        return ()
    return tuple(_read_clause(spec, op))


# the generators, in the order their mutants are listed (tests/conformance/test_mutant_list.py)
FAMILY_ORDER = (_refusals, _dropped_fields, _altered_fields, _lists, _folded_case, _skipped_fences, _timings, _arg_instants, _owner_fences, _stale_replays, _refused_replays, _tree_walks, _ignored_options, _rows_and_limits)



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
