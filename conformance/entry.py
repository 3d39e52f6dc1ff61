"""What pytest loads in every session of an environment where ledgercheck is installed.

The ``pytest11`` entry point names this module, so it is imported by every pytest run of the
environment, whether or not that run tests a ledger.  It only declares the ``--ledger-*``
options; it imports nothing of the harness, writes no file, prints nothing and changes nothing.
The conformance suite itself (conformance/plugin.py: the contract, the adapter, the generated
tests, the results) is loaded when a run asks for it: when ``--ledger-adapter`` or any other
``--ledger-*`` option is given.  ``ledgercheck certify`` always gives ``--ledger-adapter`` (and
``-p ledgercheck``, so it works where pytest's plugin autoloading is turned off), and pytest-xdist
workers get the controller's options, so the suite loads in each worker too.

The options are declared here and only here: pytest parses the command line before the suite
loads, and a plugin registered after that cannot add options.
"""

from __future__ import annotations

import argparse
from typing import Any

from .budgets import PROFILES

PLUGIN = "ledgercheck.conformance.plugin"  # the suite, registered under its module name


# (flag, keyword arguments of addoption); the only place these options are declared
OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("--ledger-adapter", dict(metavar="ADDRESS", help="adapter to test: reference, python:MODULE:FACTORY, exec:COMMAND, or an installed name")),
    ("--ledger-spec", dict(metavar="FILE", action="append", default=[], help="contract file (repeat for overlays); default: the shipped contract")),
    ("--ledger-profile", dict(metavar="NAMES", default=None,
                              help="comma-separated profiles or profile sets to test, 'full' for the whole contract (default: all the adapter claims)")),
    ("--ledger-only", dict(action="store_true", help="run only the ledger suite, deselect other collected tests")),
    ("--ledger-hypothesis-profile", dict(metavar="NAME", default="ci", choices=list(PROFILES), help="stateful test budget (" + ", ".join(PROFILES) + ")")),
    ("--ledger-seed", dict(type=int, default=None, metavar="N", help="seed for the stateful tests (default: random, recorded in the results)")),
    ("--ledger-stateful-only", dict(action="store_true", help="run only the stateful model-based tests")),
    ("--ledger-clauses-only", dict(action="store_true", help="run only the clause tests")),
    ("--ledger-timeout", dict(type=float, default=10.0, metavar="SECONDS", help="per-call timeout for the adapter (before scaling)")),
    ("--ledger-timeout-scale", dict(type=float, default=1.0, metavar="FACTOR", help="multiply every timeout and wait by this factor (slow machines)")),
    ("--ledger-wall-scale", dict(type=float, default=0.01, metavar="FACTOR", help="time scale for wall-clock adapters (contract timings x FACTOR)")),
    ("--ledger-shard", dict(metavar="K/N", default=None, help="run the K-th of N deterministic shards of the suite")),
    ("--ledger-results", dict(metavar="PATH", default=None, help="write the run's results (JSON) to PATH")),
    ("--ledger-artifacts", dict(metavar="DIR", default=".ledgercheck", help="where traces and replay files live")),
    ("--ledger-artifact-file", dict(metavar="FILE", default=None, help="the tested artifact (its SHA-256 goes into the report)")),
    ("--ledger-no-chaos", dict(action="store_true", help="skip the crash-window exploration (the recovery clauses only it decides are then errors: not checked)")),
    ("--ledger-breaker", dict(type=int, default=3, metavar="N",
                              help="stop the run (INCOMPLETE) after N tests in a row end in an adapter timeout or crash; 0 never stops (default 3)")),
    ("--ledger-example-db", dict(metavar="DIR|redis://HOST:PORT/DB", default=None,
                                 help="a hypothesis example database shared by shards and runs (default: none)")),
    ("--ledger-reproduce", dict(metavar="CMD", default=None, help=argparse.SUPPRESS)),
    # the order before fail-fast ordering, kept for bench/bench_first_failure.py's baseline
    ("--ledger-order", dict(default="failfast", choices=["failfast", "generated"], help=argparse.SUPPRESS)),
]


def pytest_addoption(parser: Any) -> None:
    g = parser.getgroup("ledgercheck", "work-ledger conformance (ledgercheck)")
    for flag, kwargs in OPTIONS:
        g.addoption(flag, **kwargs)


def given_options(config: Any) -> list[str]:
    """The ``--ledger-*`` options this run sets (to something other than their default)."""
    out = []
    for flag, kwargs in OPTIONS:
        default = kwargs.get("default", False if kwargs.get("action") == "store_true" else None)
        if config.getoption(flag[2:].replace("-", "_")) != default:
            out.append(flag)
    return out


def pytest_configure(config: Any) -> None:
    """Load the suite when the run asks for it (its own pytest_configure then runs at once)."""
    if given_options(config) and not config.pluginmanager.has_plugin(PLUGIN):
        config.pluginmanager.import_plugin(PLUGIN)
