"""The order a ledger run takes: fail fast.

A bug that one call exposes should be reported within seconds, whatever profile it lives in, so
a run (``ledgercheck certify``, ``pytest --ledger-adapter ...``) goes in four phases:

1. one case of every clause (its first: the clause modules yield a clause's simplest case first),
   in contract order, so that a clause of the contract's last profile is reached after about one
   case per clause (a hundred or so short tests), not after every case of the profiles before it;
2. the remaining clause cases, in the order they were generated;
3. the stateful machines;
4. crash windows, lease crash campaigns and the safety campaign (the long tests).

Tests that are not ledger tests (collected alongside when ``--ledger-only`` is not given) keep
their place before the ledger tests.  :func:`order_items` is pure and deterministic: it reads
only what each item carries (``kind``, ``profile``, ``clause``, ``case``), never the clock,
the number of workers (``-n``) or a previous run, so every process of a pytest-xdist run
computes the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")

PHASES = ("first case of every clause", "remaining clause cases", "stateful machines", "crash windows and campaigns")


def phase_of(item: Any, firsts: set[int]) -> int:
    """The phase (index into PHASES) of a ledger item; ``firsts`` holds ids of first-phase items."""
    kind = getattr(item, "kind", None)
    if kind == "clause":
        return 0 if id(item) in firsts else 1
    if kind == "stateful":
        return 2
    return 3


def is_ledger(item: Any) -> bool:
    return getattr(item, "kind", None) in ("clause", "stateful", "chaos")


def order_items(items: Sequence[T]) -> list[T]:
    """``items`` in fail-fast order (see the module's doc); a permutation of its argument, stable
    within each phase, and the same for the same input whatever the run's size or workers."""
    others = [it for it in items if not is_ledger(it)]
    ledger = [it for it in items if is_ledger(it)]
    # phase 1: the first case of each clause, in the order the clauses were generated
    first: list[T] = []
    seen_clauses: set[tuple[str, str]] = set()
    for it in ledger:
        if getattr(it, "kind", None) != "clause":
            continue
        key = (str(getattr(it, "profile", "")), str(getattr(it, "clause", "")))
        if key not in seen_clauses:
            seen_clauses.add(key)
            first.append(it)
    firsts = {id(it) for it in first}
    rest: list[list[T]] = [[], [], [], []]
    for it in ledger:
        ph = phase_of(it, firsts)
        if ph:
            rest[ph].append(it)
    return others + first + rest[1] + rest[2] + rest[3]

