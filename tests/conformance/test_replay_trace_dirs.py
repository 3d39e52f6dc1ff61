"""Each run writes its traces to a folder of its own, so a later run of the same adapter never
overwrites the trace an earlier report's replay command names."""

from __future__ import annotations

from types import SimpleNamespace

from ledgercheck.conformance import items as plugin


def _config(seed, workerinput=None):
    cfg = SimpleNamespace(getoption=lambda name: {"ledger_seed": seed}[name])
    if workerinput is not None:
        cfg.workerinput = workerinput
    return cfg


def test_runs_get_their_own_trace_folder_named_after_the_seed() -> None:
    a, b = _config(1), _config(1)
    da, db = plugin._run_dir(a), plugin._run_dir(b)
    assert da != db and da.startswith("seed1-") and db.startswith("seed1-")
    assert plugin._run_dir(a) == da, "one folder for the whole run"
    assert plugin._run_dir(_config(None)).startswith("seed-random-")


def test_xdist_workers_of_one_run_share_the_folder() -> None:
    w1 = _config(5, {"testrunuid": "abcdef0123456789"})
    w2 = _config(5, {"testrunuid": "abcdef0123456789"})
    assert plugin._run_dir(w1) == plugin._run_dir(w2) == "seed5-abcdef01"
