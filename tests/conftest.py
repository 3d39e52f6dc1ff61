"""Run order for the project's own tests.

The slowest tests (whole-library certifications that wait in real time, the independent
ledgers' certifications, the full crash exploration) go first, longest first.  With xdist
handing out one test at a time (``--maxschedchunk=1``, set below unless given), ``pytest -n 2``
then starts both workers on long tests at once and the many short ones fill the gaps, instead
of a long test starting last and running alone.  Module-scoped fixtures are set up once per
worker that runs a test of their module.

Scratch files: the session (the xdist controller, or the only process) makes one temporary
directory, gives it to itself and everything it starts as ``TMPDIR`` (xdist workers, adapters,
servers) and removes it at the end, so what a test's SIGKILLed process could not remove does not
stay in /tmp (tests/conformance/test_scratch.py checks that a certify run leaves nothing behind).
"""

from __future__ import annotations

import contextlib
import os

from ledgercheck.transport.reaper import scratch_parent

SLOW_FIRST = (
    "tests/conformance/test_libraries.py::test_library_suite[dbos]",
    "tests/conformance/test_libraries.py::test_library_suite[procrastinate]",
    "tests/conformance/test_libraries.py::test_library_suite[pgqueuer]",
    "tests/protocol/test_eventsourced_ledger.py",
    "tests/conformance/test_independent.py",
    "tests/protocol/test_node_full_ledger.py",
    "tests/conformance/test_libraries.py",
    "tests/chaos/test_explore.py",
)


def pytest_configure(config):
    # only where pytest-xdist is loaded (``-p no:xdist`` and plain runs have no such option)
    if getattr(config.option, "maxschedchunk", 0) is None:
        config.option.maxschedchunk = 1
    if "PYTEST_XDIST_WORKER" not in os.environ:  # a worker inherits the controller's TMPDIR
        stack = contextlib.ExitStack()
        stack.enter_context(scratch_parent("ledgercheck-tests-"))
        config._ledgercheck_scratch = stack


def pytest_unconfigure(config):
    stack = getattr(config, "_ledgercheck_scratch", None)
    if stack is not None:
        stack.close()


def pytest_collection_modifyitems(items):
    def rank(item) -> int:
        return next((i for i, p in enumerate(SLOW_FIRST) if item.nodeid == p or item.nodeid.startswith(p + "::")),
                    len(SLOW_FIRST))

    items.sort(key=rank)  # stable: everything else keeps its order
