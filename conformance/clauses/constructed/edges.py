"""Clause tests with the arguments the contract gives each operation, at their edges.

The scenarios of the other modules call each operation with the arguments the scenario needs;
here the arguments come from the contract's own ``args`` (through conformance/stateful_args.py,
the same draws the stateful machine uses), so an operation or an argument added to the
contract is exercised without a line written for it:

* every transition of the table performed with every optional argument of its operation present
  (a close-out's ``reason``, a cancel's, a failure's ``message``, a wait's ``timeout``...); the
  scenarios elsewhere perform them with those arguments absent;
* every name a journal operation takes from the caller (a recipient, a sender, an outbox key or
  destination, a stream, a log entry's kind) at its edges - another case, surrounding
  whitespace, the other Unicode normalization form, an astral character, empty where allowed -
  each a value of its own, stored and handed back as given.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ledgercheck.conformance.clauses import CaseFn, cases, check
from ledgercheck.conformance.harness import DRIVERS, Harness
from ledgercheck.conformance.stateful_args import ArgDraws, Pools
from ledgercheck.spec import Spec

_DRAWS: dict[str, ArgDraws] = {}


def _draws(spec: Spec, scale: float = 1.0) -> ArgDraws:
    """Argument draws for ``spec``; ``scale``: the harness's (durations come in its clock seconds)."""
    got = _DRAWS.get((spec.digest, scale))
    if got is None:
        got = _DRAWS[(spec.digest, scale)] = ArgDraws(spec, Pools(), [], scale)
    return got


def _optional(spec: Spec, op: str) -> dict[str, str]:
    """An operation's optional arguments (name -> type), ``now`` aside."""
    return {n: a.type for n, a in spec.operations[op].args.items() if not a.required and n != "now"}


@contextmanager
def _with_args(h: Harness, op: str, extra: Mapping[str, Any]) -> Iterator[None]:
    """While the block runs, every call of ``op`` through the harness also carries ``extra``
    (arguments the caller already gives are kept)."""
    real = h.do

    def do(name: str, **args: Any) -> Any:
        return real(name, **({**extra, **args} if name == op else args))

    h.do = do  # type: ignore[method-assign]
    try:
        yield
    finally:
        del h.do


