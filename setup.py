"""Package discovery for ledgercheck's layout (everything else is in pyproject.toml).

The source folders spec/, services/, transport/, reference/, conformance/, chaos/, fixtures/ and
reports/ sit beside ledgercheck/ at the top of the tree and install as ledgercheck.spec,
ledgercheck.transport, ... (``[tool.setuptools.package-dir]`` in pyproject.toml maps each).
``[tool.setuptools.packages.find]`` cannot list them: it names what it finds relative to its
``where`` folder (``spec.contract``, not ``ledgercheck.spec.contract``) and has one table for the
whole project.  So this file runs setuptools' own finder over each mapped folder and puts the
folder's package name in front of every subpackage it finds.  Nothing is listed by hand: a new
subpackage (a folder with an ``__init__.py``) is found on the next build.  Data files are
``[tool.setuptools.package-data]``.  tests/install/test_wheel.py builds the sdist and
the wheel and checks that every ``.py`` file and every data file of these folders is in them.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent


def mapped_packages() -> list[str]:
    """Every package under the folders pyproject.toml's package-dir maps, with its full name."""
    with open(HERE / "pyproject.toml", "rb") as f:
        package_dir: dict[str, str] = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    found: set[str] = set()
    for name, folder in package_dir.items():
        found.add(name)
        found.update(f"{name}.{sub}" for sub in find_packages(where=str(HERE / folder)))
    return sorted(found)


setup(packages=mapped_packages())
