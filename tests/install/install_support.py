"""ledgercheck built and installed the way its users install it: once per test run (the
``installed`` fixture of conftest.py).

``built_and_installed`` copies the source tree (the files git tracks plus the untracked ones it
does not ignore: what a clone with the developer's new files holds), builds the sdist and the
wheel from the copy with ``python -m build`` (the wheel from the sdist, as an index would build
it), builds a second wheel straight from the tree, and installs the first wheel, without ``-e``
and without its dependencies, into a fresh virtual environment.  The copy keeps the build from
writing into the source tree (``ledgercheck.egg-info``, ``build/``) while the editable install the
rest of the run uses reads it.

The fresh environment needs ledgercheck's dependencies and no network: its ``site-packages``
holds a ``.pth`` line naming a folder of links to every distribution of the environment running
these tests except ledgercheck itself (its files, its metadata, its editable-install hook), so
``import ledgercheck`` and its entry points can only come from the wheel.

Built once per run and shared by the xdist workers (a lock in the run's scratch directory,
tests/conftest.py), left there, and removed with it at the end.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED_DIR = "LEDGERCHECK_TEST_SHARED_DIR"  # set by tests/conftest.py for the whole run
BUILD_TIMEOUT = 900  # a hang guard only: a build normally takes seconds


@dataclass(frozen=True)
class Installed:
    src: Path  # the copy of the source tree that was built
    sdist: Path
    wheel: Path  # built from the sdist
    direct_wheel: Path  # built from the tree
    venv: Path  # the fresh environment the wheel is installed in
    site: Path  # its site-packages
    build_log: str

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    def env(self, **extra: str) -> dict[str, str]:
        """An environment for running the installed commands: the fresh venv first on PATH, and
        nothing that would point Python at the source tree."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        env["PATH"] = os.pathsep.join([str(self.bin), env.get("PATH", "")])
        env["VIRTUAL_ENV"] = str(self.venv)
        env.update(extra)
        return env


def run(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = BUILD_TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def package_dirs(root: Path = ROOT) -> dict[str, str]:
    """pyproject.toml's package-dir: package name -> source folder."""
    with open(root / "pyproject.toml", "rb") as f:
        return dict(tomllib.load(f)["tool"]["setuptools"]["package-dir"])


def source_files(root: Path = ROOT) -> list[str]:
    """The tree's files as a clone with the developer's new files would hold them (relative
    paths): what git tracks plus the untracked files it does not ignore."""
    r = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                       cwd=root, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.fail(f"git ls-files failed in {root}: {r.stderr.strip()}")
    return sorted(p for p in r.stdout.split("\0") if p and (root / p).is_file())


def wheel_names(path: Path) -> set[str]:
    with zipfile.ZipFile(path) as z:
        return {n for n in z.namelist() if not n.endswith("/")}


def _own_entries(name: str) -> bool:
    """An entry of site-packages that belongs to ledgercheck's own (editable or not) install."""
    low = name.lower()
    return low.startswith("ledgercheck") or (low.startswith("__editable__") and "ledgercheck" in low)


def _build(root: Path) -> Installed:
    src, dist, direct, venv, deps = (root / n for n in ("src", "dist", "direct", "venv", "deps"))
    for d in (src, dist, direct, deps):
        d.mkdir(parents=True)
    for rel in source_files():
        target = src / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
    log: list[str] = []

    def step(cmd: list[str], cwd: Path = src) -> subprocess.CompletedProcess[str]:
        r = run(cmd, cwd=cwd)
        log.append(f"$ {' '.join(cmd)}\n{r.stdout}{r.stderr}")
        if r.returncode != 0:
            pytest.fail(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")
        return r

    # the sdist, then the wheel built from the unpacked sdist (python -m build's default)
    step([sys.executable, "-m", "build", "--outdir", str(dist), str(src)])
    # and a wheel built straight from the tree, to compare with the one the sdist gave
    step([sys.executable, "-m", "build", "--wheel", "--outdir", str(direct), str(src)])
    (sdist,) = dist.glob("*.tar.gz")
    (wheel,) = dist.glob("*.whl")
    (direct_wheel,) = direct.glob("*.whl")

    # the dependencies, without ledgercheck: links to this environment's installed distributions
    here = Path(sysconfig.get_paths()["purelib"])
    for entry in sorted(here.iterdir()):
        if not _own_entries(entry.name) and entry.name != "__pycache__" and not entry.name.endswith(".pth"):
            (deps / entry.name).symlink_to(entry)
    step([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=root)
    site = Path(run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                    cwd=root).stdout.strip())
    (site / "ledgercheck-test-deps.pth").write_text(f"{deps}\n")
    step([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps", "--no-index",
          "--disable-pip-version-check", "-q", str(wheel)], cwd=root)
    return Installed(src=src, sdist=sdist, wheel=wheel, direct_wheel=direct_wheel, venv=venv, site=site,
                     build_log="\n".join(log))


def shared_install(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = os.environ.get(SHARED_DIR)
    if not root or not os.path.isdir(root):
        return _build(tmp_path_factory.mktemp("installed"))
    base = Path(root) / "installed-wheel"
    done = Path(root) / "installed-wheel.json"
    with open(Path(root) / "installed-wheel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            d = json.loads(done.read_text())
            return Installed(**{k: (Path(v) if k != "build_log" else v) for k, v in d.items()})
        if base.exists():  # an earlier attempt failed half way: start again
            shutil.rmtree(base)
        inst = _build(base)
        done.write_text(json.dumps({k: str(v) for k, v in inst.__dict__.items()}))
        return inst
