"""One pool of crash-window workers shared by several explorations (certify keeps one for all its
crash points, conformance/plugin.py): the windows decide as with a pool of their own, a broken
ledger is still caught, the pool is left open for the next one, and the workers left clean by one
exploration serve the next instead of new processes being started."""

from __future__ import annotations

import pytest
from ledgercheck.chaos.crash.exploration import explore
from ledgercheck.chaos.crash.pool import WorkerPool
from ledgercheck.spec import Spec

BROKEN = "python:broken_ledgers:WaitingIsStale"


def _decided(ws: list[dict]) -> list[tuple]:
    return [(w["point"], w["occurrence"], w["mode"], w["verdict"], w["clauses"]) for w in ws]


@pytest.mark.thorough  # three explorations: 3-15 s with the machine's load
def test_explorations_sharing_a_pool_decide_the_same_and_start_fewer_workers(spec: Spec, scratch: str | None,
                                                                             tmp_path) -> None:
    kw = dict(points=["after_waiting_set"], fencing=False, jobs=2, tmp_root=scratch, replay_dir=str(tmp_path),
              max_occurrence=1)
    own = explore(BROKEN, spec, **kw)
    assert any(w["verdict"] == "fail" and "recovery.waiting_untouched" in w["clauses"] for w in own)
    with WorkerPool(BROKEN, spec, spare=3) as pool:
        first = explore(BROKEN, spec, pool=pool, **kw)
        after_first = pool.started
        second = explore(BROKEN, spec, pool=pool, **kw)
        assert pool.failed is None  # left open: the second exploration had its workers
        h = pool.get()
        assert h.alive()
        pool.put(h)
        # every window kills the worker it armed; the rest come back clean and serve again
        assert pool.started - after_first < after_first
    assert _decided(first) == _decided(second) == _decided(own)


def test_a_stopped_pool_says_so(spec: Spec) -> None:
    pool = WorkerPool("reference", spec, spare=1)
    try:
        assert pool.failed is None
        pool.abort("stopped by the test")
        assert pool.failed == "stopped by the test"
    finally:
        pool.close()
