"""Clause tests, generated from the contract.

Each clause id of the contract has one or more *cases*: small scenarios run through the
harness (which checks every step against the model) plus, where a clause says more than the
model can check on its own, explicit assertions.  Modules in this package register case
generators with :func:`cases` / :func:`case`; a generator receives the Spec and yields
``(param_id, function(harness))``, so parametrization follows the contract's own data (its
transition table, timings, error classes, step classes...).

A clause with no registered generator (say, one a vendor added in an overlay without a check)
still gets a case, which errors with "no check implements this clause": it is never reported
as passing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ledgercheck.spec import Spec, rules

from ..harness import ClauseFailure, Harness
from ..model import Violation

CaseFn = Callable[[Harness], None]
Generator = Callable[[Spec], Iterable[tuple[str, CaseFn]]]


@dataclass(frozen=True)
class ClauseCase:
    clause: str
    param: str
    fn: CaseFn
    kind: str = "clause"
    marks: tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        return f"{self.clause}[{self.param}]" if self.param else self.clause


REGISTRY: dict[str, list[Generator]] = {}
MODULES = ("core", "trail", "cancel", "lease", "waiting", "retry", "idempotency", "inbox", "outbox", "eventlog", "recovery",
           "constructed.concurrency", "lanes", "wakeups", "spawn", "ask", "logread", "constructed.edges",
           "constructed.instants", "constructed.fences", "constructed.bounds", "constructed.trees", "constructed.replays",
           "constructed.tables", "constructed.options")


def cases(clause: str) -> Callable[[Generator], Generator]:
    def deco(gen: Generator) -> Generator:
        REGISTRY.setdefault(clause, []).append(gen)
        return gen

    return deco


def case(clause: str, param: str = "") -> Callable[[CaseFn], CaseFn]:
    def deco(fn: CaseFn) -> CaseFn:
        REGISTRY.setdefault(clause, []).append(lambda spec: [(param, fn)])
        return fn

    return deco


def _load() -> None:
    for m in MODULES:
        importlib.import_module(f"{__name__}.{m}")


def all_cases(spec: Spec, chaos: bool = True) -> Iterator[ClauseCase]:
    """Every clause case; clauses judged by crash windows (``judge: chaos`` in the contract) get
    none when ``chaos`` is on (the chaos tests cover them) and an erroring case when it is off
    (nothing would judge them)."""
    _load()
    for registered in REGISTRY:
        spec.clause(registered)  # a check registered under an id the contract lacks: UnknownClause
    chaos_judged = rules.chaos_clauses(spec)
    for clause in spec.clauses:
        gens = REGISTRY.get(clause.id, [])
        if clause.id in chaos_judged:
            if not chaos:
                yield ClauseCase(clause.id, "", _no_check(clause.id, "it is judged by crash windows and the chaos exploration was not run"))
            continue
        if not gens:
            yield ClauseCase(clause.id, "", _no_check(clause.id))
            continue
        seen: set[str] = set()
        for gen in gens:
            for param, fn in gen(spec):
                pid = param
                n = 2
                while pid in seen:
                    pid, n = f"{param}-{n}", n + 1
                seen.add(pid)
                yield ClauseCase(clause.id, pid, fn)


class NoCheck(Exception):
    pass


def _no_check(clause_id: str, why: str = "no check implements it") -> CaseFn:
    def fn(h: Harness) -> None:
        raise NoCheck(f"clause {clause_id} was not checked: {why}; it cannot be certified")

    return fn


def fail(clause: str, message: str, h: Harness | None = None) -> None:
    """The clause test's own check failed (not the model): the failure says so (``by_check``),
    and so does its saved trace."""
    try:
        if h is not None:
            h.fail([Violation(clause, message)])
        raise ClauseFailure([Violation(clause, message)])
    except ClauseFailure as exc:
        exc.by_check = True  # type: ignore[attr-defined]
        raise


def check(cond: bool, clause: str, message: str, h: Harness | None = None) -> None:
    if not cond:
        fail(clause, message, h)


def answered(h: Harness, op: str, clause: str, **args: object) -> Any:
    """Call ``op`` without the model and require an answer; a refusal fails ``clause``."""
    out = h.raw(op, **args)
    check(out.ok, clause, f"{op}({args}) was refused ({out.code}: {out.message})", h)
    return out.value


@contextmanager
def durable(h: Harness) -> Iterator[Callable[[], None]]:
    """A clause test on a fresh ledger in a new, empty directory of its own, opened by a new
    process; yields ``reopen()``, which closes that process and opens the ledger again from the
    directory in another (docs/protocol.md, "reset"; the model and the clock go on, and the
    trace records the reopen, so its replay reopens too).  Not applicable to adapters that do
    not declare durable state."""
    import tempfile

    from ..harness import NotApplicable

    caps = h.client.handshake.get("capabilities") or {}
    if not caps.get("durable"):
        raise NotApplicable("the adapter does not declare durable state (a new process reset with the same dir)")
    if h.trace:
        raise RuntimeError("durable() starts its own fresh ledger: call it before any operation of the test")
    with tempfile.TemporaryDirectory(prefix="ledgercheck-reopen-") as tmp:
        h.fresh(seed=h.sent_seed, directory=tmp)
        try:
            yield h.reopen
        finally:
            h.leave_directory()  # the processes that held the directory are closed before it goes


__all__ = ["ClauseCase", "ClauseFailure", "NoCheck", "all_cases", "case", "cases", "check", "durable", "fail"]
