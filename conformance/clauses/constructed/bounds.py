"""Cases by construction: sequence checks at their first and last values, identifiers at their edges.

**Bounds** (param ``bound:``).  The contract numbers a stream's entries from ``eventlog.first_seq``
without gaps, and three kinds of operation turn on that numbering, found by their arguments and
answers (not by name): an *append* (a journal operation taking a required non-negative integer,
the seq the caller expects the stream to be at), a *read from a seq* (a read taking the stream and
a non-negative integer start, and a batch size where it has one) and a *last seq* read (answering
a seq).  Each is probed on a stream of 0 (empty), 1 and 3 entries:

* the append with the stream's last seq (first_seq - 1 when empty: version 0 of the stream), one
  below it (where one exists) and one above it: only the first is accepted, at the next seq;
* the read from first_seq, from the last entry, from one past it (and, for a bounded read, with a
  batch of one: the first page, and of exactly the stream's length: the last page);
* the last seq itself.

The model judges each answer; a case belongs to the clause the model judges that call by (an
accepted append: the expected-seq rule; a refused one: the conflict rule; a read: its own).

**Identifiers** (param ``ident:``).  Identifiers compare exactly, code point by code point
(core.identity.exact).  For every journal operation that stores a record under names the caller
gives, each name is sent as a pool value and then in each form that differs from it only by
surrounding whitespace, case or Unicode normalization form, the other arguments unchanged: each
form is a key of its own, so each call is judged as the first of its key (an implementation that
strips, case-folds or normalizes a name takes the second for a repeat of the first, and its
answer is wrong).  The case belongs to the clause of the operation's own rule (what the model
judges its first call by), so a name compared loosely is blamed on the rule that keys on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ledgercheck.conformance.clauses import CaseFn, cases, check
from ledgercheck.conformance.harness import Harness, NotApplicable
from ledgercheck.spec import Spec

LENGTHS = (0, 1, 3)


def _model_clause(spec: Spec, op: str, args: dict[str, Any]) -> tuple[bool, str]:
    """(accepted?, clause) of the model's expectation of ``op`` with ``args`` on a fresh ledger."""
    from ledgercheck.conformance.model import Accept, Model

    exp = Model(spec).expect(op, {**args, "now": 0.0})
    return isinstance(exp, Accept), exp.clause


def _req(spec: Spec, op: str) -> dict[str, str]:
    return {n: a.type for n, a in spec.operations[op].args.items() if a.required and n != "now"}


def appenders(spec: Spec) -> Iterator[tuple[str, str, str]]:
    """(operation, its stream argument, its expected-seq argument) for every journal operation
    that appends at a seq the caller expects: a required non-negative integer beside names."""
    for op, o in spec.operations.items():
        if o.kind != "journal":
            continue
        req = _req(spec, op)
        seqs = [n for n, t in req.items() if t == "nonnegative_int"]
        names = [n for n, t in req.items() if t == "nonempty_string"]
        if len(seqs) == 1 and names:
            yield op, names[0], seqs[0]


def _others(spec: Spec, op: str, skip: tuple[str, ...]) -> dict[str, Any]:
    from .edges import _draws

    draws = _draws(spec)
    return {n: draws.plain(n, t) for n, t in _req(spec, op).items() if n not in skip}


def seq_readers(spec: Spec, stream: str, profiles: set[str | None]) -> Iterator[tuple[str, str | None, str | None]]:
    """(read operation, its start argument or None, its batch argument or None) for the reads of
    a stream (``stream`` among their arguments) in ``profiles`` or profiles that require them."""
    for op, o in spec.operations.items():
        if o.kind != "read" or stream not in o.args:
            continue
        if o.profile not in profiles and not set(spec.profiles[o.profile].requires) & {p for p in profiles if p}:
            continue
        start = next((n for n, a in o.args.items() if a.type == "nonnegative_int"), None)
        batch = next((n for n, a in o.args.items() if a.type == "positive_int"), None)
        yield op, start, batch


