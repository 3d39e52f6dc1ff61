"""Fixtures of the install tests (install_support.py builds and installs; importable because this
file puts this directory on sys.path)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from install_support import ROOT, Installed, shared_install  # noqa: E402


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    return shared_install(tmp_path_factory)


@pytest.fixture
def outside(tmp_path: Path, installed: Installed) -> Path:
    """A working directory that is not inside the source tree (nor the built copy)."""
    work = tmp_path / "work"
    work.mkdir()
    assert ROOT not in work.resolve().parents and installed.src not in work.resolve().parents
    return work
