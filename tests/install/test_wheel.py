"""ledgercheck as users install it: ``python -m build``, ``twine check``, a non-editable install.

The wheel must hold every ``.py`` file and every data file of the folders pyproject.toml maps into
the ``ledgercheck`` package (found by setup.py, data by ``package-data``) and nothing else of the
tree; the sdist must hold the same and build a wheel with the same files.  Installed without
``-e`` into a fresh environment, ``ledgercheck certify`` and ``pytest --ledger-adapter`` must run
from a folder outside the source tree.  The build, the check and the install are in conftest.py.
"""

from __future__ import annotations

import re
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from install_support import ROOT, Installed, package_dirs, run, source_files, wheel_names

# Files of the mapped folders that are not shipped, each with the reason.  Any other file there
# must be in the wheel: a new module or data file is shipped or named here, never left out unseen.
NOT_SHIPPED = {
    "reference/README.md": "the reference ledger's design notes, for readers of the repository; no code reads it",
}
# what the sdist holds besides the package folders
SDIST_EXTRA = {"PKG-INFO", "README.md", "pyproject.toml", "setup.py", "setup.cfg"}
DIST_INFO = {"METADATA", "WHEEL", "RECORD", "entry_points.txt", "top_level.txt"}


def _project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def expected_package_files(files: list[str] | None = None) -> dict[str, str]:
    """wheel path -> source path, for every file of the mapped folders that is shipped."""
    dirs = package_dirs()
    out: dict[str, str] = {}
    for rel in files if files is not None else source_files():
        if rel in NOT_SHIPPED:
            continue
        for pkg, folder in dirs.items():
            if rel.startswith(folder + "/"):
                out[pkg.replace(".", "/") + "/" + rel[len(folder) + 1:]] = rel
    return out


def test_not_shipped_names_real_files() -> None:
    files = set(source_files())
    assert set(NOT_SHIPPED) <= files, f"NOT_SHIPPED names files that are gone: {sorted(set(NOT_SHIPPED) - files)}"


def test_the_wheel_holds_the_package_and_nothing_else(installed: Installed) -> None:
    expected = expected_package_files()
    # the tree really has modules in nested packages and data files the code reads: the
    # comparison below is not between two empty or trivial lists
    assert "ledgercheck/conformance/clauses/core.py" in expected
    assert {"ledgercheck/spec/contract/ledger.yaml", "ledgercheck/reports/schema/results.schema.json",
            "ledgercheck/reports/templates/report.css", "ledgercheck/fixtures/libraries/node/full-ledger.js"} <= set(expected)
    names = wheel_names(installed.wheel)
    project = _project()
    dist_info = f"{project['name']}-{project['version']}.dist-info/"
    package = {n for n in names if not n.startswith(dist_info)}
    missing = sorted(set(expected) - package)
    extra = sorted(package - set(expected))
    assert not missing, f"files of the source tree missing from the wheel: {missing}"
    assert not extra, f"files in the wheel that are not files of the mapped folders: {extra}"
    assert {n[len(dist_info):] for n in names if n.startswith(dist_info)} == DIST_INFO
    with zipfile.ZipFile(installed.wheel) as z:
        for name, rel in expected.items():  # shipped as they are in the tree
            assert z.read(name) == (installed.src / rel).read_bytes(), name
        entry_points = z.read(dist_info + "entry_points.txt").decode()
        assert z.read(dist_info + "top_level.txt").decode().split() == ["ledgercheck"]
    assert re.search(r"^\[pytest11\]\nledgercheck = ledgercheck\.conformance\.entry$", entry_points, re.M), entry_points
    assert re.search(r"^ledgercheck = ledgercheck\.cli:main$", entry_points, re.M), entry_points


def test_nothing_of_tests_or_bench_is_shipped(installed: Installed) -> None:
    with tarfile.open(installed.sdist) as t:
        sdist = [m.name for m in t.getmembers() if m.isfile()]
    for n in [*wheel_names(installed.wheel), *sdist]:
        parts = Path(n).parts
        assert not {"tests", "bench", "docs", "scripts", ".ci"} & set(parts[:2]), n


def test_the_sdist_holds_the_same_files_and_builds_the_same_wheel(installed: Installed) -> None:
    project = _project()
    top = f"{project['name']}-{project['version']}/"
    with tarfile.open(installed.sdist) as t:
        names = {m.name for m in t.getmembers() if m.isfile()}
    assert all(n.startswith(top) for n in names), sorted(n for n in names if not n.startswith(top))
    rel = {n[len(top):] for n in names}
    shipped = set(expected_package_files().values())
    egg_info = {n for n in rel if n.startswith(f"{project['name']}.egg-info/")}
    assert shipped <= rel, f"missing from the sdist: {sorted(shipped - rel)}"
    assert rel - shipped - egg_info == SDIST_EXTRA, sorted(rel - shipped - egg_info)
    # python -m build made the wheel from the unpacked sdist; the one built from the tree is the same
    assert wheel_names(installed.wheel) == wheel_names(installed.direct_wheel)
    with zipfile.ZipFile(installed.wheel) as a, zipfile.ZipFile(installed.direct_wheel) as b:
        for name in a.namelist():
            assert a.read(name) == b.read(name), f"{name} differs between the wheel from the sdist and the one from the tree"


