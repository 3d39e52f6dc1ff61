"""The order a ledger run takes: fail fast.

A bug that one call exposes should be reported within seconds, whatever profile it lives in and
whichever of its clause's cases exposes it, so a run (``ledgercheck certify``, ``pytest
--ledger-adapter ...``) goes breadth first:

1. one case of every clause (its first: the clause modules yield a clause's simplest case first),
   in contract order, so that a clause of the contract's last profile is reached after about one
   case per clause (a hundred or so short tests), not after every case of the profiles before it;
2. the first case of every other *family* of each clause: the cases a constructed generator
   derives from the contract share the first word of their id (``instant:``, ``fence:``,
   ``replay:``, ``option:``, ``row:``, ``tree:``, ``bound:``, ``ident:``, a transition's
   ``running->failed:`` ...), each family a class of bug of its own (an instant moved by one
   quantum, a fence keyed on the owner, ...), so each family's first case comes before any
   family's second;
3. the remaining clause cases in rounds: round *k* holds the *k*-th remaining case of every clause,
   clauses in contract order, so a bug that only a clause's fifth case shows waits for about five
   cases of every clause, never for every case of the clauses before it;
4. the stateful machines;
5. crash windows, lease crash campaigns and the safety campaign (the long tests).

Tests that are not ledger tests (collected alongside when ``--ledger-only`` is not given) keep
their place before the ledger tests.  :func:`order_items` is pure and deterministic: it reads
only what each item carries (``kind``, ``profile``, ``clause``, its name's case id), never the
clock, the number of workers (``-n``) or a previous run, so every process of a pytest-xdist run
computes the same order.  ``--ledger-order generated`` keeps the order the clause modules
generate (the baseline bench/bench_first_failure.py measures against).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")

PHASES = ("first case of every clause", "first case of every family of a clause", "remaining clause cases, in rounds",
          "stateful machines", "crash windows and campaigns")

_CASE = re.compile(r"\[(.*)\]$", re.S)


def is_ledger(item: Any) -> bool:
    return getattr(item, "kind", None) in ("clause", "stateful", "chaos")


def family(item: Any) -> str:
    """The family of a clause case: the first ``:``-separated word of its case id (a constructed
    family), or "" for a case written by hand (an id without ``:``)."""
    m = _CASE.search(str(getattr(item, "name", "")))
    case = m.group(1) if m else ""
    return case.split(":", 1)[0] if ":" in case else ""


def _clause_key(item: Any) -> tuple[str, str]:
    return (str(getattr(item, "profile", "")), str(getattr(item, "clause", "")))


def order_items(items: Sequence[T]) -> list[T]:
    """``items`` in fail-fast order (see the module's doc); a permutation of its argument, stable
    within each phase, and the same for the same input whatever the run's size or workers."""
    others = [it for it in items if not is_ledger(it)]
    clauses = [it for it in items if getattr(it, "kind", None) == "clause"]
    machines = [it for it in items if getattr(it, "kind", None) == "stateful"]
    long_tests = [it for it in items if getattr(it, "kind", None) == "chaos"]
    first: list[T] = []
    families: list[T] = []
    rest: dict[tuple[str, str], list[T]] = {}  # per clause, in the order generated (dicts keep insertion order)
    seen_clauses: set[tuple[str, str]] = set()
    seen_families: set[tuple[str, str, str]] = set()
    for it in clauses:
        key = _clause_key(it)
        fam = (*key, family(it))
        if key not in seen_clauses:
            seen_clauses.add(key)
            seen_families.add(fam)
            first.append(it)
        elif fam not in seen_families:
            seen_families.add(fam)
            families.append(it)
        else:
            rest.setdefault(key, []).append(it)
    rounds: list[T] = []
    queues = list(rest.values())
    depth = 0
    while queues:
        rounds.extend(q[depth] for q in queues)
        depth += 1
        queues = [q for q in queues if depth < len(q)]
    return others + first + families + rounds + machines + long_tests
