"""certify -n N hands the long tests out first, to the last worker, and keeps the fail-fast
order at the start of the first worker's share (conformance/plugin.py long_first_plan)."""

from __future__ import annotations

from ledgercheck.conformance.plugin import LONG_TESTS, long_first_plan


def _ids(clauses: int) -> list[str]:
    return ([f"ledgercheck::core::core.case[{i}]" for i in range(clauses)]
            + ["ledgercheck::stateful::lifecycle", "ledgercheck::stateful::tree",
               "ledgercheck::recovery::chaos[after_claim]", "ledgercheck::lease::crash[x]", "ledgercheck::safety::campaign"])


def _shares(plan: list[int], workers: int) -> list[list[int]]:
    # as pytest-xdist's work stealing deals a plan to n idle workers: len/n to the first, and so on
    out, rest = [], list(plan)
    for i in range(workers):
        n = len(rest) // (workers - i)
        out.append(rest[:n])
        rest = rest[n:]
    return out


def test_the_long_tests_open_the_last_workers_share_and_the_first_keeps_the_fail_fast_start() -> None:
    for clauses in (40, 41, 600, 601):
        ids = _ids(clauses)
        long = [i for i, n in enumerate(ids) if n.startswith(LONG_TESTS)]
        for workers in (2, 3, 4):
            plan = long_first_plan(ids, workers)
            assert sorted(plan) == list(range(len(ids)))  # a permutation: every test runs once
            shares = _shares(plan, workers)
            assert shares[-1][: len(long)] == long, (clauses, workers)
            assert shares[0] == list(range(len(shares[0])))  # the fail-fast order's start, unchanged


def test_one_worker_or_no_long_test_keeps_the_order() -> None:
    ids = _ids(20)
    assert long_first_plan(ids, 1) == list(range(len(ids)))
    short = ids[:20]
    assert long_first_plan(short, 2) == list(range(20))