def _fill(h: Harness, op: str, stream: str, seq: str, name: str, n: int, base: dict[str, Any]) -> None:
    for i in range(n):
        h.do(op, **{**base, stream: name, seq: h.spec.first_seq - 1 + i})


def _append_case(op: str, stream: str, seq: str, n: int, delta: int, clause: str) -> CaseFn:
    def fn(h: Harness) -> None:
        h.need(op)
        base = _others(h.spec, op, (stream, seq))
        _fill(h, op, stream, seq, "stream-bounds", n, base)
        last = h.spec.first_seq - 1 + n
        out = h.do(op, **{**base, stream: "stream-bounds", seq: last + delta})
        what = f"{op} on a stream of {n} entries with {seq} {last + delta} (its last seq is {last})"
        if delta == 0:
            check(out.ok, clause, f"{what} was refused ({out.code}: {out.message})", h)
        else:
            check(not out.ok, clause, f"{what} was accepted: {out.value!r:.120}", h)
    return fn


def _read_case(app: str, stream: str, seq: str, n: int, read: str, args: dict[str, Any]) -> CaseFn:
    def fn(h: Harness) -> None:
        h.need(app, read)
        base = _others(h.spec, app, (stream, seq))
        _fill(h, app, stream, seq, "stream-bounds", n, base)
        first = h.spec.first_seq
        sent = {k: (v(first, n) if callable(v) else v) for k, v in args.items()}
        h.do(read, **{stream: "stream-bounds", **sent})  # the model judges the answer, entry by entry
    return fn


def _bound_cases(clause: str) -> Any:
    def gen(spec: Spec) -> Iterator[tuple[str, CaseFn]]:
        first = spec.first_seq
        for op, stream, seq in appenders(spec):
            base = {**_others(spec, op, (stream, seq)), stream: "s"}
            ok_clause = _model_clause(spec, op, {**base, seq: first - 1})[1]
            bad_clause = _model_clause(spec, op, {**base, seq: first})[1]
            for n in LENGTHS:
                last = first - 1 + n
                for delta, label in ((0, "last"), (-1, "below"), (1, "above")):
                    if last + delta < 0:
                        continue
                    if (ok_clause if delta == 0 else bad_clause) == clause:
                        yield f"bound:{op}:len{n}:{seq}={label}", _append_case(op, stream, seq, n, delta, clause)
            for read, start, batch in seq_readers(spec, stream, {spec.operations[op].profile}):
                probe = {start: first} if start else {}
                if batch:
                    probe[batch] = 1
                if _model_clause(spec, read, {stream: "s", **probe})[1] != clause:
                    continue
                for n in LENGTHS:
                    for label, args in _read_probes(start, batch, n):
                        yield f"bound:{read}:len{n}:{label}", _read_case(op, stream, seq, n, read, args)
    return gen