# ---------------------------------------------------------------- optional arguments present
@cases("core.transition.allowed")
def _every_optional(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    """Each edge of the transition table whose operation has optional arguments, performed with
    all of them present: the record makes the same move (and the model judges every field of the
    answer and of the read-back, the ones those arguments set included)."""
    for t in spec.transitions:
        for op in t.ops:
            if op not in DRIVERS or not _optional(spec, op):
                continue

            def fn(h: Harness, src: str = t.src, dst: str = t.dst, op: str = op) -> None:
                h.need(op)
                draws = _draws(h.spec, h.scale)
                extra = {n: draws.plain(n, typ) for n, typ in _optional(h.spec, op).items()}
                wid = h.create()
                h.drive(wid, src)
                with _with_args(h, op, extra):
                    h.perform(wid, src, dst, op)
                got = h.raw("get", work_id=wid).value
                check(isinstance(got, Mapping) and got.get("status") == dst, "core.transition.allowed",
                      f"{op} with {sorted(extra)} moved {src} -> {got.get('status') if isinstance(got, Mapping) else got!r}, "
                      f"the table says {dst}", h)
            yield f"{op}-{t.src}-to-{t.dst}-every-optional-arg", fn


# ---------------------------------------------------------------- names at their edges
_FREE_TEXT = ("reason", "message", "error", "ref")  # free text the contract does not compare (as for fold_case mutants)
_ON_EMPTY = ("string", "nonempty_string", "any", "object", "time")  # argument types a fresh ledger accepts any value of


def _named_ops(spec: Spec) -> Iterator[tuple[str, list[str]]]:
    """Journal operations callable on a fresh ledger (every required argument is the caller's
    own: no record, token or seq the ledger hands out) and the names among their arguments."""
    for op, o in spec.operations.items():
        if o.kind != "journal":
            continue
        req = {n: a.type for n, a in o.args.items() if a.required}
        if any(t not in _ON_EMPTY for t in req.values()) or "work_id" in req:
            continue
        names = [n for n, a in o.args.items() if a.type in ("string", "nonempty_string") and n not in _FREE_TEXT
                 and n != "work_id" and a.required]
        if names:
            yield op, names


def _read_backs(spec: Spec, op: str, sent: Iterable[str]) -> list[str]:
    """The list-returning operations of ``op``'s profile a caller can ask with what ``op`` was
    sent (a drain or the dead letters of the recipient, the pending outbox): where what was
    stored is handed back."""
    profile = spec.operations[op].profile
    out = []
    for name, o in spec.operations.items():
        if name == op or o.profile != profile or o.kind not in ("read", "journal"):
            continue
        req = {n for n, a in o.args.items() if a.required and n != "now"}
        if req <= set(sent) and spec.operations[name].returns.endswith("_list"):
            out.append(name)
    return out


def _acceptance_clause(spec: Spec, op: str, args: Mapping[str, Any]) -> str | None:
    """The clause the model judges a first call of ``op`` on an empty ledger by; None when the
    model would refuse it (an ack of a message nobody delivered: nothing is stored to hand back)
    or when it hands out a list (a drain of an empty inbox stores nothing either)."""
    from ledgercheck.conformance.model import Accept, Model

    exp = Model(spec).expect(op, {**args, "now": 0.0})
    return exp.clause if isinstance(exp, Accept) and not spec.operations[op].returns.endswith("_list") else None


def _names_case(op: str, name: str) -> CaseFn:
    def fn(h: Harness) -> None:
        h.need(op)
        draws = _draws(h.spec, h.scale)
        args_of = h.spec.operations[op].args
        plain = {n: draws.plain(n, a.type) for n, a in args_of.items() if a.required and n != "now"}
        forms = draws.string_forms(name, args_of[name].type)
        sent: dict[str, set[str]] = {}
        # each form with the other names made unique, so each call stores a record of its own and
        # each form must come back as given (that the forms of a key are keys of their own within
        # one scope is core.identity.exact's "keys" case; a key reused in another scope - a message
        # id for another recipient - is left alone)
        for i, form in enumerate(forms):
            args = {**plain, name: form, **{n: f"{v}-{i}" for n, v in plain.items() if n != name and isinstance(v, str)}}
            h.do(op, **args)
            for n, v in args.items():
                if isinstance(v, str):
                    sent.setdefault(n, set()).add(v)
        for read in _read_backs(h.spec, op, sent):
            req = [n for n, a in h.spec.operations[read].args.items() if a.required and n != "now"]
            for values in _combinations(req, sent):
                h.do(read, **values)
    return fn


def _combinations(names: list[str], sent: Mapping[str, set[str]]) -> Iterator[dict[str, str]]:
    if not names:
        yield {}
        return
    for v in sorted(sent[names[0]]):
        for more in _combinations(names[1:], sent):
            yield {names[0]: v, **more}


def _names_for(spec: Spec, clause: str) -> Iterable[tuple[str, CaseFn]]:
    """Every name a journal operation takes from the caller, at its edges; each call and each
    read-back of what was stored is judged field by field by the model.  A case belongs to the
    clause the model judges the operation's first call by (so its judgement is the case's own)."""
    draws = _draws(spec)
    for op, names in _named_ops(spec):
        plain = {n: draws.plain(n, a.type) for n, a in spec.operations[op].args.items() if a.required and n != "now"}
        if _acceptance_clause(spec, op, plain) != clause:
            continue
        for name in names:
            yield f"{op}-{name}-at-its-edges", _names_case(op, name)


# ---------------------------------------------------------------- numbers at their bounds
def _batch_limit(spec: Spec, op: str) -> int | None:
    """The contract's default batch size of a list operation with an optional ``max``: the
    integer its profile's section names ``<operation>_max`` (inbox.drain_max for inbox_drain)."""
    o = spec.operations[op]
    section = spec.document.get(o.profile or "")  # read in place: a copy of the whole contract per operation is slow
    short = op.split("_", 1)[1] if "_" in op else op
    value = section.get(f"{short}_max") if isinstance(section, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bounded_reads(spec: Spec) -> Iterator[tuple[str, str, int]]:
    """(list operation, the journal operation that fills it, the default batch size) for every
    list operation whose optional ``max`` defaults to a limit of the contract."""
    producers: dict[str | None, str] = {}
    for op, _ in _named_ops(spec):  # the first operation of the profile that stores a record on a fresh ledger
        plain_args = {n: _draws(spec).plain(n, a.type) for n, a in spec.operations[op].args.items() if a.required and n != "now"}
        if _acceptance_clause(spec, op, plain_args) is not None:
            producers.setdefault(spec.operations[op].profile, op)
    for op, o in spec.operations.items():
        limit = _batch_limit(spec, op)
        if limit is None or not o.returns.endswith("_list") or o.profile not in producers:
            continue
        if any(a.type == "positive_int" and not a.required for a in o.args.values()):
            yield op, producers[o.profile], limit


def _bound_case(op: str, producer: str, limit: int) -> CaseFn:
    def fn(h: Harness) -> None:
        h.need(op, producer)
        draws = _draws(h.spec, h.scale)
        prod = {n: draws.plain(n, a.type) for n, a in h.spec.operations[producer].args.items() if a.required and n != "now"}
        scope = {n: v for n, v in prod.items() if n in h.spec.operations[op].args}  # what the read names (a recipient)
        for i in range(limit + 1):  # one more than a batch, each from a name of its own
            h.do(producer, **{**prod, **{n: f"{v}-{i}" for n, v in prod.items() if isinstance(v, str) and n not in scope}})
        for max_ in (None, 1, limit, limit + 1):  # the default, and a requested size at its bounds
            args = {**scope, **({} if max_ is None else {"max": max_})}
            got = h.do(op, **args).value
            want = min(limit + 1, max_ or limit)
            if h.spec.operations[op].kind == "read":
                check(isinstance(got, list) and len(got) == want, _clause_of(h.spec, op, args),
                      f"{op}({', '.join(f'{k}={v!r}' for k, v in args.items())}) handed out {len(got) if isinstance(got, list) else got!r}"
                      f" of {limit + 1}, a batch is {want}", h)
    return fn


def _clause_of(spec: Spec, op: str, args: Mapping[str, Any]) -> str:
    from ledgercheck.conformance.model import Model

    return Model(spec).expect(op, {**args, "now": 0.0}).clause


def _bounds_for(spec: Spec, clause: str) -> Iterable[tuple[str, CaseFn]]:
    """A list operation's batch at its bounds: one more record than the contract's default batch,
    read without ``max`` and with 1, the batch size and one more (the model judges each answer;
    a read that changes nothing must hand out exactly the batch)."""
    for op, producer, limit in _bounded_reads(spec):
        if _clause_of(spec, op, {n: _draws(spec).plain(n, a.type) for n, a in spec.operations[op].args.items()
                                 if a.required and n != "now"}) == clause:
            yield f"{op}-batch-at-its-bounds", _bound_case(op, producer, limit)


def _register() -> None:
    from ledgercheck.spec import default_spec

    spec = default_spec()
    draws = _draws(spec)
    clauses = set()
    for op, _ in _named_ops(spec):
        plain = {n: draws.plain(n, a.type) for n, a in spec.operations[op].args.items() if a.required and n != "now"}
        clauses.add(_acceptance_clause(spec, op, plain))
    for clause in sorted(c for c in clauses if c is not None):
        cases(clause)(functools.partial(_names_for, clause=clause))
    for op, _, _ in _bounded_reads(spec):
        req = {n: draws.plain(n, a.type) for n, a in spec.operations[op].args.items() if a.required and n != "now"}
        clause = _clause_of(spec, op, req)
        cases(clause)(functools.partial(_bounds_for, clause=clause))


_register()
