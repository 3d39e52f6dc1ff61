"""scripts/install-test-deps.sh: what the README's test command runs first.  Run here with a PATH
that holds none of the programs it looks for, in its --dry-run mode (nothing is installed)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install-test-deps.sh"


def _bare_path(tmp_path: Path, *tools: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for t in ("id", "sed", *tools):
        (bin_dir / t).symlink_to(f"/usr/bin/{t}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERCHECK_")}
    return {**env, "PATH": str(bin_dir)}


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=600)


def test_dry_run_names_what_is_missing_and_the_command(tmp_path: Path) -> None:
    r = _run(_bare_path(tmp_path, "apt-get"), "--dry-run")
    assert r.returncode == 0, r.stderr
    missing = r.stdout.splitlines()[0].removeprefix("install-test-deps: missing: ").split()
    # PostgreSQL is also found in /usr/lib/postgresql/*/bin, which a PATH does not hide
    assert {"chromium", "nodejs", "npm", "redis-server", "iproute2", "faketime", "libfaketime", "ruby-sidekiq"} \
        <= set(missing) <= {"postgresql", "chromium", "nodejs", "npm", "redis-server", "iproute2", "faketime",
                             "libfaketime", "ruby-sidekiq"}
    assert r.stdout.splitlines()[1] == ("install-test-deps: would run: apt-get update && apt-get install -y "
                                        + " ".join(missing))


def test_no_apt_get_is_one_line_and_a_failure(tmp_path: Path) -> None:
    r = _run(_bare_path(tmp_path))
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0 and "no apt-get on this machine" in r.stderr


def test_nothing_missing_installs_nothing(tmp_path: Path) -> None:
    env = _bare_path(tmp_path)
    # (a ruby that exits 0 stands for one whose `require "sidekiq"` works)
    for tool in ("node", "npm", "chromium", "redis-server", "ip", "initdb", "pg_ctl", "postgres", "faketime", "ruby"):
        (tmp_path / "bin" / tool).write_text("#!/bin/sh\n")
        (tmp_path / "bin" / tool).chmod(0o755)
    r = _run(env)
    assert (r.returncode, r.stdout.strip()) == (0, "install-test-deps: nothing to install (postgresql, chromium, "
                                                   "nodejs, npm, redis-server, iproute2, faketime, ruby-sidekiq present)")


def test_unknown_option(tmp_path: Path) -> None:
    r = _run(_bare_path(tmp_path), "--yes")
    assert r.returncode == 2 and "unknown option --yes" in r.stderr
