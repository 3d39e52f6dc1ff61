"""Run order for the project's own tests.

The slowest tests (whole-library certifications, the independent ledgers' certifications, the
full crash exploration) go first, longest first.  With xdist handing out one test at a time
(``--maxschedchunk=1``, set below unless given), ``pytest -n 2`` then starts both workers on long
tests at once and the many short ones fill the gaps, instead of a long test starting last and
running alone.  The order only saves time: no verdict depends on it, or on which tests run side
by side (no test judges the clock, and every test passes with a CPU hog on each core:
scripts/stress-run.sh).  Module-scoped fixtures are set up once per worker that runs a test of
their module.

Scratch files: the session (the xdist controller, or the only process) makes one temporary
directory (on /dev/shm when it has room, see _ram_disk), gives it to itself and everything it starts as ``TMPDIR`` (xdist workers, adapters,
servers) and removes it at the end, so what a test's SIGKILLed process could not remove does not
stay in /tmp (tests/conformance/test_scratch.py checks that a certify run leaves nothing behind).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings
from ledgercheck.services.reaper import scratch_parent

# tests/patience.py (waiting for a condition, with a safety net of minutes) is importable from
# every test directory
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# tests/chaos/history_sim.py (synthetic histories from a small correct ledger written for the
# tests) is importable from every test directory too
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "chaos"))

# No hypothesis test is judged by the clock: no per-example deadline (200 ms by default) and no
# "too slow" health check (it fails a test whose data generation is slow, as on a busy machine).
# Settings a test writes itself start from these.
settings.register_profile("ledgercheck-tests", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ledgercheck-tests")

SHARED_DIR = "LEDGERCHECK_TEST_SHARED_DIR"  # tests/chaos/chaos_support.py reads it

# Two tiers.  The default run (the README's test command) keeps every check with a test that fails
# on a broken implementation; LEDGERCHECK_THOROUGH=1 is the long tier .ci/run adds after it
# (``pytest -m "thorough or budgeted"``):
# * ``@pytest.mark.thorough``: a test (or one parameter of a test) that repeats what a default
#   test already proves, over more ledgers, seeds or programs; skipped, with that reason, by default;
# * ``@pytest.mark.budgeted``: a test that runs in both tiers with a smaller budget by default, e.g.
#   the independent ledgers' certifications, whose stateful exploration gets the "smoke" budget
#   (every rule driven and every clause test run, fewer programs; ``certify_budget`` below).
THOROUGH = "LEDGERCHECK_THOROUGH"


def thorough() -> bool:
    return os.environ.get(THOROUGH) == "1"

# Longest first (wall times of earlier full runs on 2 cores in the comments), for the run's length
# alone: any order gives the same verdicts.
SLOW_FIRST = (
    "tests/conformance/test_libraries.py::test_library_suite[dbos]",  # 110-175 s
    "tests/conformance/test_libraries.py::test_library_suite[procrastinate]",  # 80-205 s
    "tests/conformance/test_libraries.py::test_library_suite[pgqueuer]",  # 41-93 s
    "tests/protocol/test_node_full_ledger.py::test_certified_with_every_open_choice_taken",  # 33-84 s
    "tests/protocol/test_eventsourced_ledger.py",  # 30-62 s
    "tests/conformance/test_independent.py",  # 21-52 s
    "tests/conformance/test_libraries.py",  # persist-queue 23-75 s, rq 33 s
    # makes the exhaustive exploration the other tests of the module read (shared_once)
    "tests/chaos/test_explore.py::test_every_window_passes_in_process",  # 35-50 s
    "tests/chaos/test_safety_campaign.py::test_cli_exit_codes",  # 18-30 s
    "tests/conformance/test_published_replays.py::test_every_long_published_replay_reproduces_its_line",  # 38 s (long tier)
    "tests/conformance/test_doc_literal.py::test_the_doc_literal_ledger_is_certified",  # 33 s
    "tests/conformance/test_mutation.py::test_benign_rewrites_all_at_once_are_not_flagged",  # 30-35 s
    "tests/conformance/test_mutation.py::test_benign_rewrites_are_not_flagged_across_reopens",  # 22 s (long tier)
    "tests/chaos/test_explore.py::test_over_the_wire_first_occurrences",  # 29 s
    "tests/chaos/test_safety_campaign.py::test_certify_item_passes_a_correct_ledger",  # 26 s
    "tests/conformance/test_plugin.py::test_shards_merge_into_the_whole",  # 9 s
)
# Last: tests that read a result a slow-first test made (chaos_support.shared_once), so they find
# it made instead of waiting for it while the other worker makes it.
LAST = (
    "tests/chaos/test_explore.py::test_windows_cover_every_point_class_and_decision",
    "tests/chaos/test_explore.py::test_window_shape",
    "tests/chaos/test_explore.py::test_takeover_windows_refuse_every_stale_write",
)


@pytest.fixture(scope="session")
def certify_budget() -> list[str]:
    """Arguments of ``ledgercheck certify`` that set an independent ledger's stateful budget."""
    return [] if thorough() else ["--hypothesis-profile", "smoke"]