def _read_probes(start: str | None, batch: str | None, n: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """The starts and batches a read of a stream of ``n`` entries is probed with: functions of
    (first_seq, n), worked out when the case runs."""
    if start is None:
        yield "whole", {}
        return
    starts = [("first", lambda f, n: f), ("last", lambda f, n: f + n - 1), ("past-end", lambda f, n: f + n)]
    for label, at in starts:
        if label == "last" and n == 0:
            continue
        if batch is None:
            yield f"{start}={label}", {start: at}
            continue
        yield f"{start}={label}:{batch}=1", {start: at, batch: 1}
        if n > 1 and label == "first":
            yield f"{start}={label}:{batch}=len", {start: at, batch: lambda f, n: n}
            yield f"{start}={label}:{batch}=len-1", {start: at, batch: lambda f, n: n - 1}


# the clauses these cases fall under in the default contract (tests hold the derived ones to it)
BOUND_CLAUSES = ("eventlog.append.expected_seq", "eventlog.append.conflict", "eventlog.read", "logread.tail", "logread.last_seq")
for _clause in BOUND_CLAUSES:
    cases(_clause)(_bound_cases(_clause))


# ----------------------------------------------------------------------------- identifiers
def keyed_ops(spec: Spec) -> Iterator[tuple[str, list[str], dict[str, Any], str]]:
    """(operation, its names, arguments the model accepts as a first call on a fresh ledger, the
    clause it judges that call by) for every journal operation that stores under caller-given
    names.  Integer arguments (an expected seq) take the value the model accepts on a fresh ledger."""
    from .edges import _FREE_TEXT, _draws

    draws = _draws(spec)
    for op, o in spec.operations.items():
        if o.kind != "journal":
            continue
        req = _req(spec, op)
        if any(t not in ("string", "nonempty_string", "any", "object", "nonnegative_int", "positive_int") for t in req.values()):
            continue
        names = [n for n, t in req.items() if t in ("string", "nonempty_string") and n not in _FREE_TEXT]
        if not names:
            continue
        args = {n: draws.plain(n, t) for n, t in req.items()}
        for n, t in req.items():
            if t == "nonnegative_int":
                args[n] = next((v for v in (spec.first_seq - 1, spec.first_seq, 0) if v >= 0 and _model_clause(spec, op, {**args, n: v})[0]),
                               args[n])
        ok, clause = _model_clause(spec, op, args)
        if ok:
            yield op, names, args, clause


def _signature(out: Any) -> Any:
    """What an answer says about keys, without what each call draws afresh (tokens, instants):
    refused or not, and its booleans and integers (delivered, queued, a seq, a version)."""
    v = out.value if out.ok else None
    if isinstance(v, dict):
        v = tuple(sorted((k, x) for k, x in v.items() if isinstance(x, bool | int)))
    elif not isinstance(v, bool | int | type(None)):
        v = type(v).__name__
    return out.ok, out.code, v


def _ident_case(op: str, name: str, args: dict[str, Any]) -> CaseFn:
    def fn(h: Harness) -> None:
        from .edges import _draws

        h.need(op)
        # First, whether this implementation keys records on ``name`` with the other arguments
        # unchanged: a call with a wholly different value must be answered as a first call again
        # (a message id scoped to the whole inbox, not its recipient, is a choice the contract
        # leaves: then the recipient is no key of its own here, and its forms say nothing)
        first = h.raw(op, **args, now=h.now())
        other = h.raw(op, **{**args, name: f"{args[name]}-another"}, now=h.now())
        if _signature(first) != _signature(other):
            raise NotApplicable(f"{op} does not key its records on {name} alone here (a different {name} "
                                f"answered {_signature(other)}, the first call {_signature(first)})")
        h.fresh()
        forms = _draws(h.spec, h.scale).string_forms(name, h.spec.operations[op].args[name].type)
        for form in forms:
            h.do(op, **{**args, name: form})  # each a first call of its own key: the model judges it
    return fn


def _ident_cases(clause: str) -> Any:
    def gen(spec: Spec) -> Iterator[tuple[str, CaseFn]]:
        for op, names, args, judged in keyed_ops(spec):
            if judged == clause:
                for name in names:
                    yield f"ident:{op}:{name}", _ident_case(op, name, args)
    return gen


IDENT_CLAUSES = ("eventlog.append.expected_seq", "inbox.deliver.idempotent", "inbox.drain.max", "outbox.intent_first",
                 "lanes.takeover", "lanes.queue.durable", "wakeups.wake")
for _clause in IDENT_CLAUSES:
    cases(_clause)(_ident_cases(_clause))


def derived_clauses(spec: Spec) -> set[str]:
    """Every clause a bound or identifier case of ``spec`` belongs to."""
    out = set()
    first = spec.first_seq
    for op, stream, seq in appenders(spec):
        base = {**_others(spec, op, (stream, seq)), stream: "s"}
        out.add(_model_clause(spec, op, {**base, seq: first - 1})[1])
        out.add(_model_clause(spec, op, {**base, seq: first})[1])
        for read, start, batch in seq_readers(spec, stream, {spec.operations[op].profile}):
            probe = {start: first} if start else {}
            if batch:
                probe[batch] = 1
            out.add(_model_clause(spec, read, {stream: "s", **probe})[1])
    return out | {c for _, _, _, c in keyed_ops(spec)}