def test_twine_check_passes(installed: Installed, tmp_path: Path) -> None:
    r = run([sys.executable, "-m", "twine", "check", "--strict", str(installed.sdist), str(installed.wheel)], cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("PASSED") == 2, r.stdout


def test_the_install_is_the_wheel_not_the_source_tree(installed: Installed, outside: Path) -> None:
    code = ("import importlib.metadata as m, ledgercheck, ledgercheck.conformance.clauses as c; "
            "print(ledgercheck.__file__); print(c.__file__); "
            "print(len([d for d in m.distributions() if d.metadata['Name'] == 'ledgercheck']))")
    r = run([str(installed.bin / "python"), "-c", code], cwd=outside, env=installed.env())
    assert r.returncode == 0, r.stderr
    init, clauses, dists = r.stdout.split()
    for f in (init, clauses):
        assert Path(f).is_relative_to(installed.site), f
    assert dists == "1"  # the wheel's, not also the editable install of the environment running this test


def test_certify_runs_from_the_wheel(installed: Installed, outside: Path) -> None:
    r = run([str(installed.bin / "ledgercheck"), "certify", "--adapter", "reference", "--profile", "core"],
            cwd=outside, env=installed.env())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert re.search(r"^CERTIFIED for profiles core\b", r.stdout, re.M), r.stdout[-3000:]
    html = re.search(r"^\s+html\s+(\S+)$", r.stdout, re.M)
    assert html and (outside / html.group(1)).is_file()
    assert 'class="wrap"' in (outside / html.group(1)).read_text()  # rendered from the shipped templates


def test_the_pytest_plugin_runs_from_the_wheel(installed: Installed, outside: Path) -> None:
    clauses = ["core.claim.order", "core.close_out.outcome", "core.create.initial"]
    # on two xdist workers: the suite must load in each worker too
    r = run([str(installed.bin / "python"), "-m", "pytest", "--ledger-adapter", "reference", "--ledger-only",
             "-k", " or ".join(clauses), "-p", "no:cacheprovider", "-n", "2", "-rA"],
            cwd=outside, env=installed.env())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    passed = re.findall(r"^PASSED (ledgercheck::\S+)", r.stdout, re.M)
    for clause in clauses:
        assert any(f"::{clause}" in p for p in passed), (clause, r.stdout[-3000:])
    assert not re.search(r"\b(failed|error)", r.stdout.splitlines()[-1]), r.stdout[-3000:]


# the long tier's (a whole certification, the default run's longest test, 39-172 s): the default run
# keeps test_certify_runs_from_the_wheel (the installed ledgercheck certifies the reference) and
# test_python_m_pytest_runs_in_the_checkout (a `python -m` process the harness starts in the clone)
@pytest.mark.thorough
def test_the_quickstart_runs_in_the_checkout(installed: Installed, tmp_path: Path) -> None:
    """The README's first command, after ``pip install .`` in a clone: ``ledgercheck certify`` run
    in the clone's root, where every ``python -m`` process the harness starts (the crash windows'
    fork server, the safety campaign's workers) finds the source folder ledgercheck/ first."""
    r = run([str(installed.bin / "ledgercheck"), "certify", "--adapter", "reference",
             "--out", str(tmp_path / "out"), "--history", str(tmp_path / "history.db")],
            cwd=installed.src, env=installed.env())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert re.search(r"^CERTIFIED for profiles .*\(the whole contract: full\)$", r.stdout, re.M), r.stdout[-3000:]


def test_python_m_pytest_runs_in_the_checkout(installed: Installed, tmp_path: Path) -> None:
    """``python -m pytest`` in the clone's root imports ledgercheck from the source folder (the
    working directory comes first on sys.path); the suite and the fork server its crash window
    starts must still find every subpackage."""
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run([str(installed.bin / "python"), "-m", "pytest", str(empty), "--rootdir", str(empty), "-p", "no:cacheprovider",
             "--ledger-adapter", "reference", "--ledger-only", "--ledger-artifacts", str(tmp_path / "artifacts"),
             "-k", "chaos and after_claim", "-rA"], cwd=installed.src, env=installed.env())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert re.search(r"^PASSED \S*ledgercheck::recovery::chaos\[after_claim\]", r.stdout, re.M), r.stdout[-3000:]