def _matches(nodeid: str, prefix: str) -> bool:
    return nodeid == prefix or nodeid.startswith((prefix + "::", prefix + "["))


def pytest_configure(config):
    # only where pytest-xdist is loaded (``-p no:xdist`` and plain runs have no such option)
    if getattr(config.option, "maxschedchunk", 0) is None:
        config.option.maxschedchunk = 1
    if "PYTEST_XDIST_WORKER" not in os.environ:  # a worker inherits the controller's TMPDIR
        stack = contextlib.ExitStack()
        root = stack.enter_context(scratch_parent("ledgercheck-tests-", under=_ram_disk()))
        # results computed once per run and shared by the workers (chaos_support.shared_once)
        stack.enter_context(_env(SHARED_DIR, root))
        # compiled bytecode for every Python process of the run, kept in the scratch directory: the
        # tests start hundreds (adapters, `ledgercheck` commands, pytest runs), and where the
        # environment says not to write bytecode each would compile the whole package again
        stack.enter_context(_env("PYTHONPYCACHEPREFIX", os.path.join(root, "pycache")))
        stack.enter_context(_env("PYTHONDONTWRITEBYTECODE", None))
        config._ledgercheck_scratch = stack


def _ram_disk(need: int = 4 << 30) -> str | None:
    """/dev/shm when it is writable and has room for a test run's files (the PostgreSQL servers'
    data directories are the largest part, well under ``need``), else None (the default TMPDIR).
    Nothing is lost: the tests kill processes, never the machine, so the page cache is all the
    durability they can observe; a commit there costs no disk flush (DBOS on SQLite spends about
    half its create time in fsync on disk)."""
    shm = "/dev/shm"
    try:
        st = os.statvfs(shm)
    except OSError:
        return None
    return shm if os.access(shm, os.W_OK) and st.f_bavail * st.f_frsize >= need else None


@contextlib.contextmanager
def _env(name: str, value: str | None) -> Iterator[None]:
    """``name`` set to ``value`` (None: unset) until the block ends."""
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def pytest_unconfigure(config):
    stack = getattr(config, "_ledgercheck_scratch", None)
    if stack is not None:
        stack.close()


def pytest_collection_modifyitems(items):
    if not thorough():
        skip = pytest.mark.skip(reason=f"the long tier: {THOROUGH}=1 runs it (.ci/run does)")
        for item in items:
            if item.get_closest_marker("thorough") is not None:
                item.add_marker(skip)

    def rank(item) -> int:
        if any(_matches(item.nodeid, p) for p in LAST):
            return len(SLOW_FIRST) + 1
        return next((i for i, p in enumerate(SLOW_FIRST) if _matches(item.nodeid, p)), len(SLOW_FIRST))

    items.sort(key=rank)  # stable: everything else keeps its order
