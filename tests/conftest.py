"""Run order for the project's own tests.

The slowest tests (whole-library certifications that wait in real time, the independent
ledgers' certifications, the full crash exploration) go first, longest first.  With xdist
handing out one test at a time (``--maxschedchunk=1``, set below unless given), ``pytest -n 2``
then starts both workers on long tests at once and the many short ones fill the gaps, instead
of a long test starting last and running alone.  Module-scoped fixtures are set up once per
worker that runs a test of their module.
"""

from __future__ import annotations

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


def pytest_collection_modifyitems(items):
    def rank(item) -> int:
        return next((i for i, p in enumerate(SLOW_FIRST) if item.nodeid == p or item.nodeid.startswith(p + "::")),
                    len(SLOW_FIRST))

    items.sort(key=rank)  # stable: everything else keeps its order
