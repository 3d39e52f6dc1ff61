"""The pytest plugin stays out of a session that does not ask for it.

In the fresh environment the wheel is installed in (conftest.py), an unrelated one-test project is
run twice: as is (pytest loads ledgercheck's ``pytest11`` entry point, conformance/entry.py) and
with ``-p no:ledgercheck``.  The two runs must import the same modules but for the entry module
and the light modules it needs, write the same files (in the project and in TMPDIR) and print the
same lines.  The same comparison flags a session that loads the suite itself (``-p
ledgercheck.conformance.plugin``, what the entry point used to name), and a run that gives
``--ledger-adapter`` still gets the suite.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from install_support import Installed, run

# what the entry point may import in a session that does not test a ledger
ENTRY_MODULES = {"ledgercheck", "ledgercheck.conformance", "ledgercheck.conformance.entry", "ledgercheck.conformance.budgets"}
SUITE_MODULES = ("ledgercheck.conformance.plugin", "ledgercheck.conformance.harness", "ledgercheck.spec",
                 "ledgercheck.transport.client", "ledgercheck.reports")

# the project's one test writes what its process imported to a file outside the project (under
# xdist it runs in a worker, whose prints pytest does not show)
PROJECT_TEST = '''\
import json
import os
import sys


def test_one():
    with open(os.environ["INERT_TEST_MODULES"], "w") as f:
        json.dump(sorted(sys.modules), f)
'''


@dataclass
class Session:
    returncode: int
    modules: set[str]
    output: list[str]  # stdout and stderr lines, timings and the plugins header left out
    files: list[str]  # what the project folder and TMPDIR hold afterwards
    raw: str


def _snapshot(*roots: Path) -> list[str]:
    return sorted(f"{i}:{p.relative_to(r)}" for i, r in enumerate(roots) for p in r.rglob("*"))


def session(installed: Installed, base: Path, *args: str) -> Session:
    """The one-test project, fresh under ``base``, run with pytest in the installed environment."""
    proj, tmp = base / "project", base / "tmp"
    proj.mkdir(parents=True)
    tmp.mkdir()
    (proj / "test_one.py").write_text(PROJECT_TEST)
    modules_file = base / "modules.json"
    env = {k: v for k, v in installed.env(TMPDIR=str(tmp), INERT_TEST_MODULES=str(modules_file)).items()
           if k not in ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE")}  # as on a user's machine
    r = run([str(installed.bin / "python"), "-m", "pytest", *args], cwd=proj, env=env)
    text = r.stdout + r.stderr
    modules = set(json.loads(modules_file.read_text())) if modules_file.exists() else set()
    # the timing and pytest's own list of installed plugin distributions are all that may differ
    output = [re.sub(r" in [0-9.]+s\b.*", " in <time>", line).replace(str(base), "<base>")
              for line in text.splitlines() if not line.startswith("plugins: ")]
    return Session(r.returncode, modules, output, _snapshot(proj, tmp), text)


def problems(with_plugin: Session, without: Session) -> list[str]:
    """How a session with ledgercheck installed differs from one without it, beyond the entry module."""
    out = []
    if with_plugin.returncode != 0 or without.returncode != 0:
        out.append(f"exit codes {with_plugin.returncode} and {without.returncode}")
    if not with_plugin.modules or not without.modules:
        out.append("the test did not report its modules")
    extra = sorted(with_plugin.modules - without.modules - ENTRY_MODULES)
    if extra:
        out.append(f"modules imported only with the plugin: {extra}")
    if any(m.startswith("ledgercheck") for m in without.modules):
        out.append("ledgercheck modules imported with -p no:ledgercheck")
    if with_plugin.files != without.files:
        out.append(f"files differ: {sorted(set(with_plugin.files) ^ set(without.files))}")
    if with_plugin.output != without.output:
        diff = difflib.unified_diff(without.output, with_plugin.output, "without", "with the plugin", lineterm="")
        out.append("output differs:\n" + "\n".join(diff))
    return out


@pytest.mark.parametrize("xdist", [[], ["-p", "xdist", "-n", "2"]], ids=["one-process", "xdist"])
def test_an_unrelated_session_does_not_load_the_suite(installed: Installed, tmp_path: Path, xdist: list[str]) -> None:
    with_plugin = session(installed, tmp_path / "with", *xdist)
    without = session(installed, tmp_path / "without", "-p", "no:ledgercheck", *xdist)
    assert problems(with_plugin, without) == []
    # not vacuous: the entry point was loaded (so its options exist) and the test ran
    assert "ledgercheck.conformance.entry" in with_plugin.modules
    assert any(re.search(r"\b1 passed\b", line) for line in with_plugin.output), with_plugin.raw


def test_the_comparison_catches_a_session_that_loads_the_suite(installed: Installed, tmp_path: Path) -> None:
    loaded = session(installed, tmp_path / "suite", "-p", "ledgercheck.conformance.plugin")
    without = session(installed, tmp_path / "without", "-p", "no:ledgercheck")
    found = problems(loaded, without)
    assert len(found) == 1 and found[0].startswith("modules imported only with the plugin"), found
    for name in SUITE_MODULES:
        assert name in found[0], name


def test_a_ledger_option_still_loads_the_suite(installed: Installed, tmp_path: Path) -> None:
    s = session(installed, tmp_path / "asked", "--ledger-adapter", "reference", "-k", "test_one or core.claim.order",
                "-p", "no:cacheprovider")
    assert s.returncode == 0, s.raw[-3000:]
    assert "ledgercheck.conformance.plugin" in s.modules  # seen from the project's own test
    assert re.search(r"\b2 passed\b", s.raw), s.raw[-3000:]  # its test and the ledger clause test


def test_a_ledger_option_without_an_adapter_is_a_usage_error(installed: Installed, tmp_path: Path) -> None:
    s = session(installed, tmp_path / "no-adapter", "--ledger-only")
    assert s.returncode == 4, s.raw[-3000:]  # pytest's usage error: nothing is silently left untested
    assert "ledgercheck: --ledger-only given without --ledger-adapter ADDRESS" in s.raw
    assert not s.modules  # no test ran
